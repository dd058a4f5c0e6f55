//! One plugin's counters while it runs, and the snapshot status and metrics read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::histogram::{Histogram, HistogramSnapshot};
use crate::write::WRITE_VERBS;

/// Consecutive failed attempts (any key) after which a plugin counts as degraded.
pub const DEGRADED_AFTER: u64 = 10;

/// The kinds of call into a plugin's worker, as `/status` and `/metrics` name them
/// (`admit` is the admission server's, counted in [`crate::plugins::admit`]).
pub const CALL_KINDS: [&str; 5] = ["handle", "synced", "tick", "reconcile", "finalize"];

/// What became of a write that was not refused at once for its grant.
pub const WRITE_RESULTS: [&str; 3] = ["sent", "failed", "skipped"];

/// Counters of one plugin's deliveries.
#[derive(Debug, Default)]
pub struct PluginStats {
    /// Events handled successfully.
    pub delivered: AtomicU64,
    /// Failed attempts (error results and traps).
    pub failed: AtomicU64,
    /// Failed attempts scheduled for a retry.
    pub retried: AtomicU64,
    /// Failed attempts since the last success.
    pub consecutive_failures: AtomicU64,
    /// The reason of the latest failed attempt.
    pub last_error: Mutex<Option<String>>,
    /// Traps (each discards the instance).
    pub traps: AtomicU64,
    /// Instances replaced before a call because they neared the memory cap.
    pub memory_recycles: AtomicU64,
    /// Events given up after the last attempt, or on a non-retryable error.
    pub given_up: AtomicU64,
    /// Set once every informer the plugin needs has synced and the plugin has been handed
    /// the initial state of every type it subscribes to.
    pub synced: AtomicBool,
    /// Time of each call into the plugin, by kind ([`CALL_KINDS`]).
    pub calls: [Histogram; CALL_KINDS.len()],
    /// The most linear memory one of its instances held after a call, in bytes.
    pub memory_peak_bytes: AtomicU64,
    /// Linear memory of the current instance, in bytes.
    pub memory_bytes: AtomicU64,
    /// Object handles the current instance holds after its last call.
    pub handles: AtomicU64,
    /// The most CPU time one call of any of its instances into the host used, in
    /// microseconds (`wasm/host_calls.rs`).
    pub slowest_host_call_us: AtomicU64,
    /// Writes the cluster accepted.
    pub writes_sent: AtomicU64,
    /// Writes the cluster refused.
    pub writes_failed: AtomicU64,
    /// Writes refused at once because they were not granted.
    pub writes_denied: AtomicU64,
    /// Writes not sent because they would not change the cached object.
    pub writes_skipped: AtomicU64,
    /// Writes by kind ([`crate::write::WRITE_VERBS`]) and result ([`WRITE_RESULTS`]).
    pub writes_by_verb: [[AtomicU64; WRITE_RESULTS.len()]; WRITE_VERBS.len()],
    /// Requeues refused because the backlog was full.
    pub requeues_refused: AtomicU64,
    /// Requeues taken (each waits at least [`crate::plugins::triggers::MIN_REQUEUE`]).
    pub requeued: AtomicU64,
    /// `synced` calls that returned Ok.
    pub synced_calls: AtomicU64,
    /// Schedule ticks handled (`tick` returned Ok).
    pub ticks: AtomicU64,
    /// A controller's keys waiting to be reconciled.
    pub keys_waiting: AtomicU64,
    /// A controller's objects being deleted whose `finalize` is failing now: their
    /// finalizer holds them.
    pub finalizers_failing: AtomicU64,
    /// Milliseconds its writes and Events waited for their rate.
    pub write_wait_ms: AtomicU64,
    /// HTTP requests sent to granted hosts.
    pub http_sent: AtomicU64,
    /// HTTP requests refused (host not granted).
    pub http_denied: AtomicU64,
    /// Set while the worker waits for an event with no retry or key pending (a controller's
    /// keys requeued for later are not).
    pub idle: AtomicBool,
    /// What `kubewasm test` asked it to run now (one lock, which the worker takes each loop).
    pub asked: Mutex<Asked>,
}

/// Calls `kubewasm test` asked a worker for, to run at once.
#[derive(Debug, Default)]
pub struct Asked {
    /// Schedules to run once (`tick`).
    pub ticks: Vec<String>,
    /// Controller keys to reconcile (`reconcile`).
    pub reconciles: Vec<crate::object::Key>,
}

