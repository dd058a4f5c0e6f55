//! The example plugins driven through the host against a copy of examples/cluster.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubewasm::agent::Agent;
use kubewasm::gvk::Gvk;
use kubewasm::informer::factory::InformerFactory;
use kubewasm::plugins::{PluginHost, Reason};
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::wasm::LoadError;
use kubewasm::wasm::logging::{MemorySink, PluginLogRecord};
use serde_json::Value;
use support::render;

use crate::support;

const WAIT: Duration = Duration::from_secs(30);

struct Harness {
    cluster: tempfile::TempDir,
    plugins: kubewasm_testenv::PluginFolder,
    folder: Arc<ManifestFolder>,
    factory: Arc<InformerFactory>,
    host: Arc<PluginHost>,
    sink: Arc<MemorySink>,
    _agent: Agent,
    _runtime: tokio::runtime::Runtime,
}

/// A host on a copy of the example cluster, with `configs` for plugins by name.
fn harness(configs: &[(&str, &str)]) -> Harness {
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    support::copy_examples(cluster.path());
    let plugins = kubewasm_testenv::PluginFolder::new();
    let sink = Arc::new(MemorySink::default());
    let agent = support::folder_agent(
        &runtime,
        cluster.path(),
        support::configs(configs),
        sink.clone(),
    );
    Harness {
        cluster,
        plugins,
        folder: agent.manifests().expect("a folder cluster").clone(),
        factory: agent.factory().clone(),
        host: agent.plugins().clone(),
        sink,
        _agent: agent,
        _runtime: runtime,
    }
}

impl Harness {
    /// Installs and loads an example plugin by its package name.
    fn load(&self, name: &str) {
        let built = match name {
            "pod-phase" => kubewasm_plugin_artifacts::POD_PHASE,
            "deployment-view" => kubewasm_plugin_artifacts::DEPLOYMENT_VIEW,
            other => panic!("no example plugin {other}"),
        };
        if let Err(e) = self.host.load(&self.install(built, name)) {
            panic!("{name} must load: {e}");
        }
    }

    fn install(&self, built: &str, name: &str) -> PathBuf {
        self.plugins.put(name, built)
    }

    /// Waits until some line of `plugin` satisfies `pred`; panics with every line otherwise.
    fn expect_line(&self, plugin: &str, what: &str, pred: impl Fn(&PluginLogRecord) -> bool) {
        let lines = self
            .sink
            .wait_until(WAIT, |rs| rs.iter().any(|r| r.plugin == plugin && pred(r)));
        assert!(
            lines.iter().any(|r| r.plugin == plugin && pred(r)),
            "{plugin} never logged {what}; it logged:\n{}",
            render(&lines)
        );
    }

    fn lines_of(&self, plugin: &str) -> Vec<PluginLogRecord> {
        support::of(self.sink.records(), plugin)
    }

    /// Rewrites the manifest `file`, applying `edit` to the document named `name`.
    fn edit(&self, file: &str, name: &str, edit: impl Fn(&mut Value)) {
        let path = self.cluster.path().join(file);
        let text = fs::read_to_string(&path).expect("read manifest");
        let mut out = String::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let mut value: Value = serde::Deserialize::deserialize(doc).expect("valid yaml");
            if value.is_null() {
                continue;
            }
            if value.pointer("/metadata/name").and_then(Value::as_str) == Some(name) {
                edit(&mut value);
            }
            out.push_str("---\n");
            out.push_str(&serde_yaml_ng::to_string(&value).expect("yaml"));
        }
        fs::write(&path, out).expect("write manifest");
    }
}

fn summary(r: &PluginLogRecord, deployment: &str, ready: &str) -> bool {
    r.message == "deployment summary"
        && r.field("deployment") == Some(deployment)
        && r.field("ready") == Some(ready)
}

fn set_ready(pod: &mut Value) {
    pod["status"]["phase"] = "Running".into();
    if let Some(conditions) = pod["status"]["conditions"].as_array_mut() {
        for c in conditions {
            c["status"] = "True".into();
        }
    }
}

