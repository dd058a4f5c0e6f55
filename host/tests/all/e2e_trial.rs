//! Plugins on trial, end to end on a real kube-apiserver (kubewasm-testenv):
//!
//! - a labeler in dry-run mode leaves every pod unchanged, its requests reach the API server
//!   as `dryRun=All` (the audit log), and its reports name the label it would add; switched to
//!   `serve`, without a restart, its labels land;
//! - an image policy in monitor mode admits what it denies in `serve`, and reports the denial;
//!   switched back, the very next review is enforced; a mutating plugin in monitor mode
//!   reports its patch and the pod is created without it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::plugins::{Mode, PluginFile, PluginStatus};
use kubewasm::wasm::logging::MemorySink;
use kubewasm_testenv::{PluginFolder, TestEnv, resources};
use serde_json::json;

use crate::e2e_admission::{
    POLICIES, create_until, namespaces, pod, refused_with, register, serving,
};
use crate::support;

const WAIT: Duration = Duration::from_secs(60);

/// Polls `check` until it gives a value.
async fn wait<T>(what: &str, check: impl Fn() -> anyhow::Result<Option<T>>) -> anyhow::Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check()? {
            return Ok(value);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs plugin `name` (its file in `folder`) in `mode` from now on, as a KubewasmPlugin's
/// changed spec does: new settings, applied as a new version, no restart.
async fn switch(
    agent: &Agent,
    folder: &PluginFolder,
    name: &str,
    mode: Mode,
) -> anyhow::Result<()> {
    let host = agent.plugins().clone();
    let mut settings = host.settings().settings(name).clone();
    settings.mode = mode;
    host.configure(name, Some(settings));
    let file = PluginFile::read(&folder.file(name), u64::MAX)?;
    tokio::task::spawn_blocking(move || host.apply(&file)).await??;
    Ok(())
}

fn accepted(status: &PluginStatus) -> u64 {
    status
        .trial
        .as_ref()
        .and_then(|t| t.writes.get("apply"))
        .and_then(|by| by.get("accepted"))
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_plugin_changes_nothing_and_reports_what_it_would() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "e2e");
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(name, "example/app:1")?)
            .await?;
    }
    let mut config = support::labeler_in("e2e");
    if let Some(settings) = config.plugins.named.get_mut("labeler") {
        settings.mode = Mode::DryRun;
    }
    let folder = PluginFolder::new();
    folder.put("labeler", kubewasm_plugin_artifacts::LABELER);
    let options = AgentOptions::new(
        Cluster::Kube(admin.clone()),
        config,
        Arc::new(MemorySink::default()),
    );
    let mut agent = Agent::start(options).await?;
    let report = agent.follow_plugins(folder.path()).await?;
    anyhow::ensure!(report.failed.is_empty(), "plugins failed: {report:?}");

    let status = wait("three dry-run applies", || {
        let s = support::plugin_status(&agent, "labeler");
        Ok((accepted(&s) >= 3).then_some(s))
    })
    .await?;
    assert_eq!(status.mode, "dry-run");
    assert_eq!(status.writes_sent, 0, "{status:?}");
    let trial = status.trial.expect("trial reports");
    let report = trial
        .last_writes
        .iter()
        .find(|w| w.target.ends_with("e2e/a"))
        .expect("a report for pod a");
    assert!(report.against_cache, "{report:?}");
    assert!(
        report
            .changes
            .contains(&json!({"op": "add", "path": "/metadata/labels", "value": {"team": "shop"}}))
            || report
                .changes
                .contains(&json!({"op": "add", "path": "/metadata/labels/team", "value": "shop"})),
        "{report:?}"
    );
    // Nothing changed, and every write the API server saw was a dry run.
    for name in ["a", "b", "c"] {
        let labels = pods.get(name).await?.metadata.labels.unwrap_or_default();
        assert!(
            !labels.contains_key("team"),
            "pod {name} labelled: {labels:?}"
        );
    }
    let patches: Vec<_> = env
        .audited_writes()?
        .into_iter()
        .filter(|a| a.resource == "pods" && a.verb == "patch")
        .collect();
    assert!(patches.len() >= 3, "{patches:?}");
    assert!(patches.iter().all(|a| a.dry_run), "{patches:?}");
    // Its reports are on /metrics too.
    let metrics = agent.status().metrics();
    assert!(
        metrics.lines().any(|l| l.starts_with(
            r#"kubewasm_plugin_dry_run_writes_total{plugin="labeler",verb="apply",outcome="accepted"}"#
        )),
        "{metrics}"
    );

    // Served from now on, without a restart: its labels land.
    switch(&agent, &folder, "labeler", Mode::Serve).await?;
    for name in ["a", "b", "c"] {
        let deadline = Instant::now() + WAIT;
        loop {
            let labels = pods.get(name).await?.metadata.labels.unwrap_or_default();
            if labels.get("team").map(String::as_str) == Some("shop") {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "pod {name} not labelled: {labels:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        env.audited_writes()?
            .iter()
            .any(|a| a.resource == "pods" && !a.dry_run)
    );
    assert_eq!(support::plugin_status(&agent, "labeler").mode, "serve");
    Ok(())
}

fn monitored(status: &PluginStatus, decision: &str) -> u64 {
    status
        .trial
        .as_ref()
        .map_or(0, |t| t.reviews_decided(decision))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_mode_admits_what_serve_denies_and_the_switch_back_enforces_at_once()
-> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    namespaces(&admin).await?;
    let (agent, address, _tls) = serving(
        &env,
        &admin,
        &POLICIES,
        kubewasm::admission::default_concurrency(),
    )
    .await?;
    let folder = PluginFolder::new();
    for (name, built, _) in POLICIES {
        folder.put(name, built);
    }
    let webhooks = (&env, &admin, &agent, address);
    register(webhooks, "kubewasm", &["image-policy", "pod-defaults"]).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "shop");
    let create = PostParams::default();
    // Served: no allow list, so every image is refused.
    let early = create_until(
        &pods,
        &create,
        |i| pod(&format!("early-{i}"), "nginx:1.27"),
        |a| refused_with(a, "image-policy: no image allow list"),
    )
    .await?;
    assert!(early.is_err());

    // Monitored: the same create is admitted, and pod-defaults' patch is not applied.
    switch(&agent, &folder, "image-policy", Mode::Monitor).await?;
    switch(&agent, &folder, "pod-defaults", Mode::Monitor).await?;
    let admitted = pods
        .create(&create, &pod("monitored", "nginx:1.27")?)
        .await?;
    let labels = admitted.metadata.labels.clone().unwrap_or_default();
    assert!(
        !labels.contains_key("team"),
        "patched in monitor mode: {labels:?}"
    );
    let policy = support::plugin_status(&agent, "image-policy");
    assert_eq!(policy.mode, "monitor");
    assert!(monitored(&policy, "denied") >= 1, "{policy:?}");
    let trial = policy.trial.as_ref().expect("trial reports");
    let denial = trial
        .last_reviews
        .iter()
        .find(|r| r.object == "v1/Pod shop/monitored")
        .expect("the monitored create reported");
    assert_eq!(denial.decision, "denied");
    assert_eq!(denial.rule, "v1/Pod CREATE");
    assert!(denial.message.contains("no image allow list"), "{denial:?}");
    let defaults = support::plugin_status(&agent, "pod-defaults");
    let patch = defaults
        .trial
        .as_ref()
        .and_then(|t| {
            t.last_reviews
                .iter()
                .find(|r| r.object == "v1/Pod shop/monitored")
        })
        .and_then(|r| r.patch.clone())
        .expect("pod-defaults' patch reported");
    assert!(patch.contains("team"), "{patch}");
    let metrics = agent.status().metrics();
    assert!(
        metrics.lines().any(|l| l.starts_with(
            r#"kubewasm_admission_monitored_total{plugin="image-policy",rule="v1/Pod CREATE",decision="denied"}"#
        )),
        "{metrics}"
    );

    // Served again: the very next review is enforced.
    switch(&agent, &folder, "image-policy", Mode::Serve).await?;
    let refused = pods.create(&create, &pod("served", "nginx:1.27")?).await;
    assert!(refused_with(&refused, "no image allow list"), "{refused:?}");
    assert_eq!(support::plugin_status(&agent, "image-policy").mode, "serve");
    Ok(())
}
