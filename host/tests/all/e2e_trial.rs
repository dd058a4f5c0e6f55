//! Plugins on trial, end to end on a real kube-apiserver (kubewasm-testenv):
//!
//! - a labeler in dry-run mode leaves every pod unchanged, its requests reach the API server
//!   as `dryRun=All` (the audit log), and its reports name the label it would add; switched to
//!   `serve`, without a restart, its labels land;
//! - an image policy in monitor mode admits what it denies in `serve`, and reports the denial;
//!   switched back, the very next review is enforced; a mutating plugin in monitor mode
//!   reports its patch and the pod is created without it;
//! - a candidate (`labeler.candidate.wasm`) runs beside the serving labeler: the same version
//!   handles every live event alike, one that stops labelling shows each difference in full;
//! - a matching candidate (the Go labeler beside the Rust one) is promoted after N equal
//!   events, and every pod created before, during and after is labelled exactly once;
//! - a looping candidate is dropped with its reason, and the serving version never notices;
//! - a candidate of an admission plugin reviews each request after the serving answer went,
//!   and the two decisions are compared.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kubewasm::agent::{Agent, Cluster};
use kubewasm::plugins::{Mode, PluginFile, PluginStatus};
use kubewasm_testenv::{PluginFolder, TestEnv, resources};
use serde_json::json;

