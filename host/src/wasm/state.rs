//! The host side of the `state` and `triggers` imports: a plugin's key-value map, kept by the
//! host across instances and versions, and the requeue a `handle` call asks for.
//!
//! A call's changes to the map are held beside it (reads see them) and applied when the
//! call returns Ok, with its writes; a failed or retried call changes nothing.
//!
//! When replicas split the work, a plugin has one map per part of the key space beside its
//! whole one ([`PluginState`]): an event of a namespaced object reads and changes its part's
//! map (its namespace's, or by uid its slice's), which moves with the object; ticks and
//! cluster-scoped events use the whole map, the leader's ([`StateScope`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::wasm::HostState;
use crate::wasm::bindings::kubewasm::plugin::{state, triggers};

use state::StateError;

/// How large a plugin's map may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLimits {
    /// Keys and values together, in bytes (`stateKiB`).
    pub bytes: usize,
    /// Entries.
    pub entries: usize,
    /// One value, in bytes.
    pub value_bytes: usize,
    /// Bytes of its maps written through to the cluster per second, at most (0: no bound);
    /// a map changed meanwhile waits, and is written whole with what it holds then.
    pub write_bytes_per_second: u32,
}

impl Default for StateLimits {
    fn default() -> Self {
        Self {
            bytes: 64 << 10,
            entries: 1024,
            value_bytes: 16 << 10,
            write_bytes_per_second: DEFAULT_WRITE_BYTES_PER_SECOND,
        }
    }
}

/// Bytes of state a plugin writes through per second by default: its map at the default
/// `stateKiB`, once a second.
pub const DEFAULT_WRITE_BYTES_PER_SECOND: u32 = 64 << 10;

/// Longest key.
pub const MAX_KEY_BYTES: usize = 253;

/// The largest `stateKiB`: with [`MAX_STATE_ENTRIES`], the keeper's JSON of a full map,
/// every byte escaped as `\u00XX`, still fits one ConfigMap (`keeper::MAX_BYTES`).
pub const MAX_STATE_KIB: usize = 140;

/// The largest `stateEntries` (see [`MAX_STATE_KIB`]).
pub const MAX_STATE_ENTRIES: usize = 8192;

/// A plugin's map, shared by its instances and versions.
#[derive(Debug, Default)]
pub struct StateStore {
    map: Mutex<Entries>,
    /// When each schedule last ran (the host's, not the plugin's: not in `map`).
    ticks: Mutex<BTreeMap<String, jiff::Timestamp>>,
    /// Moves on every applied change (what persistence watches).
    changes: AtomicU64,
}

/// Which of a plugin's maps a call reads and changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StateScope {
    /// Its whole map: without sharding, every call's; with it, the leader's (ticks,
    /// cluster-scoped events).
    #[default]
    Whole,
    /// With sharding, the map of one part ([`crate::shard::Part`]): the events of the
    /// namespaced objects in it.
    Part(String),
    /// The whole map, read only: with sharding, a call on a replica that does not lead
    /// (`synced`).
    WholeReadOnly,
}

/// A plugin's state: its whole map and, when replicas split the work, one map per part this
/// replica holds (read when its slice is taken over, written and dropped when it is given
/// up). Shared by its instances and versions. The limits bound the maps a replica holds
/// together, so a plugin touching state in many namespaces holds no more than one map may.
#[derive(Debug, Default)]
pub struct PluginState {
    /// Bytes of its maps written through to the cluster.
    pub written_bytes: std::sync::atomic::AtomicU64,
    /// Times a changed map of it waited for its write rate, or for all plugins'.
    pub writes_deferred: std::sync::atomic::AtomicU64,
    whole: Arc<StateStore>,
    parts: Mutex<BTreeMap<String, Arc<StateStore>>>,
    /// Held while a call's changes are checked against the maps together and applied.
    applying: Mutex<()>,
}

