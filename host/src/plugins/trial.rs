//! A plugin on trial: its mode (serve, monitor, dry-run), and what its writes and reviews
//! would have done, kept as reports while they take no effect (docs/design/safe-change.md).
//!
//! In `dry-run`, each write is sent as a dry run (`dryRun=All`), so the cluster checks and
//! admits it and keeps nothing, and is reported with the fields it would change against the
//! cached object. In `monitor` (and `dry-run`), each review is answered "allowed" as it came,
//! and what the plugin decided is reported. Reports are kept per plugin name across its
//! versions: the last [`KEPT`] of each kind, and counts without bound on time.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use serde_json::Value;

use crate::write::Refusal;

/// Reports of each kind kept per plugin.
pub const KEPT: usize = 100;

/// Bytes of changes (or of a patch) one report keeps; what is past it is counted.
pub const MAX_CHANGE_BYTES: usize = 4096;

/// Distinct reasons counted per plugin; others count as `other`.
const MAX_OUTCOMES: usize = 64;

/// What a plugin's writes and admission answers do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Writes are sent and reviews answered as the plugin decides.
    #[default]
    Serve,
    /// Reviews are answered "allowed" and what the plugin decided is reported; events are
    /// served.
    Monitor,
    /// As monitor, and writes are sent as dry runs and reported; HTTP reaches only hosts
    /// marked safe; state changes stay in memory, apart from the serving state.
    DryRun,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 3] = [Mode::Serve, Mode::Monitor, Mode::DryRun];

    /// As the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Serve => "serve",
            Mode::Monitor => "monitor",
            Mode::DryRun => "dry-run",
        }
    }

    /// Parses a mode as the configuration spells it.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == text)
            .ok_or_else(|| {
                format!(
                    "{:?}: a mode is serve, monitor or dry-run",
                    crate::text::cut(text.to_owned(), 40)
                )
            })
    }

    /// Whether admission answers are reported instead of given.
    pub fn monitors(self) -> bool {
        self != Mode::Serve
    }

    /// Whether writes are sent as dry runs.
    pub fn dry_run(self) -> bool {
        self == Mode::DryRun
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one dry-run write would have done.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriteReport {
    /// When it was sent (RFC 3339).
    pub time: String,
    /// The kind of write (`apply`, `merge-patch`, `delete`, ...).
    pub verb: String,
    /// What it is aimed at: type, `namespace/name`, subresource.
    pub target: String,
    /// `accepted` when the cluster would take it, else the refusal's reason.
    pub outcome: String,
    /// The refusal's message, when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What it would change, as JSON patch operations from the cached object (or from
    /// nothing, when the plugin does not read the type or the object is not cached) to the
    /// object the cluster answered; `[{"op":"remove","path":""}]` for a deletion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Value>,
    /// The changes were compared against the cached object.
    #[serde(default)]
    pub against_cache: bool,
    /// Operations left out past [`MAX_CHANGE_BYTES`].
    #[serde(default)]
    pub changes_left_out: usize,
}

/// What one monitored review would have answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReviewReport {
    /// When it was answered (RFC 3339).
    pub time: String,
    /// The review's uid.
    pub uid: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// The object reviewed: type and `namespace/name`.
    pub object: String,
    /// The rule it matched (`Kind OPERATION`, the first of the plugin's rules to match).
    pub rule: String,
    /// What the plugin decided: `allowed`, `patched`, `denied`, `failed_closed`,
    /// `failed_open`.
    pub decision: String,
    /// The denial's (or failure's) message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The JSON patch it would have applied, cut to [`MAX_CHANGE_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// A plugin's trial reports, for `/status`, `/metrics` and its KubewasmPlugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrialStatus {
    /// Dry-run writes by kind and outcome.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub writes: BTreeMap<String, BTreeMap<String, u64>>,
    /// Monitored reviews by rule and decision.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reviews: BTreeMap<String, BTreeMap<String, u64>>,
    /// The latest dry-run writes, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_writes: Vec<WriteReport>,
    /// The latest monitored reviews, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_reviews: Vec<ReviewReport>,
}

impl TrialStatus {
    /// Dry-run writes counted, all kinds and outcomes.
    pub fn writes_total(&self) -> u64 {
        self.writes.values().flat_map(BTreeMap::values).sum()
    }

