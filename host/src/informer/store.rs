//! The thread-safe object cache with named indexes (client-go's `Indexer`).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kubewasm_sdk::selector::{Operator, Selector};

use crate::informer::index::{self, IndexFunc};
use crate::informer::keys::KeySet;
use crate::object::{Key, KubeObject};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// No index with that name.
    #[error("no index named {0:?}")]
    UnknownIndex(String),
    /// An index with that name exists with a different function.
    #[error("index {name:?} already exists as {existing:?}, cannot redefine it as {requested:?}")]
    IndexConflict {
        /// The index name.
        name: String,
        /// Its current function.
        existing: IndexFunc,
        /// The function asked for.
        requested: IndexFunc,
    },
}

/// More objects matched a query than its caller would take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("more than {0} objects match")]
pub struct MoreThan(pub usize);

/// Index name to index value to the keys of the objects filed under it (looked up for every
/// applied event and every index query: foldhash, like the objects).
type Indices = foldhash::HashMap<String, Index>;

/// Index value to the keys of the objects filed under it.
type Index = BTreeMap<Box<str>, KeySet>;

/// A stored object, found by its key (one pointer per entry instead of a key and a pointer).
struct Stored(Arc<KubeObject>);

impl Borrow<str> for Stored {
    fn borrow(&self) -> &str {
        self.0.key()
    }
}

impl Hash for Stored {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key().hash(state);
    }
}

