//! KubewasmPlugin objects on a real kube-apiserver drive loading, reloading and unloading of
//! plugins pulled from a real registry, and carry their state back as status conditions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::api::{PatchParams, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::crd;
use kubewasm::wasm::logging::MemorySink;
use kubewasm_testenv::TestEnv;
use kubewasm_testenv::oci::Registry;
use serde_json::{Value, json};

use crate::support;

const WAIT: Duration = Duration::from_secs(60);
const REPO: &str = "plugins/audit-log";

fn version(tag: &str) -> Vec<u8> {
    kubewasm_plugin_artifacts::variant(kubewasm_plugin_artifacts::AUDIT_LOG, tag)
}

fn api(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crd::GROUP, crd::VERSION, crd::KIND),
        crd::PLURAL,
    );
    Api::all_with(client.clone(), &resource)
}

/// The condition `kind` of a status.
fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// Waits until the object's status satisfies `check`; panics with the status otherwise.
async fn wait_status(
    api: &Api<DynamicObject>,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let status = api
            .get("audit-log")
            .await
            .map(|o| o.data["status"].clone())
            .unwrap_or(Value::Null);
        if check(&status) {
            return status;
        }
        assert!(start.elapsed() < WAIT, "{what}: {status:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn merge(api: &Api<DynamicObject>, spec: Value) {
    api.patch(
        "audit-log",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec })),
    )
    .await
    .expect("patch the spec");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubewasm_plugin_objects_load_reload_and_unload_plugins_and_report_conditions() {
    let env = TestEnv::start().await.expect("test environment");
    let admin = env.client().await.expect("admin client");
    let definition: Value = serde_yaml_ng::from_str(crd::DEFINITION).expect("the CRD is YAML");
    kubewasm_testenv::resources::install_crd(&admin, definition)
        .await
        .expect("install the CRD");
    let registry = Registry::start().await.expect("registry");
    let v1 = version("crd-1");
    let d1 = registry
        .push_component(REPO, "stable", &v1)
        .await
        .expect("push");

    let files = tempfile::tempdir().expect("temp dir");
    let path = |name: &str| files.path().join(name).display().to_string();
    registry
        .write_client_files(files.path(), None)
        .expect("write");
    std::fs::create_dir(path("plugins")).expect("mkdir");
    let config = HostConfig::parse("pluginResources: true\n").expect("config");
    let mut options = AgentOptions::new(
        Cluster::Kube(admin.clone()),
        config,
        Arc::new(MemorySink::default()),
    );
    options.compiled_cache = Some(files.path().join("cache"));
    let mut agent = Agent::start(options).await.expect("agent");
    agent
        .follow_plugins(files.path().join("plugins").as_path())
        .await
        .expect("follow plugins");

    let api = api(&admin);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubewasm.dev/v1alpha1",
        "kind": "KubewasmPlugin",
        "metadata": {"name": "audit-log"},
        "spec": {
            "source": {
                "oci": format!("oci://{}/{REPO}:stable", registry.address),
                "caFile": path("ca.pem"),
                "pullSecret": path("regcred.json"),
                "pollSeconds": 1,
            },
            "config": {"resources": ["v1/ConfigMap"]},
        },
    }))
    .expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");

    // Loaded: Ready, not Degraded, the manifest digest and generation recorded.
    let status = wait_status(&api, "loaded", |s| {
        condition(s, "Ready")["status"] == "True"
    })
    .await;
    assert_eq!(status["digest"], d1.as_str());
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(condition(&status, "Degraded")["status"], "False");
    assert!(condition(&status, "Ready")["lastTransitionTime"].is_string());
    let loaded = support::plugin_status(&agent, "audit-log");
    assert_eq!(loaded.digest, kubewasm::plugins::digest(&v1));

    // A digest the tag does not name: refused, the old version serves, Degraded says why.
    let other = format!("sha256:{}", "0".repeat(64));
    merge(&api, json!({"source": {"digest": other}})).await;
    let status = wait_status(&api, "a wrong digest", |s| {
        s["observedGeneration"] == 2 && condition(s, "Degraded")["status"] == "True"
    })
    .await;
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["reason"], "UpdateRefused");
    assert!(
        degraded["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("expected digest {other}, got {d1}"))),
        "{degraded:#}"
    );
    assert_eq!(condition(&status, "Ready")["status"], "True");
    assert_eq!(
        status["digest"],
        d1.as_str(),
        "the old version keeps serving"
    );

    // Settings change (and the digest pin goes): the plugin is reloaded with them.
    merge(
        &api,
        json!({"source": {"digest": null}, "limits": {"deadlineMs": 500}}),
    )
    .await;
    let status = wait_status(&api, "new settings", |s| {
        s["observedGeneration"] == 3 && condition(s, "Degraded")["status"] == "False"
    })
    .await;
    assert_eq!(condition(&status, "Ready")["status"], "True");
    let start = Instant::now();
    while support::plugin_status(&agent, "audit-log").reloads < 1 {
        assert!(start.elapsed() < WAIT, "not reloaded with the new settings");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A spec the host cannot use: named, and the running version keeps its settings.
    merge(&api, json!({"grants": {"resources": ["not a type"]}})).await;
    let status = wait_status(&api, "an invalid spec", |s| {
        s["observedGeneration"] == 4 && condition(s, "Degraded")["reason"] == "InvalidSpec"
    })
    .await;
    let message = condition(&status, "Degraded")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("spec.grants.resources[0]"), "{message}");
    assert_eq!(condition(&status, "Ready")["status"], "True");

    // Deleted: unloaded.
    api.delete("audit-log", &DeleteParams::default())
        .await
        .expect("delete");
    let start = Instant::now();
    while agent
        .plugins()
        .status()
        .iter()
        .any(|p| p.name == "audit-log")
    {
        assert!(start.elapsed() < WAIT, "not unloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
