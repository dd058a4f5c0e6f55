//! Replicas on a simulated cluster of real size: kwok (sigs.k8s.io/kwok, built by
//! `scripts/test-tools.sh kwok`) keeps 500 fake nodes alive (node status and Lease heartbeats)
//! and runs 20,000 pods in 200 namespaces on them, on the test environment's real
//! kube-apiserver 1.36 with `ShardedListAndWatch` on. For 1, 2 and 3 `kubewasm run` replicas
//! with sharding on (by namespace, default Lease settings), each running the audit-log plugin
//! on Pods (whole objects, one JSON log line per event): each replica's time to `/readyz`, the
//! time until the group delivers all 64 slices and until every pod reached a handler as an
//! initial add, each replica's peak RSS (`VmHWM`) and CPU, and, while 100 pod status writes a
//! second churn the cluster for 30 s, the latency from the write to the handler's log line
//! (p50, p99). A write's clock starts just before its request is sent, so the latency
//! includes the API server's write; the median write round trip is reported beside it.
//! Over the same 30 s, the API server's audit log counts the group's Lease writes: each
//! member's own Lease, and the election's.
//!
//! Everything shares the machine: etcd, kube-apiserver, kwok, the replicas and this process.
//!
//! Run with `cargo bench -p kubewasm --bench cluster` (needs `KUBEWASM_SERVERS` and
//! `KUBEWASM_KWOK`, which scripts/bench.sh sets). `KUBEWASM_BENCH_QUICK=1`: a tenth of the size.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubewasm::serve::Status;
use kubewasm_testenv::agent_process::{
    AgentProcess, Delivered, free_address, http_get, resident, run_args,
};
use kubewasm_testenv::{TestEnv, resources};
use serde_json::{Value, json};

mod support;

const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm");
const WAIT: Duration = Duration::from_secs(600);
/// Status writes a second while the latency is measured.
const CHURN_RATE: f64 = 100.0;

/// The sizes: nodes, namespaces, pods, seconds of churn.
struct Size {
    nodes: usize,
    namespaces: usize,
    pods: usize,
    churn: Duration,
}

/// kwok, run as a child process until dropped.
struct Kwok(Child);

impl Kwok {
    fn start(env: &TestEnv) -> anyhow::Result<Self> {
        let dir =
            PathBuf::from(std::env::var_os("KUBEWASM_KWOK").ok_or_else(|| {
                anyhow::anyhow!("KUBEWASM_KWOK: run `scripts/test-tools.sh kwok`")
            })?);
        let log = std::fs::File::create(env.dir().join("kwok.log"))?;
        let child = Command::new(dir.join("kwok"))
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .arg("--config")
            .arg(dir.join("kwok-stages.yaml"))
            .args(["--manage-all-nodes", "--cidr=10.0.0.0/12", "--v=WARN"])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Self(child))
    }
}

impl Drop for Kwok {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Namespace `n`'s name: names that differ early (FNV-1a clumps names that differ in their
/// last bytes, docs/design/sharding.md).
fn namespace(n: usize) -> String {
    format!("n-{:08x}", (n as u32).wrapping_mul(0x9e37_79b1))
}

/// The nodes, namespaces and pods (each bound to a node), created; returns every pod's key.
async fn populate(client: &kube::Client, size: &Size) -> anyhow::Result<Vec<(String, String)>> {
    let nodes = Api::<Node>::all(client.clone());
    support::each::each(16, 0..size.nodes, |i| {
        let nodes = nodes.clone();
        async move {
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": format!("kwok-node-{i}"),
                                 "annotations": {"kwok.x-k8s.io/node": "fake"},
                                 "labels": {"type": "kwok", "topology.kubernetes.io/zone": format!("z{}", i % 3)}},
                }))?;
                nodes.create(&PostParams::default(), &node).await?;
                anyhow::Ok(())
            }
        })
        .await?;
    for n in 0..size.namespaces {
        resources::create_namespace(client, &namespace(n)).await?;
    }
    let keys: Vec<(String, String)> = (0..size.pods)
        .map(|i| (namespace(i % size.namespaces), format!("web-{i}")))
        .collect();
    support::each::each(32, keys.iter().enumerate(), |(i, (ns, name))| {
            let api = Api::<Pod>::namespaced(client.clone(), ns);
            let node = format!("kwok-node-{}", i % size.nodes);
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"app": "web", "shard": format!("s{}", i % 10)}},
                    "spec": {"nodeName": node, "containers": [{
                        "name": "web", "image": "registry.example/web:1.0",
                        "ports": [{"containerPort": 8080}],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    }]},
                }))?;
                api.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .await?;
    Ok(keys)
}

/// Whether any pod is not Running yet (kwok has not reached it).
async fn any_not_running(client: &kube::Client) -> anyhow::Result<bool> {
    let pods = Api::<Pod>::all(client.clone());
    let mut params = ListParams::default()
        .fields("status.phase!=Running")
        .limit(100);
    loop {
        let page = pods.list_metadata(&params).await?;
        if !page.items.is_empty() {
            return Ok(true);
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(false),
        }
    }
}

