//! Every hostile behaviour issue 53 names, at once, beside a good plugin, on a real
//! kube-apiserver: the `kubewasm` binary runs as an agent twice, once with the good plugin
//! (pod-phase) alone and once beside the hostile plugins, while pods are created at a steady
//! pace and the time from each create to pod-phase's line for it is taken. Shared by the test
//! `hostile_all` (its bounds) and the benchmark `hostile` (its numbers).

#![allow(dead_code)] // The test and the benchmark each read part of what a run gives.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use kubewasm_testenv::agent_process::{AgentProcess, free_address, http_get, open_files, resident};
use kubewasm_testenv::{Audited, TestEnv, resources};
use serde_json::json;

/// The shutdown timeout both runs are configured with.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);
/// Each plugin's memory cap (the default).
pub const MEMORY_CAP: u64 = 64 << 20;
/// Writes a plugin may make: a second and at once (the defaults).
pub const WRITE_RATE: (f64, f64) = (10.0, 20.0);
/// Events a plugin may record: a second and at once (the defaults).
pub const EVENT_RATE: (f64, f64) = (5.0, 25.0);

/// How big a run is.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Pods created for the good plugin while measuring.
    pub pods: usize,
    /// Pods created a second.
    pub per_second: u32,
    /// Times the plugin stuck in a wait is replaced by a new version during the run.
    pub swaps: usize,
    /// Mutable globals in the module the globals bomb instantiates 60 times.
    pub globals: usize,
    /// Seconds the hostile plugins run before pods are created.
    pub settle: Duration,
}

/// What one run of the agent showed.
#[derive(Debug)]
pub struct Run {
    /// From each create sent to pod-phase's line for that pod, in pod order.
    pub latencies: Vec<Duration>,
    /// From the start of the process to its "plugins ready" line.
    pub ready_after: Duration,
    /// The process's peak resident memory.
    pub peak_rss: u64,
    /// The most files it held open at once (sampled every 100 ms).
    pub max_open_files: usize,
    /// Whether it exited with success after SIGTERM, and how long that took.
    pub exited_ok: bool,
    /// From SIGTERM to exit.
    pub sigterm: Duration,
    /// From the start of the process to its exit.
    pub window: Duration,
    /// Plugin files in its folder at the start.
    pub plugin_files: usize,
    /// Its `/status` just before SIGTERM.
    pub status: serde_json::Value,
    /// Its output lines (the first 20,000).
    pub lines: Vec<String>,
}

/// The writes the hostile plugins' grants allow, as the API server's audit log counts them.
#[derive(Debug, Default)]
pub struct Writes {
    /// The storm's applies of `storm-N` ConfigMaps in `storm`.
    pub storm: usize,
    /// Events recorded in `events`.
    pub events: usize,
    /// The feedback loop's patches, per ConfigMap of `loop`.
    pub feedback: HashMap<String, usize>,
    /// The feedback loop's patches by the API server's answer.
    pub feedback_codes: HashMap<u16, usize>,
}

impl Writes {
    fn count(audited: &[Audited]) -> Self {
        let mut writes = Self::default();
        for w in audited.iter().filter(|w| w.user == kubewasm_testenv::ADMIN) {
            match (w.resource.as_str(), w.namespace.as_str()) {
                ("configmaps", "storm") if w.name.starts_with("storm-") => writes.storm += 1,
                ("events", "events") => writes.events += 1,
                ("configmaps", "loop") if w.verb == "patch" => {
                    *writes.feedback.entry(w.name.clone()).or_default() += 1;
                    *writes.feedback_codes.entry(w.code).or_default() += 1;
                }
                _ => {}
            }
        }
        writes
    }
}

/// The most a plugin can send at `(rate, burst)` in `window`.
pub fn allowed((rate, burst): (f64, f64), window: Duration) -> usize {
    (burst + rate * window.as_secs_f64()).floor() as usize
}

/// The test environment with the namespaces and seed ConfigMaps both runs use.
pub async fn environment() -> anyhow::Result<TestEnv> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    for ns in ["good", "storm", "loop", "events"] {
        resources::create_namespace(&admin, ns).await?;
        if ns == "good" {
            continue;
        }
        let config_maps = Api::<ConfigMap>::namespaced(admin.clone(), ns);
        for i in 0..3 {
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("seed-{i}")}, "data": {"v": "1"}}),
            )?;
            config_maps.create(&PostParams::default(), &cm).await?;
        }
    }
    Ok(env)
}

