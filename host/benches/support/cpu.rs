//! CPU time of the client side of a run: this process's, less its API server double's threads,
//! in nanoseconds (a run of 20,000 events takes a quarter of a CPU-second, so `/proc`'s
//! 10 ms ticks would make its figure a multiple of 4%); and a child process's, from `/proc`.

#![allow(unsafe_code)] // Clocks of other threads: two libc calls with no Rust equivalent.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// Clock ticks per second of `/proc`'s CPU times (Linux's `USER_HZ`).
const TICKS_PER_SECOND: u64 = 100;

/// The CPU clocks of the double's threads, registered by each as it starts.
static DOUBLE_CLOCKS: Mutex<Vec<libc::clockid_t>> = Mutex::new(Vec::new());

/// Registers the calling thread as one of the double's: its CPU time is not the client's.
pub fn double_thread() {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `pthread_self` is the calling thread; `clock` is a valid place to write to.
    let found = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    assert_eq!(found, 0, "pthread_getcpuclockid failed");
    DOUBLE_CLOCKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(clock);
}

/// The CPU time `clock` has counted.
fn read(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid place to write to; a stale clock id only makes this fail.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// CPU time of this process, every thread that ever ran included, less that of the double's
/// threads. The double's threads live as long as its runtime, which outlives every run.
pub fn client() -> Duration {
    let process = read(libc::CLOCK_PROCESS_CPUTIME_ID);
    let double: Duration = DOUBLE_CLOCKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .map(|c| read(*c))
        .sum();
    process.saturating_sub(double)
}

/// CPU time of process `pid` (all its threads), in `/proc`'s ticks of 10 ms.
pub fn process(pid: u32) -> Duration {
    let ticks = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        .ok()
        .and_then(|text| {
            // The command name may hold spaces and parentheses: fields start after the last `)`.
            let rest = &text[text.rfind(')')? + 1..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // Fields 14 and 15 of proc(5), counted from the state (field 3) here.
            let user: u64 = fields.get(11)?.parse().ok()?;
            let system: u64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}