impl PluginStats {
    pub(super) fn set_last_error(&self, reason: &str) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason.to_owned());
    }

    /// Accounts for one call that took `elapsed` (into the worker's own `durations`, added to
    /// [`Self::calls`] later) and left its instance holding `usage`.
    pub fn account(
        &self,
        durations: &mut crate::histogram::Tally,
        elapsed: std::time::Duration,
        usage: &crate::wasm::Usage,
    ) {
        durations.observe(elapsed);
        let memory = u64::try_from(usage.memory_bytes).unwrap_or(u64::MAX);
        self.memory_bytes.store(memory, Ordering::Relaxed);
        // Read first: the peak rarely moves.
        if memory > self.memory_peak_bytes.load(Ordering::Relaxed) {
            self.memory_peak_bytes.fetch_max(memory, Ordering::Relaxed);
        }
        let handles = u64::try_from(usage.handles).unwrap_or(u64::MAX);
        self.handles.store(handles, Ordering::Relaxed);
        if usage.http_sent + usage.http_denied > 0 {
            self.http_sent.fetch_add(usage.http_sent, Ordering::Relaxed);
            self.http_denied
                .fetch_add(usage.http_denied, Ordering::Relaxed);
        }
        let slowest = u64::try_from(usage.slowest_host_call.as_micros()).unwrap_or(u64::MAX);
        // Read first: the shared maximum rarely moves, and a read takes no lock.
        if slowest > self.slowest_host_call_us.load(Ordering::Relaxed) {
            self.slowest_host_call_us
                .fetch_max(slowest, Ordering::Relaxed);
        }
    }

    /// Counts `write` as `result` (an index in [`WRITE_RESULTS`]) by its kind.
    pub fn count_write(&self, write: &crate::write::Write, result: usize) {
        self.writes_by_verb[write.verb_index()][result].fetch_add(1, Ordering::Relaxed);
    }

    /// True while the plugin's attempts keep failing ([`DEGRADED_AFTER`] or more in a row).
    pub fn degraded(&self) -> bool {
        self.consecutive_failures.load(Ordering::Relaxed) >= DEGRADED_AFTER
    }

    /// The delivery fields of a status; the caller fills in the rest.
    pub fn status(&self) -> PluginStatus {
        let calls: BTreeMap<String, HistogramSnapshot> = CALL_KINDS
            .iter()
            .zip(&self.calls)
            .map(|(kind, h)| ((*kind).to_owned(), h.snapshot()))
            .filter(|(_, h)| h.count > 0)
            .collect();
        PluginStatus {
            delivered: self.delivered.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            degraded: self.degraded(),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            traps: self.traps.load(Ordering::Relaxed),
            memory_recycles: self.memory_recycles.load(Ordering::Relaxed),
            given_up: self.given_up.load(Ordering::Relaxed),
            synced: self.synced.load(Ordering::Relaxed),
            durations: calls
                .values()
                .fold(HistogramSnapshot::default(), |mut all, h| {
                    all.merge(h);
                    all
                }),
            calls,
            memory_peak_bytes: self.memory_peak_bytes.load(Ordering::Relaxed),
            memory_bytes: self.memory_bytes.load(Ordering::Relaxed),
            handles: self.handles.load(Ordering::Relaxed),
            slowest_host_call_us: self.slowest_host_call_us.load(Ordering::Relaxed),
            writes_sent: self.writes_sent.load(Ordering::Relaxed),
            writes_failed: self.writes_failed.load(Ordering::Relaxed),
            writes_denied: self.writes_denied.load(Ordering::Relaxed),
            writes_skipped: self.writes_skipped.load(Ordering::Relaxed),
            writes_by_verb: WRITE_VERBS
                .iter()
                .zip(&self.writes_by_verb)
                .filter_map(|(verb, results)| {
                    let counts: BTreeMap<String, u64> = WRITE_RESULTS
                        .iter()
                        .zip(results)
                        .map(|(r, n)| ((*r).to_owned(), n.load(Ordering::Relaxed)))
                        .filter(|(_, n)| *n > 0)
                        .collect();
                    (!counts.is_empty()).then(|| ((*verb).to_owned(), counts))
                })
                .collect(),
            requeues_refused: self.requeues_refused.load(Ordering::Relaxed),
            requeued: self.requeued.load(Ordering::Relaxed),
            requeues_most_events: requeues_most_events(
                self.requeued.load(Ordering::Relaxed),
                self.delivered.load(Ordering::Relaxed),
            ),
            synced_calls: self.synced_calls.load(Ordering::Relaxed),
            ticks: self.ticks.load(Ordering::Relaxed),
            keys_waiting: self.keys_waiting.load(Ordering::Relaxed),
            finalizers_failing: self.finalizers_failing.load(Ordering::Relaxed),
            write_wait_ms: self.write_wait_ms.load(Ordering::Relaxed),
            http_sent: self.http_sent.load(Ordering::Relaxed),
            http_denied: self.http_denied.load(Ordering::Relaxed),
            idle: self.idle.load(Ordering::Relaxed),
            ..PluginStatus::default()
        }
    }
}

