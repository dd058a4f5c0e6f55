//! Shadow versions: a candidate (`NAME.candidate`, from the file `NAME.candidate.wasm`) runs
//! beside the serving version of `NAME` on the same events, as a plugin of its own (its own
//! instance, queue, thread, limits and CPU budget) with `NAME`'s settings in dry-run mode, so
//! nothing it does takes effect and a slow, trapping or flooding candidate costs the serving
//! version nothing but its share of the CPU. Both report what each event made them do; a
//! [`Comparison`] pairs the reports by object and resourceVersion and counts where they agree.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::write::{Action, Write};

/// The suffix that makes a plugin name a candidate's.
pub const CANDIDATE: &str = ".candidate";

/// Reports waiting for their pair, past which the oldest are counted unmatched.
pub const MAX_WAITING: usize = 10_000;

/// Bytes of the reports waiting (their keys and outcomes: a call may stage 4 MiB of writes),
/// past which the oldest are counted unmatched too.
pub const MAX_WAITING_BYTES: usize = 64 << 20;

/// How long a report waits for its pair.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Differences kept in full (the first ones).
pub const KEPT: usize = 20;

/// Bytes of an outcome a kept difference holds.
const MAX_OUTCOME_BYTES: usize = 2048;

/// The serving plugin a candidate's name stands for; `None` for a serving plugin's name.
pub fn candidate_of(name: &str) -> Option<&str> {
    name.strip_suffix(CANDIDATE).filter(|base| !base.is_empty())
}

/// Which version a report comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The version serving.
    Serving,
    /// The candidate.
    Candidate,
}

/// What one call made a version do: its staged writes, one line each (`verb`, target and
/// body, tab-separated, the body as the plugin wrote it), or why it failed (starting
/// `failed:`). Two outcomes that differ as text may still be the same writes ([`same`]).
pub fn outcome(result: Result<&[Write], &str>) -> String {
    let writes = match result {
        Err(why) => return format!("failed: {why}"),
        Ok(writes) => writes,
    };
    let mut out = String::new();
    for w in writes {
        if !out.is_empty() {
            out.push('\n');
        }
        let body = match &w.action {
            Action::Apply(b) | Action::MergePatch(b) | Action::JsonPatch(b) | Action::Create(b) => {
                std::borrow::Cow::Borrowed(b.as_str())
            }
            Action::Delete(o) => format!("{} uid={:?}", o.propagation.as_str(), o.uid).into(),
            Action::RecordEvent {
                warning,
                reason,
                note,
                ..
            } => format!("warning={warning} reason={reason} note={note}").into(),
        };
        let _ = write!(out, "{}\t{}\t", w.verb(), w.target);
        // A body's own tabs and newlines are JSON whitespace: canonical forms drop them.
        if body.contains(['\t', '\n']) {
            out.push_str(&body.replace(['\t', '\n'], " "));
        } else {
            out.push_str(&body);
        }
    }
    out
}

/// `outcome` with its writes in order and each JSON body canonical (keys sorted, no
/// whitespace): how two versions that write the same in another order or spelling compare.
fn canonical(outcome: &str) -> String {
    if outcome.starts_with("failed: ") {
        return outcome.to_owned();
    }
    let mut lines: Vec<String> = outcome
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, '\t');
            let (Some(verb), Some(target), Some(body)) = (parts.next(), parts.next(), parts.next())
            else {
                return line.to_owned();
            };
            let body = serde_json::from_str::<serde_json::Value>(body)
                .map_or_else(|_| body.to_owned(), |v| v.to_string());
            format!("{verb} {target} {body}")
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Whether two outcomes are the same writes: equal as text (the common case, no parsing), or
/// once canonical.
fn same(serving: &str, candidate: &str) -> bool {
    serving == candidate || canonical(serving) == canonical(candidate)
}

/// One event both versions handled differently.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Difference {
    /// The object (`type namespace/name`) and its resourceVersion.
    pub event: String,
    /// What the serving version did (its writes, one per line, or its failure).
    pub serving: String,
    /// What the candidate did.
    pub candidate: String,
}

/// How a candidate compares with the serving version, for `/status` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CandidateStatus {
    /// Running now (a candidate file is loaded).
    pub running: bool,
    /// Events both handled alike.
    pub equal: u64,
    /// Events they handled differently.
    pub different: u64,
    /// Events the serving version handled and the candidate failed.
    pub candidate_failed: u64,
    /// Reports with no pair within a minute, or past the bounds on what waits (an event one of
    /// them coalesced, retried or never got, such as the candidate's initial list of objects
    /// the serving version saw long ago).
    pub unmatched: u64,
    /// The first differences, in full (cut).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<Difference>,
    /// Equal events after which it is promoted, with no difference and no failure
    /// (`candidate.promoteAfter`); none: only by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote_after: Option<u64>,
    /// How its promotion went, once tried: the file renamed, or why it could not be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion: Option<String>,
    /// Why it was dropped (it trapped, or kept failing), when it was: it runs no more until
    /// its file changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<String>,
}

