//! Every contract version the host runs, in one table: each file holds one version's calls
//! into a component ([`Exports`]) and, for an earlier version, answers its imports with the
//! current implementation and converts what changed since. [`pre`] is the table: the one place that
//! matches on the version. The types of two contracts are the same shapes under two names:
//! the macros here convert them. docs/design/contract-versions.md lists what a new version
//! takes.

/// Field-by-field conversions between two records of the same shape.
macro_rules! same_record {
    ($from:ty => $to:ty { $($field:ident),* $(,)? }) => {
        impl From<$from> for $to {
            fn from(x: $from) -> Self {
                Self { $($field: x.$field.into()),* }
            }
        }
    };
}

/// Case-by-case conversions between two variants of the same shape (each case carries one
/// value, or none).
macro_rules! same_cases {
    ($from:ty => $to:ty { $($case:ident $(($x:ident))?),* $(,)? }) => {
        impl From<$from> for $to {
            fn from(x: $from) -> Self {
                type F = $from;
                match x {
                    $(F::$case $(($x))? => Self::$case $(($x.into()))?),*
                }
            }
        }
    };
}

/// The imports every earlier contract shares with the current one (`object`, `cache`,
/// `cluster`, `logging`), answered by the current implementation: arguments converted in,
/// answers out. `forward_shared!(v3)` is for a contract before 0.4 (a query error without
/// `undeclared`, a total `json`); `forward_shared!(v4, json: T = read)` names the type of
/// `json`'s answer and how to read it. The caller's module names the two contracts `$v` and
/// `now`, and has the conversions (`From`).
macro_rules! forward_shared {
    ($v:ident) => {
        impl From<now::types::QueryError> for $v::types::QueryError {
            fn from(e: now::types::QueryError) -> Self {
                use now::types::QueryError as E;
                match e {
                    E::Denied(m) => Self::Denied(m),
                    E::NotCached(m) => Self::NotCached(m),
                    E::UnknownIndex(m) => Self::UnknownIndex(m),
                    E::InvalidArgument(m) => Self::InvalidArgument(m),
                    E::TooLarge(m) => Self::TooLarge(m),
                    E::TooManyHandles(m) => Self::TooManyHandles(m),
                    // Never answered to a component that declares no fields; were it, the
                    // nearest earlier case says the same.
                    E::Undeclared(m) => Self::NotCached(m),
                }
            }
        }

        forward_shared!($v, json: String = crate::wasm::compat::total_json);
    };
    ($v:ident, json: $json:ty = $read:path) => {
        type R<T> = wasmtime::Result<T>;
        type Handle = wasmtime::component::Resource<now::types::Object>;
        type Answer<T> = R<Result<T, $v::types::QueryError>>;
        type Written = R<Result<(), $v::cluster::WriteError>>;
        type Gvk = $v::types::Gvk;
        type Target = $v::cluster::Target;

        impl $v::types::HostObject for HostState {
            fn gvk(&mut self, this: Handle) -> R<Gvk> {
                now::types::HostObject::gvk(self, this).map(Into::into)
            }
            fn namespace(&mut self, this: Handle) -> R<Option<String>> {
                now::types::HostObject::namespace(self, this)
            }
            fn name(&mut self, this: Handle) -> R<String> {
                now::types::HostObject::name(self, this)
            }
            fn key(&mut self, this: Handle) -> R<String> {
                now::types::HostObject::key(self, this)
            }
            fn uid(&mut self, this: Handle) -> R<String> {
                now::types::HostObject::uid(self, this)
            }
            fn resource_version(&mut self, this: Handle) -> R<String> {
                now::types::HostObject::resource_version(self, this)
            }
            fn label(&mut self, this: Handle, key: String) -> R<Option<String>> {
                now::types::HostObject::label(self, this, key)
            }
            fn labels(&mut self, this: Handle) -> R<Vec<(String, String)>> {
                now::types::HostObject::labels(self, this)
            }
            fn annotation(&mut self, this: Handle, key: String) -> R<Option<String>> {
                now::types::HostObject::annotation(self, this, key)
            }
            fn owner_references(&mut self, this: Handle) -> R<Vec<$v::types::OwnerReference>> {
                let refs = now::types::HostObject::owner_references(self, this)?;
                Ok(refs.into_iter().map(Into::into).collect())
            }
            fn controller(&mut self, this: Handle) -> R<Option<$v::types::OwnerReference>> {
                Ok(now::types::HostObject::controller(self, this)?.map(Into::into))
            }
            fn owner(&mut self, this: Handle, gvk: Gvk) -> Answer<Option<Handle>> {
                Ok(now::types::HostObject::owner(self, this, gvk.into())?.map_err(Into::into))
            }
            fn field(&mut self, this: Handle, pointer: String) -> Answer<Option<$v::types::Value>> {
                let answer = now::types::HostObject::field(self, this, pointer)?;
                Ok(answer.map(|v| v.map(Into::into)).map_err(Into::into))
            }
            fn json(&mut self, this: Handle) -> R<$json> {
                $read(now::types::HostObject::json(self, this)?)
            }
            fn drop(&mut self, this: Handle) -> R<()> {
                now::types::HostObject::drop(self, this)
            }
        }

        impl $v::types::Host for HostState {}

        impl $v::cache::Host for HostState {
            fn get(
                &mut self,
                gvk: Gvk,
                namespace: Option<String>,
                name: String,
            ) -> Answer<Option<Handle>> {
                Ok(now::cache::Host::get(self, gvk.into(), namespace, name)?.map_err(Into::into))
            }
            fn list_objects(
                &mut self,
                gvk: Gvk,
                namespace: Option<String>,
                label_selector: Option<String>,
            ) -> Answer<Vec<Handle>> {
                let answer =
                    now::cache::Host::list_objects(self, gvk.into(), namespace, label_selector)?;
                Ok(answer.map_err(Into::into))
            }
            fn by_index(&mut self, gvk: Gvk, index: String, value: String) -> Answer<Vec<Handle>> {
                Ok(now::cache::Host::by_index(self, gvk.into(), index, value)?.map_err(Into::into))
            }
            fn index_keys(
                &mut self,
                gvk: Gvk,
                index: String,
                value: String,
            ) -> Answer<Vec<String>> {
                let answer = now::cache::Host::index_keys(self, gvk.into(), index, value)?;
                Ok(answer.map_err(Into::into))
            }
            fn index_values(&mut self, gvk: Gvk, index: String) -> Answer<Vec<String>> {
                Ok(now::cache::Host::index_values(self, gvk.into(), index)?.map_err(Into::into))
            }
        }

        impl $v::cluster::Host for HostState {
            fn apply(&mut self, target: Target, json: String) -> Written {
                Ok(now::cluster::Host::apply(self, target.into(), json)?.map_err(Into::into))
            }
            fn merge_patch(&mut self, target: Target, patch: String) -> Written {
                Ok(now::cluster::Host::merge_patch(self, target.into(), patch)?.map_err(Into::into))
            }
            fn json_patch(&mut self, target: Target, patch: String) -> Written {
                Ok(now::cluster::Host::json_patch(self, target.into(), patch)?.map_err(Into::into))
            }
            fn create(&mut self, gvk: Gvk, namespace: Option<String>, json: String) -> Written {
                let created = now::cluster::Host::create(self, gvk.into(), namespace, json)?;
                Ok(created.map_err(Into::into))
            }
            fn delete(&mut self, target: Target, uid: Option<String>) -> Written {
                Ok(now::cluster::Host::delete(self, target.into(), uid)?.map_err(Into::into))
            }
            fn record_event(
                &mut self,
                regarding: Handle,
                event_type: $v::cluster::EventType,
                reason: String,
                note: String,
            ) -> Written {
                let recorded = now::cluster::Host::record_event(
                    self,
                    regarding,
                    event_type.into(),
                    reason,
                    note,
                )?;
                Ok(recorded.map_err(Into::into))
            }
            fn previous_failures(&mut self) -> R<Vec<$v::cluster::WriteFailure>> {
                let failures = now::cluster::Host::previous_failures(self)?;
                Ok(failures.into_iter().map(Into::into).collect())
            }
        }

        impl $v::logging::Host for HostState {
            fn log(
                &mut self,
                level: $v::logging::Level,
                message: String,
                fields: Vec<(String, String)>,
            ) -> R<()> {
                now::logging::Host::log(self, level.into(), message, fields)
            }
        }
    };
}

