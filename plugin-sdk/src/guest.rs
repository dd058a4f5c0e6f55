//! The guest API: bindings generated from `wit/plugin.wit`, and helpers over them.

use std::fmt;

use serde::de::DeserializeOwned;

/// Bindings generated from `wit/plugin.wit` by wit-bindgen.
#[allow(missing_docs, unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "kubewasm:plugin/plugin",
        pub_export_macro: true,
        export_macro_name: "__export_kubewasm_plugin",
        default_bindings_module: "kubewasm_sdk::bindings",
    });
}

pub use bindings::kubewasm::plugin::types::{
    Added, Admission, AdmissionRequest, AdmissionResponse, AdmissionRule, Controller, Deleted,
    Event, FailurePolicy, Gvk, HandleError, Index, Manifest, Metric, MetricKind, Mutation, Object,
    ObjectKey, Operation, OwnerReference, QueryError, Schedule, Subscription, Updated, UserInfo,
    Value, WakeMap, Watched,
};

/// The operator's configuration handed to [`Plugin::init`], read as `T`; the error says what
/// is wrong with it.
pub fn parse_config<T: serde::de::DeserializeOwned>(config: &str) -> Result<T, String> {
    serde_json::from_str(config).map_err(|e| format!("invalid configuration: {e}"))
}

/// What a plugin implements. Export it with [`export_plugin!`](crate::export_plugin).
pub trait Plugin {
    /// Prepares a fresh instance with the operator's configuration (JSON text, `{}` if none).
    /// Runs before [`Plugin::describe`]; cache queries are not available yet.
    fn init(config: &str) -> Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// What the plugin needs: subscriptions, queried types, indexes, resync period.
    fn describe() -> Manifest;

    /// Handles one event. Its objects are handles lent for this call: read what you need
    /// through them ([`Object::field`], [`Object::label`], [`Object::parse`], ...). Does
    /// nothing unless overridden (a controller reconciles by key instead).
    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let _ = event;
        Ok(())
    }

    /// Every subscription's initial state has been handed over (at start, after a hot swap,
    /// after a relist): the moment to reconcile everything once. Does nothing unless
    /// overridden.
    fn synced() -> Result<(), HandleError> {
        Ok(())
    }

    /// The schedule named `schedule` (declared with [`Manifest::schedule`]) is due.
    fn tick(schedule: &str) -> Result<(), HandleError> {
        let _ = schedule;
        Ok(())
    }

    /// Reviews an admission request (for the rules declared with [`Manifest::admission`]).
    /// Allows everything unless overridden.
    fn admit(request: AdmissionRequest<'_>) -> AdmissionResponse {
        let _ = request;
        AdmissionResponse::allow()
    }

    /// Brings the world in line for one key of the controller declared with
    /// [`Manifest::controller`]: read the object with [`cache::get`] (gone is an answer),
    /// apply what should exist, and return Ok. Called once for every burst of events that
    /// woke the key, never twice at once for one key. Fails unless overridden.
    fn reconcile(key: ObjectKey) -> Result<(), HandleError> {
        Err(HandleError::fatal(format!(
            "reconcile of {} is not implemented by this plugin",
            key.key()
        )))
    }

    /// The object of `key` is being deleted and carries this plugin's finalizer (declared
    /// with [`Controller::with_finalizer`]): release what it holds outside the cluster; on Ok
    /// the host removes the finalizer. Does nothing unless overridden.
    fn finalize(key: ObjectKey) -> Result<(), HandleError> {
        let _ = key;
        Ok(())
    }
}

