//! Side by side, same input, same run: kubewasm's pipeline, kube-rs's reflector (kube-runtime
//! watcher and store, typed `Pod`) and client-go's SharedIndexInformer (a Go program,
//! `benches/client-go`), each against the API server double serving the same recorded pods.
//!
//! The double runs in a process of its own (`support/double_process.rs`), so the benchmark's
//! process is the Rust client's alone: its CPU clock and counted heap are the client's.
//!
//! - Throughput: the client has synced; a recorded stream (every pod added, updated twice,
//!   deleted) is queued on the double and released; timed until the client has handled every
//!   event. kubewasm is measured up to an in-process subscriber, and up to 1 and 10 no-op Rust
//!   plugins (10 also with a change filter on `/spec`, which drops the stream's updates: they
//!   change an annotation, not the spec) and a plugin that parses each pod. Then, on a
//!   stream whose updates change only the status (as many pods, each updated 18 times),
//!   kubewasm alone and with 10 no-op plugins, with and without the filter.
//!   Reported per wall-clock second and per
//!   CPU-second of the client's process (`support/cpu.rs`; for the Rust clients, this process
//!   less the thread that waits for them), with heap counting paused.
//!   client-go runs twice: reading JSON, and reading protobuf through a front (the Go peer's
//!   `-mode front`, a process of its own) that converts the double's JSON answers.
//! - Memory: heap held after syncing N pods, per object and divided by the pods' JSON size;
//!   then a forced relist (every pod changed, history compacted, watch cut: 410 Gone) and the
//!   peak heap during it divided by the steady heap. Rust clients are measured with a counting
//!   allocator; client-go with Go's heap statistics.
//!
//! Results are printed and written to `target/bench-results/peers.json`, which
//! `scripts/bench.sh` turns into docs/BENCHMARKS.md. `KUBEWASM_BENCH_QUICK=1` runs small sizes.
//! `KUBEWASM_BENCH_ONLY=LABEL` runs only the throughput row of that client (`kubewasm + 10 noop
//! plugins`, say), `memory:LABEL` only that client's memory rows, `idle` only the idle rows,
//! or `status` the status stream's rows, for side-by-side runs and profiles; several labels
//! are separated by `|` (`kubewasm|kubewasm + 10 noop plugins`); its results file is partial.
//!
//! Run with `cargo bench -p kubewasm --bench peers` (needs Go for client-go).

#[path = "support/mod.rs"]
mod support;

use support::double_process::{self, DoubleProcess, read_line};
use support::{alloc, cpu};

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kubewasm::agent::{Agent, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::gvk::Gvk;
use kubewasm::informer::factory::{InformerFactory, Lease};
use kubewasm::informer::queue::{Delivery, queue};
use kubewasm::informer::{Filter, IndexClaim, Informer, Subscription};
use kubewasm::object::{Keep, Transform};
use kubewasm::plugins::{DEFAULT_RELEASE_IDLE_AFTER, PluginHost};
use kubewasm::source::kube::KubeSource;
use serde_json::json;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

const WAIT: Duration = Duration::from_secs(600);

/// The client's runtime and the client-go peer.
struct Rig {
    client_rt: tokio::runtime::Runtime,
    go_peer: PathBuf,
}

impl Rig {
    fn new() -> Self {
        // The agent's own runtime, for every Rust client alike.
        let client_rt = kubewasm::agent::runtime().expect("client runtime");
        Self {
            client_rt,
            go_peer: build_go_peer(),
        }
    }
}

impl Rig {
    /// Starts the Go peer (client-go, or its protobuf front) with `args`, its stdout piped.
    fn start_go_peer<'a>(
        &self,
        args: impl IntoIterator<Item = &'a str>,
    ) -> (Child, BufReader<ChildStdout>) {
        let mut child = Command::new(&self.go_peer)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("client-go peer");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        (child, out)
    }
}

fn build_go_peer() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/client-go");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-go-peer");
    let status = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(&dir)
        .status()
        .expect("Go is needed to build the client-go peer");
    assert!(status.success(), "building the client-go peer failed");
    out
}