/// The imports 0.3 added (`triggers`, `state`), for a later contract than 0.3 that is not the
/// current one, answered by the current implementation.
macro_rules! forward_since_0_3 {
    ($v:ident) => {
        impl $v::triggers::Host for HostState {
            fn requeue_after(&mut self, seconds: u32) -> R<Result<(), String>> {
                now::triggers::Host::requeue_after(self, seconds)
            }
        }

        type Changed = R<Result<(), $v::state::StateError>>;

        impl $v::state::Host for HostState {
            fn get(&mut self, key: String) -> R<Option<String>> {
                now::state::Host::get(self, key)
            }
            fn set(&mut self, key: String, value: String) -> Changed {
                Ok(now::state::Host::set(self, key, value)?.map_err(Into::into))
            }
            fn remove(&mut self, key: String) -> Changed {
                Ok(now::state::Host::remove(self, key)?.map_err(Into::into))
            }
            fn keys(&mut self, prefix: String) -> R<Vec<String>> {
                now::state::Host::keys(self, prefix)
            }
        }
    };
}

/// The manifest and admission types of a contract since 0.3 that is not the current one:
/// the same shapes as the current ones under another name (a manifest with neither
/// controller nor metrics), and `admission_request`, its review of a current one.
macro_rules! manifest_since_0_3 {
    ($v:ident) => {
        impl From<$v::types::AdmissionRule> for now::types::AdmissionRule {
            fn from(r: $v::types::AdmissionRule) -> Self {
                Self {
                    gvk: r.gvk.into(),
                    operations: r.operations.into_iter().map(Into::into).collect(),
                    subresources: r.subresources,
                }
            }
        }

        impl From<$v::types::Admission> for now::types::Admission {
            fn from(a: $v::types::Admission) -> Self {
                Self {
                    mutating: a.mutating,
                    rules: a.rules.into_iter().map(Into::into).collect(),
                    failure_policy: a.failure_policy.into(),
                    timeout_seconds: a.timeout_seconds,
                    namespace_selector: a.namespace_selector,
                    match_conditions: a.match_conditions,
                }
            }
        }

        impl From<$v::types::Manifest> for now::types::Manifest {
            fn from(m: $v::types::Manifest) -> Self {
                Self {
                    subscriptions: m.subscriptions.into_iter().map(Into::into).collect(),
                    queries: m.queries.into_iter().map(Into::into).collect(),
                    indexes: m.indexes.into_iter().map(Into::into).collect(),
                    resync_seconds: m.resync_seconds,
                    schedules: m.schedules.into_iter().map(Into::into).collect(),
                    state: m.state,
                    admission: m.admission.map(Into::into),
                    controller: None,
                    metrics: Vec::new(),
                }
            }
        }

        impl From<$v::types::AdmissionResponse> for now::types::AdmissionResponse {
            fn from(r: $v::types::AdmissionResponse) -> Self {
                Self {
                    allowed: r.allowed,
                    message: r.message,
                    code: r.code,
                    mutation: r.mutation.map(Into::into),
                    warnings: r.warnings,
                }
            }
        }

        /// The review of a current one in this contract: the same fields, its objects lent
        /// as they are.
        pub fn admission_request(r: now::types::AdmissionRequest) -> $v::types::AdmissionRequest {
            $v::types::AdmissionRequest {
                uid: r.uid,
                operation: r.operation.into(),
                gvk: r.gvk.into(),
                plural: r.plural,
                subresource: r.subresource,
                namespace: r.namespace,
                name: r.name,
                object: r.object,
                old_object: r.old_object,
                user_info: r.user_info.into(),
                dry_run: r.dry_run,
            }
        }
    };
}

