//! What the controller model costs (issue 76), with the bench plugin declaring a controller of
//! ConfigMaps that owns Services (`plugins/bench`, work `reconcile`):
//! - `reconcile_call`, `reconcile_host`: 2,000 reconciles of a no-op controller, as calls on a
//!   live instance (the call alone) and through an agent's worker on a manifests folder of
//!   2,000 ConfigMaps (asked by key, queued, taken, the object read from the cache, the call,
//!   its outcome and accounting); in rounds side by side (`support/rounds.rs`). The worker's
//!   own time on a CPU per reconcile (the kernel's schedstat of its thread), less the call
//!   alone, is the host's work per reconcile beyond the call; the wall-clock difference adds
//!   asking for the keys and waking the worker. `WORKER {json}`.
//! - The storm: 10,000 updates of the Services owned by 100 ConfigMaps (ten each, ten updates
//!   each), applied to the agent's Service cache as fast as it takes them, for a controller
//!   whose reconcile takes no time, one whose reconcile takes 1 ms, and one taking no time
//!   with `reconcileDebounceMs: 100`; the reconciles each made. Printed as `STORM {json}`.
//! - The queue's memory: 100,000 keys waiting in a `WorkQueue`, heap bytes per key by a
//!   counting allocator, for keys that share their text with the cache (an event on the
//!   reconciled type) and keys made anew (an owner named by a child). `QUEUE {json}`.
//! - Finalized objects: N ConfigMaps on the test environment's real kube-apiserver, each
//!   already carrying the controller's finalizer (100,000; `KUBEWASM_BENCH_QUICK`: 5,000); an
//!   agent starts, syncs and reconciles each once; then, over 30 s more, its writes (its own
//!   count and the API server's audit log), relists and events received. `FINALIZED {json}`.
//!
//! Run with `cargo bench -p kubewasm --bench controllers` (the last part needs
//! `KUBEWASM_SERVERS`, which scripts/bench.sh sets).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubewasm::agent::{Agent, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::controller::WorkQueue;
use kubewasm::gvk::Gvk;
use kubewasm::object::{Key, KubeObject, Transform};
use kubewasm::source::SourceEvent;
use kubewasm::wasm::Call;
use kubewasm::write::{Verb, WriteGrant};
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

#[path = "support/mod.rs"]
mod support;

use support::plugins::status;
use support::rounds::{self, Case, Plan};

/// The agent's allocator, counted (for the queue's memory; paused while timing).
#[global_allocator]
static GLOBAL: support::alloc::Counting = support::alloc::Counting;

/// Reconciles per case call in the rounds, each of another ConfigMap: the queue folds a key
/// asked twice into one reconcile.
const BATCH: usize = 2_000;
/// The storm's parents, children per parent, and updates per child.
const STORM_PARENTS: usize = 100;
const STORM_CHILDREN: usize = 10;
const STORM_UPDATES: usize = 10;
/// How long an agent is given to settle.
const WAIT: Duration = Duration::from_secs(300);

fn config_map() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

fn service() -> Gvk {
    Gvk::new("", "v1", "Service")
}

/// The bench plugin's configuration for a controller whose reconcile takes `micros`.
fn controller_config(micros: u64, finalizer: bool) -> String {
    json!({"work": "reconcile", "arg": micros.to_string(), "finalizer": finalizer}).to_string()
}

/// One controller the bench plugin runs as.
struct Ctl {
    name: &'static str,
    /// How long its reconcile takes, in microseconds.
    micros: u64,
    finalizer: bool,
    /// Its `reconcileDebounceMs`.
    debounce_ms: u64,
}

impl Ctl {
    const fn new(name: &'static str, micros: u64) -> Self {
        Self {
            name,
            micros,
            finalizer: false,
            debounce_ms: 0,
        }
    }
}

