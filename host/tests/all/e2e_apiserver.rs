//! End to end on a real kube-apiserver and etcd (started by kubewasm-testenv on loopback):
//! the host's Kubernetes source, informers and the example plugins.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::plugins::PluginHost;
use kubewasm::wasm::logging::{MemorySink, PluginLogRecord};
use kubewasm_testenv::{Options, TestEnv, resources};
use serde_json::json;
use support::{audit, render};

use crate::support;

const WAIT: Duration = Duration::from_secs(90);

/// The host on the test server with the given plugins (name, built path, configuration),
/// returned once every plugin's caches have synced.
struct Host {
    host: Arc<PluginHost>,
    sink: Arc<MemorySink>,
    agent: Agent,
    _plugins: kubewasm_testenv::PluginFolder,
}

async fn host(env: &TestEnv, plugins: &[(&str, &str, &str)]) -> anyhow::Result<Host> {
    let dir = kubewasm_testenv::PluginFolder::new();
    let mut configs = Vec::new();
    for (name, built, config) in plugins {
        dir.put(name, built);
        configs.push((*name, *config));
    }
    let sink = Arc::new(MemorySink::default());
    let cluster = Cluster::Kube(env.client().await?);
    let options = AgentOptions::new(cluster, support::configs(&configs), sink.clone());
    let mut agent = Agent::start(options).await?;
    let first = agent.follow_plugins(dir.path()).await?;
    anyhow::ensure!(first.failed.is_empty(), "plugins failed: {first:?}");
    let deadline = Instant::now() + WAIT;
    while !agent.status().ready {
        anyhow::ensure!(
            Instant::now() < deadline,
            "never ready: {:?}",
            agent.status().not_ready
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(Host {
        host: agent.plugins().clone(),
        sink,
        agent,
        _plugins: dir,
    })
}

impl Host {
    /// Waits until `done` holds for the lines of `plugin`; fails with every line otherwise.
    async fn wait(
        &self,
        plugin: &str,
        what: &str,
        done: impl Fn(&[PluginLogRecord]) -> bool,
    ) -> anyhow::Result<Vec<PluginLogRecord>> {
        let deadline = Instant::now() + WAIT;
        loop {
            let lines: Vec<PluginLogRecord> = self
                .sink
                .records()
                .into_iter()
                .filter(|r| r.plugin == plugin)
                .collect();
            if done(&lines) {
                return Ok(lines);
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "{plugin}: {what} did not happen; lines:\n{}",
                    render(&lines)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let host = self.host.clone();
        // Dispatch threads are joined off the async runtime's workers.
        let _ = std::thread::spawn(move || host.shutdown()).join();
    }
}

fn config_map(name: &str, value: &str) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name}, "data": {"value": value}
    }))?)
}

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "e2e"}},
        "spec": {"containers": [{"name": "c", "image": "example/c:1"}]}
    }))?)
}