/// Exports a [`Plugin`] implementation as the component's `handler`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        const _: () = {
            struct KubewasmExport;
            impl $crate::bindings::exports::kubewasm::plugin::handler::Guest for KubewasmExport {
                fn describe() -> $crate::Manifest {
                    <$plugin as $crate::Plugin>::describe()
                }
                fn init(config: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                    <$plugin as $crate::Plugin>::init(&config)
                }
                fn handle(event: $crate::Event<'_>) -> ::std::result::Result<(), $crate::HandleError> {
                    <$plugin as $crate::Plugin>::handle(event)
                }
                fn synced() -> ::std::result::Result<(), $crate::HandleError> {
                    <$plugin as $crate::Plugin>::synced()
                }
                fn tick(schedule: ::std::string::String) -> ::std::result::Result<(), $crate::HandleError> {
                    <$plugin as $crate::Plugin>::tick(&schedule)
                }
                fn admit(request: $crate::AdmissionRequest<'_>) -> $crate::AdmissionResponse {
                    <$plugin as $crate::Plugin>::admit(request)
                }
                fn reconcile(key: $crate::ObjectKey) -> ::std::result::Result<(), $crate::HandleError> {
                    <$plugin as $crate::Plugin>::reconcile(key)
                }
                fn finalize(key: $crate::ObjectKey) -> ::std::result::Result<(), $crate::HandleError> {
                    <$plugin as $crate::Plugin>::finalize(key)
                }
            }
            $crate::bindings::__export_kubewasm_plugin!(KubewasmExport with_types_in $crate::bindings);
        };
    };
}

impl Gvk {
    /// A resource type from group (empty for core), version and kind.
    ///
    /// A `Gvk` owns its strings, so building one allocates: a handler that queries the same
    /// types on every event builds them once, in a `static` (`LazyLock::new(Gvk::pod)`).
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// `v1` Pod.
    pub fn pod() -> Self {
        Self::new("", "v1", "Pod")
    }

    /// `v1` Event (core events, with `involvedObject`).
    pub fn event() -> Self {
        Self::new("", "v1", "Event")
    }

    /// `v1` ConfigMap.
    pub fn config_map() -> Self {
        Self::new("", "v1", "ConfigMap")
    }

    /// `v1` Namespace.
    pub fn namespace() -> Self {
        Self::new("", "v1", "Namespace")
    }

    /// `apps/v1` Deployment.
    pub fn deployment() -> Self {
        Self::new("apps", "v1", "Deployment")
    }

    /// `apps/v1` ReplicaSet.
    pub fn replica_set() -> Self {
        Self::new("apps", "v1", "ReplicaSet")
    }

    /// `v1` Service.
    pub fn service() -> Self {
        Self::new("", "v1", "Service")
    }

    /// `v1` Node.
    pub fn node() -> Self {
        Self::new("", "v1", "Node")
    }

    /// `apps/v1` StatefulSet.
    pub fn stateful_set() -> Self {
        Self::new("apps", "v1", "StatefulSet")
    }

    /// `apps/v1` DaemonSet.
    pub fn daemon_set() -> Self {
        Self::new("apps", "v1", "DaemonSet")
    }

    /// `batch/v1` Job.
    pub fn job() -> Self {
        Self::new("batch", "v1", "Job")
    }