impl PartialEq for Stored {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for Stored {}

#[derive(Default)]
struct Inner {
    /// By key; each object's key allocation is shared with its index entries and its
    /// later versions. Hashed with foldhash, seeded at random per process: every `get`,
    /// every object of a `by-index` answer and every applied event hashes a key, and SipHash
    /// took a tenth of a 1,000-object `by-index` in a profile of `benches/queries.rs`.
    objects: foldhash::HashSet<Stored>,
    indexers: BTreeMap<String, IndexFunc>,
    indices: Indices,
    /// Claims on each added (not built-in) index; it is removed with its last claim.
    claims: HashMap<String, usize>,
    /// Claims on the built-in indexes, kept current while there is one.
    builtin_claims: usize,
    /// The stored objects' JSON text, in bytes.
    text_bytes: usize,
}

impl Inner {
    /// Files every stored object in index `name`, unless it is built already.
    fn build(&mut self, name: &str) {
        let Some(func) = self.indexers.get(name) else {
            return;
        };
        if self.indices.contains_key(name) {
            return;
        }
        let mut index: Index = BTreeMap::new();
        for Stored(object) in &self.objects {
            func.each_value(object, |value| file(&mut index, value, object.shared_key()));
        }
        self.indices.insert(name.to_owned(), index);
    }
}

/// Objects by key (`namespace/name`), with named indexes kept current on every change.
pub struct Store {
    inner: RwLock<Inner>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// An empty store with the built-in indexes, built while they are claimed
    /// ([`Self::claim_builtins`]) or from the first time one is asked for, and kept current
    /// from then on: a store no one queries by index files nothing.
    pub fn new() -> Self {
        let mut inner = Inner::default();
        for (name, func) in index::builtins() {
            inner.indexers.insert(name.to_owned(), func);
        }
        Self {
            inner: RwLock::new(inner),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A read guard with index `name` built (or the index it is derived from).
    fn read_indexed(&self, name: &str) -> Result<RwLockReadGuard<'_, Inner>, StoreError> {
        let stored = index::derived_from(name).unwrap_or(name);
        // Checked again after each build: a last claim's release may drop the index between
        // the write guard and the next read.
        loop {
            {
                let inner = self.read();
                if !inner.indexers.contains_key(name) {
                    return Err(StoreError::UnknownIndex(name.to_owned()));
                }
                if inner.indices.contains_key(stored) {
                    return Ok(inner);
                }
            }
            self.write().build(stored);
        }
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a named index (or claims it again) and files every stored object in it. The same
    /// name with another function is an error. See [`Self::release_index`].
    pub fn add_index(&self, name: &str, func: IndexFunc) -> Result<(), StoreError> {
        let mut inner = self.write();
        if let Some(existing) = inner.indexers.get(name) {
            if *existing == func {
                if !index::is_builtin(name) {
                    *inner.claims.entry(name.to_owned()).or_default() += 1;
                }
                return Ok(());
            }
            return Err(StoreError::IndexConflict {
                name: name.to_owned(),
                existing: existing.clone(),
                requested: func,
            });
        }
        inner.indexers.insert(name.to_owned(), func);
        inner.build(name);
        inner.claims.insert(name.to_owned(), 1);
        Ok(())
    }

    /// Claims the built-in indexes, building them if they are not yet. See
    /// [`Self::release_builtins`].
    pub fn claim_builtins(&self) {
        let mut inner = self.write();
        inner.builtin_claims += 1;
        for (name, _) in index::builtins() {
            if index::derived_from(name).is_none() {
                inner.build(name);
            }
        }
    }

    /// Gives up one claim on the built-in indexes; with the last, their entries go (a later
    /// claim or query builds them again).
    pub fn release_builtins(&self) {
        let mut inner = self.write();
        inner.builtin_claims = inner.builtin_claims.saturating_sub(1);
        if inner.builtin_claims == 0 {
            for (name, _) in index::builtins() {
                inner.indices.remove(name);
            }
        }
    }

    /// Gives up one claim on an added index; the last one removes it with its entries.
    /// Built-in indexes stay.
    pub fn release_index(&self, name: &str) {
        let mut inner = self.write();
        let Some(claims) = inner.claims.get_mut(name) else {
            return;
        };
        *claims -= 1;
        if *claims == 0 {
            inner.claims.remove(name);
            inner.indexers.remove(name);
            inner.indices.remove(name);
        }
    }

    /// The names of the indexes, built-in ones included, sorted.
    pub fn index_names(&self) -> Vec<String> {
        self.read().indexers.keys().cloned().collect()
    }

    /// The names of the indexes whose entries are kept now, sorted (`label-key` is answered
    /// from `label`'s).
    pub fn built_indexes(&self) -> Vec<String> {
        let mut names: Vec<String> = self.read().indices.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// Inserts or replaces an object; returns the previous state. A new version takes over
    /// its predecessor's key allocation when no one else holds it yet. Only the informer
    /// changes its store, so subscribers hear of every change.
    pub(super) fn upsert(&self, object: &mut Arc<KubeObject>) -> Option<Arc<KubeObject>> {
        let mut guard = self.write();
        let inner = &mut *guard;
        if let Some(Stored(old)) = inner.objects.get(object.key())
            && let Some(new) = Arc::get_mut(object)
        {
            new.share_key(old.shared_key());
        }
        let old = inner.objects.replace(Stored(object.clone())).map(|s| s.0);
        inner.text_bytes += object.text_len();
        inner.text_bytes -= old.as_ref().map_or(0, |o| o.text_len());
        reindex(inner, old.as_deref(), Some(object));
        old
    }

    /// Removes an object by key; returns its last state.
    pub(super) fn remove(&self, key: &str) -> Option<Arc<KubeObject>> {
        let mut guard = self.write();
        let inner = &mut *guard;
        let Stored(old) = inner.objects.take(key)?;
        inner.text_bytes -= old.text_len();
        reindex(inner, Some(&old), None);
        Some(old)
    }

    /// The object with this key.
    pub fn get(&self, key: &str) -> Option<Arc<KubeObject>> {
        self.read().objects.get(key).map(|s| s.0.clone())
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<KubeObject>> {
        self.read().objects.iter().map(|s| s.0.clone()).collect()
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> Vec<Key> {
        self.read()
            .objects
            .iter()
            .map(|s| s.0.shared_key().clone())
            .collect()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// The stored objects' JSON text, in bytes (what a projection shrinks).
    pub fn text_bytes(&self) -> usize {
        self.read().text_bytes
    }

    /// True when the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects in `namespace` (all when `None`) whose labels match `selector` and that
    /// `keep` keeps (a lister's `List`), sorted by key; an error as soon as more than `max`
    /// match, before any sorting. An equality requirement starts from its `label` index entry
    /// instead of every object.
    pub fn select(
        &self,
        namespace: Option<&str>,
        selector: &Selector,
        keep: impl Fn(&KubeObject) -> bool,
        max: usize,
    ) -> Result<Vec<Arc<KubeObject>>, MoreThan> {
        let equal =
            selector
                .requirements()
                .iter()
                .find_map(|r| match (r.operator, r.values.as_slice()) {
                    (Operator::In, [value]) => Some(format!("{}={value}", r.key)),
                    _ => None,
                });
        let mut from = match (&equal, namespace) {
            (Some(label), _) => Some((index::LABEL, label.as_str())),
            (None, Some(ns)) => Some((index::NAMESPACE, ns)),
            (None, None) => None,
        };
        // Built-in indexes always exist; were one missing, every object would be scanned.
        let inner = match from.map(|(name, _)| self.read_indexed(name)) {
            Some(Ok(inner)) => inner,
            _ => {
                from = None;
                self.read()
            }
        };
        let wanted = |o: &KubeObject| {
            namespace.is_none_or(|ns| o.namespace() == Some(ns)) && selector.matches(o) && keep(o)
        };
        let mut found = Vec::new();
        let mut take = |o: &Arc<KubeObject>| {
            if wanted(o) {
                if found.len() == max {
                    return Err(MoreThan(max));
                }
                found.push(o.clone());
            }
            Ok(())
        };
        match from {
            Some((name, value)) => {
                let keys = index_entry(&inner, name, value).ok().flatten();
                for key in keys.into_iter().flat_map(KeySet::iter) {
                    if let Some(Stored(o)) = inner.objects.get(key.as_str()) {
                        take(o)?;
                    }
                }
            }
            None => {
                for Stored(o) in &inner.objects {
                    take(o)?;
                }
                // Writers wait on the lock only for the scan, not for the sort.
                drop(inner);
                found.sort_unstable_by(|a, b| a.key().cmp(b.key()));
            }
        }
        Ok(found)
    }

    /// The objects filed under `value` in index `index` (client-go's `ByIndex`), sorted by key.
    pub fn by_index(&self, index: &str, value: &str) -> Result<Vec<Arc<KubeObject>>, StoreError> {
        let inner = self.read_indexed(index)?;
        let keys = keys_under(&inner, index, value)?;
        Ok(objects_under(&inner, keys.iter()).collect())
    }

    /// The keys filed under `value` in index `index` (client-go's `IndexKeys`), sorted.
    pub fn index_keys(&self, index: &str, value: &str) -> Result<Vec<String>, StoreError> {
        let inner = self.read_indexed(index)?;
        let keys = keys_under(&inner, index, value)?;
        Ok(keys.iter().map(|k| k.to_string()).collect())
    }

    /// Every value of index `index` (client-go's `ListIndexFuncValues`), sorted.
    pub fn index_values(&self, index: &str) -> Result<Vec<String>, StoreError> {
        let inner = self.read_indexed(index)?;
        let Some(from) = index::derived_from(index) else {
            let idx = stored_index(&inner, index)?;
            return Ok(idx.keys().map(|v| v.to_string()).collect());
        };
        // Each `key=value` of the label index names its key; for an entry that can be read
        // more than one way, the objects filed under it say which split is theirs.
        let mut keys: Vec<String> = Vec::new();
        for (label, filed) in stored_index(&inner, from)? {
            match split_label(label) {
                Some((key, _)) => keys.push(key.to_owned()),
                None => {
                    for Stored(o) in filed.iter().filter_map(|k| inner.objects.get(k.as_str())) {
                        let named = |(k, v): &(&str, &str)| {
                            label.strip_prefix(k).and_then(|r| r.strip_prefix('=')) == Some(v)
                        };
                        keys.extend(o.labels().filter(named).map(|(k, _)| k.to_owned()));
                    }
                }
            }
        }
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }
}

/// The keys under one index value: a stored set, or the keys gathered for a derived index.
struct Under<'a> {
    set: Option<&'a KeySet>,
    gathered: Vec<&'a Key>,
}

impl<'a> Under<'a> {
    /// The keys, sorted.
    fn iter(&self) -> impl Iterator<Item = &'a Key> + '_ {
        self.set
            .into_iter()
            .flat_map(KeySet::iter)
            .chain(self.gathered.iter().copied())
    }
}

/// The keys filed under `value` in index `index`, stored or derived.
fn keys_under<'a>(inner: &'a Inner, index: &str, value: &str) -> Result<Under<'a>, StoreError> {
    let Some(from) = index::derived_from(index) else {
        let set = index_entry(inner, index, value)?;
        return Ok(Under {
            set,
            gathered: Vec::new(),
        });
    };
    // `label-key=k` holds the objects of every `k=...` label value: the entries that start
    // with `k=`, next to each other in the label index. An entry read only one way is all
    // `k`'s; in one that is not, only the objects that have label `k` are.
    let prefix = format!("{value}=");
    let has_key = |k: &&Key| {
        inner
            .objects
            .get(k.as_str())
            .is_some_and(|Stored(o)| o.label(value).is_some())
    };
    let mut gathered: Vec<&Key> = Vec::new();
    let entries = stored_index(inner, from)?
        .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
        .take_while(|(label, _)| label.starts_with(&prefix));
    for (label, keys) in entries {
        match split_label(label) {
            Some(_) => gathered.extend(keys.iter()),
            None => gathered.extend(keys.iter().filter(has_key)),
        }
    }
    gathered.sort_unstable();
    gathered.dedup();
    Ok(Under {
        set: None,
        gathered,
    })
}

/// The key and value of a `label` index entry that can be read only one way: valid labels
/// hold no `=` but the one between key and value.
fn split_label(label: &str) -> Option<(&str, &str)> {
    label
        .split_once('=')
        .filter(|(_, value)| !value.contains('='))
}

fn stored_index<'a>(inner: &'a Inner, index: &str) -> Result<&'a Index, StoreError> {
    inner
        .indices
        .get(index)
        .ok_or_else(|| StoreError::UnknownIndex(index.to_owned()))
}

fn index_entry<'a>(
    inner: &'a Inner,
    index: &str,
    value: &str,
) -> Result<Option<&'a KeySet>, StoreError> {
    Ok(stored_index(inner, index)?.get(value))
}

