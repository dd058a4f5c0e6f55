//! What trying a plugin costs (issue 78):
//! - `alone`, `beside_other`, `beside_candidate`: `BATCH` pod updates applied to an agent's
//!   cache, delivered to the bench plugin (work `noop`) serving alone, beside another plugin
//!   (the same, under another name: two workers busy at once, nothing compared), and beside
//!   itself as its candidate (`serving.candidate`, in dry-run, every live event compared); in
//!   rounds side by side (`support/rounds.rs`). Besides the wall clock, the serving worker's
//!   own time on a CPU per event (the kernel's schedstat of its thread). `WORKER {json}`.
//! - `compare_equal`: what one event both versions handled alike costs the two of them
//!   together: each one's outcome (one server-side apply, normalised) and report, paired.
//! - `review_enforced`, `review_monitored`: one context-aware admission review (image-policy,
//!   a 4 KB pod whose images the allow list admits), decided as served and in monitor mode
//!   (its answer reported, "allowed" given).
//!
//! Run with `cargo bench -p kubewasm --bench trial`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::admission::{self, review};
use kubewasm::agent::{Agent, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::gvk::Gvk;
use kubewasm::object::{KubeObject, Transform};
use kubewasm::plugins::Mode;
use kubewasm::plugins::shadow::{Comparison, Side, outcome};
use kubewasm::source::SourceEvent;
use kubewasm::write::{Action, Target, Write};
use kubewasm_testenv::generate;
use serde_json::json;

#[path = "support/mod.rs"]
mod support;

use support::plugins::{review_body, status};
use support::rounds::{self, Case, Plan};

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

/// Pod updates per turn's call.
const BATCH: usize = 500;
/// How long a batch may take to be delivered.
const WAIT: Duration = Duration::from_secs(120);

fn pod_gvk() -> Gvk {
    Gvk::new("", "v1", "Pod")
}

/// A manifests folder of `BATCH` pods, and image-policy's allow list.
fn cluster() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut text = String::new();
    for i in 0..BATCH {
        text.push_str(&generate::pod(i, 1024, 10).to_string());
        text.push_str("\n---\n");
    }
    text.push_str(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: image-allow-list, namespace: kubewasm}\n\
         data: {prefixes: \"registry.example.com/,ghcr.io/example/\"}\n",
    );
    std::fs::write(dir.path().join("objects.yaml"), text).expect("write");
    dir
}

/// An agent on `cluster` running each of `plugins` (name, file, configuration, mode).
fn agent(
    tasks: &tokio::runtime::Runtime,
    cluster: &Path,
    plugins: &[(&str, &str, &str, Mode)],
) -> (Agent, kubewasm_testenv::PluginFolder) {
    let mut config = HostConfig::default();
    for (name, _, json, mode) in plugins {
        let mut settings = config.plugins.defaults.clone();
        settings.config = (*json).to_owned();
        settings.mode = *mode;
        config.plugins.named.insert((*name).to_owned(), settings);
    }
    let options = support::plugins::agent_options(Cluster::Folder(cluster.to_owned()), config);
    let agent = tasks.block_on(Agent::start(options)).expect("agent");
    let dir = kubewasm_testenv::PluginFolder::new();
    for (name, file, _, _) in plugins {
        let path = dir.put(name, file);
        agent.plugins().load(&path).expect("loads");
    }
    (agent, dir)
}

