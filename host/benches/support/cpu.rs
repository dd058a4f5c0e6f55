//! CPU time of the client side of a run: this process's and the calling thread's, in
//! nanoseconds (a run of 20,000 events takes a quarter of a CPU-second, so `/proc`'s 10 ms
//! ticks would make its figure a multiple of 4%), and its threads' of one name; and a child
//! process's, from `/proc`.

#![allow(unsafe_code)] // The process's CPU clock: a libc call with no Rust equivalent.

use std::path::Path;
use std::time::Duration;

/// Clock ticks per second of `/proc`'s CPU times (Linux's `USER_HZ`).
const TICKS_PER_SECOND: u64 = 100;

/// The CPU time `clock` has counted.
fn read(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid place to write to.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// CPU time of this process, every thread that ever ran included.
pub fn this_process() -> Duration {
    read(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the calling thread.
pub fn this_thread() -> Duration {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of this process's threads whose name starts with `prefix` (as they are now: a
/// thread that ended is not counted).
pub fn threads_named(prefix: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with(prefix))
        })
        .filter_map(|task| task.file_name().to_str()?.parse::<libc::pid_t>().ok())
        // Linux's clock of one thread of this process (`MAKE_THREAD_CPUCLOCK(tid,
        // CPUCLOCK_SCHED)`): nanoseconds, where `/proc`'s figures are 10 ms ticks.
        .map(|tid| read((!tid << 3) | 6))
        .sum()
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

/// The ids of this process's threads named exactly `name` (the dispatch threads of plugins
/// of one name, one per agent).
pub fn threads_named_exactly(name: &str) -> Vec<u32> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

/// The id of this process's one thread named exactly `name`.
pub fn thread_named(name: &str) -> u32 {
    match threads_named_exactly(name)[..] {
        [tid] => tid,
        ref found => panic!("{} threads named {name}", found.len()),
    }
}

/// Nanoseconds thread `tid` of this process has run on a CPU (the kernel's schedstat).
pub fn on_cpu_ns(tid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .expect("the thread's schedstat");
    stat.split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .expect("nanoseconds on CPU")
}