/// One replica and what its audit plugin delivered: key, resourceVersion, when, initial.
struct Replica {
    process: AgentProcess,
    address: SocketAddr,
    started: Instant,
    ready: Option<Duration>,
    delivered: Vec<Delivered>,
}

impl Replica {
    fn start(dir: &Path, kubeconfig: &Path) -> anyhow::Result<Self> {
        let address = free_address()?;
        let args = run_args(dir, kubeconfig, address);
        let args: Vec<&std::ffi::OsStr> = args.iter().map(OsString::as_os_str).collect();
        Ok(Self {
            process: AgentProcess::start(KUBEWASM.as_ref(), &args)?,
            address,
            started: Instant::now(),
            ready: None,
            delivered: Vec::new(),
        })
    }

    /// Reads its log lines and, until it first answers, `/readyz`.
    fn pump(&mut self) {
        if self.ready.is_none() && http_get(self.address, "/readyz").0 == 200 {
            self.ready = Some(self.started.elapsed());
        }
        for (_, line) in self.process.take_lines() {
            if let Ok(record) = serde_json::from_str::<Value>(&line)
                && let Some(delivered) = Delivered::from_log(&record, "audit")
            {
                self.delivered.push(delivered);
            }
        }
    }

    fn status(&self) -> Option<Status> {
        let (code, body) = http_get(self.address, "/status");
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }
}

/// Polls `done` every 200 ms, reading the replicas meanwhile, for at most [`WAIT`].
async fn until(replicas: &mut [Replica], what: &str, mut done: impl FnMut(&[Replica]) -> bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        for r in replicas.iter_mut() {
            r.pump();
        }
        if done(replicas) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen in {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `q` quantile of `sorted`, in milliseconds.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Writes a churn condition into pods' status at [`CHURN_RATE`] for `length`, cycling through
/// `keys` (the message names the group, so no write repeats another): each write's resourceVersion, the moment just before it was sent, and its round trip.
async fn churn(
    client: &kube::Client,
    keys: &[(String, String)],
    group: usize,
    length: Duration,
) -> Vec<(String, u64, jiff::Timestamp, Duration)> {
    let total = (length.as_secs_f64() * CHURN_RATE) as usize;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / CHURN_RATE));
    let mut writes = tokio::task::JoinSet::new();
    for n in 0..total {
        ticks.tick().await;
        let (ns, name) = keys[(group * 1_000 + n * 7919) % keys.len()].clone();
        let api = Api::<Pod>::namespaced(client.clone(), &ns);
        writes.spawn(async move {
            let patch = json!({"status": {"conditions": [{
                "type": "kubewasm.dev/Churn", "status": "True", "message": format!("{group}-{n}"),
            }]}});
            let sent = jiff::Timestamp::now();
            let began = Instant::now();
            let pod = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .expect("a status write");
            let rv = pod
                .metadata
                .resource_version
                .and_then(|rv| rv.parse().ok())
                .expect("a resourceVersion");
            // Each message is new, so each write is a change with a new version.
            (format!("{ns}/{name}"), rv, sent, began.elapsed())
        });
    }
    writes.join_all().await
}

/// Writes to group `group`'s Leases so far (the API server's audit log): its members' Leases
/// together, and the election's.
fn lease_writes(env: &TestEnv, group: &str) -> (usize, usize) {
    let member = format!("{group}-member-");
    let writes = env.audited_writes().expect("the audit log");
    let leases = writes
        .iter()
        .filter(|w| w.resource == "leases" && w.namespace == "default");
    leases.fold((0, 0), |(members, election), w| {
        if w.name.starts_with(&member) {
            (members + 1, election)
        } else if w.name == group {
            (members, election + 1)
        } else {
            (members, election)
        }
    })
}

