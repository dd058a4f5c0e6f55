//! Helpers that set up cluster state for a test: namespaces, CRDs, RBAC for test identities.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, PostParams};

/// Creates a namespace.
pub async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("create namespace {name}"))?;
    Ok(())
}

/// Installs a CRD (given as JSON) and waits until it is established and served.
pub async fn install_crd(client: &kube::Client, crd: serde_json::Value) -> anyhow::Result<()> {
    let crd: CustomResourceDefinition = serde_json::from_value(crd).context("not a CRD")?;
    let name = crd.metadata.name.clone().context("CRD without a name")?;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    api.create(&PostParams::default(), &crd)
        .await
        .with_context(|| format!("create CRD {name}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let current = api.get(&name).await?;
        let established = current
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("CRD {name} not established within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One RBAC rule: API group, resources and verbs.
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| (*r).into()).collect()),
        verbs: verbs.iter().map(|v| (*v).into()).collect(),
        ..Default::default()
    }
}

/// Grants `user` the cluster-wide `rules` through a ClusterRole and ClusterRoleBinding named
/// after the user.
pub async fn grant(
    client: &kube::Client,
    user: &str,
    rules: Vec<PolicyRule>,
) -> anyhow::Result<()> {
    let name = format!("test-{user}");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        rules: Some(rules),
        ..Default::default()
    };
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .with_context(|| format!("create ClusterRole {name}"))?;
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: user.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            ..Default::default()
        }]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .with_context(|| format!("create ClusterRoleBinding {name}"))?;
    Ok(())
}
