//! A controller plugin's side of its worker: events wake keys (`controller::Spec::wakes`)
//! into a work queue (`controller::WorkQueue`), and each key ready is reconciled, or, when its
//! object is being deleted and carries the plugin's finalizer, finalized. The host keeps the
//! finalizer: it is added with the first successful reconcile of a live object, and removed
//! once `finalize` returns Ok, each by a JSON patch that names the resourceVersion the plugin
//! saw (a conflict is retried, never a lost finalizer).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::controller::{Spec, WorkQueue, children, finalizer, finalizers, terminating};
use crate::informer::Notification;
use crate::object::{Key, KubeObject};
use crate::plugins::dispatch::{AttemptFailure, Keyed, Work, Worker};
use crate::wasm::cluster::Staged;
use crate::write::{Action, Target, Write};

/// How often a controller looks whether the previous version's worker has ended.
const AFTER_POLL: Duration = Duration::from_millis(5);

/// A controller's declaration and its keys.
pub(super) struct Controller {
    spec: Spec,
    queue: WorkQueue,
    /// `kubewasm.dev/<plugin>`.
    finalizer: String,
    /// Keys finalized with success, and the version of their object then: until the cache
    /// moves past it, the finalizer's removal is on its way.
    finalized: std::collections::HashMap<Key, String>,
    /// The previous version's worker's end, and the latest it is waited for: a hot swap
    /// reconciles no key while the old version may still be in a call on it.
    after: Option<(Arc<AtomicBool>, Instant)>,
}

impl Controller {
    pub(super) fn new(spec: Spec, plugin: &str, after: Option<(Arc<AtomicBool>, Instant)>) -> Self {
        Self {
            spec,
            queue: WorkQueue::new(Instant::now()),
            finalizer: finalizer(plugin),
            finalized: std::collections::HashMap::new(),
            after,
        }
    }

    /// Whether the previous version's worker may still be in a call (then no key starts).
    fn behind_predecessor(&mut self) -> bool {
        let waiting = self.after.as_ref().is_some_and(|(ended, until)| {
            !ended.load(Ordering::Acquire) && Instant::now() < *until
        });
        if !waiting {
            self.after = None;
        }
        waiting
    }

    /// Queues `keys` as if events had woken them.
    pub(super) fn wake_now(&mut self, keys: Vec<crate::object::Key>) {
        for key in keys {
            self.queue.add(key);
        }
    }
}

/// A JSON patch of `object`'s finalizers, conditional on its resourceVersion (a newer object
/// answers Conflict, which is retried).
fn finalizer_patch(object: &KubeObject, ops: serde_json::Value) -> Write {
    let mut all = vec![serde_json::json!({
        "op": "replace", "path": "/metadata/resourceVersion", "value": object.resource_version(),
    })];
    if let serde_json::Value::Array(more) = ops {
        all.extend(more);
    }
    Write {
        target: Target {
            gvk: object.gvk().clone(),
            namespace: object.namespace().map(str::to_owned),
            name: object.name().to_owned(),
            subresource: None,
        },
        action: Action::JsonPatch(serde_json::Value::Array(all).to_string()),
    }
}

impl Worker {
    /// Wakes the keys `n` names when it is an event of one of the controller's types; true
    /// when it was (it is not handled as an event).
    pub(super) fn wake(&mut self, n: &Notification) -> bool {
        let Some(c) = &mut self.controller else {
            return false;
        };
        let object = n.object();
        let gvk = object.gvk();
        if !c.spec.wakes_on(gvk) {
            return false;
        }
        let store = self.ctx.grants.get(&c.spec.reconciles).map(|i| i.store());
        let exists = |key: &str| store.is_some_and(|s| s.get(key).is_some());
        // The clock is read only for a debounce: the event path stays as short as it was.
        let debounce = self.delivery.debounce;
        let now = (!debounce.is_zero()).then(Instant::now);
        let mut wake = |key| match now {
            Some(now) => c.queue.add_debounced(key, debounce, now),
            None => c.queue.add(key),
        };
        for key in c.spec.wakes(gvk, object, exists) {
            wake(key);
        }
        // A child whose controller changed wakes the one it left too.
        if let Notification::Updated { old, .. } = n {
            for key in c.spec.wakes(gvk, old, exists) {
                wake(key);
            }
        }
        true
    }

    /// Whether the controller has keys to reconcile besides those requeued for later.
    pub(super) fn keys_pending(&self) -> bool {
        self.controller.as_ref().is_some_and(|c| c.queue.pending())
    }

    /// When the next key is ready: now when one is, else when the next timed one is due.
    pub(super) fn keys_due(&mut self) -> Option<Instant> {
        let c = self.controller.as_mut()?;
        if c.queue.ready_len() > 0 {
            if c.behind_predecessor() {
                return Some(Instant::now() + AFTER_POLL);
            }
            return Some(Instant::now());
        }
        c.queue.next_due()
    }