/// pod-phase with one more core module of `globals` mutable globals, instantiated 60 times:
/// a plugin that loads, whose instances keep their globals outside any memory.
pub fn globals_bomb(globals: usize) -> anyhow::Result<Vec<u8>> {
    let mut component = std::fs::read(kubewasm_plugin_artifacts::POD_PHASE)?;
    // Core modules already in the component's index space: the new one comes after them.
    let (mut depth, mut modules) = (0, 0u32);
    for payload in wasmparser::Parser::new(0).parse_all(&component) {
        match payload? {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth -= 1,
            wasmparser::Payload::ModuleSection { .. } if depth == 1 => modules += 1,
            _ => {}
        }
    }
    let module = wat::parse_str(format!(
        "(module {} (func))",
        "(global (mut i64) (i64.const 7))".repeat(globals)
    ))?;
    section(&mut component, 1, &module);
    // One core-instance section: 60 instantiations of that module with no arguments.
    let mut instances = Vec::new();
    leb(&mut instances, 60);
    for _ in 0..60 {
        instances.push(0x00);
        leb(&mut instances, modules);
        leb(&mut instances, 0);
    }
    section(&mut component, 2, &instances);
    Ok(component)
}

/// Appends a component section of kind `id` holding `body`.
fn section(out: &mut Vec<u8>, id: u8, body: &[u8]) {
    out.push(id);
    leb(out, u32::try_from(body.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(body);
}

/// Appends `n` as unsigned LEB128.
fn leb(out: &mut Vec<u8>, mut n: u32) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A component costly to compile: two functions of 140,000 constant additions each (one took
/// 12 s and 1.1 GB here), within every shape limit.
pub fn compile_bomb() -> anyhow::Result<Vec<u8>> {
    let body = "i32.const 100000\ni32.add\n".repeat(140_000);
    let functions: String = (0..2)
        .map(|i| format!("(func (export \"f{i}\") (param i32) (result i32) local.get 0 {body})"))
        .collect();
    Ok(wat::parse_str(format!(
        "(component (core module {functions}))"
    ))?)
}

/// The hostile plugins (copies of the hostile plugin), each its name and its entry in the
/// host's configuration; `HTTP` stands for the silent server the HTTP flood aims at.
const HOSTILE: &[(&str, &str)] = &[
    ("wait-handle", "config: {mode: unsent-body}"),
    ("wait-init", "config: {mode: init-unsent-body}"),
    ("swapped", "config: {mode: unsent-body}"),
    ("wasi-hoard", "config: {mode: wasi-hoard}"),
    ("alloc", "config: {mode: alloc}"),
    ("spin", "config: {mode: loop}"),
    ("log-flood", "config: {mode: log-flood}"),
    ("huge-args", "config: {mode: huge-args}"),
    ("huge-log", "config: {mode: huge-log}"),
    ("hoard", "config: {mode: hoard}"),
    ("write-move", "config: {mode: write-move}"),
    ("copy-flood", "config: {mode: copy-flood, key: log}"),
    (
        "slow-init",
        "config: {mode: slow-init}\n    limits: {releaseIdleSeconds: 1}",
    ),
    (
        "storm",
        "config: {mode: write-storm}\n    grants: {writes: [{resources: [v1/ConfigMap], \
         verbs: [create, patch], namespaces: [storm]}]}",
    ),
    (
        "feedback",
        "config: {mode: write-loop}\n    grants: {writes: [{resources: [v1/ConfigMap], \
         verbs: [patch], namespaces: [loop]}]}",
    ),
    (
        "events",
        "config: {mode: event-flood}\n    grants: {writes: [{resources: \
         [events.k8s.io/v1/Event], verbs: [create, patch], namespaces: [events]}]}",
    ),
    (
        "http-flood",
        "config: {mode: http-flood, key: 'HTTP'}\n    grants: {http: ['HTTP']}",
    ),
];

/// The CPU all plugins together may use, in millicores (the default on two cores, named so
/// that a machine with more cores runs the same test).
pub const POOL_MILLICORES: u64 = 1000;

/// CPU-bound plugins besides `spin`, each spinning to its deadline on every event: with it,
/// sixteen, more than the cores, which only their CPU budgets keep from the neighbour's.
pub const SPINNERS: usize = 15;

/// The hostile plugins' names and configuration entries: [`HOSTILE`], the spinners, and
/// one that asks for every event again at once.
fn hostile_entries() -> Vec<(String, String)> {
    let spinners = (2..=SPINNERS + 1).map(|i| (format!("spin-{i}"), "config: {mode: loop}".into()));
    HOSTILE
        .iter()
        .map(|(name, entry)| ((*name).to_owned(), (*entry).to_owned()))
        .chain(spinners)
        .chain([(
            "requeue".to_owned(),
            "config: {mode: requeue-now}".to_owned(),
        )])
        .collect()
}

/// The hostile plugins' configuration entries, the HTTP flood aimed at `http`.
fn hostile_config(http: &str) -> String {
    hostile_entries()
        .iter()
        .map(|(name, entry)| format!("  {name}:\n    {}\n", entry.replace("HTTP", http)))
        .collect()
}

/// The plugin files of a run beside the hostile plugins: name and bytes.
pub fn hostile_files(sizes: &Sizes) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let hostile = std::fs::read(kubewasm_plugin_artifacts::HOSTILE)?;
    let mut files: Vec<(String, Vec<u8>)> = hostile_entries()
        .into_iter()
        .map(|(name, _)| (name, hostile.clone()))
        .collect();
    files.push(("globals".into(), globals_bomb(sizes.globals)?));
    files.push(("compile-bomb".into(), compile_bomb()?));
    Ok(files)
}

/// What the agent printed: its first lines, and when pod-phase first saw each pod.
#[derive(Default)]
struct Output {
    lines: Vec<String>,
    seen: HashMap<String, Instant>,
}

impl Output {
    /// Lines kept at most.
    const KEPT: usize = 20_000;

    fn add(&mut self, at: Instant, line: String) {
        if line.contains("pod seen")
            && let Some(pod) = pod_in(&line)
        {
            self.seen.entry(pod).or_insert(at);
        }
        if self.lines.len() < Self::KEPT {
            self.lines.push(line);
        }
    }

    /// Takes what `agent` printed since the last look.
    fn read(&mut self, agent: &AgentProcess) {
        for (at, line) in agent.take_lines() {
            self.add(at, line);
        }
    }

    /// Waits until pod-phase has printed a line for every key in `keys`.
    async fn until_seen(&mut self, agent: &AgentProcess, keys: &[String]) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.read(agent);
            let missing = keys.iter().filter(|k| !self.seen.contains_key(*k)).count();
            if missing == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("pod-phase never saw {missing} pods: {}", tail(&self.lines));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Runs `program` (the `kubewasm` binary) on `env` with pod-phase and `others` (name and
/// bytes), creates `sizes.pods` pods in `good`, and stops it with SIGTERM. With `swaps`, the
/// plugin `swapped` is replaced by a new version that many times while the pods are created.
pub async fn run(
    env: &TestEnv,
    program: &Path,
    others: &[(String, Vec<u8>)],
    sizes: &Sizes,
    tag: &str,
) -> anyhow::Result<Run> {
    let dir = tempfile::tempdir()?;
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins)?;
    std::fs::copy(
        kubewasm_plugin_artifacts::POD_PHASE,
        plugins.join("pod-phase.wasm"),
    )?;
    for (name, bytes) in others {
        std::fs::write(plugins.join(format!("{name}.wasm")), bytes)?;
    }
    // A server that takes connections and never answers: what the HTTP flood aims at.
    let silent = TcpListener::bind("127.0.0.1:0")?;
    let http = silent.local_addr()?.to_string();
    std::thread::spawn(move || {
        // Held open, never read or answered.
        let held: Vec<_> = silent.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    let config = dir.path().join("config.yaml");
    let mut text = format!(
        "shutdownTimeoutSeconds: {}\npluginCpuMillicores: {POOL_MILLICORES}\nplugins:\n  \
         pod-phase: {{}}\n",
        SHUTDOWN_TIMEOUT.as_secs()
    );
    if !others.is_empty() {
        text.push_str(&hostile_config(&http));
    }
    std::fs::write(&config, text)?;
    let metrics = free_address()?;
    let metrics_arg = metrics.to_string();
    let cache = dir.path().join("cache");
    let args: [&OsStr; 10] = [
        "--plugins".as_ref(),
        plugins.as_os_str(),
        "--kubeconfig".as_ref(),
        env.kubeconfig().as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
        "--cache-dir".as_ref(),
        cache.as_os_str(),
        "--metrics-address".as_ref(),
        metrics_arg.as_ref(),
    ];
    let started = Instant::now();
    let mut agent = AgentProcess::start(program, &args)?;
    let pid = agent.id();
    let mut out = Output::default();
    // Memory and open files, sampled until the process is gone.
    let max_open = Arc::new(AtomicUsize::new(0));
    {
        let max_open = max_open.clone();
        std::thread::spawn(move || {
            while resident(pid).is_some() {
                max_open.fetch_max(open_files(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    }
    let ready_deadline = started + Duration::from_secs(600);
    let ready_after = loop {
        match agent.next_line(Duration::from_millis(100)) {
            Some((at, line)) => {
                let ready = line.contains("plugins ready");
                out.add(at, line);
                if ready {
                    break at - started;
                }
            }
            None => ensure!(
                Instant::now() < ready_deadline,
                "never ready: {}",
                tail(&out.lines)
            ),
        }
    };
    let admin = env.client().await?;
    let pods = Api::<Pod>::namespaced(admin, "good");
    // Warm-up: connections, the API server's caches, pod-phase's instance.
    let warm = format!("warm-{tag}");
    pods.create(&PostParams::default(), &pod(&warm)?).await?;
    out.until_seen(&agent, &[format!("good/{warm}")]).await?;
    tokio::time::sleep(sizes.settle).await;
    let mut sent = Vec::with_capacity(sizes.pods);
    let names: Vec<String> = (0..sizes.pods).map(|i| format!("{tag}-{i}")).collect();
    let pace = Duration::from_secs(1) / sizes.per_second;
    let every = sizes.pods / (sizes.swaps + 1).max(1);
    let first = Instant::now();
    for (i, name) in names.iter().enumerate() {
        if !others.is_empty()
            && sizes.swaps > 0
            && i > 0
            && i % every == 0
            && i / every <= sizes.swaps
        {
            let version = kubewasm_plugin_artifacts::variant(
                kubewasm_plugin_artifacts::HOSTILE,
                &format!("{tag}-swap-{i}"),
            );
            let tmp = plugins.join(".swapped.tmp");
            std::fs::write(&tmp, version)?;
            std::fs::rename(&tmp, plugins.join("swapped.wasm"))?;
        }
        tokio::time::sleep_until((first + pace * i as u32).into()).await;
        sent.push(Instant::now());
        pods.create(&PostParams::default(), &pod(name)?).await?;
        out.read(&agent);
    }
    let keys: Vec<String> = names.iter().map(|n| format!("good/{n}")).collect();
    out.until_seen(&agent, &keys).await?;
    let latencies = keys
        .iter()
        .zip(&sent)
        .map(|(key, at)| out.seen[key].saturating_duration_since(*at))
        .collect();
    let (code, body) = tokio::task::spawn_blocking(move || http_get(metrics, "/status")).await?;
    ensure!(code == 200, "/status answered {code}: {body}");
    let status: serde_json::Value = serde_json::from_str(&body).context("/status")?;
    let peak_rss = resident(pid).map(|(_, peak)| peak).context("running")?;
    let (exited_ok, sigterm) = agent.terminate(SHUTDOWN_TIMEOUT + Duration::from_secs(30))?;
    let window = started.elapsed();
    out.read(&agent);
    let max_open_files = max_open.load(Ordering::Relaxed);
    Ok(Run {
        latencies,
        ready_after,
        peak_rss,
        max_open_files,
        exited_ok,
        sigterm,
        window,
        plugin_files: others.len() + 1,
        status,
        lines: out.lines,
    })
}

/// The writes the API server answered so far.
pub fn writes(env: &TestEnv) -> anyhow::Result<Writes> {
    Ok(Writes::count(&env.audited_writes()?))
}

/// The pod key in a pod-phase line (`pod=good/NAME`).
fn pod_in(line: &str) -> Option<String> {
    let at = line.find("pod=good/")? + "pod=".len();
    let rest = &line[at..];
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '"')
        .unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

fn tail(lines: &[String]) -> String {
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "registry.example.com/web:1"}]}
    }))?)
}

/// The `q` quantile of `samples`, nearest rank.
pub fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
