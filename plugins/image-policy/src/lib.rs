//! A validating admission policy that reads the cache: a Pod or Deployment is admitted only
//! when every container image starts with a prefix of an allow list kept in a ConfigMap.
//!
//! Configuration: `{"allowList": "kubewasm/image-allow-list"}` (the default), the
//! `namespace/name` of a ConfigMap whose `prefixes` key lists allowed prefixes, one per line
//! or comma-separated (`registry.example.com/`, `docker.io/library/nginx:`). Editing the
//! ConfigMap changes the answers at once: the list is read from the host's cache on every
//! review, not copied at start. Without the ConfigMap every image is refused, with a message
//! saying so.

use std::sync::OnceLock;

use kubewasm_sdk::{
    Admission, AdmissionRequest, AdmissionResponse, AdmissionRule, Event, Gvk, HandleError,
    Manifest, Operation, Plugin, cache, export_plugin,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_allow_list")]
    allow_list: String,
}

fn default_allow_list() -> String {
    "kubewasm/image-allow-list".into()
}

static CONFIG: OnceLock<(String, String)> = OnceLock::new();

/// Where the containers of a reviewed object are.
fn containers_of(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["/spec/containers", "/spec/initContainers"],
        _ => &[
            "/spec/template/spec/containers",
            "/spec/template/spec/initContainers",
        ],
    }
}

#[derive(Deserialize)]
struct Container {
    name: String,
    #[serde(default)]
    image: String,
}

struct ImagePolicy;

impl ImagePolicy {
    fn review(request: &AdmissionRequest<'_>) -> Result<AdmissionResponse, String> {
        let Some(object) = &request.object else {
            return Ok(AdmissionResponse::allow());
        };
        let (namespace, name) = CONFIG.get().ok_or("not initialised")?;
        let list =
            cache::get(&Gvk::config_map(), Some(namespace), name).map_err(|e| e.explain())?;
        let Some(list) = list else {
            return Ok(AdmissionResponse::deny(format!(
                "no image allow list: ConfigMap {namespace}/{name} does not exist"
            )));
        };
        let prefixes: Vec<String> = list
            .text("/data/prefixes")
            .map_err(|e| e.explain())?
            .unwrap_or_default()
            .split([',', '\n'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        for pointer in containers_of(&request.gvk.kind) {
            let Some(value) = object.field(pointer).map_err(|e| e.explain())? else {
                continue;
            };
            let containers: Vec<Container> =
                value.parse().map_err(|e| format!("{pointer}: {e}"))?;
            for c in containers {
                if !prefixes.iter().any(|p| c.image.starts_with(p.as_str())) {
                    return Ok(AdmissionResponse::deny(format!(
                        "container {} uses image {:?}, which is not in the allow list {namespace}/{name} ({})",
                        c.name,
                        c.image,
                        if prefixes.is_empty() {
                            "empty".to_owned()
                        } else {
                            prefixes.join(", ")
                        }
                    )));
                }
            }
        }
        Ok(AdmissionResponse::allow())
    }
}

impl Plugin for ImagePolicy {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        let (ns, name) = config
            .allow_list
            .split_once('/')
            .ok_or_else(|| format!("allowList {:?} is not namespace/name", config.allow_list))?;
        let _ = CONFIG.set((ns.to_owned(), name.to_owned()));
        Ok(())
    }

    fn describe() -> Manifest {
        let writes = [Operation::Create, Operation::Update];
        Manifest::new()
            .query(Gvk::config_map())
            .admission(Admission::validating(vec![
                AdmissionRule::on(Gvk::pod(), &writes),
                AdmissionRule::on(Gvk::deployment(), &writes),
            ]))
    }

    fn handle(_event: Event<'_>) -> Result<(), HandleError> {
        Ok(())
    }

    fn admit(request: AdmissionRequest<'_>) -> AdmissionResponse {
        // A review that cannot be made (the cache refuses, the object is malformed) is
        // refused with the reason, rather than let through.
        Self::review(&request)
            .unwrap_or_else(|e| AdmissionResponse::deny(format!("cannot review: {e}")))
    }
}

export_plugin!(ImagePolicy);
