//! The API server double in a process of its own: the benchmark re-runs its own executable
//! with [`CHILD`] set, and that process serves pods and takes commands on stdin, one per line,
//! each answered with one line on stdout. The client under test then has its process, its
//! CPU clock and its heap to itself.
//!
//! Commands (answers in brackets):
//! - `load OBJECTS SIZE FIRST_RV`: the current pods, no events; pod `i` at version
//!   `FIRST_RV + i` [`ok JSON_BYTES`, the pods' JSON size together];
//! - `queue PODS SIZE UPDATES FIRST_RV`: hold new events on open watches and queue a recorded
//!   stream (every pod added, updated `UPDATES` times, deleted) [`ok EVENTS`];
//! - `release`: let the held events flow [`ok`];
//! - `relist OBJECTS SIZE FIRST_RV`: with watches cut, replace every pod and compact history,
//!   so a watcher's resume gets 410 Gone and it relists [`ok`].
//!
//! The child prints its URL first and exits at the end of its input.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use kubewasm_testenv::double::{ApiDouble, Served};
use kubewasm_testenv::generate;
use serde_json::Value;

/// Environment variable that makes the benchmark's executable the double.
pub const CHILD: &str = "KUBEWASM_BENCH_DOUBLE";

/// A double running in a child process; killed when dropped.
pub struct DoubleProcess {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    url: String,
}

impl DoubleProcess {
    /// Starts the double in a child process and waits until it serves.
    pub fn start() -> Self {
        let exe = std::env::current_exe().expect("the benchmark's executable");
        let mut child = Command::new(exe)
            .env(CHILD, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the double's process");
        let input = child.stdin.take().expect("stdin");
        let mut output = BufReader::new(child.stdout.take().expect("stdout"));
        let url = read_line(&mut output);
        assert!(url.starts_with("http://"), "the double said {url:?}");
        Self {
            child,
            input,
            output,
            url,
        }
    }

    /// The double's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client for the double.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("the double's URL"));
        kubewasm::source::kube::client::client(config).expect("client")
    }

    /// Sends `command` and returns what follows `ok` in the answer.
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.input, "{command}").expect("the double's stdin");
        self.input.flush().expect("the double's stdin");
        let answer = read_line(&mut self.output);
        match answer.strip_prefix("ok") {
            Some(rest) => rest.trim().to_owned(),
            None => panic!("the double answered {command:?} with {answer:?}"),
        }
    }

    /// Sets `objects` pods of about `size` bytes (no events); returns their JSON bytes.
    pub fn load(&mut self, objects: usize, size: usize, first_rv: u64) -> usize {
        let bytes = self.ask(&format!("load {objects} {size} {first_rv}"));
        bytes.parse().expect("a byte count")
    }

    /// Holds new events and queues a recorded stream of `pods` pods whose updates change an
    /// annotation, or only the status when `status`; returns its events.
    pub fn queue(
        &mut self,
        pods: usize,
        size: usize,
        updates: usize,
        status: bool,
        first_rv: u64,
    ) -> u64 {
        let what = if status { " status" } else { "" };
        let events = self.ask(&format!("queue {pods} {size} {updates} {first_rv}{what}"));
        events.parse().expect("an event count")
    }

    /// Lets the queued events flow.
    pub fn release(&mut self) {
        self.ask("release");
    }

    /// Replaces every pod while watches are cut and compacts history: watchers relist.
    pub fn relist(&mut self, objects: usize, size: usize, first_rv: u64) {
        self.ask(&format!("relist {objects} {size} {first_rv}"));
    }
}

impl Drop for DoubleProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line a child process wrote, trimmed.
pub fn read_line(out: &mut impl BufRead) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("a child process's output");
    line.trim().to_owned()
}

/// `objects` pods of about `size` bytes, pod `i` at version `first_rv + i`.
fn pods(objects: usize, size: usize, first_rv: u64) -> Vec<Value> {
    (0..objects)
        .map(|i| generate::pod(i, size, first_rv + i as u64))
        .collect()
}

/// Parses the `N` numbers after a command's name.
fn numbers<const N: usize>(words: &[&str]) -> Result<[u64; N], String> {
    if words.len() != N {
        return Err(format!("expected {N} numbers, got {}", words.len()));
    }
    let mut out = [0; N];
    for (slot, word) in out.iter_mut().zip(words) {
        *slot = word
            .parse()
            .map_err(|_| format!("not a number: {word:?}"))?;
    }
    Ok(out)
}

/// Runs one command on `double`; the answer's text after `ok`.
fn run(double: &ApiDouble, line: &str) -> Result<String, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (name, args) = words.split_first().ok_or("empty command")?;
    match *name {
        "load" => {
            let [objects, size, first_rv] = numbers(args)?;
            let pods = pods(objects as usize, size as usize, first_rv);
            let bytes: usize = pods.iter().map(|p| p.to_string().len()).sum();
            double.load(pods);
            Ok(bytes.to_string())
        }
        "queue" => {
            let (update, args) = match args.split_last() {
                Some((&"status", rest)) => (generate::Update::Status, rest),
                _ => (generate::Update::Annotation, args),
            };
            let [pods, size, updates, first_rv] = numbers(args)?;
            let stream = generate::pod_stream(
                pods as usize,
                size as usize,
                updates as usize,
                update,
                first_rv,
            );
            double.set_held(true);
            double.replay(stream.iter().map(|e| (e.kind, &e.object)));
            Ok(stream.len().to_string())
        }
        "release" => {
            double.set_held(false);
            Ok(String::new())
        }
        "relist" => {
            let [objects, size, first_rv] = numbers(args)?;
            let changed = pods(objects as usize, size as usize, first_rv);
            double.while_disconnected(|d| {
                d.load(changed);
                d.compact();
            });
            Ok(String::new())
        }
        other => Err(format!("unknown command {other:?}")),
    }
}

/// The child's whole life: serve pods, print the URL, run commands until stdin ends.
pub fn serve() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("double")
        .enable_all()
        .build()
        .expect("the double's runtime");
    let double = runtime
        .block_on(ApiDouble::serving(Served::pods()))
        .expect("the double");
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", double.url()).expect("stdout");
    out.flush().expect("stdout");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match run(&double, &line) {
            Ok(rest) => format!("ok {rest}"),
            Err(e) => format!("error {e}"),
        };
        writeln!(out, "{}", answer.trim_end()).expect("stdout");
        out.flush().expect("stdout");
    }
}
