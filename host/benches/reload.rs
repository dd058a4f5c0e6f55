//! Hot reload and start-up costs (issue 5; start-up figures also feed issue 9):
//! - `replace`: a new version's file is read, compiled (or loaded from the compiled-code
//!   cache), type-checked, initialised, described, and swapped in. This is the time from the
//!   folder watcher's reconciliation (10 ms after the file is closed) to the new version
//!   serving.
//! - `file_to_serving`: from writing a new version's file into the followed folder to that
//!   version serving (the watcher's wait for the write to complete included; machine code
//!   cached).
//! - `start_50`: a host start reconciling a folder of 50 plugins, cold and with the cache.
//!
//! Run with `cargo bench -p kubewasm --bench reload`.

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::object::Transform;
use kubewasm::plugins::folder::{FolderWatcher, sync_dir};
use kubewasm::plugins::{Outcome, PluginFile, PluginHost, digest};
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::wasm::logging::MemorySink;
use kubewasm_plugin_artifacts::{AUDIT_LOG, variant};

#[path = "support/mod.rs"]
mod support;

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

fn main() {
    support::logging::as_the_agent();
    divan::main();
}

struct Fixture {
    host: Arc<PluginHost>,
    _agent: Agent,
    _tokio: tokio::runtime::Runtime,
    _cluster: tempfile::TempDir,
    _own_cache: Option<tempfile::TempDir>,
    plugins: tempfile::TempDir,
}

/// A host on a folder of 100 ConfigMaps, its compiled-code cache in `cache` (a fresh empty
/// folder of its own when `None`).
fn fixture(cache: Option<&std::path::Path>) -> Fixture {
    let own_cache = cache
        .is_none()
        .then(|| tempfile::tempdir().expect("temp dir"));
    let cache = cache
        .or(own_cache.as_ref().map(|d| d.path()))
        .expect("a cache folder");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let cluster = tempfile::tempdir().expect("temp dir");
    for i in 0..100 {
        fs::write(
            cluster.path().join(format!("cm-{i}.yaml")),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: b}}\ndata: {{v: x}}\n"),
        )
        .expect("write");
    }
    let folder =
        Arc::new(ManifestFolder::snapshot(cluster.path(), Transform::default()).expect("folder"));
    let options = AgentOptions {
        compiled_cache: Some(cache.to_owned()),
        ..AgentOptions::new(
            Cluster::Source(folder, None),
            HostConfig::default(),
            Arc::new(MemorySink::default()),
        )
    };
    let agent = tokio.block_on(Agent::start(options)).expect("agent");
    Fixture {
        host: agent.plugins().clone(),
        _agent: agent,
        _tokio: tokio,
        _cluster: cluster,
        _own_cache: own_cache,
        plugins: tempfile::tempdir().expect("temp dir"),
    }
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Replacing a running plugin by a new version, compiled now (a new content hash each time).
#[divan::bench(sample_count = 10, sample_size = 1)]
fn replace_compiling(bencher: divan::Bencher) {
    let f = fixture(None);
    let path = f.plugins.path().join("audit.wasm");
    fs::write(&path, variant(AUDIT_LOG, "first")).expect("write");
    f.host.load(&path).expect("first version");
    bencher
        .with_inputs(|| {
            let bytes = variant(
                AUDIT_LOG,
                &format!("v{}", NEXT.fetch_add(1, Ordering::Relaxed)),
            );
            fs::write(&path, &bytes).expect("write");
            bytes
        })
        .bench_local_values(|bytes| {
            // Reading the file is part of a replacement.
            let file = PluginFile::new(&path, bytes);
            assert_eq!(f.host.apply(&file).expect("replaces"), Outcome::Replaced);
        });
}

/// Replacing a running plugin by a version whose machine code is already cached.
#[divan::bench(sample_count = 10, sample_size = 1)]
fn replace_cached(bencher: divan::Bencher) {
    let f = fixture(None);
    let path = f.plugins.path().join("audit.wasm");
    let (a, b) = (variant(AUDIT_LOG, "a"), variant(AUDIT_LOG, "b"));
    f.host.apply(&PluginFile::new(&path, a.clone())).expect("a");
    f.host
        .apply(&PluginFile::new(&path, b.clone()))
        .expect("b, now cached too");
    let mut flip = false;
    bencher.bench_local(|| {
        flip = !flip;
        let bytes = if flip { &a } else { &b };
        let file = PluginFile::new(&path, bytes.clone());
        assert_eq!(f.host.apply(&file).expect("replaces"), Outcome::Replaced);
    });
}

/// A new version's file written into a followed folder, until that version serves: the
/// folder watcher's wait, the reconciliation and the swap (machine code cached).
#[divan::bench(sample_count = 10, sample_size = 1)]
fn file_to_serving(bencher: divan::Bencher) {
    let f = fixture(None);
    let (a, b) = (variant(AUDIT_LOG, "a"), variant(AUDIT_LOG, "b"));
    let path = f.plugins.path().join("audit.wasm");
    // Both versions compiled once, so the cache serves them.
    f.host.apply(&PluginFile::new(&path, b.clone())).expect("b");
    fs::write(&path, &a).expect("write");
    let host = f.host.clone();
    let (_watcher, _) = FolderWatcher::start(host.clone(), f.plugins.path()).expect("watcher");
    assert_eq!(host.digest("audit"), Some(digest(&a)));
    let mut flip = false;
    bencher.bench_local(|| {
        flip = !flip;
        let bytes = if flip { &b } else { &a };
        let hash = digest(bytes);
        fs::write(&path, bytes).expect("write");
        while host.digest("audit").as_deref() != Some(hash.as_str()) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
}

/// Reconciling a folder of 50 distinct plugins on a fresh host.
#[divan::bench(args = ["cold", "cached"], sample_count = 3, sample_size = 1)]
fn start_50(bencher: divan::Bencher, cache_state: &str) {
    let cache = tempfile::tempdir().expect("temp dir");
    let versions: Vec<Vec<u8>> = (0..50)
        .map(|i| variant(AUDIT_LOG, &format!("p{i}")))
        .collect();
    if cache_state == "cached" {
        let warm = fixture(Some(cache.path()));
        for (i, v) in versions.iter().enumerate() {
            fs::write(warm.plugins.path().join(format!("p{i}.wasm")), v).expect("write");
        }
        sync_dir(&warm.host, warm.plugins.path()).expect("warm the cache");
    }
    bencher
        .with_inputs(|| {
            // Cold: a fresh, empty cache each time, so every plugin compiles.
            let f = fixture((cache_state == "cached").then(|| cache.path()));
            for (i, v) in versions.iter().enumerate() {
                fs::write(f.plugins.path().join(format!("p{i}.wasm")), v).expect("write");
            }
            f
        })
        .bench_local_values(|f| {
            let report = sync_dir(&f.host, f.plugins.path()).expect("sync");
            assert_eq!(report.loaded.len(), 50);
            f
        });
}
