//! Logs one line per event of the resource types it is configured for: an audit trail.
//!
//! Configuration: `{"resources": ["v1/ConfigMap", "example.com/v1/Backup"], "namespaces": ["a"],
//! "selector": "tier=web", "fields": ["/data"]}` (`apiVersion/Kind`, any type including custom
//! resources; namespaces, selector and fields optional: `fields` declares what it reads besides
//! metadata, so the host keeps only that; `"count": true` keeps in its state how many events
//! of each object it logged, and logs that number as `n`). Without configuration it audits
//! ConfigMaps.

use std::sync::OnceLock;

use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Plugin, Subscription, export_plugin, log, state,
};
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
    #[serde(default)]
    count: bool,
}

fn default_resources() -> Vec<String> {
    vec!["v1/ConfigMap".into()]
}

/// The parsed configuration: types, namespaces, selector, declared fields, whether it counts.
type Parsed = (Vec<Gvk>, Vec<String>, Option<String>, Vec<String>, bool);

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
        let _ = CONFIG.set((
            gvks,
            config.namespaces,
            config.selector,
            config.fields,
            config.count,
        ));
        Ok(())
    }

    fn describe() -> Manifest {
        let (gvks, namespaces, selector, fields, count) = CONFIG
            .get()
            .cloned()
            .unwrap_or_else(|| (vec![Gvk::config_map()], Vec::new(), None, Vec::new(), false));
        let namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
        let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
        let manifest = if count {
            Manifest::new().with_state()
        } else {
            Manifest::new()
        };
        gvks.into_iter().fold(manifest, |m, gvk| {
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
        // How many events of this object were logged, this one included (kept in state).
        let counted = match CONFIG.get() {
            Some((.., true)) => {
                let key = format!("n/{}", o.key());
                let n = state::get(&key)
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0)
                    + 1;
                state::set(&key, &n.to_string()).map_err(|e| HandleError::fatal(e.explain()))?;
                n.to_string()
            }
            _ => String::new(),
        };
        let (kind, key, rv) = (o.gvk().kind.clone(), o.key(), o.resource_version());
        let mut fields: Vec<(&str, &str)> = vec![
            ("kind", &kind),
            ("key", &key),
            ("rv", &rv),
            ("old-rv", &old_rv),
            ("flag", flag),
        ];
        if !counted.is_empty() {
            fields.push(("n", &counted));
        }
        log::info(what, &fields);
        Ok(())
    }
}

export_plugin!(AuditLog);
