//! The set of object keys filed under one index value.
//!
//! Most index values name one object or a handful (a pod's `pod-template-hash`, an owner uid),
//! a few name thousands (a namespace, `app=web`). A single key is stored inline, a handful in
//! a sorted slice of their exact length, more in sorted runs of exact length: eight bytes a
//! key and little more, where a B-tree's nodes, two-thirds full on average, took about
//! fourteen. Keys are shared ([`Key`]) with the store's own map, so each object's key is
//! allocated once however many indexes file it. Each run carries a fence (see [`Runs`]), so
//! finding a key's run reads no keys, and a removal looks for its key's allocation in the run
//! before it compares any text.

use crate::object::Key;

/// Most keys kept in one sorted slice; one more splits them into runs.
const FEW: usize = 12;

/// Most keys in one run of a large set: an insert or removal copies at most this many.
const RUN: usize = 64;

/// Sorted object keys under one index value; never empty while stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySet {
    /// Exactly one key.
    One(Key),
    /// Two to [`FEW`] keys, sorted.
    Few(Box<[Key]>),
    /// More than [`FEW`] keys.
    Many(Box<Runs>),
}

/// Sorted keys in consecutive runs of at most [`RUN`], each allocated at its exact length.
///
/// Each run has a fence: eight bytes of its last key as a number, read after the prefix every
/// key here shares. A key's run is found by comparing numbers, not by reading keys spread over
/// the heap (a key's text is a cache miss away, and looking up a run by the keys read seven of
/// them in a set of 5,000).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runs {
    /// Never empty, and no run is empty.
    runs: Vec<Box<[Key]>>,
    /// Per run, [`fence`] of its last key.
    fences: Vec<u64>,
    /// Bytes every key here starts with.
    prefix: Box<[u8]>,
    len: usize,
}

