//! The informer pipeline: store and indexes, per-type informers, and the shared factory.

pub mod factory;
pub mod index;
mod keys;
pub mod queue;
pub mod store;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kubewasm_sdk::selector::Selector;

use crate::gvk::Gvk;
use crate::object::{Key, KubeObject};
use crate::source::{Scope, SourceEvent};
use queue::QueueSender;
use store::Store;

/// One change as a subscriber sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notification {
    /// An object appeared; `initial` when it is part of the subscriber's initial state.
    Added {
        /// The object.
        object: Arc<KubeObject>,
        /// True when sent as initial state rather than because it was just created.
        initial: bool,
    },
    /// An object changed.
    Updated {
        /// The previous state.
        old: Arc<KubeObject>,
        /// The new state.
        new: Arc<KubeObject>,
    },
    /// An object went away (or left the subscriber's filter).
    Deleted {
        /// Its last known state.
        object: Arc<KubeObject>,
        /// True when the deletion was seen only through a relist, so the state may be stale.
        stale: bool,
    },
    /// A periodic resync of an unchanged object.
    Sync(Arc<KubeObject>),
    /// The current state of an object the plugin asked to see again (`requeue-after`).
    Requeue(Arc<KubeObject>),
}

impl Notification {
    /// The object's identity across types: `resource type/key`. Per-plugin queues fold and
    /// retries order by it.
    pub fn id(&self) -> String {
        let o = self.object();
        format!("{}/{}", o.gvk(), o.key())
    }

    /// The newest state of the object this is about.
    pub fn object(&self) -> &Arc<KubeObject> {
        match self {
            Self::Added { object, .. }
            | Self::Deleted { object, .. }
            | Self::Sync(object)
            | Self::Requeue(object) => object,
            Self::Updated { new, .. } => new,
        }
    }
}

/// Which objects of a type a subscriber wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only these namespaces; empty for all.
    pub namespaces: Vec<String>,
    /// Only objects whose labels match.
    pub selector: Selector,
    /// Only objects with these keys (`namespace/name`), when set.
    pub keys: Option<std::collections::BTreeSet<String>>,
    /// Only updates that change a value at one of these pointers (none: every update).
    pub changes: Option<Arc<Changes>>,
    /// The subscriber's other filters on the same type: an object passing any of them is
    /// delivered once, and an update is dropped only when every filter it passes drops it
    /// (a plugin subscribed twice to one type gets each event once).
    pub also: Vec<Filter>,
}

/// A subscription's change filter: the pointers compared, how many updates it dropped, and
/// the plugin whose CPU budget pays for the comparisons.
#[derive(Debug, Default)]
pub struct Changes {
    pointers: Vec<Vec<std::borrow::Cow<'static, str>>>,
    /// The pointers as written.
    texts: Vec<String>,
    /// Updates dropped because none of the pointers' values changed.
    pub filtered: AtomicU64,
    /// Updates passed without a comparison because the plugin was past its CPU budget.
    pub unchecked: AtomicU64,
    /// Whose CPU budget the comparisons are charged to.
    charged: std::sync::OnceLock<Arc<crate::cpu::CpuBudget>>,
}

