// Package status says how an object is on its status: conditions and fields, written only
// when they change.
//
// A reconcile states the whole status it owns every time (`status.New().Condition(...)
// .Field(...)`); Status.Apply compares it with the object as cached and stages a server-side
// apply of the `status` subresource (the plugin's field manager) only when a value differs, so
// a reconcile that finds everything as it was writes nothing and wakes nothing: no status
// loop. A condition keeps its `lastTransitionTime` while its `status` stays the same. Apply
// names every field the plugin owns, so one left out of a later apply is removed: state all of
// them each time. The rules, shared by the four SDKs, are checked against
// plugin-sdk/status-cases.json. A package of its own, as config is: it links encoding/json.
package status

import (
	"encoding/json"
	"reflect"
)

// Condition is one condition as Kubernetes' API conventions write it (`metav1.Condition`).
type Condition struct {
	// Type says what it is about: `Ready`, `Available`, `Provisioned`.
	Type string `json:"type"`
	// Status is `True`, `False` or `Unknown`.
	Status string `json:"status"`
	// Reason says why, in one CamelCase word.
	Reason string `json:"reason"`
	// Message says why, for people.
	Message string `json:"message"`
	// Generation is the `metadata.generation` it was worked out from; nil for types whose
	// conditions have no such field, such as a Namespace's.
	Generation *int64 `json:"observedGeneration,omitempty"`
}

// NewCondition is a condition of type `kind` that holds (`True`) or does not (`False`).
func NewCondition(kind string, holds bool, reason, message string) Condition {
	text := "False"
	if holds {
		text = "True"
	}
	return Condition{Type: kind, Status: text, Reason: reason, Message: message}
}

// Unknown is a condition of type `kind` whose state is not known (`Unknown`).
func Unknown(kind, reason, message string) Condition {
	return Condition{Type: kind, Status: "Unknown", Reason: reason, Message: message}
}

// ObservedGeneration is the same condition, worked out from generation `generation`.
func (c Condition) ObservedGeneration(generation int64) Condition {
	c.Generation = &generation
	return c
}

// sameAs says whether `current` (a condition as the object has it) already says the same.
func (c Condition) sameAs(current map[string]any) bool {
	text := func(name string) string { s, _ := current[name].(string); return s }
	if current["status"] != c.Status || text("reason") != c.Reason || text("message") != c.Message {
		return false
	}
	if c.Generation == nil {
		return true
	}
	g, ok := current["observedGeneration"].(float64)
	return ok && g == float64(*c.Generation)
}

// Status is the status a plugin owns on one object: its conditions and other fields.
type Status struct {
	conditions []Condition
	fields     map[string]any
}

// New is a status with no condition and no field yet.
func New() *Status { return &Status{fields: map[string]any{}} }

// Condition sets a condition (replacing one of the same type set before).
func (s *Status) Condition(c Condition) *Status {
	kept := s.conditions[:0]
	for _, old := range s.conditions {
		if old.Type != c.Type {
			kept = append(kept, old)
		}
	}
	s.conditions = append(kept, c)
	return s
}

// Field sets the top-level status field `name` (`readyReplicas`, `url`) to `value`, which
// must encode as JSON (a value that does not is left out).
func (s *Status) Field(name string, value any) *Status {
	if text, err := json.Marshal(value); err == nil {
		var plain any
		if json.Unmarshal(text, &plain) == nil {
			s.fields[name] = plain
		}
	}
	return s
}

// Changes is the status to apply over `current` (the object's `status` as decoded JSON, nil
// when it has none) at `now` (RFC 3339), or nil when `current` already says all of it.
func (s *Status) Changes(current map[string]any, now string) map[string]any {
	had, _ := current["conditions"].([]any)
	find := func(kind string) map[string]any {
		for _, c := range had {
			if m, ok := c.(map[string]any); ok && m["type"] == kind {
				return m
			}
		}
		return nil
	}
	same := true
	for name, value := range s.fields {
		if old, ok := current[name]; !ok || !reflect.DeepEqual(old, value) {
			same = false
		}
	}
	for _, c := range s.conditions {
		if old := find(c.Type); old == nil || !c.sameAs(old) {
			same = false
		}
	}
	if same {
		return nil
	}
	out := map[string]any{}
	for name, value := range s.fields {
		out[name] = value
	}
	if len(s.conditions) > 0 {
		written := make([]any, 0, len(s.conditions))
		for _, c := range s.conditions {
			since := now
			if old := find(c.Type); old != nil && old["status"] == c.Status {
				if t, ok := old["lastTransitionTime"].(string); ok && t != "" {
					since = t
				}
			}
			m := map[string]any{"type": c.Type, "status": c.Status, "reason": c.Reason,
				"message": c.Message, "lastTransitionTime": since}
			if c.Generation != nil {
				m["observedGeneration"] = float64(*c.Generation)
			}
			written = append(written, m)
		}
		out["conditions"] = written
	}
	return out
}
