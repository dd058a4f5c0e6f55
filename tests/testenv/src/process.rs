//! Server processes that never outlive the test process.
//!
//! Each child is killed when its `Server` is dropped (normal exit and panics). As a safety net
//! for a test process that is killed outright, children are spawned from one long-lived thread
//! with `PR_SET_PDEATHSIG`: the kernel sends them SIGKILL when that thread (so the process) dies.
//! (The signal follows the spawning *thread*, which is why it is not the test's own thread.)

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};

type Request = (Command, Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<Request>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // Keep this thread alive for the whole process: children die with it.
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn the testenv spawner thread");
        Mutex::new(tx)
    })
}

/// A running server with its output in a log file.
pub struct Server {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Server {
    /// Starts `program` with `args`, stdout and stderr appended to `log`.
    pub fn start(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let out = File::options().create(true).append(true).open(log)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        set_parent_death_signal(&mut cmd);
        let (reply, answer) = channel();
        spawner()
            .lock()
            .map_err(|_| anyhow::anyhow!("spawner lock poisoned"))?
            .send((cmd, reply))?;
        let child = answer
            .recv()?
            .map_err(|e| anyhow::anyhow!("cannot start {name} ({}): {e}", program.display()))?;
        Ok(Self {
            name,
            child,
            log: log.to_owned(),
        })
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Stops the process where it is (SIGSTOP: its sockets stay open, nothing is answered),
    /// or lets it go on (SIGCONT).
    #[allow(unsafe_code)]
    pub fn pause(&self, paused: bool) -> std::io::Result<()> {
        let pid = libc::pid_t::try_from(self.child.id()).map_err(std::io::Error::other)?;
        let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill touches no memory; the pid is our own child's, not reaped while we
        // hold it.
        if unsafe { libc::kill(pid, signal) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Kills the process and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's name, for messages.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of a file (reading at most its last 64 KiB).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn set_parent_death_signal(_cmd: &mut Command) {}
