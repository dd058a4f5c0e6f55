//! A `kubewasm run` child process for tests and benchmarks that need the real binary: its
//! output lines as they come, SIGTERM with the time it took to exit, and its resident memory
//! and open files read from `/proc`; and the events the audit-log plugin logged, read back
//! from its JSON log lines.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A running `kubewasm run`, its log (standard error) read line by line.
pub struct AgentProcess {
    child: Child,
    lines: Receiver<(Instant, String)>,
}

impl AgentProcess {
    /// Starts `program` (the `kubewasm` binary) with `args`, logging at info without colour.
    pub fn start(program: &Path, args: &[&std::ffi::OsStr]) -> anyhow::Result<Self> {
        let mut child = Command::new(program)
            .arg("run")
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let log = child.stderr.take().context("its stderr")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(log).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Ok(Self { child, lines })
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The lines printed since the last call, each with the moment it was read.
    pub fn take_lines(&self) -> Vec<(Instant, String)> {
        self.lines.try_iter().collect()
    }

    /// Waits up to `timeout` for the next line.
    pub fn next_line(&self, timeout: Duration) -> Option<(Instant, String)> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Sends SIGTERM and waits at most `bound` for the exit: whether it exited with success
    /// and how long it took. Past `bound` it is killed and this is an error.
    pub fn terminate(&mut self, bound: Duration) -> anyhow::Result<(bool, Duration)> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .context("running kill")?;
        if !sent.success() {
            bail!("kill -TERM {} failed: {sent}", self.child.id());
        }
        let sent = Instant::now();
        loop {
            if let Some(exit) = self.child.try_wait()? {
                return Ok((exit.success(), sent.elapsed()));
            }
            if sent.elapsed() > bound {
                let _ = self.child.kill();
                bail!("still running {bound:?} after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl AgentProcess {
    /// Kills it with SIGKILL (no shutdown step runs) and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().context("SIGKILL")?;
        self.child.wait().context("reaping it")?;
        Ok(())
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A folder for `kubewasm run` ([`run_args`]): `plugins` holding each `(name, file)` as
/// `name.wasm`, and `config.yaml` holding `config`.
pub fn run_dir(plugins: &[(&str, &Path)], config: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("plugins"))?;
    for (name, file) in plugins {
        std::fs::copy(file, dir.path().join(format!("plugins/{name}.wasm")))?;
    }
    std::fs::write(dir.path().join("config.yaml"), config)?;
    Ok(dir)
}

/// The arguments of a `kubewasm run` working in `dir` (its `plugins` folder, `config.yaml`
/// and `cache`), reaching the API server through `kubeconfig`, serving its endpoints on
/// `address` and logging JSON.
pub fn run_args(dir: &Path, kubeconfig: &Path, address: SocketAddr) -> Vec<OsString> {
    let path = |p: &str| OsString::from(dir.join(p));
    vec![
        "--kubeconfig".into(),
        kubeconfig.into(),
        "--plugins".into(),
        path("plugins"),
        "--config".into(),
        path("config.yaml"),
        "--cache-dir".into(),
        path("cache"),
        "--metrics-address".into(),
        address.to_string().into(),
        "--log-format".into(),
        "json".into(),
    ]
}

/// One event the audit-log plugin handled, from its log line.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// When the line was logged, during the plugin's call.
    pub at: jiff::Timestamp,
    /// Whether it was an initial add (the replay of a list).
    pub initial: bool,
    /// The object's `namespace/name`.
    pub key: String,
    /// The object's resourceVersion.
    pub rv: u64,
    /// With `count` on, how many events of the object the plugin logged, this one included
    /// (kept in its state).
    pub n: Option<u64>,
}

impl Delivered {
    /// The event in `record`, one JSON log line of `kubewasm run`, if the audit-log plugin
    /// loaded as `plugin` logged it.
    pub fn from_log(record: &serde_json::Value, plugin: &str) -> Option<Self> {
        let fields = &record["fields"];
        if record["target"] != "plugin" || fields["plugin"] != plugin {
            return None;
        }
        let at = record["timestamp"].as_str()?.parse().ok()?;
        let pairs: BTreeMap<&str, &str> = fields["message"]
            .as_str()?
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .collect();
        Some(Self {
            at,
            initial: pairs.get("flag") == Some(&"initial"),
            key: (*pairs.get("key")?).to_owned(),
            rv: pairs.get("rv")?.parse().ok()?,
            n: pairs.get("n").and_then(|n| n.parse().ok()),
        })
    }
}

/// Resident memory of process `pid` from `/proc/PID/status`: now (`VmRSS`) and at its peak
/// (`VmHWM`), in bytes; `None` once it is gone.
pub fn resident(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Files (sockets included) process `pid` holds open now.
pub fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `GET path` from an HTTP/1.0 server at `address`: the status code and body (0 and the
/// error when it does not answer).
pub fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    let answer = (|| -> std::io::Result<String> {
        let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response)
    })();
    match answer {
        Ok(response) => {
            let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
            let code = head
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            (code, body.to_owned())
        }
        Err(e) => (0, e.to_string()),
    }
}

/// A loopback address with a port free a moment ago.
pub fn free_address() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}