/// An automatic promotion: after `after` equal events with no difference and no failure,
/// the candidate's file `from` is renamed over the serving version's `to`, which the plugins
/// folder then swaps in as it swaps any replaced file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotion {
    /// Equal events it takes.
    pub after: u64,
    /// The candidate's file.
    pub from: PathBuf,
    /// The serving version's file.
    pub to: PathBuf,
}

/// What is counted under one lock: all but the equal events (counted without one, as most
/// events are), the kept differences and the promotion waiting for its count.
#[derive(Default)]
struct Table {
    status: CandidateStatus,
    promotion: Option<Promotion>,
}

/// Reports waiting for their pair are kept in this many maps, each under its own lock, so
/// the two versions' workers seldom wait for each other.
const SHARDS: usize = 16;

/// The reports of one shard waiting for their pair, and the bytes they hold.
#[derive(Default)]
struct Waiting {
    reports: HashMap<String, (Side, String, Instant)>,
    bytes: usize,
}

impl Waiting {
    fn insert(&mut self, key: String, report: (Side, String, Instant)) {
        self.bytes += key.len() + report.1.len();
        self.reports.insert(key, report);
    }

    fn remove(&mut self, key: &str) -> Option<(Side, String, Instant)> {
        let report = self.reports.remove(key)?;
        self.bytes -= key.len() + report.1.len();
        Some(report)
    }

    /// Whether adding a report of `bytes` would pass this shard's share of the bounds.
    fn full(&self, bytes: usize) -> bool {
        self.reports.len() >= MAX_WAITING / SHARDS
            || self.bytes + bytes > MAX_WAITING_BYTES / SHARDS
    }

    /// Drops the reports older than [`MAX_WAIT`]; how many.
    fn expire(&mut self, now: Instant) -> u64 {
        let before = self.reports.len();
        self.reports
            .retain(|_, (_, _, at)| now.duration_since(*at) < MAX_WAIT);
        self.bytes = self
            .reports
            .iter()
            .map(|(key, (_, outcome, _))| key.len() + outcome.len())
            .sum();
        (before - self.reports.len()) as u64
    }

    /// Drops every report; how many.
    fn clear(&mut self) -> u64 {
        let gone = self.reports.len() as u64;
        self.reports.clear();
        self.bytes = 0;
        gone
    }
}

/// The pairing of one plugin's serving and candidate reports.
#[derive(Default)]
pub struct Comparison {
    active: AtomicBool,
    waiting: [Mutex<Waiting>; SHARDS],
    equal: AtomicU64,
    unmatched: AtomicU64,
    /// Set while a promotion waits for its count.
    armed: AtomicBool,
    table: Mutex<Table>,
}

/// The map of `key` (by its last bytes: keys differ most in their resourceVersion).
fn shard_of(key: &str) -> usize {
    key.bytes().rev().take(8).fold(0usize, |h, b| {
        h.wrapping_mul(31).wrapping_add(usize::from(b))
    }) % SHARDS
}

impl Comparison {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn shard(&self, i: usize) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn clear_waiting(&self) {
        for i in 0..SHARDS {
            self.shard(i).clear();
        }
    }

    /// True while a candidate runs: only then do versions report.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// A candidate started (counts start again, with `promotion` when it is promoted on its
    /// own).
    pub fn start(&self, promotion: Option<Promotion>) {
        let mut table = self.table();
        *table = Table::default();
        table.status.running = true;
        table.status.promote_after = promotion.as_ref().map(|p| p.after);
        self.armed.store(promotion.is_some(), Ordering::Relaxed);
        table.promotion = promotion;
        self.equal.store(0, Ordering::Relaxed);
        self.unmatched.store(0, Ordering::Relaxed);
        self.clear_waiting();
        self.active.store(true, Ordering::Relaxed);
    }

    /// The candidate stopped: what was counted stays shown.
    pub fn stop(&self) {
        self.halt(None);
    }

    /// The candidate failed past bearing (`why`): it is stopped, never promoted, and reports
    /// no more.
    pub fn drop_candidate(&self, why: &str) {
        self.halt(Some(crate::text::cut(why.to_owned(), MAX_OUTCOME_BYTES)));
    }

