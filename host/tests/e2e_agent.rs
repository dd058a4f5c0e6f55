//! kubewasm as a cluster agent, end to end on a real kube-apiserver (kubewasm-testenv): a
//! service account holding exactly the RBAC `kubewasm rbac` generates, one permission taken
//! away, the HTTP endpoints through startup, normal running and a failing plugin, and a
//! leader hand-over between two hosts.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kubewasm::gvk::Gvk;
use kubewasm::informer::factory::InformerFactory;
use kubewasm::leader::{ElectionConfig, Elector, lead_while_elected};
use kubewasm::object::Transform;
use kubewasm::plugins::inspect::inspect;
use kubewasm::plugins::{PluginHost, PluginSettings, content_hash};
use kubewasm::rbac;
use kubewasm::runtime::logging::{MemorySink, PluginLogRecord};
use kubewasm::runtime::{Limits, Runtime};
use kubewasm::serve::{Endpoints, serve};
use kubewasm::source::kube::KubeSource;
use kubewasm_testenv::{TestEnv, resources};
use serde::Deserialize;
use serde_json::json;
use support::{audit, render};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod support;

const WAIT: Duration = Duration::from_secs(60);

/// A plugin of the test: name, built file, configuration.
type PluginSpec = (&'static str, &'static str, String);

fn audit_of(resources: &[&str]) -> String {
    json!({"resources": resources, "namespaces": ["e2e"]}).to_string()
}

