//! Kubernetes objects as the cache holds them: parsed once, shared by `Arc`, never re-serialized.

use serde_json::{Map, Value};

use crate::gvk::Gvk;

pub mod pointer;
mod raw;

/// The annotation `kubectl apply` writes: a full copy of the object, dropped by default.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Why a JSON value is not a Kubernetes object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ObjectError {
    /// The value is not a JSON object.
    #[error("not an object (a mapping with apiVersion, kind and metadata)")]
    NotAnObject,
    /// A required field is absent or empty.
    #[error("missing field `{0}`")]
    Missing(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// Path of the field, for example `metadata.labels`.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
}

/// A reference to an owner, from `metadata.ownerReferences[]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    /// The owner's `apiVersion`.
    pub api_version: String,
    /// The owner's kind.
    pub kind: String,
    /// The owner's name.
    pub name: String,
    /// The owner's uid.
    pub uid: String,
    /// True when this owner is the managing controller.
    pub controller: bool,
}

/// What to drop from every object before it is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transform {
    /// Drop `metadata.managedFields` (often half of a pod's bytes).
    pub drop_managed_fields: bool,
    /// Drop the `kubectl.kubernetes.io/last-applied-configuration` annotation.
    pub drop_last_applied: bool,
}

impl Default for Transform {
    fn default() -> Self {
        Self {
            drop_managed_fields: true,
            drop_last_applied: true,
        }
    }
}

impl Transform {
    /// Keeps every object as received.
    pub fn keep_everything() -> Self {
        Self {
            drop_managed_fields: false,
            drop_last_applied: false,
        }
    }

