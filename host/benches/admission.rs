//! The full round trip of a Pod create through a real kube-apiserver and etcd (the test
//! environment's, on loopback), with one context-aware validating webhook served by the host
//! (image-policy: it reads its allow list from the cache) and with no webhook, side by side:
//! each round times a block of creates without the webhook configuration, then a block with
//! it. Issue 57 asks for the p99 of both.
//!
//! Then issue 72's flood, on the same agent: pod-phase (a neighbour delivering events) beside
//! a validating plugin whose `admit` takes 50 ms of CPU (the hostile plugin's `admit-slow`,
//! on Secrets, failure policy Fail). The neighbour's latency, from a pod's create answered
//! to its log line, is measured alone and then while 1,500 Secret creates are sent 500 at a
//! time; every create of the flood must get the plugin's or its failure policy's answer,
//! never the API server's own timeout. A plain watch of the benchmark's own, on the same
//! pods, tells the API server's share of a delay from the host's.
//!
//! Run with `cargo bench -p kubewasm --bench admission` (needs `KUBEWASM_SERVERS`, which
//! scripts/bench.sh sets from scripts/k8s-servers.sh). `KUBEWASM_BENCH_QUICK=1`: small blocks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kubewasm::admission::ServeConfig;
use kubewasm::admission::webhooks::{Target, render};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::wasm::logging::{LogSink, PluginLogRecord};
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

const WAIT: Duration = Duration::from_secs(60);

fn pod(name: &str, image: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": image}]}
    }))
    .expect("a pod")
}

/// The `q` quantile of `samples` (sorted here), nearest rank.
fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

/// Dry-runs a create of a pod the policy refuses until the answer is `refused` (the API
/// server picks webhook configuration changes up within moments, not at once).
async fn until_webhook(pods: &Api<Pod>, refused: bool) {
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = Instant::now() + WAIT;
    for i in 0.. {
        let answer = pods
            .create(&dry, &pod(&format!("probe-{i}"), "nginx:1"))
            .await;
        if answer.is_err() == refused {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "webhook refusing: {refused}; last answer {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// When each pod was first seen by pod-phase (its `pod` field), as its lines arrive.
#[derive(Default)]
struct Seen(std::sync::Mutex<std::collections::HashMap<String, Instant>>);

impl LogSink for Seen {
    fn record(&self, record: PluginLogRecord) {
        if record.plugin == "pod-phase"
            && let Some(pod) = record.field("pod")
        {
            let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
            seen.entry(pod.to_owned()).or_insert_with(Instant::now);
        }
    }
}

impl Seen {
    fn at(&self, key: &str) -> Option<Instant> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
    }

    fn note(&self, key: String) {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.entry(key).or_insert_with(Instant::now);
    }
}

/// Watches namespace `neighbour`'s pods with a plain client of the benchmark's own: when
/// each was first seen, to tell the API server's share of a delay from the host's.
fn watch_directly(admin: &kube::Client, seen: Arc<Seen>) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let pods = Api::<Pod>::namespaced(admin.clone(), "neighbour");
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()));
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                let name = pod.metadata.name.unwrap_or_default();
                seen.note(format!("neighbour/{name}"));
            }
        }
    });
}

