//! Admission webhooks served by plugins, end to end on a real kube-apiserver
//! (kubewasm-testenv): the webhook configurations `kubewasm webhooks` renders point the API
//! server at the host on loopback, trusted through the test CA.
//!
//! - a refused create carries the plugin's message, named after the plugin;
//! - a context-aware policy (image-policy reads its allow list from the cache) changes its
//!   answer when the ConfigMap changes, with no restart;
//! - a mutation (pod-defaults: the namespace's team label, default requests) lands;
//! - a dry-run create is reviewed and not persisted;
//! - a plugin that traps answers as its failure policy says: Ignore lets through, Fail
//!   refuses naming the plugin;
//! - the certificate is read again when its files change, while serving.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubewasm::admission::ServeConfig;
use kubewasm::admission::webhooks::{Target, render};
use kubewasm::agent::{Agent, Cluster};
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

use crate::support;

const WAIT: Duration = Duration::from_secs(60);

pub(super) fn pod(name: &str, image: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": image}]}
    }))?)
}

/// Creates `pod` until the answer satisfies `done` (webhook configurations and the host's
/// cache take a moment to take effect); the last answer.
pub(super) async fn create_until(
    pods: &Api<Pod>,
    params: &PostParams,
    make: impl Fn(u32) -> anyhow::Result<Pod>,
    done: impl Fn(&Result<Pod, kube::Error>) -> bool,
) -> anyhow::Result<Result<Pod, kube::Error>> {
    let deadline = Instant::now() + WAIT;
    for attempt in 0.. {
        let answer = pods.create(params, &make(attempt)?).await;
        if done(&answer) {
            return Ok(answer);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no such answer within {WAIT:?}; last: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    unreachable!("the loop returns")
}

pub(super) fn refused_with(answer: &Result<Pod, kube::Error>, words: &str) -> bool {
    matches!(answer, Err(e) if e.to_string().contains(words))
}

/// The certificate the webhook server presents now (DER).
async fn served_cert(address: std::net::SocketAddr, ca: &str) -> anyhow::Result<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let stream = tokio::net::TcpStream::connect(address).await?;
    let tls = connector.connect("127.0.0.1".try_into()?, stream).await?;
    let certs = tls
        .get_ref()
        .1
        .peer_certificates()
        .ok_or_else(|| anyhow::anyhow!("no certificate"))?;
    Ok(certs[0].to_vec())
}

/// A host serving `plugins` (name, built file, configuration) as webhooks on loopback with
/// the test CA's certificate, on `concurrency` review threads: the agent, where it serves,
/// and the folder of its certificate files (`tls.crt`, `tls.key`), which it keeps reading.
pub(super) async fn serving(
    env: &TestEnv,
    admin: &kube::Client,
    plugins: &[(&str, &str, &str)],
    concurrency: usize,
) -> anyhow::Result<(Agent, std::net::SocketAddr, tempfile::TempDir)> {
    serving_recorded(env, admin, plugins, concurrency, None).await
}

/// As [`serving`], recording the reviews answered into `record` when it is given.
pub(super) async fn serving_recorded(
    env: &TestEnv,
    admin: &kube::Client,
    plugins: &[(&str, &str, &str)],
    concurrency: usize,
    record: Option<&std::path::Path>,
) -> anyhow::Result<(Agent, std::net::SocketAddr, tempfile::TempDir)> {
    let tls = tempfile::tempdir()?;
    let (cert_file, key_file) = (tls.path().join("tls.crt"), tls.path().join("tls.key"));
    let cert = env.serving_cert()?;
    std::fs::write(&cert_file, &cert.cert)?;
    std::fs::write(&key_file, &cert.key)?;
    let configs: Vec<(&str, &str)> = plugins.iter().map(|(n, _, c)| (*n, *c)).collect();
    let mut config = support::configs(&configs);
    config.admission = Some(ServeConfig {
        address: "127.0.0.1:0".parse()?,
        cert_file,
        key_file,
        concurrency,
        record_reviews: record.map(std::path::Path::to_owned),
    });
    let folder = kubewasm_testenv::PluginFolder::new();
    for (name, built, _) in plugins {
        folder.put(name, built);
    }
    let agent = support::following(Cluster::Kube(admin.clone()), config, folder.path()).await?;
    let address = agent
        .webhooks_address()
        .ok_or_else(|| anyhow::anyhow!("webhooks served"))?;
    Ok((agent, address, tls))
}

/// The image policy and pod defaults, as `serving` takes them.
pub(super) const POLICIES: [(&str, &str, &str); 2] = [
    (
        "image-policy",
        kubewasm_plugin_artifacts::IMAGE_POLICY,
        "{}",
    ),
    (
        "pod-defaults",
        kubewasm_plugin_artifacts::POD_DEFAULTS,
        "{}",
    ),
];

/// The namespaces the admission tests use: `kubewasm`, and `shop` labelled `team: shop`.
pub(super) async fn namespaces(admin: &kube::Client) -> anyhow::Result<()> {
    for ns in ["kubewasm", "shop"] {
        resources::create_namespace(admin, ns).await?;
    }
    Api::<Namespace>::all(admin.clone())
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "shop"}}})),
        )
        .await?;
    Ok(())
}

