//! The cost of one event delivered into a plugin, per guest language (issue 8; feeds issue 9).
//!
//! Each language's owner-chain plugin (Rust, Python, JavaScript: same logic) handles a Pod
//! update on the example cluster: the host lends the event's objects as handles; the guest
//! reads the pod's key, finds its ReplicaSet and that one's Deployment (one `owner` call
//! each), counts the ReplicaSet's pods with an `index-keys` query (keys: a count needs no
//! handles), drops the handles it got, and logs one line (to a sink that drops it). Measured
//! on one live instance per language, as the dispatch loop calls it, the three languages in
//! rounds side by side (`support/rounds.rs`).
//!
//! Run with `cargo bench -p kubewasm --bench delivery` (after scripts/setup.sh, which installs
//! the Python and JavaScript tool chains).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kubewasm::gvk::Gvk;
use kubewasm::informer::Notification;
use kubewasm::informer::factory::{InformerFactory, Lease};
use kubewasm::object::Transform;
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::wasm::Instance;

#[path = "support/mod.rs"]
mod support;

use support::rounds::{self, Case, Plan};

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

fn main() {
    support::logging::as_the_agent();
    let plugins = [
        (
            "owner_chain_rust",
            Some(kubewasm_plugin_artifacts::OWNER_CHAIN),
            "Rust",
        ),
        (
            "owner_chain_python",
            kubewasm_plugin_artifacts::OWNER_CHAIN_PY,
            "Python",
        ),
        (
            "owner_chain_javascript",
            kubewasm_plugin_artifacts::OWNER_CHAIN_JS,
            "JavaScript",
        ),
    ];
    let mut benches: Vec<(&'static str, Bench)> = plugins
        .into_iter()
        .map(|(name, path, language)| (name, setup(built(path, language))))
        .collect();
    let mut cases: Vec<Case<'_>> = benches
        .iter_mut()
        .map(|(name, b)| {
            Case::new(name, move || {
                b.instance
                    .handle(&b.event)
                    .expect("no trap")
                    .expect("handled");
            })
        })
        .collect();
    // A JavaScript turn is about 200 calls; the run takes about 5 s.
    rounds::run(
        "delivery",
        Plan::new(40, Duration::from_millis(40)),
        &mut cases,
    );
}

struct Bench {
    _tokio: tokio::runtime::Runtime,
    _leases: Vec<Lease>,
    instance: Instance,
    event: Notification,
}

fn setup(plugin: &str) -> Bench {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster");
    let folder =
        Arc::new(ManifestFolder::snapshot(&examples, Transform::default()).expect("folder"));
    let factory = InformerFactory::new(folder, tokio.handle().clone());
    let gvks = [
        Gvk::new("", "v1", "Pod"),
        Gvk::new("apps", "v1", "ReplicaSet"),
        Gvk::new("apps", "v1", "Deployment"),
    ];
    let leases: Vec<Lease> = gvks.iter().map(|g| factory.acquire(g)).collect();
    for lease in &leases {
        assert!(lease.informer().wait_synced(Duration::from_secs(10)));
    }
    let informers: Vec<_> = leases.iter().map(|l| l.informer().clone()).collect();
    let instance = support::instance::instance(plugin, "{}", &informers);
    let pod = leases[0]
        .informer()
        .store()
        .get("shop/web-5d8f7c9b6-hv4rd")
        .expect("example pod");
    let event = Notification::Updated {
        old: pod.clone(),
        new: pod,
    };
    Bench {
        _tokio: tokio,
        _leases: leases,
        instance,
        event,
    }
}

/// The plugin at `path`, or a panic that says how to build it.
fn built<'a>(path: Option<&'a str>, language: &str) -> &'a str {
    path.unwrap_or_else(|| panic!("{language} plugin not built: run scripts/setup.sh"))
}
