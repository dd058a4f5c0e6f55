//! A controller: for every Namespace labelled `team`, keeps a ResourceQuota, a LimitRange, a
//! default-deny NetworkPolicy and a RoleBinding of the team's group to `edit` in it. The host
//! gives each child the Namespace as its controller and the Namespace's apply-set label, and
//! deletes the children a reconcile no longer applies: when the label goes, so do they.
//!
//! Configuration (the defaults): `{"label": "team", "pods": "20", "finalizer": false,
//! "reconcileMs": 0, "finalizeMs": 0, "trapOn": "", "requeueSeconds": 0}`. `finalizer` keeps `kubewasm.dev/<plugin>`
//! on every team Namespace and logs `finalizing`, then `released`, in `finalize`
//! (`finalizeMs` apart, to show a host killed or swapped in the middle); `reconcileMs` makes
//! each reconcile log `reconciling` and wait that long first (to show how events that arrive
//! meanwhile fold into one more reconcile, and when reconciles ran); `trapOn` makes the
//! reconcile of that Namespace trap (to show one key backing off while the others go on);
//! `requeueSeconds` has each reconcile of a team Namespace ask to be run again that much
//! later (to look for drift on a clock, not only on events).
//!
//! Metrics: `reconciles_total{outcome}` (`applied`, `unlabelled`, `gone`) and
//! `children` (the children the last reconcile applied).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kubewasm_sdk::cluster::{self, Target};
use kubewasm_sdk::{
    Controller, Gvk, HandleError, Manifest, Metric, ObjectKey, Plugin, cache, export_plugin, log,
    metrics, triggers,
};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_label")]
    label: String,
    #[serde(default = "default_pods")]
    pods: String,
    #[serde(default)]
    finalizer: bool,
    #[serde(default)]
    reconcile_ms: u64,
    #[serde(default)]
    finalize_ms: u64,
    #[serde(default)]
    trap_on: String,
    #[serde(default)]
    requeue_seconds: u32,
}

fn default_label() -> String {
    "team".into()
}

fn default_pods() -> String {
    "20".into()
}

static CONFIG: OnceLock<Config> = OnceLock::new();

fn quota() -> Gvk {
    Gvk::new("", "v1", "ResourceQuota")
}

fn limit_range() -> Gvk {
    Gvk::new("", "v1", "LimitRange")
}

fn network_policy() -> Gvk {
    Gvk::new("networking.k8s.io", "v1", "NetworkPolicy")
}

fn role_binding() -> Gvk {
    Gvk::new("rbac.authorization.k8s.io", "v1", "RoleBinding")
}

/// The children of a team's namespace: type, name and the fields this plugin owns.
fn children(team: &str, pods: &str) -> Vec<(Gvk, &'static str, serde_json::Value)> {
    vec![
        (
            quota(),
            "team-quota",
            json!({"spec": {"hard": {"pods": pods}}}),
        ),
        (
            limit_range(),
            "team-limits",
            json!({"spec": {"limits": [{"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}}]}}),
        ),
        (
            network_policy(),
            "default-deny",
            json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
        ),
        (
            role_binding(),
            "team-edit",
            json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": team}],
            }),
        ),
    ]
}

/// Waits `ms` milliseconds by the clock (sleeping: it costs no CPU).
fn wait(ms: u64) {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn outcome(what: &str) {
    // A refused update (past the series bound) costs the plugin a metric, not its work.
    if let Err(e) = metrics::inc("reconciles_total", &[what]) {
        log::warn("metric refused", &[("why", &e.explain())]);
    }
}

struct Provisioner;

impl Plugin for Provisioner {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        let finalizer = CONFIG.get().is_some_and(|c| c.finalizer);
        let mut controller = Controller::of(Gvk::namespace())
            .owns(quota())
            .owns(limit_range())
            .owns(network_policy())
            .owns(role_binding());
        if finalizer {
            controller = controller.with_finalizer();
        }
        Manifest::new()
            .controller(controller)
            .metric(Metric::counter(
                "reconciles_total",
                "Reconciles of a Namespace, by what they found",
                &["outcome"],
            ))
            .metric(Metric::gauge(
                "children",
                "Children the last reconcile applied",
                &[],
            ))
    }

    fn reconcile(key: ObjectKey) -> Result<(), HandleError> {
        let Some(config) = CONFIG.get() else {
            return Err(HandleError::fatal("not initialised"));
        };
        if config.reconcile_ms > 0 {
            log::info("reconciling", &[("namespace", &key.name)]);
            wait(config.reconcile_ms);
        }
        let name = key.name.as_str();
        if !config.trap_on.is_empty() && config.trap_on == name {
            panic!("asked to trap on {name}");
        }
        let Some(namespace) = cache::get(&Gvk::namespace(), None, name)? else {
            // Gone: its children went with it.
            outcome("gone");
            return Ok(());
        };
        let Some(team) = namespace.label(&config.label) else {
            // No children applied: the host deletes those it made before.
            outcome("unlabelled");
            let _ = metrics::set("children", &[], 0.0);
            log::info("not a team namespace", &[("namespace", name)]);
            return Ok(());
        };
        let applied = children(&team, &config.pods);
        for (gvk, child, fields) in &applied {
            let target = Target {
                gvk: gvk.clone(),
                namespace: Some(name.to_owned()),
                name: (*child).to_owned(),
                subresource: None,
            };
            // The fields this plugin owns; apiVersion, kind, name and namespace are the host's.
            let mut body = fields.clone();
            body["metadata"] = json!({"name": child});
            cluster::apply(&target, &body.to_string())?;
        }
        outcome("applied");
        let _ = metrics::set("children", &[], applied.len() as f64);
        if config.requeue_seconds > 0 {
            triggers::requeue_after(config.requeue_seconds).map_err(HandleError::fatal)?;
        }
        log::info(
            "team namespace provisioned",
            &[("namespace", name), ("team", &team)],
        );
        Ok(())
    }

    fn finalize(key: ObjectKey) -> Result<(), HandleError> {
        log::info("finalizing", &[("namespace", &key.name)]);
        wait(CONFIG.get().map_or(0, |c| c.finalize_ms));
        log::info("released", &[("namespace", &key.name)]);
        Ok(())
    }
}

export_plugin!(Provisioner);