    /// The `apiVersion` string.
    pub fn api_version(&self) -> String {
        crate::api_version(&self.group, &self.version)
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

impl Manifest {
    /// An empty manifest: no subscriptions, queries, indexes or resync.
    pub fn new() -> Self {
        Self {
            subscriptions: Vec::new(),
            queries: Vec::new(),
            indexes: Vec::new(),
            resync_seconds: 0,
            schedules: Vec::new(),
            state: false,
            admission: None,
            controller: None,
            metrics: Vec::new(),
        }
    }

    /// Makes the plugin a controller: `reconcile` is called by key.
    pub fn controller(mut self, controller: Controller) -> Self {
        self.controller = Some(controller);
        self
    }

    /// Declares a metric the plugin updates through [`metrics`].
    pub fn metric(mut self, metric: Metric) -> Self {
        self.metrics.push(metric);
        self
    }

    /// Adds a subscription.
    pub fn subscribe(mut self, subscription: Subscription) -> Self {
        self.subscriptions.push(subscription);
        self
    }

    /// Adds a resource type to query without subscribing to its events.
    pub fn query(mut self, gvk: Gvk) -> Self {
        self.queries.push(gvk);
        self
    }

    /// Asks for a field index: `name` on `gvk`, valued by the JSON pointer.
    pub fn index(mut self, gvk: Gvk, name: &str, json_pointer: &str) -> Self {
        self.indexes.push(Index {
            gvk,
            name: name.into(),
            json_pointer: json_pointer.into(),
        });
        self
    }

    /// Asks for a sync event per subscribed object every `seconds`.
    pub fn resync_every(mut self, seconds: u32) -> Self {
        self.resync_seconds = seconds;
        self
    }

    /// Asks for [`Plugin::tick`] with `name` on schedule `cron` (five-field cron, in UTC, or
    /// `@every 30s`).
    pub fn schedule(mut self, name: &str, cron: &str) -> Self {
        self.schedules.push(Schedule {
            name: name.into(),
            cron: cron.into(),
            time_zone: None,
            jitter_seconds: 0,
        });
        self
    }

    /// Declares that the plugin keeps [`state`](crate::state).
    pub fn with_state(mut self) -> Self {
        self.state = true;
        self
    }

    /// Declares the admission webhook the plugin serves ([`Plugin::admit`]).
    pub fn admission(mut self, admission: Admission) -> Self {
        self.admission = Some(admission);
        self
    }
}

impl Controller {
    /// A controller of `gvk`: each of its objects is a key.
    pub fn of(gvk: Gvk) -> Self {
        Self {
            reconciles: gvk,
            owns: Vec::new(),
            watches: Vec::new(),
            finalizer: false,
        }
    }

    /// Owns objects of `gvk`: an event on one wakes its controller's key; children applied
    /// during `reconcile` get the ownerReference and are pruned when no longer applied.
    pub fn owns(mut self, gvk: Gvk) -> Self {
        self.owns.push(gvk);
        self
    }

    /// Watches `gvk`: an object's label `label` names a key in its namespace.
    pub fn watches_by_label(mut self, gvk: Gvk, label: &str) -> Self {
        self.watches.push(Watched {
            gvk,
            wakes: WakeMap::Label(label.to_owned()),
        });
        self
    }

    /// Watches `gvk`: an object's values in the manifest's index `index` are keys
    /// (`namespace/name`).
    pub fn watches_by_index(mut self, gvk: Gvk, index: &str) -> Self {
        self.watches.push(Watched {
            gvk,
            wakes: WakeMap::Index(index.to_owned()),
        });
        self
    }

    /// Keeps the finalizer `kubewasm.dev/<plugin>` on every live object: `finalize` runs
    /// before one goes.
    pub fn with_finalizer(mut self) -> Self {
        self.finalizer = true;
        self
    }
}

impl Metric {
    fn new(name: &str, help: &str, kind: MetricKind, labels: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            help: help.to_owned(),
            kind,
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            buckets: Vec::new(),
        }
    }

    /// A counter with these label names.
    pub fn counter(name: &str, help: &str, labels: &[&str]) -> Self {
        Self::new(name, help, MetricKind::Counter, labels)
    }

    /// A gauge with these label names.
    pub fn gauge(name: &str, help: &str, labels: &[&str]) -> Self {
        Self::new(name, help, MetricKind::Gauge, labels)
    }

    /// A histogram with these label names and bucket upper bounds (empty: the defaults).
    pub fn histogram(name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> Self {
        Self {
            buckets: buckets.to_vec(),
            ..Self::new(name, help, MetricKind::Histogram, labels)
        }
    }
}

impl ObjectKey {
    /// The cache key: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> String {
        crate::key(self.namespace.as_deref(), &self.name)
    }
}

impl Admission {
    /// A validating webhook (it allows or denies) for `rules`: failure policy Fail, the
    /// API server's timeout 10 s.
    pub fn validating(rules: Vec<AdmissionRule>) -> Self {
        Self {
            mutating: false,
            rules,
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: 0,
            namespace_selector: None,
            match_conditions: Vec::new(),
        }
    }

    /// A mutating webhook (it may return a change) for `rules`.
    pub fn mutating(rules: Vec<AdmissionRule>) -> Self {
        Self {
            mutating: true,
            ..Self::validating(rules)
        }
    }

    /// Lets requests through when the plugin cannot answer (failure policy Ignore).
    pub fn ignore_failures(mut self) -> Self {
        self.failure_policy = FailurePolicy::Ignore;
        self
    }