    /// Monitored reviews with decision `decision`, all rules.
    pub fn reviews_decided(&self, decision: &str) -> u64 {
        self.reviews.values().filter_map(|d| d.get(decision)).sum()
    }
}

#[derive(Debug, Default)]
struct Kept {
    writes: VecDeque<WriteReport>,
    reviews: VecDeque<ReviewReport>,
    write_counts: BTreeMap<String, BTreeMap<String, u64>>,
    review_counts: BTreeMap<String, BTreeMap<String, u64>>,
}

/// One plugin's trial reports, shared by its versions and instances.
#[derive(Debug, Default)]
pub struct TrialLog {
    kept: Mutex<Kept>,
}

/// Adds one to `counts[key][outcome]`, `outcome` folded into `other` past
/// [`MAX_OUTCOMES`] distinct ones under `key`.
fn count(counts: &mut BTreeMap<String, BTreeMap<String, u64>>, key: &str, outcome: &str) {
    let by = counts.entry(key.to_owned()).or_default();
    let outcome = if by.contains_key(outcome) || by.len() < MAX_OUTCOMES {
        outcome
    } else {
        "other"
    };
    *by.entry(outcome.to_owned()).or_default() += 1;
}

fn push<T>(ring: &mut VecDeque<T>, item: T) {
    if ring.len() >= KEPT {
        ring.pop_front();
    }
    ring.push_back(item);
}

impl TrialLog {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports a dry-run write of kind `verb` to `target`, answered by `answer`; `cached`
    /// is the object as cached, when it is.
    pub fn write(
        &self,
        verb: &str,
        target: String,
        cached: Option<&Value>,
        answer: &Result<Option<Value>, Refusal>,
    ) {
        let (outcome, message, changes) = match answer {
            Ok(answered) => (
                "accepted".to_owned(),
                None,
                changes(cached, answered.as_ref()),
            ),
            Err(refusal) => (
                crate::text::cut(refusal.reason.clone(), 64),
                Some(crate::text::cut(
                    refusal.message.clone(),
                    crate::text::MAX_MESSAGE_BYTES,
                )),
                Vec::new(),
            ),
        };
        let (changes, changes_left_out) = bounded(changes);
        let report = WriteReport {
            time: crate::clock::now().to_string(),
            verb: verb.to_owned(),
            target,
            outcome,
            message,
            changes,
            against_cache: cached.is_some(),
            changes_left_out,
        };
        let mut kept = self.kept();
        count(&mut kept.write_counts, verb, &report.outcome);
        push(&mut kept.writes, report);
    }

    /// Reports a monitored review.
    pub fn review(&self, report: ReviewReport) {
        let mut kept = self.kept();
        count(&mut kept.review_counts, &report.rule, &report.decision);
        push(&mut kept.reviews, report);
    }

    /// Its counts and latest reports.
    pub fn status(&self) -> TrialStatus {
        let kept = self.kept();
        TrialStatus {
            writes: kept.write_counts.clone(),
            reviews: kept.review_counts.clone(),
            last_writes: kept.writes.iter().cloned().collect(),
            last_reviews: kept.reviews.iter().cloned().collect(),
        }
    }
}

/// Fields the API server sets on every write, which say nothing of what a write changes.
const NOISE: [&str; 3] = ["managedFields", "resourceVersion", "generation"];

fn without_noise(value: &Value) -> Value {
    let mut value = value.clone();
    if let Some(Value::Object(meta)) = value.get_mut("metadata") {
        for field in NOISE {
            meta.remove(field);
        }
    }
    value
}

/// JSON patch operations from `cached` (nothing when `None`) to `answered`; a deletion when
/// the cluster answered no object, or one that is not of the cached object's kind (a
/// `Status`).
fn changes(cached: Option<&Value>, answered: Option<&Value>) -> Vec<Value> {
    let deleted = || vec![serde_json::json!({"op": "remove", "path": ""})];
    let Some(answered) = answered else {
        return deleted();
    };
    if answered.get("kind").and_then(Value::as_str) == Some("Status") {
        return deleted();
    }
    let before = cached.map_or(Value::Object(Default::default()), without_noise);
    let patch = json_patch::diff(&before, &without_noise(answered));
    serde_json::to_value(patch)
        .ok()
        .and_then(|v| match v {
            Value::Array(ops) => Some(ops),
            _ => None,
        })
        .unwrap_or_default()
}