impl Changes {
    /// A filter on `pointers` (RFC 6901, already checked).
    pub fn new(texts: &[String]) -> Result<Self, crate::object::pointer::PointerError> {
        let pointers = texts
            .iter()
            .map(|p| {
                crate::object::pointer::tokens(p).map(|t| {
                    t.into_iter()
                        .map(|c| std::borrow::Cow::Owned(c.into_owned()))
                        .collect()
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            pointers,
            texts: texts.to_vec(),
            ..Self::default()
        })
    }

    /// Charges the time its comparisons take to `budget` (the plugin's); while the plugin is
    /// past its budget, updates pass without a comparison: the host does no more work for
    /// it, and the plugin's queue folds what it cannot take yet.
    pub fn charge_to(&self, budget: Arc<crate::cpu::CpuBudget>) {
        let _ = self.charged.set(budget);
    }

    /// The pointers as written.
    pub fn pointers(&self) -> &[String] {
        &self.texts
    }

    /// True when a value at one of the pointers differs between `old` and `new`, or when the
    /// plugin it is charged to is past its CPU budget (then nothing is compared).
    pub fn changed(&self, old: &KubeObject, new: &KubeObject) -> bool {
        let Some(budget) = self.charged.get() else {
            return self.compare(old, new);
        };
        let started = std::time::Instant::now();
        if budget.in_debt(started) {
            self.unchecked.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let changed = self.compare(old, new);
        let now = std::time::Instant::now();
        budget.charge(now.saturating_duration_since(started), now);
        changed
    }

    /// True when a value at one of the pointers differs between `old` and `new`.
    fn compare(&self, old: &KubeObject, new: &KubeObject) -> bool {
        // Under `metadata` but for its version, nothing changed when the rest of its text is
        // the same (the usual update of spec or status): two comparisons, no lookup.
        let same_metadata = std::cell::OnceCell::new();
        self.pointers.iter().any(|p| {
            let in_metadata = p.first().is_some_and(|t| t == "metadata")
                && p.get(1).is_some_and(|t| t != "resourceVersion");
            if in_metadata && *same_metadata.get_or_init(|| old.same_metadata_but_version(new)) {
                return false;
            }
            old.raw_field(p) != new.raw_field(p)
        })
    }
}

impl Filter {
    /// True when `object` passes the filter, or one of its others.
    pub fn matches(&self, object: &KubeObject) -> bool {
        self.matches_own(object) || self.also.iter().any(|f| f.matches_own(object))
    }

    /// Whether the update from `old` to `new`, which passes the filter, is delivered: unless
    /// every filter it passes (before or after) has change pointers and none of their values
    /// changed. `changed` compares this filter's pointers (shared by subscribers with the
    /// same); its others compare their own.
    fn update_passes(
        &self,
        old: &KubeObject,
        new: &KubeObject,
        changed: impl FnOnce(&Changes, &KubeObject, &KubeObject) -> bool,
    ) -> bool {
        let concerned = |f: &Filter| f.matches_own(old) || f.matches_own(new);
        let others: Vec<&Filter> = self.also.iter().filter(|f| concerned(f)).collect();
        let mine = concerned(self);
        if (mine && self.changes.is_none()) || others.iter().any(|f| f.changes.is_none()) {
            return true;
        }
        let passes = (mine
            && self
                .changes
                .as_deref()
                .is_some_and(|c| changed(c, old, new)))
            || others
                .iter()
                .filter_map(|f| f.changes.as_deref())
                .any(|c| c.changed(old, new));
        if !passes
            && let Some(c) = self
                .changes
                .as_deref()
                .or_else(|| others.iter().find_map(|f| f.changes.as_deref()))
        {
            c.filtered.fetch_add(1, Ordering::Relaxed);
        }
        passes
    }

    /// True when `object` passes this filter itself (its others aside).
    fn matches_own(&self, object: &KubeObject) -> bool {
        let ns_ok = self.namespaces.is_empty()
            || object
                .namespace()
                .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns));
        ns_ok
            && self.keys.as_ref().is_none_or(|k| k.contains(object.key()))
            && self.selector.matches(object)
    }

    /// What a subscriber with this filter sees of `n`: an update that moves an object into
    /// the filter is an add, one that moves it out is a delete. `changed` answers whether the
    /// update changed a value at the filter's pointers (shared by subscribers with the same).
    fn view(
        &self,
        n: &Notification,
        changed: impl FnOnce(&Changes, &KubeObject, &KubeObject) -> bool,
    ) -> Option<Notification> {
        match n {
            Notification::Updated { old, new } => match (self.matches(old), self.matches(new)) {
                (true, true) if self.also.is_empty() => match &self.changes {
                    Some(changes) if !changed(changes, old, new) => {
                        changes.filtered.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    _ => Some(n.clone()),
                },
                (true, true) => self.update_passes(old, new, changed).then(|| n.clone()),
                (false, true) => Some(Notification::Added {
                    object: new.clone(),
                    initial: false,
                }),
                (true, false) => Some(Notification::Deleted {
                    object: new.clone(),
                    stale: false,
                }),
                (false, false) => None,
            },
            other => self.matches(other.object()).then(|| other.clone()),
        }
    }
}

struct Subscriber {
    id: u64,
    filter: Filter,
    tx: QueueSender,
    /// Its change filter's number among the distinct ones of the subscribers now (see
    /// `State::number_change_filters`): subscribers whose filters name the same pointers share
    /// one.
    changes_class: usize,
    /// Still to get its end-of-initial-state mark: it subscribed before the first complete
    /// list, or while a rescoped list was streaming in. Adds it gets meanwhile are initial.
    awaiting: bool,
}

/// A list of the current scope that has not completed yet: the first one, or the one after
/// the scope changed.
#[derive(Debug)]
enum Round {
    /// A list of the whole scope (`ListDone`).
    Whole,
    /// One list per namespace; these have not completed yet.
    Namespaces(BTreeSet<String>),
}

#[derive(Default)]
struct State {
    subscribers: Vec<Subscriber>,
    /// How many distinct lists of change-filter pointers the subscribers name: ten copies of
    /// a plugin filtering on `/spec` cost one comparison per update, not ten.
    change_filters: usize,
    /// Per distinct change filter, whether the update being fanned out changed it (reused
    /// from update to update).
    changed: Vec<Option<bool>>,
    synced: bool,
    /// The objects kept: others the source sends are dropped before the store.
    scope: Scope,
    /// The list of the current scope still streaming in, if any.
    round: Option<Round>,
    /// The current scope took over part of the replica's share: what its list adds was not
    /// created, it is state another replica had, so it goes out as initial adds.
    taking_over: bool,
    /// Keys listed so far while a (re)list is streaming in; `None` between lists.
    listing: Option<HashSet<Key>>,
    /// The same per namespace, for sources that list a scope's namespaces one by one.
    listing_namespace: HashMap<Arc<str>, HashSet<Key>>,
    /// Complete lists applied (the first one and every relist).
    lists: u64,
    /// Objects received from the source (listed, applied, deleted).
    received: u64,
}

/// One resource type's cache and its subscribers. Events are applied to the store and fanned
/// out to subscribers under one lock, so every subscriber sees the store's order.
pub struct Informer {
    gvk: Gvk,
    store: Store,
    state: Mutex<State>,
    synced: Condvar,
    next_id: AtomicU64,
}

impl Informer {
    /// An empty, not yet synced informer for `gvk`.
    pub fn new(gvk: Gvk) -> Self {
        Self::scoped(gvk, Scope::everything())
    }

    /// An empty, not yet synced informer keeping the objects of `gvk` in `scope`.
    pub fn scoped(gvk: Gvk, scope: Scope) -> Self {
        let state = State {
            round: Some(Round::of(&scope)),
            scope,
            ..State::default()
        };
        Self {
            gvk,
            store: Store::new(),
            state: Mutex::new(state),
            synced: Condvar::new(),
            next_id: AtomicU64::new(1),
        }
    }

    /// The resource type.
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// The cache, for queries.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// True once the first complete list has been applied.
    pub fn has_synced(&self) -> bool {
        self.state().synced
    }

    /// The objects it keeps.
    pub fn scope(&self) -> Scope {
        self.state().scope.clone()
    }

    /// Keeps the objects of `scope` from now on; the source's next list (of the new scope)
    /// must follow. Stored objects outside it go at once, without an event; objects it adds
    /// arrive with that list, as adds to the subscribers whose filters hold them (initial
    /// ones when the replica's share took them over) and nothing to the others, and a
    /// subscriber registered before that list completes gets its end-of-initial-state mark
    /// only then.
    pub fn rescope(&self, scope: Scope) {
        let mut state = self.state();
        // Silently: no subscriber's filter holds what its plugin's scope left out, and what a
        // share gives up is another replica's to deliver now, not gone.
        for object in self.store.list() {
            if !scope.admits(&object) {
                self.store.remove(object.key());
            }
        }
        state.round = Some(Round::of(&scope));
        state.taking_over = takes_over(state.scope.share(), scope.share());
        state.scope = scope;
        state.listing = None;
        state.listing_namespace.clear();
        for sub in &state.subscribers {
            sub.tx.wake();
        }
    }

    /// Objects received from the source so far (listed, applied and deleted).
    pub fn received(&self) -> u64 {
        self.state().received
    }

    /// Complete lists applied so far: 1 after the first sync, one more per relist.
    pub fn lists(&self) -> u64 {
        self.state().lists
    }

    /// Waits up to `timeout` for the first complete list; returns whether it arrived.
    pub fn wait_synced(&self, timeout: Duration) -> bool {
        let state = self.state();
        let (state, _) = self
            .synced
            .wait_timeout_while(state, timeout, |s| !s.synced)
            .unwrap_or_else(PoisonError::into_inner);
        state.synced
    }

    /// Applies one source event to the store and notifies subscribers. A (re)list streams
    /// into the store object by object, so the cache is never held twice.
    pub fn apply(&self, event: SourceEvent) {
        self.apply_all([event]);
    }

    /// Applies source events in order under one lock, waking each subscriber once at the end
    /// rather than once per event.
    pub fn apply_all(&self, events: impl IntoIterator<Item = SourceEvent>) {
        let mut state = self.state();
        for event in events {
            self.apply_locked(&mut state, event);
        }
        for sub in &state.subscribers {
            sub.tx.wake();
        }
    }

    fn apply_locked(&self, state: &mut State, event: SourceEvent) {
        if matches!(
            event,
            SourceEvent::Listed(_) | SourceEvent::Applied(_) | SourceEvent::Deleted(_)
        ) {
            state.received += 1;
        }
        match event {
            SourceEvent::ListStarted => state.listing = Some(HashSet::new()),
            SourceEvent::NamespaceListStarted(ns) => {
                state.listing_namespace.insert(ns, HashSet::new());
            }
            SourceEvent::Listed(object) => {
                if !state.scope.admits(&object) {
                    // Not named: a list's end deletes it if it was stored.
                    return;
                }
                let initial = !state.synced || (state.round.is_some() && state.taking_over);
                let key = self.apply_one(state, object, initial);
                // A namespaced object's key is `namespace/name` (a name has no `/`).
                let namespace = key.split_once('/').map(|(ns, _)| ns);
                match namespace.and_then(|ns| state.listing_namespace.get_mut(ns)) {
                    Some(seen) => seen.insert(key),
                    None => state.listing.get_or_insert_with(HashSet::new).insert(key),
                };
            }
            SourceEvent::ListDone => {
                let seen = state.listing.take().unwrap_or_default();
                self.remove_unlisted(state, &seen, None);
                let round = state.round.take().is_some();
                self.list_complete(state, round);
            }
            SourceEvent::NamespaceListDone(ns) => {
                let seen = state.listing_namespace.remove(&ns).unwrap_or_default();
                self.remove_unlisted(state, &seen, Some(&ns));
                match &mut state.round {
                    Some(Round::Namespaces(left)) => {
                        left.remove(&*ns);
                        if left.is_empty() {
                            state.round = None;
                            self.list_complete(state, true);
                        }
                    }
                    Some(Round::Whole) => {}
                    // One namespace relisted (its watch expired): a relist.
                    None => self.list_complete(state, false),
                }
            }
            SourceEvent::Applied(object) => {
                if state.scope.admits(&object) {
                    self.apply_one(state, object, false);
                } else {
                    // It left the scope (a label changed where no server filters).
                    self.drop_stored(state, object.key(), false);
                }
            }
            SourceEvent::Deleted(object) => {
                if self.store.remove(object.key()).is_some() {
                    fan_out(
                        state,
                        &Notification::Deleted {
                            object,
                            stale: false,
                        },
                    );
                }
            }
        }
    }

    /// Removes the stored objects `seen` does not name (of `namespace`, when given), as stale
    /// deletes: they went while the source was not watching.
    fn remove_unlisted(&self, state: &mut State, seen: &HashSet<Key>, namespace: Option<&str>) {
        for key in self.store.keys() {
            let in_namespace = namespace.is_none_or(|ns| {
                key.strip_prefix(ns)
                    .is_some_and(|rest| rest.starts_with('/'))
            });
            if in_namespace && !seen.contains(&*key) {
                self.drop_stored(state, &key, true);
            }
        }
    }

    /// Removes the object stored under `key`, if any, and notifies its deletion with the
    /// state stored (`stale`: seen gone only by a list).
    fn drop_stored(&self, state: &mut State, key: &str, stale: bool) {
        if let Some(object) = self.store.remove(key) {
            fan_out(state, &Notification::Deleted { object, stale });
        }
    }

    /// A list completed: `round` when it was the first one or the one a new scope needed
    /// (subscribers waiting for their initial state get its end mark, and no one else hears
    /// of it), else a relist (every subscriber gets a relisted mark).
    fn list_complete(&self, state: &mut State, round: bool) {
        state.lists += 1;
        if !round {
            for sub in &state.subscribers {
                let _ = sub.tx.push_relisted();
            }
            return;
        }
        for sub in &mut state.subscribers {
            if std::mem::take(&mut sub.awaiting) {
                let _ = sub.tx.push_initial_list_sent();
            }
        }
        if !state.synced {
            state.synced = true;
            self.synced.notify_all();
        }
    }

    /// Stores `object` unless its state is already stored, and notifies; returns the stored
    /// key.
    fn apply_one(&self, state: &mut State, mut object: Arc<KubeObject>, initial: bool) -> Key {
        if let Some(old) = self.store.get(object.key())
            && unchanged(&old, &object)
        {
            // The list of a new scope may keep other fields of the same state: stored in its
            // place, and no event (the object did not change).
            if state.round.is_some() && !old.same_json(&object) {
                self.store.upsert(&mut object);
                return object.shared_key().clone();
            }
            return old.shared_key().clone();
        }
        let previous = self.store.upsert(&mut object);
        let key = object.shared_key().clone();
        let notification = match previous {
            Some(old) => Notification::Updated { old, new: object },
            None => Notification::Added { object, initial },
        };
        fan_out(state, &notification);
        key
    }

    /// Registers a subscriber. It first receives every current object passing `filter` as an
    /// initial add, then an end-of-initial-state mark once the informer has synced, then every
    /// later change, with no gap and no duplicate.
    pub fn subscribe(self: &Arc<Self>, filter: Filter, tx: QueueSender) -> Subscription {
        self.register(None, filter, tx)
    }

    /// Replaces the subscriber `old` by a new one in one step: every event before goes to
    /// `old`, every event after to the new subscriber, which first receives the current
    /// objects passing `filter` as initial adds. No event goes to neither or to both.
    pub fn swap(
        self: &Arc<Self>,
        old: &Subscription,
        filter: Filter,
        tx: QueueSender,
    ) -> Subscription {
        self.register(Some(old.id), filter, tx)
    }

    fn register(
        self: &Arc<Self>,
        replacing: Option<u64>,
        filter: Filter,
        tx: QueueSender,
    ) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        if let Some(old) = replacing {
            state.subscribers.retain(|s| s.id != old);
        }
        self.replay(&filter, &tx, |object| Notification::Added {
            object,
            initial: true,
        });
        // Before the first list, or while the list of a changed scope streams in, the
        // initial state is complete only when it ends.
        let awaiting = !state.synced || state.round.is_some();
        if !awaiting {
            let _ = tx.push_initial_list_sent();
        }
        tx.wake();
        state.subscribers.push(Subscriber {
            id,
            filter,
            tx,
            changes_class: 0,
            awaiting,
        });
        state.number_change_filters();
        Subscription {
            informer: self.clone(),
            id,
        }
    }

    /// Sends every current object passing the subscriber's filter as a sync event.
    fn resync(&self, id: u64) {
        let state = self.state();
        let Some(sub) = state.subscribers.iter().find(|s| s.id == id) else {
            return;
        };
        self.replay(&sub.filter, &sub.tx, Notification::Sync);
        sub.tx.wake();
    }

    /// Sends every stored object passing `filter`, in key order, as `wrap` makes it. Callers
    /// hold the state lock, so no change is applied in between. Stops at a closed receiver
    /// (the subscriber is gone).
    fn replay(
        &self,
        filter: &Filter,
        tx: &QueueSender,
        wrap: impl Fn(Arc<KubeObject>) -> Notification,
    ) {
        let mut objects = self.store.list();
        objects.sort_by(|a, b| a.key().cmp(b.key()));
        for object in objects.into_iter().filter(|o| filter.matches(o)) {
            if tx.push(wrap(object)).is_err() {
                return;
            }
        }
    }

    fn unsubscribe(&self, id: u64) {
        let mut state = self.state();
        state.subscribers.retain(|s| s.id != id);
        state.number_change_filters();
    }

    /// Number of registered subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.state().subscribers.len()
    }
}

