//! What a plugin's writes may cost the cluster: a rate for writes and one for Events (token
//! buckets, `rate.rs`, as client-go's per-client QPS and burst), and writes that keep feeding
//! their own events stopped. A plugin that writes the object it watches with a new value each time
//! (the most common controller bug) would otherwise write as fast as the API server answers:
//! 23,000 writes a second were seen, and every other client slowed down.
//!
//! The buckets make the plugin's own dispatch thread wait, so its queue backs up and folds,
//! and no other plugin waits. A write that changes the object its event is about, made more
//! than [`LOOP_LIMIT`] times within [`LOOP_WINDOW`], is refused as a feedback loop (the plugin
//! sees the refusal; the event is given up and says why) until the window has passed.
//!
//! All of it is kept by plugin name ([`WriteLimits`]), not by version: a plugin replaced
//! again and again starts each version where the last left off, not with a fresh burst and
//! a forgotten loop.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

pub use crate::rate::{Bucket, Rate};

/// Writes to one object from its own events within [`LOOP_WINDOW`] past which more are
/// refused.
pub const LOOP_LIMIT: usize = 20;
/// The window [`LOOP_LIMIT`] counts in.
pub const LOOP_WINDOW: Duration = Duration::from_secs(60);
/// Objects whose recent writes are remembered at once; past it the oldest are forgotten.
const MAX_LOOP_KEYS: usize = 4096;

/// What bounds one plugin's writes: its rates and its loops, shared by all its versions.
#[derive(Debug)]
pub struct WriteLimits {
    /// Its writes.
    pub writes: Bucket,
    /// Its Events.
    pub events: Bucket,
    /// Objects it changed while handling their own events, recently.
    pub loops: Loops,
}

impl WriteLimits {
    /// Full buckets for `(writes, events)`, as of `now`, and no loop yet.
    pub fn new((writes, events): (Rate, Rate), now: Instant) -> Self {
        Self {
            writes: Bucket::new(writes, now),
            events: Bucket::new(events, now),
            loops: Loops::default(),
        }
    }

    /// Its `(writes, events)` rates.
    pub fn rates(&self) -> (Rate, Rate) {
        (self.writes.rate(), self.events.rate())
    }
}

/// Recent writes to objects made while handling their own events.
#[derive(Debug, Default)]
pub struct Loops {
    recent: HashMap<String, VecDeque<Instant>>,
}

impl Loops {
    /// Notes a write at `now` to object `key`, made while handling its own event, that the
    /// API server answered (took or refused: either way it cost the server a write). One
    /// that never reached it, retried through an outage, is not counted: it is no loop.
    pub fn answered(&mut self, key: &str, now: Instant) {
        self.prune(key, now);
        self.recent
            .entry(key.to_owned())
            .or_default()
            .push_back(now);
    }

    /// Whether a write at `now` that would change object `key` while handling its own
    /// event may go out: an error when the API server answered [`LOOP_LIMIT`] of them within
    /// [`LOOP_WINDOW`].
    pub fn check(&mut self, key: &str, now: Instant) -> Result<(), String> {
        self.prune(key, now);
        if self.recent.get(key).is_some_and(|t| t.len() >= LOOP_LIMIT) {
            return Err(format!(
                "feedback loop: this plugin changed {key} {LOOP_LIMIT} times within {}s while handling its own events; its writes to it are refused until that window has passed",
                LOOP_WINDOW.as_secs()
            ));
        }
        Ok(())
    }

    /// Forgets what is older than the window for `key`, and bounds the keys remembered.
    fn prune(&mut self, key: &str, now: Instant) {
        if self.recent.len() >= MAX_LOOP_KEYS && !self.recent.contains_key(key) {
            self.recent.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.saturating_duration_since(*t) < LOOP_WINDOW)
            });
            if self.recent.len() >= MAX_LOOP_KEYS {
                self.recent.clear();
            }
        }
        if let Some(times) = self.recent.get_mut(key) {
            while times
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) >= LOOP_WINDOW)
            {
                times.pop_front();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_is_refused_past_its_limit_until_the_window_passes() {
        let t0 = Instant::now();
        let mut loops = Loops::default();
        let a = "v1/ConfigMap/t/a";
        // Writes that never reached the API server (an outage) count for nothing.
        for i in 0..3 * LOOP_LIMIT {
            assert!(loops.check(a, t0 + Duration::from_millis(i as u64)).is_ok());
        }
        for i in 0..LOOP_LIMIT {
            let at = t0 + Duration::from_millis(i as u64);
            assert!(loops.check(a, at).is_ok());
            loops.answered(a, at);
        }
        let refused = loops
            .check(a, t0 + Duration::from_secs(1))
            .expect_err("one too many");
        assert!(refused.contains("feedback loop"), "{refused}");
        assert!(loops.check("v1/ConfigMap/t/b", t0).is_ok(), "per object");
        assert!(
            loops
                .check(a, t0 + LOOP_WINDOW + Duration::from_secs(1))
                .is_ok(),
            "the window passed"
        );
    }
}