/// As many of `ops` as fit [`MAX_CHANGE_BYTES`] as JSON, and how many were left out.
fn bounded(ops: Vec<Value>) -> (Vec<Value>, usize) {
    let mut used = 0;
    let total = ops.len();
    let mut kept = Vec::new();
    for op in ops {
        let size = op.to_string().len();
        if used + size > MAX_CHANGE_BYTES {
            break;
        }
        used += size;
        kept.push(op);
    }
    let left_out = total - kept.len();
    (kept, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn modes_parse_as_written_and_name_what_is_wrong() {
        for mode in Mode::ALL {
            assert_eq!(Mode::parse(mode.as_str()), Ok(mode));
        }
        let e = Mode::parse("dryrun").expect_err("no such mode");
        assert!(e.contains("serve, monitor or dry-run"), "{e}");
        assert!(Mode::Monitor.monitors() && !Mode::Monitor.dry_run());
        assert!(Mode::DryRun.monitors() && Mode::DryRun.dry_run());
        assert!(!Mode::Serve.monitors());
    }

    #[test]
    fn a_write_report_names_the_changed_fields_without_server_noise() {
        let log = TrialLog::default();
        let cached = json!({"metadata": {"name": "a", "resourceVersion": "5",
            "managedFields": [{"manager": "x"}], "labels": {"keep": "1"}}, "data": {"k": "v"}});
        let answered = json!({"metadata": {"name": "a", "resourceVersion": "5",
            "managedFields": [{"manager": "y"}], "labels": {"keep": "1", "team": "a"}},
            "data": {"k": "v"}});
        log.write(
            "apply",
            "v1/ConfigMap ns/a".into(),
            Some(&cached),
            &Ok(Some(answered)),
        );
        let status = log.status();
        let report = &status.last_writes[0];
        assert_eq!(report.outcome, "accepted");
        assert!(report.against_cache);
        assert_eq!(
            report.changes,
            vec![json!({"op": "add", "path": "/metadata/labels/team", "value": "a"})]
        );
        assert_eq!(status.writes["apply"]["accepted"], 1);
    }

    #[test]
    fn refusals_deletions_and_large_changes_are_reported_bounded() {
        let log = TrialLog::default();
        let refusal = Refusal {
            reason: "Forbidden".into(),
            message: "no".into(),
            retry: false,
        };
        log.write("delete", "t".into(), None, &Err(refusal));
        log.write("delete", "t".into(), None, &Ok(None));
        let big: serde_json::Map<String, Value> = (0..500)
            .map(|i| (format!("key-{i}"), json!("x".repeat(20))))
            .collect();
        log.write("create", "t".into(), None, &Ok(Some(json!({"data": big}))));
        let status = log.status();
        assert_eq!(status.last_writes[0].outcome, "Forbidden");
        assert_eq!(status.last_writes[0].message.as_deref(), Some("no"));
        assert_eq!(
            status.last_writes[1].changes,
            vec![json!({"op": "remove", "path": ""})]
        );
        let created = &status.last_writes[2];
        assert!(!created.against_cache);
        let size: usize = created.changes.iter().map(|c| c.to_string().len()).sum();
        assert!(
            size <= MAX_CHANGE_BYTES && created.changes_left_out > 0,
            "{size}"
        );
        assert_eq!(status.writes["delete"].len(), 2);
    }

    #[test]
    fn reports_are_kept_to_the_last_hundred_and_outcomes_to_a_bound() {
        let log = TrialLog::default();
        for i in 0..(KEPT + 20) {
            let refusal = Refusal {
                reason: format!("Reason{i}"),
                message: String::new(),
                retry: false,
            };
            log.write("patch", format!("t{i}"), None, &Err(refusal));
        }
        let status = log.status();
        assert_eq!(status.last_writes.len(), KEPT);
        assert_eq!(status.last_writes[0].target, "t20");
        assert_eq!(status.writes["patch"].len(), MAX_OUTCOMES + 1);
        assert_eq!(
            status.writes["patch"]["other"],
            (KEPT + 20 - MAX_OUTCOMES) as u64
        );
        assert_eq!(status.writes_total(), (KEPT + 20) as u64);
    }
}
