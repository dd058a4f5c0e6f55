//! Components built for contract 0.4: its imports are answered by 0.5's implementation (0.5
//! only added to them), and its exports are called with what 0.4 knows. A 0.4 manifest
//! declares no controller and no metrics; everything else is the same shape under another
//! name, converted here.

use wasmtime::Store;

use crate::wasm::bindings::exports::kubewasm::plugin::handler::HandleError;
use crate::wasm::bindings::kubewasm::plugin as now;
use crate::wasm::bindings::v4::kubewasm::plugin as v4;
use crate::wasm::compat::Exports;
use crate::wasm::version::Contract;
use crate::wasm::{Call, HostState};

same_record!(v4::types::Gvk => now::types::Gvk { group, version, kind });
same_record!(now::types::Gvk => v4::types::Gvk { group, version, kind });
same_record!(now::types::OwnerReference => v4::types::OwnerReference {
    api_version, kind, name, uid, controller,
});
same_record!(v4::types::HandleError => now::types::HandleError { message, retry });
same_record!(v4::types::Index => now::types::Index { gvk, name, json_pointer });
same_record!(v4::types::Schedule => now::types::Schedule {
    name, cron, time_zone, jitter_seconds,
});
same_record!(v4::types::Subscription => now::types::Subscription {
    gvk, namespaces, label_selector, changes, fields, metadata_only,
});
same_record!(now::types::UserInfo => v4::types::UserInfo { username, uid, groups });
same_record!(v4::cluster::Target => now::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(now::cluster::Target => v4::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(now::cluster::WriteFailure => v4::cluster::WriteFailure {
    target, verb, reason, message,
});
same_cases!(v4::types::Operation => now::types::Operation { Create, Update, Delete, Connect });
same_cases!(now::types::Operation => v4::types::Operation { Create, Update, Delete, Connect });
same_cases!(v4::types::FailurePolicy => now::types::FailurePolicy { Fail, Ignore });
same_cases!(v4::types::Mutation => now::types::Mutation { Object(j), JsonPatch(p) });
same_cases!(now::types::Value => v4::types::Value {
    Null, Boolean(b), Integer(i), Number(n), Text(t), Json(j),
});
same_cases!(now::types::QueryError => v4::types::QueryError {
    Denied(m), NotCached(m), UnknownIndex(m), InvalidArgument(m), TooLarge(m),
    TooManyHandles(m), Undeclared(m),
});
same_cases!(v4::cluster::EventType => now::cluster::EventType { Normal, Warning });
same_cases!(now::cluster::WriteError => v4::cluster::WriteError {
    Denied(m), NotLeader(m), InvalidArgument(m), TooLarge(m), Unsupported(m),
});
same_cases!(now::state::StateError => v4::state::StateError {
    TooLarge(m), NotDeclared(m), Unavailable(m),
});
same_cases!(v4::logging::Level => now::logging::Level { Trace, Debug, Info, Warn, Error });

manifest_since_0_3!(v4);

lend_event!(v4);

forward_shared!(v4, json: Result<String, v4::types::QueryError> = crate::wasm::compat::same_json);

forward_since_0_3!(v4);

pre_of!(crate::wasm::bindings::v4::PluginPre<HostState>);

impl Exports for crate::wasm::bindings::v4::Plugin {
    common_exports!(Contract::V4);

    fn exports(&self, call: &Call<'_>) -> bool {
        !matches!(call, Call::Reconcile(_) | Call::Finalize(_))
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
            Call::Reconcile(_) | Call::Finalize(_) => {
                return Err(wasmtime::format_err!(
                    "contract 0.4 has no controller calls"
                ));
            }
        };
        answer.map(|r| r.map_err(Into::into))
    }

    fn admit(
        &self,
        store: &mut Store<HostState>,
        request: now::types::AdmissionRequest,
    ) -> Option<wasmtime::Result<now::types::AdmissionResponse>> {
        let request = admission_request(request);
        Some(
            self.kubewasm_plugin_handler()
                .call_admit(store, &request)
                .map(Into::into),
        )
    }
}
