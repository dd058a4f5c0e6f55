//! Components built for contract 0.2: its imports are answered by 0.3's implementation
//! (0.3 only added to them), and its exports are called with what 0.2 knows. The types of the
//! two contracts are the same shapes under two names; this file converts between them and
//! holds nothing else.

use wasmtime::component::Resource;

use crate::informer::Notification;
use crate::wasm::HostState;
use crate::wasm::bindings::kubewasm::plugin as v3;
use crate::wasm::bindings::v2::kubewasm::plugin as v2;
use crate::wasm::handles::Handles;

use v3::types::Object;

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

same_record!(v2::types::Gvk => v3::types::Gvk { group, version, kind });
same_record!(v3::types::Gvk => v2::types::Gvk { group, version, kind });
same_record!(v3::types::OwnerReference => v2::types::OwnerReference {
    api_version, kind, name, uid, controller,
});
same_record!(v2::types::HandleError => v3::types::HandleError { message, retry });
same_record!(v2::types::Index => v3::types::Index { gvk, name, json_pointer });
same_record!(v2::cluster::Target => v3::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(v3::cluster::Target => v2::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(v3::cluster::WriteFailure => v2::cluster::WriteFailure {
    target, verb, reason, message,
});

impl From<v2::types::Subscription> for v3::types::Subscription {
    fn from(s: v2::types::Subscription) -> Self {
        Self {
            gvk: s.gvk.into(),
            namespaces: s.namespaces,
            label_selector: s.label_selector,
            changes: Vec::new(),
        }
    }
}

impl From<v2::types::Manifest> for v3::types::Manifest {
    fn from(m: v2::types::Manifest) -> Self {
        Self {
            subscriptions: m.subscriptions.into_iter().map(Into::into).collect(),
            queries: m.queries.into_iter().map(Into::into).collect(),
            indexes: m.indexes.into_iter().map(Into::into).collect(),
            resync_seconds: m.resync_seconds,
            schedules: Vec::new(),
            state: false,
            admission: None,
        }
    }
}

impl From<v3::types::Value> for v2::types::Value {
    fn from(v: v3::types::Value) -> Self {
        use v3::types::Value as V;
        match v {
            V::Null => Self::Null,
            V::Boolean(b) => Self::Boolean(b),
            V::Integer(i) => Self::Integer(i),
            V::Number(n) => Self::Number(n),
            V::Text(t) => Self::Text(t),
            V::Json(j) => Self::Json(j),
        }
    }
}

impl From<v3::types::QueryError> for v2::types::QueryError {
    fn from(e: v3::types::QueryError) -> Self {
        use v3::types::QueryError as E;
        match e {
            E::Denied(m) => Self::Denied(m),
            E::NotCached(m) => Self::NotCached(m),
            E::UnknownIndex(m) => Self::UnknownIndex(m),
            E::InvalidArgument(m) => Self::InvalidArgument(m),
            E::TooLarge(m) => Self::TooLarge(m),
            E::TooManyHandles(m) => Self::TooManyHandles(m),
        }
    }
}

impl From<v3::cluster::WriteError> for v2::cluster::WriteError {
    fn from(e: v3::cluster::WriteError) -> Self {
        use v3::cluster::WriteError as E;
        match e {
            E::Denied(m) => Self::Denied(m),
            E::NotLeader(m) => Self::NotLeader(m),
            E::InvalidArgument(m) => Self::InvalidArgument(m),
            E::TooLarge(m) => Self::TooLarge(m),
            E::Unsupported(m) => Self::Unsupported(m),
        }
    }
}

impl From<v2::cluster::EventType> for v3::cluster::EventType {
    fn from(t: v2::cluster::EventType) -> Self {
        match t {
            v2::cluster::EventType::Normal => Self::Normal,
            v2::cluster::EventType::Warning => Self::Warning,
        }
    }
}

impl From<v2::logging::Level> for v3::logging::Level {
    fn from(l: v2::logging::Level) -> Self {
        use v2::logging::Level as L;
        match l {
            L::Trace => Self::Trace,
            L::Debug => Self::Debug,
            L::Info => Self::Info,
            L::Warn => Self::Warn,
            L::Error => Self::Error,
        }
    }
}

/// The 0.2 event for a notification, its objects lent from `handles` for one call. A requeue
/// is 0.3's: a 0.2 plugin cannot ask for one, and is never sent one (a resync if it were).
pub fn event(n: &Notification, handles: &mut Handles) -> v2::types::Event {
    use v2::types::{Added, Deleted, Event, Updated};
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
        Notification::Sync(object) | Notification::Requeue(object) => {
            Event::Sync(handles.lend(object))
        }
    }
}

type R<T> = wasmtime::Result<T>;
type Handle = Resource<Object>;

impl v2::types::HostObject for HostState {
    fn gvk(&mut self, this: Handle) -> R<v2::types::Gvk> {
        v3::types::HostObject::gvk(self, this).map(Into::into)
    }
    fn namespace(&mut self, this: Handle) -> R<Option<String>> {
        v3::types::HostObject::namespace(self, this)
    }
    fn name(&mut self, this: Handle) -> R<String> {
        v3::types::HostObject::name(self, this)
    }
    fn key(&mut self, this: Handle) -> R<String> {
        v3::types::HostObject::key(self, this)
    }
    fn uid(&mut self, this: Handle) -> R<String> {
        v3::types::HostObject::uid(self, this)
    }
    fn resource_version(&mut self, this: Handle) -> R<String> {
        v3::types::HostObject::resource_version(self, this)
    }
    fn label(&mut self, this: Handle, key: String) -> R<Option<String>> {
        v3::types::HostObject::label(self, this, key)
    }
    fn labels(&mut self, this: Handle) -> R<Vec<(String, String)>> {
        v3::types::HostObject::labels(self, this)
    }
    fn annotation(&mut self, this: Handle, key: String) -> R<Option<String>> {
        v3::types::HostObject::annotation(self, this, key)
    }
    fn owner_references(&mut self, this: Handle) -> R<Vec<v2::types::OwnerReference>> {
        let refs = v3::types::HostObject::owner_references(self, this)?;
        Ok(refs.into_iter().map(Into::into).collect())
    }
    fn controller(&mut self, this: Handle) -> R<Option<v2::types::OwnerReference>> {
        Ok(v3::types::HostObject::controller(self, this)?.map(Into::into))
    }
    fn owner(
        &mut self,
        this: Handle,
        gvk: v2::types::Gvk,
    ) -> R<Result<Option<Handle>, v2::types::QueryError>> {
        Ok(v3::types::HostObject::owner(self, this, gvk.into())?.map_err(Into::into))
    }
    fn field(
        &mut self,
        this: Handle,
        pointer: String,
    ) -> R<Result<Option<v2::types::Value>, v2::types::QueryError>> {
        let answer = v3::types::HostObject::field(self, this, pointer)?;
        Ok(answer.map(|v| v.map(Into::into)).map_err(Into::into))
    }
    fn json(&mut self, this: Handle) -> R<String> {
        v3::types::HostObject::json(self, this)
    }
    fn drop(&mut self, this: Handle) -> R<()> {
        v3::types::HostObject::drop(self, this)
    }
}

impl v2::types::Host for HostState {}

impl v2::cache::Host for HostState {
    fn get(
        &mut self,
        gvk: v2::types::Gvk,
        namespace: Option<String>,
        name: String,
    ) -> R<Result<Option<Handle>, v2::types::QueryError>> {
        Ok(v3::cache::Host::get(self, gvk.into(), namespace, name)?.map_err(Into::into))
    }
    fn list_objects(
        &mut self,
        gvk: v2::types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> R<Result<Vec<Handle>, v2::types::QueryError>> {
        let answer = v3::cache::Host::list_objects(self, gvk.into(), namespace, label_selector)?;
        Ok(answer.map_err(Into::into))
    }
    fn by_index(
        &mut self,
        gvk: v2::types::Gvk,
        index: String,
        value: String,
    ) -> R<Result<Vec<Handle>, v2::types::QueryError>> {
        Ok(v3::cache::Host::by_index(self, gvk.into(), index, value)?.map_err(Into::into))
    }
    fn index_keys(
        &mut self,
        gvk: v2::types::Gvk,
        index: String,
        value: String,
    ) -> R<Result<Vec<String>, v2::types::QueryError>> {
        Ok(v3::cache::Host::index_keys(self, gvk.into(), index, value)?.map_err(Into::into))
    }
    fn index_values(
        &mut self,
        gvk: v2::types::Gvk,
        index: String,
    ) -> R<Result<Vec<String>, v2::types::QueryError>> {
        Ok(v3::cache::Host::index_values(self, gvk.into(), index)?.map_err(Into::into))
    }
}

type Written = R<Result<(), v2::cluster::WriteError>>;

impl v2::cluster::Host for HostState {
    fn apply(&mut self, target: v2::cluster::Target, json: String) -> Written {
        Ok(v3::cluster::Host::apply(self, target.into(), json)?.map_err(Into::into))
    }
    fn merge_patch(&mut self, target: v2::cluster::Target, patch: String) -> Written {
        Ok(v3::cluster::Host::merge_patch(self, target.into(), patch)?.map_err(Into::into))
    }
    fn json_patch(&mut self, target: v2::cluster::Target, patch: String) -> Written {
        Ok(v3::cluster::Host::json_patch(self, target.into(), patch)?.map_err(Into::into))
    }
    fn create(&mut self, gvk: v2::types::Gvk, namespace: Option<String>, json: String) -> Written {
        Ok(v3::cluster::Host::create(self, gvk.into(), namespace, json)?.map_err(Into::into))
    }
    fn delete(&mut self, target: v2::cluster::Target, uid: Option<String>) -> Written {
        Ok(v3::cluster::Host::delete(self, target.into(), uid)?.map_err(Into::into))
    }
    fn record_event(
        &mut self,
        regarding: Handle,
        event_type: v2::cluster::EventType,
        reason: String,
        note: String,
    ) -> Written {
        let recorded =
            v3::cluster::Host::record_event(self, regarding, event_type.into(), reason, note)?;
        Ok(recorded.map_err(Into::into))
    }
    fn previous_failures(&mut self) -> R<Vec<v2::cluster::WriteFailure>> {
        let failures = v3::cluster::Host::previous_failures(self)?;
        Ok(failures.into_iter().map(Into::into).collect())
    }
}

impl v2::logging::Host for HostState {
    fn log(
        &mut self,
        level: v2::logging::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> R<()> {
        v3::logging::Host::log(self, level.into(), message, fields)
    }
}
