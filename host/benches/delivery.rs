//! The cost of one event delivered into a plugin, per guest language (issue 8; feeds issue 9),
//! and what a loaded Go plugin holds against a Rust one.
//!
//! Each language's owner-chain plugin (Rust, Python, JavaScript, Go: same logic) handles a Pod
//! update on the example cluster: the host lends the event's objects as handles; the guest
//! reads the pod's key, finds its ReplicaSet and that one's Deployment (one `owner` call
//! each), counts the ReplicaSet's pods with an `index-keys` query (keys: a count needs no
//! handles), drops the handles it got, and logs one line (to a sink that drops it). Measured
//! on one live instance per language, as the dispatch loop calls it, the three languages in
//! rounds side by side (`support/rounds.rs`), beside a no-op plugin in Rust and in Go on the
//! same update.
//!
//! Then pod-phase in Rust and in Go, twenty-one copies each in one agent on the example cluster:
//! the component's size, and the resident memory each copy adds once its instance is kept
//! (idle, alive) and once it is released (idle past its period). One copy is loaded before
//! measuring, so compiled code, which copies share, is not counted per plugin. Printed as
//! `GO_PLUGIN {json}` lines for scripts/bench_report.py.
//!
//! Run with `cargo bench -p kubewasm --bench delivery` (after scripts/setup.sh, which installs
//! the Python and JavaScript tool chains).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kubewasm::gvk::Gvk;
use kubewasm::informer::Notification;
use kubewasm::informer::factory::{InformerFactory, Lease};
use kubewasm::object::Transform;
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::wasm::Instance;

#[path = "support/mod.rs"]
mod support;

use support::rounds::{self, Case, Plan};

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

