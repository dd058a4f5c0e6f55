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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The slowest timed host call of one instance; clones share it.
#[derive(Debug, Default, Clone)]
pub struct HostCalls(Arc<AtomicU64>);

impl HostCalls {
    /// Starts timing a host call; it is recorded when the guard drops.
    pub fn start(&self) -> Timed {
        Timed {
            since: Instant::now(),
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
    slowest: Arc<AtomicU64>,
}

impl Drop for Timed {
    fn drop(&mut self) {
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.slowest.fetch_max(nanos, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slowest_call_is_kept_and_shared_by_clones() {
        let calls = HostCalls::default();
        {
            let _call = calls.start();
            std::thread::sleep(Duration::from_millis(30));
        }
        let worked = calls.slowest();
        assert!(worked >= Duration::from_millis(30), "{worked:?}");
        drop(calls.start());
        assert_eq!(calls.slowest(), worked, "a quicker call keeps the slowest");
        let clone = calls.clone();
        {
            let _call = clone.start();
            std::thread::sleep(Duration::from_millis(60));
        }
        assert!(
            calls.slowest() >= Duration::from_millis(60),
            "{:?}",
            calls.slowest()
        );
    }
}
