//! A rate as a token bucket (client-go's QPS and burst): what a plugin's writes, Events and
//! HTTP requests may cost.

use std::time::{Duration, Instant};

/// A rate: tokens per second (0: no limit) and a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: u32,
    /// Most tokens held at once (and the start).
    pub burst: u32,
}

/// A token bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    rate: Rate,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket for `rate`, as of `now`.
    pub fn new(rate: Rate, now: Instant) -> Self {
        Self {
            rate,
            tokens: f64::from(rate.burst),
            at: now,
        }
    }

    /// Its rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Takes one token at `now` if one is there; false (nothing taken) otherwise. A rate of
    /// zero always has one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if self.rate.per_second == 0 {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes one token at `now`: how long to wait before the taken token is due (zero when
    /// one was there). A rate of zero never waits.
    pub fn take(&mut self, now: Instant) -> Duration {
        if self.rate.per_second == 0 {
            return Duration::ZERO;
        }
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / f64::from(self.rate.per_second))
        }
    }

    /// Whether a cost may be spent at `now`: the bucket is not in debt (a rate of zero never
    /// is).
    pub fn ready(&mut self, now: Instant) -> bool {
        if self.rate.per_second == 0 {
            return true;
        }
        self.refill(now);
        self.tokens >= 0.0
    }

    /// Spends `n` tokens at `now`, going into debt past what it holds (a cost known only
    /// once paid, such as the bytes of a write): it is [`Self::ready`] again once refilled.
    pub fn spend(&mut self, n: u64, now: Instant) {
        if self.rate.per_second == 0 {
            return;
        }
        self.refill(now);
        self.tokens -= n as f64;
    }

    /// Adds the tokens due since the last look, up to the burst.
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        let burst = f64::from(self.rate.burst.max(1));
        self.tokens = (self.tokens + elapsed * f64::from(self.rate.per_second)).min(burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_spent_past_the_tokens_is_owed_before_the_next() {
        let t0 = Instant::now();
        let mut b = Bucket::new(
            Rate {
                per_second: 1000,
                burst: 1000,
            },
            t0,
        );
        assert!(b.ready(t0));
        b.spend(3000, t0);
        assert!(!b.ready(t0), "2000 owed");
        assert!(!b.ready(t0 + Duration::from_millis(1900)));
        assert!(
            b.ready(t0 + Duration::from_millis(2000)),
            "paid off in two seconds"
        );
        let mut free = Bucket::new(
            Rate {
                per_second: 0,
                burst: 0,
            },
            t0,
        );
        free.spend(u64::MAX, t0);
        assert!(free.ready(t0), "a zero rate is no limit");
    }

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(
            Rate {
                per_second: 5,
                burst: 10,
            },
            t0,
        );
        for _ in 0..10 {
            assert_eq!(b.take(t0), Duration::ZERO, "the burst");
        }
        assert_eq!(
            b.take(t0),
            Duration::from_millis(200),
            "then one each 200 ms"
        );
        assert_eq!(b.take(t0), Duration::from_millis(400));
        // A second later five more tokens came, two of them already owed.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(b.take(later), Duration::ZERO);
        assert_eq!(b.take(later), Duration::ZERO);
        assert_eq!(b.take(later), Duration::ZERO);
        assert_eq!(b.take(later), Duration::from_millis(200));
        // Idle time refills at most the burst.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..10 {
            assert_eq!(b.take(much_later), Duration::ZERO);
        }
        assert!(b.take(much_later) > Duration::ZERO);
        let mut free = Bucket::new(
            Rate {
                per_second: 0,
                burst: 0,
            },
            t0,
        );
        assert_eq!(free.take(t0), Duration::ZERO, "a zero rate is no limit");
        let mut refusing = Bucket::new(
            Rate {
                per_second: 1,
                burst: 2,
            },
            t0,
        );
        assert!(refusing.try_take(t0) && refusing.try_take(t0));
        assert!(!refusing.try_take(t0), "empty: refused, nothing owed");
        assert!(
            refusing.try_take(t0 + Duration::from_secs(1)),
            "one more a second later"
        );
    }
}