/// A plugin that is not loaded because its file or artifact failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FailedPlugin {
    /// The plugin's name.
    pub name: String,
    /// Its file, or its artifact's reference.
    pub path: std::path::PathBuf,
    /// Why it is not loaded.
    pub error: String,
    /// Failed attempts with a new content or reason.
    pub failures: u64,
}

/// A snapshot of one plugin's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginStatus {
    /// The plugin's name.
    pub name: String,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The version: first 12 hex digits of the SHA-256 of the file.
    pub digest: String,
    /// Events handled successfully.
    pub delivered: u64,
    /// Failed attempts.
    pub failed: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// True while its attempts keep failing.
    pub degraded: bool,
    /// The reason of its latest failed attempt.
    pub last_error: Option<String>,
    /// Traps.
    pub traps: u64,
    /// Instances replaced before a call because they had used most of their memory room.
    #[serde(default)]
    pub memory_recycles: u64,
    /// Events given up.
    pub given_up: u64,
    /// True once every informer the plugin needs has synced and the plugin has been handed
    /// their initial state (client-go's `HasSynced` for a handler). On standby: once its
    /// informers have synced.
    pub synced: bool,
    /// Prepared with warm caches but not delivering (this replica is not the leader).
    pub standby: bool,
    /// Seconds since this version was loaded.
    pub running_seconds: u64,
    /// Events waiting in its queue.
    pub queued: usize,
    /// Milliseconds the oldest event in its queue has waited (to within the batch it came in).
    #[serde(default)]
    pub queued_oldest_ms: u64,
    /// Bytes of the objects its waiting events hold (most shared with the cache).
    #[serde(default)]
    pub queued_bytes: usize,
    /// Events folded into a newer state of their object because the queue was backed up.
    pub coalesced: u64,
    /// Time of each call into the plugin, all kinds together.
    pub durations: HistogramSnapshot,
    /// Time of each call into the plugin by kind (`handle`, `synced`, `tick`, `reconcile`,
    /// `finalize`), the kinds it was called for only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub calls: BTreeMap<String, HistogramSnapshot>,
    /// The most linear memory one of its instances held after a call, in bytes.
    #[serde(default)]
    pub memory_peak_bytes: u64,
    /// Linear memory of the current instance, in bytes.
    pub memory_bytes: u64,
    /// Object handles its current instance holds after its last call (query answers it has
    /// not dropped).
    pub handles: u64,
    /// The most CPU time one of its calls into the host used, in microseconds (waits it asked
    /// for left out).
    pub slowest_host_call_us: u64,
    /// Writes the cluster accepted.
    pub writes_sent: u64,
    /// Writes the cluster refused.
    pub writes_failed: u64,
    /// Writes refused because they were not granted.
    pub writes_denied: u64,
    /// Writes not sent because they would not change the cached object.
    #[serde(default)]
    pub writes_skipped: u64,
    /// HTTP requests by granted host (`(not granted)` for the others) and outcome (`2xx` to
    /// `5xx`, `error`, `refused`, `denied`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub http_by_host: BTreeMap<String, BTreeMap<String, u64>>,
    /// Writes by kind (`apply`, `merge-patch`, `json-patch`, `create`, `delete`,
    /// `record-event`) and result (`sent`, `failed`, `skipped`), those that happened only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub writes_by_verb: BTreeMap<String, BTreeMap<String, u64>>,
    /// Milliseconds its writes and Events waited for their rate (`writesPerSecond`,
    /// `eventsPerSecond`).
    #[serde(default)]
    pub write_wait_ms: u64,
    /// Requeues refused because the backlog was full.
    #[serde(default)]
    pub requeues_refused: u64,
    /// Requeues taken.
    #[serde(default)]
    pub requeued: u64,
    /// Nearly every delivery asked to be requeued (at least 90% of 30 or more): a plugin
    /// that requeues everything, held to one delivery per object per
    /// [`crate::plugins::triggers::MIN_REQUEUE`] at most.
    #[serde(default)]
    pub requeues_most_events: bool,
    /// `synced` calls that returned Ok.
    #[serde(default)]
    pub synced_calls: u64,
    /// Schedule ticks handled.
    #[serde(default)]
    pub ticks: u64,
    /// The controller it is, if any: the type it reconciles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciles: Option<String>,
    /// A controller's keys waiting to be reconciled.
    #[serde(default)]
    pub keys_waiting: u64,
    /// A controller's objects being deleted whose `finalize` is failing now (its finalizer
    /// holds them).
    #[serde(default)]
    pub finalizers_failing: u64,
    /// Label combinations its metrics hold.
    #[serde(default)]
    pub metric_series: usize,
    /// Metric updates refused for its series bound or a label value's length.
    #[serde(default)]
    pub metric_updates_refused: u64,
    /// Updates its change filters dropped (no plugin call).
    #[serde(default)]
    pub filtered: u64,
    /// Updates passed without comparing its change filters because it was past its CPU
    /// budget (the comparisons are charged to it).
    #[serde(default)]
    pub unchecked: u64,
    /// The contract version it was built for.
    #[serde(default)]
    pub contract: String,
    /// Entries in its state.
    #[serde(default)]
    pub state_entries: usize,
    /// Bytes of its state's keys and values.
    #[serde(default)]
    pub state_bytes: usize,
    /// Bytes of its state written through to the cluster (this replica).
    #[serde(default)]
    pub state_written_bytes: u64,
    /// Times a changed map of its state waited for its write rate or all plugins' (it is
    /// written later, as it is then).
    #[serde(default)]
    pub state_writes_deferred: u64,
    /// What its admission reviews decided, when it serves admission.
    #[serde(default)]
    pub admission: Option<crate::plugins::admit::AdmissionStatus>,
    /// `serve`, `monitor` or `dry-run`: whether its writes and admission answers take
    /// effect, or are only reported.
    #[serde(default)]
    pub mode: String,
    /// What its writes and reviews would have done while they took no effect, once it has
    /// run in a mode other than `serve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<crate::plugins::trial::TrialStatus>,
    /// How its candidate (`NAME.candidate`) compares with it, once one has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<crate::plugins::shadow::CandidateStatus>,
    /// HTTP requests sent to granted hosts.
    pub http_sent: u64,
    /// HTTP requests refused (host not granted).
    pub http_denied: u64,
    /// Log lines dropped for exceeding its log rate.
    pub log_dropped: u64,
    /// Waiting for an event, with no call running and no retry or key pending (a
    /// controller's keys requeued for later are not).
    #[serde(default)]
    pub idle: bool,
    /// CPU time its calls, and the host's work for it, used, in microseconds.
    #[serde(default)]
    pub cpu_us: u64,
    /// Time its calls were held because it, or all plugins together, used their CPU budget,
    /// in microseconds.
    #[serde(default)]
    pub cpu_throttled_us: u64,
    /// Held for its CPU budget right now.
    #[serde(default)]
    pub cpu_throttled: bool,
    /// Times a new version replaced the running one.
    pub reloads: u64,
    /// Why the newest file of this name failed to load, if it did (the running version is
    /// the previous one).
    pub reload_error: Option<String>,
    /// Failed loads of this name since the last successful one.
    pub reload_failures: u64,
}

/// Whether a plugin requeued nearly every event it was delivered: 90% of them or more, once it
/// has been delivered 30.
pub fn requeues_most_events(requeued: u64, delivered: u64) -> bool {
    delivered >= 30 && requeued.saturating_mul(10) >= delivered.saturating_mul(9)
}