/// A host configuration running the bench plugin as each of `plugins`, granted what a
/// controller of ConfigMaps owning Services needs: patch of ConfigMaps (the finalizer) and
/// delete of Services (pruning).
fn host_config(plugins: &[Ctl]) -> HostConfig {
    let mut config = HostConfig::default();
    for ctl in plugins {
        let mut settings = config.plugins.defaults.clone();
        settings.config = controller_config(ctl.micros, ctl.finalizer);
        settings.delivery.debounce = Duration::from_millis(ctl.debounce_ms);
        settings.grants.writes = vec![
            WriteGrant {
                resources: vec![config_map()],
                subresources: Vec::new(),
                verbs: vec![Verb::Patch],
                namespaces: None,
            },
            WriteGrant {
                resources: vec![service()],
                subresources: Vec::new(),
                verbs: Verb::ALL.to_vec(),
                namespaces: None,
            },
        ];
        config.plugins.named.insert(ctl.name.to_owned(), settings);
    }
    config
}

/// Reconcile calls `name` has made so far.
fn reconciles(agent: &Agent, name: &str) -> u64 {
    status(agent, name)
        .calls
        .get("reconcile")
        .map_or(0, |h| h.count)
}

/// Waits until `name` has synced, has nothing waiting, and its reconcile count held still
/// for `still`.
fn settle(agent: &Agent, name: &str, still: Duration) {
    let end = Instant::now() + WAIT;
    let mut last = (u64::MAX, Instant::now());
    loop {
        let s = status(agent, name);
        let count = s.calls.get("reconcile").map_or(0, |h| h.count);
        if count != last.0 || !(s.synced && s.idle && s.keys_waiting == 0) {
            last = (count, Instant::now());
        } else if last.1.elapsed() >= still {
            return;
        }
        assert!(Instant::now() < end, "{name} did not settle: {s:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn parent(namespace: &str, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{namespace}-{name}")},
        "data": {"replicas": "3"},
    })
}

fn child(parent_name: &str, name: &str, update: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": name, "namespace": "storm",
            "uid": format!("uid-storm-{name}"),
            "resourceVersion": (1_000 + update).to_string(),
            "annotations": {"bench/update": update.to_string()},
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": parent_name,
                "uid": format!("uid-storm-{parent_name}"), "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": parent_name}},
    })
}

/// A manifests folder with the rounds' ConfigMaps and the storm's parents and children.
fn cluster() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut text = String::new();
    for i in 0..BATCH {
        text.push_str(&parent("bench", &format!("parent-{i}")).to_string());
        text.push('\n');
    }
    for p in 0..STORM_PARENTS {
        let name = format!("parent-{p}");
        text.push_str(&parent("storm", &name).to_string());
        text.push('\n');
        for c in 0..STORM_CHILDREN {
            text.push_str(&child(&name, &format!("child-{p}-{c}"), 0).to_string());
            text.push('\n');
        }
    }
    // One JSON object a line reads as a YAML stream of documents only with separators.
    let yaml = text.trim_end().replace('\n', "\n---\n");
    std::fs::write(dir.path().join("objects.yaml"), yaml).expect("write");
    dir
}

/// An agent on the manifests folder `cluster` running `plugins` from the bench plugin.
fn agent(
    tasks: &tokio::runtime::Runtime,
    cluster: &Path,
    plugins: &[Ctl],
) -> (Agent, kubewasm_testenv::PluginFolder) {
    let options =
        support::plugins::agent_options(Cluster::Folder(cluster.to_owned()), host_config(plugins));
    let agent = tasks.block_on(Agent::start(options)).expect("agent");
    let dir = kubewasm_testenv::PluginFolder::new();
    for ctl in plugins {
        let path = dir.put(ctl.name, kubewasm_plugin_artifacts::BENCH);
        agent.plugins().load(&path).expect("the controller loads");
    }
    (agent, dir)
}

