//! A plugin's manifest, validated: what it subscribes to, queries and indexes.

use std::time::Duration;

use kubewasm_sdk::selector::Selector;

use crate::gvk::Gvk;
use crate::informer::Filter;
use crate::informer::index::{IndexFunc, is_builtin};
use crate::wasm::bindings::kubewasm::plugin::types as wit;
use crate::wasm::{convert, limits};

/// A manifest field that is not acceptable, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("manifest field `{field}`: {reason}")]
pub struct ManifestError {
    /// Path of the field, for example `subscriptions[0].label-selector`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// A field index a plugin declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredIndex {
    /// The indexed resource type.
    pub gvk: Gvk,
    /// The index name.
    pub name: String,
    /// How values are computed.
    pub func: IndexFunc,
}

/// A validated plugin manifest.
#[derive(Debug, Clone)]
pub struct PluginManifest {
    /// Subscribed resource types with their filters.
    pub subscriptions: Vec<(Gvk, Filter)>,
    /// Every resource type the plugin needs cached: subscribed and queried, deduplicated.
    pub cached: Vec<Gvk>,
    /// Declared field indexes.
    pub indexes: Vec<DeclaredIndex>,
    /// Resync period, if any.
    pub resync: Option<Duration>,
}

fn error(field: String, reason: impl Into<String>) -> ManifestError {
    ManifestError {
        field,
        reason: reason.into(),
    }
}

fn check_gvk(field: String, g: &wit::Gvk) -> Result<Gvk, ManifestError> {
    if g.version.is_empty() || g.kind.is_empty() {
        return Err(error(field, "version and kind must not be empty"));
    }
    Ok(convert::gvk(g))
}

impl PluginManifest {
    /// Validates what a plugin's `describe` returned.
    pub fn validate(m: &wit::Manifest) -> Result<Self, ManifestError> {
        let mut subscriptions = Vec::new();
        let mut cached: Vec<Gvk> = Vec::new();
        for (i, s) in m.subscriptions.iter().enumerate() {
            let gvk = check_gvk(format!("subscriptions[{i}].gvk"), &s.gvk)?;
            let selector = match &s.label_selector {
                Some(text) => limits::selector(text)
                    .map_err(|e| error(format!("subscriptions[{i}].label-selector"), e))?,
                None => Selector::everything(),
            };
            if !cached.contains(&gvk) {
                cached.push(gvk.clone());
            }
            subscriptions.push((
                gvk,
                Filter {
                    namespaces: s.namespaces.clone(),
                    selector,
                    keys: None,
                },
            ));
        }
        for (i, q) in m.queries.iter().enumerate() {
            let gvk = check_gvk(format!("queries[{i}]"), q)?;
            if !cached.contains(&gvk) {
                cached.push(gvk);
            }
        }
        let mut indexes = Vec::new();
        for (i, x) in m.indexes.iter().enumerate() {
            let gvk = check_gvk(format!("indexes[{i}].gvk"), &x.gvk)?;
            if !cached.contains(&gvk) {
                return Err(error(
                    format!("indexes[{i}].gvk"),
                    format!("{gvk} is neither subscribed nor queried"),
                ));
            }
            if x.name.is_empty() || is_builtin(&x.name) {
                return Err(error(
                    format!("indexes[{i}].name"),
                    format!("{:?} is empty or a built-in index name", x.name),
                ));
            }
            if !x.json_pointer.starts_with('/') {
                return Err(error(
                    format!("indexes[{i}].json-pointer"),
                    format!(
                        "{:?} is not a JSON pointer (it must start with `/`)",
                        x.json_pointer
                    ),
                ));
            }
            indexes.push(DeclaredIndex {
                gvk,
                name: x.name.clone(),
                func: IndexFunc::JsonPointer(x.json_pointer.clone()),
            });
        }
        let resync = (m.resync_seconds > 0).then(|| Duration::from_secs(m.resync_seconds.into()));
        Ok(Self {
            subscriptions,
            cached,
            indexes,
            resync,
        })
    }
}
