//! Components built for contract 0.2: its imports are answered by the current implementation
//! (0.3, 0.4 and 0.5 only added to them), and its exports are called with what 0.2 knows. The
//! types of the two contracts are the same shapes under two names; this file converts between
//! them and holds nothing else.

use wasmtime::Store;

use crate::informer::Notification;
use crate::wasm::bindings::exports::kubewasm::plugin::handler::HandleError;
use crate::wasm::bindings::kubewasm::plugin as now;
use crate::wasm::bindings::v2::kubewasm::plugin as v2;
use crate::wasm::compat::Exports;
use crate::wasm::handles::Handles;
use crate::wasm::version::Contract;
use crate::wasm::{Call, HostState};

same_record!(v2::types::Gvk => now::types::Gvk { group, version, kind });
same_record!(now::types::Gvk => v2::types::Gvk { group, version, kind });
same_record!(now::types::OwnerReference => v2::types::OwnerReference {
    api_version, kind, name, uid, controller,
});
same_record!(v2::types::HandleError => now::types::HandleError { message, retry });
same_record!(v2::types::Index => now::types::Index { gvk, name, json_pointer });
same_record!(v2::cluster::Target => now::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(now::cluster::Target => v2::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(now::cluster::WriteFailure => v2::cluster::WriteFailure {
    target, verb, reason, message,
});

same_cases!(now::types::Value => v2::types::Value {
    Null, Boolean(b), Integer(i), Number(n), Text(t), Json(j),
});
same_cases!(now::cluster::WriteError => v2::cluster::WriteError {
    Denied(m), NotLeader(m), InvalidArgument(m), TooLarge(m), Unsupported(m),
});
same_cases!(v2::cluster::EventType => now::cluster::EventType { Normal, Warning });
same_cases!(v2::logging::Level => now::logging::Level { Trace, Debug, Info, Warn, Error });

impl From<v2::types::Subscription> for now::types::Subscription {
    fn from(s: v2::types::Subscription) -> Self {
        Self {
            gvk: s.gvk.into(),
            namespaces: s.namespaces,
            label_selector: s.label_selector,
            changes: Vec::new(),
            fields: Vec::new(),
            metadata_only: false,
        }
    }
}

impl From<v2::types::Manifest> for now::types::Manifest {
    fn from(m: v2::types::Manifest) -> Self {
        Self {
            subscriptions: m.subscriptions.into_iter().map(Into::into).collect(),
            queries: m.queries.into_iter().map(Into::into).collect(),
            indexes: m.indexes.into_iter().map(Into::into).collect(),
            resync_seconds: m.resync_seconds,
            schedules: Vec::new(),
            state: false,
            admission: None,
            controller: None,
            metrics: Vec::new(),
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

forward_shared!(v2);

pre_of!(crate::wasm::bindings::v2::PluginPre<HostState>);

impl Exports for crate::wasm::bindings::v2::Plugin {
    common_exports!(Contract::V2);

    fn exports(&self, call: &Call<'_>) -> bool {
        matches!(call, Call::Event(_))
    }

    fn call(
        &self,
        store: &mut Store<HostState>,
        call: Call<'_>,
    ) -> wasmtime::Result<Result<(), HandleError>> {
        let Call::Event(n) = call else {
            return Ok(Ok(()));
        };
        let event = event(n, &mut store.data_mut().handles);
        self.kubewasm_plugin_handler()
            .call_handle(store, event)
            .map(|r| r.map_err(Into::into))
    }

    fn admit(
        &self,
        _: &mut Store<HostState>,
        _: now::types::AdmissionRequest,
    ) -> Option<wasmtime::Result<now::types::AdmissionResponse>> {
        None
    }
}