/// A host with its endpoints on a free port; plugins configured, not loaded yet.
struct Agent {
    host: Arc<PluginHost>,
    sink: Arc<MemorySink>,
    source: Arc<KubeSource>,
    endpoints: Arc<Endpoints>,
    address: std::net::SocketAddr,
    plugins: Vec<std::path::PathBuf>,
    _dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

async fn agent(
    client: kube::Client,
    plugins: &[PluginSpec],
    follow: bool,
) -> anyhow::Result<Agent> {
    let handle = tokio::runtime::Handle::current();
    let source = Arc::new(KubeSource::new(
        client,
        Transform::default(),
        handle.clone(),
    ));
    let factory = InformerFactory::new(source.clone(), handle);
    let sink = Arc::new(MemorySink::default());
    let wasm = Arc::new(Runtime::new().map_err(|e| anyhow::anyhow!("{e:#}"))?);
    let mut host = PluginHost::new(wasm, factory.clone(), sink.clone(), Limits::default());
    let dir = tempfile::tempdir()?;
    let mut paths = Vec::new();
    for (name, built, config) in plugins {
        host.set_config(name, config.clone());
        let path = dir.path().join(format!("{name}.wasm"));
        std::fs::copy(built, &path)?;
        paths.push(path);
    }
    let host = Arc::new(host);
    if follow {
        host.follow();
    }
    let endpoints = Arc::new(Endpoints {
        host: host.clone(),
        factory,
        kube: Some(source.clone()),
        started: AtomicBool::new(false),
        leader: Arc::new(AtomicBool::new(!follow)),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let server = tokio::spawn(serve(listener, endpoints.clone()));
    Ok(Agent {
        host,
        sink,
        source,
        endpoints,
        address,
        plugins: paths,
        _dir: dir,
        server,
    })
}

impl Agent {
    /// Loads every plugin (as the folder watcher's first pass would), then marks the start.
    async fn load_all(&self) -> anyhow::Result<()> {
        let (host, paths) = (self.host.clone(), self.plugins.clone());
        tokio::task::spawn_blocking(move || {
            for path in paths {
                host.load(&path)?;
            }
            Ok::<_, kubewasm::plugins::PluginError>(())
        })
        .await??;
        self.endpoints.started.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// `GET path`: status code and body.
    async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect(self.address).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: test\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        Ok((code, body.to_owned()))
    }

    /// The value of one sample of `/metrics` (`name{labels}` exactly as exposed).
    async fn metric(&self, sample: &str) -> anyhow::Result<Option<f64>> {
        let (_, body) = self.get("/metrics").await?;
        Ok(body.lines().find_map(|l| {
            l.strip_prefix(sample)
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.parse().ok())
        }))
    }

    fn lines(&self, plugin: &str) -> Vec<PluginLogRecord> {
        support::of(self.sink.records(), plugin)
    }

    /// Waits until `done` holds for `plugin`'s audit of `kind`.
    async fn wait_audit(
        &self,
        plugin: &str,
        kind: &str,
        done: impl Fn(&[String]) -> bool,
    ) -> anyhow::Result<Vec<String>> {
        wait(&format!("{plugin}'s {kind} audit"), || {
            let lines = self.lines(plugin);
            let seen = audit(&lines, kind);
            done(&seen).then_some(seen)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", render(&self.lines(plugin))))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.server.abort();
        let host = self.host.clone();
        let _ = std::thread::spawn(move || host.shutdown()).join();
    }
}

/// Polls `check` until it gives a value.
async fn wait<T>(what: &str, check: impl Fn() -> Option<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls an async `check` until it holds.
async fn wait_async<F: Future<Output = anyhow::Result<bool>>>(
    what: &str,
    check: impl Fn() -> F,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    while !check().await? {
        anyhow::ensure!(Instant::now() < deadline, "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// What `kubewasm rbac` computes for `plugins`: the types they read.
fn read_types(plugins: &[PluginSpec]) -> anyhow::Result<BTreeSet<Gvk>> {
    let runtime = Runtime::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let mut types = BTreeSet::new();
    for (name, built, config) in plugins {
        let bytes = std::fs::read(built)?;
        let settings = PluginSettings {
            config: config.clone(),
            ..PluginSettings::default()
        };
        let inspection = inspect(
            &runtime,
            &settings,
            Arc::new(MemorySink::default()),
            name,
            std::path::Path::new(built),
            &bytes,
            &content_hash(&bytes),
        )?;
        types.extend(inspection.manifest.cached.iter().cloned());
    }
    Ok(types)
}

/// Applies a multi-document YAML text of cluster-scoped RBAC objects.
async fn apply_yaml(admin: &kube::Client, yaml: &str) -> anyhow::Result<()> {
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let object = DynamicObject::deserialize(doc)?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| anyhow::anyhow!("no type"))?;
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", &types.api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &resource),
            None => Api::all_with(admin.clone(), &resource),
        };
        api.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

fn config_map(name: &str) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "data": {"v": "1"}}),
    )?)
}

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "example/c:1"}]}
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_rbac_suffices_endpoints_tell_the_truth_and_a_missing_permission_is_named()
-> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    for ns in ["kubewasm", "e2e"] {
        resources::create_namespace(&admin, ns).await?;
    }
    let plugins: Vec<PluginSpec> = vec![
        (
            "audit-cm",
            kubewasm_plugin_artifacts::AUDIT_LOG,
            audit_of(&["v1/ConfigMap"]),
        ),
        (
            "audit-pods",
            kubewasm_plugin_artifacts::AUDIT_LOG,
            audit_of(&["v1/Pod"]),
        ),
        (
            "hostile",
            kubewasm_plugin_artifacts::HOSTILE,
            json!({"mode": "error"}).to_string(),
        ),
    ];
    let types = read_types(&plugins)?;
    assert_eq!(
        types.iter().map(Gvk::to_string).collect::<Vec<_>>(),
        ["v1/ConfigMap", "v1/Pod"],
        "exactly what the plugins read (hostile's Secret query is not granted)"
    );
    let identity = |name: &str| rbac::Identity {
        name: name.into(),
        namespace: "kubewasm".into(),
        service_account: name.into(),
        leader_election: false,
    };
    apply_yaml(&admin, &rbac::render(&types, &identity("kubewasm"), "test")).await?;

    // The host as the service account with exactly the generated RBAC.
    let client = env.service_account_client("kubewasm", "kubewasm").await?;
    let a = agent(client, &plugins, false).await?;
    let (code, body) = a.get("/readyz").await?;
    assert_eq!(
        code, 503,
        "not ready before the plugins folder is read: {body}"
    );
    assert!(body.contains("plugins folder"), "{body}");
    assert_eq!(a.get("/healthz").await?.0, 200, "alive all along");
    a.load_all().await?;
    wait_async("ready", || async { Ok(a.get("/readyz").await?.0 == 200) }).await?;

    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "e2e");
    let pods = Api::<Pod>::namespaced(admin.clone(), "e2e");
    cms.create(&PostParams::default(), &config_map("c1")?)
        .await?;
    pods.create(&PostParams::default(), &pod("p1")?).await?;
    a.wait_audit("audit-cm", "ConfigMap", |s| s == ["added e2e/c1"])
        .await?;
    a.wait_audit("audit-pods", "Pod", |s| s == ["added e2e/p1"])
        .await?;
    assert!(
        a.metric("kubewasm_plugin_delivered_total{plugin=\"audit-cm\"}")
            .await?
            >= Some(1.0)
    );
    assert_eq!(
        a.metric("kubewasm_cached_objects{resource=\"v1/Pod\"}")
            .await?,
        Some(1.0)
    );

    // The hostile plugin refuses every event: the metrics and status say so, the host stays
    // ready (its caches are fine), the others are untouched.
    wait_async("hostile's failures in /metrics", || async {
        Ok(a.metric("kubewasm_plugin_failed_total{plugin=\"hostile\"}")
            .await?
            >= Some(1.0)
            && a.metric("kubewasm_plugin_retried_total{plugin=\"hostile\"}")
                .await?
                >= Some(1.0))
    })
    .await?;
    let (_, status) = a.get("/status").await?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    let hostile = status["plugins"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == "hostile"))
        .cloned()
        .unwrap_or_default();
    assert!(
        hostile["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("hostile: refusing")),
        "{hostile}"
    );
    assert_eq!(a.get("/readyz").await?.0, 200);
    assert!(
        a.metric("kubewasm_plugin_handler_duration_seconds_count{plugin=\"audit-cm\"}")
            .await?
            >= Some(1.0)
    );

    // A second host whose role lacks pods: one clear error for pods, ConfigMaps keep flowing.
    let without_pods: BTreeSet<Gvk> = types.iter().filter(|g| g.kind != "Pod").cloned().collect();
    apply_yaml(
        &admin,
        &rbac::render(&without_pods, &identity("nopods"), "test"),
    )
    .await?;
    let client = env.service_account_client("kubewasm", "nopods").await?;
    let b = agent(client, &plugins[..2], false).await?;
    b.load_all().await?;
    let error = wait("the forbidden error for pods", || {
        b.source
            .stats()
            .into_iter()
            .find(|(g, _)| g.kind == "Pod")
            .and_then(|(_, s)| s.last_error)
    })
    .await?;
    assert!(
        error.contains("forbidden")
            && error.contains("pods (core group)")
            && error.contains("list"),
        "{error}"
    );
    cms.create(&PostParams::default(), &config_map("c2")?)
        .await?;
    b.wait_audit("audit-cm", "ConfigMap", |s| {
        s.contains(&"added e2e/c2".to_owned())
    })
    .await?;
    assert!(audit(&b.lines("audit-pods"), "Pod").is_empty());
    let (code, body) = b.get("/readyz").await?;
    assert_eq!(code, 503);
    assert!(body.contains("informer v1/Pod has not synced"), "{body}");
    assert!(
        b.metric("kubewasm_watch_errors_total{resource=\"v1/Pod\"}")
            .await?
            >= Some(1.0)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_hand_over_loses_no_event_past_the_hand_over() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    for ns in ["kubewasm", "e2e"] {
        resources::create_namespace(&admin, ns).await?;
    }
    let plugins: Vec<PluginSpec> = vec![(
        "audit",
        kubewasm_plugin_artifacts::AUDIT_LOG,
        audit_of(&["v1/ConfigMap"]),
    )];
    let election = |identity: &str| {
        let mut config = ElectionConfig::new("kubewasm", "kubewasm", identity);
        config.lease_duration = Duration::from_secs(4);
        config.renew_deadline = Duration::from_secs(3);
        config.retry = Duration::from_millis(300);
        config
    };
    let a = agent(admin.clone(), &plugins, true).await?;
    let b = agent(admin.clone(), &plugins, true).await?;
    a.load_all().await?;
    b.load_all().await?;
    let (a_leads, b_leads) = (a.endpoints.leader.clone(), b.endpoints.leader.clone());
    let a_task = tokio::spawn(lead_while_elected(
        Elector::new(admin.clone(), election("a"), a_leads.clone()),
        a.host.clone(),
    ));
    wait("a leading", || a.host.leading().then_some(())).await?;
    let _b_task = tokio::spawn(lead_while_elected(
        Elector::new(admin.clone(), election("b"), b_leads.clone()),
        b.host.clone(),
    ));
    // The follower keeps its caches warm but delivers nothing.
    wait_async("the follower ready on standby", || async {
        Ok(b.get("/readyz").await?.0 == 200)
    })
    .await?;
    assert_eq!(b.metric("kubewasm_leader").await?, Some(0.0));

    let cms = Api::<ConfigMap>::namespaced(admin.clone(), "e2e");
    cms.create(&PostParams::default(), &config_map("x1")?)
        .await?;
    a.wait_audit("audit", "ConfigMap", |s| s == ["added e2e/x1"])
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        audit(&b.lines("audit"), "ConfigMap").is_empty(),
        "b is on standby"
    );
    let b_cache = b
        .endpoints
        .factory
        .get(&Gvk::new("", "v1", "ConfigMap"))
        .ok_or_else(|| anyhow::anyhow!("b has a ConfigMap informer"))?;
    assert!(b_cache.store().get("e2e/x1").is_some(), "b's cache is warm");

    // a stops as on SIGTERM: delivery ends, then the Lease is released.
    a_task.abort();
    let stopping = a.host.clone();
    tokio::task::spawn_blocking(move || stopping.shutdown()).await?;
    let handed_over = Instant::now();
    Elector::new(admin.clone(), election("a"), a_leads)
        .release()
        .await;
    wait("b leading", || b.host.leading().then_some(())).await?;
    let took = handed_over.elapsed();
    assert!(took < Duration::from_secs(3), "took over in {took:?}");

    cms.create(&PostParams::default(), &config_map("x2")?)
        .await?;
    let seen = b.wait_audit("audit", "ConfigMap", |s| s.len() >= 2).await?;
    assert_eq!(
        seen,
        ["added e2e/x1 initial", "added e2e/x2"],
        "the new leader starts from its initial list, then every later event"
    );
    assert_eq!(audit(&a.lines("audit"), "ConfigMap"), ["added e2e/x1"]);
    assert_eq!(b.metric("kubewasm_leader").await?, Some(1.0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_takes_over_once_a_crashed_leaders_lease_expires() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "kubewasm").await?;
    let election = |identity: &str| {
        let mut config = ElectionConfig::new("kubewasm", "crash", identity);
        config.lease_duration = Duration::from_secs(3);
        config.renew_deadline = Duration::from_secs(2);
        config.retry = Duration::from_millis(200);
        config
    };
    let a_leads = Arc::new(AtomicBool::new(false));
    let mut a = Elector::new(admin.clone(), election("a"), a_leads.clone());
    a.acquire().await;
    assert!(a_leads.load(Ordering::SeqCst));
    let b_leads = Arc::new(AtomicBool::new(false));
    let b_task = tokio::spawn({
        let b_leads = b_leads.clone();
        let admin = admin.clone();
        async move { Elector::new(admin, election("b"), b_leads).acquire().await }
    });
    // a renews for a while: b must not take over a live lease.
    let renewing = tokio::spawn(async move { a.hold().await });
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !b_leads.load(Ordering::SeqCst),
        "b took over a renewed lease"
    );
    // a crashes: no more renewals, no release.
    renewing.abort();
    let crashed = Instant::now();
    b_task.await?;
    let took = crashed.elapsed();
    assert!(b_leads.load(Ordering::SeqCst));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "b took over {took:?} after the crash (lease 3 s)"
    );
    Ok(())
}
