//! Logs one line per event of the resource types it is configured for: an audit trail.
//!
//! Configuration: `{"resources": ["v1/ConfigMap", "example.com/v1/Backup"], "namespaces": ["a"],
//! "selector": "tier=web", "fields": ["/data"]}` (`apiVersion/Kind`, any type including custom
//! resources; namespaces, selector and fields optional: `fields` declares what it reads besides
//! metadata, so the host keeps only that). Without configuration it audits ConfigMaps.

use std::sync::OnceLock;

use kubewasm_sdk::{Event, Gvk, HandleError, Manifest, Plugin, Subscription, export_plugin, log};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_resources")]
    resources: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    selector: Option<String>,
    #[serde(default)]
    fields: Vec<String>,
}

fn default_resources() -> Vec<String> {
    vec!["v1/ConfigMap".into()]
}

/// The parsed configuration: types, namespaces, selector, declared fields.
type Parsed = (Vec<Gvk>, Vec<String>, Option<String>, Vec<String>);

static CONFIG: OnceLock<Parsed> = OnceLock::new();

/// `group/version/Kind` or `version/Kind` to a resource type.
fn parse_gvk(text: &str) -> Result<Gvk, String> {
    let parts: Vec<&str> = text.split('/').collect();
    match parts.as_slice() {
        [version, kind] => Ok(Gvk::new("", version, kind)),
        [group, version, kind] => Ok(Gvk::new(group, version, kind)),
        _ => Err(format!("resource {text:?} is not apiVersion/Kind")),
    }
}

struct AuditLog;

impl Plugin for AuditLog {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        let gvks = config
            .resources
            .iter()
            .map(|r| parse_gvk(r))
            .collect::<Result<Vec<_>, _>>()?;
        let _ = CONFIG.set((gvks, config.namespaces, config.selector, config.fields));
        Ok(())
    }

    fn describe() -> Manifest {
        let (gvks, namespaces, selector, fields) = CONFIG
            .get()
            .cloned()
            .unwrap_or_else(|| (vec![Gvk::config_map()], Vec::new(), None, Vec::new()));
        let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
        let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
        gvks.into_iter().fold(Manifest::new(), |m, gvk| {
            let subscription = Subscription::to(gvk)
                .in_namespaces(&namespaces)
                .fields(&fields);
            m.subscribe(match &selector {
                Some(s) => subscription.selector(s),
                None => subscription,
            })
        })
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let (what, flag) = match &event {
            Event::Added(a) => ("added", if a.initial { "initial" } else { "" }),
            Event::Updated(_) => ("updated", ""),
            Event::Deleted(d) => ("deleted", if d.stale { "stale" } else { "" }),
            Event::Sync(_) => ("sync", ""),
            Event::Requeue(_) => ("requeue", ""),
        };
        let o = event.object();
        let old_rv = event
            .old()
            .map(|o| o.resource_version())
            .unwrap_or_default();
        log::info(
            what,
            &[
                ("kind", &o.gvk().kind),
                ("key", &o.key()),
                ("rv", &o.resource_version()),
                ("old-rv", &old_rv),
                ("flag", flag),
            ],
        );
        Ok(())
    }
}

export_plugin!(AuditLog);
