//! A work queue of keys with client-go's semantics: a key waiting is queued once however
//! often it is added; a key being processed is never handed out again until it is done, and
//! one added meanwhile is queued once more then; failures wait out a per-key backoff under
//! an overall rate; a key can be added after a delay.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::object::Key;
use crate::rate::{Bucket, Rate};

/// client-go's per-item backoff: 5 ms doubling to 1,000 s.
pub const BASE_DELAY: Duration = Duration::from_millis(5);
/// The longest per-key backoff.
pub const MAX_DELAY: Duration = Duration::from_secs(1000);
/// client-go's overall rate for retries: 10 a second, bursts of 100.
pub const RETRY_RATE: Rate = Rate {
    per_second: 10,
    burst: 100,
};

/// Stale timer entries kept beyond twice the live ones before the heap is rebuilt.
const STALE_TIMERS: usize = 64;

/// The keys of one controller: waiting, being processed, and timed.
pub struct WorkQueue {
    /// Keys ready to hand out, oldest first; each is also in `dirty`.
    ready: VecDeque<Key>,
    /// Keys added and not yet handed out (ready, or being processed and added again).
    dirty: HashSet<Key>,
    /// Keys handed out and not yet done.
    processing: HashSet<Key>,
    /// Keys to add at a time, earliest first; `due` holds each key's earliest time, and an
    /// entry of the heap that is not it is stale.
    timers: BinaryHeap<Reverse<(Instant, Key)>>,
    due: HashMap<Key, Instant>,
    /// The timed keys whose time a plugin's `requeue-after` set: work it asked for later, not
    /// work pending (see [`Self::pending`]). Each is in `due`.
    later: HashSet<Key>,
    /// Failures in a row per key, for its backoff.
    failures: HashMap<Key, u32>,
    retries: Bucket,
}

impl WorkQueue {
    /// An empty queue whose retries start at `now`'s full bucket.
    pub fn new(now: Instant) -> Self {
        Self {
            ready: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
            timers: BinaryHeap::new(),
            due: HashMap::new(),
            later: HashSet::new(),
            failures: HashMap::new(),
            retries: Bucket::new(RETRY_RATE, now),
        }
    }

    /// Queues `key` unless it already waits; a key being processed is queued when it is done.
    pub fn add(&mut self, key: Key) {
        if !self.dirty.insert(key.clone()) {
            return;
        }
        if !self.processing.contains(&key) {
            self.ready.push_back(key);
        }
    }

