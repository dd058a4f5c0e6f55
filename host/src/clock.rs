//! The wall clock the host and its plugins read: the system's, unless `kubewasm test` set it
//! (a test file's `now:`), after which it runs on from the time set. Timers and deadlines use
//! the monotonic clock and are not moved by it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds added to the system's wall clock (0: the system's own time).
static OFFSET_NANOS: AtomicI64 = AtomicI64::new(0);

/// The system's wall clock, in nanoseconds since the Unix epoch.
fn system_nanos() -> i128 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX),
    }
}

/// Nanoseconds since the Unix epoch on the clock the host and plugins read.
fn nanos() -> i128 {
    system_nanos() + i128::from(OFFSET_NANOS.load(Ordering::Relaxed))
}

/// Now, on the clock the host and plugins read.
pub fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_nanosecond(nanos()).unwrap_or_else(|_| jiff::Timestamp::now())
}

/// Since the Unix epoch on that clock (what WASI's wall clock answers); zero before it.
pub fn since_epoch() -> Duration {
    let nanos = u128::try_from(nanos()).unwrap_or(0);
    Duration::new(
        u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX),
        u32::try_from(nanos % 1_000_000_000).unwrap_or(0),
    )
}

/// Sets the clock to `at` for the whole process; it runs on from there. For tests.
pub fn set(at: jiff::Timestamp) {
    let offset = at.as_nanosecond() - system_nanos();
    let offset = i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX });
    OFFSET_NANOS.store(offset, Ordering::Relaxed);
}

/// Back to the system's own wall clock.
pub fn reset() {
    OFFSET_NANOS.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_clock_reads_the_time_set_and_runs_on() {
        let at: jiff::Timestamp = "2031-05-06T07:08:09Z".parse().expect("a time");
        set(at);
        let read = now();
        let since = read.duration_since(at);
        assert!(
            since >= jiff::SignedDuration::ZERO && since < jiff::SignedDuration::from_secs(60),
            "{read}"
        );
        assert_eq!(
            since_epoch().as_secs() / 60,
            at.as_second().cast_unsigned() / 60
        );
        reset();
        let drift = now().duration_since(jiff::Timestamp::now()).abs();
        assert!(drift < jiff::SignedDuration::from_secs(1), "{drift:?}");
    }
}
