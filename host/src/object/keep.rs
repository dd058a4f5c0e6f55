//! What of an object is kept beyond its metadata: all of it, nothing (metadata only), or the
//! subtrees at some JSON pointers. Cut at decode, on both decoding paths.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::object::pointer;

/// The top-level members every object keeps, whatever else is cut.
const ALWAYS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// What of each object is kept besides `metadata` (always kept whole, less what the transform
/// drops from it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Keep {
    /// Every member.
    #[default]
    Whole,
    /// `metadata` only: what a `PartialObjectMetadata` watch receives.
    MetadataOnly,
    /// `metadata` and the values at these RFC 6901 pointers (sorted, none inside another).
    /// A pointer through an array keeps the whole array: more than asked, never less.
    Fields(Arc<[String]>),
}

impl Keep {
    /// The values at `pointers` (checked RFC 6901 pointers) and the metadata; a pointer that
    /// names the whole object (`""`) or only metadata keeps what it says.
    pub fn fields<S: AsRef<str>>(pointers: &[S]) -> Self {
        let mut kept: Vec<String> = pointers.iter().map(|p| p.as_ref().to_owned()).collect();
        if kept.iter().any(String::is_empty) {
            return Keep::Whole;
        }
        kept.sort();
        kept.dedup();
        // A pointer inside another kept one adds nothing.
        let mut minimal: Vec<String> = Vec::with_capacity(kept.len());
        for p in kept {
            if !minimal.iter().any(|m| within(&p, m)) {
                minimal.push(p);
            }
        }
        minimal.retain(|p| !within(p, "/metadata"));
        if minimal.is_empty() {
            return Keep::MetadataOnly;
        }
        Keep::Fields(minimal.into())
    }

    /// What keeps both.
    pub fn union(&self, other: &Keep) -> Keep {
        match (self, other) {
            (Keep::Whole, _) | (_, Keep::Whole) => Keep::Whole,
            (Keep::MetadataOnly, k) | (k, Keep::MetadataOnly) => k.clone(),
            (Keep::Fields(a), Keep::Fields(b)) => {
                Keep::fields(&a.iter().chain(b.iter()).collect::<Vec<_>>())
            }
        }
    }

    /// True when every member is kept.
    pub fn is_whole(&self) -> bool {
        matches!(self, Keep::Whole)
    }

    /// True when the value at `pointer` is kept whole (`apiVersion`, `kind` and `metadata`
    /// always are).
    pub fn holds(&self, pointer: &str) -> bool {
        match self {
            Keep::Whole => true,
            _ if ALWAYS
                .iter()
                .any(|always| pointer.strip_prefix('/').is_some_and(|p| within(p, always))) =>
            {
                true
            }
            Keep::MetadataOnly => false,
            Keep::Fields(kept) => kept.iter().any(|k| within(pointer, k)),
        }
    }

    /// The kept paths as tokens, each path starting with the top-level member it is under;
    /// `None` when everything is kept.
    pub(crate) fn paths(&self) -> Option<Vec<Vec<String>>> {
        match self {
            Keep::Whole => None,
            Keep::MetadataOnly => Some(Vec::new()),
            Keep::Fields(kept) => Some(
                kept.iter()
                    .filter_map(|p| pointer::tokens(p).ok())
                    .map(|t| t.into_iter().map(|c| c.into_owned()).collect())
                    .collect(),
            ),
        }
    }

    /// Removes from an object's top-level mapping what this does not keep (the tree path);
    /// `apiVersion`, `kind` and `metadata` stay.
    pub fn apply(&self, map: &mut Map<String, Value>) {
        let Some(paths) = self.paths() else {
            return;
        };
        map.retain(|key, value| {
            if ALWAYS.contains(&key.as_str()) {
                return true;
            }
            retain_in(key, value, &paths)
        });
    }
}

impl Keep {
    /// [`Keep`]'s description cut to a bound (a declaration of many long pointers is long),
    /// for messages.
    pub fn described(&self) -> String {
        crate::text::cut(self.to_string(), 1024)
    }
}

impl std::fmt::Display for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Keep::Whole => f.write_str("whole objects"),
            Keep::MetadataOnly => f.write_str("metadata only"),
            Keep::Fields(kept) => write!(f, "metadata and {}", kept.join(", ")),
        }
    }
}

/// True when `pointer` is `at` or below it.
fn within(pointer: &str, at: &str) -> bool {
    pointer
        .strip_prefix(at)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether the member `key` (with `value`) is kept by `paths` (each starting at this level),
/// cutting inside `value` what its deeper paths leave out.
fn retain_in(key: &str, value: &mut Value, paths: &[Vec<String>]) -> bool {
    let below: Vec<Vec<String>> = paths
        .iter()
        .filter(|p| p.first().is_some_and(|t| t == key))
        .map(|p| p[1..].to_vec())
        .collect();
    if below.is_empty() {
        return false;
    }
    if below.iter().any(Vec::is_empty) {
        return true;
    }
    // Only a mapping is cut into; an array (or anything else) on the way is kept whole.
    if let Value::Object(members) = value {
        members.retain(|k, v| retain_in(k, v, &below));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_minimal_and_unions_widen() {
        let k = Keep::fields(&["/status/phase", "/status", "/spec/nodeName", "/metadata/x"]);
        assert_eq!(
            k,
            Keep::Fields(vec!["/spec/nodeName".into(), "/status".into()].into())
        );
        assert_eq!(Keep::fields(&["/metadata/labels"]), Keep::MetadataOnly);
        assert_eq!(Keep::fields(&[""]), Keep::Whole);
        let phase = Keep::fields(&["/status/phase"]);
        assert_eq!(Keep::MetadataOnly.union(&phase), phase);
        assert_eq!(phase.union(&Keep::Whole), Keep::Whole);
        assert_eq!(
            phase.union(&Keep::fields(&["/spec/nodeName"])),
            Keep::fields(&["/spec/nodeName", "/status/phase"])
        );
        assert!(phase.holds("/status/phase") && phase.holds("/status/phase/x"));
        assert!(phase.holds("/metadata/labels/app"));
        assert!(!phase.holds("/status") && !phase.holds("/spec") && !phase.holds(""));
        assert!(!Keep::MetadataOnly.holds("/spec/nodeName"));
        assert!(phase.holds("/kind") && Keep::MetadataOnly.holds("/apiVersion"));
        assert!(
            !phase.holds("/kindly"),
            "a member's name, not a prefix of it"
        );
        assert_eq!(phase.to_string(), "metadata and /status/phase");
    }

    #[test]
    fn the_tree_path_keeps_metadata_and_the_declared_subtrees() {
        let mut map = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}
        });
        let Value::Object(m) = &mut map else {
            panic!("an object")
        };
        Keep::fields(&["/status/phase", "/spec/containers/0/name"]).apply(m);
        assert_eq!(
            Value::Object(m.clone()),
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Running"}
            }),
            "an array on the way is kept whole"
        );
        Keep::MetadataOnly.apply(m);
        assert_eq!(
            Value::Object(m.clone()),
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})
        );
    }
}
