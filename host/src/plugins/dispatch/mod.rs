//! One plugin's dispatch thread: waits for its caches, then delivers its queue in order.
//!
//! Wasm calls are synchronous and run here, never on the async runtime's workers. A failed
//! event (error result or trap) is retried per object key with exponential backoff: events for
//! other objects keep flowing, later events for the same object wait behind it. After the
//! configured number of attempts, or at once for a non-retryable error, it is given up with a
//! log line and a counter. A trap discards the instance; the next attempt gets a fresh one from
//! the pre-linked code. A plugin whose attempts keep failing is marked degraded; what slows it
//! down is per key: each key's backoff, and retries of all its keys released at most
//! [`RETRY_RATE`] (client-go's workqueue rate limiter: per item, and a bucket for them all).
//! A new event for another object is attempted at once, however many keys are failing.
//!
//! A controller plugin's events wake keys instead (`reconcile.rs`): each key is reconciled
//! once for every event that woke it meanwhile, from its own work queue.

mod outbox;
mod reconcile;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::histogram;
use crate::informer::factory::Lease;
use crate::informer::queue::{self, QueueReceiver};
use crate::informer::{IndexClaim, Notification, Subscription};
use crate::object::KubeObject;
use crate::plugins::retry::{Failures, RetryQueue};
use crate::plugins::shadow;
use crate::plugins::throttle::{Bucket, WriteLimits};
use crate::plugins::triggers::{Requeue, Requeues, Schedules};
use crate::plugins::{CALL_KINDS, Delivery, PluginStats};
use crate::shard::Duty;
use crate::text::{MAX_MESSAGE_BYTES, cut};
use crate::wasm::bindings::kubewasm::plugin::cluster::WriteFailure;
use crate::wasm::bindings::kubewasm::plugin::types::HandleError;
use crate::wasm::cluster::Staged;
use crate::wasm::logging::Handling;
use crate::wasm::state::StateScope;
use crate::wasm::{Call, Engine, Instance, PluginCode, PluginContext};
use crate::write;
use outbox::{Outbox, Sending};
/// How fast failed events are tried again, all keys of a plugin together, at most (client-go's
/// default controller rate limiter: 10 a second, a burst of 100), besides each key's backoff.
pub const RETRY_RATE: crate::rate::Rate = crate::rate::Rate {
    per_second: 10,
    burst: 100,
};
/// How often a waiting worker checks whether it must stop, where nothing wakes it (a cache
/// to sync, a write's rate, its CPU budget).
const POLL: Duration = Duration::from_millis(50);
/// The longest an idle worker waits with nothing timed due: events, and a halt (through
/// [`crate::informer::queue::QueueSender::interrupt`]), wake it before.
const IDLE_WAIT: Duration = Duration::from_secs(30);
/// Entries a worker takes from its queue at once: one lock per batch instead of per event.
/// Taken entries are no longer coalesced, so this bounds what a busy plugin holds beside its
/// queue.
const BATCH: usize = 32;
/// How long a worker that has just handled events waits for more before it asks the informer
/// to wake it: under a steady stream the informer's thread, the pipeline's bottleneck, then
/// makes no wake-up system calls for plugins, and each wake-up of the worker is spread over
/// more events, at the price of up to this much latency. With ten plugins on two cores, 2 ms
/// took a fifth off the plugin threads' CPU per delivery that 0.5 ms left (runs of
/// `benches/peers.rs` side by side, which reports that figure).
const LINGER: Duration = Duration::from_millis(2);
/// Longest a worker keeps its counts (delivered, call durations) to itself while it works
/// through a batch: a batch of slow calls would otherwise hold them for the whole batch.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// How many times its `init`'s cost an idle instance is kept before it is released.
const KEEP_WARM: u32 = 100;

/// What a worker delivers: an event, or a call that names no object.
#[derive(Debug, Clone)]
enum Work {
    /// `handle` this event.
    Event(Notification),
    /// Call `synced`: every subscription's initial state was handed over.
    Synced,
    /// Call `tick` for this schedule.
    Tick(String),
    /// Call `reconcile` for a controller's key.
    Reconcile(Keyed),
    /// Call `finalize` for a controller's key whose object is being deleted.
    Finalize(Keyed),
}

/// A controller's key, with its object as the cache held it when the key was taken.
#[derive(Debug, Clone)]
struct Keyed {
    gvk: crate::gvk::Gvk,
    key: crate::object::Key,
    object: Option<Arc<KubeObject>>,
}

impl Work {
    /// What orders it: an event's object, or the call's own name.
    fn id(&self) -> String {
        match self {
            Work::Event(n) => n.id(),
            Work::Synced => "@synced".into(),
            Work::Tick(name) => format!("@tick/{name}"),
            Work::Reconcile(k) | Work::Finalize(k) => format!("{}/{}", k.gvk, k.key),
        }
    }