/// Waits until `done` holds, polling.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An agent on `client` (inside the current runtime) with `count` copies of the bench plugin
/// doing `work`, not loaded yet, its Pod informer running: the agent, a lease keeping that
/// informer up, and the plugin files (in a temporary folder kept alive with them).
fn bench_plugins(
    rig: &Rig,
    client: kube::Client,
    count: usize,
    work: &str,
    changes: &[&str],
    release_idle_after: Duration,
) -> (Agent, Lease, Vec<PathBuf>, kubewasm_testenv::PluginFolder) {
    let mut config = HostConfig::default();
    let dir = kubewasm_testenv::PluginFolder::new();
    let paths = (0..count)
        .map(|i| {
            let name = format!("bench-{i}");
            let mut settings = config.plugins.defaults.clone();
            settings.config = json!({"work": work, "changes": changes}).to_string();
            settings.delivery.release_idle_after = release_idle_after;
            // Every event is delivered, never folded: a plugin slower than the stream (the
            // parse plugin) would otherwise see fewer events than were sent, and the
            // throughput run would wait for deliveries that folding made unnecessary.
            settings.delivery.backlog = usize::MAX;
            // Bytes too: 20,000 events of 4 KB queued for a plugin slower than the stream
            // pass the default 64 MiB, and the folding that follows ends the run waiting.
            settings.delivery.backlog_bytes = usize::MAX;
            config.plugins.named.insert(name.clone(), settings);
            dir.put(&name, kubewasm_plugin_artifacts::BENCH)
        })
        .collect();
    let options = support::plugins::agent_options(Cluster::Kube(client), config);
    let agent = rig
        .client_rt
        .block_on(Agent::start(options))
        .expect("agent");
    let lease = agent.factory().acquire(
        &Gvk::new("", "v1", "Pod"),
        &kubewasm::source::Scope::everything(),
    );
    (agent, lease, paths, dir)
}

/// True when every plugin of `host` has been handed its initial state.
fn synced(host: &PluginHost) -> bool {
    host.status().iter().all(|s| s.synced)
}

/// A client under test, running against a double.
enum Peer {
    Kubewasm {
        informer: Arc<Informer>,
        handled: Arc<AtomicU64>,
        _lease: Lease,
        _sub: Option<Subscription>,
        _claim: Option<IndexClaim>,
    },
    Plugins {
        agent: Box<Agent>,
        _lease: Lease,
    },
    KubeRs {
        handled: Arc<AtomicU64>,
        lists: Arc<AtomicU64>,
        /// Its reflector's store (of pods, or of their metadata).
        _store: Box<dyn std::any::Any + Send>,
        task: tokio::task::JoinHandle<()>,
    },
    ClientGo {
        child: Child,
        out: BufReader<ChildStdout>,
        /// The protobuf front between client-go and the double, when client-go reads protobuf.
        front: Option<Child>,
    },
}

/// What kubewasm keeps of each pod besides its metadata (a declared projection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    Whole,
    /// Metadata only, asked of the server as `PartialObjectMetadata`.
    Metadata,
    /// `/status/phase` and `/spec/nodeName`, cut at decode.
    PhaseAndNode,
}

impl Kept {
    fn keep(self) -> Keep {
        match self {
            Kept::Whole => Keep::Whole,
            Kept::Metadata => Keep::MetadataOnly,
            Kept::PhaseAndNode => Keep::fields(&["/status/phase", "/spec/nodeName"]),
        }
    }
}

/// Which client, and how it is set up.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// kubewasm's pipeline up to an in-process subscriber (`false`: cache only), with the
    /// built-in indexes claimed before the list as a plugin that queries claims them
    /// (`indexed`), or none built.
    Kubewasm {
        subscriber: bool,
        keep_managed: bool,
        indexed: bool,
        kept: Kept,
    },
    /// kubewasm with `count` copies of the bench plugin doing `work`, each subscribed with a
    /// change filter on `/spec` when `spec_filter`.
    Plugins {
        count: usize,
        work: &'static str,
        spec_filter: bool,
    },
    /// kube-rs's reflector on its `watcher`, of pods or (`metadata`) of their metadata
    /// (`Api<PartialObjectMeta<Pod>>`, what its `metadata_watcher` became).
    KubeRs { metadata: bool },
    /// client-go's informer, reading JSON or, through a front that converts the double's
    /// answers as a real API server would serve them, protobuf; or its metadata informer
    /// (`metadata`, JSON).
    ClientGo { protobuf: bool, metadata: bool },
}

