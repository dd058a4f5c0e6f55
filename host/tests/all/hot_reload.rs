//! Hot reload: plugins dropped in, replaced while events flow, broken, touched and removed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kubewasm::agent::Agent;
use kubewasm::informer::factory::InformerFactory;
use kubewasm::plugins::folder::{FolderWatcher, sync_dir};
use kubewasm::plugins::{PluginFile, PluginHost, digest as content_hash};
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::wasm::Engine;
use kubewasm::wasm::logging::{MemorySink, PluginLogRecord};

use crate::support;

const WAIT: Duration = Duration::from_secs(60);
const OBJECTS: usize = 40;
/// Most updates a stream sends while it waits for a hot swap to take over (minutes of them).
const MAX_UPDATES: usize = 100_000;

fn cm(i: usize, value: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: t\ndata:\n  v: \"{value}\"\n"
    )
}

/// The audit-log component under another content hash.
fn variant(tag: &str) -> Vec<u8> {
    kubewasm_plugin_artifacts::variant(kubewasm_plugin_artifacts::AUDIT_LOG, tag)
}

/// Writes a file the way careful tools do: a temporary name, then a rename into place.
fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("x")
    ));
    fs::write(&tmp, bytes).expect("write");
    fs::rename(&tmp, path).expect("rename into place");
}

struct Env {
    cluster: tempfile::TempDir,
    plugins: tempfile::TempDir,
    folder: Arc<ManifestFolder>,
    factory: Arc<InformerFactory>,
    host: Arc<PluginHost>,
    sink: Arc<MemorySink>,
    _agent: Agent,
    _runtime: tokio::runtime::Runtime,
}

fn env() -> Env {
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    for i in 0..OBJECTS {
        fs::write(cluster.path().join(format!("cm-{i}.yaml")), cm(i, 0)).expect("write");
    }
    let sink = Arc::new(MemorySink::default());
    let (agent, folder) = support::snapshot_agent(
        &runtime,
        cluster.path(),
        support::configs(&[]),
        sink.clone(),
    );
    Env {
        cluster,
        plugins: tempfile::tempdir().expect("temp dir"),
        folder,
        factory: agent.factory().clone(),
        host: agent.plugins().clone(),
        sink,
        _agent: agent,
        _runtime: runtime,
    }
}

impl Env {
    fn audit(&self) -> PathBuf {
        self.plugins.path().join("audit.wasm")
    }

    fn update(&self, i: usize, value: usize) {
        fs::write(
            self.cluster.path().join(format!("cm-{}.yaml", i % OBJECTS)),
            cm(i % OBJECTS, value),
        )
        .expect("write");
        self.folder.rescan();
    }

    fn wait_until(
        &self,
        what: &str,
        done: impl Fn(&[PluginLogRecord]) -> bool,
    ) -> Vec<PluginLogRecord> {
        let lines = self.sink.wait_until(WAIT, |rs| done(rs));
        assert!(
            done(&lines),
            "{what} did not happen:\n{}",
            support::render(&lines)
        );
        lines
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn by_version(lines: &[PluginLogRecord]) -> BTreeMap<String, Vec<&PluginLogRecord>> {
    let mut out: BTreeMap<String, Vec<&PluginLogRecord>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.plugin == "audit") {
        out.entry(l.digest.clone()).or_default().push(l);
    }
    out
}

#[test]
fn replacing_while_events_flow_delivers_each_event_to_exactly_one_version() {
    let e = env();
    let (v1, v2) = (variant("v1"), variant("v2"));
    let (h1, h2) = (content_hash(&v1), content_hash(&v2));
    write_atomically(&e.audit(), &v1);
    let report = sync_dir(&e.host, e.plugins.path()).expect("sync");
    assert_eq!(report.loaded, ["audit"]);

    // A stream of updates that goes on until the new version has received some of it: the
    // swap lands mid-stream however long the new version takes to compile (the test used to
    // end the stream at a fixed count, which a slow compile on a busy machine outlasted).
    let first_quarter = 60;
    let progress = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) && n < MAX_UPDATES {
                n += 1;
                e.update(n, n);
                progress.store(n, Ordering::SeqCst);
                // Slow down once past the first quarter so the stream outlasts the swap.
                if n > first_quarter {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        // Ends the stream however this thread leaves the scope, failed assertions included.
        let _end_stream = StopOnDrop(&stop);
        while progress.load(Ordering::SeqCst) < first_quarter {
            std::thread::sleep(Duration::from_millis(1));
        }
        write_atomically(&e.audit(), &v2);
        let report = sync_dir(&e.host, e.plugins.path()).expect("sync");
        assert_eq!(report.replaced, ["audit"], "{report:?}");
        e.wait_until("the new version handling updates of the stream", |rs| {
            rs.iter()
                .filter(|l| l.digest == h2 && l.message == "updated")
                .count()
                >= 5
        });
    });
    let updates = progress.load(Ordering::SeqCst);
    assert!(updates < MAX_UPDATES, "the stream ran out before the swap");

