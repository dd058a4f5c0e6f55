//! The host side of the `cache` import: queries answered from the granted informers' stores.

use std::sync::Arc;

use kubewasm_sdk::selector::Selector;

use crate::informer::Informer;
use crate::informer::index::is_builtin;
use crate::informer::store::{MoreThan, StoreError};
use crate::object::{KubeObject, with_object_key};
use crate::source::Scope;
use crate::wasm::bindings::kubewasm::plugin::{cache, types};
use crate::wasm::handles::TooMany;
use crate::wasm::{HostState, convert, limits};
use wasmtime::component::Resource;

use types::{Gvk as WitGvk, Object, QueryError};

impl HostState {
    /// The informer for `gvk` if this plugin may query it, and the objects of it the plugin
    /// sees when that is not all of them.
    fn granted(&self, gvk: &WitGvk) -> Result<(&Arc<Informer>, Option<&Scope>), QueryError> {
        for (what, part) in [
            ("group", &gvk.group),
            ("version", &gvk.version),
            ("kind", &gvk.kind),
        ] {
            limits::argument(what, part).map_err(QueryError::InvalidArgument)?;
        }
        // A plugin has a few grants: comparing in place spares building a key per query.
        let same = |g: &crate::gvk::Gvk| {
            short_eq(&g.kind, &gvk.kind)
                && short_eq(&g.version, &gvk.version)
                && short_eq(&g.group, &gvk.group)
        };
        if let Some((_, informer)) = self.ctx.grants.iter().find(|(g, _)| same(g)) {
            let scope = match self.ctx.scopes.is_empty() {
                true => None,
                false => self
                    .ctx
                    .scopes
                    .iter()
                    .find(|(g, _)| same(g))
                    .map(|(_, s)| s),
            };
            return Ok((informer, scope));
        }
        let gvk = convert::gvk(gvk);
        if self.ctx.denied.contains(&gvk) || is_secret(&gvk) {
            let first = self
                .ctx
                .denial_logged
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(gvk.clone());
            if first {
                tracing::warn!(plugin = %self.ctx.name, resource = %gvk, "query denied: the configuration does not grant this type to the plugin (logged once)");
            }
            let why = if is_secret(&gvk) {
                "Secrets are readable only by name, when the operator grants them"
            } else {
                "the operator's configuration does not grant this type to the plugin"
            };
            return Err(QueryError::Denied(format!("{gvk}: {why}")));
        }
        Err(QueryError::NotCached(format!(
            "plugin {} has no cache of {gvk}: declare it in its manifest's subscriptions or queries",
            self.ctx.name
        )))
    }

    /// The error for a query reaching outside the objects of `gvk` the plugin sees.
    fn outside(&self, gvk: &WitGvk, scope: &Scope, what: &str) -> QueryError {
        QueryError::NotCached(format!(
            "plugin {} sees {} in {scope} only (what its subscriptions name), and {what}: declare the type in the manifest's queries to read all of it",
            self.ctx.name,
            convert::gvk(gvk)
        ))
    }

    /// An error unless `namespace` (`None`: a cluster-scoped name) is in `scope`.
    fn in_namespaces(
        &self,
        gvk: &WitGvk,
        scope: &Scope,
        namespace: Option<&str>,
    ) -> Result<(), QueryError> {
        if scope.holds_namespace(namespace) {
            return Ok(());
        }
        let place = match namespace {
            Some(ns) => format!("namespace {ns} is not among them"),
            None => "a cluster-scoped name is in none of its namespaces".to_owned(),
        };
        Err(self.outside(gvk, scope, &place))
    }

    /// `found`, the cache's answer for `namespace/name`, as far as `scope` can tell it.
    fn in_scope(
        &self,
        gvk: &WitGvk,
        scope: Option<&Scope>,
        namespace: Option<&str>,
        found: Option<Arc<KubeObject>>,
    ) -> Result<Option<Arc<KubeObject>>, QueryError> {
        let Some(scope) = scope else {
            return Ok(found);
        };
        self.in_namespaces(gvk, scope, namespace)?;
        match found {
            Some(o) if !scope.admits(&o) => {
                Err(self.outside(gvk, scope, &format!("{} does not match", o.key())))
            }
            // Absent from a cache that keeps only matching objects: it may exist unmatched.
            None if scope.selector().is_some() => Err(self.outside(
                gvk,
                scope,
                "an object missing from it may exist without matching",
            )),
            found => Ok(found),
        }
    }

    /// Keeps only what the plugin may see: for Secrets, the granted names.
    fn visible(&self, mut objects: Vec<Arc<KubeObject>>) -> Vec<Arc<KubeObject>> {
        objects.retain(|o| self.may_see(o));
        objects
    }

    /// False for a Secret the plugin was not granted by name.
    fn may_see(&self, o: &KubeObject) -> bool {
        !is_secret(o.gvk()) || self.ctx.secrets.contains(o.key())
    }

