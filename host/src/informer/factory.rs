//! Shared informers: one per resource type, started on first use and stopped after the last.
//! Each keeps the union of its users' scopes; when a user comes or goes and the union moves,
//! the source is asked for the new scope and its list is diffed into the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::{FutureExt, StreamExt};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::gvk::Gvk;
use crate::informer::Informer;
use crate::shard::Share;
use crate::source::{Scope, Source};

/// Most source events applied under one lock: bounds how long a subscriber waits for the
/// first of them.
const MAX_BATCH: usize = 256;

struct Entry {
    informer: Arc<Informer>,
    /// Each lease's scope, by lease.
    users: HashMap<u64, Scope>,
    task: JoinHandle<()>,
    started: std::time::Instant,
    /// How many times the scope changed.
    rescopes: u64,
}

/// One informer's counters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InformerStats {
    /// Its resource type.
    pub gvk: Gvk,
    /// Events received from the source (listed, applied and deleted objects).
    pub received: u64,
    /// Objects in its cache.
    pub cached: usize,
    /// Their JSON text, in bytes.
    #[serde(default)]
    pub cached_bytes: u64,
    /// Whether its first list has completed.
    pub synced: bool,
    /// Seconds since it started.
    pub running_seconds: u64,
    /// What it watches and keeps: `everything`, or namespaces and labels.
    #[serde(default = "everything")]
    pub scope: String,
    /// How many times its scope changed (each a list of the new scope).
    #[serde(default)]
    pub rescopes: u64,
}

fn everything() -> String {
    Scope::everything().to_string()
}

/// Hands out shared informers by resource type, all fed by one source.
pub struct InformerFactory {
    source: Arc<dyn Source>,
    tasks: Handle,
    entries: Mutex<HashMap<Gvk, Entry>>,
    next_lease: std::sync::atomic::AtomicU64,
    /// This replica's share of the namespaced objects, when replicas split the work.
    share: Mutex<Option<Share>>,
}

impl InformerFactory {
    /// A factory whose informers watch `source`, running their tasks on `tasks`.
    pub fn new(source: Arc<dyn Source>, tasks: Handle) -> Arc<Self> {
        Arc::new(Self {
            source,
            tasks,
            entries: Mutex::new(HashMap::new()),
            next_lease: std::sync::atomic::AtomicU64::new(1),
            share: Mutex::new(None),
        })
    }

    /// This replica's share of the namespaced objects (`None`: all of them).
    pub fn share(&self) -> Option<Share> {
        *self.share.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps only `share` of the namespaced objects from now on: every informer whose scope
    /// moves lists its new scope. Objects taken over arrive as initial adds; objects given
    /// up leave the cache without an event.
    pub fn set_share(&self, share: Option<Share>) {
        *self.share.lock().unwrap_or_else(PoisonError::into_inner) = share;
        let share = self.share();
        for entry in self.entries().values_mut() {
            self.rescope_if_moved(entry, share);
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<Gvk, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The informer for `gvk`, keeping at least the objects in `scope`, started if this is
    /// its first user. It runs while the lease lives.
    pub fn acquire(self: &Arc<Self>, gvk: &Gvk, scope: &Scope) -> Lease {
        let id = self
            .next_lease
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let share = self.share();
        let mut entries = self.entries();
        let entry = entries.entry(gvk.clone()).or_insert_with(|| {
            let scope = scope.clone().sharing(share);
            tracing::info!(resource = %gvk, %scope, "starting informer");
            let informer = Arc::new(Informer::scoped(gvk.clone(), scope.clone()));
            Entry {
                task: self.feed(&informer, &scope),
                informer,
                users: HashMap::new(),
                started: std::time::Instant::now(),
                rescopes: 0,
            }
        });
        entry.users.insert(id, scope.clone());
        let informer = entry.informer.clone();
        self.rescope_if_moved(entry, share);
        Lease {
            factory: self.clone(),
            informer,
            scope: scope.clone(),
            id,
        }
    }

    /// Watches the union of the users' scopes within `share`, when that is no longer what
    /// the informer keeps.
    fn rescope_if_moved(&self, entry: &mut Entry, share: Option<Share>) {
        let wanted = Scope::union_of(entry.users.values()).sharing(share);
        let informer = &entry.informer;
        let current = informer.scope();
        if wanted == current {
            return;
        }
        tracing::info!(resource = %informer.gvk(), from = %current, to = %wanted, "watching a new scope: listing it and keeping the difference");
        entry.rescopes += 1;
        // The old stream stops between two batches; the new one starts with a list that the
        // informer diffs against what it holds.
        entry.task.abort();
        informer.rescope(wanted.clone());
        entry.task = self.feed(informer, &wanted);
    }

    /// Starts the task applying the source's stream of `scope` to `informer`.
    fn feed(&self, informer: &Arc<Informer>, scope: &Scope) -> JoinHandle<()> {
        let mut stream = self.source.watch(informer.gvk(), scope);
        let feed = informer.clone();
        self.tasks.spawn(async move {
            while let Some(event) = stream.next().await {
                // What else has arrived goes in the same batch: one lock, one wake per
                // subscriber.
                let mut batch = vec![event];
                let mut ended = false;
                while batch.len() < MAX_BATCH {
                    match stream.next().now_or_never() {
                        Some(Some(event)) => batch.push(event),
                        Some(None) => {
                            ended = true;
                            break;
                        }
                        None => break,
                    }
                }
                feed.apply_all(batch);
                if ended {
                    break;
                }
            }
        })
    }

    fn release(&self, gvk: &Gvk, id: u64) {
        let share = self.share();
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(gvk) else {
            return;
        };
        entry.users.remove(&id);
        if entry.users.is_empty() {
            if let Some(entry) = entries.remove(gvk) {
                tracing::info!(resource = %gvk, "stopping informer: no plugin needs it");
                entry.task.abort();
            }
        } else {
            self.rescope_if_moved(entry, share);
        }
    }

    /// The running informer for `gvk`, if any.
    pub fn get(&self, gvk: &Gvk) -> Option<Arc<Informer>> {
        self.entries().get(gvk).map(|e| e.informer.clone())
    }

    /// Counters of every running informer, by type.
    pub fn stats(&self) -> Vec<InformerStats> {
        let informers: Vec<(Arc<Informer>, u64, u64)> = self
            .entries()
            .values()
            .map(|e| {
                (
                    e.informer.clone(),
                    e.started.elapsed().as_secs(),
                    e.rescopes,
                )
            })
            .collect();
        let mut stats: Vec<_> = informers
            .iter()
            .map(|(i, running_seconds, rescopes)| InformerStats {
                gvk: i.gvk().clone(),
                received: i.received(),
                cached: i.store().len(),
                cached_bytes: i.store().text_bytes() as u64,
                synced: i.has_synced(),
                running_seconds: *running_seconds,
                scope: i.scope().to_string(),
                rescopes: *rescopes,
            })
            .collect();
        stats.sort_by(|a, b| a.gvk.cmp(&b.gvk));
        stats
    }

    /// The resource types with a running informer, sorted.
    pub fn running(&self) -> Vec<Gvk> {
        let mut gvks: Vec<Gvk> = self.entries().keys().cloned().collect();
        gvks.sort();
        gvks
    }
}

/// A claim on a running informer; the informer stops when its last lease is dropped.
pub struct Lease {
    factory: Arc<InformerFactory>,
    informer: Arc<Informer>,
    scope: Scope,
    id: u64,
}

impl Lease {
    /// The informer.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }

    /// The objects this lease asked the informer to keep.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.factory.release(self.informer.gvk(), self.id);
    }
}