    /// The API server's timeout for the call (1 to 30 seconds); the call's deadline never
    /// exceeds it.
    pub fn timeout_seconds(mut self, seconds: u32) -> Self {
        self.timeout_seconds = seconds;
        self
    }

    /// Only objects in namespaces whose labels match `selector` (Kubernetes syntax).
    pub fn namespace_selector(mut self, selector: &str) -> Self {
        self.namespace_selector = Some(selector.to_owned());
        self
    }

    /// Only requests for which the CEL `expression` is true (a match condition named `name`).
    pub fn match_condition(mut self, name: &str, expression: &str) -> Self {
        self.match_conditions
            .push((name.to_owned(), expression.to_owned()));
        self
    }
}

impl AdmissionRule {
    /// `operations` on objects of `gvk`.
    pub fn on(gvk: Gvk, operations: &[Operation]) -> Self {
        Self {
            gvk,
            operations: operations.to_vec(),
            subresources: Vec::new(),
        }
    }

    /// Also the `subresources` (`status`, `scale`) of those objects.
    pub fn with_subresources(mut self, subresources: &[&str]) -> Self {
        self.subresources = subresources.iter().map(|s| (*s).to_owned()).collect();
        self
    }
}

impl AdmissionResponse {
    /// Allows the request.
    pub fn allow() -> Self {
        Self {
            allowed: true,
            message: String::new(),
            code: 0,
            mutation: None,
            warnings: Vec::new(),
        }
    }

    /// Denies the request with `message` (shown to the user with the plugin's name).
    pub fn deny(message: impl fmt::Display) -> Self {
        Self {
            allowed: false,
            message: message.to_string(),
            ..Self::allow()
        }
    }

    /// Allows the request, changed into `object` (its whole JSON): the host works out the
    /// JSON patch.
    pub fn patch_to(object: &serde_json::Value) -> Self {
        Self {
            mutation: Some(Mutation::Object(object.to_string())),
            ..Self::allow()
        }
    }

    /// Adds a warning shown to the user.
    pub fn warn(mut self, warning: impl fmt::Display) -> Self {
        self.warnings.push(warning.to_string());
        self
    }
}

impl Default for Manifest {
    fn default() -> Self {
        Self::new()
    }
}

impl Subscription {
    /// Every object of `gvk`.
    pub fn to(gvk: Gvk) -> Self {
        Self {
            gvk,
            namespaces: Vec::new(),
            label_selector: None,
            changes: Vec::new(),
            fields: Vec::new(),
            metadata_only: false,
        }
    }

    /// Declares the JSON pointers the plugin reads (`/status/phase`, `/spec/nodeName`),
    /// besides metadata, which is always there: the host keeps only what its plugins declared,
    /// and a read of anything else answers [`QueryError::Undeclared`].
    pub fn fields(mut self, pointers: &[&str]) -> Self {
        self.fields = pointers.iter().map(|p| (*p).into()).collect();
        self
    }

    /// Declares that the plugin reads metadata only (names, labels, annotations, owners):
    /// where every plugin of the type says so, the API server sends only metadata.
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Only updates that change a value at one of these JSON pointers (`/spec`,
    /// `/metadata/labels`); compared in the host, so other updates cost nothing.
    pub fn on_changes(mut self, pointers: &[&str]) -> Self {
        self.changes = pointers.iter().map(|p| (*p).into()).collect();
        self
    }

    /// Only updates that change `metadata.generation` (the spec), as kube-rs's generation
    /// predicate.
    pub fn on_generation_change(self) -> Self {
        self.on_changes(&["/metadata/generation"])
    }

    /// Only objects in these namespaces.
    pub fn in_namespaces(mut self, namespaces: &[&str]) -> Self {
        self.namespaces = namespaces.iter().map(|n| (*n).into()).collect();
        self
    }

    /// Only objects matching this label selector (see [`crate::selector`]).
    pub fn selector(mut self, selector: impl ToString) -> Self {
        self.label_selector = Some(selector.to_string());
        self
    }
}

impl Object {
    /// Parses the whole object into any deserializable type (`serde_json::Value`, a struct of
    /// your own, or a k8s-openapi type with the `k8s` feature). Copies the object's JSON; to
    /// read a few fields, [`Object::field`] and [`Object::text`] are cheaper. A plugin that
    /// declared `fields` for the type gets [`ParseError::Read`] (`undeclared`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ParseError> {
        let json = self.json().map_err(ParseError::Read)?;
        serde_json::from_str(&json).map_err(ParseError::Json)
    }