    /// Its index in [`CALL_KINDS`].
    fn kind(&self) -> usize {
        match self {
            Work::Event(_) => 0,
            Work::Synced => 1,
            Work::Tick(_) => 2,
            Work::Reconcile(_) => 3,
            Work::Finalize(_) => 4,
        }
    }

    fn call(&self) -> Call<'_> {
        match self {
            Work::Event(n) => Call::Event(n),
            Work::Synced => Call::Synced,
            Work::Tick(name) => Call::Tick(name),
            Work::Reconcile(k) => Call::Reconcile(&k.key),
            Work::Finalize(k) => Call::Finalize(&k.key),
        }
    }

    /// The object's key, for log lines.
    fn key(&self) -> String {
        match self {
            Work::Event(n) => n.object().key().to_owned(),
            Work::Reconcile(k) | Work::Finalize(k) => k.key.as_str().to_owned(),
            other => other.id(),
        }
    }

    /// The object it is about, as the cache held it.
    fn object(&self) -> Option<&KubeObject> {
        match self {
            Work::Event(n) => Some(n.object()),
            Work::Reconcile(k) | Work::Finalize(k) => k.object.as_deref(),
            Work::Synced | Work::Tick(_) => None,
        }
    }
}

/// Everything a worker needs, prepared by the loader.
pub struct Setup {
    /// The shared engine.
    pub engine: Arc<Engine>,
    /// The plugin's pre-linked code, for fresh instances.
    pub code: PluginCode,
    /// What instances can reach.
    pub ctx: Arc<PluginContext>,
    /// The configuration handed to `init` of each fresh instance.
    pub config: String,
    /// Retries, recycling.
    pub delivery: Delivery,
    /// The instance that already ran `describe` and `init`.
    pub instance: Instance,
    /// Resync period, if any.
    pub resync: Option<Duration>,
    /// Claims on the informers the plugin needs (released when the worker ends).
    pub leases: Vec<Lease>,
    /// Claims on the plugin's own indexes (released when the worker ends, after the leases'
    /// informers no longer need them).
    pub claims: Vec<IndexClaim>,
    /// The plugin's queue; it closes when the host drops or hands over its subscriptions.
    pub rx: QueueReceiver,
    /// Subscriptions whose initial state must be handed over before the plugin has synced.
    pub initial_lists: usize,
    /// Its schedules.
    pub schedules: Vec<crate::plugins::manifest::Schedule>,
    /// Its subscriptions, shared with the host (for resync).
    pub subscriptions: Arc<Mutex<Vec<Subscription>>>,
    /// Delivery counters.
    pub stats: Arc<PluginStats>,
    /// Set to stop the worker.
    pub stop: Arc<AtomicBool>,
    /// What this replica delivers: work outside it is dropped, writes outside it not sent.
    pub duty: Arc<Duty>,
    /// The plugin's write rates and loops, kept across its versions.
    pub write_limits: Arc<Mutex<WriteLimits>>,
    /// The controller it is, if any: its events wake keys.
    pub controller: Option<crate::controller::Spec>,
    /// Set by the worker when it ends: the next version's controller waits for it.
    pub ended: Arc<AtomicBool>,
    /// The previous version's `ended`, and the latest it may be waited for (its longest call
    /// by the wall clock, and a grace): a controller reconciles no key before then.
    pub after: Option<(Arc<AtomicBool>, Instant)>,
    /// Where its writes are reported when they are sent as dry runs (its mode is
    /// `dry-run`); none: they are sent.
    pub dry_run: Option<Arc<crate::plugins::trial::TrialLog>>,
    /// Where it reports what each live event made it do while a candidate runs beside the
    /// serving version, and which of the two it is.
    pub compare: Option<(Arc<shadow::Comparison>, shadow::Side)>,
}

/// What a worker counts locally between [`Worker::publish`]es.
#[derive(Default)]
struct Tally {
    /// Call durations by kind ([`crate::plugins::CALL_KINDS`]).
    calls: [histogram::Tally; CALL_KINDS.len()],
    delivered: u64,
}