impl Kind {
    fn label(self) -> String {
        match self {
            Kind::Kubewasm {
                kept: Kept::Metadata,
                ..
            } => "kubewasm, metadata only".into(),
            Kind::Kubewasm {
                kept: Kept::PhaseAndNode,
                ..
            } => "kubewasm, /status/phase and /spec/nodeName".into(),
            Kind::Kubewasm { indexed: false, .. } => "kubewasm, no index built".into(),
            Kind::Kubewasm {
                keep_managed: true, ..
            } => "kubewasm (managedFields kept)".into(),
            Kind::Kubewasm { .. } => "kubewasm".into(),
            Kind::Plugins {
                count,
                work,
                spec_filter,
            } => format!(
                "kubewasm + {count} {work} plugin{}{}",
                if count == 1 { "" } else { "s" },
                if spec_filter { " filtering /spec" } else { "" }
            ),
            Kind::KubeRs { metadata: false } => "kube-rs reflector".into(),
            Kind::KubeRs { metadata: true } => "kube-rs metadata watcher".into(),
            Kind::ClientGo { metadata: true, .. } => "client-go metadata informer".into(),
            Kind::ClientGo {
                protobuf: false, ..
            } => "client-go informer".into(),
            Kind::ClientGo { protobuf: true, .. } => "client-go informer (protobuf)".into(),
        }
    }
}

/// kube-rs's watcher on `api` reflected into a store, counting what it yields (deliveries,
/// then completed lists) in `counters`; the store, and the task running it.
fn reflect<K>(
    rig: &Rig,
    api: kube::Api<K>,
    (handled, lists): (Arc<AtomicU64>, Arc<AtomicU64>),
) -> (Box<dyn std::any::Any + Send>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store::<K>();
    let task = rig.client_rt.spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                    handled.fetch_add(1, Ordering::Relaxed);
                }
                Ok(watcher::Event::InitDone) => {
                    lists.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    });
    (Box::new(store), task)
}

/// kubewasm's Pod informer on `client`: the factory and a lease that keeps it running.
fn pod_informer(
    client: kube::Client,
    transform: Transform,
    keep: Keep,
    handle: tokio::runtime::Handle,
) -> (Arc<InformerFactory>, Lease) {
    let source = Arc::new(KubeSource::new(client, transform, handle.clone()));
    let factory = InformerFactory::new(source, handle);
    let lease = factory.acquire(
        &Gvk::new("", "v1", "Pod"),
        &kubewasm::source::Scope::everything().keeping(keep),
    );
    (factory, lease)
}

