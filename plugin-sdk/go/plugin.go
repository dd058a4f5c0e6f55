package kubewasm

import (
	"errors"
	"strconv"
)

// Plugin gives a plugin the defaults of the calls most plugins do not need: `Init` accepts
// any configuration, `Synced`, `Tick` and `Finalize` do nothing, `Admit` allows and
// `Reconcile` fails. Embed it, then write
// `Describe` and `Handle`:
//
//	type podPhase struct{ kubewasm.Plugin }
//	func init() { kubewasm.ExportHandler(podPhase{}) }
type Plugin struct{}

// Init accepts any configuration.
func (Plugin) Init(config string) error { return nil }

// Synced does nothing.
func (Plugin) Synced() error { return nil }

// Tick does nothing.
func (Plugin) Tick(schedule string) error { return nil }

// Admit allows every request.
func (Plugin) Admit(request AdmissionRequest) AdmissionResponse { return Allow() }

// Reconcile fails: a controller writes its own.
func (Plugin) Reconcile(key ObjectKey) error {
	return Fatal("reconcile of " + key.Key() + " is not implemented by this plugin")
}

// Finalize has nothing to release.
func (Plugin) Finalize(key ObjectKey) error { return nil }

// Error is the message, for logs.
func (e HandleError) Error() string { return e.Message }

// Fail is a handle error the host retries with backoff.
func Fail(message string) error { return HandleError{Message: message, Retry: true} }

// Fatal is a handle error the host gives up on at once.
func Fatal(message string) error { return HandleError{Message: message, Retry: false} }

// ToHandleError is how an error leaves `Handle`, `Synced` or `Tick`, as the other SDKs decide:
// a HandleError as it is; a failed query retried unless it was wrong or forbidden (only
// too-large and too-many-handles are retried); a write that could not be staged retried
// only when another replica may lead by then; a refused state change given up; anything
// else retried.
func ToHandleError(err error) HandleError {
	var he HandleError
	var qe QueryError
	var we WriteError
	var se StateError
	switch {
	case errors.As(err, &he):
		return he
	case errors.As(err, &qe):
		return HandleError{Message: qe.Error(), Retry: qe.Tag == QueryErrorTooLarge || qe.Tag == QueryErrorTooManyHandles}
	case errors.As(err, &we):
		return HandleError{Message: we.Error(), Retry: we.Tag == WriteErrorNotLeader}
	case errors.As(err, &se):
		return HandleError{Message: se.Error(), Retry: false}
	}
	return HandleError{Message: err.Error(), Retry: true}
}

func handleErrorFrom(err error) HandleError { return ToHandleError(err) }

// Object is the object the event is about: the new state for an update.
func (e Event) Object() Object {
	switch e.Tag {
	case EventAdded:
		return e.Added.Object
	case EventUpdated:
		return e.Updated.New
	case EventDeleted:
		return e.Deleted.Object
	case EventSync:
		return e.Sync
	default:
		return e.Requeue
	}
}

// Old is the state this plugin saw before an update; nil for other events.
func (e Event) Old() *Object {
	if e.Tag != EventUpdated {
		return nil
	}
	return &e.Updated.Old
}

// Text is the string at an RFC 6901 JSON pointer (numbers and booleans as their JSON text),
// read in the host; false when nothing is there or it is null, an array or an object.
func (r Object) Text(pointer string) (string, bool, error) {
	v, err := r.Field(pointer)
	if err != nil || v == nil {
		return "", false, err
	}
	switch v.Tag {
	case ValueText:
		return v.Text, true, nil
	case ValueInteger:
		return strconv.FormatInt(v.Integer, 10), true, nil
	case ValueNumber:
		return strconv.FormatFloat(v.Number, 'g', -1, 64), true, nil
	case ValueBoolean:
		return strconv.FormatBool(v.Boolean), true, nil
	}
	return "", false, nil
}

// Ptr is a pointer to `v`, for the optional fields of the contract's records.
func Ptr[T any](v T) *T { return &v }
