//! Threads that run plugin work (dispatch, compiling a plugin's file) run below the host's
//! own priority.
//!
//! The informers (list, watch, store, fan-out) are the pipeline's one serial step; every
//! plugin's dispatch thread waits on what they produce. At equal priority ten busy plugin
//! threads take ten fair shares of the CPU against that one thread, so it waits for a core
//! while the plugins drain their queues and sleep: throughput falls and a core idles. A
//! plugin that spins to its deadline, or a file made to compile slowly, would also take the
//! informers' share. Run below the host, plugin work takes whatever CPU the host leaves (on
//! Linux the scheduler still gives a thread at nice 10 about a tenth of a contended core, so
//! none starves), and a burst becomes queue latency, which the bounded, coalescing queues
//! already absorb. Threads such a thread starts (wasmtime's compiler pool) inherit its
//! priority.

use std::io;
use std::thread::JoinHandle;

/// How far below the host's own priority (in nice steps) plugin work runs.
pub const BELOW_HOST: i32 = 10;

/// Starts thread `name` running `work` [`BELOW_HOST`] steps below the host's priority.
pub fn spawn_below_host<T: Send + 'static>(
    name: String,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    spawn_below(name, BELOW_HOST, work)
}

/// Starts thread `name` running `work` `steps` nice steps below the host's priority (a
/// candidate version's worker: one below the serving version's).
pub fn spawn_below<T: Send + 'static>(
    name: String,
    steps: i32,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name).spawn(move || {
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or_default();
        match lower_this_thread(steps) {
            Ok(nice) => tracing::debug!(thread, nice, "running below the host"),
            Err(e) => tracing::debug!(thread, "running at the host's priority: {e}"),
        }
        work()
    })
}

/// Lowers the calling thread's priority by `steps`; returns its new nice value.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn lower_this_thread(steps: i32) -> io::Result<i32> {
    // SAFETY: `__errno_location` points at this thread's errno, which is cleared so that a
    // new nice value of -1 can be told from a failure; `nice` changes only the calling thread
    // on Linux (NPTL keeps nice values per thread) and reads or writes no memory of ours.
    let now = unsafe {
        *libc::__errno_location() = 0;
        libc::nice(steps)
    };
    if now == -1 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(0) {
            return Err(e);
        }
    }
    Ok(now)
}

/// Elsewhere a thread's priority is the whole process's: left unchanged, said with an error.
#[cfg(not(target_os = "linux"))]
fn lower_this_thread(_steps: i32) -> io::Result<i32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "per-thread priority is only set on Linux",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// (command, nice) of thread `tid` of this process, read from `/proc`, not from the code
    /// under test.
    fn thread(tid: &str) -> (String, i32) {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
            .expect("read the thread's stat");
        let (head, tail) = stat.rsplit_once(')').expect("stat has a command");
        let command = head.split_once('(').expect("stat has a command").1;
        // After the command: state is field 3, nice field 19.
        let nice = tail
            .split_whitespace()
            .nth(16)
            .expect("stat has a nice field")
            .parse()
            .expect("nice is a number");
        (command.to_owned(), nice)
    }

    fn this_tid() -> String {
        std::fs::read_link("/proc/thread-self")
            .expect("thread-self")
            .file_name()
            .expect("a tid")
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn the_work_runs_below_the_host_and_nothing_else_does() {
        let process = std::process::id().to_string();
        let (_, host) = thread(&process);
        let (command, nice, started_nice) = spawn_below_host("below-test".into(), || {
            let (command, nice) = thread(&this_tid());
            // A thread it starts inherits its priority.
            let started = std::thread::spawn(|| thread(&this_tid()).1)
                .join()
                .expect("thread");
            (command, nice, started)
        })
        .expect("spawn")
        .join()
        .expect("thread");
        assert_eq!(command, "below-test");
        assert_eq!(nice, (host + BELOW_HOST).min(19));
        assert_eq!(started_nice, nice);
        assert_eq!(
            thread(&process).1,
            host,
            "the host's threads keep their priority"
        );
        assert_eq!(
            thread(&this_tid()).1,
            host,
            "nor does the thread that started it"
        );
    }
}
