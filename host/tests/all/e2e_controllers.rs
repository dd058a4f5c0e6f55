//! A controller plugin on a real kube-apiserver, etcd and kube-controller-manager
//! (kubewasm-testenv): the example namespace provisioner's children carry their Namespace as
//! controller (the server checks the ownerReference), are pruned by uid when the team label
//! goes, and a ResourceQuota made by hand beside them is never touched; the host keeps its
//! finalizer on every Namespace and, when one is deleted, removes it only after `finalize`
//! returned Ok: the real namespace controller empties it meanwhile, then it is gone. Once the
//! plugin is removed, `kubewasm finalizers release` lets the objects it held go. A finalizer
//! outlives a host killed in the middle of `finalize` and a hot swap there; and the App
//! operator (Python, JavaScript) keeps an App's children and status on the same control plane.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::wasm::logging::MemorySink;
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

use crate::support;

const WAIT: Duration = Duration::from_secs(60);
const FINALIZER: &str = "kubewasm.dev/provisioner";
/// The App operator's test file, which grants it the writes it needs.
const APP_OPERATOR_TEST: &str = "plugins/python/app-operator/tests/app-operator.test.yaml";

/// Polls an async `check` until it holds.
async fn until<F: Future<Output = anyhow::Result<bool>>>(
    what: &str,
    check: impl Fn() -> F,
) -> anyhow::Result<()> {
    support::until_async(what, WAIT, check).await
}