    /// Reconciles (or finalizes) the next key ready by `now`, if any; true when it did.
    pub(super) fn reconcile_next(&mut self, now: Instant) -> bool {
        let Some(c) = &mut self.controller else {
            return false;
        };
        if c.behind_predecessor() {
            return false;
        }
        let Some(key) = c.queue.get(now) else {
            return false;
        };
        let gvk = c.spec.reconciles.clone();
        let object = self.ctx.grants.get(&gvk).and_then(|i| i.store().get(&key));
        let finalizing = object
            .as_ref()
            .is_some_and(|o| terminating(o) && finalizers(o).contains(&c.finalizer));
        // Finalized already, and the finalizer's removal sent from this very version: an
        // event woke the key before the cache saw the removal. Not finalized twice.
        // Read only when finalizing: a reconcile pays nothing for it.
        let version = object
            .as_ref()
            .filter(|_| finalizing)
            .map(|o| o.resource_version().to_owned());
        if version.is_some() && c.finalized.get(&key) == version.as_ref() {
            c.queue.forget(&key);
            c.queue.done(&key);
            return true;
        }
        if !c.finalized.is_empty() {
            c.finalized.remove(&key);
        }
        let keyed = Keyed {
            gvk,
            key: key.clone(),
            object,
        };
        let work = if finalizing {
            Work::Finalize(keyed)
        } else {
            Work::Reconcile(keyed)
        };
        self.stats.idle.store(false, Ordering::Relaxed);
        let duty = self.duty.clone();
        let longest = crate::wasm::deadline::wall_cap(self.ctx.limits.deadline);
        let outcome = match duty.begin(longest, |_| self.ours(&work)) {
            None => {
                tracing::debug!(plugin = %self.ctx.name, key = %key, "not reconciled: this replica no longer delivers it");
                None
            }
            Some(call) => {
                let retrying = self
                    .controller
                    .as_ref()
                    .is_some_and(|c| c.queue.failures(&key) > 0);
                self.ctx.log.set_retrying(retrying);
                let attempt = self.attempt(&work);
                drop(call);
                self.ctx.log.set_retrying(false);
                Some(attempt)
            }
        };
        self.take_write_failures_of(&work, outcome.as_ref());
        let Some(c) = &mut self.controller else {
            return true;
        };
        if matches!(outcome, Some(Ok(())))
            && let Some(version) = version
        {
            c.finalized.insert(key.clone(), version);
        }
        match outcome {
            None | Some(Ok(())) => c.queue.forget(&key),
            Some(Err(failure)) => {
                let attempts = c.queue.failures(&key).saturating_add(1);
                let max = self.delivery.max_attempts;
                if failure.retry && (max == 0 || attempts < max) {
                    let delay = c.queue.add_rate_limited(key.clone(), Instant::now());
                    self.stats.retried.fetch_add(1, Ordering::Relaxed);
                    let what = if finalizing { "finalize" } else { "reconcile" };
                    if attempts == 1 {
                        tracing::warn!(plugin = %self.ctx.name, key = %key, "{what} failed, retrying with backoff: {}", failure.reason);
                    } else {
                        tracing::debug!(plugin = %self.ctx.name, key = %key, attempt = attempts, "{what} failed again, retrying in {delay:?}: {}", failure.reason);
                    }
                } else {
                    c.queue.forget(&key);
                    self.stats.given_up.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(plugin = %self.ctx.name, key = %key, attempts, "reconcile given up (the next event of the key wakes it again): {}", failure.reason);
                }
            }
        }
        c.queue.done(&key);
        let finalizing_now = u64::try_from(self.finalize_failures()).unwrap_or(u64::MAX);
        self.stats
            .finalizers_failing
            .store(finalizing_now, Ordering::Relaxed);
        let Some(c) = &self.controller else {
            return true;
        };
        let waiting = u64::try_from(c.queue.waiting()).unwrap_or(u64::MAX);
        self.stats.keys_waiting.store(waiting, Ordering::Relaxed);
        true
    }

    /// Keys of objects being deleted whose `finalize` is failing now (in backoff).
    fn finalize_failures(&self) -> usize {
        let Some(c) = &self.controller else {
            return 0;
        };
        let Some(store) = self.ctx.grants.get(&c.spec.reconciles).map(|i| i.store()) else {
            return 0;
        };
        c.queue
            .failing()
            .filter(|key| {
                store
                    .get(key)
                    .is_some_and(|o| terminating(&o) && finalizers(&o).contains(&c.finalizer))
            })
            .count()
    }

    /// Forgets why the writes of a key's earlier attempt failed once it passed or was dropped.
    fn take_write_failures_of(
        &mut self,
        work: &Work,
        outcome: Option<&Result<(), AttemptFailure>>,
    ) {
        if !matches!(outcome, Some(Err(_))) {
            self.take_write_failures(work);
        }
    }

