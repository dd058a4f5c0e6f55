//! The set of object keys filed under one index value.
//!
//! Most index values name one object or a handful (a pod's `pod-template-hash`, an owner uid),
//! a few name thousands (a namespace). A single key is stored inline, a handful in a sorted
//! slice of their exact length, more in a B-tree. Keys are shared ([`Key`]) with the store's
//! own map, so each object's key is allocated once however many indexes file it.

use std::collections::BTreeSet;

use crate::object::Key;

/// Most keys kept in a sorted slice; one more moves them to a B-tree (whose smallest node
/// holds eleven keys, so a slice is smaller up to about this many).
const FEW: usize = 12;

/// Sorted object keys under one index value; never empty while stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySet {
    /// Exactly one key.
    One(Key),
    /// Two to [`FEW`] keys, sorted.
    Few(Box<[Key]>),
    /// More than [`FEW`] keys.
    Many(BTreeSet<Key>),
}

impl KeySet {
    /// Adds `key`.
    pub fn insert(&mut self, key: &Key) {
        match self {
            Self::One(only) if only == key => {}
            Self::One(only) => {
                let mut both = [only.clone(), key.clone()];
                both.sort();
                *self = Self::Few(Box::new(both));
            }
            Self::Few(keys) => {
                let Err(at) = keys.binary_search(key) else {
                    return;
                };
                if keys.len() < FEW {
                    let mut grown = Vec::with_capacity(keys.len() + 1);
                    grown.extend_from_slice(&keys[..at]);
                    grown.push(key.clone());
                    grown.extend_from_slice(&keys[at..]);
                    *keys = grown.into_boxed_slice();
                } else {
                    let mut many: BTreeSet<Key> = keys.iter().cloned().collect();
                    many.insert(key.clone());
                    *self = Self::Many(many);
                }
            }
            Self::Many(keys) => {
                keys.insert(key.clone());
            }
        }
    }

    /// Removes `key`; returns true when the set is now empty (and must be dropped).
    pub fn remove(&mut self, key: &str) -> bool {
        match self {
            Self::One(only) => only.as_str() == key,
            Self::Few(keys) => {
                let Ok(at) = keys.binary_search_by(|k| k.as_str().cmp(key)) else {
                    return false;
                };
                let mut rest = keys.to_vec();
                rest.remove(at);
                *self = match <[Key; 1]>::try_from(rest) {
                    Ok([last]) => Self::One(last),
                    Err(rest) => Self::Few(rest.into_boxed_slice()),
                };
                false
            }
            Self::Many(keys) => {
                keys.remove(key);
                // Half way down, so a set near the limit does not move back and forth.
                if keys.len() <= FEW / 2 {
                    let few: Vec<Key> = std::mem::take(keys).into_iter().collect();
                    *self = Self::Few(few.into_boxed_slice());
                }
                false
            }
        }
    }

    /// The keys, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &Key> {
        let (one, few, many) = match self {
            Self::One(key) => (Some(key), None, None),
            Self::Few(keys) => (None, Some(keys.iter()), None),
            Self::Many(keys) => (None, None, Some(keys.iter())),
        };
        one.into_iter()
            .chain(few.into_iter().flatten())
            .chain(many.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Key {
        Key::from(k)
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

    #[test]
    fn a_handful_stays_a_slice_and_more_move_to_a_tree_and_back() {
        let keys: Vec<Key> = (0..FEW + 3)
            .rev()
            .map(|i| key(&format!("k{i:02}")))
            .collect();
        let mut set = KeySet::One(keys[0].clone());
        for (n, k) in keys.iter().enumerate().skip(1) {
            set.insert(k);
            set.insert(k);
            let kind = match &set {
                KeySet::One(_) => "one",
                KeySet::Few(_) => "few",
                KeySet::Many(_) => "many",
            };
            assert_eq!(kind, if n < FEW { "few" } else { "many" }, "{} keys", n + 1);
            let listed: Vec<&Key> = set.iter().collect();
            assert!(listed.windows(2).all(|w| w[0] < w[1]), "sorted, no twice");
            assert_eq!(listed.len(), n + 1);
        }
        for k in &keys[..keys.len() - 1] {
            assert!(!set.remove(k));
            assert!(set.iter().all(|x| x != k));
        }
        assert_eq!(set, KeySet::One(keys[keys.len() - 1].clone()));
    }
}
