//! How long the host spends in the calls a plugin makes into it (its queries, its log, WASI),
//! waits the plugin asked for (a sleep, bounded by the call deadline) left out: the figure
//! that shows no plugin argument can make host code run long.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::CallHook;

/// The time of the host call in progress and the slowest one so far, for one instance.
#[derive(Debug, Default)]
pub struct HostCalls {
    entered: Option<Instant>,
    /// The longest wait (nanoseconds) inside the current host call; waits run in parallel
    /// within one `poll`, so the longest is what the call spent waiting.
    waited: Arc<AtomicU64>,
    slowest: Duration,
}

impl HostCalls {
    /// Where a wait records how long it lasted.
    pub fn waits(&self) -> Waits {
        Waits(self.waited.clone())
    }

    /// Called by wasmtime on every crossing between guest and host.
    pub fn hook(&mut self, hook: CallHook) {
        match hook {
            CallHook::CallingHost => {
                self.waited.store(0, Ordering::Relaxed);
                self.entered = Some(Instant::now());
            }
            CallHook::ReturningFromHost => {
                if let Some(entered) = self.entered.take() {
                    let waited = Duration::from_nanos(self.waited.load(Ordering::Relaxed));
                    self.slowest = self.slowest.max(entered.elapsed().saturating_sub(waited));
                }
            }
            CallHook::CallingWasm | CallHook::ReturningFromWasm => {}
        }
    }

    /// The slowest host call of this instance so far.
    pub fn slowest(&self) -> Duration {
        self.slowest
    }
}

/// The handle a wait uses to report its length to the instance's [`HostCalls`].
#[derive(Debug, Clone)]
pub struct Waits(Arc<AtomicU64>);

impl Waits {
    /// Starts timing a wait; its length is recorded when the guard drops (finished or
    /// cancelled because another pollable was ready first).
    pub fn start(&self) -> WaitGuard {
        WaitGuard {
            since: Instant::now(),
            waited: self.0.clone(),
        }
    }
}

/// A wait in progress (see [`Waits::start`]).
pub struct WaitGuard {
    since: Instant,
    waited: Arc<AtomicU64>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.waited.fetch_max(nanos, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_left_out_and_the_slowest_call_is_kept() {
        let mut calls = HostCalls::default();
        calls.hook(CallHook::CallingHost);
        std::thread::sleep(Duration::from_millis(30));
        calls.hook(CallHook::ReturningFromHost);
        let worked = calls.slowest();
        assert!(worked >= Duration::from_millis(30), "{worked:?}");

        calls.hook(CallHook::CallingHost);
        {
            let _wait = calls.waits().start();
            std::thread::sleep(Duration::from_millis(80));
        }
        calls.hook(CallHook::ReturningFromHost);
        assert_eq!(calls.slowest(), worked, "an 80 ms wait is not host work");

        // A wait in an earlier call does not hide the work of a later one.
        calls.hook(CallHook::CallingHost);
        std::thread::sleep(Duration::from_millis(60));
        calls.hook(CallHook::ReturningFromHost);
        assert!(
            calls.slowest() >= Duration::from_millis(60),
            "{:?}",
            calls.slowest()
        );
    }
}
