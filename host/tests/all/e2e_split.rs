//! Replicas splitting the work, end to end: `kubewasm run` child processes with sharding on,
//! against a real kube-apiserver (kubewasm-testenv's 1.36 with `ShardedListAndWatch` on: each
//! replica lists and watches its share only; `e2e_shard.rs` covers a server without it).
//! Each replica runs the audit-log plugin, whose log line per event (JSON logs, timestamped)
//! records what it delivered. 3,000 ConfigMaps in 100 namespaces. Every test also checks,
//! over everything every replica delivered, that no object was delivered by two replicas in
//! overlapping time.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubewasm::serve::Status;
use kubewasm::shard::{Cuts, fnv1a64};
use kubewasm::source::kube::stats::ShardFilter;
use kubewasm_testenv::agent_process::{
    AgentProcess, Delivered, free_address, http_get, run_args, run_dir,
};
use kubewasm_testenv::{TestEnv, resources};
use serde_json::{Value, json};

const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm");
const NAMESPACES: usize = 100;
const PER_NAMESPACE: usize = 30;
/// The Leases' duration in the test configuration; renew deadline 2/3 of it.
const LEASE: Duration = Duration::from_secs(6);
const RENEW_DEADLINE: Duration = Duration::from_secs(4);
/// How often members renew and list (the host's fixed period).
const RETRY: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(180);

/// A `delivering N of 64 slices` line of a replica.
#[derive(Debug, Clone)]
struct Step {
    at: jiff::Timestamp,
    /// The slices delivered from then on.
    slices: u64,
    /// Where they begin.
    cuts: Cuts,
    took_over: u64,
}

impl Step {
    /// True when this step delivers the objects of `hash`.
    fn holds(&self, hash: u64) -> bool {
        self.slices & (1 << self.cuts.slice_of(hash)) != 0
    }
}

/// One `kubewasm run` replica and what it printed.
struct Replica {
    process: AgentProcess,
    address: SocketAddr,
    delivered: Vec<Delivered>,
    steps: Vec<Step>,
    alive: bool,
}

impl Replica {
    /// Reads what it printed since the last look.
    fn pump(&mut self) {
        for (_, line) in self.process.take_lines() {
            let Ok(record) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let at = record["timestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            let Some(at) = at else { continue };
            let fields = &record["fields"];
            let message = fields["message"].as_str().unwrap_or_default();
            if let Some(delivered) = Delivered::from_log(&record, "audit") {
                self.delivered.push(delivered);
            } else if message.starts_with("delivering ") && message.ends_with(" slices") {
                let slices = fields["slices"].as_str().unwrap_or_default();
                let cuts = fields["cuts"].as_str().and_then(Cuts::from_text);
                self.steps.push(Step {
                    at,
                    slices: u64::from_str_radix(slices, 16).unwrap_or_default(),
                    cuts: cuts.expect("a delivering line names its cuts"),
                    took_over: fields["took_over"].as_u64().unwrap_or_default(),
                });
            }
        }
    }

    /// Its `/status`, when it answers.
    fn status(&self) -> Option<Status> {
        let (code, body) = http_get(self.address, "/status");
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }
}

/// The API server, the objects, and the replicas by name.
struct Group {
    env: TestEnv,
    client: kube::Client,
    dir: tempfile::TempDir,
    replicas: BTreeMap<String, Replica>,
    /// Every object's key.
    keys: BTreeSet<String>,
    /// Every object's hash (of its namespace or uid, as the share is cut).
    hash_of: BTreeMap<String, u64>,
    /// When each replica was killed or cut off (it delivers nothing after).
    ended: BTreeMap<String, jiff::Timestamp>,
}

impl Group {
    /// An API server holding the objects, and the configuration replicas start from.
    async fn start(key: &str) -> anyhow::Result<Self> {
        Self::start_with(key, "{config: {selector: test=split}}").await
    }

