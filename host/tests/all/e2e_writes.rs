//! Plugin writes, end to end on a real kube-apiserver with RBAC on (kubewasm-testenv): the
//! host runs as a service account holding exactly the RBAC `kubewasm rbac` renders, and the
//! API server's audit log shows every write request it sent.
//!
//! - the labeler's label lands with its field manager `kubewasm/labeler` (server-side apply);
//! - a CrashLoopBackOff Event is listed through events.k8s.io/v1, and its repeat raises the
//!   series count instead of creating a second Event;
//! - ungranted writes are refused in the host and reach no server;
//! - a write granted in the configuration but missing from RBAC fails with the server's 403,
//!   which names the verb;
//! - an event that stages a write and fails twice writes once;
//! - a follower writes nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::gvk::Gvk;
use kubewasm::leader::ElectionConfig;
use kubewasm::rbac;
use kubewasm::wasm::logging::MemorySink;
use kubewasm::write::{Verb, WriteGrant, event_gvk};
use kubewasm_testenv::{Audited, TestEnv, resources};
use serde_json::json;

use crate::support;

use support::plugin_status as plugin;

const WAIT: Duration = Duration::from_secs(60);

fn grant(kind: Gvk, verbs: &[Verb], namespace: &str) -> WriteGrant {
    WriteGrant {
        resources: vec![kind],
        subresources: vec![],
        verbs: verbs.to_vec(),
        namespaces: Some(vec![namespace.to_owned()]),
    }
}

/// The plugins of the test: name, built file, `init` configuration, write grants.
fn plugins() -> Vec<(&'static str, &'static str, String, Vec<WriteGrant>)> {
    let pod = Gvk::new("", "v1", "Pod");
    let cm = Gvk::new("", "v1", "ConfigMap");
    vec![
        (
            "labeler",
            kubewasm_plugin_artifacts::LABELER,
            json!({"key": "team", "value": "payments", "namespaces": ["e2e", "other"]}).to_string(),
            // The grant for `other` is left out of the RBAC below.
            vec![
                grant(pod.clone(), &[Verb::Patch], "e2e"),
                grant(pod, &[Verb::Patch], "other"),
            ],
        ),
        (
            "crashloop-events",
            kubewasm_plugin_artifacts::CRASHLOOP_EVENTS,
            "{}".into(),
            vec![grant(event_gvk(), &[Verb::Create, Verb::Patch], "e2e")],
        ),
        (
            "ungranted",
            kubewasm_plugin_artifacts::HOSTILE,
            json!({"mode": "write-ungranted"}).to_string(),
            vec![],
        ),
        (
            "flaky",
            kubewasm_plugin_artifacts::HOSTILE,
            json!({"mode": "write-then-fail"}).to_string(),
            vec![grant(cm, &[Verb::Create], "e2e")],
        ),
    ]
}

fn config() -> HostConfig {
    let plugins = plugins();
    let configs: Vec<(&str, &str)> = plugins.iter().map(|p| (p.0, p.2.as_str())).collect();
    let mut config = support::configs(&configs);
    for (name, _, _, writes) in plugins {
        if let Some(settings) = config.plugins.named.get_mut(name) {
            settings.grants.writes = writes;
        }
    }
    config
}

/// The RBAC `kubewasm rbac` renders for these plugins, minus the labeler's grant in `other`.
async fn install_rbac(
    admin: &kube::Client,
    name: &str,
    leader_election: bool,
) -> anyhow::Result<()> {
    let types =
        rbac::Reads::everywhere([Gvk::new("", "v1", "Pod"), Gvk::new("", "v1", "ConfigMap")]);
    let writes: Vec<WriteGrant> = plugins()
        .into_iter()
        .flat_map(|p| p.3)
        .filter(|g| g.namespaces.as_deref() != Some(&["other".to_owned()][..]))
        .collect();
    let identity = rbac::Identity {
        name: name.into(),
        namespace: "kubewasm".into(),
        service_account: name.into(),
        leader_election,
        sharding: None,
        plugin_resources: false,
        plugin_state: false,
    };
    support::apply_yaml(admin, &rbac::render(&types, &writes, &identity, "test")).await
}

