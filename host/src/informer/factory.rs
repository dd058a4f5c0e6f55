//! Shared informers: one per resource type, started on first use and stopped after the last.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::{FutureExt, StreamExt};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::gvk::Gvk;
use crate::informer::Informer;
use crate::source::Source;

/// Most source events applied under one lock: bounds how long a subscriber waits for the
/// first of them.
const MAX_BATCH: usize = 256;

struct Entry {
    informer: Arc<Informer>,
    users: usize,
    task: JoinHandle<()>,
    started: std::time::Instant,
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
    /// Whether its first list has completed.
    pub synced: bool,
    /// Seconds since it started.
    pub running_seconds: u64,
}

/// Hands out shared informers by resource type, all fed by one source.
pub struct InformerFactory {
    source: Arc<dyn Source>,
    tasks: Handle,
    entries: Mutex<HashMap<Gvk, Entry>>,
}

impl InformerFactory {
    /// A factory whose informers watch `source`, running their tasks on `tasks`.
    pub fn new(source: Arc<dyn Source>, tasks: Handle) -> Arc<Self> {
        Arc::new(Self {
            source,
            tasks,
            entries: Mutex::new(HashMap::new()),
        })
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<Gvk, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The informer for `gvk`, started if this is its first user. It runs while the lease lives.
    pub fn acquire(self: &Arc<Self>, gvk: &Gvk) -> Lease {
        let mut entries = self.entries();
        let entry = entries.entry(gvk.clone()).or_insert_with(|| {
            tracing::info!(resource = %gvk, "starting informer");
            let informer = Arc::new(Informer::new(gvk.clone()));
            let mut stream = self.source.watch(gvk);
            let feed = informer.clone();
            let task = self.tasks.spawn(async move {
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
            });
            Entry {
                informer,
                users: 0,
                task,
                started: std::time::Instant::now(),
            }
        });
        entry.users += 1;
        Lease {
            factory: self.clone(),
            informer: entry.informer.clone(),
        }
    }

    fn release(&self, gvk: &Gvk) {
        let mut entries = self.entries();
        let Some(entry) = entries.get_mut(gvk) else {
            return;
        };
        entry.users -= 1;
        if entry.users == 0
            && let Some(entry) = entries.remove(gvk)
        {
            tracing::info!(resource = %gvk, "stopping informer: no plugin needs it");
            entry.task.abort();
        }
    }

    /// The running informer for `gvk`, if any.
    pub fn get(&self, gvk: &Gvk) -> Option<Arc<Informer>> {
        self.entries().get(gvk).map(|e| e.informer.clone())
    }

    /// Counters of every running informer, by type.
    pub fn stats(&self) -> Vec<InformerStats> {
        let informers: Vec<(Arc<Informer>, u64)> = self
            .entries()
            .values()
            .map(|e| (e.informer.clone(), e.started.elapsed().as_secs()))
            .collect();
        let mut stats: Vec<_> = informers
            .iter()
            .map(|(i, running_seconds)| InformerStats {
                gvk: i.gvk().clone(),
                received: i.received(),
                cached: i.store().len(),
                synced: i.has_synced(),
                running_seconds: *running_seconds,
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
}

impl Lease {
    /// The informer.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.factory.release(self.informer.gvk());
    }
}