    /// Removes what this transform drops from an object's JSON value.
    pub fn apply(&self, value: &mut Map<String, Value>) {
        let Some(Value::Object(meta)) = value.get_mut("metadata") else {
            return;
        };
        if self.drop_managed_fields {
            meta.remove("managedFields");
        }
        if self.drop_last_applied
            && let Some(Value::Object(annotations)) = meta.get_mut("annotations")
        {
            annotations.remove(LAST_APPLIED_ANNOTATION);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
}

/// One Kubernetes object: the metadata handlers filter on, plus the JSON text.
#[derive(Debug, PartialEq, Eq)]
pub struct KubeObject {
    /// Resource type.
    pub gvk: Gvk,
    /// Cache key: `namespace/name`, or `name` when cluster-scoped.
    pub key: String,
    /// `metadata.namespace`, none for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (empty when absent).
    pub uid: String,
    /// `metadata.resourceVersion` (empty when absent).
    pub resource_version: String,
    /// `metadata.labels`, sorted by key.
    pub labels: Vec<(String, String)>,
    /// `metadata.ownerReferences`.
    pub owners: Vec<OwnerRef>,
    /// The object as JSON text, after the transform.
    pub json: Box<str>,
}

/// The cache key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

/// Calls `f` with [`object_key`]`(namespace, name)`, built on the stack when it is short
/// (every real key is): a lookup by name allocates nothing.
pub fn with_object_key<R>(namespace: Option<&str>, name: &str, f: impl FnOnce(&str) -> R) -> R {
    const ROOM: usize = 320;
    let ns = namespace.filter(|ns| !ns.is_empty());
    let Some(ns) = ns else {
        return f(name);
    };
    let len = ns.len() + 1 + name.len();
    if len > ROOM {
        return f(&object_key(Some(ns), name));
    }
    let mut buf = [0u8; ROOM];
    buf[..ns.len()].copy_from_slice(ns.as_bytes());
    buf[ns.len()] = b'/';
    buf[ns.len() + 1..len].copy_from_slice(name.as_bytes());
    match std::str::from_utf8(&buf[..len]) {
        Ok(key) => f(key),
        // Two strings and a '/' are valid UTF-8; this arm is never taken.
        Err(_) => f(&object_key(Some(ns), name)),
    }
}

impl KubeObject {
    /// Parses JSON text into an object, applying `transform`.
    pub fn from_json(text: &str, transform: &Transform) -> Result<Self, ObjectError> {
        let value: Value = serde_json::from_str(text).map_err(|_| ObjectError::NotAnObject)?;
        Self::from_value(value, transform)
    }

    /// Decodes an object from JSON text as an API server sends it, of type `gvk` when the
    /// text names none (list items), applying `transform`. Plain text is read without
    /// building a JSON tree and kept as sent, less what the transform cuts.
    pub fn from_server_json(
        text: &str,
        gvk: &Gvk,
        transform: &Transform,
    ) -> Result<Self, ObjectError> {
        if let Some(object) = raw::decode(text, Some(gvk), transform) {
            return Ok(object);
        }
        let value: Value = serde_json::from_str(text).map_err(|_| ObjectError::NotAnObject)?;
        let Value::Object(mut map) = value else {
            return Err(ObjectError::NotAnObject);
        };
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(gvk.api_version()));
        map.entry("kind")
            .or_insert_with(|| Value::String(gvk.kind.clone()));
        Self::from_value(Value::Object(map), transform)
    }

    /// Builds an object from a parsed JSON value, applying `transform`.
    pub fn from_value(value: Value, transform: &Transform) -> Result<Self, ObjectError> {
        let Value::Object(mut map) = value else {
            return Err(ObjectError::NotAnObject);
        };
        transform.apply(&mut map);
        let api_version = required_str(&map, "apiVersion", "apiVersion")?;
        let kind = required_str(&map, "kind", "kind")?;
        let gvk = Gvk::from_api_version(api_version, kind);
        let meta = match map.get("metadata") {
            Some(Value::Object(meta)) => meta,
            Some(_) => {
                return Err(ObjectError::WrongType {
                    field: "metadata",
                    expected: "a mapping",
                });
            }
            None => return Err(ObjectError::Missing("metadata")),
        };
        let name = required_str(meta, "name", "metadata.name")?.to_owned();
        let namespace = optional_str(meta, "namespace", "metadata.namespace")?
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned);
        let uid = optional_str(meta, "uid", "metadata.uid")?
            .unwrap_or_default()
            .to_owned();
        let resource_version = optional_str(meta, "resourceVersion", "metadata.resourceVersion")?
            .unwrap_or_default()
            .to_owned();
        let labels = parse_labels(meta)?;
        let owners = parse_owners(meta)?;
        let json = serde_json::to_string(&map)
            .map_err(|_| ObjectError::NotAnObject)?
            .into_boxed_str();
        Ok(Self {
            key: object_key(namespace.as_deref(), &name),
            gvk,
            namespace,
            name,
            uid,
            resource_version,
            labels,
            owners,
            json,
        })
    }

    /// The value of a label, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.labels[i].1.as_str())
    }

    /// Approximate bytes this object holds on the heap and inline.
    pub fn size_bytes(&self) -> usize {
        let strings = self.key.len()
            + self.namespace.as_ref().map_or(0, String::len)
            + self.name.len()
            + self.uid.len()
            + self.resource_version.len()
            + self.json.len();
        let labels: usize = self.labels.iter().map(|(k, v)| k.len() + v.len()).sum();
        let owners: usize = self
            .owners
            .iter()
            .map(|o| o.api_version.len() + o.kind.len() + o.name.len() + o.uid.len())
            .sum();
        std::mem::size_of::<Self>() + strings + labels + owners
    }
}

fn required_str<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<&'a str, ObjectError> {
    match optional_str(map, key, field)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(ObjectError::Missing(field)),
    }
}

fn optional_str<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<Option<&'a str>, ObjectError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ObjectError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

fn parse_labels(meta: &Map<String, Value>) -> Result<Vec<(String, String)>, ObjectError> {
    const WRONG: ObjectError = ObjectError::WrongType {
        field: "metadata.labels",
        expected: "a mapping of strings to strings",
    };
    let mut labels = match meta.get("labels") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(labels)) => labels
            .iter()
            .map(|(k, v)| match v {
                Value::String(v) => Ok((k.clone(), v.clone())),
                _ => Err(WRONG),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(WRONG),
    };
    labels.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(labels)
}