    /// As [`Self::start`], with `audit` the audit plugin's settings (a YAML mapping).
    async fn start_with(key: &str, audit: &str) -> anyhow::Result<Self> {
        let env = TestEnv::start().await?;
        let client = env.client().await?;
        // alert keeps state: its events' state moves with their namespaces.
        let dir = run_dir(
            &[
                ("audit", kubewasm_plugin_artifacts::AUDIT_LOG.as_ref()),
                ("alert", kubewasm_plugin_artifacts::SERVICE_ALERT.as_ref()),
            ],
            &format!(
                "leaderElection: {{enabled: true, namespace: default, name: split, leaseDurationSeconds: {}}}\nsharding: {{enabled: true, key: {key}}}\n\
                 # Every delivery is logged: no line may be dropped for the rate.\n\
                 defaults: {{limits: {{logLinesPerSecond: 1000000, logBurst: 1000000}}}}\n\
                 plugins: {{audit: {audit}}}\n",
                LEASE.as_secs()
            ),
        )?;
        let mut keys = BTreeSet::new();
        let mut creates = Vec::new();
        for n in 0..NAMESPACES {
            // Names that differ only at the end, as clusters name them: FNV-1a puts them in
            // two slices of 64 under equal cuts, so by namespace the group must cut slices
            // by the namespaces there are (shard::Cuts).
            let ns = format!("team-{n:03}");
            resources::create_namespace(&client, &ns).await?;
            for i in 0..PER_NAMESPACE {
                keys.insert(format!("{ns}/m-{i}"));
                creates.push((ns.clone(), format!("m-{i}")));
            }
        }
        let by_uid = key == "uid";
        let results: Vec<anyhow::Result<(String, u64)>> = futures::stream::iter(creates)
            .map(|(ns, name)| {
                let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
                async move {
                    let map: ConfigMap = serde_json::from_value(
                        json!({"metadata": {"name": name, "labels": {"test": "split"}}, "data": {"round": "0"}}),
                    )?;
                    let made = api.create(&PostParams::default(), &map).await?;
                    let uid = made.metadata.uid.unwrap_or_default();
                    // The API server's hash of the field the share is cut by.
                    let hash = fnv1a64(if by_uid { &uid } else { &ns });
                    Ok((format!("{ns}/{name}"), hash))
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let hash_of = results.into_iter().collect::<anyhow::Result<_>>()?;
        Ok(Self {
            env,
            client,
            dir,
            replicas: BTreeMap::new(),
            keys,
            hash_of,
            ended: BTreeMap::new(),
        })
    }

    /// Starts replica `name`, reaching the API server through `kubeconfig`.
    fn add(&mut self, name: &str, kubeconfig: &std::path::Path) -> anyhow::Result<()> {
        let address = free_address()?;
        let args = run_args(self.dir.path(), kubeconfig, address);
        let args: Vec<&std::ffi::OsStr> = args.iter().map(OsString::as_os_str).collect();
        let process = AgentProcess::start(KUBEWASM.as_ref(), &args)?;
        self.replicas.insert(
            name.to_owned(),
            Replica {
                process,
                address,
                delivered: Vec::new(),
                steps: Vec::new(),
                alive: true,
            },
        );
        Ok(())
    }

    fn pump(&mut self) {
        for r in self.replicas.values_mut() {
            r.pump();
        }
    }

    /// Waits until `done` holds, reading the replicas' output meanwhile.
    async fn until<T>(
        &mut self,
        what: &str,
        mut done: impl FnMut(&Self) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + WAIT;
        loop {
            self.pump();
            if let Some(value) = done(self) {
                return Ok(value);
            }
            anyhow::ensure!(Instant::now() < deadline, "{what} did not happen");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the live replicas see each other, each delivers its fair number of
    /// slices, and together all 64; returns how long that took.
    async fn converged(&mut self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let live: Vec<String> = self
            .replicas
            .iter()
            .filter(|(_, r)| r.alive)
            .map(|(n, _)| n.clone())
            .collect();
        let n = live.len() as u32;
        self.until(&format!("{live:?} converged"), |g| {
            let shares: Option<Vec<u32>> = live
                .iter()
                .map(|name| {
                    let split = g.replicas[name].status()?.sharding?;
                    (split.renewed && split.members.len() as u32 == n).then_some(split.delivering)
                })
                .collect();
            let shares = shares?;
            let fair = |d: &u32| *d == 64 / n || *d == 64 / n + 1;
            (shares.iter().sum::<u32>() == 64 && shares.iter().all(fair)).then_some(())
        })
        .await?;
        Ok(started.elapsed())
    }

    /// Waits until every live replica delivers under one cut table newer than equal cuts;
    /// returns its generation.
    async fn recut(&mut self) -> anyhow::Result<u64> {
        self.until("the group took balanced cuts up", |g| {
            let generations: Option<BTreeSet<u64>> = g
                .replicas
                .values()
                .filter(|r| r.alive)
                .map(|r| Some(r.status()?.sharding?.cuts_generation))
                .collect();
            let generations = generations?;
            (generations.len() == 1)
                .then(|| generations.first().copied())?
                .filter(|g| *g > 0)
        })
        .await
    }

    /// Writes round `round` into every ConfigMap; each key's new resourceVersion.
    async fn touch_all(&self, round: u32) -> anyhow::Result<BTreeMap<String, u64>> {
        let patch = json!({"data": {"round": round.to_string()}});
        let results: Vec<anyhow::Result<(String, u64)>> = futures::stream::iter(self.keys.clone())
            .map(|key| {
                let (ns, name) = key
                    .split_once('/')
                    .map(|(a, b)| (a.to_owned(), b.to_owned()))
                    .unwrap_or_default();
                let api = Api::<ConfigMap>::namespaced(self.client.clone(), &ns);
                let patch = patch.clone();
                async move {
                    let map = api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                    let rv = map.metadata.resource_version.unwrap_or_default().parse()?;
                    Ok((key, rv))
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Waits until every key's version `rvs` was delivered, and returns who delivered each.
    async fn delivered(
        &mut self,
        rvs: &BTreeMap<String, u64>,
    ) -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
        let seen = std::cell::Cell::new(0);
        let found = self
            .until("every change delivered", |g| {
                let mut by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
                for (name, r) in &g.replicas {
                    for d in &r.delivered {
                        if rvs.get(&d.key) == Some(&d.rv) {
                            by.entry(d.key.clone()).or_default().insert(name.clone());
                        }
                    }
                }
                seen.set(by.len());
                (by.len() == rvs.len()).then_some(by)
            })
            .await;
        found.map_err(|e| e.context(format!("{} of {} delivered", seen.get(), rvs.len())))
    }

    /// Each key delivered by exactly one replica: its owner.
    fn owners(by: &BTreeMap<String, BTreeSet<String>>) -> anyhow::Result<BTreeMap<String, String>> {
        by.iter()
            .map(|(key, who)| {
                anyhow::ensure!(who.len() == 1, "{key} delivered by {who:?}");
                Ok((key.clone(), who.iter().next().cloned().unwrap_or_default()))
            })
            .collect()
    }

    /// Replica `name` ends now (killed or cut off): it delivers nothing after.
    fn end(&mut self, name: &str) {
        self.pump();
        self.ended.insert(name.to_owned(), jiff::Timestamp::now());
        if let Some(r) = self.replicas.get_mut(name) {
            r.alive = false;
        }
    }

    /// No object delivered by two replicas in overlapping time. From each replica's
    /// `delivering` lines (slices and the cuts they begin at), the spans in which it
    /// delivered each object: per object, the spans of different replicas never overlap,
    /// and every event a replica delivered falls in its span for that object. Returns the
    /// number of spans.
    fn no_overlap(&mut self) -> anyhow::Result<usize> {
        self.pump();
        let now = jiff::Timestamp::now();
        // (object) -> [(from, until, replica)]
        let mut spans: BTreeMap<&str, Vec<(jiff::Timestamp, jiff::Timestamp, &str)>> =
            BTreeMap::new();
        for (name, r) in &self.replicas {
            let end = self.ended.get(name).copied().unwrap_or(now);
            for (key, hash) in &self.hash_of {
                let mut open: Option<jiff::Timestamp> = None;
                for step in &r.steps {
                    match (open, step.holds(*hash)) {
                        (None, true) => open = Some(step.at),
                        (Some(from), false) => {
                            open = None;
                            spans.entry(key).or_default().push((from, step.at, name));
                        }
                        _ => {}
                    }
                }
                if let Some(from) = open {
                    spans.entry(key).or_default().push((from, end, name));
                }
            }
        }
        for (key, s) in &mut spans {
            s.sort();
            for pair in s.windows(2) {
                anyhow::ensure!(
                    pair[0].1 <= pair[1].0,
                    "{key}: {} delivered it until {}, {} from {}",
                    pair[0].2,
                    pair[0].1,
                    pair[1].2,
                    pair[1].0
                );
            }
        }
        // A hand-over waits for the calls running on what it gives up before it is logged:
        // every delivery falls inside a span, with no grace.
        for (name, r) in &self.replicas {
            for d in &r.delivered {
                // The API server's own ConfigMaps are not the test's.
                if !self.hash_of.contains_key(&d.key) {
                    continue;
                }
                let own: Vec<_> = spans
                    .get(d.key.as_str())
                    .map(|s| s.iter().filter(|(_, _, who)| *who == name).collect())
                    .unwrap_or_default();
                let inside = own
                    .iter()
                    .any(|(from, until, _)| *from <= d.at && d.at <= *until);
                anyhow::ensure!(
                    inside,
                    "{name} delivered {} at {} outside its spans {own:?}",
                    d.key,
                    d.at
                );
            }
        }
        Ok(spans.values().map(Vec::len).sum())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_deliver_each_object_once_and_hand_over_on_join_and_kill()
-> anyhow::Result<()> {
    // By uid: 3,000 keys spread evenly, so keys move as slices do.
    let mut g = Group::start("uid").await?;
    let kubeconfig = g.env.kubeconfig().to_owned();
    // One first: it delivers everything, then hands slices over as the others join.
    g.add("a", &kubeconfig)?;
    g.converged().await?;
    g.add("b", &kubeconfig)?;
    g.add("c", &kubeconfig)?;
    g.converged().await?;

    // Steady state: every change delivered by exactly one replica.
    let rvs = g.touch_all(1).await?;
    let three = Group::owners(&g.delivered(&rvs).await?)?;
    let per: BTreeMap<&String, usize> = three.values().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o).or_default() += 1;
        m
    });
    assert_eq!(per.len(), 3, "all three deliver: {per:?}");
    // What an operator sees: `kubewasm status` and `/metrics` show each member's part.
    for (name, r) in &g.replicas {
        let out = std::process::Command::new(KUBEWASM)
            .args(["status", "--address", &r.address.to_string()])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let delivering = r.status().and_then(|s| s.sharding).map(|s| s.delivering);
        let expected = format!(
            "sharding by uid in group split: delivering {} of 64 slices",
            delivering.unwrap_or_default()
        );
        assert!(text.contains(&expected), "{name}: {text}");
        assert!(text.contains("3 members"), "{name}: {text}");
        let (_, metrics) = http_get(r.address, "/metrics");
        let sample = format!(
            "kubewasm_shard_slices_delivering {}",
            delivering.unwrap_or_default()
        );
        assert!(
            metrics.lines().any(|l| l == sample),
            "{name}: no {sample:?}"
        );
        assert!(
            metrics.lines().any(|l| l == "kubewasm_shard_members 3"),
            "{name}"
        );
    }
    // This server (1.36, ShardedListAndWatch on) sends each replica its share only.
    for (name, r) in &g.replicas {
        let status = r.status().expect("it answers");
        let filter = status
            .reflectors
            .iter()
            .find(|(gvk, _)| gvk.kind == "ConfigMap")
            .and_then(|(_, s)| s.shard_filter);
        assert_eq!(filter, Some(ShardFilter::Server), "{name}");
    }

    // A fourth joins: about a quarter of the keys move, none is lost.
    g.add("d", &kubeconfig)?;
    g.converged().await?;
    let rvs = g.touch_all(2).await?;
    let four = Group::owners(&g.delivered(&rvs).await?)?;
    let moved = three
        .iter()
        .filter(|(k, o)| four.get(*k) != Some(*o))
        .count();
    eprintln!("a join moved {moved} of {} keys", g.keys.len());
    let bound = g.keys.len() * 30 / 100;
    assert!(
        moved <= bound,
        "{moved} of {} keys moved on a join (bound {bound})",
        g.keys.len()
    );
    assert!(
        four.iter().filter(|(_, o)| *o == "d").count() == moved,
        "only keys moving to the newcomer move"
    );

    // kill -9 one: the others own its slices again within the lease duration plus the
    // rounds it takes to notice, and every one of its objects reaches its new owner.
    let victim = "b";
    let lost: BTreeSet<String> = four
        .iter()
        .filter(|(_, o)| *o == victim)
        .map(|(k, _)| k.clone())
        .collect();
    g.replicas.get_mut(victim).expect("b runs").process.kill()?;
    g.end(victim);
    let killed = g.ended[victim];
    let took = g.converged().await?;
    eprintln!("b's slices owned again {took:?} after the kill");
    // A survivor counts b gone once its Lease record has not changed for the lease
    // duration since it first saw that record (up to a round after b's last renewal, which
    // was before the kill), and looks again at that moment: the bound, the lease
    // duration and one renew period. Beyond it, 500 ms for the survivor's claim round and
    // this test's polling of three `/status` endpoints.
    assert!(
        took <= LEASE + RETRY + Duration::from_millis(500),
        "b's slices owned again {took:?} after the kill (lease {LEASE:?}, rounds {RETRY:?})"
    );
    let handed = g
        .until("b's objects delivered by their new owners", |g| {
            let seen: BTreeSet<&String> = g
                .replicas
                .iter()
                .filter(|(n, _)| n.as_str() != victim)
                .flat_map(|(_, r)| &r.delivered)
                .filter(|d| d.at > killed && d.initial && lost.contains(&d.key))
                .filter(|d| rvs.get(&d.key) == Some(&d.rv))
                .map(|d| &d.key)
                .collect();
            (seen.len() == lost.len()).then_some(seen.len())
        })
        .await?;
    assert!(handed > 0, "b owned some keys");
    let spans = g.no_overlap()?;
    assert!(spans > g.keys.len(), "some objects moved: {spans} spans");
    for (name, r) in &g.replicas {
        if let Some(split) = r.status().and_then(|s| s.sharding) {
            assert_eq!(
                split.cuts_generation, 0,
                "{name}: uids need no cuts of their own"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_the_api_server_stops_before_another_takes_over()
-> anyhow::Result<()> {
    // By namespace (the default): a namespace's objects all land on one replica.
    let mut g = Group::start("namespace").await?;
    let proxy = kubewasm_testenv::proxy::FreezableProxy::start(g.env.addr()).await?;
    let direct = g.env.kubeconfig().to_owned();
    let text = std::fs::read_to_string(&direct)?;
    anyhow::ensure!(
        text.contains(&g.env.url()),
        "the kubeconfig names the server"
    );
    let through_proxy = g.dir.path().join("proxy.kubeconfig");
    std::fs::write(
        &through_proxy,
        text.replace(&g.env.url(), &format!("https://{}", proxy.addr())),
    )?;
    let started = Instant::now();
    g.add("a", &direct)?;
    g.add("b", &direct)?;
    g.add("x", &through_proxy)?;
    // The team-NNN namespaces fill two slices of equal cuts: the first member proposes
    // balanced ones and every member takes them up before the writes below.
    let generation = g.recut().await?;
    g.converged().await?;
    eprintln!(
        "delivering under cut table generation {generation} {:?} after the start",
        started.elapsed()
    );
    let rvs = g.touch_all(1).await?;
    let owners = Group::owners(&g.delivered(&rvs).await?)?;
    let mut by_namespace: BTreeMap<&str, BTreeSet<&String>> = BTreeMap::new();
    for (key, owner) in &owners {
        let ns = key.split('/').next().unwrap_or_default();
        by_namespace.entry(ns).or_default().insert(owner);
    }
    let mut namespaces_of: BTreeMap<&String, usize> = BTreeMap::new();
    for (ns, who) in &by_namespace {
        assert_eq!(who.len(), 1, "namespace {ns} delivered by {who:?}");
        *namespaces_of
            .entry(who.iter().next().copied().expect("one"))
            .or_default() += 1;
    }
    eprintln!("namespaces per replica: {namespaces_of:?}");
    // A fair share is a third of 100; under equal cuts one replica would have half or all.
    assert!(
        namespaces_of.len() == 3 && namespaces_of.values().all(|n| (20..=46).contains(n)),
        "namespaces per replica: {namespaces_of:?}"
    );
    assert!(
        owners.values().any(|o| o == "x"),
        "x delivers a share before the cut"
    );
    let status = g.replicas["a"].status().expect("a answers");
    assert!(
        status.plugins.iter().any(|p| p.name == "alert"),
        "a plugin keeping state loads with sharding on: {:?}",
        status.failed_plugins
    );

    // The proxy now holds every byte: x's renewals go unanswered.
    proxy.freeze(true);
    let frozen = jiff::Timestamp::now();
    g.replicas.get_mut("x").expect("x").alive = false;
    g.converged().await?;
    let stopped = g
        .until("x stopped delivering", |g| {
            g.replicas["x"]
                .steps
                .iter()
                .find(|s| s.at > frozen && s.slices == 0)
                .map(|s| s.at)
        })
        .await?;
    let taken = g
        .replicas
        .iter()
        .filter(|(n, _)| n.as_str() != "x")
        .flat_map(|(_, r)| &r.steps)
        .filter(|s| s.at > frozen && s.took_over > 0)
        .map(|s| s.at)
        .min()
        .ok_or_else(|| anyhow::anyhow!("a or b took x's slices"))?;
    assert!(
        stopped < taken,
        "x stopped at {stopped}, another took over at {taken}"
    );
    let after = frozen.duration_until(stopped).unsigned_abs();
    let margin = stopped.duration_until(taken).unsigned_abs();
    eprintln!("x stopped {after:?} after the freeze, {margin:?} before another took over");
    assert!(
        after <= RENEW_DEADLINE + Duration::from_millis(500),
        "x stopped {after:?} after the freeze (renew deadline {RENEW_DEADLINE:?})"
    );
    let late = g.replicas["x"]
        .delivered
        .iter()
        .filter(|d| d.at > stopped)
        .count();
    assert_eq!(late, 0, "x delivered after it stopped");
    g.no_overlap()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_state_moves_with_its_namespace_when_replicas_join_and_leave() -> anyhow::Result<()>
{
    // The audit plugin counts each object's events in its state and logs the count. State is
    // kept per namespace and handed over with it, so every count it logs equals the events
    // of that object delivered so far by all replicas together.
    // A replica may hold all 100 namespaces' maps (30 entries each) at once: the limits
    // bound them together.
    let mut g = Group::start_with(
        "namespace",
        "{config: {selector: test=split, count: true}, limits: {stateEntries: 8192, stateKiB: 140}}",
    )
    .await?;
    let kubeconfig = g.env.kubeconfig().to_owned();
    for name in ["a", "b", "c"] {
        g.add(name, &kubeconfig)?;
    }
    g.recut().await?;
    g.converged().await?;
    let rvs = g.touch_all(1).await?;
    g.delivered(&rvs).await?;
    // A fourth joins: the namespaces moving to it are written by their old owners before
    // they let them go, and read by it before it delivers them.
    let split = |g: &Group, name: &str| {
        g.replicas[name]
            .status()
            .and_then(|s| s.sharding)
            .map(|s| (s.delivering, s.handovers))
    };
    let before: BTreeMap<&str, Option<(u32, u64)>> =
        ["a", "b", "c"].map(|m| (m, split(&g, m))).into();
    g.add("d", &kubeconfig)?;
    g.converged().await?;
    // Under the group's own cuts the newcomer's first Lease (no claim, equal cuts) stops no
    // one: each old member hands over exactly the slices that go to d, and gives up none
    // to take it back.
    for (m, was) in before {
        let (Some((had, handed)), Some((has, handed_now))) = (was, split(&g, m)) else {
            anyhow::bail!("{m} shows no sharding status");
        };
        assert_eq!(
            handed_now - handed,
            u64::from(had - has),
            "{m} delivered {had} slices, then {has} after d joined, in {} hand-overs",
            handed_now - handed
        );
    }
    let rvs = g.touch_all(2).await?;
    g.delivered(&rvs).await?;
    // b leaves (SIGTERM): it writes its state before its Lease goes.
    let (clean, _) = g
        .replicas
        .get_mut("b")
        .expect("b runs")
        .process
        .terminate(Duration::from_secs(30))?;
    assert!(clean, "b exits cleanly");
    g.end("b");
    g.converged().await?;
    let rvs = g.touch_all(3).await?;
    g.delivered(&rvs).await?;
    g.pump();
    // Per object, every delivery by any replica in time order: each logged count is its
    // place in that order.
    // (when, its count, by whom)
    type Seen<'a> = (jiff::Timestamp, Option<u64>, &'a str);
    let mut by_key: BTreeMap<&str, Vec<Seen>> = BTreeMap::new();
    for (name, r) in &g.replicas {
        for d in r.delivered.iter().filter(|d| g.keys.contains(&d.key)) {
            by_key
                .entry(&d.key)
                .or_default()
                .push((d.at, d.n, name.as_str()));
        }
    }
    let mut moved = 0;
    for (key, mut seen) in by_key {
        seen.sort();
        for (i, (at, n, who)) in seen.iter().enumerate() {
            assert_eq!(
                *n,
                Some(i as u64 + 1),
                "{key}: {who} logged count {n:?} at {at}, its event number {} (all: {seen:?})",
                i + 1
            );
        }
        let owners: BTreeSet<&str> = seen.iter().map(|s| s.2).collect();
        moved += usize::from(owners.len() > 1);
    }
    eprintln!("state carried over for {moved} of {} objects", g.keys.len());
    assert!(moved > 0, "some objects changed hands");
    g.no_overlap()?;
    Ok(())
}
