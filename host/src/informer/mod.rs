//! The informer pipeline: store and indexes, per-type informers, and the shared factory.

pub mod factory;
pub mod index;
mod keys;
pub mod queue;
pub mod store;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use kubewasm_sdk::selector::Selector;

use crate::gvk::Gvk;
use crate::object::{Key, KubeObject};
use crate::source::SourceEvent;
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
}

/// A subscription's change filter: the pointers compared, and how many updates it dropped.
#[derive(Debug, Default)]
pub struct Changes {
    pointers: Vec<Vec<std::borrow::Cow<'static, str>>>,
    /// The pointers as written.
    texts: Vec<String>,
    /// Updates dropped because none of the pointers' values changed.
    pub filtered: AtomicU64,
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
            filtered: AtomicU64::new(0),
        })
    }

    /// The pointers as written.
    pub fn pointers(&self) -> &[String] {
        &self.texts
    }

    /// True when a value at one of the pointers differs between `old` and `new`.
    pub fn changed(&self, old: &KubeObject, new: &KubeObject) -> bool {
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
    /// True when `object` passes the filter.
    pub fn matches(&self, object: &KubeObject) -> bool {
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
                (true, true) => match &self.changes {
                    Some(changes) if !changed(changes, old, new) => {
                        changes.filtered.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    _ => Some(n.clone()),
                },
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
    /// Keys listed so far while a (re)list is streaming in; `None` between lists.
    listing: Option<HashSet<Key>>,
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
        Self {
            gvk,
            store: Store::new(),
            state: Mutex::new(State::default()),
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
            SourceEvent::Listed(object) => {
                let initial = !state.synced;
                let key = self.apply_one(state, object, initial);
                state.listing.get_or_insert_with(HashSet::new).insert(key);
            }
            SourceEvent::ListDone => {
                let seen = state.listing.take().unwrap_or_default();
                state.lists += 1;
                for key in self.store.keys() {
                    if !seen.contains(&*key)
                        && let Some(object) = self.store.remove(&key)
                    {
                        fan_out(
                            state,
                            &Notification::Deleted {
                                object,
                                stale: true,
                            },
                        );
                    }
                }
                if !state.synced {
                    state.synced = true;
                    // Everyone subscribed so far got the first list as initial adds.
                    for sub in &state.subscribers {
                        let _ = sub.tx.push_initial_list_sent();
                    }
                    self.synced.notify_all();
                } else {
                    for sub in &state.subscribers {
                        let _ = sub.tx.push_relisted();
                    }
                }
            }
            SourceEvent::Applied(object) => {
                self.apply_one(state, object, false);
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

    /// Stores `object` unless its state is already stored, and notifies; returns the stored
    /// key.
    fn apply_one(&self, state: &mut State, mut object: Arc<KubeObject>, initial: bool) -> Key {
        if let Some(old) = self.store.get(object.key())
            && unchanged(&old, &object)
        {
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
        if state.synced {
            let _ = tx.push_initial_list_sent();
        }
        tx.wake();
        state.subscribers.push(Subscriber {
            id,
            filter,
            tx,
            changes_class: 0,
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