    fn halt(&self, dropped: Option<String>) {
        self.active.store(false, Ordering::Relaxed);
        self.armed.store(false, Ordering::Relaxed);
        let mut table = self.table();
        table.promotion = None;
        table.status.running = false;
        if dropped.is_some() {
            table.status.dropped = dropped;
        }
        drop(table);
        self.clear_waiting();
    }

    /// Reports what version `side` did for the event `key` (its kind, object and
    /// resourceVersion): counted once the other version reports the same event.
    pub fn report(&self, side: Side, key: String, outcome: String) {
        let now = Instant::now();
        let mut waiting = self.shard(shard_of(&key));
        match waiting.remove(&key) {
            Some((other, first, _)) if other != side => {
                drop(waiting);
                let (serving, candidate) = match side {
                    Side::Candidate => (first, outcome),
                    Side::Serving => (outcome, first),
                };
                self.count(key, serving, candidate);
            }
            // A retry of an event this side already reported: the first attempt counts.
            Some(first) => {
                waiting.insert(key, first);
            }
            None => {
                let bytes = key.len() + outcome.len();
                if waiting.full(bytes) {
                    let mut gone = waiting.expire(now);
                    if waiting.full(bytes) {
                        gone += waiting.clear();
                    }
                    self.unmatched.fetch_add(gone, Ordering::Relaxed);
                }
                waiting.insert(key, (side, outcome, now));
            }
        }
    }

    /// Counts what both versions decided for one event (an admission review, which both
    /// answer on one thread) at once.
    pub fn pair(&self, event: String, serving: String, candidate: String) {
        if self.active() {
            self.count(event, serving, candidate);
        }
    }

    /// Counts one paired event; promotes once its time has come.
    fn count(&self, event: String, serving: String, candidate: String) {
        if same(&serving, &candidate) {
            let equal = self.equal.fetch_add(1, Ordering::Relaxed) + 1;
            if !self.armed.load(Ordering::Relaxed) {
                return;
            }
            let mut table = self.table();
            let t = &mut *table;
            let clean = t.status.different == 0 && t.status.candidate_failed == 0;
            if let Some(p) = t.promotion.take_if(|p| clean && equal >= p.after) {
                self.armed.store(false, Ordering::Relaxed);
                t.status.promotion = Some(promote(&p));
            }
            return;
        }
        let mut table = self.table();
        let s = &mut table.status;
        if candidate.starts_with("failed") && !serving.starts_with("failed") {
            s.candidate_failed += 1;
        } else {
            s.different += 1;
            if s.differences.len() < KEPT {
                s.differences.push(Difference {
                    event,
                    serving: crate::text::cut(canonical(&serving), MAX_OUTCOME_BYTES),
                    candidate: crate::text::cut(canonical(&candidate), MAX_OUTCOME_BYTES),
                });
            }
        }
    }

    /// The counts so far, reports waiting longer than [`MAX_WAIT`] counted unmatched.
    pub fn status(&self) -> CandidateStatus {
        let now = Instant::now();
        let expired: u64 = (0..SHARDS).map(|i| self.shard(i).expire(now)).sum();
        let unmatched = self.unmatched.fetch_add(expired, Ordering::Relaxed) + expired;
        CandidateStatus {
            equal: self.equal.load(Ordering::Relaxed),
            unmatched,
            ..self.table().status.clone()
        }
    }
}

