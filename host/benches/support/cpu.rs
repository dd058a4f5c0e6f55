//! CPU time from `/proc`, in clock ticks: this process's, less its API server double's threads
//! (the client's share), and a child process's.

use std::path::Path;

/// Name of the threads running the API server double (`Rig`'s runtime).
pub const DOUBLE_THREADS: &str = "double";

/// Clock ticks per second of `/proc`'s CPU times (Linux's `USER_HZ`).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// User plus system time, in ticks, from a `/proc/.../stat` file.
fn stat_ticks(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last `)`.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of proc(5), counted from the state (field 3) here.
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

/// CPU ticks of this process, every thread that ever ran included, less those of its
/// live threads named `DOUBLE_THREADS`.
pub fn client_ticks() -> u64 {
    let process = stat_ticks(Path::new("/proc/self/stat")).unwrap_or(0);
    let mut double = 0;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == DOUBLE_THREADS {
                double += stat_ticks(&task.path().join("stat")).unwrap_or(0);
            }
        }
    }
    process.saturating_sub(double)
}

/// CPU ticks of process `pid` (all its threads).
pub fn process_ticks(pid: u32) -> u64 {
    stat_ticks(&Path::new("/proc").join(pid.to_string()).join("stat")).unwrap_or(0)
}
