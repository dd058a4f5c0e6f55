//! The CPU priority of plugin dispatch threads: below the host's own threads.
//!
//! The informers (list, watch, store, fan-out) are the pipeline's one serial step; every
//! plugin's dispatch thread waits on what they produce. At equal priority ten busy plugin
//! threads take ten fair shares of the CPU against that one thread, so it waits for a core
//! while the plugins drain their queues and sleep: throughput falls and a core idles. A
//! plugin that spins to its deadline would also take the informers' share. Run below the
//! host, plugins take whatever CPU the host leaves (on Linux the scheduler still gives a
//! thread at nice 10 about a tenth of a contended core, so none starves), and a burst becomes
//! queue latency, which the bounded, coalescing queues already absorb.

/// How far below the host's own priority (in nice steps) plugin threads run.
pub const BELOW_HOST: i32 = 10;

/// Lowers the calling thread's priority by [`BELOW_HOST`]; returns its new nice value.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn lower_this_thread() -> std::io::Result<i32> {
    // SAFETY: `__errno_location` points at this thread's errno, which is cleared so that a
    // new nice value of -1 can be told from a failure; `nice` changes only the calling thread
    // on Linux (NPTL keeps nice values per thread) and reads or writes no memory of ours.
    let now = unsafe {
        *libc::__errno_location() = 0;
        libc::nice(BELOW_HOST)
    };
    if now == -1 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(0) {
            return Err(e);
        }
    }
    Ok(now)
}

/// Elsewhere a thread's priority is the whole process's: left unchanged, said with an error.
#[cfg(not(target_os = "linux"))]
pub fn lower_this_thread() -> std::io::Result<i32> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "per-thread priority is only set on Linux",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A thread of this process's nice value, read from `/proc`, not from the call under test.
    fn nice_of(tid: &str) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
            .expect("read the thread's stat");
        // Fields after the command (which may hold spaces) start at the state, field 3;
        // nice is field 19.
        let after = &stat[stat.rfind(')').expect("stat has a command") + 2..];
        after
            .split(' ')
            .nth(16)
            .expect("stat has a nice field")
            .parse()
            .expect("nice is a number")
    }

    #[test]
    fn only_the_calling_thread_is_lowered() {
        let process = std::process::id().to_string();
        let main_before = nice_of(&process);
        let (lowered, seen) = std::thread::spawn(|| {
            let lowered = lower_this_thread().expect("lowering needs no privilege");
            let tid = std::fs::read_link("/proc/thread-self")
                .expect("thread-self")
                .file_name()
                .expect("a tid")
                .to_string_lossy()
                .into_owned();
            (lowered, nice_of(&tid))
        })
        .join()
        .expect("thread");
        assert_eq!(lowered, seen, "the returned value is the thread's nice");
        assert_eq!(seen, (main_before + BELOW_HOST).min(19));
        assert_eq!(
            nice_of(&process),
            main_before,
            "the process's other threads keep their priority"
        );
    }
}
