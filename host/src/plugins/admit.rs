//! A plugin version's admission side: instances of its own for `admit` calls, apart from the
//! worker that delivers events (reviews never wait behind events, and every replica reviews,
//! leader or not), and what its reviews decided.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::histogram::{Histogram, HistogramSnapshot};
use crate::informer::factory::Lease;
use crate::plugins::manifest::Admission;
use crate::plugins::trial::TrialLog;
use crate::wasm::admit::{AdmitRequest, Verdict};
use crate::wasm::{Engine, Instance, PluginCode, PluginContext};

/// Idle instances a plugin keeps for its reviews.
const KEPT_IDLE: usize = 4;

/// Reviews of one plugin waiting for a place, past which more are answered at once by the
/// failure policy: waiting costs a task and a connection each.
pub const MAX_WAITING: usize = 1024;

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
    /// Its places among the reviews the server runs at once (made on the first review, as
    /// many as the server gives each plugin).
    places: OnceLock<Arc<tokio::sync::Semaphore>>,
    /// Reviews waiting for a place.
    waiting: AtomicUsize,
    counts: [AtomicU64; 5],
    durations: [Histogram; 5],
    last_failure: Mutex<Option<String>>,
    /// Its claims on the informers its reviews query.
    _leases: Vec<Lease>,
    /// Where its answers are reported when they are not given (its mode monitors): each
    /// review is then allowed as it came.
    pub monitor: Option<Arc<TrialLog>>,
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
        monitor: Option<Arc<TrialLog>>,
    ) -> Self {
        Self {
            name: ctx.name.clone(),
            admission,
            engine,
            code,
            ctx,
            config,
            pool: Mutex::default(),
            places: OnceLock::new(),
            waiting: AtomicUsize::new(0),
            counts: Default::default(),
            durations: Default::default(),
            last_failure: Mutex::default(),
            _leases: leases,
            monitor,
        }
    }

    /// The CPU deadline of a review: the plugin's, or the webhook's timeout if shorter.
    pub fn deadline(&self) -> Duration {
        self.ctx.limits.deadline.min(self.admission.timeout)
    }

    /// Waits until `until` at most for one of its places among the reviews running at once
    /// (`n` of them, made on the first call), as a task: the place, or why there is none.
    /// Past [`MAX_WAITING`] reviews waiting, the answer is no at once.
    pub async fn place(
        &self,
        n: usize,
        until: Instant,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, String> {
        let places = self
            .places
            .get_or_init(|| Arc::new(tokio::sync::Semaphore::new(n)))
            .clone();
        // Counted down when the wait ends however it ends: a request whose connection closes
        // drops this future mid-wait.
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let _waiting = Waiting(&self.waiting);
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= MAX_WAITING {
            return Err(format!("{MAX_WAITING} reviews already waiting"));
        }
        match tokio::time::timeout_at(until.into(), places.acquire_owned()).await {
            Ok(Ok(place)) => Ok(place),
            _ => Err(format!("all {n} of its places busy")),
        }
    }

    /// Runs `admit` on an idle instance (a fresh one, `init` run, when none is idle); the
    /// caller holds one of its places. `until` is when the review's time in the host is up.
    /// The error says why the plugin gave no answer: the host answers per the failure policy.
    pub fn admit(&self, request: &AdmitRequest, until: Instant) -> Result<Verdict, String> {
        if Instant::now() >= until {
            return Err("no time left for the review".into());
        }
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
                    if pool.len() < KEPT_IDLE {
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
