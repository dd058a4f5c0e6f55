//! Components built for contract 0.3: its imports are answered by the current implementation
//! (0.4 and 0.5 only added to them), and its exports are called with what 0.3 knows. What
//! came later is left out on the way: a 0.3 subscription declares no fields (whole objects),
//! a 0.3 query error has no `undeclared`, its `json` is total, and its manifest has no
//! controller and no metrics. Everything else is the same shape under
//! another name, converted here.

use wasmtime::Store;

use crate::wasm::bindings::exports::kubewasm::plugin::handler::HandleError;
use crate::wasm::bindings::kubewasm::plugin as now;
use crate::wasm::bindings::v3::kubewasm::plugin as v3;
use crate::wasm::compat::Exports;
use crate::wasm::version::Contract;
use crate::wasm::{Call, HostState};

same_record!(v3::types::Gvk => now::types::Gvk { group, version, kind });
same_record!(now::types::Gvk => v3::types::Gvk { group, version, kind });
same_record!(now::types::OwnerReference => v3::types::OwnerReference {
    api_version, kind, name, uid, controller,
});
same_record!(v3::types::HandleError => now::types::HandleError { message, retry });
same_record!(v3::types::Index => now::types::Index { gvk, name, json_pointer });
same_record!(v3::types::Schedule => now::types::Schedule {
    name, cron, time_zone, jitter_seconds,
});
same_record!(now::types::UserInfo => v3::types::UserInfo { username, uid, groups });
same_record!(v3::cluster::Target => now::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(now::cluster::Target => v3::cluster::Target {
    gvk, namespace, name, subresource,
});
same_record!(now::cluster::WriteFailure => v3::cluster::WriteFailure {
    target, verb, reason, message,
});
same_cases!(v3::types::Operation => now::types::Operation { Create, Update, Delete, Connect });
same_cases!(now::types::Operation => v3::types::Operation { Create, Update, Delete, Connect });
same_cases!(v3::types::FailurePolicy => now::types::FailurePolicy { Fail, Ignore });
same_cases!(v3::types::Mutation => now::types::Mutation { Object(j), JsonPatch(p) });
same_cases!(now::types::Value => v3::types::Value {
    Null, Boolean(b), Integer(i), Number(n), Text(t), Json(j),
});
same_cases!(v3::cluster::EventType => now::cluster::EventType { Normal, Warning });
same_cases!(now::cluster::WriteError => v3::cluster::WriteError {
    Denied(m), NotLeader(m), InvalidArgument(m), TooLarge(m), Unsupported(m),
});
same_cases!(now::state::StateError => v3::state::StateError {
    TooLarge(m), NotDeclared(m), Unavailable(m),
});
same_cases!(v3::logging::Level => now::logging::Level { Trace, Debug, Info, Warn, Error });

impl From<v3::types::Subscription> for now::types::Subscription {
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

manifest_since_0_3!(v3);

lend_event!(v3);

forward_shared!(v3);

forward_since_0_3!(v3);

pre_of!(crate::wasm::bindings::v3::PluginPre<HostState>);

impl Exports for crate::wasm::bindings::v3::Plugin {
    common_exports!(Contract::V3);

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
                    "contract 0.3 has no controller calls"
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
