//! The set of object keys filed under one index value.
//!
//! Most index values name one object or a handful (a pod's `pod-template-hash`, an owner uid),
//! a few name thousands (a namespace). A single key is stored inline; more go to a B-tree.
//! Keys are shared (`Arc<str>`) with the store's own map, so each object's key is allocated
//! once however many indexes file it.

use std::collections::BTreeSet;
use std::sync::Arc;

/// Sorted object keys under one index value; never empty while stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySet {
    /// Exactly one key.
    One(Arc<str>),
    /// Two or more keys.
    Many(BTreeSet<Arc<str>>),
}

impl KeySet {
    /// Adds `key`.
    pub fn insert(&mut self, key: &Arc<str>) {
        match self {
            Self::One(only) if only == key => {}
            Self::One(only) => {
                *self = Self::Many(BTreeSet::from([only.clone(), key.clone()]));
            }
            Self::Many(keys) => {
                keys.insert(key.clone());
            }
        }
    }

    /// Removes `key`; returns true when the set is now empty (and must be dropped).
    pub fn remove(&mut self, key: &str) -> bool {
        match self {
            Self::One(only) => &**only == key,
            Self::Many(keys) => {
                keys.remove(key);
                if keys.len() == 1
                    && let Some(last) = keys.pop_first()
                {
                    *self = Self::One(last);
                    return false;
                }
                keys.is_empty()
            }
        }
    }

    /// The keys, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<str>> {
        let (one, many) = match self {
            Self::One(key) => (Some(key), None),
            Self::Many(keys) => (None, Some(keys.iter())),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Arc<str> {
        Arc::from(k)
    }

    #[test]
    fn grows_and_shrinks_between_one_and_many_in_order() {
        let mut set = KeySet::One(key("b"));
        set.insert(&key("b"));
        assert_eq!(set, KeySet::One(key("b")));
        set.insert(&key("a"));
        set.insert(&key("c"));
        let all: Vec<&str> = set.iter().map(|k| &**k).collect();
        assert_eq!(all, ["a", "b", "c"]);
        assert!(!set.remove("a"));
        assert!(!set.remove("c"));
        assert_eq!(set, KeySet::One(key("b")));
        assert!(!set.remove("zz"), "removing an absent key keeps the set");
        assert!(set.remove("b"), "now empty");
    }
}
