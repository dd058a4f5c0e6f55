//! A plugin's writes cost the cluster a bounded rate: writes that feed back into their own
//! events are stopped, writes that change nothing are not sent, a storm is held to its rate
//! and its queue to its bytes, and no patch moves its object (the manifests folder plays the
//! cluster: writes come back as events, as they would from an API server).

use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::gvk::Gvk;
use kubewasm::plugins::PluginStatus;
use kubewasm::plugins::throttle::{LOOP_LIMIT, Rate};
use kubewasm::wasm::logging::MemorySink;
use kubewasm::write::{Verb, WriteGrant};

use crate::support;

const WAIT: Duration = Duration::from_secs(60);

struct Storm {
    agent: kubewasm::agent::Agent,
    sink: Arc<MemorySink>,
    _dirs: (tempfile::TempDir, kubewasm_testenv::PluginFolder),
    _runtime: tokio::runtime::Runtime,
}

impl Storm {
    fn status(&self) -> PluginStatus {
        support::plugin_status(&self.agent, "bad")
    }

    fn until(&self, what: &str, done: impl Fn(&PluginStatus) -> bool) -> PluginStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what}: {status:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The hostile plugin in `mode`, granted patch and create on ConfigMaps in `t`, over three
/// ConfigMaps, beside pod-phase watching a pod; `tune` adjusts its settings.
fn storm(mode: &str, tune: impl FnOnce(&mut kubewasm::plugins::PluginSettings)) -> Storm {
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    for i in 1..=3 {
        fs::write(
            cluster.path().join(format!("cm-{i}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: t}}\ndata: {{v: '1'}}\n"),
        )
        .expect("write");
    }
    fs::write(
        cluster.path().join("pod.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nstatus: {phase: Pending}\n",
    )
    .expect("write");
    let mut config = support::configs(&[("bad", &format!(r#"{{"mode": "{mode}"}}"#))]);
    let settings = config.plugins.named.get_mut("bad").expect("configured");
    settings.grants.writes = vec![WriteGrant {
        resources: vec![Gvk::new("", "v1", "ConfigMap")],
        subresources: vec![],
        verbs: vec![Verb::Patch, Verb::Create],
        namespaces: Some(vec!["t".into()]),
    }];
    tune(settings);
    let plugins = kubewasm_testenv::PluginFolder::new();
    plugins.put("bad", kubewasm_plugin_artifacts::HOSTILE);
    plugins.put("pod-phase", kubewasm_plugin_artifacts::POD_PHASE);
    let sink = Arc::new(MemorySink::default());
    let mut agent = support::folder_agent(&runtime, cluster.path(), config, sink.clone());
    runtime
        .block_on(agent.follow_plugins(plugins.path()))
        .expect("plugins load");
    Storm {
        agent,
        sink,
        _dirs: (cluster, plugins),
        _runtime: runtime,
    }
}

#[test]
fn a_plugin_writing_its_own_objects_in_a_loop_is_stopped() {
    // Every write changes the object it handles, which is an event, which writes again.
    let s = storm("write-loop", |_| {});
    let status = s.until("the loop on each object stopped", |p| p.given_up >= 3);
    let error = status.last_error.clone().unwrap_or_default();
    assert!(error.contains("feedback loop"), "{error}");
    assert!(
        status.writes_sent <= 3 * LOOP_LIMIT as u64,
        "{} writes for three objects",
        status.writes_sent
    );
    // Nothing more is written once every loop is refused.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(s.status().writes_sent, status.writes_sent);
}

#[test]
fn a_plugin_in_a_loop_stays_stopped_when_replaced() {
    // A fresh count for each version would let a plugin replaced every few seconds write
    // each of its objects LOOP_LIMIT more times a swap.
    let s = storm("write-loop", |_| {});
    let first = s.until("the loop on each object stopped", |p| p.given_up >= 3);
    let version = kubewasm_plugin_artifacts::variant(kubewasm_plugin_artifacts::HOSTILE, "v2");
    let plugins = s._dirs.1.path();
    fs::write(plugins.join(".bad.tmp"), version).expect("write");
    fs::rename(plugins.join(".bad.tmp"), plugins.join("bad.wasm")).expect("rename");
    s.until("replaced", |p| p.reloads == 1);
    // An update of one of its objects reaches the new version, whose write to it is
    // refused: the loop the old version ran is the plugin's, not the version's.
    fs::write(
        s._dirs.0.path().join("cm-1.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-1, namespace: t}\ndata: {v: '2'}\n",
    )
    .expect("write");
    let second = s.until("the new version refused", |p| p.given_up >= 1);
    assert_eq!(second.writes_sent, 0, "{second:#?}");
    let error = second.last_error.clone().unwrap_or_default();
    assert!(error.contains("feedback loop"), "{error}");
    assert!(first.writes_sent <= 3 * LOOP_LIMIT as u64);
}

#[test]
fn writes_that_change_nothing_are_not_sent() {
    // The same label on every event: each object is written once; the update each write
    // causes writes the same label again, which is not sent.
    let s = storm("write-same", |_| {});
    let status = s.until("every echo of a write skipped", |p| p.writes_skipped >= 3);
    assert_eq!(status.writes_sent, 3, "{status:#?}");
    assert_eq!((status.failed, status.given_up), (0, 0));
}

#[test]
fn a_write_storm_is_held_to_its_rate_and_its_queue_to_its_bytes() {
    // 64 ConfigMaps of 64 KiB applied with new contents for every event, each of them an
    // event again: without bounds, tens of thousands of writes a minute and a queue of GiBs.
    let rate = Rate {
        per_second: 20,
        burst: 20,
    };
    let s = storm("write-storm", |settings| {
        settings.delivery.write_rate = rate;
        settings.delivery.backlog_bytes = 4 << 20;
    });
    let first = s.until("writing", |p| p.writes_sent > 0);
    let started = Instant::now() - Duration::from_millis(50);
    std::thread::sleep(Duration::from_secs(3));
    let status = s.status();
    let elapsed = started.elapsed().as_secs_f64();
    let allowed = f64::from(rate.burst) + f64::from(rate.per_second) * elapsed;
    assert!(
        (status.writes_sent - first.writes_sent) as f64 <= allowed,
        "{} writes in {elapsed:.1} s, {allowed} allowed",
        status.writes_sent - first.writes_sent
    );
    assert!(status.write_wait_ms > 0, "it waited for its rate");
    // Past 4 MiB the queue folds: at most about two states of each of the 64 objects.
    assert!(
        status.queued_bytes < 4 * (64 << 10) * 64,
        "{} bytes queued",
        status.queued_bytes
    );
    // The neighbour still gets its events.
    let pod_phase = support::plugin_status(&s.agent, "pod-phase");
    assert!(
        pod_phase.delivered >= 1 && pod_phase.failed == 0,
        "{pod_phase:#?}"
    );
}

#[test]
fn patches_that_move_their_object_are_refused_before_sending() {
    let s = storm("write-move", |_| {});
    s.until("each event tried", |p| p.given_up >= 3);
    let lines = s.sink.records();
    let refusals: Vec<_> = support::of(lines, "bad")
        .into_iter()
        .filter(|l| {
            l.message.contains("move")
                || l.message.contains("rename")
                || l.message.contains("metadata")
        })
        .collect();
    assert!(!refusals.is_empty());
    for line in &refusals {
        assert_eq!(line.field("outcome"), Some("invalid argument"), "{line:?}");
    }
    assert_eq!(s.status().writes_sent, 0);
}