/// Registers the webhooks of plugins `names`, served by the agent at the address, as the
/// webhook configurations `name` (`kubewasm webhooks` renders them), trusted through the
/// test CA.
pub(super) async fn register(
    (env, admin, agent, address): (&TestEnv, &kube::Client, &Agent, std::net::SocketAddr),
    name: &str,
    names: &[&str],
) -> anyhow::Result<()> {
    let declared = names
        .iter()
        .map(|n| {
            let a = agent
                .plugins()
                .admitter(n)
                .ok_or_else(|| anyhow::anyhow!("{n} serves admission"))?;
            Ok(((*n).to_owned(), a.admission.clone()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let yaml = render(
        name,
        &declared,
        &Target::Url(format!("https://{address}")),
        Some(env.ca_cert().as_bytes()),
    )
    .map_err(anyhow::Error::msg)?;
    support::apply_yaml(admin, &yaml).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_answer_admission_reviews_of_a_real_api_server() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    namespaces(&admin).await?;

    let [policy, defaults] = POLICIES;
    let (agent, address, tls) = serving(
        &env,
        &admin,
        &[
            policy,
            defaults,
            (
                "trap-ignore",
                kubewasm_plugin_artifacts::HOSTILE,
                r#"{"mode": "admit-trap-ignore"}"#,
            ),
            (
                "trap-fail",
                kubewasm_plugin_artifacts::HOSTILE,
                r#"{"mode": "admit-trap"}"#,
            ),
        ],
        kubewasm::admission::default_concurrency(),
    )
    .await?;
    let (cert_file, key_file) = (tls.path().join("tls.crt"), tls.path().join("tls.key"));
    let ca = env.ca_cert();
    let webhooks = (&env, &admin, &agent, address);
    register(
        webhooks,
        "kubewasm",
        &["image-policy", "pod-defaults", "trap-ignore"],
    )
    .await?;

    let pods: Api<Pod> = Api::namespaced(admin.clone(), "shop");
    let create = PostParams::default();
    // No allow list yet: every image is refused, the message naming the plugin.
    let refused = create_until(
        &pods,
        &create,
        |i| pod(&format!("early-{i}"), "nginx:1.27"),
        |a| refused_with(a, "image-policy: no image allow list"),
    )
    .await?;
    assert!(refused.is_err());

    let lists: Api<ConfigMap> = Api::namespaced(admin.clone(), "kubewasm");
    let list: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "image-allow-list"},
        "data": {"prefixes": "registry.example.com/"}
    }))?;
    lists.create(&PostParams::default(), &list).await?;

    let web = create_until(
        &pods,
        &create,
        |i| pod(&format!("web-{i}"), "registry.example.com/web:1"),
        Result::is_ok,
    )
    .await??;
    // pod-defaults' mutation landed: the namespace's team, default requests.
    let labels = web.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("team").map(String::as_str),
        Some("shop"),
        "{web:?}"
    );
    let requests = web
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].resources.clone());
    let cpu = requests
        .and_then(|r| r.requests)
        .and_then(|r| r.get("cpu").map(|q| q.0.clone()));
    assert_eq!(cpu.as_deref(), Some("50m"), "{web:?}");

    let nginx = pods.create(&create, &pod("nginx", "nginx:1.27")?).await;
    assert!(refused_with(&nginx, "not in the allow list"), "{nginx:?}");
    // A dry run is reviewed like any create, and not persisted.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let dry_refused = pods.create(&dry, &pod("dry-bad", "nginx:1.27")?).await;
    assert!(
        refused_with(&dry_refused, "image-policy"),
        "{dry_refused:?}"
    );
    pods.create(&dry, &pod("dry-good", "registry.example.com/web:1")?)
        .await?;
    assert!(
        pods.get_opt("dry-good").await?.is_none(),
        "dry run persisted"
    );

    // The allow list changes: the same policy answers differently, no restart.
    lists
        .patch(
            "image-allow-list",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"prefixes": "registry.example.com/\nnginx:"}})),
        )
        .await?;
    create_until(
        &pods,
        &create,
        |i| pod(&format!("nginx-{i}"), "nginx:1.27"),
        Result::is_ok,
    )
    .await??;

    // A plugin that traps under Ignore lets the request through...
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "shop");
    let secret = |name: &str| -> anyhow::Result<Secret> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name}}))?)
    };
    secrets.create(&create, &secret("let-through")?).await?;
    let ignored = support::plugin_status(&agent, "trap-ignore");
    let decided = |s: &kubewasm::plugins::PluginStatus, decision: &str| {
        s.admission
            .as_ref()
            .and_then(|a| a.decisions.iter().find(|(d, _)| d == decision))
            .map_or(0, |(_, n)| *n)
    };
    assert!(decided(&ignored, "failed_open") >= 1, "{ignored:?}");
    // ...under Fail it refuses, naming the plugin.
    register(webhooks, "kubewasm-fail", &["trap-fail"]).await?;
    let deadline = Instant::now() + WAIT;
    let mut attempt = 0;
    let refusal = loop {
        attempt += 1;
        match secrets
            .create(&create, &secret(&format!("refused-{attempt}"))?)
            .await
        {
            Err(e) if e.to_string().contains("trap-fail could not review") => break e,
            other => {
                anyhow::ensure!(Instant::now() < deadline, "not refused: {other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(refusal.to_string().contains("trapped"), "{refusal}");
    let failed = support::plugin_status(&agent, "trap-fail");
    assert!(decided(&failed, "failed_closed") >= 1, "{failed:?}");

    // The certificate is renewed on disk: served at once, and the API server still trusts it.
    let before = served_cert(address, &ca).await?;
    let renewed = env.serving_cert()?;
    std::fs::write(&key_file, &renewed.key)?;
    std::fs::write(&cert_file, &renewed.cert)?;
    let deadline = Instant::now() + WAIT;
    while served_cert(address, &ca).await? == before {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the renewed certificate is not served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pods.create(
        &create,
        &pod("after-renewal", "registry.example.com/web:2")?,
    )
    .await?;
    let policy = support::plugin_status(&agent, "image-policy");
    assert!(decided(&policy, "denied") >= 3, "{policy:?}");
    assert!(decided(&policy, "allowed") >= 3, "{policy:?}");
    Ok(())
}

/// Threads of this process now.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// 150 Secret creates at once (the API server's own limit on mutating requests in flight is
/// 200) against a plugin whose `admit` takes 50 ms of CPU, on a pool of one review thread:
/// every create gets the plugin's answer or, for those still waiting when their time in the
/// host is up, the failure policy's (Fail: refused naming the plugin), never the API server's
/// "failed calling webhook"; and the host's threads do not grow with the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_slow_reviews_is_answered_in_time_on_a_bounded_pool() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    for ns in ["kubewasm", "shop"] {
        resources::create_namespace(&admin, ns).await?;
    }
    let (agent, address, _tls) = serving(
        &env,
        &admin,
        &[(
            "slow",
            kubewasm_plugin_artifacts::HOSTILE,
            r#"{"mode": "admit-slow"}"#,
        )],
        1,
    )
    .await?;
    let admitter = agent
        .plugins()
        .admitter("slow")
        .ok_or_else(|| anyhow::anyhow!("slow serves admission"))?;
    let yaml = render(
        "kubewasm",
        &[("slow".to_owned(), admitter.admission.clone())],
        &Target::Url(format!("https://{address}")),
        Some(env.ca_cert().as_bytes()),
    )
    .map_err(anyhow::Error::msg)?;
    support::apply_yaml(&admin, &yaml).await?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "shop");
    let secret = |name: String| -> anyhow::Result<Secret> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name}}))?)
    };
    // The configuration in effect: a review reaches the plugin.
    let deadline = Instant::now() + WAIT;
    for i in 0.. {
        secrets
            .create(&PostParams::default(), &secret(format!("probe-{i}"))?)
            .await?;
        if admitter.status().decisions.iter().any(|(_, n)| *n > 0) {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the webhook never took effect");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let before = threads();
    let flooding = std::sync::atomic::AtomicBool::new(true);
    let most = std::sync::atomic::AtomicUsize::new(before);
    let sample = async {
        while flooding.load(std::sync::atomic::Ordering::Relaxed) {
            most.fetch_max(threads(), std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let flood = async {
        let creates = (0..150).map(|i| {
            let secrets = secrets.clone();
            async move {
                let answer = secrets
                    .create(&PostParams::default(), &secret(format!("flood-{i}"))?)
                    .await;
                Ok::<_, anyhow::Error>(answer.map(|_| ()))
            }
        });
        let answers = futures::future::join_all(creates).await;
        flooding.store(false, std::sync::atomic::Ordering::Relaxed);
        answers
    };
    let (answers, ()) = tokio::join!(flood, sample);
    let (mut allowed, mut refused) = (0, 0);
    for answer in answers {
        match answer? {
            Ok(()) => allowed += 1,
            Err(e)
                if e.to_string()
                    .contains("kubewasm plugin slow could not review") =>
            {
                refused += 1
            }
            Err(e) => panic!("not the plugin's nor its failure policy's answer: {e}"),
        }
    }
    assert!(
        allowed > 0 && refused > 0,
        "{allowed} allowed, {refused} refused"
    );
    let grown = most.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(
        grown <= 16,
        "threads grew by {grown} during the flood ({before} before); {allowed} allowed, {refused} refused"
    );
    let status = admitter.status();
    assert!(
        status
            .last_failure
            .as_deref()
            .is_some_and(|f| f.starts_with("no answer within")),
        "{status:?}"
    );
    Ok(())
}
