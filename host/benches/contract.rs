//! What contract 0.3 costs the host, on 4 KB pods as in `queries.rs`:
//! - `filter_spec`, `filter_three`: an update dropped by a change filter (the comparison of
//!   the cached old and new objects at `/spec`, or at three pointers like service-alert's, and
//!   the `filtered` count), for an update of the status only;
//! - `deliver_noop`, `state_get`, `state_set`: a no-op Rust plugin's delivery, and the same
//!   with one state read or one state write in the handler (the write applied to the map as
//!   the dispatch loop applies it); the difference is what one state call costs;
//! - `deliver_noop_accounted`: `deliver_noop` with the cost accounting the dispatch loop does
//!   around every call (its clock readings, duration histogram, memory, handles, HTTP and
//!   slowest host call); the difference is what accounting adds to a delivery;
//! - `metric_inc`: the no-op delivery with one counter increment from the plugin (contract
//!   0.5 `metrics`); the difference to `deliver_noop` is what one increment costs;
//! - `review_noop`, `review_image_policy`: one admission review in the host, as the webhook
//!   server handles it (decode the AdmissionReview body, the plugin's `admit`, encode the
//!   answer): a plugin that allows everything, and `plugins/image-policy`, which reads its
//!   allow list from a ConfigMap in the cache.
//! - `scrape_50x20`: the whole `/metrics` text of an agent running 50 plugins that each keep
//!   20 series of their own (the bench plugin counting 20 pods in 20 slots).
//!
//! Rounds side by side (`support/rounds.rs`). Run with
//! `cargo bench -p kubewasm --bench contract`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kubewasm::admission::{self, review};
use kubewasm::agent::{Agent, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::gvk::Gvk;
use kubewasm::informer::{Changes, Informer, Notification};
use kubewasm::object::{KubeObject, Transform};
use kubewasm::plugins::PluginStats;
use kubewasm::source::SourceEvent;
use kubewasm::wasm::state::{PluginState, StateLimits};
use kubewasm_testenv::generate;
use serde_json::json;

#[path = "support/mod.rs"]
mod support;

use support::plugins::review_body;
use support::rounds::{self, Case, Plan};

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

/// A pod of 4 KB as cached, and the same pod after an update of its status (a kubelet's
/// probe time): the most common update on a cluster.
fn update() -> (Arc<KubeObject>, Arc<KubeObject>) {
    let old = generate::pod(5, 4096, 10);
    let mut new = old.clone();
    new["metadata"]["resourceVersion"] = json!("11");
    new["status"]["conditions"][0]["lastProbeTime"] = json!("2026-11-28T10:00:00Z");
    // Decoded as the reflector decodes a watch line.
    let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
    let cache = |v: serde_json::Value| {
        Arc::new(
            KubeObject::from_server_json(&v.to_string(), &gvk, &Transform::default()).expect("pod"),
        )
    };
    (cache(old), cache(new))
}

/// A case that runs a change filter on `pointers` over the update, as the informer's fan-out
/// does for a subscriber, and checks that it drops it.
fn filter(name: &'static str, pointers: &[&str]) -> Case<'static> {
    let (old, new) = update();
    let texts: Vec<String> = pointers.iter().map(|p| (*p).to_owned()).collect();
    let changes = Changes::new(&texts).expect("pointers");
    assert!(
        !changes.changed(&old, &new),
        "the update leaves {pointers:?} alone"
    );
    Case::new(name, move || {
        if !changes.changed(&old, &new) {
            changes.filtered.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// A cache of one 4 KB pod.
fn pods() -> Arc<Informer> {
    let informer = Arc::new(Informer::new(Gvk::new("", "v1", "Pod")));
    informer.apply(SourceEvent::ListStarted);
    let object = KubeObject::from_value(generate::pod(5, 4096, 10), &Transform::default())
        .expect("valid pod");
    informer.apply(SourceEvent::Listed(Arc::new(object)));
    informer.apply(SourceEvent::ListDone);
    informer
}

/// How a delivery case accounts for its calls.
#[derive(Clone, Copy, PartialEq)]
enum Accounting {
    /// Not at all: the call alone.
    None,
    /// As the dispatch loop does.
    AsDispatch,
}

/// A case that delivers an update to the bench plugin doing `work` with `arg`, applying the
/// state changes it asked for as the dispatch loop does, and accounting for it as `accounting`
/// says.
fn deliver(name: &'static str, work: &str, arg: &str, accounting: Accounting) -> Case<'static> {
    let informer = pods();
    let held = Arc::new(PluginState::default());
    let store = held.whole().clone();
    let config = json!({"work": work, "arg": arg}).to_string();
    let mut instance = support::instance::instance_with(
        kubewasm_plugin_artifacts::BENCH,
        &config,
        std::slice::from_ref(&informer),
        |ctx| {
            ctx.state = held;
            ctx.state_declared = true;
            let metrics = kubewasm::plugin_metrics::Registry::new(
                kubewasm::plugin_metrics::DEFAULT_MAX_SERIES,
            );
            metrics.declare(&[kubewasm::plugin_metrics::Declared {
                name: "events".into(),
                help: "Calls of the bench plugin".into(),
                kind: kubewasm::plugin_metrics::Kind::Counter,
                labels: vec!["slot".into()],
                buckets: Vec::new(),
            }]);
            ctx.metrics = Arc::new(metrics);
        },
    );
    store
        .apply(
            [("seen/bench-5/pod-5".to_owned(), Some("1".to_owned()))].into(),
            &StateLimits::default(),
        )
        .expect("seeded");
    let pod = informer.store().get("bench-5/pod-5").expect("pod 5");
    let notification = Notification::Updated {
        old: pod.clone(),
        new: pod,
    };
    let limits = StateLimits::default();
    let stats = PluginStats::default();
    let mut durations = kubewasm::histogram::Tally::default();
    Case::new(name, move || {
        let started = (accounting == Accounting::AsDispatch).then(Instant::now);
        instance
            .handle(&notification)
            .expect("no trap")
            .expect("handled");
        if let Some(started) = started {
            stats.account(&mut durations, started.elapsed(), &instance.usage());
        }
        store
            .apply(instance.take_effects().state, &limits)
            .expect("within the limits");
    })
}

/// A manifests folder with image-policy's allow list.
fn cluster() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("allow-list.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: image-allow-list, namespace: kubewasm}\n\
         data: {prefixes: \"registry.example.com/,ghcr.io/example/\"}\n",
    )
    .expect("write");
    dir
}

/// Cases reviewing `review_body()` with each of `plugins` (name, file, configuration), loaded
/// into an agent on the manifests folder `cluster`.
fn reviews(
    tasks: &tokio::runtime::Runtime,
    cluster: &std::path::Path,
    plugins: &[(&'static str, &'static str, &'static str)],
) -> (Agent, Vec<Case<'static>>) {
    let mut config = HostConfig::default();
    for (name, _, json) in plugins {
        let mut settings = config.plugins.defaults.clone();
        settings.config = (*json).to_owned();
        config.plugins.named.insert((*name).to_owned(), settings);
    }
    let options = support::plugins::agent_options(Cluster::Folder(cluster.to_owned()), config);
    let agent = tasks.block_on(Agent::start(options)).expect("agent");
    let dir = kubewasm_testenv::PluginFolder::new();
    let body = review_body();
    let decoded = body.clone();
    let mut cases = vec![Case::new("review_decode", move || {
        std::hint::black_box(review::parse(&decoded).expect("a review"));
    })];
    for (name, file, _) in plugins {
        let path = dir.put(name, file);
        agent.plugins().load(&path).expect("loads");
        let admitter = agent.plugins().admitter(name).expect("declares admission");
        let body = body.clone();
        let case_name = match *name {
            "noop" => "review_noop",
            _ => "review_image_policy",
        };
        // Every review is allowed; a refusal would mean the allow list was not read.
        cases.push(Case::new(case_name, move || {
            let parsed = review::parse(&body).expect("a review");
            let until = Instant::now() + Duration::from_secs(10);
            let (answer, _) = admission::decide(&admitter, &parsed, until);
            assert!(answer.allowed, "{}", answer.message);
            std::hint::black_box(answer.to_body());
        }));
    }
    (agent, cases)
}

/// Plugins and series each for `scrape_50x20`.
const SCRAPED_PLUGINS: usize = 50;
const SERIES_EACH: usize = 20;

/// A case rendering `/metrics` of an agent on a folder of `SERIES_EACH` pods running
/// `SCRAPED_PLUGINS` copies of the bench plugin, each counting the pods in `SERIES_EACH` slots.
fn scrape(tasks: &tokio::runtime::Runtime) -> Case<'static> {
    let cluster = tempfile::tempdir().expect("temp dir");
    for i in 0..SERIES_EACH {
        let pod = generate::pod(i, 1024, 10).to_string();
        std::fs::write(cluster.path().join(format!("pod-{i}.yaml")), pod).expect("write");
    }
    let mut config = HostConfig::default();
    let plugins = kubewasm_testenv::PluginFolder::new();
    for i in 0..SCRAPED_PLUGINS {
        let name = format!("metric-{i}");
        let mut settings = config.plugins.defaults.clone();
        settings.config = json!({"work": "metric", "arg": SERIES_EACH.to_string()}).to_string();
        config.plugins.named.insert(name.clone(), settings);
        plugins.put(&name, kubewasm_plugin_artifacts::BENCH);
    }
    let options =
        support::plugins::agent_options(Cluster::Folder(cluster.path().to_owned()), config);
    let mut agent = tasks.block_on(Agent::start(options)).expect("agent");
    let report = tasks
        .block_on(agent.follow_plugins(plugins.path()))
        .expect("plugins");
    assert!(report.failed.is_empty(), "{report:?}");
    let series = |agent: &Agent| -> usize {
        agent
            .status()
            .plugin_metrics
            .iter()
            .flat_map(|p| &p.families)
            .map(|f| f.series.len())
            .sum()
    };
    let end = Instant::now() + Duration::from_secs(120);
    while series(&agent) < SCRAPED_PLUGINS * SERIES_EACH {
        assert!(Instant::now() < end, "{} series", series(&agent));
        std::thread::sleep(Duration::from_millis(50));
    }
    // The case keeps the agent and both folders for as long as it runs.
    Case::new("scrape_50x20", move || {
        let _held = (&cluster, &plugins);
        std::hint::black_box(agent.status().metrics());
    })
}

fn main() {
    support::logging::as_the_agent();
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    let folder = cluster();
    let (_agent, review_cases) = reviews(
        &tasks,
        folder.path(),
        &[
            (
                "noop",
                kubewasm_plugin_artifacts::BENCH,
                r#"{"work": "admit"}"#,
            ),
            (
                "image-policy",
                kubewasm_plugin_artifacts::IMAGE_POLICY,
                "{}",
            ),
        ],
    );
    let mut cases = vec![
        filter("filter_spec", &["/spec"]),
        filter(
            "filter_three",
            &[
                "/status/conditions/0/status",
                "/metadata/labels",
                "/metadata/deletionTimestamp",
            ],
        ),
        deliver("deliver_noop", "noop", "", Accounting::None),
        deliver("deliver_noop_accounted", "noop", "", Accounting::AsDispatch),
        deliver("metric_inc", "metric", "", Accounting::None),
        deliver(
            "state_get",
            "state-get",
            "seen/bench-5/pod-5",
            Accounting::None,
        ),
        deliver(
            "state_set",
            "state-set",
            "seen/bench-5/pod-5",
            Accounting::None,
        ),
    ];
    cases.extend(review_cases);
    cases.push(scrape(&tasks));
    // Ten cases of 20 ms a round: about 8 s.
    rounds::run(
        "contract",
        Plan::new(40, Duration::from_millis(20)),
        &mut cases,
    );
}