/// The rounds: `BATCH` reconciles as calls alone, and through the agent's worker.
fn per_reconcile(agent: &Agent) {
    let keys: Vec<String> = (0..BATCH).map(|i| format!("bench/parent-{i}")).collect();
    let informer = agent
        .factory()
        .get(&config_map())
        .expect("ConfigMaps cached");
    let mut instance = support::instance::instance(
        kubewasm_plugin_artifacts::BENCH,
        &controller_config(0, false),
        std::slice::from_ref(&informer),
    );
    let call_keys = keys.clone();
    let call = Case::new("reconcile_call", move || {
        for key in &call_keys {
            instance
                .call(Call::Reconcile(key))
                .expect("no trap")
                .expect("reconciled");
            std::hint::black_box((instance.take_staged(), instance.take_effects()));
        }
    });
    let worker = support::cpu::thread_named("plugin-noop");
    let mut worker_ns = Vec::new();
    let host = Case::new("reconcile_host", || {
        let (before, cpu) = (reconciles(agent, "noop"), support::cpu::on_cpu_ns(worker));
        for key in &keys {
            agent
                .plugins()
                .reconcile("noop", key)
                .expect("a controller");
        }
        while reconciles(agent, "noop") < before + BATCH as u64 {
            std::thread::sleep(Duration::from_micros(50));
        }
        worker_ns.push((support::cpu::on_cpu_ns(worker) - cpu) as f64 / BATCH as f64);
    });
    // Two cases of a few milliseconds a call, 60 ms a turn: about 4 s.
    support::alloc::paused(|| {
        rounds::run(
            "controllers",
            Plan::new(30, Duration::from_millis(60)),
            &mut [call, host],
        );
    });
    println!("WORKER {}", json!({"cpu_ns_per_reconcile": worker_ns}));
}

/// The storm, `repeats` times: reconciles made by each of `names` per storm.
fn storm(agent: &Agent, names: &[&str], repeats: usize) {
    let services = agent.factory().get(&service()).expect("Services cached");
    for repeat in 0..repeats {
        let updates: Vec<Arc<KubeObject>> = (0..STORM_UPDATES)
            .flat_map(|u| {
                (0..STORM_PARENTS).flat_map(move |p| (0..STORM_CHILDREN).map(move |c| (u, p, c)))
            })
            .map(|(u, p, c)| {
                let update = 1 + repeat * STORM_UPDATES + u;
                let value = child(&format!("parent-{p}"), &format!("child-{p}-{c}"), update);
                Arc::new(KubeObject::from_value(value, &Transform::default()).expect("a Service"))
            })
            .collect();
        let before: Vec<u64> = names.iter().map(|n| reconciles(agent, n)).collect();
        let started = Instant::now();
        for object in &updates {
            services.apply(SourceEvent::Applied(object.clone()));
        }
        let applied = started.elapsed();
        for name in names {
            settle(agent, name, Duration::from_millis(500));
        }
        let made: Vec<u64> = names
            .iter()
            .zip(&before)
            .map(|(n, b)| reconciles(agent, n) - b)
            .collect();
        let line = json!({
            "events": updates.len(),
            "parents": STORM_PARENTS,
            "applied_ms": applied.as_secs_f64() * 1e3,
            "reconciles": names.iter().zip(&made).map(|(n, m)| json!({"plugin": n, "reconciles": m})).collect::<Vec<_>>(),
        });
        println!("STORM {line}");
    }
}

/// Heap bytes per key of `n` keys waiting, shared with the cache and made anew.
fn queue_memory(n: usize) {
    let texts: Vec<String> = (0..n)
        .map(|i| format!("team-{i:06}/web-frontend"))
        .collect();
    let cached: Vec<Key> = texts.iter().map(|t| Key::from(t.as_str())).collect();
    let measure = |fill: &dyn Fn(&mut WorkQueue)| {
        let base = support::alloc::live();
        let mut queue = WorkQueue::new(Instant::now());
        fill(&mut queue);
        assert_eq!(queue.waiting(), n, "every key waits once");
        let held = support::alloc::live() - base;
        drop(queue);
        held as f64 / n as f64
    };
    let shared = measure(&|q: &mut WorkQueue| {
        for key in &cached {
            q.add(key.clone());
        }
    });
    let made = measure(&|q: &mut WorkQueue| {
        for text in &texts {
            q.add(Key::from(text.as_str()));
        }
    });
    // A key added again while it waits costs nothing more.
    let again = measure(&|q: &mut WorkQueue| {
        for _ in 0..3 {
            for text in &texts {
                q.add(Key::from(text.as_str()));
            }
        }
    });
    let line = json!({
        "keys": n,
        "key_text_bytes": texts.first().map_or(0, String::len),
        "bytes_per_key_shared": shared,
        "bytes_per_key_made": made,
        "bytes_per_key_added_thrice": again,
    });
    println!("QUEUE {line}");
}

