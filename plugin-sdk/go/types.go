package kubewasm

// GVK is a resource type from its group (empty for the core group), version and kind.
func GVK(group, version, kind string) Gvk { return Gvk{Group: group, Version: version, Kind: kind} }

// Common resource types.
var (
	// Pod is `v1` Pod.
	Pod = GVK("", "v1", "Pod")
	// Service is `v1` Service.
	Service = GVK("", "v1", "Service")
	// ConfigMap is `v1` ConfigMap.
	ConfigMap = GVK("", "v1", "ConfigMap")
	// Namespace is `v1` Namespace.
	Namespace = GVK("", "v1", "Namespace")
	// Node is `v1` Node.
	Node = GVK("", "v1", "Node")
	// CoreEvent is `v1` Event.
	CoreEvent = GVK("", "v1", "Event")
	// Deployment is `apps/v1` Deployment.
	Deployment = GVK("apps", "v1", "Deployment")
	// ReplicaSet is `apps/v1` ReplicaSet.
	ReplicaSet = GVK("apps", "v1", "ReplicaSet")
	// StatefulSet is `apps/v1` StatefulSet.
	StatefulSet = GVK("apps", "v1", "StatefulSet")
	// DaemonSet is `apps/v1` DaemonSet.
	DaemonSet = GVK("apps", "v1", "DaemonSet")
	// Job is `batch/v1` Job.
	Job = GVK("batch", "v1", "Job")
)

// APIVersion is the apiVersion of a group and version: `v1` for the core group, else
// `group/version`.
func APIVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}

// APIVersion is the type's apiVersion string.
func (g Gvk) APIVersion() string { return APIVersion(g.Group, g.Version) }

// Key is the cache's key of an object: `namespace/name`, or `name` when cluster-scoped
// (namespace empty).
func Key(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// The built-in indexes every resource type has, for Cache.ByIndex and Cache.IndexKeys.
const (
	// IndexNamespace indexes objects by namespace.
	IndexNamespace = "namespace"
	// IndexOwnerUID indexes objects by each owner reference's uid.
	IndexOwnerUID = "owner-uid"
	// IndexLabelKey indexes objects by each label key.
	IndexLabelKey = "label-key"
	// IndexLabel indexes objects by each `key=value` label pair.
	IndexLabel = "label"
)

// BuiltinIndexes are the names of the built-in indexes.
var BuiltinIndexes = []string{IndexNamespace, IndexOwnerUID, IndexLabelKey, IndexLabel}