async fn start(
    client: kube::Client,
    sink: Arc<MemorySink>,
) -> anyhow::Result<(Agent, kubewasm_testenv::PluginFolder)> {
    let mut config = support::configs(&[("provisioner", r#"{"finalizer": true}"#)]);
    let settings = config
        .plugins
        .named
        .get_mut("provisioner")
        .ok_or_else(|| anyhow::anyhow!("configured"))?;
    settings.grants.writes =
        support::writes_granted_by(crate::controllers::PROVISIONER_TEST, "provisioner");
    let dir = kubewasm_testenv::PluginFolder::new();
    dir.put(
        "provisioner",
        kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER,
    );
    let options = AgentOptions::new(Cluster::Kube(client), config, sink);
    let mut agent = Agent::start(options).await?;
    let report = agent.follow_plugins(dir.path()).await?;
    anyhow::ensure!(report.failed.is_empty(), "plugins failed: {report:?}");
    Ok((agent, dir))
}

fn finalizers(ns: &Namespace) -> Vec<String> {
    ns.metadata.finalizers.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_owned_pruned_by_uid_and_a_finalizer_waits_for_finalize() -> anyhow::Result<()>
{
    let mut env = TestEnv::start().await?;
    env.start_controller_manager().await?;
    let admin = env.client().await?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let team: Namespace = serde_json::from_value(json!({
        "metadata": {"name": "team-a", "labels": {"team": "shop"}}
    }))?;
    namespaces.create(&PostParams::default(), &team).await?;
    resources::create_namespace(&admin, "plain").await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(admin.clone(), "team-a");
    let stranger: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "hand-made"}, "spec": {"hard": {"pods": "5"}}
    }))?;
    quotas.create(&PostParams::default(), &stranger).await?;
    let sink = Arc::new(MemorySink::default());
    let (agent, _plugins) = start(admin.clone(), sink.clone()).await?;

    let policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), "team-a");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "team-a");
    until("team-a's children", || async {
        Ok(quotas.get_opt("team-quota").await?.is_some()
            && policies.get_opt("default-deny").await?.is_some()
            && bindings.get_opt("team-edit").await?.is_some())
    })
    .await?;
    let parent = namespaces.get("team-a").await?;
    let quota = quotas.get("team-quota").await?;
    let owner = quota
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the quota has no owner"))?;
    assert_eq!(owner.uid, parent.metadata.uid.clone().unwrap_or_default());
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Namespace", Some(true), Some(true))
    );
    let labels = quota.metadata.labels.clone().unwrap_or_default();
    assert!(
        labels.contains_key("applyset.kubernetes.io/part-of"),
        "{labels:?}"
    );
    until("the finalizer on both namespaces", || async {
        Ok(finalizers(&namespaces.get("team-a").await?)
            .iter()
            .any(|f| f == FINALIZER)
            && finalizers(&namespaces.get("plain").await?)
                .iter()
                .any(|f| f == FINALIZER))
    })
    .await?;

    // The team label goes: the four children are deleted, the hand-made quota stays.
    let unlabel = json!({"metadata": {"labels": {"team": null}}});
    namespaces
        .patch("team-a", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await?;
    until("team-a's children pruned", || async {
        Ok(quotas.get_opt("team-quota").await?.is_none()
            && policies.get_opt("default-deny").await?.is_none()
            && bindings.get_opt("team-edit").await?.is_none())
    })
    .await?;
    assert!(
        quotas.get_opt("hand-made").await?.is_some(),
        "never a stranger"
    );

    // Deleting team-a: the namespace controller deletes what is in it (the hand-made quota),
    // the host calls finalize and removes its finalizer, and the namespace goes.
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await?;
    until("team-a gone", || async {
        Ok(namespaces.get_opt("team-a").await?.is_none())
    })
    .await?;
    let released = support::field_values(&sink.records(), "released", "namespace");
    assert_eq!(released, ["team-a"], "finalize ran once");
    let status = support::plugin_status(&agent, "provisioner");
    assert_eq!(
        (status.given_up, status.finalizers_failing),
        (0, 0),
        "{status:#?}"
    );

    // Removed, the plugin leaves its finalizer on every Namespace; one command releases them.
    assert!(agent.plugins().unload("provisioner"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .args([
            "finalizers",
            "release",
            "provisioner",
            "--type",
            "v1/Namespace",
        ])
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("released v1/Namespace plain"), "{stdout}");
    let plain = namespaces.get("plain").await?;
    assert!(
        !finalizers(&plain).iter().any(|f| f == FINALIZER),
        "{plain:?}"
    );
    Ok(())
}

/// An App's only condition as (status, reason, observedGeneration), when it is `Available`.
fn available(app: &kube::api::DynamicObject) -> Option<(&str, &str, i64)> {
    let c = app.data.pointer("/status/conditions/0")?;
    (c["type"] == "Available").then(|| {
        (
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or(""),
            c["observedGeneration"].as_i64().unwrap_or(0),
        )
    })
}

/// The App operator (Python and JavaScript, one after the other on the same control plane):
/// children owned by the App, a status taken from what the real deployment controller says of
/// the Deployment and written only when it changes, and a finalizer that unregisters the App
/// before the server lets it go, after which the real garbage collector deletes its children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_gets_children_a_status_from_its_deployment_and_unregisters_first()
-> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

    let mut env = TestEnv::start().await?;
    env.start_controller_manager().await?;
    let admin = env.client().await?;
    let crd = std::fs::read_to_string(support::root().join("examples/apps/app-crd.yaml"))?;
    resources::install_crd(&admin, serde_yaml_ng::from_str(&crd)?).await?;
    let kind = ApiResource::from_gvk(&GroupVersionKind::gvk("demo.kubewasm.dev", "v1", "App"));
    for (language, plugin) in [
        ("python", kubewasm_plugin_artifacts::APP_OPERATOR_PY),
        ("javascript", kubewasm_plugin_artifacts::APP_OPERATOR_JS),
    ] {
        let plugin =
            plugin.ok_or_else(|| anyhow::anyhow!("the {language} app-operator is not built"))?;
        let ns = format!("shop-{language}");
        resources::create_namespace(&admin, &ns).await?;
        let apps: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &kind);
        let app: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "demo.kubewasm.dev/v1", "kind": "App",
            "metadata": {"name": "web"},
            "spec": {"image": "registry.example/web:1", "replicas": 1, "port": 8080}
        }))?;
        apps.create(&PostParams::default(), &app).await?;

        let mut config = support::configs(&[("app-operator", "{}")]);
        let settings = config
            .plugins
            .named
            .get_mut("app-operator")
            .ok_or_else(|| anyhow::anyhow!("configured"))?;
        settings.grants.writes = support::writes_granted_by(APP_OPERATOR_TEST, "app-operator");
        let sink = Arc::new(MemorySink::default());
        let dir = kubewasm_testenv::PluginFolder::new();
        dir.put("app-operator", plugin);
        let options = AgentOptions::new(Cluster::Kube(admin.clone()), config, sink.clone());
        let mut agent = Agent::start(options).await?;
        let report = agent.follow_plugins(dir.path()).await?;
        anyhow::ensure!(report.failed.is_empty(), "{language}: {report:?}");

        // Children, owned by the App; the registry lists it; the real deployment controller
        // says one replica is not available (no node runs it), and so does the App.
        let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
        let registry: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
        until(
            &format!("{language}: the App unavailable, as its Deployment"),
            || async {
                let app = apps.get("web").await?;
                Ok(available(&app) == Some(("False", "MinimumReplicasUnavailable", 1)))
            },
        )
        .await?;
        let deployment = deployments.get("web").await?;
        let owner = deployment
            .metadata
            .owner_references
            .clone()
            .unwrap_or_default();
        assert_eq!(
            owner
                .iter()
                .map(|o| (o.kind.as_str(), o.controller))
                .collect::<Vec<_>>(),
            [("App", Some(true))],
            "{language}"
        );
        let entries = registry.get("app-registry").await?.data.unwrap_or_default();
        assert_eq!(
            entries.get("web").map(String::as_str),
            Some(format!("http://web.{ns}.svc:8080").as_str())
        );

        // No replicas wanted: the deployment controller calls that available, and the App's
        // condition follows, observed at generation 2, its transition time moved.
        let patched = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let scale = json!({"spec": {"replicas": 0}});
        apps.patch("web", &PatchParams::default(), &Patch::Merge(&scale))
            .await?;
        until(&format!("{language}: the App available"), || async {
            let app = apps.get("web").await?;
            Ok(available(&app) == Some(("True", "MinimumReplicasAvailable", 2)))
        })
        .await?;
        let app = apps.get("web").await?;
        let since = app
            .data
            .pointer("/status/conditions/0/lastTransitionTime")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        assert!(
            since >= patched.as_str(),
            "{language}: moved at {since}, patched at {patched}"
        );

        // Settled: reconciles that find everything as it was write nothing, so the App's
        // resourceVersion stays (a status loop would move it on every reconcile).
        let settled = apps.get("web").await?.metadata.resource_version;
        agent
            .plugins()
            .reconcile("app-operator", &format!("{ns}/web"))
            .map_err(anyhow::Error::msg)?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            apps.get("web").await?.metadata.resource_version,
            settled,
            "{language}: no status loop"
        );

        // Deleted: finalize unregisters it first, then it goes, and the real garbage
        // collector deletes its Deployment.
        apps.delete("web", &DeleteParams::default()).await?;
        until(&format!("{language}: the App gone"), || async {
            Ok(apps.get_opt("web").await?.is_none())
        })
        .await?;
        let entries = registry.get("app-registry").await?.data.unwrap_or_default();
        assert!(!entries.contains_key("web"), "{language}: {entries:?}");
        let unregistered = support::field_values(&sink.records(), "app unregistered", "app");
        assert_eq!(unregistered, [format!("{ns}/web")], "{language}");
        until(&format!("{language}: the Deployment collected"), || async {
            Ok(deployments.get_opt("web").await?.is_none())
        })
        .await?;
        let status = support::plugin_status(&agent, "app-operator");
        assert_eq!(
            (status.given_up, status.finalizers_failing),
            (0, 0),
            "{language}: {status:#?}"
        );
        assert!(agent.plugins().unload("app-operator"));
    }
    Ok(())
}

