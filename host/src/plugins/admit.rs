//! A plugin version's admission side: instances of its own for `admit` calls, apart from the
//! worker that delivers events (reviews never wait behind events, and every replica reviews,
//! leader or not), and what its reviews decided.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::histogram::{Histogram, HistogramSnapshot};
use crate::informer::factory::Lease;
use crate::plugins::manifest::Admission;
use crate::wasm::admit::{AdmitRequest, Verdict};
use crate::wasm::{Engine, Instance, PluginCode, PluginContext};

/// Reviews one plugin runs at once; more wait for a free one until their time is up.
pub const MAX_CONCURRENT: usize = 4;

/// How a review ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Allowed as it was.
    Allowed,
    /// Allowed with a patch.
    Patched,
    /// Refused by the plugin.
    Denied,
    /// The plugin could not answer: refused (failure policy Fail).
    FailedClosed,
    /// The plugin could not answer: let through (failure policy Ignore).
    FailedOpen,
}

impl Decision {
    /// As the metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Patched => "patched",
            Decision::Denied => "denied",
            Decision::FailedClosed => "failed_closed",
            Decision::FailedOpen => "failed_open",
        }
    }

    /// Every decision.
    pub const ALL: [Decision; 5] = [
        Decision::Allowed,
        Decision::Patched,
        Decision::Denied,
        Decision::FailedClosed,
        Decision::FailedOpen,
    ];
}

/// What a plugin's reviews decided, for `/status` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdmissionStatus {
    /// Mutating rather than validating.
    pub mutating: bool,
    /// Reviews per decision, in [`Decision::ALL`]'s order.
    pub decisions: Vec<(String, u64)>,
    /// Time of each review in the host (decode, call, encode), per decision.
    pub durations: Vec<(String, HistogramSnapshot)>,
    /// Why the latest review the plugin could not answer failed.
    pub last_failure: Option<String>,
}

/// One plugin version's admission reviews.
pub struct Admitter {
    /// The plugin's name.
    pub name: String,
    /// What it declared.
    pub admission: Admission,
    engine: Arc<Engine>,
    code: PluginCode,
    ctx: Arc<PluginContext>,
    config: String,
    /// Idle instances, ready for a review.
    pool: Mutex<Vec<Instance>>,
    /// Reviews running.
    running: Mutex<usize>,
    freed: Condvar,
    counts: [AtomicU64; 5],
    durations: [Histogram; 5],
    last_failure: Mutex<Option<String>>,
    /// Its claims on the informers its reviews query.
    _leases: Vec<Lease>,
}

impl Admitter {
    /// Reviews with `code` under `ctx`, each fresh instance given `config`, holding `leases`.
    pub fn new(
        engine: Arc<Engine>,
        code: PluginCode,
        ctx: Arc<PluginContext>,
        config: String,
        admission: Admission,
        leases: Vec<Lease>,
    ) -> Self {
        Self {
            name: ctx.name.clone(),
            admission,
            engine,
            code,
            ctx,
            config,
            pool: Mutex::default(),
            running: Mutex::new(0),
            freed: Condvar::new(),
            counts: Default::default(),
            durations: Default::default(),
            last_failure: Mutex::default(),
            _leases: leases,
        }
    }

    /// The CPU deadline of a review: the plugin's, or the webhook's timeout if shorter.
    pub fn deadline(&self) -> Duration {
        self.ctx.limits.deadline.min(self.admission.timeout)
    }

    /// Runs `admit` on an idle instance (a fresh one, `init` run, when none is idle), waiting
    /// until `until` at most for one of the [`MAX_CONCURRENT`] places. The error says why
    /// the plugin gave no answer: the host answers per the failure policy.
    pub fn admit(&self, request: &AdmitRequest, until: Instant) -> Result<Verdict, String> {
        let _place = self.place(until)?;
        let taken = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut instance = match taken {
            Some(instance) => instance,
            None => self.fresh()?,
        };
        match instance.admit(request, self.deadline()) {
            Ok(verdict) => {
                if !instance.near_memory_cap() {
                    let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
                    if pool.len() < MAX_CONCURRENT {
                        pool.push(instance);
                    }
                }
                Ok(verdict)
            }
            // A trap, the deadline or the memory cap: the instance is dropped.
            Err(trap) => Err(format!("trapped: {trap:#}")),
        }
    }

    fn fresh(&self) -> Result<Instance, String> {
        let mut instance = self
            .engine
            .instantiate(&self.code, self.ctx.clone())
            .map_err(|e| format!("cannot start an instance: {e:#}"))?;
        match instance.init(&self.config) {
            Ok(Ok(())) => Ok(instance),
            Ok(Err(refusal)) => Err(format!("init refused: {refusal}")),
            Err(trap) => Err(format!("init trapped: {trap:#}")),
        }
    }

    fn place(&self, until: Instant) -> Result<Place<'_>, String> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        while *running >= MAX_CONCURRENT {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{MAX_CONCURRENT} reviews already running: no place before the timeout"
                ));
            }
            running = self
                .freed
                .wait_timeout(running, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        *running += 1;
        Ok(Place(self))
    }

    /// Counts a finished review that took `took` in the host; `failure` is why the plugin
    /// could not answer, when it could not.
    pub fn record(&self, decision: Decision, took: Duration, failure: Option<&str>) {
        let i = Decision::ALL
            .iter()
            .position(|d| *d == decision)
            .unwrap_or_default();
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.durations[i].observe(took);
        if let Some(failure) = failure {
            *self
                .last_failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(failure.to_owned());
        }
    }

    /// What its reviews decided so far.
    pub fn status(&self) -> AdmissionStatus {
        AdmissionStatus {
            mutating: self.admission.mutating,
            decisions: Decision::ALL
                .iter()
                .zip(&self.counts)
                .map(|(d, c)| (d.as_str().to_owned(), c.load(Ordering::Relaxed)))
                .collect(),
            durations: Decision::ALL
                .iter()
                .zip(&self.durations)
                .map(|(d, h)| (d.as_str().to_owned(), h.snapshot()))
                .collect(),
            last_failure: self
                .last_failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// A review's place among the plugin's concurrent ones, given back when dropped.
struct Place<'a>(&'a Admitter);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut running = self
            .0
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *running -= 1;
        self.0.freed.notify_one();
    }
}
