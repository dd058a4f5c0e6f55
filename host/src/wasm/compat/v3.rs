//! Components built for contract 0.3: its imports are answered by 0.4's implementation (0.4
//! only added to them), and its exports are called with what 0.3 knows. What 0.4 added is
//! left out on the way: a 0.3 subscription declares no fields (whole objects), a 0.3 query
//! error has no `undeclared`, and its `json` is total. Everything else is the same shape under
//! another name, converted here.

use wasmtime::Store;

use crate::informer::Notification;
use crate::wasm::bindings::exports::kubewasm::plugin::handler::HandleError;
use crate::wasm::bindings::kubewasm::plugin as v4;
use crate::wasm::bindings::v3::kubewasm::plugin as v3;
use crate::wasm::compat::Exports;
use crate::wasm::handles::Handles;
use crate::wasm::version::Contract;
use crate::wasm::{Call, HostState};

same_record!(v3::types::Gvk => v4::types::Gvk { group, version, kind });
same_record!(v4::types::Gvk => v3::types::Gvk { group, version, kind });
same_record!(v4::types::OwnerReference => v3::types::OwnerReference {
    api_version, kind, name, uid, controller,
});
same_record!(v3::types::HandleError => v4::types::HandleError { message, retry });
same_record!(v3::types::Index => v4::types::Index { gvk, name, json_pointer });
same_record!(v3::types::Schedule => v4::types::Schedule {
    name, cron, time_zone, jitter_seconds,
});
same_record!(v4::types::UserInfo => v3::types::UserInfo { username, uid, groups });
same_record!(v3::cluster::Target => v4::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(v4::cluster::Target => v3::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(v4::cluster::WriteFailure => v3::cluster::WriteFailure {
    target, verb, reason, message,
});
same_cases!(v3::types::Operation => v4::types::Operation { Create, Update, Delete, Connect });
same_cases!(v4::types::Operation => v3::types::Operation { Create, Update, Delete, Connect });
same_cases!(v3::types::FailurePolicy => v4::types::FailurePolicy { Fail, Ignore });
same_cases!(v3::types::Mutation => v4::types::Mutation { Object(j), JsonPatch(p) });
same_cases!(v4::types::Value => v3::types::Value {
    Null, Boolean(b), Integer(i), Number(n), Text(t), Json(j),
});
same_cases!(v3::cluster::EventType => v4::cluster::EventType { Normal, Warning });
same_cases!(v4::cluster::WriteError => v3::cluster::WriteError {
    Denied(m), NotLeader(m), InvalidArgument(m), TooLarge(m), Unsupported(m),
});
same_cases!(v4::state::StateError => v3::state::StateError {
    TooLarge(m), NotDeclared(m), Unavailable(m),
});
same_cases!(v3::logging::Level => v4::logging::Level { Trace, Debug, Info, Warn, Error });

impl From<v3::types::Subscription> for v4::types::Subscription {
    fn from(s: v3::types::Subscription) -> Self {
        Self {
            gvk: s.gvk.into(),
            namespaces: s.namespaces,
            label_selector: s.label_selector,
            changes: s.changes,
            fields: Vec::new(),
            metadata_only: false,
        }
    }
}

impl From<v3::types::AdmissionRule> for v4::types::AdmissionRule {
    fn from(r: v3::types::AdmissionRule) -> Self {
        Self {
            gvk: r.gvk.into(),
            operations: r.operations.into_iter().map(Into::into).collect(),
            subresources: r.subresources,
        }
    }
}

impl From<v3::types::Admission> for v4::types::Admission {
    fn from(a: v3::types::Admission) -> Self {
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

impl From<v3::types::Manifest> for v4::types::Manifest {
    fn from(m: v3::types::Manifest) -> Self {
        Self {
            subscriptions: m.subscriptions.into_iter().map(Into::into).collect(),
            queries: m.queries.into_iter().map(Into::into).collect(),
            indexes: m.indexes.into_iter().map(Into::into).collect(),
            resync_seconds: m.resync_seconds,
            schedules: m.schedules.into_iter().map(Into::into).collect(),
            state: m.state,
            admission: m.admission.map(Into::into),
        }
    }
}

impl From<v3::types::AdmissionResponse> for v4::types::AdmissionResponse {
    fn from(r: v3::types::AdmissionResponse) -> Self {
        Self {
            allowed: r.allowed,
            message: r.message,
            code: r.code,
            mutation: r.mutation.map(Into::into),
            warnings: r.warnings,
        }
    }
}

/// The 0.3 review of a 0.4 one: the same fields, its objects lent as they are.
pub fn admission_request(r: v4::types::AdmissionRequest) -> v3::types::AdmissionRequest {
    v3::types::AdmissionRequest {
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

/// The 0.3 event for a notification, its objects lent from `handles` for one call.
pub fn event(n: &Notification, handles: &mut Handles) -> v3::types::Event {
    use v3::types::{Added, Deleted, Event, Updated};
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

forward_shared!(v3);

impl v3::triggers::Host for HostState {
    fn requeue_after(&mut self, seconds: u32) -> R<Result<(), String>> {
        v4::triggers::Host::requeue_after(self, seconds)
    }
}

type Changed = R<Result<(), v3::state::StateError>>;

impl v3::state::Host for HostState {
    fn get(&mut self, key: String) -> R<Option<String>> {
        v4::state::Host::get(self, key)
    }
    fn set(&mut self, key: String, value: String) -> Changed {
        Ok(v4::state::Host::set(self, key, value)?.map_err(Into::into))
    }
    fn remove(&mut self, key: String) -> Changed {
        Ok(v4::state::Host::remove(self, key)?.map_err(Into::into))
    }
    fn keys(&mut self, prefix: String) -> R<Vec<String>> {
        v4::state::Host::keys(self, prefix)
    }
}

pre_of!(crate::wasm::bindings::v3::PluginPre<HostState>);

impl Exports for crate::wasm::bindings::v3::Plugin {
    common_exports!(Contract::V3);

    fn exports(&self, _: &Call<'_>) -> bool {
        true
    }

    fn call(
        &self,
        store: &mut Store<HostState>,
        call: Call<'_>,
    ) -> wasmtime::Result<Result<(), HandleError>> {
        let handler = self.kubewasm_plugin_handler();
        let answer = match call {
            Call::Event(n) => {
                let event = event(n, &mut store.data_mut().handles);
                handler.call_handle(store, event)
            }
            Call::Synced => handler.call_synced(store),
            Call::Tick(name) => handler.call_tick(store, name),
        };
        answer.map(|r| r.map_err(Into::into))
    }

    fn admit(
        &self,
        store: &mut Store<HostState>,
        request: v4::types::AdmissionRequest,
    ) -> Option<wasmtime::Result<v4::types::AdmissionResponse>> {
        let request = admission_request(request);
        Some(
            self.kubewasm_plugin_handler()
                .call_admit(store, &request)
                .map(Into::into),
        )
    }
}