/// `kubewasm run` working in `dir` (its plugins and configuration), and its address.
fn host_process(
    env: &TestEnv,
    dir: &std::path::Path,
) -> anyhow::Result<(
    kubewasm_testenv::agent_process::AgentProcess,
    std::net::SocketAddr,
)> {
    let address = kubewasm_testenv::agent_process::free_address()?;
    let args = kubewasm_testenv::agent_process::run_args(dir, env.kubeconfig(), address);
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let process = kubewasm_testenv::agent_process::AgentProcess::start(
        env!("CARGO_BIN_EXE_kubewasm").as_ref(),
        &args,
    )?;
    Ok((process, address))
}

/// The provisioner's entry in a `kubewasm run` configuration, with `config`.
fn provisioner_config(config: &str) -> String {
    format!(
        "plugins:\n  provisioner:\n    config: {config}\n    \
         limits: {{deadlineMs: 10000}}\n    grants:\n      writes:\n        \
         - {{resources: [v1/ResourceQuota, v1/LimitRange, networking.k8s.io/v1/NetworkPolicy, \
         rbac.authorization.k8s.io/v1/RoleBinding], verbs: [patch, create, delete]}}\n        \
         - {{resources: [v1/Namespace], verbs: [patch]}}\n"
    )
}

/// Waits (up to a minute) for a log line of `host` holding every one of `words`.
fn logged(
    host: &kubewasm_testenv::agent_process::AgentProcess,
    words: &[&str],
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + WAIT;
    while let Some((_, line)) =
        host.next_line(deadline.saturating_duration_since(std::time::Instant::now()))
    {
        if words.iter().all(|w| line.contains(w)) {
            return Ok(());
        }
    }
    anyhow::bail!("no line with {words:?} within {WAIT:?}")
}