/// Waits until each of `names` has synced.
fn synced(agent: &Agent, names: &[&str]) {
    let end = Instant::now() + WAIT;
    for name in names {
        while !status(agent, name).synced {
            assert!(Instant::now() < end, "{name} did not sync");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Waits until each of `names` has been delivered `at_least` events.
fn delivered(agent: &Agent, names: &[&str], at_least: &[u64]) {
    let end = Instant::now() + WAIT;
    for (name, want) in names.iter().zip(at_least) {
        while status(agent, name).delivered < *want {
            assert!(
                Instant::now() < end,
                "{name} was not delivered {want} events"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// A case applying `BATCH` pod updates to `agent`'s cache and waiting for `names` to get
/// them; the serving worker's CPU per event is pushed to `cpu_ns`.
fn updates<'a>(
    case: &'static str,
    (agent, worker): (&'a Agent, u32),
    names: &'a [&'a str],
    cpu_ns: &'a mut Vec<f64>,
) -> Case<'a> {
    let pods = agent.factory().get(&pod_gvk()).expect("Pods cached");
    let mut version = 1_000u64;
    Case::new(case, move || {
        version += 1;
        let objects: Vec<Arc<KubeObject>> = (0..BATCH)
            .map(|i| {
                let mut pod = generate::pod(i, 1024, version);
                pod["metadata"]["annotations"] = json!({"bench/round": version.to_string()});
                Arc::new(KubeObject::from_value(pod, &Transform::default()).expect("a pod"))
            })
            .collect();
        let before: Vec<u64> = names.iter().map(|n| status(agent, n).delivered).collect();
        let cpu = support::cpu::on_cpu_ns(worker);
        for object in objects {
            pods.apply(SourceEvent::Applied(object));
        }
        let want: Vec<u64> = before.iter().map(|b| b + BATCH as u64).collect();
        delivered(agent, names, &want);
        cpu_ns.push((support::cpu::on_cpu_ns(worker) - cpu) as f64 / BATCH as f64);
    })
}

/// One apply of a labelled pod, as a labeler stages it.
fn staged_apply(i: u64) -> Write {
    Write {
        target: Target {
            gvk: pod_gvk(),
            namespace: Some("shop".into()),
            name: format!("web-{i}"),
            subresource: None,
        },
        action: Action::Apply(
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": format!("web-{i}"), "namespace": "shop",
                                "labels": {"team": "shop"}}})
            .to_string(),
        ),
    }
}

/// A case deciding the review with `name`'s admitter in `agent`.
fn review_case(case: &'static str, agent: &Agent, name: &str) -> Case<'static> {
    let admitter = agent.plugins().admitter(name).expect("declares admission");
    let body = review_body();
    Case::new(case, move || {
        let parsed = review::parse(&body).expect("a review");
        let until = Instant::now() + Duration::from_secs(10);
        let (answer, _) = admission::decide(&admitter, &parsed, until);
        assert!(answer.allowed, "{}", answer.message);
        std::hint::black_box(answer.to_body());
    })
}

fn main() {
    support::logging::as_the_agent();
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    let folder = cluster();
    let bench = kubewasm_plugin_artifacts::BENCH;
    let noop = r#"{"work": "noop"}"#;
    let (alone, _a) = agent(
        &tasks,
        folder.path(),
        &[("serving", bench, noop, Mode::Serve)],
    );
    // Each agent's serving worker: the thread of that name the second agent adds.
    synced(&alone, &["serving"]);
    let alone_worker = support::cpu::thread_named("plugin-serving");
    let (other, _o) = agent(
        &tasks,
        folder.path(),
        &[
            ("serving", bench, noop, Mode::Serve),
            ("other", bench, noop, Mode::Serve),
        ],
    );
    synced(&other, &["serving", "other"]);
    let known = [alone_worker];
    let other_worker = support::cpu::threads_named_exactly("plugin-serving")
        .into_iter()
        .find(|tid| !known.contains(tid))
        .expect("the second agent's serving worker");
    let (paired, _b) = agent(
        &tasks,
        folder.path(),
        &[
            ("serving", bench, noop, Mode::Serve),
            ("serving.candidate", bench, noop, Mode::Serve),
        ],
    );
    let policy = kubewasm_plugin_artifacts::IMAGE_POLICY;
    let (reviews, _c) = agent(
        &tasks,
        folder.path(),
        &[
            ("enforced", policy, "{}", Mode::Serve),
            ("monitored", policy, "{}", Mode::Monitor),
        ],
    );
    synced(&paired, &["serving", "serving.candidate"]);
    let known = [alone_worker, other_worker];
    let paired_worker = support::cpu::threads_named_exactly("plugin-serving")
        .into_iter()
        .find(|tid| !known.contains(tid))
        .expect("the paired agent's serving worker");
    let (mut alone_ns, mut other_ns, mut paired_ns) = (Vec::new(), Vec::new(), Vec::new());
    let with_other = ["serving", "other"];
    let both = ["serving", "serving.candidate"];
    let comparison = Comparison::default();
    let (serving, candidate) = ([staged_apply(1)], [staged_apply(1)]);
    let pod = pod_gvk();
    comparison.start(None);
    let mut next = 0u64;
    let mut cases = vec![
        updates("alone", (&alone, alone_worker), &["serving"], &mut alone_ns),
        updates(
            "beside_other",
            (&other, other_worker),
            &with_other,
            &mut other_ns,
        ),
        updates(
            "beside_candidate",
            (&paired, paired_worker),
            &both,
            &mut paired_ns,
        ),
        Case::new("compare_equal", || {
            // What each version's worker does per event: the event's key, its outcome, the
            // report (the writes themselves are the plugin's, made before).
            next += 1;
            for (side, write) in [(Side::Serving, &serving), (Side::Candidate, &candidate)] {
                let key = format!("updated {pod} shop/web-1@{next}");
                comparison.report(side, key, outcome(Ok(write)));
            }
        }),
        review_case("review_enforced", &reviews, "enforced"),
        review_case("review_monitored", &reviews, "monitored"),
    ];
    // Six cases; the delivery turns take tens of milliseconds a call.
    rounds::run(
        "trial",
        Plan::new(20, Duration::from_millis(300)),
        &mut cases,
    );
    drop(cases);
    let compared = comparison.status();
    assert_eq!(compared.different, 0, "{compared:?}");
    let candidate = status(&paired, "serving")
        .candidate
        .expect("a candidate ran");
    println!(
        "WORKER {}",
        json!({
            "batch": BATCH,
            "alone_cpu_ns_per_event": alone_ns,
            "beside_other_cpu_ns_per_event": other_ns,
            "beside_candidate_cpu_ns_per_event": paired_ns,
            "candidate_equal": candidate.equal,
            "candidate_different": candidate.different,
            "candidate_unmatched": candidate.unmatched,
        })
    );
}