    /// The store's name of index `name` on `gvk` for this plugin: a built-in one, or one the
    /// plugin declared; any other name is unknown (another plugin's indexes included).
    fn index_name(&self, gvk: &WitGvk, name: &str) -> Result<String, QueryError> {
        if is_builtin(name) {
            return Ok(name.to_owned());
        }
        let gvk = convert::gvk(gvk);
        self.ctx
            .indexes
            .get(&(gvk.clone(), name.to_owned()))
            .cloned()
            .ok_or_else(|| {
                QueryError::UnknownIndex(format!(
                    "no index named {name:?} on {gvk}: the built-in ones are {}; declare others in the plugin's manifest",
                    kubewasm_sdk::index::BUILTIN.join(", ")
                ))
            })
    }

    /// The informer of `gvk`, the store's name of its index `index` and the plugin's scope
    /// of the type (when not everything), once the arguments (`value` too, when the query
    /// has one) passed their size checks and the type is granted.
    fn indexed(
        &self,
        gvk: &WitGvk,
        index: &str,
        value: Option<&str>,
    ) -> Result<(&Arc<Informer>, String, Option<&Scope>), QueryError> {
        arg("index", index)?;
        if let Some(value) = value {
            arg("value", value)?;
        }
        let (informer, scope) = self.granted(gvk)?;
        Ok((informer, self.index_name(gvk, index)?, scope))
    }

    /// `strings` unless together they exceed the plugin's query size limit.
    fn answer_strings(&self, strings: Vec<String>) -> Result<Vec<String>, QueryError> {
        let bytes: usize = strings.iter().map(String::len).sum();
        let limit = self.ctx.limits.query_bytes;
        if bytes > limit {
            return Err(QueryError::TooLarge(format!(
                "{} values of {bytes} bytes exceed the limit of {limit} bytes per query",
                strings.len()
            )));
        }
        Ok(strings)
    }

    /// A handle to `object` if the plugin may see it, unless it would hold too many.
    fn answer_one(
        &mut self,
        object: Option<Arc<KubeObject>>,
    ) -> Result<Option<Resource<Object>>, QueryError> {
        let Some(object) = object.filter(|o| self.may_see(o)) else {
            return Ok(None);
        };
        let limit = self.ctx.limits.handles;
        Ok(Some(self.handles.give_one(object, limit)?))
    }

    /// Handles to the objects the plugin may see, unless it would hold too many.
    fn answer(
        &mut self,
        objects: Vec<Arc<KubeObject>>,
    ) -> Result<Vec<Resource<Object>>, QueryError> {
        let objects = self.visible(objects);
        let limit = self.ctx.limits.handles;
        Ok(self.handles.give(objects, limit)?)
    }
}

impl From<TooMany> for QueryError {
    fn from(e: TooMany) -> Self {
        QueryError::TooManyHandles(e.to_string())
    }
}

/// True for core `Secret`s.
pub fn is_secret(gvk: &crate::gvk::Gvk) -> bool {
    gvk.group.is_empty() && gvk.kind == "Secret"
}

/// `a == b`, compared in line: what queries compare is short (type names, within the
/// argument limit; uids), and for a type name's few bytes a call to `memcmp` cost more than
/// the comparison (about 80 ns per `get`).
fn short_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
}

/// Refuses an over-long query argument before any work is done with it.
fn arg(what: &str, value: &str) -> Result<(), QueryError> {
    limits::argument(what, value)
        .map(drop)
        .map_err(QueryError::InvalidArgument)
}

fn index_error(e: StoreError) -> QueryError {
    QueryError::InvalidArgument(e.to_string())
}

impl cache::Host for HostState {
    fn get(
        &mut self,
        gvk: WitGvk,
        namespace: Option<String>,
        name: String,
    ) -> wasmtime::Result<Result<Option<Resource<Object>>, QueryError>> {
        Ok(self.get_object(&gvk, namespace.as_deref(), &name))
    }

