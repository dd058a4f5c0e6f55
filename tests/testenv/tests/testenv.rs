//! The test environment itself: RBAC identities, restart and compaction really work.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kubewasm_testenv::{TestEnv, client_from, resources};

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_restart_compaction_and_etcd_deletes() -> anyhow::Result<()> {
    let mut env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "t").await?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "t");
    cms.create(&PostParams::default(), &config_map("a")).await?;

    // A limited identity: may list configmaps, not secrets.
    let reader = client_from(&env.identity("reader", &[])?).await?;
    resources::grant(
        &admin,
        "reader",
        vec![resources::rule(
            "",
            &["configmaps"],
            &["get", "list", "watch"],
        )],
    )
    .await?;
    let listed = Api::<ConfigMap>::namespaced(reader.clone(), "t")
        .list(&ListParams::default())
        .await?;
    assert_eq!(listed.items.len(), 1);
    let denied = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(reader, "t")
        .list(&ListParams::default())
        .await
        .expect_err("secrets are not granted");
    assert!(denied.to_string().contains("forbidden"), "{denied}");

    // A restart keeps the data (etcd survives).
    env.restart_apiserver().await?;
    let admin = env.client().await?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "t");
    assert!(cms.get_opt("a").await?.is_some());

    // Deleting from etcd directly is visible through the API server.
    assert!(env.etcd_delete("/registry/configmaps/t/a")?);
    assert!(!env.etcd_delete("/registry/configmaps/t/a")?);
    cms.create(&PostParams::default(), &config_map("b")).await?;
    let revision = env.compact_etcd()?;
    assert!(revision > 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_compacted_revision_is_gone() -> anyhow::Result<()> {
    let env = TestEnv::start_with(kubewasm_testenv::Options {
        watch_cache: false,
        ..kubewasm_testenv::Options::default()
    })
    .await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "t").await?;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "t");
    let first = cms.create(&PostParams::default(), &config_map("a")).await?;
    let old_rv = first.metadata.resource_version.clone().unwrap_or_default();
    cms.create(&PostParams::default(), &config_map("b")).await?;
    let at_old = ListParams::default()
        .at(&old_rv)
        .matching(kube::api::VersionMatch::Exact);
    assert_eq!(
        cms.list(&at_old).await?.items.len(),
        1,
        "before compaction the old state is readable"
    );
    env.compact_etcd()?;
    match cms.list(&at_old).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 410, "{status:?}"),
        other => panic!("expected 410 Gone after compaction, got {other:?}"),
    }
    Ok(())
}
