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

/// Recent writes to objects made while handling their own events.
#[derive(Debug, Default)]
pub struct Loops {
    recent: HashMap<String, VecDeque<Instant>>,
}

impl Loops {
    /// Notes a write at `now` that changes object `key` while handling its own event; an
    /// error when it is one too many within [`LOOP_WINDOW`] (then it is not counted).
    pub fn note(&mut self, key: &str, now: Instant) -> Result<(), String> {
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
        let times = self.recent.entry(key.to_owned()).or_default();
        while times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= LOOP_WINDOW)
        {
            times.pop_front();
        }
        if times.len() >= LOOP_LIMIT {
            return Err(format!(
                "feedback loop: this plugin changed {key} {LOOP_LIMIT} times within {}s while handling its own events; its writes to it are refused until that window has passed",
                LOOP_WINDOW.as_secs()
            ));
        }
        times.push_back(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_is_refused_past_its_limit_until_the_window_passes() {
        let t0 = Instant::now();
        let mut loops = Loops::default();
        for i in 0..LOOP_LIMIT {
            let at = t0 + Duration::from_millis(i as u64);
            assert!(loops.note("v1/ConfigMap/t/a", at).is_ok());
        }
        let refused = loops
            .note("v1/ConfigMap/t/a", t0 + Duration::from_secs(1))
            .expect_err("one too many");
        assert!(refused.contains("feedback loop"), "{refused}");
        assert!(loops.note("v1/ConfigMap/t/b", t0).is_ok(), "per object");
        assert!(
            loops
                .note(
                    "v1/ConfigMap/t/a",
                    t0 + LOOP_WINDOW + Duration::from_secs(1)
                )
                .is_ok(),
            "the window passed"
        );
    }
}