fn backup_crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "backups.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Backup", "plural": "backups", "singular": "backup", "listKind": "BackupList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_updates_deletes_crds_restart_and_relist_after_compaction() -> anyhow::Result<()> {
    let mut env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let config =
        r#"{"resources": ["v1/ConfigMap", "example.com/v1/Backup"], "namespaces": ["e2e"]}"#;
    let h = host(
        &env,
        &[("audit", kubewasm_plugin_artifacts::AUDIT_LOG, config)],
    )
    .await?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "e2e");

    // Create, update, delete.
    cms.create(&PostParams::default(), &config_map("a", "1")?)
        .await?;
    cms.create(&PostParams::default(), &config_map("b", "1")?)
        .await?;
    cms.replace("a", &PostParams::default(), &{
        let mut a = cms.get("a").await?;
        a.data = Some([("value".to_owned(), "2".to_owned())].into());
        a
    })
    .await?;
    cms.delete("b", &DeleteParams::default()).await?;
    let expected = [
        "added e2e/a",
        "added e2e/b",
        "updated e2e/a",
        "deleted e2e/b",
    ];
    h.wait("audit", "create, update, delete", |l| {
        audit(l, "ConfigMap").len() >= 4
    })
    .await?;
    let lines = h.wait("audit", "", |_| true).await?;
    assert_eq!(audit(&lines, "ConfigMap"), expected, "{}", render(&lines));
    let update = lines
        .iter()
        .find(|r| r.message == "updated")
        .expect("an update line");
    let (old, new) = (update.field("old-rv"), update.field("rv"));
    assert!(
        old.is_some() && old != new,
        "update carries old and new: {update:?}"
    );

    // A CRD installed after the plugin started: its informer was retrying discovery.
    resources::install_crd(&admin, backup_crd()).await?;
    let backups: Api<kube::api::DynamicObject> = Api::namespaced_with(
        admin.clone(),
        "e2e",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "example.com",
            "v1",
            "Backup",
        )),
    );
    let backup: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Backup",
        "metadata": {"name": "nightly"}, "spec": {"schedule": "0 2 * * *"}
    }))?;
    backups.create(&PostParams::default(), &backup).await?;
    h.wait("audit", "the Backup add", |l| {
        audit(l, "Backup") == ["added e2e/nightly"]
    })
    .await?;

    // An API server restart loses nothing and replays nothing.
    env.restart_apiserver().await?;
    let admin = env.client().await?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "e2e");
    cms.create(&PostParams::default(), &config_map("c", "1")?)
        .await?;
    h.wait("audit", "c after the restart", |l| {
        audit(l, "ConfigMap").len() >= 5
    })
    .await?;

    // While the server is down, a is deleted behind its back and etcd is compacted: on
    // reconnect the watch gets 410 Gone, the relist misses a, and a stale delete follows.
    env.stop_apiserver();
    assert!(env.etcd_delete("/registry/configmaps/e2e/a")?);
    env.compact_etcd()?;
    env.restart_apiserver().await?;
    let lines = h
        .wait("audit", "the stale delete of a", |l| {
            audit(l, "ConfigMap").len() >= 6
        })
        .await?;
    assert_eq!(
        audit(&lines, "ConfigMap"),
        [
            "added e2e/a",
            "added e2e/b",
            "updated e2e/a",
            "deleted e2e/b",
            "added e2e/c",
            "deleted e2e/a stale"
        ],
        "{}",
        render(&lines)
    );
    assert_eq!(
        audit(&lines, "Backup"),
        ["added e2e/nightly"],
        "nothing replayed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_view_summarizes_a_real_deployment() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "shop").await?;
    let h = host(
        &env,
        &[(
            "deployment-view",
            kubewasm_plugin_artifacts::DEPLOYMENT_VIEW,
            "{}",
        )],
    )
    .await?;
    let pp = PostParams::default();
    let template = json!({"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "web", "image": "example/web:1"}]}});
    let revision = json!({"deployment.kubernetes.io/revision": "1"});

    // There is no controller-manager: create what the controllers would, with owner references.
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": revision},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template}
    }))?;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), "shop")
        .create(&pp, &deployment)
        .await?;
    let owner = |kind: &str, name: &str, uid: &Option<String>| {
        json!([{"apiVersion": "apps/v1",
                "kind": kind, "name": name, "uid": uid, "controller": true}])
    };
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web-7d9f", "annotations": revision,
                     "labels": {"app": "web", "pod-template-hash": "7d9f"},
                     "ownerReferences": owner("Deployment", "web", &deployment.metadata.uid)},
        "spec": {"replicas": 2,
                 "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d9f"}},
                 "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "7d9f"}},
                              "spec": template["spec"]}}
    }))?;
    let rs = Api::<ReplicaSet>::namespaced(admin.clone(), "shop")
        .create(&pp, &rs)
        .await?;
    let pods = Api::<Pod>::namespaced(admin.clone(), "shop");
    let mut uids = Vec::new();
    for (name, ready) in [("web-7d9f-a", "True"), ("web-7d9f-b", "False")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web", "pod-template-hash": "7d9f"},
                         "ownerReferences": owner("ReplicaSet", "web-7d9f", &rs.metadata.uid)},
            "spec": template["spec"]
        }))?;
        let pod = pods.create(&pp, &pod).await?;
        uids.push(pod.metadata.uid.clone().unwrap_or_default());
        let status = json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": ready}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "web-7d9f-b.1"},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "shop",
                           "name": "web-7d9f-b", "uid": uids[1]},
        "reason": "BackOff", "message": "Back-off restarting failed container web",
        "type": "Warning", "source": {"component": "kubelet"},
        "firstTimestamp": "2026-11-20T10:00:00Z", "lastTimestamp": "2026-11-20T10:00:00Z"
    }))?;
    Api::<Event>::namespaced(admin.clone(), "shop")
        .create(&pp, &event)
        .await?;
    h.wait("deployment-view", "a 1/2 summary with the event", |lines| {
        lines.iter().any(|r| {
            r.message == "deployment summary"
                && r.field("deployment") == Some("shop/web")
                && r.field("replicaset") == Some("web-7d9f")
                && r.field("ready") == Some("1/2")
                && r.field("not-ready")
                    == Some("web-7d9f-b: Back-off restarting failed container web")
        })
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_and_deployments_in_order_over_paginated_lists() -> anyhow::Result<()> {
    // Streaming lists off: the reflector falls back to paginated lists on a real server.
    let mut env = TestEnv::start_with(Options {
        streaming_lists: false,
        ..Options::default()
    })
    .await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let pp = PostParams::default();
    let pods = Api::<Pod>::namespaced(admin.clone(), "e2e");
    for name in ["p1", "p2", "p3"] {
        pods.create(&pp, &pod(name)?).await?;
    }
    let deployments = Api::<Deployment>::namespaced(admin.clone(), "e2e");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "example/web:1"}]}}}
    }))?;
    deployments.create(&pp, &deployment).await?;

    let config = r#"{"resources": ["v1/Pod", "apps/v1/Deployment"], "namespaces": ["e2e"]}"#;
    let h = host(
        &env,
        &[("audit", kubewasm_plugin_artifacts::AUDIT_LOG, config)],
    )
    .await?;
    // Synced means the initial state has been handed to the plugin: no waiting needed here.
    let lines = h.wait("audit", "", |_| true).await?;
    assert_eq!(
        audit(&lines, "Pod"),
        [
            "added e2e/p1 initial",
            "added e2e/p2 initial",
            "added e2e/p3 initial"
        ]
    );
    assert_eq!(audit(&lines, "Deployment"), ["added e2e/web initial"]);
    assert!(h.agent.status().ready);

    let labels = json!({"metadata": {"labels": {"tier": "front"}}});
    pods.patch("p1", &PatchParams::default(), &Patch::Merge(&labels))
        .await?;
    pods.delete("p2", &DeleteParams::default()).await?;
    pods.create(&pp, &pod("p4")?).await?;
    let scale = json!({"spec": {"replicas": 3}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await?;
    deployments.delete("web", &DeleteParams::default()).await?;
    // A write, at once a restart, at once another write: the first may still be in flight.
    pods.create(&pp, &pod("p5")?).await?;
    env.restart_apiserver().await?;
    let pods = Api::<Pod>::namespaced(env.client().await?, "e2e");
    pods.create(&pp, &pod("p6")?).await?;

    let lines = h
        .wait("audit", "every pod event", |l| audit(l, "Pod").len() >= 9)
        .await?;
    assert_eq!(
        audit(&lines, "Pod"),
        [
            "added e2e/p1 initial",
            "added e2e/p2 initial",
            "added e2e/p3 initial",
            "updated e2e/p1",
            // The API server marks the pod terminating (deletionTimestamp), then removes it.
            "updated e2e/p2",
            "deleted e2e/p2",
            "added e2e/p4",
            "added e2e/p5",
            "added e2e/p6"
        ],
        "{}",
        render(&lines)
    );
    assert_eq!(
        audit(&lines, "Deployment"),
        [
            "added e2e/web initial",
            "updated e2e/web",
            "deleted e2e/web"
        ]
    );
    Ok(())
}

/// The reflector counters of `kind` in the agent's status.
fn reflector(h: &Host, kind: &str) -> kubewasm::source::kube::stats::ReflectorSnapshot {
    h.agent
        .status()
        .reflectors
        .into_iter()
        .find(|(gvk, _)| gvk.kind == kind)
        .map(|(_, r)| r)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_api_server_is_noticed_within_90_s_and_nothing_is_lost() -> anyhow::Result<()> {
    use kubewasm::source::kube::reflector::SILENCE;
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let config = r#"{"resources": ["v1/ConfigMap"], "namespaces": ["e2e"]}"#;
    let h = host(
        &env,
        &[("audit", kubewasm_plugin_artifacts::AUDIT_LOG, config)],
    )
    .await?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "e2e");
    cms.create(&PostParams::default(), &config_map("before", "1")?)
        .await?;
    h.wait("audit", "the first add", |l| {
        audit(l, "ConfigMap") == ["added e2e/before"]
    })
    .await?;
    // A healthy idle watch stays up longer than the silence bound: its bookmarks count.
    tokio::time::sleep(SILENCE + Duration::from_secs(10)).await;
    assert_eq!(
        reflector(&h, "ConfigMap").silences,
        0,
        "a healthy watch is not silent"
    );

    env.freeze_apiserver(true)?;
    let frozen = Instant::now();
    while reflector(&h, "ConfigMap").silences == 0 {
        anyhow::ensure!(
            frozen.elapsed() < SILENCE + Duration::from_secs(30),
            "the frozen server went unnoticed: {:?}",
            reflector(&h, "ConfigMap")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let noticed = frozen.elapsed();
    assert!(
        noticed <= SILENCE + Duration::from_secs(2),
        "noticed after {noticed:?}"
    );
    let status = reflector(&h, "ConfigMap");
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("silent")),
        "/status says why: {status:?}"
    );
    let metrics = h.agent.status().metrics();
    assert!(
        metrics.contains("kubewasm_watch_silences_total{resource=\"v1/ConfigMap\"} 1"),
        "{metrics}"
    );

    env.freeze_apiserver(false)?;
    cms.create(&PostParams::default(), &config_map("after", "1")?)
        .await?;
    let lines = h
        .wait("audit", "the add after the freeze", |l| {
            audit(l, "ConfigMap").len() >= 2
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let lines = h.wait("audit", "", |_| true).await.unwrap_or(lines);
    assert_eq!(
        audit(&lines, "ConfigMap"),
        ["added e2e/before", "added e2e/after"],
        "nothing lost, nothing repeated: {}",
        render(&lines)
    );
    Ok(())
}

/// `kubewasm record` on the real server, then `kubewasm test` replaying the recording: the
/// initial pod, a create, a status change and a delete, each one step the plugin sees once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_stream_replays_through_kubewasm_test() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let client = env.client().await?;
    resources::create_namespace(&client, "shop").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    pods.create(&PostParams::default(), &pod("web-1")?).await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("recorded.test.yaml");
    let mut recorder = std::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args(["record", "--type", "v1/Pod", "--for", "8", "-o"])
        .arg(&file)
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .spawn()?;
    // The initial list is done long before this on loopback.
    tokio::time::sleep(Duration::from_secs(3)).await;
    pods.create(&PostParams::default(), &pod("web-2")?).await?;
    let running = json!({"status": {"phase": "Running"}});
    pods.patch_status("web-1", &PatchParams::default(), &Patch::Merge(&running))
        .await?;
    pods.delete("web-2", &DeleteParams::default()).await?;
    let waited = tokio::task::spawn_blocking(move || recorder.wait());
    let status = tokio::time::timeout(WAIT, waited).await???;
    anyhow::ensure!(status.success(), "kubewasm record failed: {status}");

    let spec = kubewasm::testing::spec::Spec::load(
        &file,
        Some(std::path::Path::new(kubewasm_plugin_artifacts::POD_PHASE)),
    )?;
    let names: Vec<&str> = spec.steps.iter().map(|s| s.name.as_str()).collect();
    // A delete may be preceded by an update that sets deletionTimestamp.
    assert_eq!(
        names[..3],
        [
            "initial state",
            "changed v1/Pod shop/web-2",
            "changed v1/Pod shop/web-1",
        ]
    );
    assert_eq!(
        names.last(),
        Some(&"deleted v1/Pod shop/web-2"),
        "{names:?}"
    );
    let options = kubewasm::testing::Options {
        compiled_cache: None,
        step_timeout: WAIT,
    };
    let results = kubewasm::testing::run(&spec, &options, |_| {}).await?;
    let lines: Vec<usize> = results.iter().map(|r| r.lines).collect();
    // pod seen (initial), pod seen, pod phase changed, (nothing for deletionTimestamp), deleted.
    assert_eq!(lines[..3], [1, 1, 1], "{results:#?}");
    assert_eq!(lines.last(), Some(&1), "{results:#?}");
    assert_eq!(lines.iter().sum::<usize>(), 4, "{results:#?}");
    assert!(results.iter().all(|r| r.passed()), "{results:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_lays_out_watch_lines_as_the_reflector_and_the_double_expect()
-> anyhow::Result<()> {
    // The reflector splits `{"type":"T","object":{...}}` without parsing it (any other
    // layout is parsed whole), and the API server double writes this layout: both rest on
    // what a real server sends.
    use futures::AsyncBufReadExt;
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "layout").await?;
    let request = kube::core::Request::new("/api/v1/namespaces/layout/configmaps")
        .watch(&kube::api::WatchParams::default().timeout(10), "0")?;
    let mut body = Box::pin(admin.request_stream(request).await?);
    Api::<ConfigMap>::namespaced(admin.clone(), "layout")
        .create(&PostParams::default(), &config_map("c", "1")?)
        .await?;
    // Bookmarks may come first; every line has the layout, up to the added object's.
    loop {
        let mut line = String::new();
        tokio::time::timeout(WAIT, body.read_line(&mut line)).await??;
        let kind = line
            .strip_prefix(r#"{"type":""#)
            .and_then(|rest| rest.split_once(r#"","object":{"#))
            .filter(|_| line.trim_end().ends_with("}}"))
            .map(|(kind, _)| kind.to_owned());
        match kind.as_deref() {
            Some("ADDED") => return Ok(()),
            Some(_) => {}
            None => anyhow::bail!("not laid out as expected: {line}"),
        }
    }
}

/// The manifests folder refuses a built-in group's kind no API server serves (`v1
/// Deployment`); it must take every kind this one serves: its table of built-in kinds
/// (source/manifests/served.rs) misses none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_folder_takes_every_kind_the_api_server_serves() -> anyhow::Result<()> {
    use kubewasm::source::manifests::scope::unserved;
    let env = TestEnv::start().await?;
    let discovery = kube::discovery::Discovery::new(env.client().await?)
        .run()
        .await?;
    let mut checked = 0;
    for group in discovery.groups() {
        for version in group.versions() {
            for (resource, _) in group.versioned_resources(version) {
                let gvk =
                    kubewasm::gvk::Gvk::new(&resource.group, &resource.version, &resource.kind);
                assert_eq!(unserved(&gvk), None, "{gvk} is served");
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "{checked} kinds");
    Ok(())
}

/// scripts/cluster.sh, running: stopped with SIGTERM when dropped, so a failing test leaves
/// no servers behind.
struct Script(std::process::Child);

impl Drop for Script {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// scripts/cluster.sh starts the cached etcd and kube-apiserver by hand and prints a
/// kubeconfig that works; SIGTERM stops both, the script included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_script_starts_a_server_a_client_can_use() -> anyhow::Result<()> {
    use std::io::BufRead;
    let dir = tempfile::tempdir()?;
    let port = support::free_address().port();
    let mut script = Script(
        std::process::Command::new("bash")
            .arg(support::root().join("scripts/cluster.sh"))
            .arg(dir.path())
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()?,
    );
    let out = script.0.stdout.take().expect("piped");
    // Read to the end: a closed pipe would end the script before it stops its servers.
    let (tx, printed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(path) = line.strip_prefix("kubeconfig:") {
                let _ = tx.send(path.trim().to_owned());
            }
        }
    });
    let kubeconfig = tokio::task::spawn_blocking(move || printed.recv_timeout(WAIT)).await??;
    let client = kubewasm_testenv::client_from(std::path::Path::new(&kubeconfig)).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    let listed = namespaces.list(&Default::default()).await?;
    let names: Vec<String> = listed
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert!(names.contains(&"default".to_owned()), "{names:?}");
    let pid = script.0.id();
    let stopped = tokio::task::spawn_blocking(move || drop(script));
    tokio::time::timeout(WAIT, stopped).await??;
    // The script and both servers are gone: the port no longer answers, and no process is
    // a child of the script any more.
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the API server stopped"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the script ended"
    );
    Ok(())
}