struct Worker {
    engine: Arc<Engine>,
    code: PluginCode,
    ctx: Arc<PluginContext>,
    config: String,
    delivery: Delivery,
    instance: Option<Instance>,
    /// Calls made on the current instance.
    calls: u64,
    /// When the current instance last returned from a call (or was made).
    last_call: Instant,
    resync: Option<Duration>,
    /// Dropped before `leases`: an index goes before its informer.
    _claims: Vec<IndexClaim>,
    leases: Vec<Lease>,
    subscriptions: Arc<Mutex<Vec<Subscription>>>,
    rx: QueueReceiver,
    /// Entries taken from the queue and not delivered yet, in order.
    taken: VecDeque<queue::Delivery>,
    /// Counts not yet added to `stats`: added when the batch is delivered, or sooner when
    /// it runs past [`PUBLISH_EVERY`].
    tally: Tally,
    /// When `tally` was last added to `stats`.
    published: Instant,
    /// Subscriptions whose initial state has not been handed over in full yet.
    initial_lists: usize,
    retries: RetryQueue<Work>,
    /// Requeues the plugin asked for.
    requeues: Requeues,
    /// Its schedules, when each is next due.
    schedules: Schedules,
    /// Its writes: rates, loops, what is on its way, and the last refusals.
    outbox: Outbox,
    /// Retries of all its keys together ([`RETRY_RATE`]).
    retry_bucket: Bucket,
    stats: Arc<PluginStats>,
    stop: Arc<AtomicBool>,
    duty: Arc<Duty>,
    /// The controller's keys, when it is one.
    controller: Option<reconcile::Controller>,
    /// Set when it ends (`Setup::ended`).
    ended: Arc<AtomicBool>,
    /// `Setup::dry_run`.
    dry_run: Option<Arc<crate::plugins::trial::TrialLog>>,
    /// `Setup::compare`.
    compare: Option<(Arc<shadow::Comparison>, shadow::Side)>,
}

/// Why an attempt failed, and whether trying again may help.
struct AttemptFailure {
    reason: String,
    retry: bool,
}

/// Calls the handler and accounts for it (its duration into `durations`); what it answered
/// and when it returned.
fn timed(
    stats: &PluginStats,
    durations: &mut histogram::Tally,
    instance: &mut Instance,
    call: Call<'_>,
) -> (wasmtime::Result<Result<(), HandleError>>, Instant) {
    let started = Instant::now();
    let outcome = instance.call(call);
    let ended = Instant::now();
    stats.account(durations, ended - started, &instance.usage());
    (outcome, ended)
}

/// Which state map a call for `work` uses: with sharding, an event of a namespaced object
/// its part's, the rest the whole map (read only on a replica that does not lead).
fn state_scope(duty: &Duty, work: &Work) -> StateScope {
    let Some(share) = duty.share() else {
        return StateScope::Whole;
    };
    if let Some(part) = work.object().and_then(|o| share.part_of(o)) {
        return StateScope::Part(part.id());
    }
    if duty.leading() {
        StateScope::Whole
    } else {
        StateScope::WholeReadOnly
    }
}

/// True when this replica delivers `work` now: an event of an object it delivers, a tick
/// while it leads, `synced` always.
fn delivers(duty: &Duty, work: &Work) -> bool {
    match work {
        Work::Event(n) => duty.delivers(n.object()),
        Work::Tick(_) => duty.leading(),
        Work::Synced => true,
        Work::Reconcile(k) | Work::Finalize(k) => match &k.object {
            Some(object) => duty.delivers(object),
            None => duty.delivers_namespace(crate::object::split_key(&k.key).0),
        },
    }
}

/// The cached object a write is aimed at, when the plugin reads its type.
fn cached(ctx: &PluginContext, target: &write::Target) -> Option<Arc<KubeObject>> {
    let informer = ctx.grants.get(&target.gvk)?;
    let key = match &target.namespace {
        Some(ns) => format!("{ns}/{}", target.name),
        None => target.name.clone(),
    };
    informer.store().get(&key)
}

/// Starts a plugin's dispatch thread.
pub fn start(setup: Setup) -> std::io::Result<JoinHandle<()>> {
    let name = setup.ctx.name.clone();
    // Missed ticks (from when they last ran, kept with the plugin's state) run once now.
    let state = setup.ctx.state.clone();
    let schedules = Schedules::new(
        &setup.schedules,
        |name| state.whole().last_tick(name),
        crate::clock::now(),
        Instant::now(),
    );
    let after = setup.after;
    let controller = setup
        .controller
        .map(|spec| reconcile::Controller::new(spec, &setup.ctx.name, after));
    let worker = Worker {
        engine: setup.engine,
        code: setup.code,
        ctx: setup.ctx,
        config: setup.config,
        delivery: setup.delivery,
        instance: Some(setup.instance),
        calls: 0,
        last_call: Instant::now(),
        resync: setup.resync,
        _claims: setup.claims,
        leases: setup.leases,
        subscriptions: setup.subscriptions,
        rx: {
            let mut rx = setup.rx;
            rx.set_linger(LINGER);
            rx
        },
        taken: VecDeque::with_capacity(BATCH),
        tally: Tally::default(),
        published: Instant::now(),
        initial_lists: setup.initial_lists,
        retries: RetryQueue::default(),
        requeues: Requeues::default(),
        schedules,
        outbox: Outbox::new(setup.write_limits),
        dry_run: setup.dry_run,
        compare: setup.compare,
        retry_bucket: Bucket::new(RETRY_RATE, Instant::now()),
        controller,
        stats: setup.stats,
        stop: setup.stop,
        duty: setup.duty,
        ended: setup.ended,
    };
    // Below the host: the informers every plugin waits on go first (`priority.rs`); a
    // candidate one step below the serving version.
    let candidate = matches!(&worker.compare, Some((_, shadow::Side::Candidate)));
    let steps = crate::priority::BELOW_HOST + i32::from(candidate);
    crate::priority::spawn_below(format!("plugin-{name}"), steps, move || worker.run())
}