/// Renames the candidate's file over the serving version's: what happened, for status.
fn promote(p: &Promotion) -> String {
    match std::fs::rename(&p.from, &p.to) {
        Ok(()) => {
            tracing::info!(from = %p.from.display(), to = %p.to.display(), equal = p.after, "candidate promoted: its file now serves");
            format!(
                "promoted after {} equal events: {} renamed to {}",
                p.after,
                p.from.display(),
                p.to.display()
            )
        }
        Err(e) => {
            tracing::warn!(from = %p.from.display(), to = %p.to.display(), "candidate ready for promotion, but its file cannot be renamed: {e}");
            format!(
                "ready after {} equal events, but {} cannot be renamed to {}: {e} (promote it where the plugins folder comes from)",
                p.after,
                p.from.display(),
                p.to.display()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gvk::Gvk;
    use crate::write::Target;

    fn apply(name: &str, body: &str) -> Write {
        Write {
            target: Target {
                gvk: Gvk::new("", "v1", "Pod"),
                namespace: Some("shop".into()),
                name: name.into(),
                subresource: None,
            },
            action: Action::Apply(body.into()),
        }
    }

    #[test]
    fn a_candidates_name_names_its_serving_plugin() {
        assert_eq!(candidate_of("labeler.candidate"), Some("labeler"));
        assert_eq!(candidate_of("labeler"), None);
        assert_eq!(candidate_of(".candidate"), None);
    }

    #[test]
    fn outcomes_compare_in_any_order_and_key_order() {
        let a = [apply("a", r#"{"x":1,"y":2}"#), apply("b", "{}")];
        let b = [apply("b", "{}"), apply("a", "{\"y\":\t2,\n\"x\": 1}")];
        assert!(same(&outcome(Ok(&a)), &outcome(Ok(&b))));
        assert!(!same(&outcome(Ok(&a)), &outcome(Ok(&a[..1]))));
        assert_eq!(outcome(Err("boom")), "failed: boom");
        assert_eq!(
            canonical(&outcome(Ok(&b))),
            "apply v1/Pod shop/a {\"x\":1,\"y\":2}\napply v1/Pod shop/b {}"
        );
    }

    #[test]
    fn reports_pair_by_event_whichever_comes_first() {
        let c = Comparison::default();
        c.start(None);
        c.report(Side::Serving, "p/a@1".into(), "w".into());
        c.report(Side::Candidate, "p/a@1".into(), "w".into());
        c.report(Side::Candidate, "p/b@1".into(), "x".into());
        c.report(Side::Serving, "p/b@1".into(), "y".into());
        c.report(Side::Serving, "p/c@1".into(), "y".into());
        c.report(Side::Candidate, "p/c@1".into(), "failed: trapped".into());
        // A retry on one side does not pair with itself.
        c.report(Side::Serving, "p/d@1".into(), "failed: conflict".into());
        c.report(Side::Serving, "p/d@1".into(), "w".into());
        let s = c.status();
        assert_eq!((s.equal, s.different, s.candidate_failed), (1, 1, 1));
        assert_eq!(s.differences[0].event, "p/b@1");
        assert_eq!(
            (
                s.differences[0].serving.as_str(),
                s.differences[0].candidate.as_str()
            ),
            ("y", "x")
        );
        c.report(Side::Candidate, "p/d@1".into(), "failed: conflict".into());
        assert_eq!(c.status().equal, 2, "the first attempts pair");
        // A new candidate counts afresh; a stopped one keeps its counts shown.
        c.stop();
        assert!(!c.active() && c.status().equal == 2 && !c.status().running);
        c.start(None);
        assert_eq!(c.status().equal, 0);
        c.drop_candidate("trapped: deadline");
        let s = c.status();
        assert!(!c.active() && !s.running);
        assert_eq!(s.dropped.as_deref(), Some("trapped: deadline"));
    }

    #[test]
    fn waiting_reports_are_bounded_and_counted_unmatched() {
        let c = Comparison::default();
        c.start(None);
        let sent = 3 * MAX_WAITING;
        for i in 0..sent {
            c.report(Side::Candidate, format!("p/{i}@1"), String::new());
        }
        let s = c.status();
        let waiting: usize = (0..SHARDS).map(|i| c.shard(i).reports.len()).sum();
        assert!(waiting <= MAX_WAITING, "{waiting}");
        assert!(s.unmatched >= (sent - MAX_WAITING) as u64, "{s:?}");
        assert_eq!(
            s.unmatched + waiting as u64,
            sent as u64,
            "each report counted once"
        );
    }

    #[test]
    fn waiting_outcomes_are_bounded_in_bytes_too() {
        let c = Comparison::default();
        c.start(None);
        // A call may stage 4 MiB of writes: 200 reports of 1 MiB never pair.
        let sent = 200;
        for i in 0..sent {
            c.report(Side::Candidate, format!("p/{i}@1"), "x".repeat(1 << 20));
        }
        let s = c.status();
        let held: usize = (0..SHARDS).map(|i| c.shard(i).bytes).sum();
        let waiting: usize = (0..SHARDS).map(|i| c.shard(i).reports.len()).sum();
        assert!(held <= MAX_WAITING_BYTES, "{held}");
        assert_eq!(
            s.unmatched + waiting as u64,
            sent,
            "each report counted once"
        );
        // The last report is still waiting: its pair pairs, and its bytes go with it.
        let key = format!("p/{}@1", sent - 1);
        c.report(Side::Serving, key.clone(), "x".repeat(1 << 20));
        let after: usize = (0..SHARDS).map(|i| c.shard(i).bytes).sum();
        assert_eq!(c.status().equal, 1);
        assert_eq!(after, held - key.len() - (1 << 20));
    }
}
