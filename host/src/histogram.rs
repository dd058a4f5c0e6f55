//! A lock-free duration histogram with Prometheus' cumulative buckets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Upper bounds of the handler-duration buckets, in seconds.
pub const BUCKETS: [f64; 12] = [
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0,
];

/// A duration histogram that threads update without locks.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// Observations at or under each bound of [`BUCKETS`] (cumulative).
    pub cumulative: Vec<u64>,
    /// Observations.
    pub count: u64,
    /// Their sum, in nanoseconds.
    pub sum_nanos: u64,
}

impl HistogramSnapshot {
    /// Adds `other`'s observations to these.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        if self.cumulative.len() < other.cumulative.len() {
            self.cumulative.resize(other.cumulative.len(), 0);
        }
        for (mine, theirs) in self.cumulative.iter_mut().zip(&other.cumulative) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_nanos = self.sum_nanos.saturating_add(other.sum_nanos);
    }
}

/// Observations one thread holds until it adds them to a [`Histogram`].
#[derive(Debug, Default)]
pub struct Tally {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum_nanos: u64,
}

impl Tally {
    /// Records one duration.
    pub fn observe(&mut self, d: Duration) {
        let seconds = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos = self.sum_nanos.saturating_add(nanos);
    }
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let mut tally = Tally::default();
        tally.observe(d);
        self.add(&mut tally);
    }

    /// Adds what `tally` holds and empties it: a thread that observes often takes the shared
    /// counters once per batch instead of three times per observation.
    pub fn add(&self, tally: &mut Tally) {
        if tally.count == 0 {
            return;
        }
        for (shared, n) in self.buckets.iter().zip(&tally.buckets) {
            if *n > 0 {
                shared.fetch_add(*n, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(tally.count, Ordering::Relaxed);
        self.sum_nanos.fetch_add(tally.sum_nanos, Ordering::Relaxed);
        *tally = Tally::default();
    }

    /// The current values.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            count: self.count.load(Ordering::Relaxed),
            sum_nanos: self.sum_nanos.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_adds_what_single_observations_would() {
        let durations = [3, 30, 30, 700, 7_000_000].map(Duration::from_micros);
        let one_by_one = Histogram::default();
        let batched = Histogram::default();
        let mut tally = Tally::default();
        for d in durations {
            one_by_one.observe(d);
            tally.observe(d);
        }
        batched.add(&mut tally);
        assert_eq!(batched.snapshot(), one_by_one.snapshot());
        assert_eq!(batched.snapshot().count, 5);
        batched.add(&mut tally);
        assert_eq!(batched.snapshot().count, 5, "the tally was emptied");
    }

    #[test]
    fn histograms_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(3));
        h.observe(Duration::from_millis(2));
        h.observe(Duration::from_secs(9));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.cumulative[0], 1, "3 µs is under 10 µs");
        assert_eq!(s.cumulative[5], 2, "2 ms is under 5 ms");
        assert_eq!(
            s.cumulative[11], 2,
            "9 s is over every bound, counted in +Inf only"
        );
    }
}