/// Creates `count` pods named `tag-N` in namespace `neighbour`, 20 a second: for each,
/// the time from its create's answer to pod-phase's line for it, and to the benchmark's own
/// watch seeing it.
async fn neighbour(
    admin: &kube::Client,
    (seen, watched): (&Seen, &Seen),
    tag: &str,
    count: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let pods = Api::<Pod>::namespaced(admin.clone(), "neighbour");
    let pace = Duration::from_millis(50);
    let first = Instant::now();
    let mut answered = Vec::with_capacity(count);
    for i in 0..count {
        tokio::time::sleep_until((first + pace * i as u32).into()).await;
        let name = format!("{tag}-{i}");
        pods.create(
            &PostParams::default(),
            &pod(&name, "registry.example.com/web:1"),
        )
        .await
        .expect("allowed");
        answered.push((format!("neighbour/{name}"), Instant::now()));
    }
    let deadline = Instant::now() + WAIT;
    let (mut out, mut direct) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for (key, at) in answered {
        let (seen_at, watched_at) = loop {
            if let (Some(s), Some(w)) = (seen.at(&key), watched.at(&key)) {
                break (s, w);
            }
            assert!(
                Instant::now() < deadline,
                "pod-phase or the watch never saw {key}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        out.push(seen_at.saturating_duration_since(at));
        direct.push(watched_at.saturating_duration_since(at));
    }
    (out, direct)
}

/// Times `count` creates of allowed pods, named from `next`.
async fn creates(pods: &Api<Pod>, count: usize, next: &mut usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        *next += 1;
        let p = pod(&format!("web-{next}"), "registry.example.com/web:1");
        let started = Instant::now();
        pods.create(&PostParams::default(), &p)
            .await
            .expect("allowed");
        out.push(started.elapsed());
    }
    out
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::var_os("KUBEWASM_BENCH_QUICK").is_some();
    let (rounds, block) = if quick { (2, 30) } else { (5, 200) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let env = TestEnv::start().await?;
        let admin = env.client().await?;
        for ns in ["kubewasm", "bench"] {
            resources::create_namespace(&admin, ns).await?;
        }
        let allow: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "image-allow-list"},
            "data": {"prefixes": "registry.example.com/"}
        }))?;
        Api::<ConfigMap>::namespaced(admin.clone(), "kubewasm")
            .create(&PostParams::default(), &allow)
            .await?;
        let files = tempfile::tempdir()?;
        let cert = env.serving_cert()?;
        let (cert_file, key_file) = (files.path().join("tls.crt"), files.path().join("tls.key"));
        std::fs::write(&cert_file, &cert.cert)?;
        std::fs::write(&key_file, &cert.key)?;
        let mut config = HostConfig {
            admission: Some(ServeConfig {
                address: "127.0.0.1:0".parse()?,
                cert_file,
                key_file,
                concurrency: kubewasm::admission::default_concurrency(),
                record_reviews: None,
            }),
            ..HostConfig::default()
        };
        // The flood's validating plugin (loaded after the round trips).
        let mut slow = config.plugins.defaults.clone();
        slow.config = r#"{"mode": "admit-slow"}"#.to_owned();
        config.plugins.named.insert("slow".to_owned(), slow);
        let plugins = kubewasm_testenv::PluginFolder::with(&[(
            "image-policy",
            kubewasm_plugin_artifacts::IMAGE_POLICY,
        )]);
        let seen = Arc::new(Seen::default());
        let options = AgentOptions::new(Cluster::Kube(admin.clone()), config, seen.clone());
        let mut agent = Agent::start(options).await?;
        let report = agent.follow_plugins(plugins.path()).await?;
        anyhow::ensure!(report.failed.is_empty(), "image-policy failed: {report:?}");
        let address = agent
            .webhooks_address()
            .ok_or_else(|| anyhow::anyhow!("webhooks served"))?;
        let admission = agent
            .plugins()
            .admitter("image-policy")
            .ok_or_else(|| anyhow::anyhow!("image-policy serves admission"))?
            .admission
            .clone();
        let yaml = render(
            "kubewasm",
            &[("image-policy".to_owned(), admission)],
            &Target::Url(format!("https://{address}")),
            Some(env.ca_cert().as_bytes()),
        )
        .map_err(anyhow::Error::msg)?;
        let webhook: ValidatingWebhookConfiguration = serde_yaml_ng::from_str(&yaml)?;
        let name = webhook.metadata.name.clone().unwrap_or_default();
        let configs = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
        let pods = Api::<Pod>::namespaced(admin.clone(), "bench");

        let (mut without, mut with) = (Vec::new(), Vec::new());
        let mut next = 0;
        // A warm-up block of each: connections, the API server's caches, the instance.
        until_webhook(&pods, false).await;
        creates(&pods, block / 4, &mut next).await;
        for _ in 0..rounds {
            if configs.get_opt(&name).await?.is_some() {
                configs.delete(&name, &DeleteParams::default()).await?;
            }
            until_webhook(&pods, false).await;
            without.extend(creates(&pods, block, &mut next).await);
            configs.create(&PostParams::default(), &webhook).await?;
            until_webhook(&pods, true).await;
            with.extend(creates(&pods, block, &mut next).await);
        }
        for (what, samples) in [
            ("no webhook", &mut without),
            ("image-policy webhook", &mut with),
        ] {
            let line = json!({
                "name": what,
                "creates": samples.len(),
                "p50_us": quantile(samples, 0.50).as_micros() as u64,
                "p99_us": quantile(samples, 0.99).as_micros() as u64,
            });
            println!("ROUNDTRIP {line}");
        }
        let reviews = agent
            .plugins()
            .status()
            .into_iter()
            .find(|p| p.name == "image-policy")
            .and_then(|p| p.admission)
            .map(|a| serde_json::to_string(&a).unwrap_or_default());
        eprintln!("image-policy's admission counters: {reviews:?}");
        flood(&env, &admin, &agent, &plugins, &seen, quick).await
    })
}