impl Worker {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// True when this replica delivers `work` now ([`delivers`]).
    fn ours(&self, work: &Work) -> bool {
        delivers(&self.duty, work)
    }

    fn run(mut self) {
        self.deliver();
        self.publish(Instant::now());
        self.ended.store(true, Ordering::Release);
    }

    /// Delivers the queue until the worker is stopped or the queue closes (then pending
    /// retries still finish).
    fn deliver(&mut self) {
        // client-go's WaitForCacheSync: queries must see complete caches before any event.
        for lease in &self.leases {
            while !lease.informer().wait_synced(POLL) {
                if self.stopped() {
                    return;
                }
            }
        }
        tracing::debug!(plugin = %self.ctx.name, "caches synced, delivering");
        if self.initial_lists == 0 {
            // No subscription: its queried caches are complete, the one moment to reconcile.
            self.stats.synced.store(true, Ordering::Relaxed);
            self.start(Work::Synced);
        }
        let mut next_resync = self.resync.map(|p| Instant::now() + p);
        // After the queue closes (unload or replacement) pending retries still finish here.
        let mut open = true;
        while !self.stopped() {
            // While taken entries wait, the last call's end stands in for the clock: a little
            // behind it, so timed work (retries, release, resync) can only come a call late,
            // never early, and a busy worker reads the clock only to time its calls.
            let now = if self.taken.is_empty() {
                let now = Instant::now();
                self.publish(now);
                now
            } else {
                if self.last_call.saturating_duration_since(self.published) >= PUBLISH_EVERY {
                    self.publish(self.last_call);
                }
                self.last_call
            };
            if let Some((_, mut events, failures)) = self.retries.take_due(now) {
                self.stats.idle.store(false, Ordering::Relaxed);
                if let Some(first) = events.pop_front() {
                    self.run_key(first, events, Some(failures));
                }
                continue;
            }
            if open && self.due_triggers(now) {
                continue;
            }
            if self.controller.is_some() {
                // Every event at hand wakes its keys before the next reconcile: a burst that
                // arrived during one costs one more reconcile, not one each.
                loop {
                    match self.next_delivery(Duration::ZERO) {
                        Ok(delivery) => self.take(delivery),
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => {
                            open = false;
                            break;
                        }
                    }
                }
                // A replaced version's keys are the new one's: it reconciles every key anew.
                if open && self.reconcile_next(Instant::now()) {
                    continue;
                }
            }
            if !open {
                match self.retries.next_due() {
                    Some(due) => std::thread::sleep(due.saturating_duration_since(now).min(POLL)),
                    None => return,
                }
                continue;
            }
            // A key requeued for later is like a schedule: the plugin is idle until then.
            let idle =
                self.retries.next_due().is_none() && self.taken.is_empty() && !self.keys_pending();
            let release = self.release_at().filter(|_| idle);
            if release.is_some_and(|at| at <= now) {
                self.release_instance();
            }
            let wait = [
                self.retries.next_due(),
                next_resync,
                self.release_at(),
                self.requeues.next_due(),
                self.schedules.next_due(),
                self.keys_due(),
            ]
            .into_iter()
            .flatten()
            .map(|at| at.saturating_duration_since(now))
            .fold(IDLE_WAIT, Duration::min);
            self.stats.idle.store(idle, Ordering::Relaxed);
            match self.next_delivery(wait) {
                Ok(delivery) => self.take(delivery),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => open = false,
            }
            if let (Some(at), Some(period)) = (next_resync, self.resync)
                && Instant::now() >= at
            {
                let subscriptions = self
                    .subscriptions
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for sub in subscriptions.iter() {
                    sub.resync();
                }
                next_resync = Some(at + period);
            }
        }
    }

    /// Acts on one entry of the queue: an event (handled, or waking a controller's keys), the
    /// end of an initial list, a relist.
    fn take(&mut self, delivery: queue::Delivery) {
        match delivery {
            queue::Delivery::Event(n) => {
                self.stats.idle.store(false, Ordering::Relaxed);
                if !self.wake(&n) {
                    self.start(Work::Event(n));
                }
            }
            queue::Delivery::InitialListSent => {
                self.initial_lists = self.initial_lists.saturating_sub(1);
                if self.initial_lists == 0 {
                    tracing::debug!(plugin = %self.ctx.name, "initial state handed over");
                    self.stats.synced.store(true, Ordering::Relaxed);
                    self.start(Work::Synced);
                }
            }
            queue::Delivery::Relisted => {
                // A relist after the initial state: reconcile everything once again.
                if self.initial_lists == 0 {
                    self.start(Work::Synced);
                }
            }
        }
    }

