//! The host side of the `object` resource: what a plugin reads through an object handle.

use std::borrow::Cow;
use std::sync::Arc;

use wasmtime::component::Resource;

use crate::object::{Keep, KubeObject, OwnerRef, pointer};
use crate::wasm::HostState;
use crate::wasm::bindings::kubewasm::plugin::types::{
    self, Gvk as WitGvk, HostObject, Object, OwnerReference, QueryError, Value,
};

impl HostState {
    fn object(&self, handle: &Resource<Object>) -> wasmtime::Result<&Arc<KubeObject>> {
        self.handles.get(handle)
    }

    /// What the plugin declared it reads of `object`'s type, when that is not all of it: its
    /// reads are checked against this, whatever other plugins made the cache keep, so its
    /// answers never depend on who else is loaded.
    fn declared(&self, handle: &Resource<Object>, object: &KubeObject) -> Option<&Keep> {
        if self.ctx.scopes.is_empty() || self.handles.is_uncached(handle) {
            return None;
        }
        let keep = self.ctx.scopes.get(object.gvk())?.keep();
        (!keep.is_whole()).then_some(keep)
    }
}

fn owner(r: OwnerRef<'_>) -> OwnerReference {
    OwnerReference {
        api_version: r.api_version.to_owned(),
        kind: r.kind.to_owned(),
        name: r.name.to_owned(),
        uid: r.uid.to_owned(),
        controller: r.controller,
    }
}

/// The WIT value for a JSON value.
fn value(v: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::Null,
        J::Bool(b) => Value::Boolean(b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::Text(s),
        other @ (J::Array(_) | J::Object(_)) => Value::Json(other.to_string()),
    }
}

impl HostObject for HostState {
    fn gvk(&mut self, this: Resource<Object>) -> wasmtime::Result<WitGvk> {
        let gvk = &self.object(&this)?.gvk();
        Ok(WitGvk {
            group: gvk.group.clone(),
            version: gvk.version.clone(),
            kind: gvk.kind.clone(),
        })
    }

    fn namespace(&mut self, this: Resource<Object>) -> wasmtime::Result<Option<String>> {
        Ok(self.object(&this)?.namespace().map(str::to_owned))
    }

    fn name(&mut self, this: Resource<Object>) -> wasmtime::Result<String> {
        Ok(self.object(&this)?.name().to_owned())
    }

    fn key(&mut self, this: Resource<Object>) -> wasmtime::Result<String> {
        Ok(self.object(&this)?.key().to_owned())
    }

    fn uid(&mut self, this: Resource<Object>) -> wasmtime::Result<String> {
        Ok(self.object(&this)?.uid().to_owned())
    }

    fn resource_version(&mut self, this: Resource<Object>) -> wasmtime::Result<String> {
        Ok(self.object(&this)?.resource_version().to_owned())
    }

    fn label(&mut self, this: Resource<Object>, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.object(&this)?.label(&key).map(str::to_owned))
    }

    fn labels(&mut self, this: Resource<Object>) -> wasmtime::Result<Vec<(String, String)>> {
        let _call = self.host_calls.start();
        Ok(self
            .object(&this)?
            .labels()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }

    fn annotation(
        &mut self,
        this: Resource<Object>,
        key: String,
    ) -> wasmtime::Result<Option<String>> {
        let _call = self.host_calls.start();
        let path = [
            Cow::Borrowed("metadata"),
            Cow::Borrowed("annotations"),
            Cow::Owned(key),
        ];
        Ok(match self.object(&this)?.field(&path) {
            Some(serde_json::Value::String(s)) => Some(s),
            _ => None,
        })
    }

    fn owner_references(
        &mut self,
        this: Resource<Object>,
    ) -> wasmtime::Result<Vec<OwnerReference>> {
        let _call = self.host_calls.start();
        Ok(self.object(&this)?.owners().map(owner).collect())
    }

    fn controller(&mut self, this: Resource<Object>) -> wasmtime::Result<Option<OwnerReference>> {
        Ok(self.object(&this)?.controller().map(owner))
    }

    fn owner(
        &mut self,
        this: Resource<Object>,
        gvk: WitGvk,
    ) -> wasmtime::Result<Result<Option<Resource<Object>>, QueryError>> {
        let object = self.object(&this)?.clone();
        Ok(self.owner_of(&object, &gvk))
    }

    fn field(
        &mut self,
        this: Resource<Object>,
        pointer: String,
    ) -> wasmtime::Result<Result<Option<Value>, QueryError>> {
        let _call = self.host_calls.start();
        let tokens = match pointer::tokens(&pointer) {
            Ok(tokens) => tokens,
            Err(e) => return Ok(Err(QueryError::InvalidArgument(e.to_string()))),
        };
        let object = self.object(&this)?;
        if let Some(keep) = self.declared(&this, object)
            && !keep.holds(&pointer)
        {
            return Ok(Err(QueryError::Undeclared(format!(
                "{:?} of {} is outside what plugin {} declared it reads ({}): add it to the subscription's fields",
                crate::text::cut(pointer, 256),
                object.gvk(),
                self.ctx.name,
                keep.described()
            ))));
        }
        Ok(Ok(object.field(&tokens).map(value)))
    }

    fn json(&mut self, this: Resource<Object>) -> wasmtime::Result<Result<String, QueryError>> {
        let _call = self.host_calls.start();
        let object = self.object(&this)?;
        if let Some(keep) = self.declared(&this, object) {
            return Ok(Err(QueryError::Undeclared(format!(
                "the whole {} is outside what plugin {} declared it reads ({}): read fields one by one, or declare no fields to receive whole objects",
                object.gvk(),
                self.ctx.name,
                keep.described()
            ))));
        }
        Ok(Ok(object.json()))
    }

    fn drop(&mut self, this: Resource<Object>) -> wasmtime::Result<()> {
        self.handles.drop_owned(this)
    }
}

impl types::Host for HostState {}
