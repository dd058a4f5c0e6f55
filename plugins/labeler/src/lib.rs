//! Adds a label to every pod that lacks it, by server-side apply with the field manager
//! `kubewasm/labeler`. Configuration: `{"key": "team", "value": "unassigned", "namespaces": []}`
//! (the defaults; no namespaces: every namespace).
//!
//! The write is staged during `handle` and sent only when it returns Ok, so a retried event
//! applies the label once. The pod's next update carries the label, and the plugin leaves it.

use std::sync::OnceLock;

use kubewasm_sdk::cluster::{self, Target};
use kubewasm_sdk::{Event, Gvk, HandleError, Manifest, Plugin, Subscription, export_plugin, log};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default = "default_key")]
    key: String,
    #[serde(default = "default_value")]
    value: String,
    #[serde(default)]
    namespaces: Vec<String>,
}

fn default_key() -> String {
    "team".into()
}

fn default_value() -> String {
    "unassigned".into()
}

static CONFIG: OnceLock<Config> = OnceLock::new();

struct Labeler;

impl Plugin for Labeler {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        let namespaces: Vec<&str> = CONFIG
            .get()
            .map(|c| c.namespaces.iter().map(String::as_str).collect())
            .unwrap_or_default();
        Manifest::new().subscribe(Subscription::to(Gvk::pod()).in_namespaces(&namespaces))
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let (Event::Added(_) | Event::Updated(_) | Event::Sync(_)) = &event else {
            return Ok(());
        };
        let Some(config) = CONFIG.get() else {
            return Err(HandleError::fatal("not initialised"));
        };
        let pod = event.object();
        if pod.label(&config.key).is_some() {
            return Ok(());
        }
        // Only the fields this plugin owns: apiVersion, kind and name are filled in by the host.
        let body = serde_json::json!({"metadata": {"labels": {&config.key: &config.value}}});
        cluster::apply(&Target::of(pod), &body.to_string())?;
        let key = pod.key();
        log::info(
            "labeling pod",
            &[
                ("pod", &key),
                ("label", &format!("{}={}", config.key, config.value)),
            ],
        );
        Ok(())
    }
}

export_plugin!(Labeler);
