// Command namespace-provisioner is a controller, the Go twin of plugins/namespace-provisioner:
// for every Namespace labelled `team`, it keeps a ResourceQuota, a LimitRange, a default-deny
// NetworkPolicy and a RoleBinding of the team's group to `edit` in it. The host gives each
// child the Namespace as its controller and the Namespace's apply-set label, and deletes the
// children a reconcile no longer applies: when the label goes, so do they.
//
// Configuration (the defaults): {"label": "team", "pods": "20", "finalizer": false}. With
// `finalizer` the host keeps `kubewasm.dev/<plugin>` on every Namespace, and `Finalize` logs
// `finalizing`, then `released`, before it lets one go. Metric: `reconciles_total{outcome}` (`applied`,
// `unlabelled`, `gone`).
package main

import (
	"encoding/json"

	kw "example.invalid/kubewasm/sdk"
	kwconfig "example.invalid/kubewasm/sdk/config"
)

type config struct {
	Label     string `json:"label"`
	Pods      string `json:"pods"`
	Finalizer bool   `json:"finalizer"`
}

type provisioner struct {
	kw.Plugin
	config *config
}

var (
	quota         = kw.GVK("", "v1", "ResourceQuota")
	limitRange    = kw.GVK("", "v1", "LimitRange")
	networkPolicy = kw.GVK("networking.k8s.io", "v1", "NetworkPolicy")
	roleBinding   = kw.GVK("rbac.authorization.k8s.io", "v1", "RoleBinding")
)

type child struct {
	gvk    kw.Gvk
	name   string
	fields map[string]any
}

// children are a team's namespace's children: type, name and the fields this plugin owns.
func children(team, pods string) []child {
	return []child{
		{quota, "team-quota", map[string]any{"spec": map[string]any{"hard": map[string]any{"pods": pods}}}},
		{limitRange, "team-limits", map[string]any{"spec": map[string]any{"limits": []any{map[string]any{
			"type": "Container", "default": map[string]any{"cpu": "500m", "memory": "256Mi"},
		}}}}},
		{networkPolicy, "default-deny", map[string]any{"spec": map[string]any{
			"podSelector": map[string]any{}, "policyTypes": []any{"Ingress"},
		}}},
		{roleBinding, "team-edit", map[string]any{
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
			"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": team}},
		}},
	}
}

func outcome(what string) {
	// A refused update (past the series bound) costs the plugin a metric, not its work.
	if err := kw.Metrics.Add("reconciles_total", []string{what}, 1); err != nil {
		kw.Log.Warn("metric refused", "why", err.Error())
	}
}

func (p provisioner) Init(text string) error {
	c := config{Label: "team", Pods: "20"}
	if err := kwconfig.Parse(text, &c); err != nil {
		return err
	}
	*p.config = c
	return nil
}

func (p provisioner) Describe() kw.Manifest {
	c := kw.NewController(kw.Namespace).Owning(quota).Owning(limitRange).
		Owning(networkPolicy).Owning(roleBinding)
	if p.config.Finalizer {
		c = c.WithFinalizer()
	}
	return kw.NewManifest().WithController(c).
		Metric(kw.Counter("reconciles_total", "Reconciles of a Namespace, by what they found", "outcome"))
}

func (p provisioner) Handle(event kw.Event) error { return nil }

func (p provisioner) Reconcile(key kw.ObjectKey) error {
	namespace, err := kw.Cache.Get(kw.Namespace, nil, key.Name)
	if err != nil {
		return err
	}
	if namespace == nil {
		outcome("gone") // Its children went with it.
		return nil
	}
	team := namespace.Label(p.config.Label)
	if team == nil {
		// No children applied: the host deletes those it made before.
		outcome("unlabelled")
		kw.Log.Info("not a team namespace", "namespace", key.Name)
		return nil
	}
	for _, c := range children(*team, p.config.Pods) {
		// The fields this plugin owns; apiVersion, kind, name and namespace are the host's.
		c.fields["metadata"] = map[string]any{"name": c.name}
		body, err := json.Marshal(c.fields)
		if err != nil {
			return err
		}
		target := kw.Target{Gvk: c.gvk, Namespace: kw.Ptr(key.Name), Name: c.name}
		if err := kw.Cluster.Apply(target, string(body)); err != nil {
			return err
		}
	}
	outcome("applied")
	kw.Log.Info("team namespace provisioned", "namespace", key.Name, "team", *team)
	return nil
}

func (p provisioner) Finalize(key kw.ObjectKey) error {
	kw.Log.Info("finalizing", "namespace", key.Name)
	kw.Log.Info("released", "namespace", key.Name)
	return nil
}

func init() { kw.ExportHandler(provisioner{config: &config{}}) }

func main() {}
