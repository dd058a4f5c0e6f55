//! The write path of one plugin's worker: what a successful call staged, sent in order. Each
//! write is checked before it goes:
//!
//! - against the cached object: skipped when it would change nothing, unless an earlier write
//!   of the plugin's to that object is still on its way into the cache (the cache has not
//!   moved past the version it held when that one was sent);
//! - against feedback loops: a write to the object whose event is being handled counts
//!   towards [`crate::plugins::throttle::LOOP_LIMIT`], and past it is refused;
//! - against the plugin's write and Event rates, waited for on the worker's own thread;
//! - against ownership: once this replica no longer delivers the object (leadership or its
//!   slice lost), nothing more is sent.
//!
//! The first refusal fails the attempt (the writes before it stay sent: each is idempotent or
//! answers a retry plainly), and is kept for the object's next attempt, which the plugin sees.
//! Nothing here needs a plugin instance: the worker hands over what a call staged and how to
//! reach its cache, its writer and its replica's duty ([`Sending`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{AttemptFailure, POLL};
use crate::object::KubeObject;
use crate::plugins::PluginStats;
use crate::plugins::throttle::WriteLimits;
use crate::plugins::trial::TrialLog;
use crate::wasm::bindings::kubewasm::plugin::cluster::WriteFailure;
use crate::wasm::cluster::{Staged, failure};
use crate::write::{self, Action, Refusal, Writer};

/// Indexes of [`crate::plugins::status::WRITE_RESULTS`].
const SENT: usize = 0;
const FAILED: usize = 1;
const SKIPPED: usize = 2;

/// Objects whose last write is remembered as still on its way into the cache.
const MAX_IN_FLIGHT: usize = 4096;

/// The identity of a write's object, as [`crate::informer::Notification::id`] names an
/// event's.
pub(super) fn target_id(t: &write::Target) -> String {
    match &t.namespace {
        Some(ns) => format!("{}/{ns}/{}", t.gvk, t.name),
        None => format!("{}/{}", t.gvk, t.name),
    }
}

/// What one call's writes are sent with: the worker's view of its cache, its writer and its
/// replica's duty, for the time of the sending.
pub(super) struct Sending<'a> {
    /// The plugin's name (its field manager is `kubewasm/<plugin>`).
    pub plugin: &'a str,
    /// Where writes go; none when this host's cluster takes none.
    pub writer: Option<&'a dyn Writer>,
    /// Counters of the plugin.
    pub stats: &'a PluginStats,
    /// The id of the work being handled: writes to that object count towards a loop, and
    /// refusals are kept under it.
    pub handling: &'a str,
    /// The key named in messages.
    pub key: &'a str,
    /// True while this replica still delivers the work (waits out a lapsed confirmation).
    pub ours: &'a dyn Fn() -> bool,
    /// True once the worker must stop.
    pub stopped: &'a dyn Fn() -> bool,
    /// The cached object a write is aimed at, when the plugin reads its type.
    pub cached: &'a dyn Fn(&write::Target) -> Option<Arc<KubeObject>>,
    /// How long the replica's Lease is confirmed for now, when it holds one: a write is not
    /// waited on past it.
    pub confirmed: &'a dyn Fn() -> Option<Duration>,
    /// Where writes are reported when the plugin runs in dry-run mode: each is then sent as
    /// a dry run, and none lands.
    pub dry_run: Option<&'a TrialLog>,
}

/// One plugin worker's writes: rates and loops (shared by the plugin's versions), what is on
/// its way, and why the last attempts' writes were refused.
pub(super) struct Outbox {
    /// The plugin's write and Event rates and its loops, kept across its versions.
    limits: Arc<Mutex<WriteLimits>>,
    /// Why each object's last failed attempt's writes were refused, by work id.
    failures: HashMap<String, Vec<WriteFailure>>,
    /// The resourceVersion cached when the last write to each object was sent.
    in_flight: HashMap<String, String>,
}

impl Outbox {
    /// An outbox bound by `limits`.
    pub fn new(limits: Arc<Mutex<WriteLimits>>) -> Self {
        Self {
            limits,
            failures: HashMap::new(),
            in_flight: HashMap::new(),
        }
    }

