//go:build wasip1

// Command {{name}} is a kubewasm controller. For every Namespace labelled `team`, it keeps a
// ResourceQuota `team-quota` in it. The host makes the Namespace its controller and deletes
// it when a reconcile no longer applies it (the label went).
package main

import (
	kw "example.invalid/kubewasm/sdk"
)

var quota = kw.GVK("", "v1", "ResourceQuota")

// plugin embeds kw.Plugin: it gives the calls a controller leaves out their defaults.
type plugin struct{ kw.Plugin }

func (plugin) Describe() kw.Manifest {
	// Reconcile is called per Namespace, once per burst of events on it or its quotas.
	// More: WithFinalizer and Finalize, WatchingByLabel (docs/guides/go.md).
	return kw.NewManifest().WithController(kw.NewController(kw.Namespace).Owning(quota))
}

// Handle is not called: a controller is called by key, in Reconcile.
func (plugin) Handle(event kw.Event) error { return nil }

func (plugin) Reconcile(key kw.ObjectKey) error {
	// The object is read from the cache: gone is an answer, not an error.
	namespace, err := kw.Cache.Get(kw.Namespace, nil, key.Name)
	if err != nil {
		return err
	}
	if namespace == nil || namespace.Label("team") == nil {
		// Nothing applied: the host deletes the quota an earlier reconcile applied.
		return nil
	}
	// Server-side apply of the fields this plugin owns; a write that changes nothing is not
	// sent. A status: the SDK's status package writes it only when it changed.
	target := kw.Target{Gvk: quota, Namespace: kw.Ptr(key.Name), Name: "team-quota"}
	return kw.Cluster.Apply(target, `{"metadata": {"name": "team-quota"}, "spec": {"hard": {"pods": "20"}}}`)
}

func init() { kw.ExportHandler(plugin{}) }

func main() {}