async fn start(
    env: &TestEnv,
    name: &str,
    election: Option<ElectionConfig>,
) -> anyhow::Result<(Agent, kubewasm_testenv::PluginFolder)> {
    let client = env.service_account_client("kubewasm", name).await?;
    let dir = kubewasm_testenv::PluginFolder::new();
    for (plugin, built, _, _) in plugins() {
        dir.put(plugin, built);
    }
    let options = AgentOptions {
        election,
        ..AgentOptions::new(
            Cluster::Kube(client),
            config(),
            Arc::new(MemorySink::default()),
        )
    };
    let mut agent = Agent::start(options).await?;
    let report = agent.follow_plugins(dir.path()).await?;
    anyhow::ensure!(report.failed.is_empty(), "plugins failed: {report:?}");
    Ok((agent, dir))
}

/// Polls an async `check` until it gives a value.
async fn wait<T, F: Future<Output = anyhow::Result<Option<T>>>>(
    what: &str,
    check: impl Fn() -> F,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}
    }))?)
}

/// The pod's status with its container waiting in `reason`.
fn waiting(reason: &str, restarts: u32) -> serde_json::Value {
    json!({"status": {"containerStatuses": [{
        "name": "app", "ready": false, "restartCount": restarts,
        "image": "example/app:1", "imageID": "",
        "state": {"waiting": {"reason": reason}}
    }]}})
}

