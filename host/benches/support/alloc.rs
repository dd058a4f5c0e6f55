//! A global allocator that counts live and peak heap bytes of the benchmark's process (the
//! API server double runs in a process of its own), over the agent's own allocator
//! (`kubewasm::Allocator`). Counted are requested bytes, without the allocator's own overhead.
//! Counting can be paused ([`paused`]) where only time is measured: its shared counters cost
//! every thread's allocations a contended atomic update.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use kubewasm::Allocator;

/// The counting allocator; install with `#[global_allocator]`.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static PAUSED: AtomicBool = AtomicBool::new(false);

fn counted() -> bool {
    !PAUSED.load(Ordering::Relaxed)
}

fn add(bytes: usize) {
    let bytes = isize::try_from(bytes).unwrap_or(isize::MAX);
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn sub(bytes: usize) {
    LIVE.fetch_sub(
        isize::try_from(bytes).unwrap_or(isize::MAX),
        Ordering::Relaxed,
    );
}

// The one place the project allows `unsafe`: a global allocator cannot be written without it.
// SAFETY: every call is forwarded to the agent's allocator unchanged; only counters change.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counted() {
            add(layout.size());
        }
        // SAFETY: same contract as ours.
        unsafe { Allocator.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counted() {
            sub(layout.size());
        }
        // SAFETY: same contract as ours.
        unsafe { Allocator.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counted() {
            sub(layout.size());
            add(new_size);
        }
        // SAFETY: same contract as ours.
        unsafe { Allocator.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` with counting paused in every thread. The live count may drift by what `f` frees
/// that was allocated before or keeps that it allocated: read differences taken after.
pub fn paused<T>(f: impl FnOnce() -> T) -> T {
    PAUSED.store(true, Ordering::Relaxed);
    let out = f();
    PAUSED.store(false, Ordering::Relaxed);
    out
}

/// Live counted bytes.
pub fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Highest live count since the last [`reset_peak`].
pub fn peak() -> isize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak from the current live count.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}
