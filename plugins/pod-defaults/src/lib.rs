//! A mutating admission policy that reads the cache: a Pod created without the label `team`
//! gets its namespace's `team` label (read from the host's cache of Namespaces), and each
//! container without resource requests gets the configured defaults.
//!
//! Configuration: `{"label": "team", "requests": {"cpu": "50m", "memory": "64Mi"}}` (the
//! defaults). The plugin answers with the changed object; the host works out the JSON
//! patch. Failures let the Pod through (failure policy Ignore): defaults are a convenience,
//! not a guard.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kubewasm_sdk::{
    Admission, AdmissionRequest, AdmissionResponse, AdmissionRule, Event, Gvk, HandleError,
    Manifest, Operation, Plugin, cache, export_plugin,
};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_label")]
    label: String,
    #[serde(default = "default_requests")]
    requests: BTreeMap<String, String>,
}

fn default_label() -> String {
    "team".into()
}

fn default_requests() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cpu".into(), "50m".into()),
        ("memory".into(), "64Mi".into()),
    ])
}

static CONFIG: OnceLock<Config> = OnceLock::new();

struct PodDefaults;

impl PodDefaults {
    fn review(request: &AdmissionRequest<'_>) -> Result<AdmissionResponse, String> {
        let config = CONFIG.get().ok_or("not initialised")?;
        let Some(object) = request.object else {
            return Ok(AdmissionResponse::allow());
        };
        let mut pod: Value = object.parse().map_err(|e| e.to_string())?;
        let mut changed = Vec::new();
        if object.label(&config.label).is_none()
            && let Some(ns) = &request.namespace
            && let Some(namespace) =
                cache::get(&Gvk::namespace(), None, ns).map_err(|e| e.explain())?
            && let Some(team) = namespace.label(&config.label)
        {
            let labels = pod
                .pointer_mut("/metadata")
                .and_then(Value::as_object_mut)
                .ok_or("no metadata")?
                .entry("labels")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert(config.label.clone(), Value::String(team));
                changed.push(format!("label {}", config.label));
            }
        }
        if let Some(containers) = pod
            .pointer_mut("/spec/containers")
            .and_then(Value::as_array_mut)
        {
            for container in containers {
                let Some(c) = container.as_object_mut() else {
                    continue;
                };
                let resources = c
                    .entry("resources")
                    .or_insert_with(|| Value::Object(Default::default()));
                let Some(resources) = resources.as_object_mut() else {
                    continue;
                };
                if resources.get("requests").is_none() {
                    let requests: serde_json::Map<String, Value> = config
                        .requests
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect();
                    resources.insert("requests".into(), Value::Object(requests));
                    changed.push("requests".to_owned());
                }
            }
        }
        if changed.is_empty() {
            return Ok(AdmissionResponse::allow());
        }
        changed.dedup();
        Ok(AdmissionResponse::patch_to(&pod)
            .warn(format!("kubewasm pod-defaults set: {}", changed.join(", "))))
    }
}

impl Plugin for PodDefaults {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        Manifest::new().query(Gvk::namespace()).admission(
            Admission::mutating(vec![AdmissionRule::on(Gvk::pod(), &[Operation::Create])])
                .ignore_failures(),
        )
    }

    fn handle(_event: Event<'_>) -> Result<(), HandleError> {
        Ok(())
    }

    fn admit(request: AdmissionRequest<'_>) -> AdmissionResponse {
        Self::review(&request).unwrap_or_else(|e| {
            AdmissionResponse::allow().warn(format!("kubewasm pod-defaults skipped: {e}"))
        })
    }
}

export_plugin!(PodDefaults);
