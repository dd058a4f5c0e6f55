//! The current contract, 0.4: its calls go straight through.

use wasmtime::Store;

use crate::wasm::bindings::exports::kubewasm::plugin::handler::HandleError;
use crate::wasm::bindings::kubewasm::plugin::types::{AdmissionRequest, AdmissionResponse};
use crate::wasm::bindings::{Plugin, PluginPre};
use crate::wasm::compat::Exports;
use crate::wasm::version::Contract;
use crate::wasm::{Call, HostState, convert};

pre_of!(PluginPre<HostState>);

impl Exports for Plugin {
    common_exports!(Contract::V4);

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
