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

use crate::support;

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
    let plugins = kubewasm_testenv::PluginFolder::new();
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
        plugins.put(name, built);
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

/// The folder's objects of `gvk` now, by key: its list, as a new watch of the type starts.
fn objects(
    folder: &kubewasm::source::manifests::ManifestFolder,
    gvk: &Gvk,
) -> std::collections::BTreeMap<String, Arc<kubewasm::object::KubeObject>> {
    let mut stream = folder.watch(gvk, &kubewasm::source::Scope::everything());
    let mut out = std::collections::BTreeMap::new();
    futures::executor::block_on(async {
        while let Some(event) = stream.next().await {
            match event {
                SourceEvent::Listed(o) => {
                    out.insert(o.key().to_owned(), o);
                }
                SourceEvent::ListDone => break,
                _ => {}
            }
        }
    });
    out
}

#[test]
fn the_folder_deletes_as_the_api_server_does_finalizers_and_dependents_included() {
    use kubewasm::write::{Action, DeleteOptions, Propagation, Target, Write, Writer};
    let dir = tempfile::tempdir().expect("temp dir");
    let owner = |name: &str, uid: &str, finalizers: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: t, uid: {uid}, finalizers: {finalizers}}}\n"
        )
    };
    let owned = |name: &str, owner_uid: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: t\n  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: x, uid: {owner_uid}}}]\n"
        )
    };
    for (file, text) in [
        ("held.yaml", owner("held", "u-held", "[example.com/hold]")),
        ("parent.yaml", owner("parent", "u-parent", "[]")),
        ("child.yaml", owned("child", "u-parent")),
        ("grandchild.yaml", owned("grandchild", "u-child")),
        ("kept-parent.yaml", owner("kept-parent", "u-kept", "[]")),
        ("orphan.yaml", owned("orphan", "u-kept")),
    ] {
        std::fs::write(dir.path().join(file), text).expect("write");
    }
    // The dependents' uids are derived; child's must be u-child for the grandchild.
    let child = std::fs::read_to_string(dir.path().join("child.yaml")).expect("read");
    std::fs::write(
        dir.path().join("child.yaml"),
        child.replace("  name: child\n", "  name: child\n  uid: u-child\n"),
    )
    .expect("write");
    let folder = kubewasm::source::manifests::ManifestFolder::snapshot(
        dir.path(),
        kubewasm::object::Transform::default(),
    )
    .expect("the folder");
    let cm = Gvk::new("", "v1", "ConfigMap");
    let delete = |name: &str, propagation: Propagation| Write {
        target: Target {
            gvk: cm.clone(),
            namespace: Some("t".into()),
            name: name.into(),
            subresource: None,
        },
        action: Action::Delete(DeleteOptions {
            propagation,
            ..DeleteOptions::default()
        }),
    };
    // A finalizer holds it, marked as being deleted; a second delete changes nothing.
    folder
        .send("p", &delete("held", Propagation::Background))
        .expect("deleted");
    let held = objects(&folder, &cm)["t/held"].clone();
    let version = held.resource_version().to_owned();
    let value: Value = serde_json::from_str(&held.json()).expect("json");
    assert!(
        value.pointer("/metadata/deletionTimestamp").is_some(),
        "{value}"
    );
    folder
        .send("p", &delete("held", Propagation::Background))
        .expect("deleted again");
    assert_eq!(objects(&folder, &cm)["t/held"].resource_version(), version);
    // The last finalizer removed: gone.
    let release = Write {
        action: Action::MergePatch(json!({"metadata": {"finalizers": []}}).to_string()),
        ..delete("held", Propagation::Background)
    };
    folder.send("p", &release).expect("released");
    assert!(!objects(&folder, &cm).contains_key("t/held"));
    // Background: its dependents go after it, and theirs.
    folder
        .send("p", &delete("parent", Propagation::Background))
        .expect("deleted");
    let now = objects(&folder, &cm);
    for gone in ["t/parent", "t/child", "t/grandchild"] {
        assert!(
            !now.contains_key(gone),
            "{gone} is collected: {:?}",
            now.keys()
        );
    }
    // Orphan: its dependent stays, without the reference.
    folder
        .send("p", &delete("kept-parent", Propagation::Orphan))
        .expect("deleted");
    let now = objects(&folder, &cm);
    let orphan = now.get("t/orphan").expect("the orphan stays");
    assert_eq!(
        orphan.owners().count(),
        0,
        "its reference to the deleted owner is removed"
    );
    // A resourceVersion precondition that no longer holds is a conflict.
    let stale = Write {
        action: Action::Delete(DeleteOptions {
            resource_version: Some("0".into()),
            ..DeleteOptions::default()
        }),
        ..delete("orphan", Propagation::Background)
    };
    let refused = folder.send("p", &stale).expect_err("refused");
    assert_eq!(refused.reason, "Conflict", "{refused}");
}