    /// Adds `key` once `delay` has passed from `now`; an earlier time already set stands.
    pub fn add_after(&mut self, key: Key, delay: Duration, now: Instant) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = now + delay;
        match self.due.get(&key) {
            // Work the earlier time now stands for too, whoever set it.
            Some(earlier) if *earlier <= at => {
                self.later.remove(&key);
            }
            _ => {
                self.later.remove(&key);
                self.due.insert(key.clone(), at);
                self.timers.push(Reverse((at, key)));
                // A key moved earlier leaves its later entry behind until that comes due: a
                // plugin moving its keys earlier again and again would grow the heap without
                // bound. Past twice the live timers, it is rebuilt from them.
                if self.timers.len() > 2 * self.due.len() + STALE_TIMERS {
                    self.timers = self
                        .due
                        .iter()
                        .map(|(key, at)| Reverse((*at, key.clone())))
                        .collect();
                }
            }
        }
    }

    /// Adds `key` once `delay` has passed from `now` at the plugin's asking (`requeue-after`):
    /// as [`Self::add_after`], but not counted as work [`Self::pending`] until it is due.
    pub fn add_later(&mut self, key: Key, delay: Duration, now: Instant) {
        // Later it stays if nothing but requeues timed it: a requeue of a key already
        // requeued (each reconcile of a polling plugin asks again) is no work either.
        let later = self.later.contains(&key) || !self.due.contains_key(&key);
        self.add_after(key.clone(), delay, now);
        if later && self.due.contains_key(&key) {
            self.later.insert(key);
        }
    }

    /// Whether a key is ready or timed by an event or a failure: work the controller has,
    /// unlike keys only requeued for later (a plugin polling every minute is idle meanwhile).
    pub fn pending(&self) -> bool {
        !self.ready.is_empty() || self.due.len() > self.later.len()
    }

    /// Adds `key` once `delay` has passed from `now`, unless it already waits: events within
    /// `delay` of the first fold into one reconcile (a zero delay adds it at once).
    pub fn add_debounced(&mut self, key: Key, delay: Duration, now: Instant) {
        if !self.dirty.contains(&key) {
            self.add_after(key, delay, now);
        }
    }

    /// Adds `key` after its backoff: one more failure in a row, and the overall rate.
    pub fn add_rate_limited(&mut self, key: Key, now: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        *failures = failures.saturating_add(1);
        let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(31));
        let delay = BASE_DELAY
            .saturating_mul(factor)
            .min(MAX_DELAY)
            .max(self.retries.take(now));
        self.add_after(key, delay, now);
        delay
    }

    /// Ends `key`'s run of failures (it succeeded, or was given up).
    pub fn forget(&mut self, key: &Key) {
        self.failures.remove(key);
    }

    /// The keys failing now (waiting out their backoff, or being tried again).
    pub fn failing(&self) -> impl Iterator<Item = &Key> + '_ {
        self.failures.keys()
    }

    /// Failures in a row of `key`.
    pub fn failures(&self, key: &Key) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Moves the keys whose time has come by `now` to the ready ones.
    fn release_due(&mut self, now: Instant) {
        while let Some(Reverse((at, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((at, key))) = self.timers.pop() else {
                break;
            };
            if self.due.get(&key) == Some(&at) {
                self.due.remove(&key);
                self.later.remove(&key);
                self.add(key);
            }
        }
    }

    /// The next key to process, if one is ready by `now`: it is processing until [`Self::done`].
    pub fn get(&mut self, now: Instant) -> Option<Key> {
        self.release_due(now);
        let key = self.ready.pop_front()?;
        self.dirty.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }

    /// `key` is processed: queued again if it was added meanwhile.
    pub fn done(&mut self, key: &Key) {
        self.processing.remove(key);
        if self.dirty.contains(key) {
            self.ready.push_back(key.clone());
        }
    }

    /// When the next timed key is due, if any. Stale timers at the top (a key's earlier time
    /// replaced it, or it was dropped) are let go first: the worker asks before every wait,
    /// so this must not walk every timer.
    pub fn next_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, key))) = self.timers.peek() {
            if self.due.get(key) == Some(at) {
                return Some(*at);
            }
            self.timers.pop();
        }
        None
    }

    /// Keys ready now.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Keys waiting: ready, added while processing, or timed.
    pub fn waiting(&self) -> usize {
        let timed_only = self.due.keys().filter(|k| !self.dirty.contains(*k)).count();
        self.dirty.len() + timed_only
    }

    /// Drops every key that `keep` refuses (another replica reconciles them now).
    pub fn retain(&mut self, keep: impl Fn(&Key) -> bool) {
        self.ready.retain(&keep);
        self.dirty.retain(&keep);
        self.due.retain(|k, _| keep(k));
        self.later.retain(|k| keep(k));
        self.failures.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key::new(format!("ns/{name}"))
    }

    #[test]
    fn a_key_requeued_for_later_is_not_pending_work_until_an_event_times_it() {
        let start = Instant::now();
        let mut q = WorkQueue::new(start);
        assert!(!q.pending());
        q.add_later(key("a"), Duration::from_secs(60), start);
        assert!(!q.pending(), "asked for later: idle meanwhile");
        q.add_later(
            key("a"),
            Duration::from_secs(60),
            start + Duration::from_secs(1),
        );
        q.add_later(
            key("a"),
            Duration::from_secs(30),
            start + Duration::from_secs(2),
        );
        assert!(!q.pending(), "asked again, later or sooner: still idle");
        assert_eq!(q.waiting(), 1);
        // An event's debounce or a failure's backoff that comes due later: now it is work.
        q.add_debounced(key("a"), Duration::from_secs(90), start);
        assert!(q.pending());
        // Due, handed out, done: nothing left.
        let a = q.get(start + Duration::from_secs(60)).expect("due");
        q.done(&a);
        assert!(!q.pending());
        // An earlier event time replaces a later requeue: work.
        q.add_later(key("b"), Duration::from_secs(60), start);
        q.add_after(key("b"), Duration::from_secs(1), start);
        assert!(q.pending());
        q.retain(|_| false);
        assert!(!q.pending());
    }

    #[test]
    fn debounced_events_of_a_key_fold_until_its_delay_has_passed() {
        let start = Instant::now();
        let delay = Duration::from_millis(100);
        let mut q = WorkQueue::new(start);
        for ms in 0..50 {
            q.add_debounced(key("a"), delay, start + Duration::from_millis(ms));
        }
        assert_eq!(q.waiting(), 1);
        assert_eq!(q.get(start + Duration::from_millis(99)), None, "not yet");
        assert_eq!(q.next_due(), Some(start + delay), "the first event's time");
        let a = q.get(start + delay).expect("due");
        // An event while it is processed is timed anew, and not handed out meanwhile.
        q.add_debounced(key("a"), delay, start + delay);
        q.done(&a);
        assert_eq!(q.get(start + delay + Duration::from_millis(50)), None);
        assert!(
            q.get(start + delay * 2).is_some(),
            "once more after its delay"
        );
        // A key already ready is not timed again.
        q.add(key("b"));
        q.add_debounced(key("b"), delay, start);
        assert_eq!(q.next_due(), None);
        assert_eq!(q.get(start), Some(key("b")));
        // No delay: at once.
        q.add_debounced(key("c"), Duration::ZERO, start);
        assert_eq!(q.get(start), Some(key("c")));
    }

    #[test]
    fn a_key_added_many_times_is_handed_out_once() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        for _ in 0..1000 {
            q.add(key("a"));
        }
        q.add(key("b"));
        assert_eq!(q.get(now), Some(key("a")));
        assert_eq!(q.get(now), Some(key("b")));
        assert_eq!(q.get(now), None);
    }

    #[test]
    fn a_key_added_while_processing_waits_for_done_then_comes_once() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        q.add(key("a"));
        let a = q.get(now).expect("ready");
        for _ in 0..1000 {
            q.add(key("a"));
        }
        assert_eq!(q.get(now), None, "never handed out twice at once");
        assert_eq!(q.waiting(), 1);
        q.done(&a);
        assert_eq!(q.get(now), Some(key("a")), "once more after done");
        q.done(&key("a"));
        assert_eq!(q.get(now), None);
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn failures_back_off_per_key_doubling_and_forget_resets() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        let delays: Vec<Duration> = (0..4).map(|_| q.add_rate_limited(key("a"), now)).collect();
        assert_eq!(delays, [5, 10, 20, 40].map(Duration::from_millis));
        assert_eq!(q.get(now), None, "not before its time");
        assert_eq!(q.next_due(), Some(now + Duration::from_millis(5)));
        assert_eq!(q.get(now + Duration::from_millis(5)), Some(key("a")));
        q.done(&key("a"));
        assert_eq!(q.failures(&key("a")), 4);
        q.forget(&key("a"));
        assert_eq!(q.add_rate_limited(key("a"), now), Duration::from_millis(5));
    }

    #[test]
    fn the_backoff_stops_at_its_cap() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        let mut last = Duration::ZERO;
        for _ in 0..40 {
            last = q.add_rate_limited(key("a"), now);
        }
        assert_eq!(last, MAX_DELAY);
    }

    #[test]
    fn retries_of_many_keys_share_the_overall_rate() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        let delays: Vec<Duration> = (0..150)
            .map(|i| q.add_rate_limited(key(&format!("k{i}")), now))
            .collect();
        assert!(delays[..100].iter().all(|d| *d == BASE_DELAY), "the burst");
        assert!(
            delays[149] >= Duration::from_secs(4),
            "past the burst, 10 a second: {:?}",
            delays[149]
        );
    }

    #[test]
    fn an_earlier_timer_wins_and_a_direct_add_does_not_wait_for_it() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        q.add_after(key("a"), Duration::from_secs(10), now);
        q.add_after(key("a"), Duration::from_secs(1), now);
        q.add_after(key("a"), Duration::from_secs(5), now);
        assert_eq!(q.next_due(), Some(now + Duration::from_secs(1)));
        assert_eq!(q.get(now + Duration::from_secs(1)), Some(key("a")));
        q.done(&key("a"));
        assert_eq!(
            q.get(now + Duration::from_secs(20)),
            None,
            "stale timers add nothing"
        );
        q.add_after(key("b"), Duration::from_secs(10), now);
        q.add(key("b"));
        assert_eq!(q.get(now), Some(key("b")));
    }

    #[test]
    fn timers_moved_earlier_again_and_again_keep_the_heap_bounded() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        for i in 0..10_000u64 {
            q.add_after(key("a"), Duration::from_secs(100_000 - i), now);
            q.add_after(
                key(&format!("k{}", i % 10)),
                Duration::from_secs(100_000 - i),
                now,
            );
        }
        assert!(
            q.timers.len() <= 2 * 11 + STALE_TIMERS + 1,
            "{}",
            q.timers.len()
        );
        // Nothing was lost: each key comes due once, at its earliest time.
        let latest = now + Duration::from_secs(100_000);
        let mut got = Vec::new();
        while let Some(k) = q.get(latest) {
            q.done(&k);
            got.push(k);
        }
        assert_eq!(got.len(), 11, "{got:?}");
        assert_eq!(got[0], key("a"), "a's earliest time is the earliest of all");
    }

    #[test]
    fn keys_another_replica_takes_are_dropped() {
        let now = Instant::now();
        let mut q = WorkQueue::new(now);
        q.add(key("a"));
        q.add(Key::from("other/b"));
        q.add_after(Key::from("other/c"), Duration::from_secs(1), now);
        q.retain(|k| crate::object::split_key(k).0 == Some("ns"));
        assert_eq!(q.waiting(), 1);
        assert_eq!(q.get(now + Duration::from_secs(2)), Some(key("a")));
        assert_eq!(q.get(now + Duration::from_secs(2)), None);
    }
}