    let lines = e.wait_until("every update, and v2's initial state", |rs| {
        let updated = rs.iter().filter(|l| l.message == "updated").count();
        let v2_initial = rs
            .iter()
            .filter(|l| l.digest == h2 && l.field("flag") == Some("initial"))
            .count();
        updated >= updates && v2_initial >= OBJECTS
    });
    let versions = by_version(&lines);
    assert_eq!(
        versions.keys().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from([h1.clone(), h2.clone()])
    );

    // Every update (identified by its resource version) reached exactly one version.
    let updated = |v: &str| -> Vec<String> {
        versions[v]
            .iter()
            .filter(|l| l.message == "updated")
            .filter_map(|l| l.field("rv").map(str::to_owned))
            .collect()
    };
    let (old, new) = (updated(&h1), updated(&h2));
    let all: BTreeSet<&String> = old.iter().chain(new.iter()).collect();
    assert_eq!(old.len() + new.len(), updates, "no update lost or doubled");
    assert_eq!(all.len(), updates, "no update delivered to both versions");
    assert!(
        !old.is_empty() && !new.is_empty(),
        "the swap happened mid-stream: {} / {}",
        old.len(),
        new.len()
    );

    // The new version started from the full current state, as initial adds.
    let initial: BTreeSet<String> = versions[&h2]
        .iter()
        .filter(|l| l.message == "added" && l.field("flag") == Some("initial"))
        .filter_map(|l| l.field("key").map(str::to_owned))
        .collect();
    assert_eq!(initial.len(), OBJECTS, "every object, once");
    let status = &e.host.status()[0];
    assert_eq!((status.digest.as_str(), status.reloads), (h2.as_str(), 1));
}

#[test]
fn a_broken_replacement_keeps_the_old_version_serving() {
    let e = env();
    let v1 = variant("v1");
    write_atomically(&e.audit(), &v1);
    sync_dir(&e.host, e.plugins.path()).expect("sync");

    write_atomically(&e.audit(), b"\0asm broken on purpose");
    let report = sync_dir(&e.host, e.plugins.path()).expect("sync");
    assert_eq!(report.failed, ["audit"]);
    let status = &e.host.status()[0];
    assert_eq!(status.digest, content_hash(&v1), "still the old version");
    assert_eq!(status.reload_failures, 1);
    assert!(
        status
            .reload_error
            .as_deref()
            .is_some_and(|r| r.contains("not a WebAssembly component")),
        "{status:?}"
    );
    // The same broken content is not tried again.
    assert_eq!(
        sync_dir(&e.host, e.plugins.path())
            .expect("sync")
            .failed
            .len(),
        0
    );

    e.update(1, 99);
    e.wait_until("the old version still serving", |rs| {
        rs.iter().any(|l| {
            l.message == "updated"
                && l.field("key") == Some("t/cm-1")
                && l.digest == content_hash(&v1)
        })
    });

    let v2 = variant("v2");
    write_atomically(&e.audit(), &v2);
    assert_eq!(
        sync_dir(&e.host, e.plugins.path()).expect("sync").replaced,
        ["audit"]
    );
    let status = &e.host.status()[0];
    assert_eq!(
        (status.reload_error.clone(), status.reload_failures),
        (None, 0)
    );
}

#[test]
fn touching_or_rewriting_the_same_bytes_does_nothing() {
    let e = env();
    let v1 = variant("v1");
    write_atomically(&e.audit(), &v1);
    sync_dir(&e.host, e.plugins.path()).expect("sync");
    write_atomically(&e.audit(), &v1);
    let report = sync_dir(&e.host, e.plugins.path()).expect("sync");
    assert_eq!(report, Default::default());
    assert_eq!(e.host.status()[0].reloads, 0);
}