/// A Namespace deleted while the provisioner's `finalize` runs: the host is killed (SIGKILL)
/// in the middle, so the finalizer stays and the Namespace with it; the next host finalizes
/// it again and lets it go. Then a hot swap of the plugin in the middle of the next
/// `finalize`: that Namespace goes too, its finalizer removed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finalizer_outlives_a_killed_host_and_a_hot_swap_mid_finalize() -> anyhow::Result<()> {
    let mut env = TestEnv::start().await?;
    env.start_controller_manager().await?;
    let admin = env.client().await?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for name in ["team-a", "team-b"] {
        let team: Namespace = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"team": "shop"}}
        }))?;
        namespaces.create(&PostParams::default(), &team).await?;
    }
    let plugin = std::path::Path::new(kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER);
    let dir = kubewasm_testenv::agent_process::run_dir(
        &[("provisioner", plugin)],
        &provisioner_config("{finalizer: true, finalizeMs: 4000}"),
    )?;
    let held = |ns: &Namespace| finalizers(ns).iter().any(|f| f == FINALIZER);
    let (mut first, _) = host_process(&env, dir.path())?;
    until("the finalizer on both", || async {
        Ok(held(&namespaces.get("team-a").await?) && held(&namespaces.get("team-b").await?))
    })
    .await?;

    // Killed in the middle of finalize: the Namespace stays, terminating, still held.
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await?;
    logged(&first, &["finalizing", "team-a"])?;
    first.kill()?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let a = namespaces.get("team-a").await?;
    assert!(
        held(&a) && a.metadata.deletion_timestamp.is_some(),
        "held while no host runs: {a:?}"
    );
    // The next host finalizes it from the start and lets it go.
    let (second, _) = host_process(&env, dir.path())?;
    logged(&second, &["released", "team-a"])?;
    until("team-a gone", || async {
        Ok(namespaces.get_opt("team-a").await?.is_none())
    })
    .await?;

    // A new version dropped in while team-b's finalize runs: team-b goes all the same.
    namespaces
        .delete("team-b", &DeleteParams::default())
        .await?;
    logged(&second, &["finalizing", "team-b"])?;
    let swapped = kubewasm_plugin_artifacts::variant(
        kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER,
        "swap",
    );
    let tmp = dir.path().join("plugins/.provisioner.tmp");
    std::fs::write(&tmp, swapped)?;
    std::fs::rename(&tmp, dir.path().join("plugins/provisioner.wasm"))?;
    until("team-b gone", || async {
        Ok(namespaces.get_opt("team-b").await?.is_none())
    })
    .await?;
    Ok(())
}

/// Each reconcile a `kubewasm run` logged, by namespace: from its `reconciling` line to the
/// line that ends it (`team namespace provisioned` or `not a team namespace`), or to `gone`
/// (when the process ended) for one it never finished.
fn reconciles(
    lines: &[(std::time::Instant, String)],
    gone: std::time::Instant,
) -> std::collections::BTreeMap<String, Vec<(std::time::Instant, std::time::Instant)>> {
    let mut open = std::collections::BTreeMap::new();
    let mut done: std::collections::BTreeMap<String, Vec<_>> = std::collections::BTreeMap::new();
    for (at, line) in lines {
        let Ok(record) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let message = record["fields"]["message"].as_str().unwrap_or("");
        let Some(ns) = message
            .split_whitespace()
            .find_map(|w| w.strip_prefix("namespace="))
        else {
            continue;
        };
        let ns = ns.trim_matches('"').to_owned();
        if message.starts_with("reconciling") {
            open.insert(ns, *at);
        } else if (message.starts_with("team namespace provisioned")
            || message.starts_with("not a team namespace"))
            && let Some(start) = open.remove(&ns)
        {
            done.entry(ns).or_default().push((start, *at));
        }
    }
    for (ns, start) in open {
        done.entry(ns).or_default().push((start, gone));
    }
    done
}

