//! The full round trip of a Pod create through a real kube-apiserver and etcd (the test
//! environment's, on loopback), with one context-aware validating webhook served by the host
//! (image-policy: it reads its allow list from the cache) and with no webhook, side by side:
//! each round times a block of creates without the webhook configuration, then a block with
//! it. Issue 57 asks for the p99 of both.
//!
//! Run with `cargo bench -p kubewasm --bench admission` (needs `KUBEWASM_SERVERS`, which
//! scripts/bench.sh sets from scripts/k8s-servers.sh). `KUBEWASM_BENCH_QUICK=1`: small blocks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kubewasm::admission::ServeConfig;
use kubewasm::admission::webhooks::{Target, render};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::wasm::logging::MemorySink;
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
        let config = HostConfig {
            admission: Some(ServeConfig {
                address: "127.0.0.1:0".parse()?,
                cert_file,
                key_file,
                concurrency: kubewasm::admission::default_concurrency(),
            }),
            ..HostConfig::default()
        };
        let plugins = files.path().join("plugins");
        std::fs::create_dir(&plugins)?;
        std::fs::copy(
            kubewasm_plugin_artifacts::IMAGE_POLICY,
            plugins.join("image-policy.wasm"),
        )?;
        let options = AgentOptions::new(
            Cluster::Kube(admin.clone()),
            config,
            Arc::new(MemorySink::default()),
        );
        let mut agent = Agent::start(options).await?;
        let report = agent.follow_plugins(&plugins).await?;
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
        Ok(())
    })
}