fn by(user: &str) -> impl Fn(&&Audited) -> bool + '_ {
    move |a| a.user == user
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_once_as_granted_and_every_refusal_is_named() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    for ns in ["kubewasm", "e2e", "other"] {
        resources::create_namespace(&admin, ns).await?;
    }
    install_rbac(&admin, "kubewasm", false).await?;
    install_rbac(&admin, "follower", true).await?;
    // Someone else holds the Lease for an hour: the second host stays a follower.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kubewasm");
    let mut lease: Lease = serde_json::from_value(json!({"metadata": {"name": "kubewasm"}}))?;
    lease.spec = Some(LeaseSpec {
        holder_identity: Some("someone-else".into()),
        lease_duration_seconds: Some(3600),
        renew_time: Some(MicroTime(jiff::Timestamp::now())),
        ..LeaseSpec::default()
    });
    leases.create(&PostParams::default(), &lease).await?;
    let (leader, _plugins) = start(&env, "kubewasm", None).await?;
    let (follower, _follower_plugins) = start(
        &env,
        "follower",
        Some(ElectionConfig::new("kubewasm", "kubewasm", "follower-1")),
    )
    .await?;

    let pods: Api<Pod> = Api::namespaced(admin.clone(), "e2e");
    pods.create(&PostParams::default(), &pod("web")?).await?;
    let other: Api<Pod> = Api::namespaced(admin.clone(), "other");
    other.create(&PostParams::default(), &pod("db")?).await?;
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), "e2e");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cfg"}}))?;
    cms.create(&PostParams::default(), &cm).await?;

    // The label, applied with the plugin's field manager.
    let labeled = wait("the label on e2e/web", || async {
        let p = pods.get("web").await?;
        let has = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str)
            == Some("payments");
        Ok(has.then_some(p))
    })
    .await?;
    let managers: Vec<(String, String)> = labeled
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("kubewasm/labeler".into(), "Apply".into())),
        "{managers:?}"
    );

    // Granted in the configuration, missing from RBAC: the server's 403, naming the verb.
    let forbidden = wait("the labeler's 403 in other", || async {
        Ok(plugin(&leader, "labeler")
            .last_error
            .filter(|e| e.contains("other/db")))
    })
    .await?;
    assert!(forbidden.contains("Forbidden"), "{forbidden}");
    assert!(
        forbidden.contains("cannot patch resource \"pods\""),
        "{forbidden}"
    );
    assert!(
        other
            .get("db")
            .await?
            .metadata
            .labels
            .unwrap_or_default()
            .is_empty(),
        "no label in other"
    );

    // Staged, failed twice, sent on the third attempt: one create.
    wait("e2e/cfg-copy", || async {
        Ok(cms.get_opt("cfg-copy").await?)
    })
    .await?;

    // A crash loop: one Warning Event; the second crash loop raises its series.
    let status = PatchParams::default();
    pods.patch_status(
        "web",
        &status,
        &Patch::Merge(waiting("CrashLoopBackOff", 3)),
    )
    .await?;
    let events: Api<Event> = Api::namespaced(admin.clone(), "e2e");
    let crash = |list: Vec<Event>| -> Vec<Event> {
        list.into_iter()
            .filter(|e| e.reason.as_deref() == Some("CrashLoopBackOff"))
            .collect()
    };
    let first = wait("the CrashLoopBackOff Event", || async {
        Ok(crash(events.list(&ListParams::default()).await?.items)
            .into_iter()
            .next())
    })
    .await?;
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    assert_eq!(first.reporting_controller.as_deref(), Some("kubewasm"));
    assert_eq!(
        first.reporting_instance.as_deref(),
        Some("crashloop-events")
    );
    let regarding = first.regarding.clone().unwrap_or_default();
    assert_eq!(
        (regarding.kind.as_deref(), regarding.name.as_deref()),
        (Some("Pod"), Some("web"))
    );
    pods.patch_status(
        "web",
        &status,
        &Patch::Merge(waiting("ContainerCreating", 3)),
    )
    .await?;
    pods.patch_status(
        "web",
        &status,
        &Patch::Merge(waiting("CrashLoopBackOff", 4)),
    )
    .await?;
    let again = wait("the series count 2", || async {
        let list = crash(events.list(&ListParams::default()).await?.items);
        let count = list
            .first()
            .and_then(|e| e.series.as_ref())
            .map(|s| s.count);
        Ok((count == Some(2)).then_some(list))
    })
    .await?;
    assert_eq!(again.len(), 1, "repeats fold into one Event: {again:?}");

    // What the API server saw from each host.
    let leader_user = "system:serviceaccount:kubewasm:kubewasm";
    let audited = env.audited_writes()?;
    let sent: Vec<&Audited> = audited.iter().filter(by(leader_user)).collect();
    let copies: Vec<_> = sent
        .iter()
        .filter(|a| a.resource == "configmaps" && a.verb == "create")
        .collect();
    assert_eq!(copies.len(), 1, "three attempts, one create: {copies:?}");
    assert_eq!((copies[0].name.as_str(), copies[0].code), ("cfg-copy", 201));
    for a in &sent {
        let expected = matches!(
            (a.verb.as_str(), a.resource.as_str()),
            ("patch", "pods") | ("create" | "patch", "events") | ("create", "configmaps")
        );
        assert!(expected, "an ungranted write reached the server: {a:?}");
    }
    let ungranted = plugin(&leader, "ungranted");
    assert!(ungranted.writes_denied >= 6, "{ungranted:?}");
    assert_eq!(ungranted.writes_sent, 0);
    let flaky = plugin(&leader, "flaky");
    assert_eq!(
        (flaky.writes_sent, flaky.writes_failed),
        (1, 0),
        "{flaky:?}"
    );
    assert!(plugin(&leader, "labeler").writes_sent >= 1);

    // The follower has the same plugins and grants, and sent nothing.
    let follower_user = "system:serviceaccount:kubewasm:follower";
    let from_follower: Vec<&Audited> = audited
        .iter()
        .filter(by(follower_user))
        .filter(|a| a.resource != "leases")
        .collect();
    assert!(from_follower.is_empty(), "{from_follower:?}");
    let standby = plugin(&follower, "labeler");
    assert!(standby.standby, "{standby:?}");
    assert_eq!(standby.writes_sent + standby.writes_denied, 0);
    Ok(())
}