/// Same object state: equal resource versions, or equal text when versions are absent.
fn unchanged(old: &KubeObject, new: &KubeObject) -> bool {
    if old.resource_version().is_empty() || new.resource_version().is_empty() {
        old.same_json(new)
    } else {
        old.resource_version() == new.resource_version()
    }
}

impl Round {
    /// The list that makes `scope` complete.
    fn of(scope: &Scope) -> Self {
        match scope.namespaces() {
            Some(namespaces) => Round::Namespaces(namespaces.clone()),
            None => Round::Whole,
        }
    }
}

impl State {
    /// Numbers the distinct change filters of the subscribers now (called whenever they
    /// change), so what is kept follows the live subscribers only.
    fn number_change_filters(&mut self) {
        let mut distinct: Vec<&[String]> = Vec::new();
        let classes: Vec<usize> = self
            .subscribers
            .iter()
            .map(|sub| match &sub.filter.changes {
                Some(changes) => {
                    let pointers = changes.pointers();
                    distinct
                        .iter()
                        .position(|p| *p == pointers)
                        .unwrap_or_else(|| {
                            distinct.push(pointers);
                            distinct.len() - 1
                        })
                }
                None => 0,
            })
            .collect();
        self.change_filters = distinct.len();
        for (sub, class) in self.subscribers.iter_mut().zip(classes) {
            sub.changes_class = class;
        }
    }
}

