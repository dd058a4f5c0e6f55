//! The current contract, 0.5: its calls go straight through.

use wasmtime::Store;

use crate::wasm::bindings::exports::kubewasm::plugin::handler::HandleError;
use crate::wasm::bindings::kubewasm::plugin::types::{
    AdmissionRequest, AdmissionResponse, ObjectKey,
};
use crate::wasm::bindings::{Plugin, PluginPre};
use crate::wasm::compat::Exports;
use crate::wasm::version::Contract;
use crate::wasm::{Call, HostState, convert};

pre_of!(PluginPre<HostState>);

/// The WIT key of a cache key (`namespace/name`, or `name`).
fn object_key(key: &str) -> ObjectKey {
    let (namespace, name) = crate::object::split_key(key);
    ObjectKey {
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    }
}

impl Exports for Plugin {
    common_exports!(Contract::V5);

    fn exports(&self, _: &Call<'_>) -> bool {
        true
    }

    fn call(
        &self,
        store: &mut Store<HostState>,
        call: Call<'_>,
    ) -> wasmtime::Result<Result<(), HandleError>> {
        let handler = self.kubewasm_plugin_handler();
        match call {
            Call::Event(n) => {
                let event = convert::event(n, &mut store.data_mut().handles);
                handler.call_handle(store, event)
            }
            Call::Synced => handler.call_synced(store),
            Call::Tick(name) => handler.call_tick(store, name),
            Call::Reconcile(key) => handler.call_reconcile(store, &object_key(key)),
            Call::Finalize(key) => handler.call_finalize(store, &object_key(key)),
        }
    }

    fn admit(
        &self,
        store: &mut Store<HostState>,
        request: AdmissionRequest,
    ) -> Option<wasmtime::Result<AdmissionResponse>> {
        Some(self.kubewasm_plugin_handler().call_admit(store, &request))
    }
}