use crate::e2e_admission::{
    POLICIES, create_until, namespaces, pod, refused_with, register, serving, serving_recorded,
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
    let agent = support::following(Cluster::Kube(admin.clone()), config, folder.path()).await?;

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

/// An agent with the labeler serving and `candidate` as `labeler.candidate` in one folder,
/// on the real API server, once both have synced.
async fn with_candidate(
    admin: &kube::Client,
    candidate: &str,
    promote_after: Option<u64>,
) -> anyhow::Result<(Agent, PluginFolder)> {
    let folder = PluginFolder::new();
    folder.put("labeler", kubewasm_plugin_artifacts::LABELER);
    folder.put("labeler.candidate", candidate);
    let mut config = support::labeler_in("e2e");
    if let Some(settings) = config.plugins.named.get_mut("labeler") {
        settings.promote_after = promote_after;
    }
    let agent = support::following(Cluster::Kube(admin.clone()), config, folder.path()).await?;
    wait("both versions synced", || {
        let synced = |n| support::plugin_status(&agent, n).synced;
        Ok((synced("labeler") && synced("labeler.candidate")).then_some(()))
    })
    .await?;
    Ok((agent, folder))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_runs_beside_the_serving_version_and_shows_where_they_differ()
-> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "e2e");

    // The same version as candidate: every live event handled alike, only the serving
    // version's writes land.
    let (agent, _folder) = with_candidate(&admin, kubewasm_plugin_artifacts::LABELER, None).await?;
    let candidate = support::plugin_status(&agent, "labeler.candidate");
    assert_eq!(candidate.mode, "dry-run");
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &pod(name, "example/app:1")?)
            .await?;
    }
    let status = wait("three equal events", || {
        let s = support::plugin_status(&agent, "labeler");
        Ok(s.candidate.filter(|c| c.equal >= 3))
    })
    .await?;
    assert!(status.running, "{status:?}");
    assert_eq!(
        (status.different, status.candidate_failed),
        (0, 0),
        "{status:?}"
    );
    let writes = env.audited_writes()?;
    let patches: Vec<_> = writes
        .iter()
        .filter(|a| a.resource == "pods" && a.verb == "patch")
        .collect();
    assert!(patches.iter().any(|a| !a.dry_run), "{patches:?}");
    for name in ["a", "b", "c"] {
        let labels = pods.get(name).await?.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("shop"),
            "{name}"
        );
    }
    let metrics = agent.status().metrics();
    assert!(
        metrics.lines().any(|l| l.starts_with(
            r#"kubewasm_plugin_candidate_events_total{plugin="labeler",outcome="equal"}"#
        )),
        "{metrics}"
    );
    drop(agent);

    // A candidate that no longer labels (pod-phase only logs): each new pod is a difference,
    // shown with what the serving version wrote.
    // Asked to promote after one equal event: a difference keeps it from ever being.
    let (agent, folder) =
        with_candidate(&admin, kubewasm_plugin_artifacts::POD_PHASE, Some(1)).await?;
    pods.create(&PostParams::default(), &pod("d", "example/app:1")?)
        .await?;
    let status = wait("a difference", || {
        let s = support::plugin_status(&agent, "labeler");
        Ok(s.candidate.filter(|c| c.different >= 1))
    })
    .await?;
    let first = &status.differences[0];
    assert!(first.event.contains("e2e/d@"), "{first:?}");
    assert!(
        first.serving.starts_with("apply v1/Pod e2e/d ") && first.serving.contains("team"),
        "{first:?}"
    );
    assert_eq!(first.candidate, "", "{first:?}");
    assert_eq!(status.promotion, None, "{status:?}");
    assert!(folder.file("labeler.candidate").exists(), "not promoted");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_matches_is_promoted_with_no_event_lost_or_doubled() -> anyhow::Result<()>
{
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "e2e");
    // The Go labeler as the candidate of the Rust one: the same writes, another build.
    let go = kubewasm_plugin_artifacts::LABELER_GO
        .ok_or_else(|| anyhow::anyhow!("the Go plugins are built (Go's tool chain on PATH)"))?;
    let (agent, folder) = with_candidate(&admin, go, Some(3)).await?;
    let mut names: Vec<String> = Vec::new();
    for i in 0..3 {
        let name = format!("before-{i}");
        pods.create(&PostParams::default(), &pod(&name, "example/app:1")?)
            .await?;
        names.push(name);
    }
    let status = wait("the promotion", || {
        let s = support::plugin_status(&agent, "labeler");
        Ok(s.candidate.filter(|c| c.promotion.is_some()))
    })
    .await?;
    let promotion = status.promotion.clone().unwrap_or_default();
    assert!(
        promotion.starts_with("promoted after 3 equal events"),
        "{status:?}"
    );
    assert_eq!(
        (status.different, status.candidate_failed),
        (0, 0),
        "{status:?}"
    );
    // The folder swaps the candidate in and unloads it; pods created meanwhile and after
    // are each labelled exactly once.
    let go_digest = kubewasm::plugins::digest(&std::fs::read(go)?);
    assert!(!folder.file("labeler.candidate").exists());
    for i in 0..3 {
        let name = format!("during-{i}");
        pods.create(&PostParams::default(), &pod(&name, "example/app:1")?)
            .await?;
        names.push(name);
    }
    wait("the candidate serving, alone", || {
        let plugins = agent.plugins().status();
        let serving = plugins.iter().find(|p| p.name == "labeler");
        let candidate = plugins.iter().any(|p| p.name == "labeler.candidate");
        Ok((serving.is_some_and(|p| p.digest == go_digest) && !candidate).then_some(()))
    })
    .await?;
    for i in 0..3 {
        let name = format!("after-{i}");
        pods.create(&PostParams::default(), &pod(&name, "example/app:1")?)
            .await?;
        names.push(name);
    }
    for name in &names {
        let deadline = Instant::now() + WAIT;
        loop {
            let labels = pods.get(name).await?.metadata.labels.unwrap_or_default();
            if labels.get("team").map(String::as_str) == Some("shop") {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "pod {name} not labelled");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let writes = env.audited_writes()?;
    for name in &names {
        let landed = writes
            .iter()
            .filter(|a| a.resource == "pods" && a.verb == "patch" && &a.name == name)
            .filter(|a| !a.dry_run)
            .count();
        assert_eq!(landed, 1, "pod {name}: {landed} patches landed");
    }
    Ok(())
}

/// A candidate that loops is stopped at its deadline and dropped with the reason; the serving
/// version (another plugin of the same name) goes on as before. On a manifests folder: the
/// isolation is the host's, whatever the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_loops_is_dropped_and_the_serving_version_never_notices()
-> anyhow::Result<()> {
    let cluster = tempfile::tempdir()?;
    std::fs::write(
        cluster.path().join("objects.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: shop}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\n",
    )?;
    // pod-phase ignores its configuration; the hostile candidate loops on every ConfigMap.
    let mut config = support::configs(&[("probe", r#"{"mode": "loop"}"#)]);
    if let Some(settings) = config.plugins.named.get_mut("probe") {
        settings.limits.deadline = Duration::from_millis(50);
    }
    let folder = PluginFolder::new();
    folder.put("probe", kubewasm_plugin_artifacts::POD_PHASE);
    folder.put("probe.candidate", kubewasm_plugin_artifacts::HOSTILE);
    let cluster = Cluster::Folder(cluster.path().to_owned());
    let agent = support::following(cluster, config, folder.path()).await?;
    let status = wait("the candidate dropped", || {
        let s = support::plugin_status(&agent, "probe");
        Ok(s.candidate.filter(|c| c.dropped.is_some()))
    })
    .await?;
    assert!(!status.running, "{status:?}");
    let why = status.dropped.unwrap_or_default();
    assert!(why.starts_with("trapped"), "{why}");
    let serving = wait("the serving version delivering", || {
        let s = support::plugin_status(&agent, "probe");
        Ok((s.synced && s.delivered >= 1).then_some(s))
    })
    .await?;
    assert_eq!((serving.failed, serving.traps), (0, 0), "{serving:?}");
    Ok(())
}

/// A candidate of an admission plugin reviews each request after the serving version's
/// answer went, and the two decisions are compared: alike for the same version, otherwise
/// shown in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_reviews_beside_the_serving_version() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    namespaces(&admin).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "shop");
    let policy = kubewasm_plugin_artifacts::IMAGE_POLICY;
    for (candidate, name, alike) in [
        (policy, "same", true),
        (kubewasm_plugin_artifacts::POD_DEFAULTS, "other", false),
    ] {
        let plugins = [
            ("image-policy", policy, "{}"),
            ("image-policy.candidate", candidate, "{}"),
        ];
        let concurrency = kubewasm::admission::default_concurrency();
        let (agent, address, _tls) = serving(&env, &admin, &plugins, concurrency).await?;
        let webhooks = (&env, &admin, &agent, address);
        register(webhooks, "kubewasm", &["image-policy"]).await?;
        let refused = create_until(
            &pods,
            &PostParams::default(),
            |i| pod(&format!("{name}-{i}"), "nginx:1.27"),
            |a| refused_with(a, "no image allow list"),
        )
        .await?;
        assert!(refused.is_err());
        let status = wait("a compared review", || {
            let s = support::plugin_status(&agent, "image-policy");
            Ok(s.candidate.filter(|c| c.equal + c.different > 0))
        })
        .await?;
        // The next agent serves elsewhere: this one's webhook goes with it.
        Api::<ValidatingWebhookConfiguration>::all(admin.clone())
            .delete("kubewasm", &Default::default())
            .await?;
        if alike {
            assert_eq!(
                (status.equal > 0, status.different),
                (true, 0),
                "{status:?}"
            );
        } else {
            let first = status.differences.first().expect("a difference");
            assert!(first.event.starts_with("review "), "{first:?}");
            assert!(
                first
                    .serving
                    .starts_with("denied: <plugin>: no image allow list"),
                "{first:?}"
            );
            assert!(first.candidate.starts_with("patched patch"), "{first:?}");
        }
    }
    Ok(())
}

/// Reviews recorded as they are answered (`admission.recordReviews`) replay through two
/// versions with `kubewasm test --compare`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_reviews_replay_through_two_versions() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    namespaces(&admin).await?;
    let record = tempfile::tempdir()?;
    let concurrency = kubewasm::admission::default_concurrency();
    let (agent, address, _tls) = serving_recorded(
        &env,
        &admin,
        &POLICIES[..1],
        concurrency,
        Some(record.path()),
    )
    .await?;
    register(
        (&env, &admin, &agent, address),
        "kubewasm",
        &["image-policy"],
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "shop");
    let refused = create_until(
        &pods,
        &PostParams::default(),
        |i| pod(&format!("recorded-{i}"), "nginx:1.27"),
        |a| refused_with(a, "no image allow list"),
    )
    .await?;
    assert!(refused.is_err());
    let file = record.path().join("image-policy.reviews.test.yaml");
    let text = std::fs::read_to_string(&file)?;
    assert!(
        text.contains("review CREATE v1/Pod shop/recorded-"),
        "{text}"
    );
    let compare = |new: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .args([
                "test",
                "--compare",
                kubewasm_plugin_artifacts::IMAGE_POLICY,
                new,
            ])
            .arg(&file)
            .output()
    };
    let same = compare(kubewasm_plugin_artifacts::IMAGE_POLICY)?;
    let stdout = String::from_utf8_lossy(&same.stdout);
    assert_eq!(same.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(" 0 differ"), "{stdout}");
    let other = compare(kubewasm_plugin_artifacts::POD_DEFAULTS)?;
    let stdout = String::from_utf8_lossy(&other.stdout);
    assert_eq!(other.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("admission: OLD denied") && stdout.contains("NEW allowed, patch"),
        "{stdout}"
    );
    Ok(())
}
