package kubewasm

// NewManifest is a manifest with these subscriptions and nothing else.
func NewManifest(subscriptions ...Subscription) Manifest {
	return Manifest{Subscriptions: subscriptions}
}

// Query adds resource types the plugin queries without their events.
func (m Manifest) Query(types ...Gvk) Manifest {
	m.Queries = append(m.Queries, types...)
	return m
}

// Index adds a field index: its name and the JSON pointer of the indexed values.
func (m Manifest) Index(gvk Gvk, name, jsonPointer string) Manifest {
	m.Indexes = append(m.Indexes, Index{Gvk: gvk, Name: name, JsonPointer: jsonPointer})
	return m
}

// ResyncEvery asks for a `sync` event for every subscribed object every `seconds`.
func (m Manifest) ResyncEvery(seconds uint32) Manifest {
	m.ResyncSeconds = seconds
	return m
}

// Schedule adds a named cron schedule (`*/5 * * * *`, `@every 30s`) in UTC.
func (m Manifest) Schedule(name, cron string) Manifest {
	m.Schedules = append(m.Schedules, Schedule{Name: name, Cron: cron})
	return m
}

// WithState declares that the plugin uses `State`.
func (m Manifest) WithState() Manifest {
	m.State = true
	return m
}

// WithAdmission declares the admission webhook the plugin serves.
func (m Manifest) WithAdmission(a Admission) Manifest {
	m.Admission = &a
	return m
}

// Subscribe is a subscription to every object of a type.
func Subscribe(gvk Gvk) Subscription { return Subscription{Gvk: gvk} }

// InNamespaces limits the subscription to these namespaces.
func (s Subscription) InNamespaces(namespaces ...string) Subscription {
	s.Namespaces = append(s.Namespaces, namespaces...)
	return s
}

// Selector limits the subscription to objects matching a label selector (`app=web,!canary`).
func (s Subscription) Selector(selector string) Subscription {
	s.LabelSelector = &selector
	return s
}

// OnChanges delivers an update only when the value at one of these JSON pointers changed.
func (s Subscription) OnChanges(pointers ...string) Subscription {
	s.Changes = append(s.Changes, pointers...)
	return s
}

// OnGenerationChange delivers an update only when `/metadata/generation` changed (the spec).
func (s Subscription) OnGenerationChange() Subscription {
	return s.OnChanges("/metadata/generation")
}

// ReadFields declares the JSON pointers the plugin reads (`/status/phase`, `/spec/nodeName`)
// besides metadata, which is always there: the host keeps only what its plugins declared, and
// a read of anything else answers QueryErrorUndeclared.
func (s Subscription) ReadFields(pointers ...string) Subscription {
	s.Fields = append(s.Fields, pointers...)
	return s
}

// ReadMetadataOnly declares that the plugin reads metadata only (names, labels, annotations,
// owners): where every plugin of the type says so, the API server sends only metadata.
func (s Subscription) ReadMetadataOnly() Subscription {
	s.MetadataOnly = true
	return s
}

// Validating is a validating webhook over these rules, failing closed with the API server's
// default timeout.
func Validating(rules ...AdmissionRule) Admission {
	return Admission{Rules: rules, FailurePolicy: FailurePolicyFail}
}

// Mutating is a mutating webhook over these rules, failing closed.
func Mutating(rules ...AdmissionRule) Admission {
	a := Validating(rules...)
	a.Mutating = true
	return a
}

// IgnoreFailures lets requests through when the plugin cannot answer.
func (a Admission) IgnoreFailures() Admission {
	a.FailurePolicy = FailurePolicyIgnore
	return a
}

// WithTimeout sets the API server's timeout for the call (1 to 30 seconds).
func (a Admission) WithTimeout(seconds uint32) Admission {
	a.TimeoutSeconds = seconds
	return a
}

// InNamespacesMatching reviews only objects in namespaces matching this label selector.
func (a Admission) InNamespacesMatching(selector string) Admission {
	a.NamespaceSelector = &selector
	return a
}

