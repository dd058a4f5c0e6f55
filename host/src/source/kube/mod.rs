//! The Kubernetes API as a source: discovery, then a reflector per resource type, or one per
//! namespace when the scope names namespaces (as controller-runtime's multi-namespace cache
//! does), so a host granted only Roles in those namespaces can watch them; a scope's label
//! selector is sent to the server.
//!
//! A resource type the server does not serve yet (a CRD installed later) is reported as empty,
//! so it does not hold back readiness, and discovery is retried until it appears; its objects
//! then arrive as adds. Every failed discovery is counted in the type's reflector stats (the
//! watch error counter and `last_error`), bounded in time, and retried on the reflectors'
//! backoff (800 ms doubling to 30 s, cut short when the API server is seen back:
//! `reconnect.rs`).

pub mod client;
mod lines;
pub mod reconnect;
pub mod reflector;
pub mod stats;
pub mod wire;
pub mod write;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use futures::stream::BoxStream;
use kube::api::{ApiResource, GroupVersionKind};
use kube::{Client, discovery};
use tokio::runtime::Handle;
use tokio::sync::mpsc::{Sender, channel};

use crate::gvk::Gvk;
use crate::object::Transform;
use crate::source::{Scope, Source, SourceEvent};
use reconnect::{Backoff, Health};
use reflector::Reflector;
use stats::{ReflectorSnapshot, ReflectorStats};

/// Batches of decoded events (of at most 128) that may wait for the informer: a reflector
/// that decodes faster than its informer applies waits instead of holding a second copy of
/// the cache (a relist's peak).
const BATCHES_BUFFERED: usize = 4;

/// How long one discovery of a type may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A source backed by a Kubernetes API server.
pub struct KubeSource {
    client: Client,
    transform: Transform,
    tasks: Handle,
    stats: Mutex<BTreeMap<Gvk, Arc<ReflectorStats>>>,
    health: Arc<Health>,
}

impl KubeSource {
    /// A source using `client`, running its watches on `tasks`.
    pub fn new(client: Client, transform: Transform, tasks: Handle) -> Self {
        Self {
            health: Health::new(client.clone()),
            client,
            transform,
            tasks,
            stats: Mutex::new(BTreeMap::new()),
        }
    }

    /// False while the API server does not answer (as far as the reflectors' probe knows: it
    /// runs while one of them waits out a failure).
    pub fn reachable(&self) -> bool {
        self.health.reachable()
    }

    /// Probes the API server from now on whatever the reflectors do, so that a hang shows
    /// in [`Self::reachable`] within 20 s (for `readinessFollowsApiServer`).
    pub fn keep_watching(&self) {
        self.health.keep_watching();
    }

    /// Counters of every resource type watched so far, by type.
    pub fn stats(&self) -> Vec<(Gvk, ReflectorSnapshot)> {
        self.stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(gvk, s)| (gvk.clone(), s.snapshot()))
            .collect()
    }
}

impl Source for KubeSource {
    fn watch(&self, gvk: &Gvk, scope: &Scope) -> BoxStream<'static, SourceEvent> {
        let (tx, mut rx) = channel::<Vec<SourceEvent>>(BATCHES_BUFFERED);
        let stats = self
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(gvk.clone())
            .or_default()
            .clone();
        // What the plugins keep is cut at decode (or, for metadata only, not sent at all).
        let transform = self.transform.keeping(scope.keep().clone());
        let (client, gvk) = (self.client.clone(), gvk.clone());
        let health = self.health.clone();
        let scope = scope.clone();
        let tasks = self.tasks.clone();
        self.tasks.spawn(async move {
            let Some((resource, namespaced)) = resolve(&client, &gvk, &tx, &stats, &health).await
            else {
                return;
            };
            let no_slice = scope.share().is_some_and(|s| s.holds_nothing());
            if (scope.namespaces().is_some() && !namespaced) || (no_slice && namespaced) {
                // A cluster-scoped type has nothing in any namespace, and a replica holding
                // no slice has no namespaced object: nothing to watch, and no cluster-wide
                // right needed for it.
                tracing::info!(resource = %gvk, %scope, "nothing in scope: nothing to watch");
                if tx
                    .send(vec![SourceEvent::ListStarted, SourceEvent::ListDone])
                    .await
                    .is_ok()
                {
                    tx.closed().await;
                }
                return;
            }
            let selector = scope.selector().map(ToString::to_string);
            let namespaces: Vec<Option<Arc<str>>> = match scope.namespaces() {
                Some(list) => list.iter().map(|ns| Some(Arc::from(ns.as_str()))).collect(),
                None => vec![None],
            };
            // A JoinSet aborts its tasks when dropped.
            let mut reflectors = tokio::task::JoinSet::new();
            for namespace in namespaces {
                let reflector = Reflector::new(
                    client.clone(),
                    gvk.clone(),
                    &resource,
                    transform.clone(),
                    tx.clone(),
                    stats.clone(),
                    health.clone(),
                )
                .within(namespace, selector.clone())
                // Cluster-scoped objects are every replica's: no shard selector for them.
                .sharded(scope.share().copied().filter(|_| namespaced));
                reflectors.spawn_on(reflector.run(), &tasks);
            }
            // The reflectors go as soon as the stream is dropped (a rescope, the informer
            // stopping), not at their next event: a quiet watch holds its connection minutes.
            tx.closed().await;
            drop(reflectors);
        });
        let mut batch = Vec::new().into_iter();
        Box::pin(futures::stream::poll_fn(move |cx| {
            loop {
                if let Some(event) = batch.next() {
                    return Poll::Ready(Some(event));
                }
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(next)) => batch = next.into_iter(),
                    Poll::Ready(None) => return Poll::Ready(None),
                    Poll::Pending => return Poll::Pending,
                }
            }
        }))
    }
}

/// Finds `gvk` through discovery, retrying until it exists, and whether it is namespaced.
/// `None` when the receiver is gone.
async fn resolve(
    client: &Client,
    gvk: &Gvk,
    tx: &Sender<Vec<SourceEvent>>,
    stats: &ReflectorStats,
    health: &Arc<Health>,
) -> Option<(ApiResource, bool)> {
    let wanted = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    let mut reported_absent = false;
    let mut backoff = Backoff::default();
    loop {
        let found =
            tokio::time::timeout(DISCOVERY_TIMEOUT, discovery::pinned_kind(client, &wanted));
        // A type the server does not serve (yet) has no objects: say so once, so plugins that
        // also watch other types are not held back, and keep looking for it.
        let (absent, e) = match found.await {
            Ok(Ok((resource, caps))) => {
                return Some((resource, caps.scope == discovery::Scope::Namespaced));
            }
            Ok(Err(e)) => (
                matches!(&e, kube::Error::Discovery(_))
                    || matches!(&e, kube::Error::Api(s) if s.code == 404),
                e.to_string(),
            ),
            Err(_) => (false, format!("no answer within {DISCOVERY_TIMEOUT:?}")),
        };
        let delay = backoff.delay();
        stats.note_error(&format!("discovery: {e}"));
        if absent && !reported_absent {
            reported_absent = true;
            tracing::warn!(resource = %gvk, "the API server does not serve this type (yet); treating it as empty and looking again with backoff: {e}");
            tx.send(vec![SourceEvent::ListStarted, SourceEvent::ListDone])
                .await
                .ok()?;
        } else if !absent {
            tracing::warn!(resource = %gvk, "cannot resolve resource type, retrying in {delay:.1?}: {e}");
        }
        if tx.is_closed() {
            return None;
        }
        // A type not served (yet) is no outage: only a server that went away cuts this short.
        health.wait(delay).await;
    }
}