impl Peer {
    /// Starts `kind` against `double` and waits until it has synced. `go_args` are extra
    /// arguments for client-go.
    fn start(rig: &Rig, kind: Kind, double: &DoubleProcess, go_args: &[String]) -> Self {
        let _guard = rig.client_rt.enter();
        let handle = rig.client_rt.handle().clone();
        let client = double.client();
        match kind {
            Kind::Kubewasm {
                subscriber,
                keep_managed,
                indexed,
                kept,
            } => {
                let transform = if keep_managed {
                    Transform::keep_everything()
                } else {
                    Transform::default()
                };
                let (_, lease) = pod_informer(client, transform, kept.keep(), handle);
                let informer = lease.informer().clone();
                let claim = indexed.then(|| IndexClaim::builtins(&informer));
                let handled = Arc::new(AtomicU64::new(0));
                let sub = subscriber.then(|| {
                    let (tx, rx) = queue(usize::MAX, usize::MAX);
                    let counter = handled.clone();
                    std::thread::spawn(move || {
                        while let Ok(d) = rx.recv_timeout(Duration::from_secs(3600)) {
                            if matches!(d, Delivery::Event(_)) {
                                counter.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    });
                    informer.subscribe(Filter::default(), tx)
                });
                wait_for("kubewasm sync", || informer.has_synced());
                Peer::Kubewasm {
                    informer,
                    handled,
                    _lease: lease,
                    _sub: sub,
                    _claim: claim,
                }
            }
            Kind::Plugins {
                count,
                work,
                spec_filter,
            } => {
                let changes: &[&str] = if spec_filter { &["/spec"] } else { &[] };
                let (agent, lease, paths, _dir) = bench_plugins(
                    rig,
                    client,
                    count,
                    work,
                    changes,
                    DEFAULT_RELEASE_IDLE_AFTER,
                );
                for path in &paths {
                    agent.plugins().load(path).expect("bench plugin loads");
                }
                wait_for("plugins sync", || synced(agent.plugins()));
                Peer::Plugins {
                    agent: Box::new(agent),
                    _lease: lease,
                }
            }
            Kind::KubeRs { metadata } => {
                let handled = Arc::new(AtomicU64::new(0));
                let lists = Arc::new(AtomicU64::new(0));
                let counters = (handled.clone(), lists.clone());
                let (store, task) = if metadata {
                    // kube-rs asks for metadata only for an `Api` of `PartialObjectMeta`.
                    let api = kube::Api::<PartialObjectMeta<Pod>>::all(client);
                    reflect(rig, api, counters)
                } else {
                    reflect(rig, kube::Api::<Pod>::all(client), counters)
                };
                wait_for("kube-rs sync", || lists.load(Ordering::Relaxed) > 0);
                Peer::KubeRs {
                    handled,
                    lists,
                    _store: store,
                    task,
                }
            }
            Kind::ClientGo { protobuf, metadata } => {
                // The front is a process of its own, like the double: converting to protobuf
                // is the server's work, not counted as client-go's.
                let front = protobuf.then(|| {
                    let (front, mut out) =
                        rig.start_go_peer(["-mode", "front", "-server", double.url()]);
                    let line = read_line(&mut out);
                    let url = line
                        .strip_prefix("listening ")
                        .unwrap_or_else(|| panic!("protobuf front said {line:?}"))
                        .to_owned();
                    (front, url)
                });
                let server = front
                    .as_ref()
                    .map_or_else(|| double.url().to_string(), |(_, url)| url.clone());
                let (child, mut out) = rig.start_go_peer(
                    ["-server", server.as_str()]
                        .into_iter()
                        .chain(protobuf.then_some("-protobuf"))
                        .chain(metadata.then_some("-metadata"))
                        .chain(go_args.iter().map(String::as_str)),
                );
                let line = read_line(&mut out);
                assert_eq!(line, "synced", "client-go peer");
                Peer::ClientGo {
                    child,
                    out,
                    front: front.map(|(front, _)| front),
                }
            }
        }
    }

    /// Events handled so far (minimum over plugins; an update a plugin's change filter
    /// dropped counts as handled).
    fn handled(&self) -> u64 {
        match self {
            Peer::Kubewasm { handled, .. } | Peer::KubeRs { handled, .. } => {
                handled.load(Ordering::Relaxed)
            }
            Peer::Plugins { agent, .. } => agent
                .plugins()
                .status()
                .iter()
                .map(|s| s.delivered + s.filtered)
                .min()
                .unwrap_or(0),
            Peer::ClientGo { .. } => 0,
        }
    }

    /// Complete lists applied so far.
    fn lists(&self) -> u64 {
        match self {
            Peer::Kubewasm { informer, .. } => informer.lists(),
            Peer::KubeRs { lists, .. } => lists.load(Ordering::Relaxed),
            _ => 0,
        }
    }

    fn stop(self) {
        match self {
            Peer::Plugins { agent, .. } => agent.plugins().shutdown(),
            Peer::KubeRs { task, .. } => task.abort(),
            Peer::ClientGo { child, front, .. } => {
                for mut child in std::iter::once(child).chain(front) {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
            Peer::Kubewasm { .. } => {}
        }
    }
}

/// The recorded stream of a throughput run: pods, their size, updates per pod, and whether
/// the updates change the status only (else an annotation).
#[derive(Clone, Copy)]
struct Stream {
    pods: usize,
    size: usize,
    updates: usize,
    status: bool,
}

impl Stream {
    /// Events in the stream: each pod added, updated, deleted.
    fn events(self) -> usize {
        self.pods * (self.updates + 2)
    }
}

/// What one throughput run measured.
#[derive(Clone, Copy)]
struct Run {
    /// Events per wall-clock second.
    per_second: f64,
    /// Events per CPU-second of the client's process (this one, or client-go's).
    per_cpu_second: f64,
    /// With plugins: CPU of their dispatch threads per delivery (an event handed to one
    /// plugin), in nanoseconds.
    plugin_ns: Option<f64>,
}

/// One throughput run of `kind` on `stream`.
fn throughput(rig: &Rig, kind: Kind, stream: Stream) -> Run {
    let mut double = DoubleProcess::start();
    let go_args = [
        "-mode".into(),
        "throughput".into(),
        "-events".into(),
        stream.events().to_string(),
    ];
    let mut client = Peer::start(rig, kind, &double, &go_args);
    let total = double.queue(
        stream.pods,
        stream.size,
        stream.updates,
        stream.status,
        1_000_000,
    );
    assert_eq!(total, stream.events() as u64, "events queued");
    let go_pid = match &client {
        Peer::ClientGo { child, .. } => Some(child.id()),
        _ => None,
    };
    // The client's CPU: client-go's process, or this one less this thread, which only
    // releases the stream and then polls, every millisecond, until the client is done (about
    // 1.5% of the worker's samples in a profile of a kubewasm run).
    let cpu = || match go_pid {
        Some(pid) => cpu::process(pid),
        None => cpu::this_process().saturating_sub(cpu::this_thread()),
    };
    // Each plugin's deliveries run on its own thread, `plugin-NAME` (`plugins/dispatch.rs`).
    let plugins = match kind {
        Kind::Plugins { count, .. } => count,
        _ => 0,
    };
    let plugin_cpu = || cpu::threads_named("plugin-");
    let (cpu_before, plugin_before) = (cpu(), plugin_cpu());
    let started = Instant::now();
    double.release();
    match &mut client {
        Peer::ClientGo { out, .. } => assert_eq!(read_line(out), "done"),
        other => wait_for("every event handled", || other.handled() >= total),
    }
    let elapsed = started.elapsed();
    let cpu_seconds = cpu().saturating_sub(cpu_before).as_secs_f64().max(1e-3);
    let plugin_ns = (plugins > 0).then(|| {
        plugin_cpu().saturating_sub(plugin_before).as_nanos() as f64
            / (total as f64 * plugins as f64)
    });
    client.stop();
    Run {
        per_second: total as f64 / elapsed.as_secs_f64(),
        per_cpu_second: total as f64 / cpu_seconds,
        plugin_ns,
    }
}

/// Memory of one client holding `objects` pods of about `size` bytes.
#[derive(Debug, Clone, serde::Serialize)]
struct Memory {
    client: String,
    objects: usize,
    pod_bytes: usize,
    /// Heap held per object after sync.
    per_object: f64,
    /// `per_object` divided by the pod's JSON size.
    json_ratio: f64,
    /// Peak heap during a relist divided by the steady heap.
    relist_peak_ratio: f64,
}

fn memory(rig: &Rig, kind: Kind, objects: usize, size: usize) -> Memory {
    let mut double = DoubleProcess::start();
    let json_bytes = double.load(objects, size, 10);
    let go_args = [
        "-mode".into(),
        "memory".into(),
        "-relist".into(),
        objects.to_string(),
    ];
    let baseline = alloc::live();
    let mut client = Peer::start(rig, kind, &double, &go_args);
    std::thread::sleep(Duration::from_millis(300));
    let steady = match &mut client {
        Peer::ClientGo { out, .. } => parse_fact(&read_line(out), "steady"),
        _ => (alloc::live() - baseline) as f64,
    };
    // Every pod changes while the client is disconnected and history is compacted: its
    // watch gets 410 Gone and it relists.
    alloc::reset_peak();
    double.relist(objects, size, (objects as u64) * 4);
    let peak = match &mut client {
        Peer::ClientGo { out, .. } => parse_fact(&read_line(out), "peak"),
        other => {
            wait_for("the relist", || other.lists() >= 2);
            (alloc::peak() - baseline) as f64
        }
    };
    client.stop();
    drop(double);
    let per_object = steady / objects as f64;
    Memory {
        client: kind.label(),
        objects,
        pod_bytes: json_bytes / objects,
        per_object,
        json_ratio: per_object / (json_bytes as f64 / objects as f64),
        relist_peak_ratio: peak / steady,
    }
}

fn parse_fact(line: &str, name: &str) -> f64 {
    line.strip_prefix(name)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("expected `{name} N` from client-go, got {line:?}"))
}

#[derive(Debug, Clone, serde::Serialize)]
struct Throughput {
    client: String,
    events: usize,
    pod_bytes: usize,
    events_per_second: f64,
    /// Events per CPU-second of the client alone.
    events_per_cpu_second: f64,
    /// Events per second of each run, by round (every client runs once per round).
    runs: Vec<f64>,
    /// Events per client CPU-second of each run, by round.
    cpu_runs: Vec<f64>,
    /// With plugins: the median CPU of their dispatch threads per delivery, in nanoseconds.
    plugin_ns_per_delivery: Option<f64>,
}

#[derive(serde::Serialize)]
struct Results {
    /// Runs per throughput figure (its median is reported).
    rounds: usize,
    throughput: Vec<Throughput>,
    /// Throughput on a stream of mostly status-only updates, with and without change filters.
    status_stream: Vec<Throughput>,
    memory: Vec<Memory>,
    idle: Vec<Idle>,
}

/// What an idle loaded plugin costs.
#[derive(Debug, Clone, serde::Serialize)]
struct Idle {
    plugins: usize,
    /// Whether the plugins' instances were released (idle past their period) or kept.
    released: bool,
    /// Counted heap per plugin.
    heap_per_plugin: f64,
    /// Resident memory per plugin (linear memories and code included).
    rss_per_plugin: f64,
    /// CPU of this process (host, informers, the plugins' threads; the server is another
    /// process) while everything is idle, in percent of one core.
    idle_cpu_percent: f64,
}

/// How long the plugins of the idle measurement wait for work before their instances are
/// released, when that is what is measured.
const IDLE_RELEASE: Duration = Duration::from_millis(200);

/// Loads `count` no-op plugins on a synced cache of 1,000 pods and measures what they hold
/// once idle: with their instances kept, or released after [`IDLE_RELEASE`].
fn idle(rig: &Rig, count: usize, released: bool) -> Idle {
    let mut double = DoubleProcess::start();
    double.load(1000, 4096, 10);
    let _guard = rig.client_rt.enter();
    let client = double.client();
    let release = if released {
        IDLE_RELEASE
    } else {
        DEFAULT_RELEASE_IDLE_AFTER
    };
    let (agent, lease, paths, _dir) = bench_plugins(rig, client, count + 1, "noop", &[], release);
    wait_for("sync", || lease.informer().has_synced());
    // One plugin first, so the compiled code and engine are not counted per plugin.
    let host = agent.plugins();
    host.load(&paths[0]).expect("loads");
    wait_for("ready", || synced(host));
    std::thread::sleep(Duration::from_millis(500));
    let (heap_before, rss_before) = (alloc::live(), settled_rss());
    for path in &paths[1..] {
        host.load(path).expect("loads");
    }
    wait_for("ready", || synced(host));
    std::thread::sleep(Duration::from_millis(500));
    let (heap_after, rss_after) = (alloc::live(), settled_rss());
    // Nothing happens now: what the process spends is the cost of being loaded and idle
    // (the engine's epoch ticker, the workers' waits, the informers' watches).
    let window = Duration::from_secs(10);
    let cpu_before = cpu::this_process();
    std::thread::sleep(window);
    let idle_cpu = cpu::this_process().saturating_sub(cpu_before);
    host.shutdown();
    drop(double);
    Idle {
        plugins: count,
        released,
        heap_per_plugin: (heap_after - heap_before) as f64 / count as f64,
        rss_per_plugin: (rss_after - rss_before) / count as f64,
        idle_cpu_percent: 100.0 * idle_cpu.as_secs_f64() / window.as_secs_f64(),
    }
}

/// Resident memory as the median of ten readings over a second: one reading alone catches the
/// allocator in the middle of handing pages back (a released plugin's instance, the double's
/// buffers) and made a per-plugin figure negative.
fn settled_rss() -> f64 {
    let mut readings: Vec<f64> = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            support::rss::rss()
        })
        .collect();
    readings.sort_by(f64::total_cmp);
    readings[readings.len() / 2]
}

/// Throughput of each of `clients` on `stream`, one row each. Rounds outside, clients
/// inside: each round runs every client once, side by side, so a noisy minute on the shared
/// machine lands on one round of every client, not on all the runs of one, and ratios between
/// clients can be taken per round.
fn side_by_side(rig: &Rig, clients: &[Kind], stream: Stream, rounds: usize) -> Vec<Throughput> {
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); clients.len()];
    for _ in 0..rounds {
        for (kind, runs) in clients.iter().zip(&mut runs) {
            runs.push(alloc::paused(|| throughput(rig, *kind, stream)));
        }
    }
    let mut rows = Vec::new();
    for (kind, runs) in clients.iter().zip(runs) {
        let median = |pick: fn(&Run) -> Option<f64>| {
            let mut values: Vec<f64> = runs.iter().filter_map(pick).collect();
            values.sort_by(f64::total_cmp);
            values.get(values.len() / 2).copied()
        };
        let row = Throughput {
            client: kind.label(),
            events: stream.events(),
            pod_bytes: stream.size,
            events_per_second: median(|r| Some(r.per_second)).unwrap_or_default(),
            events_per_cpu_second: median(|r| Some(r.per_cpu_second)).unwrap_or_default(),
            runs: runs.iter().map(|r| r.per_second).collect(),
            cpu_runs: runs.iter().map(|r| r.per_cpu_second).collect(),
            plugin_ns_per_delivery: median(|r| r.plugin_ns),
        };
        println!(
            "throughput  {:<36} {:>10.0} events/s {:>10.0} events/client CPU-s{}",
            row.client,
            row.events_per_second,
            row.events_per_cpu_second,
            row.plugin_ns_per_delivery
                .map(|ns| format!(" {ns:>6.0} ns plugin threads' CPU/delivery"))
                .unwrap_or_default()
        );
        rows.push(row);
    }
    rows
}

