// Command owner-chain logs each pod's owner chain: for every added or updated Pod it follows
// the controller owner references through the host's cache (Pod -> ReplicaSet -> Deployment)
// and counts the ReplicaSet's pods through the built-in `owner-uid` index (its keys: a count
// needs no objects), then logs `owner chain pod=... replicaset=... deployment=...
// siblings=N`. The Go twin of plugins/owner-chain.
package main

import (
	"strconv"

	kw "example.invalid/kubewasm/sdk"
)

type ownerChain struct{ kw.Plugin }

func (ownerChain) Describe() kw.Manifest {
	return kw.NewManifest(kw.Subscribe(kw.Pod)).Query(kw.ReplicaSet, kw.Deployment)
}

func (ownerChain) Handle(event kw.Event) error {
	if event.Tag != kw.EventAdded && event.Tag != kw.EventUpdated {
		return nil
	}
	pod := event.Object()
	key := pod.Key()
	rs, err := pod.Owner(kw.ReplicaSet)
	if err != nil {
		return err
	}
	if rs == nil {
		kw.Log.Info("owner chain", "pod", key, "replicaset", "-", "deployment", "-", "siblings", "0")
		return nil
	}
	// Handles from queries belong to the plugin: give them back.
	defer rs.Drop()
	deployment, err := rs.Owner(kw.Deployment)
	if err != nil {
		return err
	}
	name := "-"
	if deployment != nil {
		name = deployment.Name()
		deployment.Drop()
	}
	siblings, err := kw.Cache.IndexKeys(kw.Pod, kw.IndexOwnerUID, rs.Uid())
	if err != nil {
		return err
	}
	kw.Log.Info("owner chain", "pod", key, "replicaset", rs.Name(), "deployment", name,
		"siblings", strconv.Itoa(len(siblings)))
	return nil
}

func init() { kw.ExportHandler(ownerChain{}) }

func main() {}