/// True when going from share `old` to `new` (`None`: everything) gains objects.
fn takes_over(old: Option<&crate::shard::Share>, new: Option<&crate::shard::Share>) -> bool {
    match (old, new) {
        (_, None) => old.is_some(),
        (None, Some(_)) => false,
        (Some(old), Some(new)) => {
            old.key != new.key || old.cuts != new.cuts || !new.slices.minus(old.slices).is_empty()
        }
    }
}

fn fan_out(state: &mut State, n: &Notification) {
    let mut changed = std::mem::take(&mut state.changed);
    changed.clear();
    changed.resize(state.change_filters, None);
    let before = state.subscribers.len();
    state.subscribers.retain(|sub| {
        let view = sub.filter.view(n, |changes, old, new| {
            match changed.get_mut(sub.changes_class) {
                Some(known) => *known.get_or_insert_with(|| changes.changed(old, new)),
                None => changes.changed(old, new),
            }
        });
        match view {
            // Part of the initial state of a subscriber still waiting for it.
            Some(Notification::Added { object, .. }) if sub.awaiting => sub
                .tx
                .push(Notification::Added {
                    object,
                    initial: true,
                })
                .is_ok(),
            Some(view) => sub.tx.push(view).is_ok(),
            None => true,
        }
    });
    state.changed = changed;
    if state.subscribers.len() != before {
        state.number_change_filters();
    }
}