    /// Why the writes of work `id`'s last failed attempt were refused, forgotten here.
    pub fn take_failures(&mut self, id: &str) -> Vec<WriteFailure> {
        // Nearly always empty: no lookup then.
        if self.failures.is_empty() {
            return Vec::new();
        }
        self.failures.remove(id).unwrap_or_default()
    }

    /// True when a write to `target` was sent while the cache held `version`, and has not
    /// reached the cache since: sending the same again would be a duplicate.
    pub fn on_its_way(&self, target: &str, version: &str) -> bool {
        self.in_flight.get(target).is_some_and(|v| v == version)
    }

    /// Counts the writes a call staged that were not granted.
    pub fn count_denied(stats: &PluginStats, staged: &Staged) {
        stats
            .writes_denied
            .fetch_add(staged.denied, Ordering::Relaxed);
    }

    /// Sends what a successful call staged, in order; the first refusal fails the attempt.
    pub fn send(&mut self, s: &Sending<'_>, staged: Staged) -> Result<(), AttemptFailure> {
        Self::count_denied(s.stats, &staged);
        if staged.writes.is_empty() {
            return Ok(());
        }
        let Some(writer) = s.writer else {
            return Err(AttemptFailure {
                reason: "writes staged, but this host's cluster takes none".into(),
                retry: false,
            });
        };
        if let Some(log) = s.dry_run {
            return self.send_dry_run(s, writer, log, staged);
        }
        let total = staged.writes.len();
        for (i, write) in staged.writes.iter().enumerate() {
            // Leadership or the object's slice lost between staging and sending: nothing
            // more goes out.
            lost(s, total - i, total)?;
            let event = matches!(write.action, Action::RecordEvent { .. });
            let target = target_id(&write.target);
            // A write the API server answers, to the object its event is about, counts
            // towards a loop.
            let own_object = !event && target == s.handling;
            if !event {
                let cached = (s.cached)(&write.target);
                if let Some(current) = &cached
                    && self.settled(&target, current)
                    && write::changes_nothing(&current_json(current), &write.action)
                {
                    s.stats.writes_skipped.fetch_add(1, Ordering::Relaxed);
                    s.stats.count_write(write, SKIPPED);
                    continue;
                }
                let looping = if own_object {
                    self.limits().loops.check(&target, Instant::now())
                } else {
                    Ok(())
                };
                if let Err(why) = looping {
                    let refusal = Refusal {
                        reason: "FeedbackLoop".into(),
                        message: why,
                        retry: false,
                    };
                    s.stats.writes_failed.fetch_add(1, Ordering::Relaxed);
                    s.stats.count_write(write, FAILED);
                    self.failures
                        .insert(s.handling.to_owned(), vec![failure(write, &refusal)]);
                    return Err(AttemptFailure {
                        reason: format!("write {} of {total} refused: {refusal}", i + 1),
                        retry: false,
                    });
                }
                self.note_in_flight(target, cached.as_deref());
            }
            self.wait_for_rate(s, event);
            if (s.stopped)() {
                continue;
            }
            let sent = match (s.confirmed)() {
                Some(within) => writer.send_within(s.plugin, write, within),
                None => writer.send(s.plugin, write),
            };
            match sent {
                Ok(()) => {
                    s.stats.writes_sent.fetch_add(1, Ordering::Relaxed);
                    s.stats.count_write(write, SENT);
                    if own_object {
                        self.limits().loops.answered(s.handling, Instant::now());
                    }
                }
                Err(refusal) => {
                    // Answered by the API server, or perhaps on its way there (a write
                    // given up on for its time may still land): it counts. Only the
                    // writer's `Unavailable`, a write that could not be sent (as through an
                    // outage), does not.
                    if own_object && refusal.reason != "Unavailable" {
                        self.limits().loops.answered(s.handling, Instant::now());
                    }
                    s.stats.writes_failed.fetch_add(1, Ordering::Relaxed);
                    s.stats.count_write(write, FAILED);
                    let reason = format!(
                        "write {} of {total} ({} {}) refused: {refusal}",
                        i + 1,
                        write.verb(),
                        write.target
                    );
                    self.failures
                        .insert(s.handling.to_owned(), vec![failure(write, &refusal)]);
                    return Err(AttemptFailure {
                        reason,
                        retry: refusal.retry,
                    });
                }
            }
        }
        Ok(())
    }

