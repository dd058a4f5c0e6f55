//! Recovering like a controller, on a real kube-apiserver and etcd: a write that fails through
//! an outage lands once it is over, and the host reconnects within seconds of the API server
//! being back, after a restart, a hang or a compaction (410 Gone). The times are printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::object::Transform;
use kubewasm::source::kube::KubeSource;
use kubewasm::source::kube::write::KubeWriter;
use kubewasm::wasm::logging::MemorySink;
use kubewasm::write::Writer;
use kubewasm_testenv::proxy::FreezableProxy;
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

use crate::support;

const WAIT: Duration = Duration::from_secs(120);

async fn wait_for<T>(
    what: &str,
    bound: Duration,
    mut check: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(found) = check().await? {
            return Ok(found);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_failing_through_an_outage_lands_once_it_is_over() -> anyhow::Result<()> {
    // The host reads the API server directly and writes through a proxy that goes down for
    // 60 s: the labeler's one write fails as Unavailable attempt after attempt (with the
    // default policy it is retried for 15 minutes), then lands, once.
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let proxy = FreezableProxy::start(env.addr()).await?;
    let through_proxy = env.admin_client_via(proxy.addr()).await?;
    let tasks = tokio::runtime::Handle::current();
    let source = Arc::new(KubeSource::new(
        admin.clone(),
        Transform::default(),
        tasks.clone(),
    ));
    let writer: Arc<dyn Writer> = Arc::new(KubeWriter::new(through_proxy, tasks));
    let mut config = support::labeler_in("e2e");
    let settings = config.plugins.named.get_mut("labeler").expect("configured");
    // The default cap (60 s) would land the write up to a minute after the outage; a
    // shorter one keeps this test short and changes nothing else.
    settings.delivery.backoff.cap = Duration::from_secs(5);
    let sink = Arc::new(MemorySink::default());
    let options = AgentOptions::new(Cluster::Source(source, Some(writer)), config, sink);
    let mut agent = Agent::start(options).await?;
    let plugins = kubewasm_testenv::PluginFolder::new();
    plugins.put("labeler", kubewasm_plugin_artifacts::LABELER);
    agent.follow_plugins(plugins.path()).await?;

    proxy.set_down(true);
    let pods = Api::<Pod>::namespaced(admin.clone(), "e2e");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "example/c:1"}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    wait_for("the write failing", WAIT, async || {
        let s = support::plugin_status(&agent, "labeler");
        Ok((s.retried >= 1 && s.writes_failed >= 1).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let during = support::plugin_status(&agent, "labeler");
    assert_eq!((during.given_up, during.writes_sent), (0, 0), "{during:#?}");
    proxy.set_down(false);
    wait_for("the label", WAIT, async || {
        let pod = pods.get("web").await?;
        let labels = pod.metadata.labels.unwrap_or_default();
        Ok((labels.get("team").map(String::as_str) == Some("shop")).then_some(()))
    })
    .await?;
    let patches: Vec<_> = env
        .audited_writes()?
        .into_iter()
        .filter(|w| w.verb == "patch" && w.resource == "pods" && w.name == "web")
        .collect();
    assert_eq!(patches.len(), 1, "landed once: {patches:#?}");
    assert_eq!(patches[0].code, 200);
    let after = support::plugin_status(&agent, "labeler");
    assert_eq!((after.given_up, after.writes_sent), (0, 1), "{after:#?}");
    Ok(())
}

/// A host with the audit-log plugin watching ConfigMaps in `e2e`.
async fn audit_host(
    env: &TestEnv,
) -> anyhow::Result<(Agent, Arc<MemorySink>, kubewasm_testenv::PluginFolder)> {
    let sink = Arc::new(MemorySink::default());
    let config = support::configs(&[(
        "audit",
        r#"{"resources": ["v1/ConfigMap"], "namespaces": ["e2e"]}"#,
    )]);
    let options = AgentOptions::new(Cluster::Kube(env.client().await?), config, sink.clone());
    let mut agent = Agent::start(options).await?;
    let plugins = kubewasm_testenv::PluginFolder::new();
    plugins.put("audit", kubewasm_plugin_artifacts::AUDIT_LOG);
    agent.follow_plugins(plugins.path()).await?;
    wait_for("ready", WAIT, async || {
        Ok(agent.status().ready.then_some(()))
    })
    .await?;
    Ok((agent, sink, plugins))
}

/// Creates ConfigMap `name` and waits until the plugin logged it: how long that took.
async fn delivered(
    admin: &kube::Client,
    sink: &MemorySink,
    name: &str,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "e2e");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    cms.create(&PostParams::default(), &cm).await?;
    let key = format!("e2e/{name}");
    wait_for(&format!("{name} delivered"), WAIT, async || {
        let seen = support::audit(&sink.records(), "ConfigMap")
            .iter()
            .any(|l| l == &format!("added {key}"));
        Ok(seen.then(|| started.elapsed()))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_event_after_each_fault_arrives_within_seconds_of_the_server()
-> anyhow::Result<()> {
    let mut env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "e2e").await?;
    let (agent, sink, _plugins) = audit_host(&env).await?;
    delivered(&admin, &sink, "before").await?;
    let mut times = Vec::new();

    // Down for 40 s: the reconnect backoff has grown to 12.8 to 25.6 s by then.
    env.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(40)).await;
    env.restart_apiserver().await?;
    let admin = env.client().await?;
    times.push((
        "a restart after 40 s down",
        delivered(&admin, &sink, "restarted").await?,
    ));

    // Frozen for 20 s (SIGSTOP): the open watch resumes when it thaws.
    env.freeze_apiserver(true)?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    env.freeze_apiserver(false)?;
    times.push((
        "a thaw after 20 s frozen",
        delivered(&admin, &sink, "thawed").await?,
    ));

    // Down while history is compacted past what the host saw: its watch gets 410 Gone and
    // it relists.
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "e2e");
    for i in 0..5 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("churn-{i}")}}))?;
        cms.create(&PostParams::default(), &cm).await?;
    }
    env.stop_apiserver();
    // etcd moves on while the API server is away (one of them deleted behind its back), so
    // the host's version is older than anything a restarted watch cache holds.
    anyhow::ensure!(env.etcd_delete("/registry/configmaps/e2e/churn-0")?);
    env.compact_etcd()?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    env.restart_apiserver().await?;
    let admin = env.client().await?;
    times.push((
        "a relist after compaction (410)",
        delivered(&admin, &sink, "relisted").await?,
    ));

    let relists = support::relists(&agent);
    assert!(relists >= 1, "the compaction made the host relist");
    for (fault, took) in &times {
        eprintln!("first event after {fault}: {took:.2?} after the server was ready");
    }
    // About two seconds each on an idle machine (the probe asks once a second); the bound
    // leaves room for a loaded one and is still well under the backoff it replaces.
    for (fault, took) in times {
        assert!(took < Duration::from_secs(10), "{fault}: {took:?}");
    }
    Ok(())
}
