//! Shadow versions: a candidate (`NAME.candidate`, from the file `NAME.candidate.wasm`) runs
//! beside the serving version of `NAME` on the same events, as a plugin of its own (its own
//! instance, queue, thread, limits and CPU budget) with `NAME`'s settings in dry-run mode, so
//! nothing it does takes effect and a slow, trapping or flooding candidate costs the serving
//! version nothing but its share of the CPU. Both report what each event made them do; a
//! [`Comparison`] pairs the reports by object and resourceVersion and counts where they agree.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::write::{Action, Write};

/// The suffix that makes a plugin name a candidate's.
pub const CANDIDATE: &str = ".candidate";

/// Reports waiting for their pair, past which the oldest are counted unmatched.
pub const MAX_WAITING: usize = 10_000;

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

/// What one call made a version do: its staged writes, normalised (one line each, sorted,
/// bodies as canonical JSON), or why it failed (starting `failed:`).
pub fn outcome(result: Result<&[Write], &str>) -> String {
    let writes = match result {
        Err(why) => return format!("failed: {why}"),
        Ok(writes) => writes,
    };
    let canonical = |text: &str| {
        serde_json::from_str::<serde_json::Value>(text)
            .map_or_else(|_| text.to_owned(), |v| v.to_string())
    };
    let mut lines: Vec<String> = writes
        .iter()
        .map(|w| {
            let body = match &w.action {
                Action::Apply(b)
                | Action::MergePatch(b)
                | Action::JsonPatch(b)
                | Action::Create(b) => canonical(b),
                Action::Delete(o) => format!("{} uid={:?}", o.propagation.as_str(), o.uid),
                Action::RecordEvent {
                    warning,
                    reason,
                    note,
                    ..
                } => format!("warning={warning} reason={reason} note={note}"),
            };
            format!("{} {} {body}", w.verb(), w.target)
        })
        .collect();
    lines.sort();
    lines.join("\n")
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
    /// Reports with no pair within a minute (an event one of them coalesced, retried or
    /// never got, such as the candidate's initial list of objects the serving version saw
    /// long ago).
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

#[derive(Default)]
struct Table {
    waiting: HashMap<String, (Side, String, Instant)>,
    status: CandidateStatus,
    promotion: Option<Promotion>,
}

impl Table {
    /// Counts one paired event; promotes once its time has come.
    fn count(&mut self, event: String, serving: String, candidate: String) {
        let s = &mut self.status;
        if serving == candidate {
            s.equal += 1;
            if let Some(p) = self
                .promotion
                .take_if(|p| s.equal >= p.after && s.different == 0 && s.candidate_failed == 0)
            {
                s.promotion = Some(promote(&p));
            }
        } else if candidate.starts_with("failed") && !serving.starts_with("failed") {
            s.candidate_failed += 1;
        } else {
            s.different += 1;
            if s.differences.len() < KEPT {
                s.differences.push(Difference {
                    event,
                    serving: crate::text::cut(serving, MAX_OUTCOME_BYTES),
                    candidate: crate::text::cut(candidate, MAX_OUTCOME_BYTES),
                });
            }
        }
    }
}

/// The pairing of one plugin's serving and candidate reports.
#[derive(Default)]
pub struct Comparison {
    active: AtomicBool,
    table: Mutex<Table>,
}

impl Comparison {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
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
        table.promotion = promotion;
        self.active.store(true, Ordering::Relaxed);
    }

    /// The candidate stopped: what was counted stays shown.
    pub fn stop(&self) {
        let mut table = self.table();
        table.waiting.clear();
        table.status.running = false;
        table.promotion = None;
        self.active.store(false, Ordering::Relaxed);
    }

    /// The candidate failed past bearing (`why`): it is stopped, never promoted, and reports
    /// no more.
    pub fn drop_candidate(&self, why: &str) {
        let mut table = self.table();
        table.waiting.clear();
        table.promotion = None;
        table.status.running = false;
        table.status.dropped = Some(crate::text::cut(why.to_owned(), MAX_OUTCOME_BYTES));
        self.active.store(false, Ordering::Relaxed);
    }

    /// Reports what version `side` did for the event of object `id` at `version`: counted
    /// once the other version reports the same event.
    pub fn report(&self, side: Side, id: &str, version: &str, outcome: String) {
        let key = format!("{id}@{version}");
        let now = Instant::now();
        let mut table = self.table();
        let t = &mut *table;
        match t.waiting.remove(&key) {
            Some((other, first, _)) if other != side => {
                let (serving, candidate) = match side {
                    Side::Candidate => (first, outcome),
                    Side::Serving => (outcome, first),
                };
                t.count(key, serving, candidate);
            }
            // A retry of an event this side already reported: the first attempt counts.
            Some(first) => {
                t.waiting.insert(key, first);
            }
            None => {
                if t.waiting.len() >= MAX_WAITING {
                    let before = t.waiting.len();
                    t.waiting
                        .retain(|_, (_, _, at)| now.duration_since(*at) < MAX_WAIT);
                    if t.waiting.len() >= MAX_WAITING {
                        t.waiting.clear();
                    }
                    t.status.unmatched += (before - t.waiting.len()) as u64;
                }
                t.waiting.insert(key, (side, outcome, now));
            }
        }
    }

    /// Counts what both versions decided for one event (an admission review, which both
    /// answer on one thread) at once.
    pub fn pair(&self, event: String, serving: String, candidate: String) {
        if self.active() {
            self.table().count(event, serving, candidate);
        }
    }

    /// The counts so far, reports waiting longer than [`MAX_WAIT`] counted unmatched.
    pub fn status(&self) -> CandidateStatus {
        let now = Instant::now();
        let mut table = self.table();
        let before = table.waiting.len();
        table
            .waiting
            .retain(|_, (_, _, at)| now.duration_since(*at) < MAX_WAIT);
        let expired = (before - table.waiting.len()) as u64;
        table.status.unmatched += expired;
        table.status.clone()
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
        let b = [apply("b", "{}"), apply("a", r#"{"y": 2, "x": 1}"#)];
        assert_eq!(outcome(Ok(&a)), outcome(Ok(&b)));
        assert_ne!(outcome(Ok(&a)), outcome(Ok(&a[..1])));
        assert_eq!(outcome(Err("boom")), "failed: boom");
    }

    #[test]
    fn reports_pair_by_event_whichever_comes_first() {
        let c = Comparison::default();
        c.start(None);
        c.report(Side::Serving, "p/a", "1", "w".into());
        c.report(Side::Candidate, "p/a", "1", "w".into());
        c.report(Side::Candidate, "p/b", "1", "x".into());
        c.report(Side::Serving, "p/b", "1", "y".into());
        c.report(Side::Serving, "p/c", "1", "y".into());
        c.report(Side::Candidate, "p/c", "1", "failed: trapped".into());
        // A retry on one side does not pair with itself.
        c.report(Side::Serving, "p/d", "1", "failed: conflict".into());
        c.report(Side::Serving, "p/d", "1", "w".into());
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
        c.report(Side::Candidate, "p/d", "1", "failed: conflict".into());
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
        for i in 0..(MAX_WAITING + 5) {
            c.report(Side::Candidate, &format!("p/{i}"), "1", String::new());
        }
        let s = c.status();
        assert_eq!(s.unmatched, MAX_WAITING as u64);
        assert_eq!(c.table().waiting.len(), 5);
    }
}