#[test]
fn plugins_react_to_the_example_cluster_and_its_edits() {
    let h = harness(&[]);
    h.load("pod-phase");
    h.load("deployment-view");

    // Initial state: the summaries come from owner-index and involved-uid-index queries.
    h.expect_line("deployment-view", "web at 2/3", |r| {
        summary(r, "shop/web", "2/3")
            && r.field("replicaset") == Some("web-5d8f7c9b6")
            && r.field("revision") == Some("2")
            && r.field("not-ready")
                == Some("web-5d8f7c9b6-hv4rd: Back-off pulling image \"ghcr.io/example/web:1.8.1\"")
    });
    h.expect_line("deployment-view", "api at 1/2", |r| {
        summary(r, "shop/api", "1/2")
            && r.field("not-ready")
                == Some("api-7c6d5b4f9-8fjzc: 0/2 nodes are available: 2 Insufficient memory.")
    });
    h.expect_line("pod-phase", "the stuck pod as initial", |r| {
        r.message == "pod seen"
            && r.field("pod") == Some("shop/web-5d8f7c9b6-hv4rd")
            && r.field("phase") == Some("Pending")
            && r.field("initial") == Some("true")
    });
    let initial: Vec<_> = h
        .lines_of("pod-phase")
        .into_iter()
        .filter(|r| r.message == "pod seen")
        .collect();
    assert_eq!(initial.len(), 6, "every pod once:\n{}", render(&initial));
    // A line logged while handling an event names that event's object.
    for r in &initial {
        assert_eq!(r.key.as_deref(), r.field("pod"), "{}", render(&initial));
    }

    // The plugin-declared index exists on the shared Event informer.
    let events = h
        .factory
        .get(&Gvk::new("", "v1", "Event"))
        .expect("event informer");
    let name = plugin_index(
        &events.store().index_names(),
        "deployment-view",
        "involved-uid",
    )
    .expect("deployment-view's index");
    let involved = events.store().index_values(&name).expect("declared index");
    assert_eq!(involved.len(), 2, "two pods have events: {involved:?}");

    // Update: the stuck pod becomes ready.
    h.edit("shop-web-stuck-pod.yaml", "web-5d8f7c9b6-hv4rd", set_ready);
    h.expect_line("pod-phase", "Pending to Running", |r| {
        r.message == "pod phase changed"
            && r.field("pod") == Some("shop/web-5d8f7c9b6-hv4rd")
            && r.field("from") == Some("Pending")
            && r.field("to") == Some("Running")
    });
    h.expect_line("deployment-view", "web at 3/3", |r| {
        summary(r, "shop/web", "3/3") && r.field("not-ready") == Some("")
    });

    // Delete: the batch pod's file goes away.
    fs::remove_file(h.cluster.path().join("batch-report.yaml")).expect("remove");
    h.expect_line("pod-phase", "the batch pod deleted", |r| {
        r.message == "pod deleted"
            && r.field("pod") == Some("batch/report-29371840-kd9wq")
            && r.field("last-phase") == Some("Running")
            && r.field("stale") == Some("false")
    });

    // Per-plugin order: the stuck pod was seen, then changed, in that order.
    let about_stuck: Vec<String> = h
        .lines_of("pod-phase")
        .into_iter()
        .filter(|r| r.field("pod") == Some("shop/web-5d8f7c9b6-hv4rd"))
        .map(|r| r.message)
        .collect();
    assert_eq!(about_stuck, ["pod seen", "pod phase changed"]);

    // A broken manifest is reported and changes elsewhere still flow.
    fs::write(h.cluster.path().join("broken.yaml"), "kind: [unclosed\n").expect("write");
    h.edit("shop-api.yaml", "api-7c6d5b4f9-8fjzc", set_ready);
    h.expect_line("deployment-view", "api at 2/2", |r| {
        summary(r, "shop/api", "2/2")
    });
    let errors = h.folder.errors();
    assert!(
        errors.iter().any(|(p, _)| p.ends_with("broken.yaml")),
        "{errors:?}"
    );

    let status = h.host.status();
    assert_eq!(status.len(), 2);
    assert!(
        status.iter().all(|s| s.given_up == 0 && s.traps == 0),
        "{status:?}"
    );
}

