//! Plugin writes against a manifests folder: applied to its in-memory cluster and delivered
//! back as events, the files untouched; oversized and malformed writes refused in the host.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kubewasm::gvk::Gvk;
use kubewasm::source::{Source, SourceEvent};
use kubewasm::wasm::logging::MemorySink;
use kubewasm::write::{Verb, WriteGrant, event_gvk};
use serde_json::{Value, json};
use support::field_values;

mod support;

const WAIT: Duration = Duration::from_secs(60);

const CRASHING: &str = "apiVersion: v1
kind: Pod
metadata:
  name: worker
  namespace: shop
spec:
  containers: [{name: app, image: example/app:1}]
status:
  phase: Running
  containerStatuses:
    - name: app
      ready: false
      restartCount: 7
      image: example/app:1
      imageID: ''
      state: {waiting: {reason: CrashLoopBackOff}}
";

const CONFIG_MAP: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data: {v: '1'}
";

fn grant(kind: Gvk, verbs: &[Verb], namespaces: Option<&[&str]>) -> WriteGrant {
    WriteGrant {
        resources: vec![kind],
        subresources: vec![],
        verbs: verbs.to_vec(),
        namespaces: namespaces.map(|n| n.iter().map(|s| (*s).to_owned()).collect()),
    }
}

fn wait<T>(what: &str, check: impl Fn() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn writes_land_in_the_folders_memory_as_events_and_bad_ones_never_leave_the_host() {
    let rt = support::tokio();
    let cluster = tempfile::tempdir().expect("tempdir");
    support::copy_examples(cluster.path());
    std::fs::write(cluster.path().join("worker.yaml"), CRASHING).expect("write");
    std::fs::write(cluster.path().join("settings.yaml"), CONFIG_MAP).expect("write");
    let plugins = tempfile::tempdir().expect("tempdir");
    let mut config = support::configs(&[
        ("labeler", r#"{"key": "team", "value": "shop"}"#),
        ("crashloop-events", "{}"),
        ("write-huge", r#"{"mode": "write-huge"}"#),
    ]);
    let pod = Gvk::new("", "v1", "Pod");
    let cm = Gvk::new("", "v1", "ConfigMap");
    for (name, writes) in [
        (
            "labeler",
            vec![grant(pod.clone(), &[Verb::Patch], Some(&["shop"]))],
        ),
        (
            "crashloop-events",
            vec![grant(event_gvk(), &[Verb::Create, Verb::Patch], None)],
        ),
        // Granted, so only the size and shape checks stand in its way.
        ("write-huge", vec![grant(cm.clone(), &[Verb::Patch], None)]),
    ] {
        config
            .plugins
            .named
            .get_mut(name)
            .expect("configured")
            .grants
            .writes = writes;
    }
    for (name, built) in [
        ("labeler", kubewasm_plugin_artifacts::LABELER),
        (
            "crashloop-events",
            kubewasm_plugin_artifacts::CRASHLOOP_EVENTS,
        ),
        ("write-huge", kubewasm_plugin_artifacts::HOSTILE),
    ] {
        std::fs::copy(built, plugins.path().join(format!("{name}.wasm"))).expect("copy");
    }
    let sink = Arc::new(MemorySink::default());
    let mut agent = support::folder_agent(&rt, cluster.path(), config, sink.clone());
    let folder = agent.manifests().expect("a folder cluster").clone();
    let mut events = folder.watch(&event_gvk(), &kubewasm::source::Scope::everything());
    rt.block_on(agent.follow_plugins(plugins.path()))
        .expect("plugins load");

    // Every shop pod gets the label; the batch pod (namespace not granted) does not.
    let pods = agent.factory().get(&pod).expect("pod informer");
    let label = |key: &str| {
        pods.store().get(key).and_then(|o| {
            let v: Value = serde_json::from_str(&o.json()).ok()?;
            v.pointer("/metadata/labels/team")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    };
    wait("labels on the shop pods", || {
        [
            "shop/worker",
            "shop/web-5d8f7c9b6-hv4rd",
            "shop/api-7c6d5b4f9-2ntwl",
        ]
        .iter()
        .all(|k| label(k).as_deref() == Some("shop"))
        .then_some(())
    });
    assert_eq!(label("batch/report-29371840-kd9wq"), None);
    let labeler = support::plugin_status(&agent, "labeler");
    assert!(labeler.writes_sent >= 5, "{labeler:?}");
    assert!(labeler.writes_denied >= 1, "the batch pod: {labeler:?}");

    // The crash loop's Event, in the folder's memory.
    let event = rt.block_on(async {
        tokio::time::timeout(WAIT, async {
            while let Some(e) = events.next().await {
                if let SourceEvent::Applied(o) | SourceEvent::Listed(o) = e
                    && o.json().contains("CrashLoopBackOff")
                {
                    return Some(o);
                }
            }
            None
        })
        .await
    });
    let event = event.ok().flatten().expect("a CrashLoopBackOff Event");
    let v: Value = serde_json::from_str(&event.json()).expect("JSON");
    assert_eq!(v["type"], "Warning");
    assert_eq!(v["reportingController"], "kubewasm");
    assert_eq!(v["reportingInstance"], "crashloop-events");
    assert_eq!(
        v["regarding"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "worker",
               "uid": v["regarding"]["uid"], "resourceVersion": v["regarding"]["resourceVersion"]})
    );

    // A rescan with the files unchanged keeps what was written; the files never change.
    folder.rescan();
    assert_eq!(label("shop/worker").as_deref(), Some("shop"));
    let file = std::fs::read_to_string(cluster.path().join("worker.yaml")).expect("read");
    assert_eq!(file, CRASHING);

    // Oversized and malformed writes are refused in the host; nothing reached the folder.
    wait("write-huge's reports", || {
        let lines = support::of(sink.records(), "write-huge");
        (!field_values(&lines, "many writes", "outcome").is_empty()).then_some(())
    });
    let lines = support::of(sink.records(), "write-huge");
    let outcome = |what: &str| {
        field_values(&lines, what, "outcome")
            .first()
            .cloned()
            .unwrap_or_default()
    };
    for (what, want) in [
        ("huge apply", "too large"),
        ("not json", "invalid argument"),
        ("patch not a list", "invalid argument"),
        ("huge note", "invalid argument"),
        ("bad subresource", "invalid argument"),
        ("many writes", "too large"),
    ] {
        assert_eq!(outcome(what), want, "{what}");
    }
    let cms = agent.factory().get(&cm).expect("configmap informer");
    let settings = cms.store().get("shop/settings").expect("settings");
    assert!(
        !settings.json().contains("\"a\":\"b\""),
        "{}",
        settings.json()
    );
}
