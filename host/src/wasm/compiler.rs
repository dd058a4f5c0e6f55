//! Where plugin components are compiled. A component can be made to cost far more to compile
//! than its size says (one function of a million additions: minutes and gigabytes), and a
//! compiler thread cannot be stopped. So the agent compiles in a child process of its own
//! binary (`kubewasm compile-worker`): its data memory is capped (`RLIMIT_DATA`,
//! `compileMemoryMiB`), it runs below the host's priority, it is killed at
//! `compileTimeoutSeconds` and when the host shuts down, and it dies with the thread that
//! started it (`PR_SET_PDEATHSIG`). What it hands back is machine code, mapped in as the
//! compiled-code cache's is. Trusted callers (benchmarks, unit tests) compile in-process.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::LoadError;

/// The hidden subcommand a compiling child runs.
pub const WORKER_COMMAND: &str = "compile-worker";

/// The default cap on a compiling child's data memory: the Python and JavaScript examples
/// compile within 768 MiB (peak 390 and 460 MB resident).
pub const DEFAULT_COMPILE_MEMORY_BYTES: u64 = 1 << 30;

/// Longest part of a child's error output kept in a load error.
const MAX_CHILD_ERROR_BYTES: u64 = 4096;

/// Where components are compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compiler {
    /// On a thread of this process: only for components the caller trusts.
    InProcess,
    /// In a child process running `exe compile-worker`, its data memory capped at
    /// `memory_bytes`.
    Child {
        /// The kubewasm binary.
        exe: PathBuf,
        /// Cap on the child's data memory.
        memory_bytes: u64,
    },
}

impl Compiler {
    /// Children of the running kubewasm binary, capped at `memory_bytes`.
    pub fn child_of_this_binary(memory_bytes: u64) -> std::io::Result<Self> {
        Ok(Self::Child {
            exe: std::env::current_exe()?,
            memory_bytes,
        })
    }
}

/// The compiling children now running, by process id, so shutdown can stop them.
#[derive(Default)]
pub struct Children(Mutex<Vec<u32>>);

impl Children {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kills every compiling child: their loads fail at once.
    pub fn kill_all(&self) {
        for pid in self.lock().drain(..) {
            kill(pid);
        }
    }
}

#[allow(unsafe_code)]
fn kill(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: sends a signal to a process id this host started and has not yet reaped (it
    // is removed from `Children` before the reaping `wait`), so the id names that child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Compiles `bytes` in a child process of `exe` within `timeout`; the machine code.
pub fn in_child(
    exe: &std::path::Path,
    memory_bytes: u64,
    bytes: &[u8],
    timeout: Duration,
    children: &Children,
) -> Result<Vec<u8>, LoadError> {
    let failed = |why: String| LoadError::NotAComponent(why);
    let mut child = Command::new(exe)
        .arg(WORKER_COMMAND)
        .arg(memory_bytes.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot start compiling ({}): {e}", exe.display())))?;
    children.lock().push(child.id());
    let (mut stdin, mut stdout, stderr) = (
        child.stdin.take().expect("piped"),
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    // The pipes are fed and drained beside the wait: a full pipe must not stall either side.
    std::thread::scope(|scope| {
        scope.spawn(move || {
            // A child that dies early closes its end: the wait below says why.
            let _ = stdin.write_all(bytes);
        });
        scope.spawn(move || {
            let mut code = Vec::new();
            let read = stdout.read_to_end(&mut code).map(|_| code);
            let mut error = String::new();
            let _ = stderr
                .take(MAX_CHILD_ERROR_BYTES)
                .read_to_string(&mut error);
            let _ = tx.send((read, error));
        });
        let outcome = rx.recv_timeout(timeout);
        let id = child.id();
        children.lock().retain(|&pid| pid != id);
        if outcome.is_err() {
            let _ = child.kill();
        }
        let status = child.wait();
        match outcome {
            Err(_) => Err(LoadError::TooComplex(format!(
                "compiling took longer than {timeout:?} (compileTimeoutSeconds): stopped"
            ))),
            Ok((read, error)) => {
                let status = status.map_err(|e| failed(format!("compiling: {e}")))?;
                if status.success() {
                    return read.map_err(|e| failed(format!("reading compiled code: {e}")));
                }
                Err(child_failure(status, &error, memory_bytes))
            }
        }
    })
}

/// Why a compiling child failed.
fn child_failure(status: std::process::ExitStatus, error: &str, memory_bytes: u64) -> LoadError {
    use std::os::unix::process::ExitStatusExt;
    let error = crate::text::cut(error.trim().to_owned(), MAX_CHILD_ERROR_BYTES as usize);
    if error.contains("memory allocation") || status.signal() == Some(libc::SIGABRT) {
        return LoadError::TooComplex(format!(
            "compiling needed more than {} MiB (compileMemoryMiB): stopped",
            memory_bytes >> 20
        ));
    }
    match status.code() {
        Some(2) if error.starts_with("too complex:") => {
            LoadError::TooComplex(error.trim_start_matches("too complex:").trim().to_owned())
        }
        Some(_) => LoadError::NotAComponent(error),
        None => LoadError::NotAComponent(format!(
            "compiling was stopped ({status}); the host is shutting down or the process was killed"
        )),
    }
}

/// The child's side (`kubewasm compile-worker MEMORY_BYTES`): reads a component on stdin,
/// writes its machine code on stdout; errors on stderr with exit code 2.
pub fn worker_main(memory_bytes: &str) -> ExitCode {
    let fail = |why: String| {
        eprintln!("{why}");
        ExitCode::from(2)
    };
    let Ok(memory_bytes) = memory_bytes.parse::<u64>() else {
        return fail(format!(
            "{WORKER_COMMAND}: {memory_bytes:?} is not a number of bytes"
        ));
    };
    if let Err(e) = confine(memory_bytes) {
        return fail(format!(
            "{WORKER_COMMAND}: cannot confine the compiler: {e}"
        ));
    }
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        return fail(format!("{WORKER_COMMAND}: reading the component: {e}"));
    }
    if let Some(refused) = super::shape::refusal(super::shape::shape(&bytes)) {
        return fail(format!("too complex: {refused}"));
    }
    let engine = match wasmtime::Engine::new(&super::engine_config()) {
        Ok(engine) => engine,
        Err(e) => return fail(format!("{e:#}")),
    };
    match engine.precompile_component(&bytes) {
        Ok(code) => match std::io::stdout().lock().write_all(&code) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(format!("{WORKER_COMMAND}: writing compiled code: {e}")),
        },
        Err(e) => fail(format!("{e:#}")),
    }
}

/// Caps this process's data memory, runs it below the host, and ends it with its parent.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn confine(memory_bytes: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: memory_bytes,
        rlim_max: memory_bytes,
    };
    // SAFETY: plain system calls on this process with valid arguments; no memory of ours is
    // read or written but the `rlimit` passed by reference.
    unsafe {
        if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Already orphaned (the parent died before the line above): go.
        if libc::getppid() == 1 {
            return Err(std::io::Error::other("the host is gone"));
        }
        libc::nice(crate::priority::BELOW_HOST);
    }
    Ok(())
}

/// Elsewhere the child runs unconfined, said with an error.
#[cfg(not(target_os = "linux"))]
fn confine(_memory_bytes: u64) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "compiling children are confined only on Linux",
    ))
}
