//! How long the host spends in the calls a plugin makes into it (its queries, the object reads
//! that walk JSON, its log, its stdout and stderr): the figure that shows no plugin argument can
//! make host code run long.
//!
//! Calls are timed by the host functions that do work in proportion to their arguments, not by
//! a wasmtime call hook: the hook ran on every crossing between guest and host and cost more
//! than a whole no-op delivery (docs/BENCHMARKS.md). Calls left out do constant work (an
//! object's name, uid, a handle's drop; `get` and `owner`, one lookup by a key of at most
//! 4 KiB, where two clock reads cost about 70 ns) or are WASI functions that cannot
//! block (random bytes are capped; waits end at the call deadline, `clocks.rs`).
//!
//! What is recorded is the CPU time a call used, not the time its thread waited for a core:
//! plugin threads run below the host, so on a busy machine a call of microseconds can take
//! hundreds of milliseconds by the wall clock. A call under [`CPU_CHECK_AFTER`] by the wall
//! clock is recorded as it is (it cannot have used more); a longer one reads the thread's CPU
//! clock (a system call) and is charged what the thread used since the start reading, which
//! it shares with the thread's other calls in the same epoch tick (`deadline::recent_cpu`):
//! the figure can be up to one tick of the thread's CPU above the call's own, never below.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::deadline;

/// Calls shorter than this by the wall clock are recorded by the wall clock.
const CPU_CHECK_AFTER: Duration = Duration::from_millis(1);

/// The slowest timed host call of one instance; clones share it.
#[derive(Debug, Default, Clone)]
pub struct HostCalls(Arc<AtomicU64>);

impl HostCalls {
    /// Starts timing a host call; it is recorded when the guard drops.
    pub fn start(&self) -> Timed {
        Timed {
            since: Instant::now(),
            cpu: deadline::recent_cpu(),
            slowest: self.0.clone(),
        }
    }

    /// The slowest timed host call so far.
    pub fn slowest(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// A host call being timed (see [`HostCalls::start`]).
pub struct Timed {
    since: Instant,
    /// The thread's CPU clock at the start, to within one epoch tick.
    cpu: Option<Duration>,
    slowest: Arc<AtomicU64>,
}

/// What a call that took `wall` is charged: `wall` when short, else the CPU its thread used
/// since `cpu_before` (read now) when that is less.
fn charged(
    wall: Duration,
    cpu_before: Option<Duration>,
    cpu_now: impl Fn() -> Option<Duration>,
) -> Duration {
    if wall < CPU_CHECK_AFTER {
        return wall;
    }
    match (cpu_before, cpu_now()) {
        (Some(before), Some(now)) => now.saturating_sub(before).min(wall),
        _ => wall,
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        let took = charged(self.since.elapsed(), self.cpu, deadline::cpu_now);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.slowest.fetch_max(nanos, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins for `d` of this thread's CPU time.
    fn spin(d: Duration) {
        let start = deadline::cpu_now().expect("a thread CPU clock");
        while deadline::cpu_now().expect("a thread CPU clock") - start < d {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn the_slowest_call_is_kept_and_shared_by_clones() {
        let calls = HostCalls::default();
        {
            let _call = calls.start();
            spin(Duration::from_millis(30));
        }
        let worked = calls.slowest();
        assert!(worked >= Duration::from_millis(30), "{worked:?}");
        drop(calls.start());
        assert_eq!(calls.slowest(), worked, "a quicker call keeps the slowest");
        let clone = calls.clone();
        {
            let _call = clone.start();
            spin(Duration::from_millis(60));
        }
        assert!(
            calls.slowest() >= Duration::from_millis(60),
            "{:?}",
            calls.slowest()
        );
    }

    #[test]
    fn a_long_call_is_charged_its_cpu_and_a_short_one_its_wall_time() {
        let ms = Duration::from_millis;
        let cpu = |t: u64| move || Some(ms(t));
        // Waited 200 ms for a core, used 2: charged 2.
        assert_eq!(charged(ms(200), Some(ms(10)), cpu(12)), ms(2));
        // Used all of it: charged the wall time, never more.
        assert_eq!(charged(ms(200), Some(ms(10)), cpu(400)), ms(200));
        // Short calls read no CPU clock.
        let unread = || -> Option<Duration> { panic!("read the CPU clock") };
        assert_eq!(
            charged(Duration::from_micros(300), Some(ms(1)), unread),
            Duration::from_micros(300)
        );
        // No CPU clock: the wall time.
        assert_eq!(charged(ms(200), None, cpu(12)), ms(200));
    }

    #[test]
    fn sleeping_in_a_call_is_not_charged() {
        let calls = HostCalls::default();
        {
            let _call = calls.start();
            std::thread::sleep(Duration::from_millis(100));
        }
        // At most one epoch tick of this thread's earlier CPU, besides the call's own.
        assert!(
            calls.slowest() < Duration::from_millis(50),
            "{:?}",
            calls.slowest()
        );
    }
}