    /// The string at a JSON pointer (`/status/phase`), or none when nothing, or something
    /// other than a string, is there.
    pub fn text(&self, pointer: &str) -> Result<Option<String>, QueryError> {
        Ok(match self.field(pointer)? {
            Some(Value::Text(s)) => Some(s),
            _ => None,
        })
    }
}

impl Value {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The number, if this is one (integers included).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Integer(i) => Some(*i as f64),
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// Parses the value into any deserializable type (a struct for an object, a `Vec` for an
    /// array, ...).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match self {
            Value::Null => serde_json::from_str("null"),
            Value::Boolean(b) => serde_json::from_value(serde_json::Value::Bool(*b)),
            Value::Integer(i) => serde_json::from_value((*i).into()),
            Value::Number(n) => serde_json::from_value((*n).into()),
            Value::Text(s) => serde_json::from_value(serde_json::Value::String(s.clone())),
            Value::Json(text) => serde_json::from_str(text),
        }
    }
}

impl<'a> Event<'a> {
    /// The newest state of the object this event is about.
    pub fn object(&self) -> &'a Object {
        match self {
            Event::Added(a) => a.object,
            Event::Updated(u) => u.new,
            Event::Deleted(d) => d.object,
            Event::Sync(o) | Event::Requeue(o) => o,
        }
    }

    /// The previous state, for updates.
    pub fn old(&self) -> Option<&'a Object> {
        match self {
            Event::Updated(u) => Some(u.old),
            _ => None,
        }
    }
}

impl HandleError {
    /// A failure worth retrying later (with backoff).
    pub fn retry(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            retry: true,
        }
    }

    /// A failure that retrying will not fix.
    pub fn fatal(message: impl fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            retry: false,
        }
    }
}

impl QueryError {
    /// A one-line explanation: what kind of failure, then the host's detail.
    pub fn explain(&self) -> String {
        let (what, detail) = match self {
            QueryError::Denied(d) => ("denied", d),
            QueryError::NotCached(d) => ("not cached", d),
            QueryError::UnknownIndex(d) => ("unknown index", d),
            QueryError::InvalidArgument(d) => ("invalid argument", d),
            QueryError::TooLarge(d) => ("too large", d),
            QueryError::TooManyHandles(d) => ("too many handles", d),
            QueryError::Undeclared(d) => ("undeclared", d),
        };
        format!("{what}: {detail}")
    }
}