#[test]
fn removing_the_file_stops_delivery_and_informers() {
    let e = env();
    write_atomically(&e.audit(), &variant("v1"));
    sync_dir(&e.host, e.plugins.path()).expect("sync");
    e.wait_until("initial state", |rs| {
        rs.iter().filter(|l| l.message == "added").count() >= OBJECTS
    });
    fs::remove_file(e.audit()).expect("remove");
    let report = sync_dir(&e.host, e.plugins.path()).expect("sync");
    assert_eq!(report.unloaded, ["audit"]);
    assert!(e.host.status().is_empty());
    assert!(e.factory.running().is_empty(), "{:?}", e.factory.running());
    let before = e.sink.records().len();
    e.update(2, 7);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        e.sink.records().len(),
        before,
        "nothing delivered after removal"
    );
}

#[test]
fn a_configmap_data_swap_and_several_files_at_once_are_followed() {
    let e = env();
    let dir = e.plugins.path();
    // The layout of a ConfigMap volume: timestamped folder, ..data link, links to its files.
    let first = dir.join("..2026_11_22_01");
    fs::create_dir(&first).expect("mkdir");
    fs::write(first.join("audit.wasm"), variant("v1")).expect("write");
    std::os::unix::fs::symlink("..2026_11_22_01", dir.join("..data")).expect("link");
    std::os::unix::fs::symlink("..data/audit.wasm", e.audit()).expect("link");
    let (_watcher, report) = FolderWatcher::start(e.host.clone(), dir).expect("watch");
    assert_eq!(report.loaded, ["audit"]);

    // The kubelet's update: a new folder, a temporary link, renamed over ..data.
    let second = dir.join("..2026_11_22_02");
    fs::create_dir(&second).expect("mkdir");
    let v2 = variant("v2");
    fs::write(second.join("audit.wasm"), &v2).expect("write");
    std::os::unix::fs::symlink("..2026_11_22_02", dir.join("..data_tmp")).expect("link");
    fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap");
    let deadline = Instant::now() + WAIT;
    while e.host.digest("audit") != Some(content_hash(&v2)) {
        assert!(
            Instant::now() < deadline,
            "the ..data swap was not picked up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // Several files at once: two new plugins and the removal of audit.
    write_atomically(
        &dir.join("pods.wasm"),
        &fs::read(kubewasm_plugin_artifacts::POD_PHASE).expect("read"),
    );
    write_atomically(&dir.join("audit2.wasm"), &variant("v3"));
    fs::remove_file(e.audit()).expect("remove");
    let deadline = Instant::now() + WAIT;
    loop {
        let names: Vec<String> = e.host.status().into_iter().map(|s| s.name).collect();
        if names == ["audit2", "pods"] {
            break;
        }
        assert!(Instant::now() < deadline, "did not converge: {names:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        e.host.status().iter().all(|s| s.reloads == 0),
        "no double loading"
    );
}

#[test]
fn a_restart_loads_unchanged_plugins_from_the_compiled_cache() {
    let cache = tempfile::tempdir().expect("temp dir");
    let file = PluginFile::read(
        Path::new(kubewasm_plugin_artifacts::AUDIT_LOG),
        kubewasm::plugins::DEFAULT_MAX_FILE_BYTES,
    )
    .expect("read");
    let cold = Engine::with_cache(Some(cache.path()), kubewasm::wasm::DEFAULT_CACHE_BYTES)
        .expect("engine");
    let start = Instant::now();
    assert!(
        !cold
            .compile(&file.bytes, &file.sha256)
            .expect("compiles")
            .cached
    );
    let compile_time = start.elapsed();
    let warm = Engine::with_cache(Some(cache.path()), kubewasm::wasm::DEFAULT_CACHE_BYTES)
        .expect("engine");
    let start = Instant::now();
    assert!(
        warm.compile(&file.bytes, &file.sha256)
            .expect("loads")
            .cached,
        "served from the cache"
    );
    let cached_time = start.elapsed();
    eprintln!("compile {compile_time:?}, from cache {cached_time:?}");
    // Another version of the same plugin is another cache entry.
    let other = PluginFile::new(Path::new("audit.wasm"), variant("other"));
    assert!(
        !warm
            .compile(&other.bytes, &other.sha256)
            .expect("compiles")
            .cached
    );
    let entries = fs::read_dir(cache.path()).expect("list").count();
    assert_eq!(entries, 2);
}

#[test]
fn the_default_resync_period_reaches_plugins_the_configuration_does_not_name() {
    // Before the agent took the whole configuration, `run` handed the plugin host only the
    // default limits, so `defaults.resyncSeconds` never reached a plugin without an entry.
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    fs::write(cluster.path().join("cm-0.yaml"), cm(0, 0)).expect("write");
    let config = kubewasm::config::HostConfig::parse(
        "defaults: {resyncSeconds: 1}\nplugins: {someone-else: {config: {}}}\n",
    )
    .expect("valid configuration");
    let sink = Arc::new(MemorySink::default());
    let agent = support::folder_agent(&runtime, cluster.path(), config, sink.clone());
    let plugins = kubewasm_testenv::PluginFolder::new();
    let path = plugins.put("audit", kubewasm_plugin_artifacts::AUDIT_LOG);
    agent.plugins().load(&path).expect("loads");
    let lines = sink.wait_until(WAIT, |rs| {
        support::audit(rs, "ConfigMap")
            .iter()
            .filter(|l| l.starts_with("sync t/cm-0"))
            .count()
            >= 2
    });
    let syncs: Vec<String> = support::audit(&lines, "ConfigMap")
        .into_iter()
        .filter(|l| l.starts_with("sync"))
        .collect();
    assert!(
        syncs.len() >= 2 && syncs.iter().all(|l| l == "sync t/cm-0"),
        "resync every second: {}",
        support::render(&lines)
    );
}

#[test]
fn the_compiled_code_cache_keeps_to_its_bound() {
    let cache = tempfile::tempdir().expect("temp dir");
    // A bound smaller than one entry: each new entry evicts the others.
    let engine = Engine::with_cache(Some(cache.path()), 1).expect("engine");
    let compile = |tag: &str| {
        let file = PluginFile::new(Path::new("audit.wasm"), variant(tag));
        engine
            .compile(&file.bytes, &file.sha256)
            .expect("compiles")
            .cached
    };
    assert!(!compile("a"));
    assert!(!compile("b"));
    let entries: Vec<_> = fs::read_dir(cache.path())
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(entries.len(), 1, "only the newest stays: {entries:?}");
    assert!(compile("b"), "the newest is served from the cache");
    assert!(!compile("a"), "a was evicted");
}

#[test]
fn an_oversized_plugin_file_fails_without_being_read() {
    let e = env();
    let path = e.plugins.path().join("huge.wasm");
    fs::File::create(&path)
        .and_then(|f| f.set_len(3 << 30))
        .expect("a sparse 3 GB file");
    let report = sync_dir(&e.host, e.plugins.path()).expect("sync");
    assert_eq!(report.failed, ["huge"]);
    let again = sync_dir(&e.host, e.plugins.path()).expect("sync");
    assert_eq!(again.failed, ["huge"], "still refused, logged once");
    assert!(e.host.status().is_empty());
}

#[test]
fn a_plugin_that_compiles_too_long_fails_and_the_folder_goes_on() {
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    let mut config = support::configs(&[]);
    // No compiled-code cache here: every load compiles, and none fits in a millisecond.
    config.plugins.compile_timeout = Duration::from_millis(1);
    let sink = Arc::new(MemorySink::default());
    let (agent, _folder) = support::snapshot_agent(&runtime, cluster.path(), config, sink);
    let plugins = kubewasm_testenv::PluginFolder::new();
    fs::write(plugins.path().join("audit.wasm"), variant("slow")).expect("write");
    let started = Instant::now();
    let report = sync_dir(agent.plugins(), plugins.path()).expect("sync");
    assert_eq!(report.failed, ["audit"]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the folder did not wait for the compile: {:?}",
        started.elapsed()
    );
    assert!(agent.plugins().status().is_empty());
    fs::write(plugins.path().join("other.wasm"), variant("other")).expect("write");
    let error = agent
        .plugins()
        .load(&plugins.path().join("other.wasm"))
        .expect_err("too slow to compile");
    assert!(error.to_string().contains("longer than"), "{error}");
}