/// The stored objects whose keys are `keys`, in the keys' order.
fn objects_under<'a>(
    inner: &'a Inner,
    keys: impl Iterator<Item = &'a Key> + 'a,
) -> impl Iterator<Item = Arc<KubeObject>> + 'a {
    keys.filter_map(|k| inner.objects.get(k.as_str()).map(|s| s.0.clone()))
}

/// Files `key` under `value`.
fn file(index: &mut Index, value: &str, key: &Key) {
    match index.get_mut(value) {
        Some(keys) => keys.insert(key),
        None => {
            index.insert(value.into(), KeySet::One(key.clone()));
        }
    }
}

/// Takes `key` out from under `value`, and the value with its last key.
fn unfile(index: &mut Index, value: &str, key: &Key) {
    if let Some(keys) = index.get_mut(value)
        && keys.remove(key)
    {
        index.remove(value);
    }
}

/// Moves an object's key from the index values of `old` to those of `new` (one of them is
/// present; both are versions of the same object).
fn reindex(inner: &mut Inner, old: Option<&KubeObject>, new: Option<&KubeObject>) {
    let Some(key) = new.or(old).map(KubeObject::shared_key) else {
        return;
    };
    for (name, func) in &inner.indexers {
        // Not built yet (a built-in index no one has asked for), or derived from another.
        let Some(index) = inner.indices.get_mut(name) else {
            continue;
        };
        if let (Some(old), Some(new)) = (old, new)
            && func.same_metadata_values(old, new)
        {
            continue;
        }
        match (old, new) {
            (None, Some(new)) => func.each_value(new, |value| file(index, value, key)),
            (Some(old), None) => func.each_value(old, |value| unfile(index, value, key)),
            (Some(old), Some(new)) => {
                let (before, after) = (func.values(old), func.values(new));
                for value in before.iter().filter(|v| !after.contains(v)) {
                    unfile(index, value, key);
                }
                for value in &after {
                    file(index, value, key);
                }
            }
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Transform;
    use serde_json::{Value, json};

    fn pod(
        name: &str,
        ns: &str,
        labels: Value,
        owner: Option<&str>,
        node: &str,
    ) -> Arc<KubeObject> {
        let owners: Vec<Value> = owner
            .into_iter()
            .map(|uid| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid}))
            .collect();
        let value = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": owners,
                         "finalizers": ["f1", "f2"]},
            "spec": {"nodeName": node}
        });
        Arc::new(KubeObject::from_value(value, &Transform::default()).expect("valid pod"))
    }

    #[test]
    fn builtin_indexes_follow_add_update_delete() {
        let store = Store::new();
        store.upsert(&mut pod(
            "a",
            "ns1",
            json!({"app": "web"}),
            Some("rs-1"),
            "n1",
        ));
        store.upsert(&mut pod(
            "b",
            "ns1",
            json!({"app": "db"}),
            Some("rs-1"),
            "n1",
        ));
        store.upsert(&mut pod("c", "ns2", json!({"app": "web"}), None, "n2"));

        assert_eq!(
            store.index_keys("namespace", "ns1"),
            Ok(vec!["ns1/a".into(), "ns1/b".into()])
        );
        assert_eq!(
            store.index_keys("owner-uid", "rs-1"),
            Ok(vec!["ns1/a".into(), "ns1/b".into()])
        );
        assert_eq!(
            store.index_keys("label", "app=web"),
            Ok(vec!["ns1/a".into(), "ns2/c".into()])
        );
        assert_eq!(store.index_values("label-key"), Ok(vec!["app".into()]));

        // An update moves the object between index values.
        let old = store.upsert(&mut pod("a", "ns1", json!({"app": "db"}), None, "n1"));
        assert!(old.is_some());
        assert_eq!(
            store.index_keys("label", "app=web"),
            Ok(vec!["ns2/c".into()])
        );
        assert_eq!(
            store.index_keys("owner-uid", "rs-1"),
            Ok(vec!["ns1/b".into()])
        );

        // A delete removes it everywhere, and empty values disappear.
        assert!(store.remove("ns2/c").is_some());
        assert_eq!(store.index_values("label"), Ok(vec!["app=db".into()]));
        assert_eq!(store.index_values("namespace"), Ok(vec!["ns1".into()]));
        assert!(store.remove("ns2/c").is_none());
        assert_eq!(store.len(), 2);
    }

    /// Every built-in index's values and the keys under each.
    fn builtin_contents(store: &Store) -> Vec<(String, String, Vec<String>)> {
        let mut all = Vec::new();
        for (name, _) in index::builtins() {
            for value in store.index_values(name).expect("built-in") {
                let keys = store.index_keys(name, &value).expect("built-in");
                all.push((name.to_owned(), value, keys));
            }
        }
        all
    }

    #[test]
    fn builtin_indexes_are_built_when_first_asked_and_answer_as_ones_kept_from_the_start() {
        let early = Store::new();
        let late = Store::new();
        assert!(builtin_contents(&early).is_empty());
        let changes = |s: &Store| {
            for (name, ns, labels, owner) in [
                ("a", "ns1", json!({"app": "web"}), Some("rs-1")),
                ("b", "ns1", json!({"app": "db"}), Some("rs-1")),
                ("c", "ns2", json!({"tier": "x"}), Some("rs-2")),
                ("a", "ns1", json!({"app": "db", "v": "2"}), None),
            ] {
                s.upsert(&mut pod(name, ns, labels, owner, "n"));
            }
            s.remove("ns1/b");
        };
        changes(&early);
        changes(&late);
        // Nothing was filed in the store no one asked.
        assert!(late.read().indices.is_empty());
        let expected = builtin_contents(&early);
        assert_eq!(builtin_contents(&late), expected);
        assert!(expected.contains(&(
            "owner-uid".to_owned(),
            "rs-2".to_owned(),
            vec!["ns2/c".to_owned()]
        )));
        assert!(expected.contains(&(
            "label-key".to_owned(),
            "v".to_owned(),
            vec!["ns1/a".to_owned()]
        )));
        // A selector starts from an index it builds on the way.
        let fresh = Store::new();
        changes(&fresh);
        let db = Selector::parse("app=db").expect("selector");
        let found = fresh.select(None, &db, |_| true, 10).expect("under 10");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key(), "ns1/a");
        assert!(fresh.read().indices.contains_key(index::LABEL));
        assert!(!fresh.read().indices.contains_key(index::OWNER_UID));
        assert_eq!(
            fresh.index_keys("no-such-index", "x"),
            Err(StoreError::UnknownIndex("no-such-index".into()))
        );
    }

    #[test]
    fn builtin_indexes_are_kept_while_claimed_and_go_with_the_last_claim() {
        let store = Store::new();
        store.upsert(&mut pod(
            "a",
            "ns1",
            json!({"app": "web"}),
            Some("rs-1"),
            "n",
        ));
        assert!(store.built_indexes().is_empty());
        store.claim_builtins();
        store.claim_builtins();
        let built = ["label", "namespace", "owner-uid"]
            .map(String::from)
            .to_vec();
        assert_eq!(store.built_indexes(), built);
        store.upsert(&mut pod(
            "b",
            "ns1",
            json!({"app": "web"}),
            Some("rs-1"),
            "n",
        ));
        store.release_builtins();
        assert_eq!(store.built_indexes(), built, "one claim left");
        assert_eq!(
            store.index_keys("owner-uid", "rs-1"),
            Ok(vec!["ns1/a".into(), "ns1/b".into()])
        );
        store.release_builtins();
        assert!(store.built_indexes().is_empty());
        // Asked for again, an index is built again, and answers the same.
        assert_eq!(
            store.index_keys("label", "app=web"),
            Ok(vec!["ns1/a".into(), "ns1/b".into()])
        );
        assert_eq!(store.built_indexes(), ["label"]);
        assert_eq!(
            store.index_names().len(),
            4,
            "every built-in is still there"
        );
    }

    #[test]
    fn select_stops_past_its_maximum_counting_only_what_it_keeps() {
        let store = Store::new();
        for i in 0..20 {
            let app = if i % 2 == 0 { "web" } else { "db" };
            store.upsert(&mut pod(
                &format!("p{i:02}"),
                "ns",
                json!({"app": app}),
                None,
                "n",
            ));
        }
        for (selector, namespace) in [("", None), ("", Some("ns")), ("app=web", None)] {
            let parsed = Selector::parse(selector).expect("valid selector");
            let all = store.select(namespace, &parsed, |_| true, usize::MAX);
            let n = all.expect("no limit").len();
            assert_eq!(n, if selector.is_empty() { 20 } else { 10 });
            assert_eq!(
                store.select(namespace, &parsed, |_| true, n - 1),
                Err(MoreThan(n - 1)),
                "{selector:?} in {namespace:?}"
            );
            assert_eq!(
                store
                    .select(namespace, &parsed, |_| true, n)
                    .map(|v| v.len()),
                Ok(n)
            );
            // What `keep` drops is not counted against the maximum.
            let kept = store.select(namespace, &parsed, |o| o.name() < "p04", 4);
            let names: Vec<String> = kept
                .expect("at most four kept")
                .iter()
                .map(|o| o.name().to_owned())
                .collect();
            let expected: &[&str] = if selector.is_empty() {
                &["p00", "p01", "p02", "p03"]
            } else {
                &["p00", "p02"]
            };
            assert_eq!(names, expected);
        }
    }

    #[test]
    fn select_answers_as_a_filter_of_every_object_would() {
        let store = Store::new();
        for (name, ns, labels) in [
            ("a", "ns1", json!({"app": "web", "tier": "front"})),
            ("b", "ns1", json!({"app": "db"})),
            ("c", "ns2", json!({"app": "web"})),
            ("d", "ns2", json!({})),
            ("e", "ns1", json!({"app": "web", "tier": "back"})),
        ] {
            store.upsert(&mut pod(name, ns, labels, None, "n1"));
        }
        for selector in [
            "",
            "app=web",
            "app==web",
            "app=web,tier=front",
            "tier=front,app=web",
            "app!=web",
            "app in (web,db)",
            "app notin (web)",
            "tier",
            "!tier",
            "app=none",
            "app=web,!tier",
        ] {
            let parsed = Selector::parse(selector).expect("valid selector");
            for namespace in [None, Some("ns1"), Some("ns2"), Some("ns3")] {
                let mut expected: Vec<String> = store
                    .list()
                    .iter()
                    .filter(|o| namespace.is_none_or(|ns| o.namespace() == Some(ns)))
                    .filter(|o| parsed.matches(&***o))
                    .map(|o| o.key().to_owned())
                    .collect();
                expected.sort();
                let got: Vec<String> = store
                    .select(namespace, &parsed, |_| true, usize::MAX)
                    .expect("no limit")
                    .iter()
                    .map(|o| o.key().to_owned())
                    .collect();
                assert_eq!(got, expected, "{selector:?} in {namespace:?}");
            }
        }
    }

    /// `label-key`, answered from the label index, says what an index filed by each label key
    /// would say: through adds, updates and deletes, for keys that prefix one another and
    /// keys or values holding `=` (which no API server lets through).
    #[test]
    fn label_key_answers_as_a_stored_index_of_label_keys_would() {
        let store = Store::new();
        store
            .add_index("stored-label-key", IndexFunc::LabelKey)
            .expect("new index");
        let check = |when: &str| {
            let values = store.index_values("stored-label-key").expect("stored");
            assert_eq!(
                store.index_values("label-key"),
                Ok(values.clone()),
                "{when}"
            );
            for value in values
                .iter()
                .map(String::as_str)
                .chain(["none", "ap", "a", "x"])
            {
                let keys = store.index_keys("stored-label-key", value);
                assert_eq!(
                    store.index_keys("label-key", value),
                    keys,
                    "{when}: {value}"
                );
                let by = |index| -> Vec<String> {
                    let found = store.by_index(index, value).expect("index");
                    found.iter().map(|o| o.key().to_owned()).collect()
                };
                assert_eq!(by("label-key"), by("stored-label-key"), "{when}: {value}");
            }
        };
        let labels = [
            json!({"app": "web", "app.kubernetes.io/name": "x", "app-x": "1"}),
            json!({"app": "db", "tier": "front"}),
            json!({"a=b": "c", "a": "b=c", "a=": ""}),
            json!({"app": "web", "x=y": "z"}),
            json!({}),
        ];
        for (n, l) in labels.iter().enumerate() {
            store.upsert(&mut pod(&format!("p{n}"), "ns", l.clone(), None, "n1"));
        }
        check("added");
        assert_eq!(
            store.index_values("label-key"),
            Ok([
                "a",
                "a=",
                "a=b",
                "app",
                "app-x",
                "app.kubernetes.io/name",
                "tier",
                "x=y"
            ]
            .map(String::from)
            .to_vec())
        );
        store.upsert(&mut pod("p0", "ns", json!({"tier": "back"}), None, "n1"));
        store.upsert(&mut pod("p4", "ns", json!({"app": "db"}), None, "n1"));
        check("updated");
        assert!(store.remove("ns/p2").is_some());
        assert!(store.remove("ns/p1").is_some());
        check("deleted");
        assert_eq!(
            store.index_keys("label-key", "app"),
            Ok(vec!["ns/p3".into(), "ns/p4".into()])
        );
    }

    #[test]
    fn field_index_added_late_covers_existing_objects() {
        let store = Store::new();
        store.upsert(&mut pod("a", "ns", json!({}), None, "n1"));
        store
            .add_index("node", IndexFunc::JsonPointer("/spec/nodeName".into()))
            .expect("new index");
        store.upsert(&mut pod("b", "ns", json!({}), None, "n2"));
        let on_n1: Vec<String> = store
            .by_index("node", "n1")
            .expect("index exists")
            .iter()
            .map(|o| o.key().to_owned())
            .collect();
        assert_eq!(on_n1, ["ns/a"]);
        assert_eq!(
            store.index_values("node"),
            Ok(vec!["n1".into(), "n2".into()])
        );
        // Re-adding the same definition is fine, a different one is refused.
        assert!(
            store
                .add_index("node", IndexFunc::JsonPointer("/spec/nodeName".into()))
                .is_ok()
        );
        assert!(matches!(
            store.add_index("node", IndexFunc::Namespace),
            Err(StoreError::IndexConflict { .. })
        ));
    }

    #[test]
    fn an_added_index_goes_with_its_last_claim() {
        let store = Store::new();
        let func = IndexFunc::JsonPointer("/spec/nodeName".into());
        store.add_index("p/x", func.clone()).expect("added");
        store.add_index("p/x", func).expect("claimed again");
        store.release_index("p/x");
        assert!(
            store.index_names().contains(&"p/x".to_owned()),
            "one claim left"
        );
        store.release_index("p/x");
        assert!(!store.index_names().contains(&"p/x".to_owned()));
        store.release_index(index::NAMESPACE);
        assert_eq!(store.index_names().len(), 4, "built-ins stay");
    }

    #[test]
    fn array_pointers_index_each_scalar_and_unknown_index_is_an_error() {
        let store = Store::new();
        store.upsert(&mut pod("a", "ns", json!({}), None, "n1"));
        store
            .add_index(
                "finalizer",
                IndexFunc::JsonPointer("/metadata/finalizers".into()),
            )
            .expect("new index");
        assert_eq!(
            store.index_values("finalizer"),
            Ok(vec!["f1".into(), "f2".into()])
        );
        assert_eq!(store.index_keys("finalizer", "f2"), Ok(vec!["ns/a".into()]));
        assert_eq!(
            store.by_index("nope", "x").map(|v| v.len()),
            Err(StoreError::UnknownIndex("nope".into()))
        );
        assert_eq!(store.index_keys("namespace", "absent"), Ok(vec![]));
    }
}