/// ConfigMaps on a real API server each carrying the finalizer already: an agent's writes,
/// relists and events after it reconciled them all.
async fn finalized(objects: usize, quiet: Duration) -> anyhow::Result<serde_json::Value> {
    let env = TestEnv::start().await?;
    let client = env.client().await?;
    resources::create_namespace(&client, "held").await?;
    let api = Api::<ConfigMap>::namespaced(client.clone(), "held");
    let finalizer = kubewasm::controller::finalizer("held");
    let began = Instant::now();
    support::each::each(32, 0..objects, |i| {
        let api = api.clone();
        let finalizer = finalizer.clone();
        async move {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("app-{i}"), "finalizers": [finalizer],
                             "labels": {"app": format!("a{}", i % 100)}},
                "data": {"replicas": "3", "image": "registry.example/app:1.0"},
            }))?;
            api.create(&PostParams::default(), &cm).await?;
            anyhow::Ok(())
        }
    })
    .await?;
    let created = began.elapsed();
    let writes_before = env.audited_writes()?.len();
    let options = support::plugins::agent_options(
        Cluster::Kube(client.clone()),
        host_config(&[Ctl {
            finalizer: true,
            ..Ctl::new("held", 0)
        }]),
    );
    let started = Instant::now();
    let agent = Agent::start(options).await?;
    let dir = kubewasm_testenv::PluginFolder::new();
    agent
        .plugins()
        .load(&dir.put("held", kubewasm_plugin_artifacts::BENCH))?;
    let end = Instant::now() + WAIT;
    while reconciles(&agent, "held") < objects as u64 {
        anyhow::ensure!(Instant::now() < end, "{:#?}", status(&agent, "held"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_reconciled = started.elapsed();
    let informer = agent
        .factory()
        .get(&config_map())
        .ok_or_else(|| anyhow::anyhow!("ConfigMaps are cached"))?;
    let (lists, received) = (informer.lists(), informer.received());
    tokio::time::sleep(quiet).await;
    let s = status(&agent, "held");
    // Writes to ConfigMaps since the agent started, by anyone (the benchmark wrote nothing
    // more): the held ones, and the others (those of kube-system carry no finalizer: the
    // controller adds it, as it does to any ConfigMap).
    let audited = env.audited_writes()?;
    let (held, others): (Vec<_>, Vec<_>) = audited[writes_before..]
        .iter()
        .filter(|w| w.resource == "configmaps")
        .partition(|w| w.namespace == "held");
    let named = |writes: &[&kubewasm_testenv::Audited]| -> Vec<String> {
        writes
            .iter()
            .take(5)
            .map(|w| format!("{} {}/{}", w.verb, w.namespace, w.name))
            .collect()
    };
    let line = json!({
        "objects": objects,
        "created_s": created.as_secs_f64(),
        "all_reconciled_s": all_reconciled.as_secs_f64(),
        "reconciles": s.calls.get("reconcile").map_or(0, |h| h.count),
        "finalizes": s.calls.get("finalize").map_or(0, |h| h.count),
        "quiet_s": quiet.as_secs_f64(),
        "writes_sent": s.writes_sent,
        "writes_audited": held.len(),
        "first_writes": named(&held),
        "other_writes_audited": others.len(),
        "other_writes": named(&others),
        "relists": informer.lists() - 1,
        "relists_while_quiet": informer.lists() - lists,
        "events_while_quiet": informer.received() - received,
    });
    drop(agent);
    Ok(line)
}

fn main() {
    support::logging::as_the_agent();
    let quick = std::env::var_os("KUBEWASM_BENCH_QUICK").is_some();
    // First, while nothing else allocates or frees: the counts are the queue's alone.
    queue_memory(100_000);
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    let folder = cluster();
    let controllers = [
        Ctl::new("noop", 0),
        Ctl::new("slow", 1_000),
        Ctl {
            debounce_ms: 100,
            ..Ctl::new("debounced", 0)
        },
    ];
    let names: Vec<&str> = controllers.iter().map(|c| c.name).collect();
    let (agent, _plugins) = agent(&tasks, folder.path(), &controllers);
    for name in &names {
        settle(&agent, name, Duration::from_millis(500));
    }
    per_reconcile(&agent);
    storm(&agent, &names, if quick { 1 } else { 3 });
    drop(agent);
    let objects = if quick { 5_000 } else { 100_000 };
    let line = tasks
        .block_on(finalized(objects, Duration::from_secs(30)))
        .expect("the finalized objects");
    println!("FINALIZED {line}");
}