// MatchCondition adds a named CEL condition the request must meet to be sent.
func (a Admission) MatchCondition(name, expression string) Admission {
	a.MatchConditions = append(a.MatchConditions, [2]string{name, expression})
	return a
}

// Rule reviews these operations on a type.
func Rule(gvk Gvk, operations ...Operation) AdmissionRule {
	return AdmissionRule{Gvk: gvk, Operations: operations}
}

// WithSubresources reviews these subresources too (`status`, `scale`).
func (r AdmissionRule) WithSubresources(subresources ...string) AdmissionRule {
	r.Subresources = append(r.Subresources, subresources...)
	return r
}

// Allow lets the request through.
func Allow() AdmissionResponse { return AdmissionResponse{Allowed: true} }

// Deny refuses the request with this message (HTTP 403).
func Deny(message string) AdmissionResponse { return AdmissionResponse{Message: message} }

// PatchTo allows the request, changed to this whole object (JSON); the host works out the patch.
func PatchTo(objectJSON string) AdmissionResponse {
	return AdmissionResponse{Allowed: true, Mutation: &Mutation{Tag: MutationObject, Object: objectJSON}}
}

// Warn adds a warning shown to the user.
func (r AdmissionResponse) Warn(warning string) AdmissionResponse {
	r.Warnings = append(r.Warnings, warning)
	return r
}

// WithController makes the plugin a controller: `Reconcile` is called by key.
func (m Manifest) WithController(c Controller) Manifest {
	m.Controller = &c
	return m
}

// Metric declares a metric the plugin updates through `Metrics`.
func (m Manifest) Metric(metric Metric) Manifest {
	m.Metrics = append(m.Metrics, metric)
	return m
}

// NewController is a controller of `gvk`: each of its objects is a key.
func NewController(gvk Gvk) Controller { return Controller{Reconciles: gvk} }

// Owning adds a type the controller owns: an event on one wakes its controller's key.
func (c Controller) Owning(gvk Gvk) Controller {
	c.Owns = append(c.Owns, gvk)
	return c
}

// WatchingByLabel adds a watched type whose objects' label `label` names a key in their
// namespace.
func (c Controller) WatchingByLabel(gvk Gvk, label string) Controller {
	c.Watches = append(c.Watches, Watched{Gvk: gvk, Wakes: WakeMap{Tag: WakeMapLabel, Label: label}})
	return c
}

// WatchingByIndex adds a watched type whose objects' values in the manifest's index `index`
// are keys (`namespace/name`).
func (c Controller) WatchingByIndex(gvk Gvk, index string) Controller {
	c.Watches = append(c.Watches, Watched{Gvk: gvk, Wakes: WakeMap{Tag: WakeMapIndex, Index: index}})
	return c
}

// WithFinalizer keeps the finalizer `kubewasm.dev/<plugin>` on every live object:
// `Finalize` runs before one goes.
func (c Controller) WithFinalizer() Controller {
	c.Finalizer = true
	return c
}

// Counter is a counter with these label names, for `Manifest.Metric`.
func Counter(name, help string, labels ...string) Metric {
	return Metric{Name: name, Help: help, Kind: MetricKindCounter, Labels: labels}
}

// Gauge is a gauge with these label names, for `Manifest.Metric`.
func Gauge(name, help string, labels ...string) Metric {
	return Metric{Name: name, Help: help, Kind: MetricKindGauge, Labels: labels}
}

// Histogram is a histogram with these label names and bucket upper bounds (none: the host's
// defaults), for `Manifest.Metric`.
func Histogram(name, help string, labels []string, buckets ...float64) Metric {
	return Metric{Name: name, Help: help, Kind: MetricKindHistogram, Labels: labels, Buckets: buckets}
}

// Key is the cache's key of the object: `namespace/name`, or `name` when cluster-scoped.
func (k ObjectKey) Key() string {
	if k.Namespace != nil && *k.Namespace != "" {
		return *k.Namespace + "/" + k.Name
	}
	return k.Name
}
