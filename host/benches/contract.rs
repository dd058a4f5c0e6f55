//! What contract 0.3 costs the host, on 4 KB pods as in `queries.rs`:
//! - `filter_spec`, `filter_three`: an update dropped by a change filter (the comparison of
//!   the cached old and new objects at `/spec`, or at three pointers like service-alert's, and
//!   the `filtered` count), for an update of the status only;
//! - `deliver_noop`, `state_get`, `state_set`: a no-op Rust plugin's delivery, and the same
//!   with one state read or one state write in the handler (the write applied to the map as
//!   the dispatch loop applies it); the difference is what one state call costs;
//! - `review_noop`, `review_image_policy`: one admission review in the host, as the webhook
//!   server handles it (decode the AdmissionReview body, the plugin's `admit`, encode the
//!   answer): a plugin that allows everything, and `plugins/image-policy`, which reads its
//!   allow list from a ConfigMap in the cache.
//!
//! Rounds side by side (`support/rounds.rs`). Run with
//! `cargo bench -p kubewasm --bench contract`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kubewasm::admission::{self, review};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::gvk::Gvk;
use kubewasm::informer::{Changes, Informer, Notification};
use kubewasm::object::{KubeObject, Transform};
use kubewasm::source::SourceEvent;
use kubewasm::wasm::state::{PluginState, StateLimits};
use kubewasm_testenv::generate;
use serde_json::json;

#[path = "support/mod.rs"]
mod support;

use support::instance::Discard;
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

/// A case that delivers an update to the bench plugin doing `work` with `arg`, applying the
/// state changes it asked for as the dispatch loop does.
fn deliver(name: &'static str, work: &str, arg: &str) -> Case<'static> {
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
    Case::new(name, move || {
        instance
            .handle(&notification)
            .expect("no trap")
            .expect("handled");
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

/// A CREATE review of a pod with two containers from allowed registries.
fn review_body() -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0a1b2c3d-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "shop",
            "name": "web-1",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": generate::pod(1, 4096, 10),
            "dryRun": false
        }
    })
    .to_string()
    .into_bytes()
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
    let options = AgentOptions {
        compiled_cache: Some(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("compiled")),
        ..AgentOptions::new(
            Cluster::Folder(cluster.to_owned()),
            config,
            Arc::new(Discard),
        )
    };
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
        deliver("deliver_noop", "noop", ""),
        deliver("state_get", "state-get", "seen/bench-5/pod-5"),
        deliver("state_set", "state-set", "seen/bench-5/pod-5"),
    ];
    cases.extend(review_cases);
    // Seven cases of 20 ms a round: about 6 s.
    rounds::run(
        "contract",
        Plan::new(40, Duration::from_millis(20)),
        &mut cases,
    );
}
