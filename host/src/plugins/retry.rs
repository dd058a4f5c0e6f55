//! Per-key retries: a failed event waits out its backoff while events for other keys flow, and
//! later events for the same key queue behind it, so they never overtake it or run beside it.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Exponential backoff between attempts of one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// Largest delay.
    pub cap: Duration,
}

impl Default for Backoff {
    /// client-go's workqueue starts at 5 ms, which clears transient failures quickly. Its cap of
    /// 1000 s would hold every later event of that object for a quarter of an hour; events of a
    /// cache-driven handler go stale long before that, so the cap here is 60 s.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(5),
            cap: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// The wait after `failures` consecutive failures (1 or more).
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.saturating_sub(1));
        self.base.saturating_mul(factor).min(self.cap)
    }
}

/// An event's failed attempts so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failures {
    /// How many.
    pub count: u32,
    /// When the first one ended.
    pub since: Instant,
}

struct Blocked<T> {
    events: VecDeque<T>,
    failures: Failures,
    due: Instant,
}

/// Keys whose head event failed, with the events waiting behind it.
pub struct RetryQueue<T> {
    blocked: HashMap<String, Blocked<T>>,
}

impl<T> Default for RetryQueue<T> {
    fn default() -> Self {
        Self {
            blocked: HashMap::new(),
        }
    }
}

impl<T> RetryQueue<T> {
    /// Queues `event` behind a blocked key; returns it back if the key is not blocked.
    pub fn enqueue(&mut self, key: &str, event: T) -> Option<T> {
        match self.blocked.get_mut(key) {
            Some(b) => {
                b.events.push_back(event);
                None
            }
            None => Some(event),
        }
    }

    /// Blocks `key` until `due`, with `events` (head first) after `failures` failures.
    pub fn block(&mut self, key: String, events: VecDeque<T>, failures: Failures, due: Instant) {
        self.blocked.insert(
            key,
            Blocked {
                events,
                failures,
                due,
            },
        );
    }

    /// True when no key waits for a retry.
    pub fn is_empty(&self) -> bool {
        self.blocked.is_empty()
    }

    /// The earliest retry time.
    pub fn next_due(&self) -> Option<Instant> {
        self.blocked.values().map(|b| b.due).min()
    }

    /// Unblocks the key due earliest if it is due by `now`: its events and failure count.
    pub fn take_due(&mut self, now: Instant) -> Option<(String, VecDeque<T>, Failures)> {
        let key = self
            .blocked
            .iter()
            .filter(|(_, b)| b.due <= now)
            .min_by_key(|(_, b)| b.due)
            .map(|(k, _)| k.clone())?;
        let b = self.blocked.remove(&key)?;
        Some((key, b.events, b.failures))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_base_to_cap() {
        let b = Backoff::default();
        assert_eq!(b.delay(1), Duration::from_millis(5));
        assert_eq!(b.delay(2), Duration::from_millis(10));
        assert_eq!(b.delay(5), Duration::from_millis(80));
        assert_eq!(b.delay(30), Duration::from_secs(60));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn blocked_keys_hold_their_later_events_in_order() {
        let mut q = RetryQueue::default();
        let t0 = Instant::now();
        assert_eq!(q.enqueue("a", 1), Some(1), "a is not blocked");
        let failed = |count| Failures { count, since: t0 };
        q.block(
            "a".into(),
            VecDeque::from([1]),
            failed(1),
            t0 + Duration::from_millis(10),
        );
        q.block(
            "b".into(),
            VecDeque::from([7]),
            failed(2),
            t0 + Duration::from_millis(5),
        );
        assert_eq!(q.enqueue("a", 2), None);
        assert_eq!(q.enqueue("a", 3), None);
        assert_eq!(q.enqueue("c", 9), Some(9), "c is not blocked");
        assert_eq!(q.next_due(), Some(t0 + Duration::from_millis(5)));

        assert!(q.take_due(t0).is_none(), "nothing due yet");
        let (key, events, failures) = q.take_due(t0 + Duration::from_millis(20)).expect("due");
        assert_eq!((key.as_str(), failures.count), ("b", 2), "earliest first");
        assert_eq!(events, [7]);
        let (key, events, _) = q.take_due(t0 + Duration::from_millis(20)).expect("due");
        assert_eq!(key, "a");
        assert_eq!(
            events,
            [1, 2, 3],
            "head first, later events behind it in order"
        );
        assert_eq!(q.next_due(), None, "nothing waits");
    }
}
