//! Index functions: what values an object is filed under in a named index.

use serde_json::Value;

use crate::object::{KubeObject, pointer};

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

/// The index a built-in one is answered from instead of being stored: `label-key` from
/// `label`, whose values (`key=value`) already name every label key. A store keeps one entry
/// less per label of every object.
pub fn derived_from(name: &str) -> Option<&'static str> {
    (name == LABEL_KEY).then_some(LABEL)
}

impl IndexFunc {
    /// The values `object` is filed under. A JSON pointer is walked in the object's text,
    /// reading nothing past the value it names.
    pub fn values(&self, object: &KubeObject) -> Vec<String> {
        let mut values = Vec::new();
        self.each_value(object, |v| values.push(v.to_owned()));
        values
    }

    /// Calls `f` with each value `object` is filed under, building none from the metadata.
    pub fn each_value(&self, object: &KubeObject, mut f: impl FnMut(&str)) {
        match self {
            Self::Namespace => object.namespace().into_iter().for_each(f),
            Self::OwnerUid => object.owners().for_each(|o| f(o.uid)),
            Self::LabelKey => object.labels().for_each(|(k, _)| f(k)),
            Self::Label => {
                let mut value = String::new();
                for (k, v) in object.labels() {
                    value.clear();
                    value.push_str(k);
                    value.push('=');
                    value.push_str(v);
                    f(&value);
                }
            }
            Self::JsonPointer(p) => {
                // A pointer with no value yet: the whole object, which is no scalar.
                let found = pointer::tokens(p)
                    .ok()
                    .filter(|tokens| !tokens.is_empty())
                    .and_then(|tokens| object.field(&tokens));
                match found {
                    Some(Value::Array(items)) => {
                        items.iter().filter_map(scalar).for_each(|v| f(&v))
                    }
                    Some(v) => scalar(&v).into_iter().for_each(|v| f(&v)),
                    None => {}
                }
            }
        }
    }

    /// True when `old` and `new` are known from their metadata alone to be filed under the
    /// same values, so nothing need be built; never for a JSON pointer (compare its values).
    pub fn same_metadata_values(&self, old: &KubeObject, new: &KubeObject) -> bool {
        match self {
            Self::Namespace => old.namespace() == new.namespace(),
            Self::OwnerUid => old.owners().map(|o| o.uid).eq(new.owners().map(|o| o.uid)),
            Self::LabelKey => old
                .labels()
                .map(|(k, _)| k)
                .eq(new.labels().map(|(k, _)| k)),
            Self::Label => old.same_labels(new),
            Self::JsonPointer(_) => false,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::object::Transform;

    #[test]
    fn pointer_values_walked_in_the_text_equal_those_of_the_parsed_tree() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ns",
                         "annotations": {"example.com/team": "db", "a~b": "tilde"}},
            "spec": {"nodeName": "n1", "priority": 7, "hostNetwork": true,
                     "containers": [{"name": "c1", "ports": [{"containerPort": 80}]},
                                    {"name": "c2"}],
                     "tags": ["x", 1, false, {"nested": "no"}, null]}
        });
        let object = KubeObject::from_value(pod.clone(), &Transform::default()).expect("pod");
        for p in [
            "/spec/nodeName",
            "/spec/priority",
            "/spec/hostNetwork",
            "/spec/tags",
            "/spec/containers/1/name",
            "/spec/containers/0/ports/0/containerPort",
            "/metadata/annotations/example.com~1team",
            "/metadata/annotations/a~0b",
            "/spec/containers",
            "/spec/missing",
            "/spec/containers/9/name",
            "",
            "no-slash",
        ] {
            let expected: Vec<String> = match pod.pointer(p) {
                Some(Value::Array(items)) => items.iter().filter_map(scalar).collect(),
                Some(v) => scalar(v).into_iter().collect(),
                None => Vec::new(),
            };
            let got = IndexFunc::JsonPointer(p.to_owned()).values(&object);
            assert_eq!(got, expected, "{p}");
        }
        assert_eq!(
            IndexFunc::JsonPointer("/spec/tags".into()).values(&object),
            ["x", "1", "false"]
        );
    }
}