fn parse_owners(meta: &Map<String, Value>) -> Result<Vec<OwnerRef>, ObjectError> {
    const WRONG: ObjectError = ObjectError::WrongType {
        field: "metadata.ownerReferences",
        expected: "a list of {apiVersion, kind, name, uid}",
    };
    let items = match meta.get("ownerReferences") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(WRONG),
    };
    items
        .iter()
        .map(|item| {
            let Value::Object(o) = item else {
                return Err(WRONG);
            };
            let field = |k: &str| match o.get(k) {
                Some(Value::String(s)) => Ok(s.clone()),
                _ => Err(WRONG),
            };
            Ok(OwnerRef {
                api_version: field("apiVersion")?,
                kind: field("kind")?,
                name: field("name")?,
                uid: field("uid")?,
                controller: matches!(o.get("controller"), Some(Value::Bool(true))),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "uid": "u-1",
                "resourceVersion": "7",
                "labels": {"tier": "web", "app": "shop"},
                "annotations": {LAST_APPLIED_ANNOTATION: "{...}"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                    "uid": "rs-1", "controller": true
                }]
            },
            "spec": {"nodeName": "n1"}
        })
    }

    #[test]
    fn keys_built_on_the_stack_equal_the_allocated_ones() {
        let long = "n".repeat(400);
        for (ns, name) in [
            (Some("shop"), "web-1"),
            (None, "node-1"),
            (Some(""), "node-1"),
            (Some("ü-ns"), "pod-ß"),
            (Some("shop"), long.as_str()),
        ] {
            let built = with_object_key(ns, name, str::to_owned);
            assert_eq!(built, object_key(ns, name), "{ns:?} {name:?}");
        }
    }

    #[test]
    fn parses_metadata_and_drops_managed_fields_and_last_applied() {
        let obj = KubeObject::from_value(pod(), &Transform::default()).expect("valid pod");
        assert_eq!(obj.key, "shop/web-1");
        assert_eq!(obj.gvk, Gvk::new("", "v1", "Pod"));
        assert_eq!(obj.uid, "u-1");
        assert_eq!(obj.resource_version, "7");
        assert_eq!(
            obj.labels,
            vec![("app".into(), "shop".into()), ("tier".into(), "web".into())]
        );
        assert_eq!(obj.label("tier"), Some("web"));
        assert_eq!(obj.label("nope"), None);
        assert_eq!(obj.owners[0].uid, "rs-1");
        assert!(obj.owners[0].controller);
        assert!(!obj.json.contains("managedFields"));
        assert!(!obj.json.contains(LAST_APPLIED_ANNOTATION));
        assert!(
            !obj.json.contains("annotations"),
            "empty annotations removed"
        );
        assert!(obj.json.contains("\"nodeName\":\"n1\""));
    }

    #[test]
    fn keeps_managed_fields_when_transform_is_off() {
        let keep = Transform {
            drop_managed_fields: false,
            drop_last_applied: false,
        };
        let obj = KubeObject::from_value(pod(), &keep).expect("valid pod");
        assert!(obj.json.contains("managedFields"));
        assert!(obj.json.contains(LAST_APPLIED_ANNOTATION));
    }

    #[test]
    fn cluster_scoped_key_is_the_name() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
        let obj = KubeObject::from_value(ns, &Transform::default()).expect("valid namespace");
        assert_eq!(obj.key, "shop");
        assert_eq!(obj.namespace, None);
    }

    #[test]
    fn errors_name_the_field() {
        let t = Transform::default();
        let no_kind = json!({"apiVersion": "v1", "metadata": {"name": "x"}});
        assert_eq!(
            KubeObject::from_value(no_kind, &t),
            Err(ObjectError::Missing("kind"))
        );
        let no_name = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
        assert_eq!(
            KubeObject::from_value(no_name, &t),
            Err(ObjectError::Missing("metadata.name"))
        );
        let bad_labels = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"a": 1}}});
        let err = KubeObject::from_value(bad_labels, &t).expect_err("labels must be strings");
        assert!(err.to_string().contains("metadata.labels"), "{err}");
        assert_eq!(
            KubeObject::from_value(json!([1, 2]), &t),
            Err(ObjectError::NotAnObject)
        );
    }
}