    /// Adds the host's own writes to what a successful controller call staged: the finalizer
    /// before a reconcile's writes (a live object that lacks it), its removal after a
    /// finalize's; and for a live parent, its ownerReference and apply-set label on each
    /// child applied or created, and the deletion of its children no longer applied.
    pub(super) fn controller_writes(
        &self,
        work: &Work,
        staged: &mut Staged,
    ) -> Result<(), AttemptFailure> {
        let Some(c) = &self.controller else {
            return Ok(());
        };
        if let Work::Reconcile(Keyed {
            object: Some(parent),
            ..
        }) = work
            && !c.spec.owns.is_empty()
            && !terminating(parent)
        {
            self.own_children(&c.spec, parent, staged)?;
        }
        match work {
            Work::Reconcile(Keyed {
                object: Some(object),
                ..
            }) if c.spec.finalizer && !terminating(object) => {
                let held = finalizers(object);
                if held.contains(&c.finalizer) {
                    return Ok(());
                }
                let op = if object
                    .field(&["metadata".into(), "finalizers".into()])
                    .is_some()
                {
                    serde_json::json!([{"op": "add", "path": "/metadata/finalizers/-", "value": c.finalizer}])
                } else {
                    serde_json::json!([{"op": "add", "path": "/metadata/finalizers", "value": [c.finalizer]}])
                };
                staged.writes.insert(0, finalizer_patch(object, op));
            }
            Work::Finalize(Keyed {
                object: Some(object),
                ..
            }) => {
                let Some(i) = finalizers(object).iter().position(|f| *f == c.finalizer) else {
                    return Ok(());
                };
                let op = serde_json::json!([{"op": "remove", "path": format!("/metadata/finalizers/{i}")}]);
                staged.writes.push(finalizer_patch(object, op));
            }
            _ => {}
        }
        Ok(())
    }

    /// Adopts the children `staged` applies or creates, and adds the deletion (uid
    /// preconditioned) of each of `parent`'s children the reconcile did not apply.
    fn own_children(
        &self,
        spec: &Spec,
        parent: &KubeObject,
        staged: &mut Staged,
    ) -> Result<(), AttemptFailure> {
        let id = children::applyset_id(parent);
        let mut applies = Vec::new();
        for write in &mut staged.writes {
            let t = &write.target;
            if !spec.owns.contains(&t.gvk) || t.subresource.is_some() {
                continue;
            }
            if let Action::Apply(body) | Action::Create(body) = &mut write.action {
                *body = children::adopt(body, parent, &id).map_err(|e| AttemptFailure {
                    reason: format!("child {}: {e}", write.target),
                    retry: false,
                })?;
                applies.push((t.gvk.clone(), t.namespace.clone(), t.name.clone()));
            }
        }
        let value = children::part_of_value(&id);
        for gvk in &spec.owns {
            let Some(store) = self.ctx.grants.get(gvk).map(|i| i.store()) else {
                continue;
            };
            // Children are found by their applyset label; without the index a prune would
            // read every object of the type, so it is refused instead.
            let labelled = store
                .by_index(crate::informer::index::LABEL, &value)
                .map_err(|e| AttemptFailure {
                    reason: format!("children of type {gvk} cannot be found to prune: {e}"),
                    retry: false,
                })?;
            for child in labelled {
                if !children::is_child_of(&child, parent, &id)
                    || children::applied(&applies, &child)
                {
                    continue;
                }
                // Deleted already, and the cache has not seen it go yet: not again.
                let target = super::outbox::target_id(&Target {
                    gvk: gvk.clone(),
                    namespace: child.namespace().map(str::to_owned),
                    name: child.name().to_owned(),
                    subresource: None,
                });
                if self.outbox.on_its_way(&target, child.resource_version()) {
                    continue;
                }
                tracing::info!(plugin = %self.ctx.name, parent = %parent.key(), child = %child.key(), resource = %gvk, "child no longer applied: pruned");
                staged.writes.push(Write {
                    target: Target {
                        gvk: gvk.clone(),
                        namespace: child.namespace().map(str::to_owned),
                        name: child.name().to_owned(),
                        subresource: None,
                    },
                    action: Action::Delete(crate::write::DeleteOptions {
                        propagation: crate::write::Propagation::Background,
                        uid: Some(child.uid().to_owned()),
                        resource_version: None,
                    }),
                });
            }
        }
        Ok(())
    }

    /// Reconciles `key` again after `after` (the plugin's `requeue-after` during `reconcile`).
    pub(super) fn requeue_key(&mut self, key: Key, after: Duration) {
        if let Some(c) = &mut self.controller {
            c.queue.add_later(key, after, Instant::now());
        }
    }
}
