// Command pod-phase logs pod phase transitions (Pending, Running, Succeeded, Failed) from old
// and new states: the Go twin of plugins/pod-phase. Built by plugins/artifacts, or by hand:
// `kubewasm build plugins/go/pod-phase -o pod-phase.wasm`.
package main

import (
	"strconv"

	kw "example.invalid/kubewasm/sdk"
)

type podPhase struct{ kw.Plugin }

func (podPhase) Describe() kw.Manifest {
	return kw.NewManifest(kw.Subscribe(kw.Pod))
}

// phase is the pod's phase, read in the host: the pod is never copied into the plugin.
func phase(pod kw.Object) (string, error) {
	text, ok, err := pod.Text("/status/phase")
	if err != nil {
		return "", err
	}
	if !ok {
		return "Unknown", nil
	}
	return text, nil
}

func (podPhase) Handle(event kw.Event) error {
	switch event.Tag {
	case kw.EventAdded:
		pod := event.Added.Object
		p, err := phase(pod)
		if err != nil {
			return err
		}
		kw.Log.Info("pod seen", "pod", pod.Key(), "phase", p, "initial", strconv.FormatBool(event.Added.Initial))
	case kw.EventUpdated:
		from, err := phase(event.Updated.Old)
		if err != nil {
			return err
		}
		to, err := phase(event.Updated.New)
		if err != nil {
			return err
		}
		if from != to {
			kw.Log.Info("pod phase changed", "pod", event.Updated.New.Key(), "from", from, "to", to)
		}
	case kw.EventDeleted:
		pod := event.Deleted.Object
		p, err := phase(pod)
		if err != nil {
			return err
		}
		kw.Log.Info("pod deleted", "pod", pod.Key(), "last-phase", p, "stale", strconv.FormatBool(event.Deleted.Stale))
	}
	return nil
}

func init() { kw.ExportHandler(podPhase{}) }

func main() {}