/// A claim on a named index of an informer's store, or on its built-in indexes; the index
/// goes with its last claim.
pub struct IndexClaim {
    informer: Arc<Informer>,
    /// `None`: the built-in indexes.
    name: Option<String>,
}

impl IndexClaim {
    /// Adds (or claims again) index `name` computed by `func` on `informer`'s store.
    pub fn new(
        informer: &Arc<Informer>,
        name: &str,
        func: index::IndexFunc,
    ) -> Result<Self, store::StoreError> {
        informer.store().add_index(name, func)?;
        Ok(Self {
            informer: informer.clone(),
            name: Some(name.to_owned()),
        })
    }

    /// Claims the built-in indexes of `informer`'s store, building them if no one had.
    pub fn builtins(informer: &Arc<Informer>) -> Self {
        informer.store().claim_builtins();
        Self {
            informer: informer.clone(),
            name: None,
        }
    }
}

impl Drop for IndexClaim {
    fn drop(&mut self) {
        match &self.name {
            Some(name) => self.informer.store().release_index(name),
            None => self.informer.store().release_builtins(),
        }
    }
}

/// A registration with an informer; dropping it unsubscribes.
pub struct Subscription {
    informer: Arc<Informer>,
    id: u64,
}

impl Subscription {
    /// The informer subscribed to.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }

    /// Queues a sync event for every current object passing this subscription's filter.
    pub fn resync(&self) {
        self.informer.resync(self.id);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.informer.unsubscribe(self.id);
    }
}

#[cfg(test)]
mod tests;