/// `pub fn event`: contract `$v`'s event for a notification, its objects lent from the
/// store's handles for one call (0.3 and later: with `requeue`).
macro_rules! lend_event {
    ($v:ident) => {
        /// The event for a notification, its objects lent from `handles` for one call.
        pub fn event(
            n: &crate::informer::Notification,
            handles: &mut crate::wasm::handles::Handles,
        ) -> $v::types::Event {
            use crate::informer::Notification;
            use $v::types::{Added, Deleted, Event, Updated};
            match n {
                Notification::Added { object, initial } => Event::Added(Added {
                    object: handles.lend(object),
                    initial: *initial,
                }),
                Notification::Updated { old, new } => Event::Updated(Updated {
                    old: handles.lend(old),
                    new: handles.lend(new),
                }),
                Notification::Deleted { object, stale } => Event::Deleted(Deleted {
                    object: handles.lend(object),
                    stale: *stale,
                }),
                Notification::Sync(object) => Event::Sync(handles.lend(object)),
                Notification::Requeue(object) => Event::Requeue(handles.lend(object)),
            }
        }
    };
}

use wasmtime::Store;
use wasmtime::component::InstancePre;

use crate::wasm::bindings::exports::kubewasm::plugin::handler::{HandleError, Manifest};
use crate::wasm::bindings::kubewasm::plugin::types::{
    AdmissionRequest, AdmissionResponse, QueryError,
};
use crate::wasm::version::Contract;
use crate::wasm::{Call, HostState};

