//! The Helm chart (examples/helm/kubewasm): `helm lint` passes and its values schema refuses
//! bad values; its CRD is the one the host embeds; its RBAC is what `kubewasm rbac` prints
//! for the configuration it renders; every object it renders passes a server-side dry-run
//! apply on the real kube-apiserver.

use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

use crate::support;

const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm");

fn chart() -> PathBuf {
    support::root().join("examples/helm/kubewasm")
}

/// Runs helm (built by scripts/test-tools.sh) with `args`; its output, or a panic naming why.
fn helm(args: &[&str]) -> std::process::Output {
    let helm = kubewasm_testenv::tools_dir()
        .expect("test tools")
        .join("helm");
    let home = tempfile::tempdir().expect("temp dir");
    Command::new(helm)
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("helm runs")
}

/// The chart rendered for release `kubewasm` in namespace `kubewasm`, CRDs included.
fn rendered() -> Vec<Value> {
    rendered_with(&[])
}

/// [`rendered`], with more `helm template` arguments (values files).
fn rendered_with(extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "kubewasm",
        chart.to_str().expect("utf-8 path"),
        "--namespace",
        "kubewasm",
        "--include-crds",
    ];
    args.extend_from_slice(extra);
    let out = helm(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("rendered YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// `kubewasm ARGS`: the YAML documents it prints, or a panic naming why it failed.
fn kubewasm_yaml(args: &[&std::ffi::OsStr]) -> Vec<Value> {
    let out = Command::new(KUBEWASM)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("kubewasm runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml_ng::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
        .map(|doc| Value::deserialize(doc).expect("kubewasm's YAML"))
        .collect()
}

/// The rendered host configuration (`docs`' ConfigMap), written to a folder and loaded as the
/// host loads it; the folder holds it as `config.yaml`.
fn chart_config(docs: &[Value]) -> (tempfile::TempDir, kubewasm::config::HostConfig) {
    let config = find(docs, "ConfigMap", "kubewasm-config")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml")
        .to_owned();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("config.yaml"), &config).expect("write");
    let loaded = kubewasm::config::HostConfig::load(&dir.path().join("config.yaml"))
        .expect("the chart's configuration is valid");
    (dir, loaded)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

#[test]
fn the_chart_lints_and_its_schema_refuses_bad_values() {
    let chart = chart();
    let chart = chart.to_str().expect("utf-8 path");
    let out = helm(&["lint", chart]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("0 chart(s) failed"),
        "{text}"
    );
    let out = helm(&["lint", chart, "--set", "replicaCount=-1"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success() && text.contains("replicaCount"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(chart_file("crds/kubewasmplugin-crd.yaml")).expect("chart CRD"),
        kubewasm::crd::DEFINITION,
        "copy examples/deploy/kubewasmplugin-crd.yaml into the chart's crds/"
    );
}

fn chart_file(name: &str) -> PathBuf {
    chart().join(name)
}

#[test]
fn the_charts_rbac_is_what_kubewasm_rbac_prints_for_its_configuration() {
    rbac_matches(&rendered());
}

#[test]
fn sharding_adds_a_disruption_budget_and_the_members_lease_rights() {
    assert!(
        !rendered()
            .iter()
            .any(|d| d["kind"] == "PodDisruptionBudget"),
        "no budget without sharding"
    );
    let docs = rendered_with(&["--set", "config.sharding.enabled=true"]);
    let (_, config) = chart_config(&docs);
    assert!(config.sharding.enabled && config.elects());
    let budget = find(&docs, "PodDisruptionBudget", "kubewasm");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    let pods = &find(&docs, "Deployment", "kubewasm")["spec"]["template"]["metadata"]["labels"];
    let selector = budget["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("a label selector");
    assert!(!selector.is_empty());
    for (label, value) in selector {
        assert_eq!(
            &pods[label], value,
            "the budget selects the pods by {label}"
        );
    }
    let leases = &find(&docs, "Role", "kubewasm-leader-election")["rules"][0]["verbs"];
    assert!(
        ["list", "delete"]
            .iter()
            .all(|v| leases.as_array().is_some_and(|a| a.iter().any(|x| x == v))),
        "members list and delete Leases: {leases}"
    );
    rbac_matches(&docs);
    let bad = helm(&[
        "template",
        "kubewasm",
        chart().to_str().expect("utf-8 path"),
        "--set",
        "config.sharding.key=name",
    ]);
    assert!(!bad.status.success(), "the schema refuses an unknown key");
}

#[test]
fn monitoring_adds_a_dashboard_the_grafana_sidecar_loads_and_alerts_on_what_to_act_on() {
    let plain = rendered();
    assert!(
        !plain
            .iter()
            .any(|d| d["kind"] == "PrometheusRule" || d["metadata"]["name"] == "kubewasm-dashboard"),
        "neither without asking"
    );
    let docs = rendered_with(&[
        "--set",
        "monitoring.dashboard.enabled=true",
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.prometheusRule.backlogSeconds=30",
    ]);
    let dashboard = find(&docs, "ConfigMap", "kubewasm-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: Value = serde_json::from_str(
        dashboard["data"]["kubewasm.json"]
            .as_str()
            .expect("the dashboard's JSON"),
    )
    .expect("the dashboard parses");
    assert_eq!(json["uid"], "kubewasm");
    let panels = json["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let rule = find(&docs, "PrometheusRule", "kubewasm");
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    let alert = |name: &str| -> &Value {
        rules
            .iter()
            .find(|r| r["alert"] == name)
            .unwrap_or_else(|| panic!("no alert {name} in {rules:?}"))
    };
    for name in [
        "KubewasmPluginFailing",
        "KubewasmBacklogGrowing",
        "KubewasmFinalizersHeld",
        "KubewasmWriteRateAtLimit",
    ] {
        let expr = alert(name)["expr"].as_str().expect("an expression");
        assert!(expr.contains("kubewasm_plugin_"), "{name}: {expr}");
    }
    assert!(
        alert("KubewasmBacklogGrowing")["expr"]
            .as_str()
            .is_some_and(|e| e.ends_with("> 30")),
        "the threshold comes from the values"
    );
    // Grafana's and Prometheus' own templates reach them untouched.
    assert!(
        alert("KubewasmPluginFailing")["annotations"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("{{ $labels.plugin }}")),
        "{:?}",
        alert("KubewasmPluginFailing")
    );
    let bad = helm(&[
        "template",
        "kubewasm",
        chart().to_str().expect("utf-8 path"),
        "--set",
        "monitoring.prometheusRule.failingFor=soon",
    ]);
    assert!(
        !bad.status.success(),
        "the schema refuses a duration that is none"
    );
}

/// The RBAC of `docs` is exactly what `kubewasm rbac` prints for the configuration they hold.
fn rbac_matches(docs: &[Value]) {
    let (dir, _) = chart_config(docs);
    let plugins = support::deployed_plugins();
    let config = dir.path().join("config.yaml");
    let generated = kubewasm_yaml(&[
        "rbac".as_ref(),
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
    ]);
    assert!(
        generated.len() >= 4,
        "ClusterRole, binding, Lease Role, binding"
    );
    for object in &generated {
        let (kind, name) = (
            object["kind"].as_str().expect("kind"),
            object["metadata"]["name"].as_str().expect("name"),
        );
        let ours = find(docs, kind, name);
        for field in ["rules", "roleRef", "subjects"] {
            assert_eq!(ours[field], object[field], "{kind} {name}: {field}");
        }
        assert_eq!(
            ours["metadata"]["namespace"],
            object["metadata"]["namespace"]
        );
    }
    let rbac_kinds = ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];
    let rendered_rbac = docs
        .iter()
        .filter(|d| rbac_kinds.iter().any(|k| d["kind"] == *k))
        .count();
    assert_eq!(
        rendered_rbac,
        generated.len(),
        "no RBAC beyond kubewasm rbac's"
    );
}

#[test]
fn the_charts_webhooks_are_what_kubewasm_webhooks_prints_served_by_its_own_service() {
    let plugins = kubewasm_testenv::PluginFolder::with(&[
        ("image-policy", kubewasm_plugin_artifacts::IMAGE_POLICY),
        ("pod-defaults", kubewasm_plugin_artifacts::POD_DEFAULTS),
    ]);
    let printed = kubewasm_yaml(&[
        "webhooks".as_ref(),
        "--namespace".as_ref(),
        "kubewasm".as_ref(),
        "--service".as_ref(),
        "kubewasm-webhooks".as_ref(),
        "--plugins".as_ref(),
        plugins.path().as_os_str(),
    ]);
    assert_eq!(
        printed.len(),
        2,
        "a validating and a mutating configuration"
    );
    // The two lists pasted into the values, as the chart's comment says.
    let hooks = |kind: &str| {
        printed
            .iter()
            .find(|d| d["kind"] == kind)
            .map(|d| d["webhooks"].clone())
            .unwrap_or_else(|| panic!("{kind} printed"))
    };
    let values = serde_json::json!({"admission": {
        "enabled": true,
        "validating": hooks("ValidatingWebhookConfiguration"),
        "mutating": hooks("MutatingWebhookConfiguration"),
    }});
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), values.to_string()).expect("write values");
    let path = file.path().to_str().expect("utf-8 path");
    let lint = helm(&["lint", chart().to_str().expect("utf-8 path"), "-f", path]);
    assert!(
        lint.status.success(),
        "{}",
        String::from_utf8_lossy(&lint.stdout)
    );
    let docs = rendered_with(&["-f", path]);

    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let ours = find(&docs, kind, "kubewasm");
        assert_eq!(ours["webhooks"], hooks(kind), "{kind}");
        assert_eq!(
            ours["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "kubewasm/kubewasm-webhooks"
        );
    }
    let service = find(&docs, "Service", "kubewasm-webhooks");
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhooks");
    let certificate = find(&docs, "Certificate", "kubewasm-webhooks");
    let names = certificate["spec"]["dnsNames"]
        .as_array()
        .expect("dnsNames");
    assert!(
        names.iter().any(|n| n == "kubewasm-webhooks.kubewasm.svc"),
        "{names:?}"
    );
    let secret = &certificate["spec"]["secretName"];
    let pod = &find(&docs, "Deployment", "kubewasm")["spec"]["template"]["spec"];
    let ports = pod["containers"][0]["ports"].as_array().expect("ports");
    assert!(
        ports
            .iter()
            .any(|p| p["name"] == "webhooks" && p["containerPort"] == 8443),
        "{ports:?}"
    );
    let volumes = pod["volumes"].as_array().expect("volumes");
    assert!(
        volumes.iter().any(|v| v["secret"]["secretName"] == *secret),
        "the certificate's Secret is mounted: {volumes:?}"
    );
    let (_dir, loaded) = chart_config(&docs);
    let serve = loaded.admission.expect("admission served");
    assert_eq!(serve.address.port(), 8443);
    assert!(
        serve.cert_file.starts_with("/var/run/kubewasm/tls"),
        "{serve:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_passes_a_server_side_dry_run() {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::discovery::{Scope, pinned_kind};
    // With sharding: every object of the default rendering, and the disruption budget; and
    // the dashboard's ConfigMap (the PrometheusRule's CRD is the Prometheus Operator's, which
    // the test server does not have).
    let docs = rendered_with(&[
        "--set",
        "config.sharding.enabled=true",
        "--set",
        "monitoring.dashboard.enabled=true",
    ]);
    let env = kubewasm_testenv::TestEnv::start()
        .await
        .expect("test environment");
    let admin = env.client().await.expect("admin client");
    // The release's namespace, and the one the example plugins read in (its Role).
    for ns in ["kubewasm", "shop"] {
        kubewasm_testenv::resources::create_namespace(&admin, ns)
            .await
            .expect("namespace");
    }
    let params = PatchParams::apply("kubewasm-chart-test").dry_run();
    for doc in &docs {
        let object: DynamicObject = serde_json::from_value(doc.clone()).expect("an object");
        let types = object.types.clone().expect("apiVersion and kind");
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, caps) = pinned_kind(&admin, &gvk).await.expect("served type");
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                admin.clone(),
                object.metadata.namespace.as_deref().unwrap_or("kubewasm"),
                &resource,
            ),
            Scope::Cluster => Api::all_with(admin.clone(), &resource),
        };
        let name = object.metadata.name.clone().expect("a name");
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .unwrap_or_else(|e| panic!("{} {name}: {e}", types.kind));
    }
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "CustomResourceDefinition",
        "Deployment",
        "ConfigMap",
        "ServiceAccount",
    ] {
        assert!(kinds.contains(&kind), "{kind} rendered: {kinds:?}");
    }
}
