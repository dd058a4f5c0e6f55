//! The host side of the `cluster` import. Writes are part of the 0.2 contract but not built
//! yet (issue 18): every write answers `unsupported`, so a plugin that acts fails visibly
//! instead of believing it wrote.

use wasmtime::component::Resource;

use crate::wasm::HostState;
use crate::wasm::bindings::kubewasm::plugin::cluster::{
    EventType, Host, Target, WriteError, WriteFailure,
};
use crate::wasm::bindings::kubewasm::plugin::types::{Gvk, Object};

/// The answer to every write until writes are built.
fn unsupported(verb: &str) -> WriteError {
    WriteError::Unsupported(format!(
        "{verb}: this host does not write to the cluster yet; the write was not staged"
    ))
}

impl Host for HostState {
    fn apply(&mut self, _: Target, _: String) -> wasmtime::Result<Result<(), WriteError>> {
        Ok(Err(unsupported("apply")))
    }

    fn merge_patch(&mut self, _: Target, _: String) -> wasmtime::Result<Result<(), WriteError>> {
        Ok(Err(unsupported("merge-patch")))
    }

    fn json_patch(&mut self, _: Target, _: String) -> wasmtime::Result<Result<(), WriteError>> {
        Ok(Err(unsupported("json-patch")))
    }

    fn create(
        &mut self,
        _: Gvk,
        _: Option<String>,
        _: String,
    ) -> wasmtime::Result<Result<(), WriteError>> {
        Ok(Err(unsupported("create")))
    }

    fn delete(&mut self, _: Target, _: Option<String>) -> wasmtime::Result<Result<(), WriteError>> {
        Ok(Err(unsupported("delete")))
    }

    fn record_event(
        &mut self,
        regarding: Resource<Object>,
        _: EventType,
        _: String,
        _: String,
    ) -> wasmtime::Result<Result<(), WriteError>> {
        self.handles.get(&regarding)?;
        Ok(Err(unsupported("record-event")))
    }

    fn previous_failures(&mut self) -> wasmtime::Result<Vec<WriteFailure>> {
        Ok(Vec::new())
    }
}
