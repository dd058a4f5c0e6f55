//! A controller plugin on a real kube-apiserver, etcd and kube-controller-manager
//! (kubewasm-testenv): the example namespace provisioner's children carry their Namespace as
//! controller (the server checks the ownerReference), are pruned by uid when the team label
//! goes, and a ResourceQuota made by hand beside them is never touched; the host keeps its
//! finalizer on every Namespace and, when one is deleted, removes it only after `finalize`
//! returned Ok: the real namespace controller empties it meanwhile, then it is gone. Once the
//! plugin is removed, `kubewasm finalizers release` lets the objects it held go.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::gvk::Gvk;
use kubewasm::wasm::logging::MemorySink;
use kubewasm::write::{Verb, WriteGrant};
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

use crate::support;

const WAIT: Duration = Duration::from_secs(60);
const FINALIZER: &str = "kubewasm.dev/provisioner";

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
    settings.grants.writes = vec![
        WriteGrant {
            resources: vec![
                Gvk::new("", "v1", "ResourceQuota"),
                Gvk::new("", "v1", "LimitRange"),
                Gvk::new("networking.k8s.io", "v1", "NetworkPolicy"),
                Gvk::new("rbac.authorization.k8s.io", "v1", "RoleBinding"),
            ],
            subresources: vec![],
            verbs: vec![Verb::Patch, Verb::Create, Verb::Delete],
            namespaces: None,
        },
        WriteGrant {
            resources: vec![Gvk::new("", "v1", "Namespace")],
            subresources: vec![],
            verbs: vec![Verb::Patch],
            namespaces: None,
        },
    ];
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
