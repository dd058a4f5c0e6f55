//go:build wasip1

// Command {{name}} is a kubewasm plugin. It logs each pod labelled app=web with its phase.
package main

import (
	kw "example.invalid/kubewasm/sdk"
)

// plugin embeds kw.Plugin: it gives Init, Synced, Tick and Admit defaults (accept any
// configuration, nothing, nothing, allow).
type plugin struct{ kw.Plugin }

func (plugin) Describe() kw.Manifest {
	// Only pods labelled app=web; the host filters in memory. More: Query, Index, Schedule,
	// WithState, WithAdmission (docs/guides/go.md).
	return kw.NewManifest(kw.Subscribe(kw.Pod).Selector("app=web"))
}

// Handle gets every event. An error goes back to the host: a kw.Fail is retried with
// backoff, a kw.Fatal given up; a failed query or write as the other SDKs decide.
func (plugin) Handle(event kw.Event) error {
	if event.Tag == kw.EventDeleted {
		return nil
	}
	// The pod is a handle to the host's cached object: read what you need from it.
	pod := event.Object()
	phase, ok, err := pod.Text("/status/phase")
	if err != nil {
		return err
	}
	if !ok {
		phase = "-"
	}
	kw.Log.Info("web pod", "pod", pod.Key(), "phase", phase)
	return nil
}

func init() { kw.ExportHandler(plugin{}) }

func main() {}