/// The store's name of `plugin`'s index `name`, if it has one.
fn plugin_index(names: &[String], plugin: &str, name: &str) -> Option<String> {
    names
        .iter()
        .find(|n| n.starts_with(&format!("{plugin}@")) && n.ends_with(&format!("/{name}")))
        .cloned()
}

#[test]
fn an_index_name_belongs_to_the_plugin_that_declares_it() {
    // A plugin that declares deployment-view's index name on the same type, differently.
    let h = harness(&[("squat", r#"{"mode": "squat"}"#)]);
    let squat = h.install(kubewasm_plugin_artifacts::HOSTILE, "squat");
    h.host.load(&squat).expect("the squatter loads");
    h.load("deployment-view");
    h.expect_line("deployment-view", "web summary", |r| {
        summary(r, "shop/web", "2/3")
    });
    let events = h
        .factory
        .get(&Gvk::new("", "v1", "Event"))
        .expect("event informer");
    let names = events.store().index_names();
    let theirs = plugin_index(&names, "deployment-view", "involved-uid").expect("theirs");
    let squatted = plugin_index(&names, "squat", "involved-uid").expect("the squatter's");
    assert_ne!(theirs, squatted);

    // Unloading removes a plugin's indexes with it, and with the last user its informer.
    assert!(h.host.unload("squat"));
    let names = events.store().index_names();
    assert!(
        plugin_index(&names, "squat", "involved-uid").is_none(),
        "{names:?}"
    );
    assert!(plugin_index(&names, "deployment-view", "involved-uid").is_some());
    assert!(h.host.unload("deployment-view"));
    assert!(h.factory.get(&Gvk::new("", "v1", "Event")).is_none());
    assert_eq!(
        events.store().index_names().len(),
        4,
        "only the built-in indexes: {:?}",
        events.store().index_names()
    );
}

#[test]
fn built_in_indexes_are_kept_only_while_a_plugin_that_can_query_them_is_loaded() {
    let h = harness(&[]);
    let pods = || {
        h.factory
            .get(&Gvk::new("", "v1", "Pod"))
            .expect("pod informer")
            .store()
            .built_indexes()
    };
    // pod-phase imports no index query: its pods are filed in no index.
    h.load("pod-phase");
    h.expect_line("pod-phase", "pod seen", |_| true);
    assert!(pods().is_empty(), "{:?}", pods());
    // deployment-view calls by-index: every type it is granted keeps the built-in indexes.
    h.load("deployment-view");
    h.expect_line("deployment-view", "web summary", |r| {
        summary(r, "shop/web", "2/3")
    });
    assert_eq!(pods(), ["label", "namespace", "owner-uid"]);
    assert!(h.host.unload("deployment-view"));
    assert!(pods().is_empty(), "{:?}", pods());
}

#[test]
fn unloading_stops_delivery_and_releases_informers() {
    let h = harness(&[]);
    h.load("pod-phase");
    h.load("deployment-view");
    h.expect_line("deployment-view", "web summary", |r| {
        summary(r, "shop/web", "2/3")
    });
    h.expect_line("pod-phase", "initial pods", |r| r.message == "pod seen");

    assert!(h.host.unload("pod-phase"));
    assert!(!h.host.unload("pod-phase"), "already gone");
    let before = h.lines_of("pod-phase").len();
    h.edit("shop-web-stuck-pod.yaml", "web-5d8f7c9b6-hv4rd", set_ready);
    // deployment-view still sees pods: the shared Pod informer lives on for it.
    h.expect_line("deployment-view", "web at 3/3", |r| {
        summary(r, "shop/web", "3/3")
    });
    assert_eq!(
        h.lines_of("pod-phase").len(),
        before,
        "nothing after unload"
    );

    assert!(h.host.unload("deployment-view"));
    assert!(h.factory.running().is_empty(), "{:?}", h.factory.running());
}

#[test]
fn configuration_shapes_subscriptions() {
    let h = harness(&[("deployment-view", r#"{"namespaces": ["batch"]}"#)]);
    h.load("deployment-view");
    // It handles the one pod in `batch` (which no Deployment owns) and reports nothing.
    let deadline = std::time::Instant::now() + WAIT;
    while h.host.status()[0].delivered < 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(h.host.status()[0].delivered, 1, "only the batch pod");
    let lines = h.lines_of("deployment-view");
    assert!(
        lines.is_empty(),
        "shop is filtered out:\n{}",
        render(&lines)
    );
}

#[test]
fn bad_plugins_get_one_clear_error_each_and_the_good_one_runs() {
    let h = harness(&[("bad-config", "this is not json")]);
    fs::write(h.plugins.path().join("garbage.wasm"), b"not wasm at all").expect("write");
    fs::write(h.plugins.path().join("core-module.wasm"), "(module)").expect("write");
    fs::write(
        h.plugins.path().join("wrong-world.wasm"),
        "(component (import \"kubewasm:plugin/elsewhere@0.2.0\" (instance)))",
    )
    .expect("write");
    fs::write(
        h.plugins.path().join("old-contract.wasm"),
        "(component (import \"kubewasm:plugin/cache@0.1.0\" (instance)))",
    )
    .expect("write");
    h.install(kubewasm_plugin_artifacts::DEPLOYMENT_VIEW, "bad-config");
    h.install(kubewasm_plugin_artifacts::POD_PHASE, "pod-phase");

    let mut files: Vec<PathBuf> = fs::read_dir(h.plugins.path())
        .expect("read plugins folder")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let failures: Vec<_> = files.iter().filter_map(|f| h.host.load(f).err()).collect();
    let mut by_name: Vec<(String, String)> = failures
        .iter()
        .map(|f| (f.plugin.clone(), f.to_string()))
        .collect();
    by_name.sort();
    let names: Vec<&str> = by_name.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "bad-config",
            "core-module",
            "garbage",
            "old-contract",
            "wrong-world"
        ]
    );
    for failure in &failures {
        let text = failure.to_string();
        assert!(text.contains(&failure.plugin), "names the plugin: {text}");
        assert!(text.contains(".wasm"), "names the file: {text}");
        match failure.plugin.as_str() {
            "garbage" | "core-module" => assert!(
                matches!(failure.reason, Reason::Load(LoadError::NotAComponent(_))),
                "{text}"
            ),
            "wrong-world" => assert!(
                matches!(failure.reason, Reason::Load(LoadError::WrongWorld(_))),
                "{text}"
            ),
            "old-contract" => assert!(
                matches!(failure.reason, Reason::Load(LoadError::WrongVersion { .. }))
                    && text.contains("built for kubewasm:plugin@0.1.0"),
                "{text}"
            ),
            "bad-config" => {
                assert!(matches!(failure.reason, Reason::Init(_)), "{text}");
                assert!(text.contains("invalid configuration"), "{text}");
            }
            other => panic!("unexpected failure for {other}: {text}"),
        }
    }

    let status = h.host.status();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].name, "pod-phase");
    h.expect_line("pod-phase", "initial pods", |r| r.message == "pod seen");
    // The failed plugins hold no informers: only the Pod informer for pod-phase runs.
    assert_eq!(h.factory.running(), [Gvk::new("", "v1", "Pod")]);
}

#[test]
fn a_taken_metrics_port_fails_before_the_folder_is_read() {
    // The folder does not exist: reading it first would fail on the folder, binding first
    // fails on the port, at once, whatever the folder's size.
    let runtime = support::tokio();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut options = kubewasm::agent::AgentOptions::new(
        kubewasm::agent::Cluster::Folder(PathBuf::from("/no/such/cluster")),
        support::configs(&[]),
        Arc::new(MemorySink::default()),
    );
    options.metrics_address = Some(taken.local_addr().expect("address"));
    let error = runtime
        .block_on(Agent::start(options))
        .err()
        .expect("the port is taken");
    let error = format!("{error:#}");
    assert!(error.starts_with("metrics address 127.0.0.1:"), "{error}");
}