impl PluginState {
    /// The whole map (and when each schedule last ran).
    pub fn whole(&self) -> &Arc<StateStore> {
        &self.whole
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<StateStore>>> {
        self.parts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The map calls in `scope` use (a part's, empty until something is kept in it).
    pub fn scoped(&self, scope: &StateScope) -> Arc<StateStore> {
        match scope {
            StateScope::Whole | StateScope::WholeReadOnly => self.whole.clone(),
            StateScope::Part(part) => self.held().entry(part.clone()).or_default().clone(),
        }
    }

    /// Holds `map` as part `part`'s (read where its last holder kept it).
    pub fn set_part(&self, part: &str, map: BTreeMap<String, String>) -> Arc<StateStore> {
        let store = Arc::new(StateStore::default());
        store.replace(map);
        self.held().insert(part.to_owned(), store.clone());
        store
    }

    /// Stops holding part `part`'s map (given up, after it was written).
    pub fn drop_part(&self, part: &str) {
        self.held().remove(part);
    }

    /// The part maps held, by part.
    pub fn parts(&self) -> Vec<(String, Arc<StateStore>)> {
        self.held()
            .iter()
            .map(|(p, m)| (p.clone(), m.clone()))
            .collect()
    }

    /// Entries and bytes of every map held.
    pub fn totals(&self) -> (usize, usize) {
        let (entries, bytes) = self.besides(&StateScope::Whole);
        let (we, wb) = self.whole.totals_with(&BTreeMap::new());
        (entries + we, bytes + wb)
    }

    /// Entries and bytes of every map held but `scope`'s.
    pub fn besides(&self, scope: &StateScope) -> (usize, usize) {
        let none = BTreeMap::new();
        let (own, mut total) = match scope {
            StateScope::Part(part) => (Some(part.as_str()), self.whole.totals_with(&none)),
            StateScope::Whole | StateScope::WholeReadOnly => (None, (0, 0)),
        };
        for (id, map) in self.held().iter() {
            if Some(id.as_str()) != own {
                let (e, b) = map.totals_with(&none);
                total = (total.0 + e, total.1 + b);
            }
        }
        total
    }

    /// Applies a call's changes to `scope`'s map, unless the maps held together would be
    /// over `limits`.
    pub fn apply(
        &self,
        scope: &StateScope,
        changes: BTreeMap<String, Option<String>>,
        limits: &StateLimits,
    ) -> Result<(), String> {
        let _one = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        let besides = self.besides(scope);
        self.scoped(scope).apply_besides(changes, limits, besides)
    }
}

/// The map and the bytes of its keys and values, kept together.
#[derive(Debug, Default)]
struct Entries {
    map: BTreeMap<String, String>,
    bytes: usize,
}

impl Entries {
    fn totals_with(&self, changes: &BTreeMap<String, Option<String>>) -> (usize, usize) {
        let (mut entries, mut bytes) = (self.map.len(), self.bytes);
        for (key, value) in changes {
            if let Some(old) = self.map.get(key) {
                entries -= 1;
                bytes -= key.len() + old.len();
            }
            if let Some(new) = value {
                entries += 1;
                bytes += key.len() + new.len();
            }
        }
        (entries, bytes)
    }
}

fn size(map: &BTreeMap<String, String>) -> usize {
    map.iter().map(|(k, v)| k.len() + v.len()).sum()
}

impl StateStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<String> {
        self.lock().map.get(key).cloned()
    }

    /// A copy of the whole map.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.lock().map.clone()
    }

    /// The keys starting with `prefix`, sorted.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.lock()
            .map
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Replaces the whole map (a new leader's, read from where the old one kept it).
    pub fn replace(&self, map: BTreeMap<String, String>) {
        let bytes = size(&map);
        *self.lock() = Entries { map, bytes };
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// When schedule `name` last ran.
    pub fn last_tick(&self, name: &str) -> Option<jiff::Timestamp> {
        self.ticks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .copied()
    }

    /// Notes that schedule `name` ran for its tick due at `at`.
    pub fn set_tick(&self, name: &str, at: jiff::Timestamp) {
        self.ticks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), at);
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// When every schedule last ran.
    pub fn ticks(&self) -> BTreeMap<String, jiff::Timestamp> {
        self.ticks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces when every schedule last ran (a new leader's, read with the map).
    pub fn replace_ticks(&self, ticks: BTreeMap<String, jiff::Timestamp>) {
        *self.ticks.lock().unwrap_or_else(PoisonError::into_inner) = ticks;
    }

    /// Entries and bytes the map would hold with `changes` applied, without copying it.
    pub fn totals_with(&self, changes: &BTreeMap<String, Option<String>>) -> (usize, usize) {
        self.lock().totals_with(changes)
    }

    /// How many changes were applied so far.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Applies a call's changes (`None`: removed), unless the result would be over `limits`.
    pub fn apply(
        &self,
        changes: BTreeMap<String, Option<String>>,
        limits: &StateLimits,
    ) -> Result<(), String> {
        self.apply_besides(changes, limits, (0, 0))
    }

    /// As [`Self::apply`], with `besides` (entries, bytes) held in the plugin's other maps
    /// counted against the limits too.
    fn apply_besides(
        &self,
        changes: BTreeMap<String, Option<String>>,
        limits: &StateLimits,
        besides: (usize, usize),
    ) -> Result<(), String> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut held = self.lock();
        let (entries, bytes) = held.totals_with(&changes);
        check_counts(entries + besides.0, bytes + besides.1, limits)?;
        for (key, value) in changes {
            let old = match value {
                Some(v) => {
                    held.bytes += key.len() + v.len();
                    held.map.insert(key.clone(), v)
                }
                None => held.map.remove(&key),
            };
            if let Some(old) = old {
                held.bytes -= key.len() + old.len();
            }
        }
        self.changes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn check_counts(entries: usize, bytes: usize, limits: &StateLimits) -> Result<(), String> {
    if entries > limits.entries {
        return Err(format!(
            "{entries} entries: at most {} (stateEntries)",
            limits.entries
        ));
    }
    if bytes > limits.bytes {
        return Err(format!(
            "{bytes} bytes of keys and values: at most {} (stateKiB)",
            limits.bytes
        ));
    }
    Ok(())
}

/// One call's view of the map: changes held until the call returns.
#[derive(Debug, Default)]
pub struct StateCall {
    /// Which map the calls use (set by the dispatcher before each call).
    pub scope: StateScope,
    /// Changes are possible (during `handle`, `synced`, `tick`).
    open: bool,
    /// The call is `handle` (a requeue names its event's object).
    handling: bool,
    changes: BTreeMap<String, Option<String>>,
    /// What `requeue-after` asked for.
    requeue: Option<Duration>,
    /// Entries and bytes of the plugin's other maps, read at the call's first change.
    besides: Option<(usize, usize)>,
}

impl StateCall {
    /// Opens a call that may change the map and, when `handling`, ask for a requeue.
    pub fn open(&mut self, handling: bool) {
        *self = Self {
            scope: std::mem::take(&mut self.scope),
            open: true,
            handling,
            ..Self::default()
        };
    }

    /// Ends the call: its changes and requeue, to apply if it succeeded.
    pub fn close(&mut self) -> (BTreeMap<String, Option<String>>, Option<Duration>) {
        let taken = (std::mem::take(&mut self.changes), self.requeue.take());
        self.open = false;
        self.handling = false;
        taken
    }
}

impl HostState {
    fn state_refusal(&self) -> Option<StateError> {
        if !self.ctx.state_declared {
            return Some(StateError::NotDeclared(
                "the manifest does not declare `state`".into(),
            ));
        }
        if !self.call.open {
            return Some(StateError::Unavailable(
                "state changes are possible in handle, synced and tick only".into(),
            ));
        }
        if self.call.scope == StateScope::WholeReadOnly {
            return Some(StateError::Unavailable(
                "replicas split the work and this one does not lead: the cluster-wide state \
                 is the leader's (an event's state is its slice's)"
                    .into(),
            ));
        }
        None
    }

    /// The map this call uses.
    fn map(&self) -> Arc<StateStore> {
        self.ctx.state.scoped(&self.call.scope)
    }
}

impl state::Host for HostState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        if let Some(change) = self.call.changes.get(&key) {
            return Ok(change.clone());
        }
        Ok(self.map().get(&key))
    }

    fn set(&mut self, key: String, value: String) -> wasmtime::Result<Result<(), StateError>> {
        if let Some(refused) = self.state_refusal() {
            return Ok(Err(refused));
        }
        let limits = &self.ctx.limits.state;
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Ok(Err(StateError::TooLarge(format!(
                "a key of {} bytes: 1 to {MAX_KEY_BYTES}",
                key.len()
            ))));
        }
        if value.len() > limits.value_bytes {
            return Ok(Err(StateError::TooLarge(format!(
                "a value of {} bytes: at most {}",
                value.len(),
                limits.value_bytes
            ))));
        }
        let besides = match self.call.besides {
            Some(b) => b,
            None => *self
                .call
                .besides
                .insert(self.ctx.state.besides(&self.call.scope)),
        };
        let previous = self.call.changes.insert(key.clone(), Some(value));
        let (entries, bytes) = self.map().totals_with(&self.call.changes);
        if let Err(e) = check_counts(entries + besides.0, bytes + besides.1, limits) {
            match previous {
                Some(p) => self.call.changes.insert(key, p),
                None => self.call.changes.remove(&key),
            };
            return Ok(Err(StateError::TooLarge(e)));
        }
        Ok(Ok(()))
    }

    fn remove(&mut self, key: String) -> wasmtime::Result<Result<(), StateError>> {
        if let Some(refused) = self.state_refusal() {
            return Ok(Err(refused));
        }
        self.call.changes.insert(key, None);
        Ok(Ok(()))
    }

    fn keys(&mut self, prefix: String) -> wasmtime::Result<Vec<String>> {
        let mut keys: BTreeMap<String, bool> = self
            .map()
            .keys(&prefix)
            .into_iter()
            .map(|k| (k, true))
            .collect();
        for (k, v) in &self.call.changes {
            if k.starts_with(&prefix) {
                keys.insert(k.clone(), v.is_some());
            }
        }
        Ok(keys
            .into_iter()
            .filter(|(_, present)| *present)
            .map(|(k, _)| k)
            .collect())
    }
}

impl triggers::Host for HostState {
    fn requeue_after(&mut self, seconds: u32) -> wasmtime::Result<Result<(), String>> {
        if !self.call.handling {
            return Ok(Err(
                "requeue-after is possible only during handle and reconcile (it names the object)"
                    .into(),
            ));
        }
        self.call.requeue = Some(Duration::from_secs(u64::from(seconds)));
        Ok(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_apply_whole_or_not_at_all_within_the_limits() {
        let store = StateStore::default();
        let limits = StateLimits {
            bytes: 20,
            entries: 2,
            value_bytes: 10,
            ..StateLimits::default()
        };
        let change = |pairs: &[(&str, Option<&str>)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
                .collect()
        };
        store
            .apply(change(&[("a", Some("1")), ("b", Some("2"))]), &limits)
            .expect("fits");
        assert_eq!(store.changes(), 1);
        let refused = store
            .apply(change(&[("c", Some("3"))]), &limits)
            .expect_err("a third entry");
        assert!(refused.contains("stateEntries"), "{refused}");
        assert_eq!(store.get("c"), None, "nothing of a refused change applied");
        store
            .apply(change(&[("a", None), ("c", Some("3"))]), &limits)
            .expect("one out, one in");
        assert_eq!(store.snapshot().len(), 2);
        let too_big = store
            .apply(change(&[("b", Some(&"x".repeat(30)))]), &limits)
            .expect_err("over the bytes");
        assert!(too_big.contains("stateKiB"), "{too_big}");
    }

    #[test]
    fn parts_are_maps_of_their_own_beside_the_whole_one() {
        let state = PluginState::default();
        let limits = StateLimits::default();
        let one = |k: &str| BTreeMap::from([(k.to_owned(), Some("1".to_owned()))]);
        let shop = StateScope::Part("namespace/shop".into());
        state.scoped(&shop).apply(one("a"), &limits).expect("fits");
        state
            .scoped(&StateScope::Whole)
            .apply(one("w"), &limits)
            .expect("fits");
        assert_eq!(state.scoped(&shop).get("a").as_deref(), Some("1"));
        assert_eq!(
            state.whole().get("a"),
            None,
            "a part's entry is not the whole map's"
        );
        assert_eq!(
            state.scoped(&StateScope::WholeReadOnly).get("w").as_deref(),
            Some("1")
        );
        assert_eq!(state.totals().0, 2);
        // Read back where the last holder kept it, then given up.
        state.set_part(
            "namespace/shop",
            BTreeMap::from([("b".to_owned(), "2".to_owned())]),
        );
        assert_eq!(state.scoped(&shop).get("a"), None);
        assert_eq!(state.parts().len(), 1);
        state.drop_part("namespace/shop");
        assert!(state.parts().is_empty());
        assert_eq!(state.totals().0, 1);
    }

    #[test]
    fn the_limits_bound_a_plugins_maps_together() {
        let state = PluginState::default();
        let limits = StateLimits {
            bytes: 1 << 10,
            entries: 2,
            value_bytes: 64,
            ..StateLimits::default()
        };
        let one = |k: &str| BTreeMap::from([(k.to_owned(), Some("1".to_owned()))]);
        let part = |n: &str| StateScope::Part(format!("namespace/{n}"));
        state.apply(&part("a"), one("x"), &limits).expect("fits");
        state.apply(&part("b"), one("x"), &limits).expect("fits");
        // Each map alone holds one entry: the third entry of the plugin is refused wherever
        // it goes, a new namespace's map or the whole one.
        for scope in [part("c"), part("a"), StateScope::Whole] {
            let refused = state
                .apply(&scope, one("y"), &limits)
                .expect_err("a third entry");
            assert!(refused.contains("stateEntries"), "{refused}");
        }
        assert_eq!(state.totals().0, 2);
        // Replacing an entry in place stays within them.
        state
            .apply(&part("a"), one("x"), &limits)
            .expect("same count");
        assert_eq!(state.besides(&part("a")), (1, 2));
    }
}