    /// Delivers `work` now, or queues it behind a failed attempt for the same id.
    fn start(&mut self, work: Work) {
        // With nothing waiting for a retry no key is needed, unless this fails.
        let ready = if self.retries.is_empty() {
            Some(work)
        } else {
            self.retries.enqueue(&work.id(), work)
        };
        if let Some(work) = ready {
            self.run_key(work, VecDeque::new(), None);
        }
    }

    /// Starts a requeue or a schedule that is due by `now`, if one is; true when it did.
    fn due_triggers(&mut self, now: Instant) -> bool {
        if let Some((id, Requeue { gvk, key })) = self.requeues.take_due(now) {
            // The current state: an object deleted meanwhile is not requeued.
            let current = self.ctx.grants.get(&gvk).and_then(|i| i.store().get(&key));
            match current {
                Some(object) => self.start(Work::Event(Notification::Requeue(object))),
                None => {
                    tracing::debug!(plugin = %self.ctx.name, key = %id, "requeue dropped: the object is gone")
                }
            }
            return true;
        }
        let asked = std::mem::take(
            &mut *self
                .stats
                .asked
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !asked.ticks.is_empty() || !asked.reconciles.is_empty() {
            if let Some(c) = &mut self.controller {
                c.wake_now(asked.reconciles);
            }
            for name in asked.ticks {
                self.ctx.state.whole().set_tick(&name, crate::clock::now());
                self.start(Work::Tick(name));
            }
            return true;
        }
        if self.schedules.next_due().is_some_and(|at| at <= now) {
            let now_ts = crate::clock::now();
            if let Some((name, due)) = self.schedules.take_due(now_ts, now) {
                // Noted as run before it runs: a new leader does not run it again.
                self.ctx.state.whole().set_tick(&name, due);
                self.start(Work::Tick(name));
                return true;
            }
        }
        false
    }

    /// Adds the counts held since the last publish to the shared ones, as of `now`: before
    /// the worker may wait, so whoever reads them while it waits sees every delivery.
    fn publish(&mut self, now: Instant) {
        self.published = now;
        for (shared, tally) in self.stats.calls.iter().zip(&mut self.tally.calls) {
            shared.add(tally);
        }
        let delivered = std::mem::take(&mut self.tally.delivered);
        if delivered > 0 {
            self.stats.delivered.fetch_add(delivered, Ordering::Relaxed);
        }
    }

    /// The next entry: a taken one, or else a batch from the queue, waiting up to `wait`.
    fn next_delivery(&mut self, wait: Duration) -> Result<queue::Delivery, RecvTimeoutError> {
        if self.taken.is_empty() {
            self.rx.recv_batch(&mut self.taken, BATCH, wait)?;
        }
        self.taken.pop_front().ok_or(RecvTimeoutError::Timeout)
    }

    /// Delivers `first`, then `rest` (later events of the same object), in order until one
    /// fails; that one and those behind it then wait for their retry, under the object's id.
    /// `failures`: `first`'s failed attempts so far, if any.
    fn run_key(&mut self, first: Work, mut rest: VecDeque<Work>, mut failures: Option<Failures>) {
        let max_attempts = self.delivery.max_attempts;
        let give_up_after = self.delivery.give_up_after;
        let mut next = Some(first);
        while let Some(n) = next.take() {
            if self.stopped() {
                return;
            }
            // Handed over (another replica delivers it now) or no longer leading: dropped.
            // Counted while it runs, so a hand-over waits for it.
            let duty = self.duty.clone();
            let longest = crate::wasm::deadline::wall_cap(self.ctx.limits.deadline);
            let Some(call) = duty.begin(longest, |_| self.ours(&n)) else {
                tracing::debug!(plugin = %self.ctx.name, key = %n.key(), "not delivered: this replica no longer delivers it");
                next = rest.pop_front();
                failures = None;
                continue;
            };
            // A real event for an object takes the place of a requeue waiting for it.
            if let Work::Event(event) = &n
                && !matches!(event, Notification::Requeue(_))
                && !self.requeues.is_empty()
            {
                self.requeues.cancel(&event.id());
            }
            self.ctx.log.set_retrying(failures.is_some());
            let attempt = self.attempt(&n);
            drop(call);
            self.ctx.log.set_retrying(false);
            let Err(failure) = attempt else {
                self.take_write_failures(&n);
                next = rest.pop_front();
                failures = None;
                continue;
            };
            let now = Instant::now();
            let failed = match failures {
                Some(f) => Failures {
                    count: f.count.saturating_add(1),
                    since: f.since,
                },
                None => Failures {
                    count: 1,
                    since: now,
                },
            };
            let name = &self.ctx.name;
            let object = &n.key();
            let counted_out = max_attempts > 0 && failed.count >= max_attempts;
            let timed_out = now.saturating_duration_since(failed.since) >= give_up_after;
            if !failure.retry || counted_out || timed_out {
                self.stats.given_up.fetch_add(1, Ordering::Relaxed);
                let why = if !failure.retry {
                    "it cannot pass on a retry"
                } else if counted_out {
                    "out of attempts, maxAttempts"
                } else {
                    "failing for longer than retryForSeconds"
                };
                tracing::error!(
                    plugin = %name, key = %object, attempts = failed.count,
                    "event given up ({why}; the next resync delivers the object again): {}", failure.reason
                );
                self.take_write_failures(&n);
                next = rest.pop_front();
                failures = None;
                continue;
            }
            let delay = self
                .delivery
                .backoff
                .delay(failed.count)
                .max(self.retry_bucket.take(now));
            self.stats.retried.fetch_add(1, Ordering::Relaxed);
            // One warning per failing event; later attempts are debug lines, and the give-up
            // line carries the count.
            if failed.count == 1 {
                tracing::warn!(
                    plugin = %name, key = %object,
                    "handler failed, retrying with backoff for up to {give_up_after:?}: {}", failure.reason
                );
            } else {
                tracing::debug!(
                    plugin = %name, key = %object, attempt = failed.count,
                    "handler failed again, retrying in {delay:?}: {}", failure.reason
                );
            }
            let id = n.id();
            rest.push_front(n);
            self.retries.block(id, rest, failed, now + delay);
            return;
        }
    }

    /// Why the writes of `n`'s object's last failed attempt were refused, forgotten here.
    fn take_write_failures(&mut self, n: &Work) -> Vec<WriteFailure> {
        self.outbox.take_failures(&n.id())
    }

    /// When the live instance is due for release if no work comes; none without one, or
    /// when instances are kept.
    /// An instance whose `init` was expensive stays warm longer: at least [`KEEP_WARM`] times
    /// its `init`'s cost, so re-initialising costs at most a hundredth of a core over the
    /// idle time it saved memory for.
    fn release_at(&self) -> Option<Instant> {
        let after = self.delivery.release_idle_after;
        let instance = self.instance.as_ref().filter(|_| !after.is_zero())?;
        let warm = instance.init_cost().saturating_mul(KEEP_WARM);
        Some(self.last_call + after.max(warm))
    }

    /// Drops the idle instance: a quiet plugin holds its compiled code, not a live store.
    fn release_instance(&mut self) {
        self.instance = None;
        self.stats.memory_bytes.store(0, Ordering::Relaxed);
        self.stats.handles.store(0, Ordering::Relaxed);
        tracing::debug!(plugin = %self.ctx.name, "idle instance released");
    }

    /// Makes sure there is a live instance: a fresh one (instantiated and initialised) when
    /// there is none, the live one has served its `recycle_after_calls`, or it has used most
    /// of its memory room (a collected heap that settles above the cap would trap there).
    fn ensure_instance(&mut self) -> Result<(), String> {
        let recycle = self.delivery.recycle_after_calls;
        if recycle > 0 && self.calls >= recycle {
            self.instance = None;
        }
        if let Some(worn) = self.instance.as_ref().filter(|i| i.near_memory_cap()) {
            tracing::debug!(plugin = %self.ctx.name, calls = self.calls, memory_bytes = worn.memory_bytes(), "instance replaced before the memory cap");
            self.stats.memory_recycles.fetch_add(1, Ordering::Relaxed);
            self.instance = None;
        }
        if self.instance.is_none() {
            self.calls = 0;
            let mut fresh = self
                .engine
                .instantiate(&self.code, self.ctx.clone())
                .map_err(|e| format!("cannot instantiate: {e:#}"))?;
            match fresh.init(&self.config) {
                Ok(Ok(())) => {}
                Ok(Err(refusal)) => return Err(format!("init failed: {refusal}")),
                Err(trap) => return Err(format!("init trapped: {trap:#}")),
            }
            self.instance = Some(fresh);
            self.last_call = Instant::now();
        }
        // Every `ensure_instance()` is followed by one call, which sets `last_call` when it
        // returns.
        self.calls += 1;
        Ok(())
    }

    /// One attempt at delivering `n`, with the counters and status it implies.
    fn attempt(&mut self, n: &Work) -> Result<(), AttemptFailure> {
        // The plugin's own lines name the object (`logging::Handling`); at debug
        // level every line logged during the call carries both. An info span would cost
        // more than the call itself: its fields are formatted as it opens (about 1.2 us with
        // the agent's fmt subscriber, measured here, against 0.65 us for a no-op delivery).
        let _span =
            tracing::debug_span!("event", plugin = %self.ctx.name, key = %n.key()).entered();
        let span = crate::traces::enabled().then(|| AttemptSpan::start(&self.ctx, n));
        // The writes it sends are the attempt's children.
        let current = span.as_ref().map(|s| crate::traces::enter(&s.0));
        let previous = self.take_write_failures(n);
        let outcome = match self.ensure_instance() {
            Err(reason) => Err(AttemptFailure {
                reason,
                retry: true,
            }),
            Ok(()) => self.call(n, previous),
        };
        drop(current);
        // Whatever the plugin said, a bounded part of it is logged and kept in status.
        let outcome = outcome.map_err(|f| AttemptFailure {
            reason: cut(f.reason, MAX_MESSAGE_BYTES),
            ..f
        });
        if let Some(span) = span {
            span.end(&outcome);
        }
        match &outcome {
            Ok(()) => {
                match n {
                    Work::Event(_) | Work::Reconcile(_) | Work::Finalize(_) => {
                        self.tally.delivered += 1;
                        // Only a handled event ends a run of failures: a plugin that fails
                        // every event but answers `synced` or a tick is still degraded.
                        self.stats.consecutive_failures.store(0, Ordering::Relaxed);
                    }
                    Work::Synced => {
                        self.stats.synced_calls.fetch_add(1, Ordering::Relaxed);
                    }
                    Work::Tick(_) => {
                        self.stats.ticks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(failure) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let failures = self
                    .stats
                    .consecutive_failures
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                self.stats.set_last_error(&failure.reason);
                // A candidate that traps (a loop past its deadline, its memory cap) or keeps
                // failing is dropped: its worker ends, and the serving version goes on.
                if let Some((comparison, shadow::Side::Candidate)) = &self.compare
                    && (failure.reason.starts_with("trapped")
                        || failures >= crate::plugins::DEGRADED_AFTER)
                {
                    comparison.drop_candidate(&failure.reason);
                    self.stop.store(true, Ordering::Relaxed);
                    tracing::warn!(plugin = %self.ctx.name, "candidate dropped: {}", failure.reason);
                }
            }
        }
        outcome
    }

    /// Calls the live instance's handler with `n` and sends what it staged.
    fn call(&mut self, n: &Work, previous: Vec<WriteFailure>) -> Result<(), AttemptFailure> {
        // A plugin past its CPU budget waits before its next call (and inside a long one).
        if let Some(budget) = &self.ctx.cpu {
            let stop = &self.stop;
            budget.hold(IDLE_WAIT, POLL, || stop.load(Ordering::Relaxed));
            if self.stopped() {
                return Err(AttemptFailure {
                    reason: "stopped while waiting for its CPU budget".into(),
                    retry: true,
                });
            }
        }
        let Some(instance) = self.instance.as_mut() else {
            return Err(AttemptFailure {
                reason: "no instance".into(),
                retry: true,
            });
        };
        instance.set_previous_failures(previous);
        // A plugin without state reads and changes none: no part to name.
        let scope = if self.ctx.state_declared {
            state_scope(&self.duty, n)
        } else {
            StateScope::Whole
        };
        instance.set_state_scope(scope.clone());
        let handling = match n {
            Work::Event(event) => Handling::enter(event.object()),
            Work::Reconcile(k) | Work::Finalize(k) => Handling::enter_key(&k.key),
            other => Handling::enter_key(&other.id()),
        };
        let tally = &mut self.tally.calls[n.kind()];
        let (called, ended) = timed(&self.stats, tally, instance, n.call());
        drop(handling);
        let mut staged = instance.take_staged();
        let effects = instance.take_effects();
        self.last_call = ended;
        if let Some((comparison, side)) = &self.compare
            && comparison.active()
        {
            compare(comparison, *side, n, &called, &staged);
        }
        match called {
            Ok(Ok(())) => {
                self.controller_writes(n, &mut staged)?;
                self.send(n, staged)?;
                self.apply_effects(n, effects, scope);
                Ok(())
            }
            Ok(Err(e)) => {
                Outbox::count_denied(&self.stats, &staged);
                Err(AttemptFailure {
                    reason: e.message,
                    retry: e.retry,
                })
            }
            Err(trap) => {
                Outbox::count_denied(&self.stats, &staged);
                self.instance = None;
                self.stats.traps.fetch_add(1, Ordering::Relaxed);
                Err(AttemptFailure {
                    reason: format!("trapped, instance discarded: {trap:#}"),
                    retry: true,
                })
            }
        }
    }

    /// Applies what a successful call asked for besides its writes: its changes to the
    /// plugin's state, and a requeue of its event's object (bounded: requeues waiting count
    /// against the backlog).
    fn apply_effects(&mut self, n: &Work, effects: crate::wasm::Effects, scope: StateScope) {
        let limits = &self.ctx.limits.state;
        if let Err(e) = self.ctx.state.apply(&scope, effects.state, limits) {
            tracing::error!(plugin = %self.ctx.name, key = %n.key(), "state changes dropped: {e}");
        }
        if let (Some(after), Work::Reconcile(k)) = (effects.requeue, n) {
            self.requeue_key(k.key.clone(), after);
            return;
        }
        let (Some(after), Work::Event(event)) = (effects.requeue, n) else {
            return;
        };
        if matches!(event, Notification::Deleted { .. }) {
            return;
        }
        let waiting = self.requeues.len() + self.rx.stats().depth();
        if waiting >= self.delivery.backlog {
            self.stats.requeues_refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %self.ctx.name, key = %n.key(), "requeue refused: {waiting} events and requeues wait (backlog)");
            return;
        }
        let object = event.object();
        let requeue = Requeue {
            gvk: object.gvk().clone(),
            key: object.key().to_owned(),
        };
        self.stats.requeued.fetch_add(1, Ordering::Relaxed);
        self.requeues
            .add_after(event.id(), Instant::now(), after, requeue);
    }

    /// Sends what a successful call staged ([`Outbox::send`]).
    fn send(&mut self, n: &Work, staged: Staged) -> Result<(), AttemptFailure> {
        let (ctx, duty, stop) = (&self.ctx, &self.duty, &self.stop);
        let (handling, key) = (n.id(), n.key());
        let sending = Sending {
            plugin: &ctx.name,
            writer: ctx.writes.as_ref().map(|a| a.writer.as_ref()),
            stats: &self.stats,
            handling: &handling,
            key: &key,
            ours: &|| {
                // A confirmation that lapsed meanwhile is waited out first.
                duty.settle();
                delivers(duty, n)
            },
            stopped: &|| stop.load(Ordering::Relaxed),
            cached: &|target| cached(ctx, target),
            confirmed: &|| duty.confirmed_for(n.object()),
            dry_run: self.dry_run.as_deref(),
        };
        self.outbox.send(&sending, staged)
    }
}

/// Reports what a live event (not an initial list, a resync or a requeue, which the serving
/// version and a candidate get at different times) made this version do.
fn compare(
    comparison: &shadow::Comparison,
    side: shadow::Side,
    n: &Work,
    called: &wasmtime::Result<Result<(), HandleError>>,
    staged: &Staged,
) {
    let Work::Event(event) = n else { return };
    let kind = match event {
        Notification::Added { initial: false, .. } => "added",
        Notification::Updated { .. } => "updated",
        Notification::Deleted { .. } => "deleted",
        _ => return,
    };
    let result = match called {
        Ok(Ok(())) => Ok(&staged.writes[..]),
        Ok(Err(e)) => Err(e.message.as_str()),
        Err(_) => Err("trapped"),
    };
    let object = event.object();
    let key = format!(
        "{kind} {} {}@{}",
        object.gvk(),
        object.key(),
        object.resource_version()
    );
    comparison.report(side, key, shadow::outcome(result));
}

struct AttemptSpan(opentelemetry::global::BoxedSpan);

impl AttemptSpan {
    fn start(ctx: &crate::wasm::PluginContext, work: &Work) -> Self {
        use opentelemetry::KeyValue;
        use opentelemetry::trace::{SpanKind, Tracer};
        let tracer = opentelemetry::global::tracer("kubewasm");
        let mut attributes = vec![
            KeyValue::new("kubewasm.plugin", ctx.name.clone()),
            KeyValue::new("kubewasm.plugin.digest", ctx.log.digest().to_owned()),
        ];
        let name = match work {
            Work::Event(n) => {
                let object = n.object();
                let event = match n {
                    Notification::Added { initial: true, .. } => "initial-add",
                    Notification::Added { .. } => "add",
                    Notification::Updated { .. } => "update",
                    Notification::Deleted { .. } => "delete",
                    Notification::Sync(_) => "resync",
                    Notification::Requeue(_) => "requeue",
                };
                attributes.extend([
                    KeyValue::new("kubewasm.event", event),
                    KeyValue::new("k8s.resource", object.gvk().to_string()),
                    KeyValue::new("k8s.object.key", object.key().to_owned()),
                    KeyValue::new(
                        "k8s.object.resource_version",
                        object.resource_version().to_owned(),
                    ),
                ]);
                "handle"
            }
            Work::Synced => "synced",
            Work::Tick(schedule) => {
                attributes.push(KeyValue::new("kubewasm.schedule", schedule.clone()));
                "tick"
            }
            Work::Reconcile(k) | Work::Finalize(k) => {
                attributes.extend([
                    KeyValue::new("k8s.resource", k.gvk.to_string()),
                    KeyValue::new("k8s.object.key", k.key.as_str().to_owned()),
                ]);
                if matches!(work, Work::Reconcile(_)) {
                    "reconcile"
                } else {
                    "finalize"
                }
            }
        };
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes)
            .start(&tracer);
        Self(span)
    }

    fn end(mut self, outcome: &Result<(), AttemptFailure>) {
        use opentelemetry::KeyValue;
        use opentelemetry::trace::{Span, Status};
        match outcome {
            Ok(()) => {
                self.0
                    .set_attribute(KeyValue::new("kubewasm.outcome", "ok"));
                self.0.set_status(Status::Ok);
            }
            Err(failure) => {
                self.0
                    .set_attribute(KeyValue::new("kubewasm.outcome", "error"));
                self.0
                    .set_attribute(KeyValue::new("kubewasm.retry", failure.retry));
                self.0.set_status(Status::error(failure.reason.clone()));
            }
        }
        self.0.end();
    }
}
