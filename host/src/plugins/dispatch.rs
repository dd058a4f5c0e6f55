//! One plugin's dispatch thread: waits for its caches, then delivers its queue in order.
//!
//! Wasm calls are synchronous and run here, never on the async runtime's workers. A failed
//! event is retried in place (so later events for the same object cannot overtake it) with
//! exponential backoff, then given up with a log line and a counter. A trap discards the
//! instance; the next attempt gets a fresh one from the pre-linked code.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::informer::factory::Lease;
use crate::informer::{Notification, Subscription};
use crate::plugins::PluginStats;
use crate::plugins::manifest::PluginManifest;
use crate::runtime::{Instance, PluginCode, PluginContext, Runtime, convert};

/// Attempts per event before it is given up.
pub const MAX_ATTEMPTS: u32 = 5;
/// Backoff before the second attempt; it doubles for each further one.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(5);
/// How often an idle worker checks whether it must stop.
const POLL: Duration = Duration::from_millis(50);

/// Everything a worker needs, prepared by the loader.
pub struct Setup {
    /// The shared engine.
    pub runtime: Arc<Runtime>,
    /// The plugin's pre-linked code, for fresh instances.
    pub code: PluginCode,
    /// What instances can reach.
    pub ctx: Arc<PluginContext>,
    /// The configuration handed to `init` of each fresh instance.
    pub config: String,
    /// The instance that already ran `describe` and `init`.
    pub instance: Instance,
    /// The validated manifest.
    pub manifest: PluginManifest,
    /// Claims on the informers the plugin needs.
    pub leases: Vec<Lease>,
    /// Delivery counters.
    pub stats: Arc<PluginStats>,
    /// Set to stop the worker.
    pub stop: Arc<AtomicBool>,
}

struct Worker {
    runtime: Arc<Runtime>,
    code: PluginCode,
    ctx: Arc<PluginContext>,
    config: String,
    instance: Option<Instance>,
    resync: Option<Duration>,
    leases: Vec<Lease>,
    subscriptions: Vec<Subscription>,
    rx: Receiver<Notification>,
    stats: Arc<PluginStats>,
    stop: Arc<AtomicBool>,
}

/// Subscribes to the plugin's informers and starts its dispatch thread.
pub fn start(setup: Setup) -> std::io::Result<JoinHandle<()>> {
    let (tx, rx) = channel();
    let mut subscriptions = Vec::new();
    for (gvk, filter) in &setup.manifest.subscriptions {
        if let Some(lease) = setup.leases.iter().find(|l| l.informer().gvk() == gvk) {
            subscriptions.push(lease.informer().subscribe(filter.clone(), tx.clone()));
        }
    }
    drop(tx);
    let name = setup.ctx.name.clone();
    let worker = Worker {
        runtime: setup.runtime,
        code: setup.code,
        ctx: setup.ctx,
        config: setup.config,
        instance: Some(setup.instance),
        resync: setup.manifest.resync,
        leases: setup.leases,
        subscriptions,
        rx,
        stats: setup.stats,
        stop: setup.stop,
    };
    std::thread::Builder::new()
        .name(format!("plugin-{name}"))
        .spawn(move || worker.run())
}

impl Worker {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn run(mut self) {
        // client-go's WaitForCacheSync: queries must see complete caches before any event.
        for lease in &self.leases {
            while !lease.informer().wait_synced(POLL) {
                if self.stopped() {
                    return;
                }
            }
        }
        self.stats.synced.store(true, Ordering::Relaxed);
        tracing::debug!(plugin = %self.ctx.name, "caches synced, delivering");
        let mut next_resync = self.resync.map(|p| Instant::now() + p);
        while !self.stopped() {
            let wait = next_resync.map_or(POLL, |at| {
                at.saturating_duration_since(Instant::now()).min(POLL)
            });
            match self.rx.recv_timeout(wait) {
                Ok(n) => self.deliver(&n),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if let (Some(at), Some(period)) = (next_resync, self.resync)
                && Instant::now() >= at
            {
                for sub in &self.subscriptions {
                    sub.resync();
                }
                next_resync = Some(at + period);
            }
        }
    }

    /// The live instance, or a fresh one (instantiated and initialised).
    fn instance(&mut self) -> Result<&mut Instance, String> {
        if self.instance.is_none() {
            let mut fresh = self
                .runtime
                .instantiate(&self.code, self.ctx.clone())
                .map_err(|e| format!("cannot instantiate: {e:#}"))?;
            match fresh.init(&self.config) {
                Ok(Ok(())) => {}
                Ok(Err(refusal)) => return Err(format!("init failed: {refusal}")),
                Err(trap) => return Err(format!("init trapped: {trap:#}")),
            }
            self.instance = Some(fresh);
        }
        self.instance
            .as_mut()
            .ok_or_else(|| "no instance".to_owned())
    }

    fn deliver(&mut self, n: &Notification) {
        let event = convert::event(n);
        let key = n.object().key.clone();
        let name = self.ctx.name.clone();
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=MAX_ATTEMPTS {
            let outcome = match self.instance() {
                Err(e) => Err((e, true)),
                Ok(instance) => match instance.handle(&event) {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err((e.message, e.retry)),
                    Err(trap) => {
                        self.instance = None;
                        self.stats.traps.fetch_add(1, Ordering::Relaxed);
                        Err((format!("trapped, instance discarded: {trap:#}"), true))
                    }
                },
            };
            let (reason, retry) = match outcome {
                Ok(()) => {
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(failure) => failure,
            };
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(plugin = %name, key = %key, attempt, "handler failed: {reason}");
            if !retry || self.stopped() {
                break;
            }
            if attempt < MAX_ATTEMPTS {
                std::thread::sleep(backoff);
                backoff *= 2;
            }
        }
        self.stats.given_up.fetch_add(1, Ordering::Relaxed);
        tracing::error!(plugin = %name, key = %key, "event given up");
    }
}
