//! Index functions: what values an object is filed under in a named index.

use serde_json::Value;

use crate::object::KubeObject;

pub use kubewasm_sdk::index::{LABEL, LABEL_KEY, NAMESPACE, OWNER_UID};

/// How an index computes an object's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexFunc {
    /// The namespace (cluster-scoped objects are not indexed).
    Namespace,
    /// Each owner reference's uid.
    OwnerUid,
    /// Each label key.
    LabelKey,
    /// Each label as `key=value`.
    Label,
    /// The scalar at an RFC 6901 JSON pointer, or each scalar of the array found there.
    JsonPointer(String),
}

/// The built-in indexes every store has.
pub fn builtins() -> [(&'static str, IndexFunc); 4] {
    [
        (NAMESPACE, IndexFunc::Namespace),
        (OWNER_UID, IndexFunc::OwnerUid),
        (LABEL_KEY, IndexFunc::LabelKey),
        (LABEL, IndexFunc::Label),
    ]
}

/// True when `name` is one of the built-in index names.
pub fn is_builtin(name: &str) -> bool {
    builtins().iter().any(|(n, _)| *n == name)
}

impl IndexFunc {
    /// True when computing values needs the object's parsed JSON.
    pub fn needs_json(&self) -> bool {
        matches!(self, Self::JsonPointer(_))
    }

    /// The values `object` is filed under. `json` is its parsed text when `needs_json`.
    pub fn values(&self, object: &KubeObject, json: Option<&Value>) -> Vec<String> {
        match self {
            Self::Namespace => object.namespace.iter().cloned().collect(),
            Self::OwnerUid => object.owners.iter().map(|o| o.uid.clone()).collect(),
            Self::LabelKey => object.labels.iter().map(|(k, _)| k.clone()).collect(),
            Self::Label => object
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
            Self::JsonPointer(pointer) => match json.and_then(|j| j.pointer(pointer)) {
                Some(Value::Array(items)) => items.iter().filter_map(scalar).collect(),
                Some(v) => scalar(v).into_iter().collect(),
                None => Vec::new(),
            },
        }
    }
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