/// A hand-over as a rolling update makes it: the leading replica is told to stop (SIGTERM)
/// while it reconciles a stream of changes, and the other takes over. No key is reconciled
/// by both at once: every reconcile of the old leader ended before the new one's first
/// reconcile of that key began; and every Namespace ends with its children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_never_reconciles_a_key_on_both_replicas_at_once() -> anyhow::Result<()> {
    const TEAMS: usize = 8;
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for i in 0..TEAMS {
        let team: Namespace = serde_json::from_value(json!({
            "metadata": {"name": format!("hand-{i}"), "labels": {"team": "shop"}}
        }))?;
        namespaces.create(&PostParams::default(), &team).await?;
    }
    let plugin = std::path::Path::new(kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER);
    let config = format!(
        "leaderElection: {{enabled: true, namespace: default, name: hand-over, \
         leaseDurationSeconds: 3}}\n{}",
        provisioner_config("{reconcileMs: 300}")
    );
    let leads = |address| {
        let (code, body) = kubewasm_testenv::agent_process::http_get(address, "/status");
        code == 200
            && serde_json::from_str::<kubewasm::serve::Status>(&body)
                .is_ok_and(|s| s.leader && s.ready)
    };
    let dirs = [
        kubewasm_testenv::agent_process::run_dir(&[("provisioner", plugin)], &config)?,
        kubewasm_testenv::agent_process::run_dir(&[("provisioner", plugin)], &config)?,
    ];
    let (mut old, old_address) = host_process(&env, dirs[0].path())?;
    until("the first replica leads", || async {
        Ok(leads(old_address))
    })
    .await?;
    let (new, new_address) = host_process(&env, dirs[1].path())?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Changes of every namespace, round after round, across the hand-over.
    let churn = {
        let namespaces = namespaces.clone();
        tokio::spawn(async move {
            for round in 0..60 {
                for i in 0..TEAMS {
                    let patch = json!({"metadata": {"labels": {"round": round.to_string()}}});
                    let name = format!("hand-{i}");
                    let _ = namespaces
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (clean, _) = old.terminate(Duration::from_secs(30))?;
    let gone = std::time::Instant::now();
    let old_lines = old.take_lines();
    let tail: Vec<_> = old_lines.iter().rev().take(5).map(|(_, l)| l).collect();
    assert!(clean, "the old leader stops cleanly: {tail:#?}");
    until("the other replica leads", || async {
        Ok(leads(new_address))
    })
    .await?;
    churn.await?;
    let quotas: Api<ResourceQuota> = Api::all(admin.clone());
    until("every namespace's quota", || async {
        Ok(quotas.list(&Default::default()).await?.items.len() == TEAMS)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let before = reconciles(&old_lines, gone);
    let after = reconciles(&new.take_lines(), std::time::Instant::now());
    assert!(
        !before.is_empty() && !after.is_empty(),
        "both reconciled: {before:?} {after:?}"
    );
    let gaps: Vec<_> = after
        .iter()
        .filter_map(|(ns, theirs)| {
            let first = theirs.iter().map(|(start, _)| *start).min()?;
            let last = before.get(ns)?.iter().map(|(_, end)| *end).max()?;
            Some(first.saturating_duration_since(last))
        })
        .collect();
    eprintln!("from the old leader's last reconcile of a key to the new one's first: {gaps:?}");
    for (ns, theirs) in &after {
        let first = theirs.iter().map(|(start, _)| *start).min();
        for (_, end) in before.get(ns).into_iter().flatten() {
            assert!(
                first.is_some_and(|first| *end <= first),
                "{ns}: the old leader's reconcile ended {:?} after the new one's began",
                first.map(|f| end.saturating_duration_since(f))
            );
        }
    }
    Ok(())
}
