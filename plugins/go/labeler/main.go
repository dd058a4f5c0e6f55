// Command labeler adds a label to every pod that lacks it: the Go twin of plugins/labeler.
//
// On added or updated pods without the label, a server-side apply of only that label, with
// the field manager `kubewasm/<plugin>`. Configuration (JSON):
// {"key": "team", "value": "unassigned", "namespaces": []}. The write is staged during
// `Handle` and sent when it returns, so a retried event labels once; a write the operator did
// not grant returns a WriteError, which the SDK gives up (as the Rust SDK does).
package main

import (
	"encoding/json"

	kw "example.invalid/kubewasm/sdk"
	kwconfig "example.invalid/kubewasm/sdk/config"
)

type config struct {
	Key        string   `json:"key"`
	Value      string   `json:"value"`
	Namespaces []string `json:"namespaces"`
}

type labeler struct {
	kw.Plugin
	config *config
}

func (l labeler) Init(text string) error {
	c := config{Key: "team", Value: "unassigned"}
	if err := kwconfig.Parse(text, &c); err != nil {
		return err
	}
	*l.config = c
	return nil
}

func (l labeler) Describe() kw.Manifest {
	return kw.NewManifest(kw.Subscribe(kw.Pod).InNamespaces(l.config.Namespaces...))
}

func (l labeler) Handle(event kw.Event) error {
	if event.Tag != kw.EventAdded && event.Tag != kw.EventUpdated {
		return nil
	}
	pod := event.Object()
	key, value := l.config.Key, l.config.Value
	if pod.Label(key) != nil {
		return nil
	}
	ns := pod.Namespace()
	target := kw.Target{Gvk: pod.Gvk(), Namespace: ns, Name: pod.Name()}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	if err := kw.Cluster.Apply(target, string(body)); err != nil {
		return err
	}
	kw.Log.Info("labeling pod", "pod", pod.Key(), "label", key+"="+value)
	return nil
}

func init() { kw.ExportHandler(labeler{config: &config{}}) }

func main() {}