    fn list_objects(
        &mut self,
        gvk: WitGvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> wasmtime::Result<Result<Vec<Resource<Object>>, QueryError>> {
        let _call = self.host_calls.start();
        Ok(self.list(&gvk, namespace.as_deref(), label_selector.as_deref()))
    }

    fn by_index(
        &mut self,
        gvk: WitGvk,
        index: String,
        value: String,
    ) -> wasmtime::Result<Result<Vec<Resource<Object>>, QueryError>> {
        let _call = self.host_calls.start();
        Ok(self.by_index_objects(&gvk, &index, &value))
    }

    fn index_keys(
        &mut self,
        gvk: WitGvk,
        index: String,
        value: String,
    ) -> wasmtime::Result<Result<Vec<String>, QueryError>> {
        let _call = self.host_calls.start();
        Ok(self.keys(&gvk, &index, &value))
    }

    fn index_values(
        &mut self,
        gvk: WitGvk,
        index: String,
    ) -> wasmtime::Result<Result<Vec<String>, QueryError>> {
        let _call = self.host_calls.start();
        Ok(self.values(&gvk, &index))
    }
}

impl HostState {
    fn get_object(
        &mut self,
        gvk: &WitGvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Resource<Object>>, QueryError> {
        let (informer, scope) = self.granted(gvk)?;
        arg("name", name)?;
        if let Some(ns) = namespace {
            arg("namespace", ns)?;
        }
        let found = with_object_key(namespace, name, |key| informer.store().get(key));
        let found = self.in_scope(gvk, scope, namespace, found)?;
        self.answer_one(found)
    }

    /// `object`'s controller of type `gvk`, from the cache, if its uid still matches.
    pub(super) fn owner_of(
        &mut self,
        object: &KubeObject,
        gvk: &WitGvk,
    ) -> Result<Option<Resource<Object>>, QueryError> {
        let (informer, scope) = self.granted(gvk)?;
        let store = informer.store();
        let Some(owner) = object.owners().find(|r| {
            r.controller
                && short_eq(r.kind, &gvk.kind)
                && short_eq(crate::gvk::split_api_version(r.api_version).0, &gvk.group)
        }) else {
            return Ok(None);
        };
        // Owners live in the object's namespace, or are cluster-scoped.
        let found = with_object_key(object.namespace(), owner.name, |key| store.get(key))
            .or_else(|| object.namespace().and_then(|_| store.get(owner.name)))
            .filter(|o| short_eq(o.uid(), owner.uid));
        let found = self.in_scope(gvk, scope, object.namespace(), found)?;
        self.answer_one(found)
    }

    fn list(
        &mut self,
        gvk: &WitGvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Resource<Object>>, QueryError> {
        let selector = match label_selector {
            Some(s) => limits::selector(s).map_err(QueryError::InvalidArgument)?,
            None => Selector::everything(),
        };
        if let Some(ns) = namespace {
            arg("namespace", ns)?;
        }
        let limit = self.ctx.limits.handles;
        let held = self.handles.owned();
        let (informer, scope) = self.granted(gvk)?;
        // Every namespace (`None`) is answered within the scope's.
        if let Some(scope) = scope
            && namespace.is_some()
        {
            self.in_namespaces(gvk, scope, namespace)?;
        }
        // Counted while scanning, so an answer past the limit is refused before it is sorted.
        let objects = informer
            .store()
            .select(
                namespace,
                &selector,
                |o| self.may_see(o) && scope.is_none_or(|s| s.admits(o)),
                limit.saturating_sub(held),
            )
            .map_err(|MoreThan(room)| {
                QueryError::TooManyHandles(format!(
                    "more than {room} objects match, which would exceed the limit of {limit} object handles held at once ({held} held); drop some first or narrow the selector"
                ))
            })?;
        self.answer(objects)
    }

    fn by_index_objects(
        &mut self,
        gvk: &WitGvk,
        index: &str,
        value: &str,
    ) -> Result<Vec<Resource<Object>>, QueryError> {
        let (informer, index, scope) = self.indexed(gvk, index, Some(value))?;
        let mut objects = informer
            .store()
            .by_index(&index, value)
            .map_err(index_error)?;
        if let Some(scope) = scope {
            objects.retain(|o| scope.admits(o));
        }
        self.answer(objects)
    }

    fn keys(&self, gvk: &WitGvk, index: &str, value: &str) -> Result<Vec<String>, QueryError> {
        let (informer, index, scope) = self.indexed(gvk, index, Some(value))?;
        let mut keys = informer
            .store()
            .index_keys(&index, value)
            .map_err(index_error)?;
        if is_secret(&convert::gvk(gvk)) {
            keys.retain(|k| self.ctx.secrets.contains(k));
        }
        if let Some(scope) = scope {
            let store = informer.store();
            keys.retain(|k| store.get(k).is_some_and(|o| scope.admits(&o)));
        }
        self.answer_strings(keys)
    }

    fn values(&self, gvk: &WitGvk, index: &str) -> Result<Vec<String>, QueryError> {
        arg("index", index)?;
        if is_secret(&convert::gvk(gvk)) {
            // Values could reveal ungranted Secrets (their names, labels, fields).
            return Err(QueryError::Denied(
                "index values are not available for Secrets".into(),
            ));
        }
        let (informer, index, scope) = self.indexed(gvk, index, None)?;
        let mut values = informer.store().index_values(&index).map_err(index_error)?;
        if let Some(scope) = scope {
            // Only values objects in the scope have.
            let store = informer.store();
            values.retain(|v| {
                store
                    .by_index(&index, v)
                    .is_ok_and(|objects| objects.iter().any(|o| scope.admits(o)))
            });
        }
        self.answer_strings(values)
    }
}

#[cfg(test)]
mod tests {
    use super::short_eq;

    #[test]
    fn short_eq_is_string_equality() {
        for (a, b) in [
            ("Pod", "Pod"),
            ("", ""),
            ("Pod", "Pad"),
            ("Pod", "Pods"),
            ("", "v1"),
        ] {
            assert_eq!(short_eq(a, b), a == b, "{a:?} against {b:?}");
        }
    }
}