fn main() {
    support::logging::as_the_agent();
    if let Ok(job) = std::env::var(CHILD) {
        let (release, path) = job.split_once(' ').expect("RELEASE_MS PATH");
        let release = Duration::from_millis(release.parse().expect("milliseconds"));
        println!("{}", rss_per_copy(path, release));
        return;
    }
    let plugins = [
        (
            "owner_chain_rust",
            Some(kubewasm_plugin_artifacts::OWNER_CHAIN),
            "Rust",
        ),
        (
            "owner_chain_python",
            kubewasm_plugin_artifacts::OWNER_CHAIN_PY,
            "Python",
        ),
        (
            "owner_chain_javascript",
            kubewasm_plugin_artifacts::OWNER_CHAIN_JS,
            "JavaScript",
        ),
        (
            "owner_chain_go",
            kubewasm_plugin_artifacts::OWNER_CHAIN_GO,
            "Go",
        ),
    ];
    let mut benches: Vec<(&'static str, Bench)> = plugins
        .into_iter()
        .map(|(name, path, language)| (name, setup(built(path, language), "{}")))
        .collect();
    benches.push((
        "noop_rust",
        setup(kubewasm_plugin_artifacts::BENCH, r#"{"work": "noop"}"#),
    ));
    benches.push((
        "noop_go",
        setup(built(kubewasm_plugin_artifacts::NOOP_GO, "Go"), "{}"),
    ));
    let mut cases: Vec<Case<'_>> = benches
        .iter_mut()
        .map(|(name, b)| {
            Case::new(name, move || {
                b.instance
                    .handle(&b.event)
                    .expect("no trap")
                    .expect("handled");
            })
        })
        .collect();
    // A JavaScript turn is about 200 calls; the run takes about 5 s.
    rounds::run(
        "delivery",
        Plan::new(40, Duration::from_millis(40)),
        &mut cases,
    );
    drop(cases);
    drop(benches);
    for (language, path) in [
        ("Rust", Some(kubewasm_plugin_artifacts::POD_PHASE)),
        ("Go", kubewasm_plugin_artifacts::POD_PHASE_GO),
    ] {
        loaded(language, built(path, language));
    }
}

/// Set in the child process that measures one loaded plugin: `RELEASE_MS PATH`.
const CHILD: &str = "KUBEWASM_BENCH_LOADED";

/// Copies of a plugin measured per plugin, besides the first.
const COPIES: usize = 20;

/// Waits up to a minute for `done`.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Size and resident memory per loaded copy of the plugin at `path`, printed as `GO_PLUGIN`.
/// Each figure comes from a fresh process of this benchmark: within one, what an earlier
/// measurement freed stays with the allocator and reads as memory a later one did not take.
fn loaded(language: &str, path: &str) {
    let bytes = std::fs::metadata(path).expect("plugin").len();
    let measure = |release: Duration| -> f64 {
        let out = std::process::Command::new(std::env::current_exe().expect("this benchmark"))
            .env(CHILD, format!("{} {path}", release.as_millis()))
            .output()
            .expect("the measuring process runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .expect("the measuring process prints bytes per copy")
    };
    let line = serde_json::json!({
        "language": language,
        "component_bytes": bytes,
        "released_rss_per_plugin": measure(Duration::from_millis(200)),
        "kept_rss_per_plugin": measure(Duration::from_secs(3600)),
    });
    println!("GO_PLUGIN {line}");
}

/// Resident memory each copy of the plugin at `path` adds, beyond the first, once every copy
/// has handled the example's pods and, with a short `release`, let go of its instance.
fn rss_per_copy(path: &str, release: Duration) -> f64 {
    use kubewasm::agent::{Agent, Cluster};
    let tokio = tokio::runtime::Runtime::new().expect("tokio");
    let mut config = kubewasm::config::HostConfig::default();
    config.plugins.defaults.delivery.release_idle_after = release;
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster");
    let options = support::plugins::agent_options(Cluster::Folder(examples), config);
    let agent = tokio.block_on(Agent::start(options)).expect("agent");
    let host = agent.plugins().clone();
    let dir = kubewasm_testenv::PluginFolder::new();
    let paths: Vec<_> = (0..=COPIES)
        .map(|i| dir.put(&format!("pod-phase-{i}"), path))
        .collect();
    let released = release < Duration::from_secs(60);
    let settled = |n: usize| {
        let status = host.status();
        status.len() == n
            && status
                .iter()
                .all(|s| s.delivered >= 6 && (!released || s.memory_bytes == 0))
    };
    host.load(&paths[0]).expect("loads");
    wait_for("the first copy", || settled(1));
    std::thread::sleep(Duration::from_millis(500));
    let before = support::rss::rss();
    for p in &paths[1..] {
        host.load(p).expect("loads");
    }
    wait_for("every copy", || settled(COPIES + 1));
    std::thread::sleep(Duration::from_millis(500));
    let per_copy = (support::rss::rss() - before) / COPIES as f64;
    host.shutdown();
    per_copy
}
struct Bench {
    _tokio: tokio::runtime::Runtime,
    _leases: Vec<Lease>,
    instance: Instance,
    event: Notification,
}

fn setup(plugin: &str, config: &str) -> Bench {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster");
    let folder =
        Arc::new(ManifestFolder::snapshot(&examples, Transform::default()).expect("folder"));
    let factory = InformerFactory::new(folder, tokio.handle().clone());
    let gvks = [
        Gvk::new("", "v1", "Pod"),
        Gvk::new("apps", "v1", "ReplicaSet"),
        Gvk::new("apps", "v1", "Deployment"),
    ];
    let leases: Vec<Lease> = gvks
        .iter()
        .map(|g| factory.acquire(g, &kubewasm::source::Scope::everything()))
        .collect();
    for lease in &leases {
        assert!(lease.informer().wait_synced(Duration::from_secs(10)));
    }
    let informers: Vec<_> = leases.iter().map(|l| l.informer().clone()).collect();
    let instance = support::instance::instance(plugin, config, &informers);
    let pod = leases[0]
        .informer()
        .store()
        .get("shop/web-5d8f7c9b6-hv4rd")
        .expect("example pod");
    let event = Notification::Updated {
        old: pod.clone(),
        new: pod,
    };
    Bench {
        _tokio: tokio,
        _leases: leases,
        instance,
        event,
    }
}

/// The plugin at `path`, or a panic that says how to build it.
fn built<'a>(path: Option<&'a str>, language: &str) -> &'a str {
    path.unwrap_or_else(|| panic!("{language} plugin not built: run scripts/setup.sh"))
}