/// The eight bytes of `key` after its first `skip`, zero-padded, as a number. Keys that share
/// their first `skip` bytes have fences in their order; equal fences say nothing.
fn fence(key: &str, skip: usize) -> u64 {
    let mut window = [0u8; 8];
    let rest = key.as_bytes().get(skip..).unwrap_or_default();
    let n = rest.len().min(window.len());
    window[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(window)
}

/// How many bytes `a` and `b` start with in common.
fn shared_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `slice` with `key` put at `at`, in an allocation of the new length.
fn inserted(slice: &mut Box<[Key]>, at: usize, key: &Key) {
    let mut keys = std::mem::take(slice).into_vec();
    keys.reserve_exact(1);
    keys.insert(at, key.clone());
    *slice = keys.into_boxed_slice();
}

/// `slice` without the key at `at`, in an allocation of the new length.
fn removed(slice: &mut Box<[Key]>, at: usize) {
    let mut keys = std::mem::take(slice).into_vec();
    keys.remove(at);
    *slice = keys.into_boxed_slice();
}

/// Where `key` is in `keys` (sorted): found by its allocation, else by its text.
fn position(keys: &[Key], key: &Key) -> Result<usize, usize> {
    match keys.iter().position(|k| k.same(key)) {
        Some(at) => Ok(at),
        None => keys.binary_search(key),
    }
}

impl Runs {
    /// One run of sorted, distinct `keys` (at least two).
    fn new(keys: Box<[Key]>) -> Self {
        let (first, last) = (keys[0].as_bytes(), keys[keys.len() - 1].as_bytes());
        let prefix: Box<[u8]> = first[..shared_len(first, last)].into();
        Self {
            fences: vec![fence(&keys[keys.len() - 1], prefix.len())],
            len: keys.len(),
            runs: vec![keys],
            prefix,
        }
    }

    /// Sets run `i`'s fence from its last key.
    fn refence(&mut self, i: usize) {
        let last = &self.runs[i][self.runs[i].len() - 1];
        self.fences[i] = fence(last, self.prefix.len());
    }

    /// The run `key` belongs in (the last one when it is past every key); `key` starts with
    /// the shared prefix.
    fn run_for(&self, key: &str) -> usize {
        let f = fence(key, self.prefix.len());
        let below = self.fences.partition_point(|&x| x < f);
        let tied = self.fences[below..].partition_point(|&x| x == f);
        let after = below
            + self.runs[below..below + tied]
                .partition_point(|r| r.last().is_some_and(|last| last.as_str() < key));
        after.min(self.runs.len() - 1)
    }

    /// Adds `key`; false when it was there.
    fn insert(&mut self, key: &Key) -> bool {
        if !key.as_bytes().starts_with(&self.prefix) {
            let keep = shared_len(&self.prefix, key.as_bytes());
            self.prefix = self.prefix[..keep].into();
            for i in 0..self.runs.len() {
                self.refence(i);
            }
        }
        let i = self.run_for(key);
        let Err(at) = self.runs[i].binary_search(key) else {
            return false;
        };
        inserted(&mut self.runs[i], at, key);
        // Only a new last key moves the fence, and `key`'s text is at hand.
        if at + 1 == self.runs[i].len() {
            self.fences[i] = fence(key, self.prefix.len());
        }
        if self.runs[i].len() > RUN {
            let mut left = std::mem::take(&mut self.runs[i]).into_vec();
            let right = left.split_off(left.len() / 2);
            self.runs[i] = left.into_boxed_slice();
            self.runs.insert(i + 1, right.into_boxed_slice());
            // The right half keeps the run's last key, and so its fence.
            self.fences.insert(i + 1, self.fences[i]);
            self.refence(i);
        }
        self.len += 1;
        true
    }

    /// Removes `key`; false when it was not there.
    fn remove(&mut self, key: &Key) -> bool {
        if !key.as_bytes().starts_with(&self.prefix) {
            return false;
        }
        let i = self.run_for(key);
        let Ok(at) = position(&self.runs[i], key) else {
            return false;
        };
        self.len -= 1;
        if self.runs[i].len() == 1 {
            self.runs.remove(i);
            self.fences.remove(i);
            return true;
        }
        removed(&mut self.runs[i], at);
        if at == self.runs[i].len() {
            self.refence(i);
        }
        // A short run joins its next one when both fit in one, so removals do not leave a
        // trail of tiny runs.
        if self.runs[i].len() < RUN / 4
            && let Some(next) = self.runs.get(i + 1)
            && self.runs[i].len() + next.len() <= RUN
        {
            let next = self.runs.remove(i + 1);
            // The joined run ends with the next one's last key, and so its fence.
            self.fences[i] = self.fences.remove(i + 1);
            let mut joined = std::mem::take(&mut self.runs[i]).into_vec();
            joined.extend(next.into_vec());
            self.runs[i] = joined.into_boxed_slice();
        }
        true
    }

    fn iter(&self) -> impl Iterator<Item = &Key> {
        self.runs.iter().flat_map(|r| r.iter())
    }
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
                inserted(keys, at, key);
                if keys.len() > FEW {
                    *self = Self::Many(Box::new(Runs::new(std::mem::take(keys))));
                }
            }
            Self::Many(runs) => {
                runs.insert(key);
            }
        }
    }

    /// Removes `key`; returns true when the set is now empty (and must be dropped).
    pub fn remove(&mut self, key: &Key) -> bool {
        match self {
            Self::One(only) => only == key,
            Self::Few(keys) => {
                let Ok(at) = position(keys, key) else {
                    return false;
                };
                removed(keys, at);
                if let [last] = &**keys {
                    *self = Self::One(last.clone());
                }
                false
            }
            Self::Many(runs) => {
                runs.remove(key);
                // Half way down, so a set near the limit does not move back and forth.
                if runs.len <= FEW / 2 {
                    let few: Vec<Key> = runs.iter().cloned().collect();
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
            Self::Many(runs) => (None, None, Some(runs.iter())),
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
        assert!(!set.remove(&key("a")));
        assert!(!set.remove(&key("c")));
        assert_eq!(set, KeySet::One(key("b")));
        assert!(
            !set.remove(&key("zz")),
            "removing an absent key keeps the set"
        );
        assert!(set.remove(&key("b")), "now empty");
    }

    #[test]
    fn a_handful_stays_a_slice_and_more_move_to_runs_and_back() {
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
            agrees(&set, &set.iter().cloned().collect());
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

    /// Checks `set` against `model`: the same keys, sorted, in runs within their bounds.
    fn agrees(set: &KeySet, model: &std::collections::BTreeSet<Key>) {
        assert!(set.iter().eq(model.iter()), "same keys in the same order");
        if let KeySet::Many(runs) = set {
            assert_eq!(runs.len, model.len());
            assert!(runs.runs.iter().all(|r| !r.is_empty() && r.len() <= RUN));
            assert!(set.iter().all(|k| k.as_bytes().starts_with(&runs.prefix)));
            let fences: Vec<u64> = runs
                .runs
                .iter()
                .map(|r| fence(&r[r.len() - 1], runs.prefix.len()))
                .collect();
            assert_eq!(runs.fences, fences, "each run's fence is its last key's");
        }
    }

    #[test]
    fn runs_hold_a_large_set_in_order_through_inserts_and_removals() {
        let mut model = std::collections::BTreeSet::new();
        // Keys in a scrambled order (a stride coprime to the count), as a list files them.
        let keys: Vec<Key> = (0..2_000)
            .map(|i| key(&format!("ns/pod-{}", (i * 7_919) % 2_000)))
            .collect();
        let mut set = KeySet::One(keys[0].clone());
        model.insert(keys[0].clone());
        for (n, k) in keys.iter().enumerate() {
            set.insert(k);
            set.insert(k);
            model.insert(k.clone());
            if n % 97 == 0 {
                agrees(&set, &model);
            }
        }
        agrees(&set, &model);
        let KeySet::Many(runs) = &set else {
            panic!("2,000 keys are many");
        };
        assert!(
            runs.runs.len() <= 2_000 / (RUN / 2) + 1,
            "runs at least half full"
        );
        // Remove all but a few, from the middle out, checking as it goes.
        let mut order: Vec<&Key> = keys.iter().collect();
        order.sort_by_key(|k| (k.len() % 3, k.as_str().to_owned()));
        for (n, k) in order.iter().take(1_995).enumerate() {
            assert!(!set.remove(k));
            assert!(!set.remove(k), "removing an absent key keeps the set");
            model.remove(*k);
            if n % 89 == 0 {
                agrees(&set, &model);
            }
        }
        agrees(&set, &model);
        assert!(matches!(set, KeySet::Few(_)), "back to a slice");
    }

    #[test]
    fn keys_past_the_fences_window_and_copies_of_keys_are_found() {
        // Two namespaces whose names match for far longer than a fence reads: once both are
        // in, the shared prefix is `team-` and every run of one namespace has the same fence.
        let mut model = std::collections::BTreeSet::new();
        let name = |ns: &str, i: usize| key(&format!("{ns}/web-frontend-7d9f8c-{i:04}"));
        let mut set = KeySet::One(name("team-a", 0));
        model.insert(name("team-a", 0));
        for i in (0..500).rev() {
            for ns in ["team-a", "team-b"] {
                set.insert(&name(ns, i));
                model.insert(name(ns, i));
            }
        }
        agrees(&set, &model);
        let KeySet::Many(runs) = &set else {
            panic!("1,000 keys are many");
        };
        assert_eq!(
            &*runs.prefix, b"team-",
            "the prefix shrank when team-b came"
        );
        assert!(runs.runs.len() > 2, "several runs tie on the fence");
        // Copies: the same text in another allocation, found by text.
        for i in (0..500).step_by(3) {
            assert!(!set.remove(&name("team-b", i)));
            model.remove(&name("team-b", i));
        }
        assert!(!set.remove(&name("team-c", 1)), "absent keys are not found");
        assert!(
            !set.remove(&key("other/web")),
            "nor keys without the prefix"
        );
        agrees(&set, &model);
    }
}