/// One contract version's exports of a live instance, called with what the host has: the
/// current version's calls go straight through, an earlier one's convert on the way.
pub trait Exports: Send + Sync {
    /// The version it was built for.
    fn contract(&self) -> Contract;
    /// `describe`, read as the current manifest (an earlier one with none of the additions).
    fn describe(&self, store: &mut Store<HostState>) -> wasmtime::Result<Manifest>;
    /// `init`; the inner error is the plugin's own refusal.
    fn init(
        &self,
        store: &mut Store<HostState>,
        config: &str,
    ) -> wasmtime::Result<Result<(), String>>;
    /// Whether the version has what `call` calls (0.2 has only `handle`).
    fn exports(&self, call: &Call<'_>) -> bool;
    /// `handle`, `synced` or `tick`, its objects lent from the store's handles.
    fn call(
        &self,
        store: &mut Store<HostState>,
        call: Call<'_>,
    ) -> wasmtime::Result<Result<(), HandleError>>;
    /// `admit`; `None` when the version has none.
    fn admit(
        &self,
        store: &mut Store<HostState>,
        request: AdmissionRequest,
    ) -> Option<wasmtime::Result<AdmissionResponse>>;
}

/// One contract version's pre-linked code.
pub trait Pre: Send + Sync {
    /// The linked code underneath.
    fn instance_pre(&self) -> &InstancePre<HostState>;
    /// A live instance in `store`.
    fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Box<dyn Exports>>;
}

/// The table: `linked` type-checked against `contract`'s world, as that version's code.
pub fn pre(contract: Contract, linked: InstancePre<HostState>) -> wasmtime::Result<Box<dyn Pre>> {
    use crate::wasm::bindings;
    Ok(match contract {
        Contract::V5 => Box::new(bindings::PluginPre::new(linked)?),
        Contract::V4 => Box::new(bindings::v4::PluginPre::new(linked)?),
        Contract::V3 => Box::new(bindings::v3::PluginPre::new(linked)?),
        Contract::V2 => Box::new(bindings::v2::PluginPre::new(linked)?),
    })
}

/// The [`Pre`] of one version's generated bindings (`PluginPre`).
macro_rules! pre_of {
    ($pre:ty) => {
        impl crate::wasm::compat::Pre for $pre {
            fn instance_pre(&self) -> &wasmtime::component::InstancePre<crate::wasm::HostState> {
                <$pre>::instance_pre(self)
            }
            fn instantiate(
                &self,
                store: &mut wasmtime::Store<crate::wasm::HostState>,
            ) -> wasmtime::Result<Box<dyn crate::wasm::compat::Exports>> {
                Ok(Box::new(<$pre>::instantiate(self, store)?))
            }
        }
    };
}

/// `contract`, `describe` (read as the current manifest) and `init`: the same calls in every
/// version's bindings, for an `impl Exports` of the version `$contract`.
macro_rules! common_exports {
    ($contract:expr) => {
        fn contract(&self) -> crate::wasm::version::Contract {
            $contract
        }

        fn describe(
            &self,
            store: &mut wasmtime::Store<crate::wasm::HostState>,
        ) -> wasmtime::Result<crate::wasm::bindings::exports::kubewasm::plugin::handler::Manifest> {
            self.kubewasm_plugin_handler()
                .call_describe(store)
                .map(Into::into)
        }

        fn init(
            &self,
            store: &mut wasmtime::Store<crate::wasm::HostState>,
            config: &str,
        ) -> wasmtime::Result<Result<(), String>> {
            self.kubewasm_plugin_handler().call_init(store, config)
        }
    };
}

pub mod v2;
pub mod v3;
pub mod v4;
mod v5;

/// `json`'s answer for a contract whose query errors are the current ones under another name.
pub fn same_json<E: From<QueryError>>(
    answer: Result<String, QueryError>,
) -> wasmtime::Result<Result<String, E>> {
    Ok(answer.map_err(Into::into))
}

/// The whole JSON of an object for a contract whose `json` cannot fail: components built
/// before 0.4 declare no fields, so they only ever hold whole objects.
pub fn total_json(answer: Result<String, QueryError>) -> wasmtime::Result<String> {
    answer.map_err(|e| wasmtime::format_err!("a whole-object read was refused: {e:?}"))
}