/// One group of `n` replicas from a cold start to the end of its churn: one `CLUSTER` line.
async fn group(
    env: &TestEnv,
    client: &kube::Client,
    keys: &[(String, String)],
    size: &Size,
    n: usize,
) -> anyhow::Result<Value> {
    let dir = kubewasm_testenv::agent_process::run_dir(
        &[("audit", kubewasm_plugin_artifacts::AUDIT_LOG.as_ref())],
        &format!(
            "leaderElection: {{enabled: true, namespace: default, name: cluster-{n}}}\n\
             sharding: {{enabled: true, key: namespace}}\n\
             # Every delivery is logged: no line may be dropped for the rate.\n\
             defaults: {{limits: {{logLinesPerSecond: 1000000, logBurst: 1000000}}}}\n\
             plugins: {{audit: {{config: {{resources: [v1/Pod]}}}}}}\n"
        ),
    )?;
    let started = Instant::now();
    let mut replicas = (0..n)
        .map(|_| Replica::start(dir.path(), env.kubeconfig()))
        .collect::<anyhow::Result<Vec<_>>>()?;
    until(&mut replicas, "every replica ready", |rs| {
        rs.iter().all(|r| r.ready.is_some())
    })
    .await;
    until(&mut replicas, "all 64 slices delivered", |rs| {
        let shares: Option<Vec<u32>> = rs
            .iter()
            .map(|r| {
                let split = r.status()?.sharding?;
                (split.members.len() == rs.len()).then_some(split.delivering)
            })
            .collect();
        shares.is_some_and(|s| s.iter().sum::<u32>() == 64)
    })
    .await;
    let sliced = started.elapsed();
    let pods = keys.len();
    until(
        &mut replicas,
        "every pod delivered as an initial add",
        |rs| {
            let seen: HashSet<&str> = rs
                .iter()
                .flat_map(|r| r.delivered.iter())
                .filter(|d| d.initial)
                .map(|d| d.key.as_str())
                .collect();
            seen.len() == pods
        },
    )
    .await;
    let all_delivered = started.elapsed();

    let group = format!("cluster-{n}");
    let (members_before, election_before) = lease_writes(env, &group);
    let churned = Instant::now();
    let writes = churn(client, keys, n, size.churn).await;
    let window = churned.elapsed().as_secs_f64();
    let (members_after, election_after) = lease_writes(env, &group);
    let wanted: HashMap<(String, u64), jiff::Timestamp> = writes
        .iter()
        .map(|(key, rv, sent, _)| ((key.clone(), *rv), *sent))
        .collect();
    let mut latencies: Vec<f64> = Vec::new();
    until(&mut replicas, "every status write delivered", |rs| {
        latencies = rs
            .iter()
            .flat_map(|r| r.delivered.iter())
            .filter_map(|d| {
                let sent = wanted.get(&(d.key.clone(), d.rv))?;
                Some(d.at.duration_since(*sent).as_secs_f64() * 1e3)
            })
            .collect();
        latencies.len() >= wanted.len()
    })
    .await;
    latencies.sort_by(f64::total_cmp);
    // A delivery before its write was sent would be a stale version matched by mistake.
    let earliest = latencies.first().copied().unwrap_or_default();
    assert!(
        earliest > -1.0,
        "a write delivered {earliest} ms before it was sent"
    );
    let mut round_trips: Vec<f64> = writes.iter().map(|w| w.3.as_secs_f64() * 1e3).collect();
    round_trips.sort_by(f64::total_cmp);

    let mut per_replica = Vec::new();
    for r in &mut replicas {
        let (_, peak) = resident(r.process.id()).unwrap_or_default();
        let cpu = support::cpu::process(r.process.id());
        let initial = r.delivered.iter().filter(|d| d.initial).count();
        let slices = r.status().and_then(|s| s.sharding).map(|s| s.delivering);
        per_replica.push(json!({
            "ready_s": r.ready.unwrap_or_default().as_secs_f64(),
            "peak_rss_bytes": peak, "cpu_s": cpu.as_secs_f64(),
            "initial_adds": initial, "slices": slices,
        }));
        r.process.terminate(Duration::from_secs(30))?;
    }
    Ok(json!({
        "replicas": n, "nodes": size.nodes, "pods": pods, "namespaces": size.namespaces,
        "all_slices_s": sliced.as_secs_f64(), "all_delivered_s": all_delivered.as_secs_f64(),
        "churn_writes": writes.len(), "churn_s": size.churn.as_secs_f64(),
        "latency_ms": {"p50": quantile(&latencies, 0.5), "p99": quantile(&latencies, 0.99),
                       "max": latencies.last().copied().unwrap_or(f64::NAN)},
        "write_round_trip_ms": {"p50": quantile(&round_trips, 0.5)},
        "lease_writes_per_s": {
            "per_member": (members_after - members_before) as f64 / window / n as f64,
            "election": (election_after - election_before) as f64 / window,
        },
        "each": per_replica,
    }))
}

fn main() {
    support::logging::as_the_agent();
    let size = if std::env::var_os("KUBEWASM_BENCH_QUICK").is_some() {
        Size {
            nodes: 50,
            namespaces: 20,
            pods: 2_000,
            churn: Duration::from_secs(10),
        }
    } else {
        Size {
            nodes: 500,
            namespaces: 200,
            pods: 20_000,
            churn: Duration::from_secs(30),
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let env = TestEnv::start().await.expect("the test environment");
        let client = env.client().await.expect("a client");
        let _kwok = Kwok::start(&env).expect("kwok");
        let began = Instant::now();
        let keys = populate(&client, &size).await.expect("the cluster");
        let created = began.elapsed();
        let deadline = Instant::now() + WAIT;
        while any_not_running(&client).await.expect("a list") {
            assert!(
                Instant::now() < deadline,
                "kwok did not run every pod in {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        eprintln!(
            "cluster: {} nodes and {} pods created in {:.0} s, all Running after {:.0} s",
            size.nodes,
            size.pods,
            created.as_secs_f64(),
            began.elapsed().as_secs_f64()
        );
        for n in 1..=3 {
            let line = group(&env, &client, &keys, &size, n)
                .await
                .expect("a group of replicas");
            println!("CLUSTER {line}");
        }
    });
}