    /// Sends what a successful call staged as dry runs, in order, each reported to `log`:
    /// checked as [`Self::send`] checks (a write that would change nothing is skipped, and
    /// rates are waited for), but nothing lands, so no write is on its way and none can
    /// loop. Events are reported, not sent (their series would count what never was). The
    /// first refusal fails the attempt, as it would in earnest.
    fn send_dry_run(
        &mut self,
        s: &Sending<'_>,
        writer: &dyn Writer,
        log: &TrialLog,
        staged: Staged,
    ) -> Result<(), AttemptFailure> {
        let total = staged.writes.len();
        for (i, write) in staged.writes.iter().enumerate() {
            lost(s, total - i, total)?;
            let event = matches!(write.action, Action::RecordEvent { .. });
            let cached = (!event)
                .then(|| (s.cached)(&write.target))
                .flatten()
                .map(|o| current_json(&o));
            if let Some(current) = &cached
                && write::changes_nothing(current, &write.action)
            {
                s.stats.writes_skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let answer = if event {
                Err(Refusal {
                    reason: "NotSent".into(),
                    message: "Events are not sent in dry-run mode".into(),
                    retry: false,
                })
            } else {
                self.wait_for_rate(s, false);
                if (s.stopped)() {
                    continue;
                }
                let within = (s.confirmed)().unwrap_or(Duration::MAX);
                writer.dry_run(s.plugin, write, within)
            };
            log.write(
                write.verb(),
                write.target.to_string(),
                cached.as_ref(),
                &answer,
            );
            if let Err(refusal) = answer
                && !event
            {
                self.failures
                    .insert(s.handling.to_owned(), vec![failure(write, &refusal)]);
                return Err(AttemptFailure {
                    reason: format!(
                        "dry run of write {} of {total} ({} {}) refused: {refusal}",
                        i + 1,
                        write.verb(),
                        write.target
                    ),
                    retry: refusal.retry,
                });
            }
        }
        Ok(())
    }

    /// True when no write of this plugin to `target` is still on its way into the cache (the
    /// cache has moved past the version it held when the last one was sent).
    fn settled(&mut self, target: &str, current: &KubeObject) -> bool {
        match self.in_flight.get(target) {
            Some(version) if version == current.resource_version() => false,
            Some(_) => {
                self.in_flight.remove(target);
                true
            }
            None => true,
        }
    }

    /// Notes a write to `target` sent while the cache held `cached`.
    fn note_in_flight(&mut self, target: String, cached: Option<&KubeObject>) {
        if self.in_flight.len() >= MAX_IN_FLIGHT {
            self.in_flight.clear();
        }
        let version = cached.map_or(String::new(), |o| o.resource_version().to_owned());
        self.in_flight.insert(target, version);
    }

    /// Waits until the plugin's write (or Event) rate allows one more, or it is stopped.
    fn wait_for_rate(&self, s: &Sending<'_>, event: bool) {
        let now = Instant::now();
        let wait = {
            let mut limits = self.limits();
            if event {
                limits.events.take(now)
            } else {
                limits.writes.take(now)
            }
        };
        if wait.is_zero() {
            return;
        }
        let until = now + wait;
        while !(s.stopped)() && Instant::now() < until {
            std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
        }
        let waited = u64::try_from(now.elapsed().as_millis()).unwrap_or(u64::MAX);
        s.stats.write_wait_ms.fetch_add(waited, Ordering::Relaxed);
    }

    fn limits(&self) -> MutexGuard<'_, WriteLimits> {
        self.limits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The failure of an attempt whose worker stopped, or whose replica no longer delivers its
/// work, with `left` of its `total` writes not sent.
fn lost(s: &Sending<'_>, left: usize, total: usize) -> Result<(), AttemptFailure> {
    if (s.stopped)() || !(s.ours)() {
        return Err(AttemptFailure {
            reason: format!(
                "this replica no longer delivers {}: {left} of {total} staged writes not sent",
                s.key
            ),
            retry: true,
        });
    }
    Ok(())
}

/// An object's JSON as a tree, to compare a write against.
fn current_json(object: &KubeObject) -> serde_json::Value {
    serde_json::from_str(&object.json()).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use serde_json::json;

    use super::*;
    use crate::gvk::Gvk;
    use crate::object::Transform;
    use crate::plugins::throttle::{LOOP_LIMIT, Rate};
    use crate::write::{Target, Write};

    /// A writer double: records what it is sent, and refuses the writes it is told to.
    #[derive(Default)]
    struct Recorder {
        sent: Mutex<Vec<String>>,
        refuse: Mutex<Option<Refusal>>,
    }

    impl Writer for Recorder {
        fn send(&self, _plugin: &str, write: &Write) -> Result<(), Refusal> {
            if let Some(refusal) = self.refuse.lock().expect("lock").clone() {
                return Err(refusal);
            }
            let body = match &write.action {
                Action::MergePatch(b) => b.clone(),
                other => format!("{other:?}"),
            };
            self.sent
                .lock()
                .expect("lock")
                .push(format!("{} {body}", write.target.name));
            Ok(())
        }

        /// Answers a merge patch as a server would: the patch merged into the object's
        /// name, recorded as `dry-run NAME`.
        fn dry_run(
            &self,
            _plugin: &str,
            write: &Write,
            _within: Duration,
        ) -> Result<Option<serde_json::Value>, Refusal> {
            if let Some(refusal) = self.refuse.lock().expect("lock").clone() {
                return Err(refusal);
            }
            self.sent
                .lock()
                .expect("lock")
                .push(format!("dry-run {}", write.target.name));
            let mut answer = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": write.target.name, "namespace": "t", "resourceVersion": "9"}});
            if let Action::MergePatch(body) = &write.action {
                json_patch::merge(&mut answer, &serde_json::from_str(body).expect("JSON"));
            }
            Ok(Some(answer))
        }
    }

    fn target(name: &str) -> Target {
        Target {
            gvk: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("t".into()),
            name: name.into(),
            subresource: None,
        }
    }

    fn patch(name: &str, value: &str) -> Write {
        Write {
            target: target(name),
            action: Action::MergePatch(json!({"data": {"k": value}}).to_string()),
        }
    }

    fn cm(name: &str, value: &str, rv: &str) -> Arc<KubeObject> {
        let value = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "t", "resourceVersion": rv},
            "data": {"k": value}
        });
        Arc::new(KubeObject::from_value(value, &Transform::default()).expect("a config map"))
    }

    fn staged(writes: Vec<Write>) -> Staged {
        Staged { writes, denied: 0 }
    }

    /// An outbox with generous rates, and everything it is sent with but the cache.
    struct Rig {
        outbox: Outbox,
        writer: Recorder,
        stats: PluginStats,
        ours: AtomicBool,
        cache: Mutex<HashMap<String, Arc<KubeObject>>>,
        /// Set: the plugin runs in dry-run mode.
        trial: Option<TrialLog>,
    }

    impl Rig {
        fn new() -> Self {
            let rate = Rate {
                per_second: 1000,
                burst: 1000,
            };
            Self {
                outbox: Outbox::new(Arc::new(Mutex::new(WriteLimits::new(
                    (rate, rate),
                    Instant::now(),
                )))),
                writer: Recorder::default(),
                stats: PluginStats::default(),
                ours: AtomicBool::new(true),
                cache: Mutex::new(HashMap::new()),
                trial: None,
            }
        }

        fn cache(&self, object: Arc<KubeObject>) {
            self.cache
                .lock()
                .expect("lock")
                .insert(object.name().to_owned(), object);
        }

        /// Sends `writes` as the handling of `handling`'s event.
        fn send(&mut self, handling: &str, writes: Vec<Write>) -> Result<(), AttemptFailure> {
            let id = target_id(&target(handling));
            let Self {
                outbox,
                writer,
                stats,
                ours,
                cache,
                trial,
            } = self;
            let (cache, ours) = (&*cache, &*ours);
            let sending = Sending {
                plugin: "p",
                writer: Some(writer as &dyn Writer),
                stats,
                handling: &id,
                key: handling,
                ours: &|| ours.load(Ordering::Relaxed),
                stopped: &|| false,
                cached: &|t| cache.lock().expect("lock").get(&t.name).cloned(),
                confirmed: &|| None,
                dry_run: trial.as_ref(),
            };
            outbox.send(&sending, staged(writes))
        }

        fn sent(&self) -> Vec<String> {
            self.writer.sent.lock().expect("lock").clone()
        }
    }

    #[test]
    fn a_write_that_changes_nothing_is_skipped_unless_one_is_on_its_way() {
        let mut rig = Rig::new();
        rig.cache(cm("a", "old", "1"));
        // The cache holds "old": setting "old" changes nothing.
        assert!(rig.send("x", vec![patch("a", "old")]).is_ok());
        assert!(rig.sent().is_empty());
        assert_eq!(rig.stats.writes_skipped.load(Ordering::Relaxed), 1);
        // "new" goes out, and is on its way while the cache still holds version 1.
        assert!(rig.send("x", vec![patch("a", "new")]).is_ok());
        assert!(rig.outbox.on_its_way(&target_id(&target("a")), "1"));
        // Back to "old" before the cache saw "new": the cache cannot tell it changes
        // nothing, so it is sent.
        assert!(rig.send("x", vec![patch("a", "old")]).is_ok());
        assert_eq!(rig.sent().len(), 2, "{:?}", rig.sent());
        // Once the cache moved on (to "old" at version 3), the same write is skipped again.
        rig.cache(cm("a", "old", "3"));
        assert!(rig.send("x", vec![patch("a", "old")]).is_ok());
        assert_eq!(rig.sent().len(), 2);
        assert!(!rig.outbox.on_its_way(&target_id(&target("a")), "1"));
    }

    #[test]
    fn in_dry_run_writes_are_reported_with_their_changes_and_none_is_sent() {
        let mut rig = Rig::new();
        rig.trial = Some(TrialLog::default());
        rig.cache(cm("a", "old", "1"));
        // Writes that would change nothing are skipped, as in earnest.
        assert!(rig.send("a", vec![patch("a", "old")]).is_ok());
        // The object being handled, past the loop limit: nothing lands, so nothing loops,
        // and each is reported (none is on its way into the cache).
        for _ in 0..=LOOP_LIMIT {
            assert!(rig.send("a", vec![patch("a", "new")]).is_ok());
        }
        let sent = rig.sent();
        assert_eq!(sent.len(), LOOP_LIMIT + 1, "{sent:?}");
        assert!(sent.iter().all(|s| s == "dry-run a"), "{sent:?}");
        assert_eq!(rig.stats.writes_sent.load(Ordering::Relaxed), 0);
        let status = rig.trial.as_ref().expect("trial").status();
        let report = &status.last_writes[0];
        assert_eq!(report.outcome, "accepted");
        assert!(report.against_cache);
        assert_eq!(
            report.changes,
            vec![json!({"op": "replace", "path": "/data/k", "value": "new"})]
        );
        // An Event is reported, not sent; the call's other writes go on.
        let event = Write {
            target: target("a"),
            action: Action::RecordEvent {
                regarding: crate::write::Regarding {
                    gvk: Gvk::new("", "v1", "ConfigMap"),
                    namespace: Some("t".into()),
                    name: "a".into(),
                    uid: "u".into(),
                    resource_version: "1".into(),
                },
                warning: false,
                reason: "Seen".into(),
                note: "seen".into(),
            },
        };
        assert!(rig.send("a", vec![event, patch("b", "1")]).is_ok());
        let status = rig.trial.as_ref().expect("trial").status();
        assert_eq!(status.writes["record-event"]["NotSent"], 1);
        assert_eq!(rig.sent().last().map(String::as_str), Some("dry-run b"));
        // A refusal is reported and fails the attempt, as it would in earnest.
        *rig.writer.refuse.lock().expect("lock") = Some(Refusal {
            reason: "Invalid".into(),
            message: "data.k: bad".into(),
            retry: false,
        });
        let failed = rig.send("x", vec![patch("c", "1")]).expect_err("refused");
        assert!(
            failed.reason.starts_with("dry run of write 1 of 1"),
            "{}",
            failed.reason
        );
        let status = rig.trial.as_ref().expect("trial").status();
        assert_eq!(status.writes["merge-patch"]["Invalid"], 1);
        assert_eq!(
            status.writes["merge-patch"]["accepted"],
            LOOP_LIMIT as u64 + 2
        );
    }

    #[test]
    fn writes_to_the_object_being_handled_are_refused_past_the_loop_limit() {
        let mut rig = Rig::new();
        // No cache of the type: nothing is skipped.
        for i in 0..LOOP_LIMIT {
            let outcome = rig.send("a", vec![patch("a", &i.to_string())]);
            assert!(outcome.is_ok(), "write {i}");
        }
        // Writing another object while handling `a` does not count.
        assert!(rig.send("a", vec![patch("b", "1")]).is_ok());
        let refused = rig
            .send("a", vec![patch("a", "again")])
            .expect_err("refused as a loop");
        assert!(!refused.retry);
        assert!(
            refused.reason.contains("feedback loop"),
            "{}",
            refused.reason
        );
        assert_eq!(rig.sent().len(), LOOP_LIMIT + 1);
        // The plugin's next attempt at `a` sees why, once.
        let id = target_id(&target("a"));
        let seen = rig.outbox.take_failures(&id);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].reason, "FeedbackLoop");
        assert!(rig.outbox.take_failures(&id).is_empty());
    }

    #[test]
    fn the_first_refusal_stops_the_rest_and_is_kept_for_the_next_attempt() {
        let mut rig = Rig::new();
        assert!(rig.send("x", vec![patch("a", "1")]).is_ok());
        *rig.writer.refuse.lock().expect("lock") = Some(Refusal {
            reason: "Conflict".into(),
            message: "the object has been modified".into(),
            retry: true,
        });
        let failed = rig
            .send("x", vec![patch("b", "1"), patch("c", "1")])
            .expect_err("refused");
        assert!(failed.retry, "a conflict may pass next time");
        assert!(
            failed.reason.starts_with("write 1 of 2"),
            "{}",
            failed.reason
        );
        assert_eq!(rig.stats.writes_failed.load(Ordering::Relaxed), 1);
        let seen = rig.outbox.take_failures(&target_id(&target("x")));
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].target.name, "b");
    }

    #[test]
    fn nothing_more_goes_out_once_the_replica_no_longer_delivers_the_object() {
        let mut rig = Rig::new();
        rig.ours.store(false, Ordering::Relaxed);
        let failed = rig
            .send("x", vec![patch("a", "1"), patch("b", "1")])
            .expect_err("not ours");
        assert!(failed.retry);
        assert!(
            failed.reason.contains("2 of 2 staged writes not sent"),
            "{}",
            failed.reason
        );
        assert!(rig.sent().is_empty());
    }

    #[test]
    fn writes_wait_for_the_plugins_rate() {
        let rate = Rate {
            per_second: 20,
            burst: 1,
        };
        let mut rig = Rig::new();
        rig.outbox = Outbox::new(Arc::new(Mutex::new(WriteLimits::new(
            (rate, rate),
            Instant::now(),
        ))));
        let started = Instant::now();
        let writes = (0..3).map(|i| patch(&format!("o{i}"), "1")).collect();
        assert!(rig.send("x", writes).is_ok());
        // One from the burst, then two at 20 a second: at least 100 ms.
        assert!(
            started.elapsed() >= Duration::from_millis(95),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(rig.sent().len(), 3);
        assert!(rig.stats.write_wait_ms.load(Ordering::Relaxed) >= 90);
    }
}