fn main() {
    if std::env::var_os(double_process::CHILD).is_some() {
        return double_process::serve();
    }
    support::logging::as_the_agent();
    // `cargo bench` passes `--bench`; filters are not supported.
    let quick = std::env::var_os("KUBEWASM_BENCH_QUICK").is_some();
    let rig = Rig::new();
    // Five rounds: with three, one slow round in a noisy minute moved a median by 15%.
    let (pods_in_stream, rounds) = if quick { (500, 3) } else { (5_000, 5) };
    let stream = Stream {
        pods: pods_in_stream,
        size: 4096,
        updates: 2,
        status: false,
    };
    // Nine in ten events a status-only update: what a plugin filtering on `/spec` sees on a
    // real cluster. Five times section 1's events, so a round lasts about half a second and a
    // scheduler hiccup moves it by a few percent, not ten.
    let status_stream = Stream {
        pods: pods_in_stream,
        size: 4096,
        updates: 18,
        status: true,
    };

    let only: Option<Vec<String>> = std::env::var("KUBEWASM_BENCH_ONLY")
        .ok()
        .map(|o| o.split('|').map(str::to_owned).collect());
    let chosen = |label: &str| only.as_ref().is_none_or(|o| o.iter().any(|l| l == label));
    let idle: Vec<Idle> = [false, true]
        .into_iter()
        .filter(|_| chosen("idle"))
        .map(|released| idle(&rig, 50, released))
        .collect();
    for i in &idle {
        println!(
            "idle        {} plugins (instances released: {}): {:.0} B heap, {:.0} B resident per plugin, {:.2}% of a core",
            i.plugins, i.released, i.heap_per_plugin, i.rss_per_plugin, i.idle_cpu_percent
        );
    }
    let mut results = Results {
        rounds,
        throughput: Vec::new(),
        status_stream: Vec::new(),
        memory: Vec::new(),
        idle,
    };
    let clients = [
        Kind::Kubewasm {
            subscriber: true,
            keep_managed: false,
            indexed: true,
            kept: Kept::Whole,
        },
        Kind::Kubewasm {
            subscriber: true,
            keep_managed: false,
            indexed: false,
            kept: Kept::Whole,
        },
        Kind::Kubewasm {
            subscriber: true,
            keep_managed: false,
            indexed: false,
            kept: Kept::Metadata,
        },
        Kind::KubeRs { metadata: false },
        Kind::ClientGo {
            protobuf: false,
            metadata: false,
        },
        Kind::ClientGo {
            protobuf: true,
            metadata: false,
        },
        Kind::Plugins {
            count: 1,
            work: "noop",
            spec_filter: false,
        },
        Kind::Plugins {
            count: 10,
            work: "noop",
            spec_filter: false,
        },
        Kind::Plugins {
            count: 10,
            work: "noop",
            spec_filter: true,
        },
        Kind::Plugins {
            count: 1,
            work: "parse",
            spec_filter: false,
        },
    ];
    let clients: Vec<Kind> = clients
        .into_iter()
        .filter(|kind| chosen(&kind.label()))
        .collect();
    results.throughput = side_by_side(&rig, &clients, stream, rounds);
    if chosen("status") {
        let filtering = [
            Kind::Kubewasm {
                subscriber: true,
                keep_managed: false,
                indexed: true,
                kept: Kept::Whole,
            },
            Kind::Plugins {
                count: 10,
                work: "noop",
                spec_filter: false,
            },
            Kind::Plugins {
                count: 10,
                work: "noop",
                spec_filter: true,
            },
        ];
        println!("status stream (nine in ten events a status-only update):");
        // More rounds: the ratio asked for is within a few percent of 1.
        results.status_stream = side_by_side(&rig, &filtering, status_stream, rounds + 2);
    }

    let cases: &[(usize, usize)] = if quick {
        &[(1_000, 1024), (1_000, 4096)]
    } else {
        &[
            (10_000, 1024),
            (10_000, 4096),
            (10_000, 16384),
            (100_000, 4096),
        ]
    };
    let cache_only = [
        Kind::Kubewasm {
            subscriber: false,
            keep_managed: false,
            indexed: true,
            kept: Kept::Whole,
        },
        Kind::Kubewasm {
            subscriber: false,
            keep_managed: false,
            indexed: false,
            kept: Kept::Whole,
        },
        Kind::Kubewasm {
            subscriber: false,
            keep_managed: true,
            indexed: true,
            kept: Kept::Whole,
        },
        Kind::KubeRs { metadata: false },
        Kind::ClientGo {
            protobuf: false,
            metadata: false,
        },
    ];
    // What declared projections save, on the 4 KiB pods.
    let projected = [
        Kind::Kubewasm {
            subscriber: false,
            keep_managed: false,
            indexed: true,
            kept: Kept::Metadata,
        },
        Kind::KubeRs { metadata: true },
        Kind::ClientGo {
            protobuf: false,
            metadata: true,
        },
        Kind::Kubewasm {
            subscriber: false,
            keep_managed: false,
            indexed: true,
            kept: Kept::PhaseAndNode,
        },
    ];
    for &(objects, size) in cases {
        let extra = if size == 4096 { &projected[..] } else { &[] };
        let rows = cache_only.iter().chain(extra);
        for &kind in rows.filter(|k| chosen(&format!("memory:{}", k.label()))) {
            let row = memory(&rig, kind, objects, size);
            println!(
                "memory      {:<36} {:>7} x {:>5} B: {:>7.0} B/object = {:.2} x JSON, relist peak {:.2} x steady",
                row.client,
                row.objects,
                row.pod_bytes,
                row.per_object,
                row.json_ratio,
                row.relist_peak_ratio
            );
            results.memory.push(row);
        }
    }

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-results");
    std::fs::create_dir_all(&dir).expect("results folder");
    let path = dir.join("peers.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results).expect("json")).expect("write");
    println!("written to {}", path.display());
}
