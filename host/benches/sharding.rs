//! What a replica costs when three split the work, against one that does it all, side by side
//! on a real kube-apiserver 1.36 with `ShardedListAndWatch` on (the test environment's, on
//! loopback): 10,000 ConfigMaps of about 1 KB in 1,000 namespaces. Each round syncs one
//! unsharded replica, then each of three sharded replicas (their shares settled as three
//! members settle them), one at a time, each from a cold start: its cache bytes, the CPU its
//! process spent from start to synced (list, decode, store), and the bytes of the HTTP
//! response bodies its client received (what the API server sent it, however it listed: an
//! unsharded replica by streaming, a sharded one by pages). Issue 60 asks each sharded
//! replica's cache bytes and CPU at most 0.40 of the unsharded one's, and the three together
//! at most 1.1 of its bytes.
//!
//! Run with `cargo bench -p kubewasm --bench sharding` (needs `KUBEWASM_SERVERS`, which
//! scripts/bench.sh sets from scripts/k8s-servers.sh). `KUBEWASM_BENCH_QUICK=1`: fewer objects.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubewasm::gvk::Gvk;
use kubewasm::informer::factory::InformerFactory;
use kubewasm::object::Transform;
use kubewasm::shard::{Cuts, ShardKey, Share, Slices, settle};
use kubewasm::source::Scope;
use kubewasm::source::kube::KubeSource;
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

mod support;

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

const ROUNDS: usize = 3;
const WAIT: Duration = Duration::from_secs(300);

fn config_maps() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

/// A client of `env` that counts the bytes of every response body it receives into `count`.
async fn counting_client(env: &TestEnv, count: Arc<AtomicU64>) -> kube::Client {
    let file = kube::config::Kubeconfig::read_from(env.kubeconfig()).expect("the kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .expect("a configuration");
    let counted = tower::util::MapResponseLayer::new(move |response: http::Response<_>| {
        let count = count.clone();
        response.map(|body| {
            http_body_util::BodyExt::map_frame(
                body,
                move |frame: hyper::body::Frame<bytes::Bytes>| {
                    if let Some(data) = frame.data_ref() {
                        count.fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                    frame
                },
            )
        })
    });
    kube::client::ClientBuilder::try_from(config)
        .expect("a client builder")
        .with_layer(&counted)
        .build()
}

/// One replica's cold sync: cache bytes, process CPU and bytes received.
struct Sync {
    cached_bytes: u64,
    cached: usize,
    cpu: Duration,
    received: u64,
}

async fn sync(env: &TestEnv, share: Option<Share>) -> Sync {
    let count = Arc::new(AtomicU64::new(0));
    let client = counting_client(env, count.clone()).await;
    let cpu = support::cpu::this_process();
    let tasks = tokio::runtime::Handle::current();
    let source = Arc::new(KubeSource::new(
        client.clone(),
        Transform::default(),
        tasks.clone(),
    ));
    let factory = InformerFactory::new(source, tasks);
    factory.set_share(share);
    let lease = factory.acquire(&config_maps(), &Scope::everything());
    let started = Instant::now();
    while !lease.informer().has_synced() {
        assert!(started.elapsed() < WAIT, "never synced");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu = support::cpu::this_process() - cpu;
    let stats = factory
        .stats()
        .into_iter()
        .find(|s| s.gvk == config_maps())
        .expect("the informer");
    drop(lease);
    Sync {
        cached_bytes: stats.cached_bytes,
        cached: stats.cached,
        cpu,
        received: count.load(Ordering::Relaxed),
    }
}

fn main() {
    support::logging::as_the_agent();
    let quick = std::env::var_os("KUBEWASM_BENCH_QUICK").is_some();
    let (namespaces, per) = if quick { (100, 10) } else { (1_000, 10) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let env = TestEnv::start().await.expect("the test environment");
        let client = env.client().await.expect("a client");
        let payload = "x".repeat(1_000);
        let mut creates = Vec::new();
        for n in 0..namespaces {
            // Names that differ early: FNV-1a clumps names that differ in their last bytes.
            let ns = format!("n-{:08x}", (n as u32).wrapping_mul(0x9e37_79b1));
            resources::create_namespace(&client, &ns)
                .await
                .expect("a namespace");
            creates.extend((0..per).map(|i| (ns.clone(), format!("m-{i}"))));
        }
        let objects = creates.len();
        futures::stream::iter(creates)
            .for_each_concurrent(16, |(ns, name)| {
                let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
                let map: ConfigMap = serde_json::from_value(
                    json!({"metadata": {"name": name}, "data": {"payload": payload}}),
                )
                .expect("a ConfigMap");
                async move {
                    api.create(&PostParams::default(), &map)
                        .await
                        .expect("created");
                }
            })
            .await;
        let members = ["a", "b", "c"]
            .iter()
            .map(|m| ((*m).to_owned(), Slices::none()))
            .collect();
        let shares: BTreeMap<String, Slices> = settle(members);
        for key in [ShardKey::Namespace, ShardKey::Uid] {
            let key_name = key.name();
            for round in 0..ROUNDS {
                let whole = sync(&env, None).await;
                let mut line = json!({
                    "key": key_name, "round": round, "objects": objects,
                    "unsharded": {"cached_bytes": whole.cached_bytes, "cached": whole.cached,
                                  "cpu_ms": whole.cpu.as_secs_f64() * 1e3, "sent_bytes": whole.received},
                    "replicas": [],
                });
                for (member, slices) in &shares {
                    let share = Share {
                        key,
                        slices: *slices,
                        cuts: Cuts::EQUAL,
                    };
                    let part = sync(&env, Some(share)).await;
                    line["replicas"]
                        .as_array_mut()
                        .expect("an array")
                        .push(json!({
                            "member": member, "slices": slices.count(),
                            "cached_bytes": part.cached_bytes, "cached": part.cached,
                            "cpu_ms": part.cpu.as_secs_f64() * 1e3, "sent_bytes": part.received,
                        }));
                }
                println!("SHARDING {line}");
            }
        }
    });
}