/// Why [`Object::parse`] failed.
#[derive(Debug)]
pub enum ParseError {
    /// The object could not be read whole (the plugin declared the fields it reads).
    Read(QueryError),
    /// Its JSON does not fit the type asked for.
    Json(serde_json::Error),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Read(e) => f.write_str(&e.explain()),
            ParseError::Json(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ParseError {}

impl From<QueryError> for HandleError {
    /// A failed query: retried, unless the request itself is wrong or forbidden.
    fn from(e: QueryError) -> Self {
        let retry = matches!(e, QueryError::TooLarge(_) | QueryError::TooManyHandles(_));
        Self {
            message: e.explain(),
            retry,
        }
    }
}

/// Queries against the host's cache (client-go's listers and indexers).
pub mod cache {
    use super::{Gvk, Object, QueryError};
    use crate::bindings::kubewasm::plugin::cache as host;

    /// One object by namespace (`None` for cluster-scoped) and name.
    pub fn get(
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, QueryError> {
        host::get(gvk, namespace, name)
    }

    /// Every object of a type, optionally in one namespace and matching a label selector.
    pub fn list(
        gvk: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Object>, QueryError> {
        host::list_objects(gvk, namespace, label_selector)
    }

    /// Objects filed under `value` in index `index` (built-in: `namespace`, `owner-uid`,
    /// `label-key`, `label`; or one the plugin declared).
    pub fn by_index(gvk: &Gvk, index: &str, value: &str) -> Result<Vec<Object>, QueryError> {
        host::by_index(gvk, index, value)
    }

    /// Keys of the objects filed under `value` in index `index`.
    pub fn index_keys(gvk: &Gvk, index: &str, value: &str) -> Result<Vec<String>, QueryError> {
        host::index_keys(gvk, index, value)
    }

    /// Every value present in index `index`.
    pub fn index_values(gvk: &Gvk, index: &str) -> Result<Vec<String>, QueryError> {
        host::index_values(gvk, index)
    }
}

/// Writes to the cluster, staged during `handle` and sent in order when it returns Ok: an
/// attempt that fails or traps writes nothing, so a retried event does not write twice. Each
/// write needs a grant in the operator's configuration (`grants.writes`); without one it
/// answers `denied`. Why the API server refused the previous attempt's writes is in
/// [`previous_failures`].
pub mod cluster {
    pub use crate::bindings::kubewasm::plugin::cluster::*;

    use super::HandleError;

    impl Target {
        /// The object itself: its type, namespace and name.
        pub fn of(object: &super::Object) -> Self {
            Self {
                gvk: object.gvk(),
                namespace: object.namespace(),
                name: object.name(),
                subresource: None,
            }
        }

        /// The same object's `status` subresource.
        pub fn status(mut self) -> Self {
            self.subresource = Some("status".into());
            self
        }
    }

    /// Deletes `target` with its dependents deleted in the background (as kubectl does),
    /// only if its uid is still `uid` when given.
    pub fn delete_background(target: &Target, uid: Option<&str>) -> Result<(), WriteError> {
        delete_with(
            target,
            &DeleteOptions {
                propagation: Propagation::Background,
                uid: uid.map(str::to_owned),
                resource_version: None,
            },
        )
    }

    impl WriteError {
        /// A one-line explanation: what kind of failure, then the host's detail.
        pub fn explain(&self) -> String {
            let (what, detail) = match self {
                WriteError::Denied(d) => ("denied", d),
                WriteError::NotLeader(d) => ("not leader", d),
                WriteError::InvalidArgument(d) => ("invalid argument", d),
                WriteError::TooLarge(d) => ("too large", d),
                WriteError::Unsupported(d) => ("unsupported", d),
            };
            format!("{what}: {detail}")
        }
    }

    impl From<WriteError> for HandleError {
        /// A write that could not be staged: retried only when another replica may lead by
        /// then; a denied, malformed or oversized write stays so.
        fn from(e: WriteError) -> Self {
            let retry = matches!(e, WriteError::NotLeader(_));
            Self {
                message: e.explain(),
                retry,
            }
        }
    }
}

/// Metrics the plugin declared with [`Manifest::metric`], updated from any call; the host
/// exposes them on `/metrics` as `kubewasm_custom_<plugin>_<name>`, labelled with the plugin
/// and its version. An update of a series past the plugin's bound is refused (and counted).
pub mod metrics {
    use crate::bindings::kubewasm::plugin::metrics as host;
    pub use crate::bindings::kubewasm::plugin::metrics::MetricError;

    /// Adds `value` (0 or more) to counter `name` for these label values.
    pub fn add(name: &str, labels: &[&str], value: f64) -> Result<(), MetricError> {
        host::add(name, &owned(labels), value)
    }

    /// Adds one to counter `name` for these label values.
    pub fn inc(name: &str, labels: &[&str]) -> Result<(), MetricError> {
        add(name, labels, 1.0)
    }

    /// Sets gauge `name` for these label values.
    pub fn set(name: &str, labels: &[&str], value: f64) -> Result<(), MetricError> {
        host::set(name, &owned(labels), value)
    }

    /// Records one observation in histogram `name` for these label values.
    pub fn observe(name: &str, labels: &[&str], value: f64) -> Result<(), MetricError> {
        host::observe(name, &owned(labels), value)
    }

    fn owned(labels: &[&str]) -> Vec<String> {
        labels.iter().map(|l| (*l).to_owned()).collect()
    }

    impl MetricError {
        /// A one-line explanation: what kind of failure, then the host's detail.
        pub fn explain(&self) -> String {
            let (what, detail) = match self {
                MetricError::Undeclared(d) => ("undeclared", d),
                MetricError::OverBound(d) => ("over bound", d),
                MetricError::InvalidArgument(d) => ("invalid argument", d),
            };
            format!("{what}: {detail}")
        }
    }
}

/// Being called again: [`requeue_after`](triggers::requeue_after) during `handle`.
pub mod triggers {
    use crate::bindings::kubewasm::plugin::triggers as host;

    /// Calls `handle` again for the event's object `seconds` from now, with its current state
    /// (an [`Event::Requeue`](super::Event::Requeue)); a real event for it meanwhile takes
    /// its place, a delete cancels it. During `reconcile`: reconciles the key again then (an
    /// earlier wake wins). Only during `handle` and `reconcile`.
    pub fn requeue_after(seconds: u32) -> Result<(), String> {
        host::requeue_after(seconds)
    }
}

/// The plugin's own key-value map, kept by the host across instances, versions and leaders
/// (declare it with [`Manifest::with_state`](super::Manifest::with_state)). Changes made
/// during a call take effect when it returns Ok.
pub mod state {
    use crate::bindings::kubewasm::plugin::state as host;
    pub use crate::bindings::kubewasm::plugin::state::StateError;

    /// The value of `key`.
    pub fn get(key: &str) -> Option<String> {
        host::get(key)
    }

    /// Sets `key` to `value`.
    pub fn set(key: &str, value: &str) -> Result<(), StateError> {
        host::set(key, value)
    }

    /// Removes `key`.
    pub fn remove(key: &str) -> Result<(), StateError> {
        host::remove(key)
    }

    /// The keys starting with `prefix`, sorted.
    pub fn keys(prefix: &str) -> Vec<String> {
        host::keys(prefix)
    }

    impl StateError {
        /// A one-line explanation: what kind of failure, then the host's detail.
        pub fn explain(&self) -> String {
            let (what, detail) = match self {
                StateError::TooLarge(d) => ("too large", d),
                StateError::NotDeclared(d) => ("not declared", d),
                StateError::Unavailable(d) => ("unavailable", d),
            };
            format!("{what}: {detail}")
        }
    }

    impl From<StateError> for super::HandleError {
        /// A state change refused: retrying will not make it fit.
        fn from(e: StateError) -> Self {
            Self {
                message: e.explain(),
                retry: false,
            }
        }
    }
}

/// Structured logging into the host's log, tagged with the plugin's name.
pub mod log {
    use std::cell::RefCell;

    use crate::bindings::kubewasm::plugin::logging::{self as host, Level};

    /// Bytes of field pairs and strings kept between lines; past it they are let go.
    const KEEP_BYTES: usize = 16 << 10;

    thread_local! {
        /// The owned strings the binding takes, reused from line to line: a line with four
        /// fields otherwise allocates and frees eight strings.
        static FIELDS: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
    }

    /// `fields` as the owned pairs the binding takes, written over the strings `buffer` keeps.
    fn fill<'b>(
        buffer: &'b mut Vec<(String, String)>,
        fields: &[(&str, &str)],
    ) -> &'b [(String, String)] {
        for (i, (k, v)) in fields.iter().enumerate() {
            match buffer.get_mut(i) {
                Some((key, value)) => {
                    key.clear();
                    key.push_str(k);
                    value.clear();
                    value.push_str(v);
                }
                None => buffer.push(((*k).to_owned(), (*v).to_owned())),
            }
        }
        &buffer[..fields.len()]
    }

    /// Lets the kept pairs go once they and their strings hold more than [`KEEP_BYTES`].
    fn trim(buffer: &mut Vec<(String, String)>) {
        let slots = buffer.capacity() * std::mem::size_of::<(String, String)>();
        let kept: usize = slots
            + buffer
                .iter()
                .map(|(k, v)| k.capacity() + v.capacity())
                .sum::<usize>();
        if kept > KEEP_BYTES {
            *buffer = Vec::new();
        }
    }

    fn write(level: Level, message: &str, fields: &[(&str, &str)]) {
        FIELDS.with(|buffer| match buffer.try_borrow_mut() {
            Ok(mut buffer) => {
                host::log(level, message, fill(&mut buffer, fields));
                trim(&mut buffer);
            }
            // Taken only by a line written while another is (which no host call does).
            Err(_) => host::log(level, message, fill(&mut Vec::new(), fields)),
        });
    }

    /// Logs at debug level.
    pub fn debug(message: &str, fields: &[(&str, &str)]) {
        write(Level::Debug, message, fields);
    }

    /// Logs at info level.
    pub fn info(message: &str, fields: &[(&str, &str)]) {
        write(Level::Info, message, fields);
    }

    /// Logs at warn level.
    pub fn warn(message: &str, fields: &[(&str, &str)]) {
        write(Level::Warn, message, fields);
    }

    /// Logs at error level.
    pub fn error(message: &str, fields: &[(&str, &str)]) {
        write(Level::Error, message, fields);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_shorter_line_gets_only_its_own_fields() {
            let mut buffer = Vec::new();
            let four = [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")];
            assert_eq!(fill(&mut buffer, &four).len(), 4);
            let two = fill(&mut buffer, &[("x", "long value"), ("y", "")]);
            let two: Vec<(&str, &str)> = two.iter().map(|(k, v)| (&**k, &**v)).collect();
            assert_eq!(two, [("x", "long value"), ("y", "")]);
            assert_eq!(
                buffer.len(),
                4,
                "the other strings are kept for the next line"
            );
            assert!(fill(&mut buffer, &[]).is_empty());
        }

        #[test]
        fn a_huge_line_is_not_kept() {
            let mut buffer = Vec::new();
            let big = "v".repeat(KEEP_BYTES);
            fill(&mut buffer, &[("k", "v")]);
            trim(&mut buffer);
            assert_eq!(buffer.len(), 1, "small lines are kept");
            fill(&mut buffer, &[("k", &big)]);
            trim(&mut buffer);
            assert!(buffer.is_empty() && buffer.capacity() == 0);
            // Many empty fields hold no string bytes, but their pairs count.
            fill(&mut buffer, &vec![("", ""); KEEP_BYTES]);
            trim(&mut buffer);
            assert!(buffer.is_empty() && buffer.capacity() == 0);
        }
    }
}

impl crate::selector::Selector {
    /// A selector from a Kubernetes `LabelSelector` value (`matchLabels` and
    /// `matchExpressions`), as found in `spec.selector` of Deployments and ReplicaSets.
    pub fn from_label_selector(
        value: &serde_json::Value,
    ) -> Result<Self, crate::selector::SelectorError> {
        use crate::selector::SelectorError;
        let err = |reason: String| SelectorError {
            input: value.to_string(),
            reason,
        };
        let mut selector = Self::everything();
        if let Some(labels) = value.get("matchLabels").and_then(|m| m.as_object()) {
            for (k, v) in labels {
                let v = v
                    .as_str()
                    .ok_or_else(|| err(format!("matchLabels.{k} is not a string")))?;
                selector = selector.eq(k, v);
            }
        }
        for expr in value
            .get("matchExpressions")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
        {
            let key = expr
                .get("key")
                .and_then(|k| k.as_str())
                .ok_or_else(|| err("matchExpressions[].key is missing".into()))?;
            let values: Vec<&str> = expr
                .get("values")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .collect();
            selector = match expr.get("operator").and_then(|o| o.as_str()) {
                Some("In") => selector.is_in(key, &values),
                Some("NotIn") => selector.not_in(key, &values),
                Some("Exists") => selector.exists(key),
                Some("DoesNotExist") => selector.absent(key),
                other => return Err(err(format!("unknown operator {other:?} for key {key:?}"))),
            };
        }
        Ok(selector)
    }
}