/// Issue 72's flood (see the module's comment): prints `FLOOD` lines.
async fn flood(
    env: &TestEnv,
    admin: &kube::Client,
    agent: &Agent,
    plugins: &kubewasm_testenv::PluginFolder,
    seen: &Seen,
    quick: bool,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let (pods, secrets, at_once) = if quick {
        (60, 300, 100)
    } else {
        (200, 1500, 500)
    };
    for ns in ["neighbour", "flood"] {
        resources::create_namespace(admin, ns).await?;
    }
    plugins.put("pod-phase", kubewasm_plugin_artifacts::POD_PHASE);
    plugins.put("slow", kubewasm_plugin_artifacts::HOSTILE);
    let loaded = |name: &str| {
        agent
            .plugins()
            .status()
            .iter()
            .any(|p| p.name == name && p.synced)
    };
    let deadline = Instant::now() + WAIT;
    while !(loaded("pod-phase") && agent.plugins().admitter("slow").is_some()) {
        anyhow::ensure!(Instant::now() < deadline, "pod-phase and slow did not load");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let address = agent
        .webhooks_address()
        .ok_or_else(|| anyhow::anyhow!("webhooks served"))?;
    let admitter = agent
        .plugins()
        .admitter("slow")
        .ok_or_else(|| anyhow::anyhow!("slow serves admission"))?;
    let yaml = render(
        "kubewasm-flood",
        &[("slow".to_owned(), admitter.admission.clone())],
        &Target::Url(format!("https://{address}")),
        Some(env.ca_cert().as_bytes()),
    )
    .map_err(anyhow::Error::msg)?;
    let webhook: ValidatingWebhookConfiguration = serde_yaml_ng::from_str(&yaml)?;
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &webhook)
        .await?;
    let secret = |name: String| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a secret")
    };
    let flood_api = Api::<Secret>::namespaced(admin.clone(), "flood");
    // The webhook in effect: a review reaches the plugin.
    let deadline = Instant::now() + WAIT;
    for i in 0.. {
        let _ = flood_api
            .create(&PostParams::default(), &secret(format!("probe-{i}")))
            .await;
        if admitter.status().decisions.iter().any(|(_, n)| *n > 0) {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the slow webhook never took effect"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let watched = Arc::new(Seen::default());
    watch_directly(admin, watched.clone());
    let both = (seen, watched.as_ref());
    neighbour(admin, both, "warm", pods / 4).await;
    let (mut alone, mut alone_watch) = neighbour(admin, both, "alone", pods).await;
    let flooding = async {
        let answers: Vec<Result<Secret, kube::Error>> = futures::stream::iter(0..secrets)
            .map(|i| {
                let api = flood_api.clone();
                let s = secret(format!("flood-{i}"));
                async move { api.create(&PostParams::default(), &s).await }
            })
            .buffer_unordered(at_once)
            .collect()
            .await;
        answers
    };
    let (answers, (mut beside, mut beside_watch)) =
        tokio::join!(flooding, neighbour(admin, both, "flooded", pods));
    let (mut allowed, mut refused, mut other) = (0, 0, Vec::new());
    for answer in answers {
        match answer {
            Ok(_) => allowed += 1,
            Err(e)
                if e.to_string()
                    .contains("kubewasm plugin slow could not review") =>
            {
                refused += 1
            }
            Err(e) => other.push(e.to_string()),
        }
    }
    for (what, samples, watch) in [
        ("alone", &mut alone, &mut alone_watch),
        ("under the flood", &mut beside, &mut beside_watch),
    ] {
        let line = json!({
            "name": what,
            "pods": samples.len(),
            "p50_us": quantile(samples, 0.50).as_micros() as u64,
            "p95_us": quantile(samples, 0.95).as_micros() as u64,
            "watch_p50_us": quantile(watch, 0.50).as_micros() as u64,
            "watch_p95_us": quantile(watch, 0.95).as_micros() as u64,
        });
        println!("FLOOD {line}");
    }
    let ratio =
        quantile(&mut beside, 0.95).as_secs_f64() / quantile(&mut alone, 0.95).as_secs_f64();
    let watch_ratio = quantile(&mut beside_watch, 0.95).as_secs_f64()
        / quantile(&mut alone_watch, 0.95).as_secs_f64();
    let line = json!({
        "p95_ratio": ratio,
        "watch_p95_ratio": watch_ratio,
        "secrets": secrets,
        "at_once": at_once,
        "allowed": allowed,
        "refused_by_policy": refused,
        "other_answers": other.len(),
        "first_other": other.first(),
    });
    println!("FLOOD_TOTALS {line}");
    Ok(())
}
