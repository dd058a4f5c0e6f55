//! The benchmarks' plugin: subscribes to Pods and does as little or as much as it is told.
//!
//! Configuration: `{"work": "noop" | "parse" | "get" | "select" | "index" | "field", "arg": "..."}`.
//! - `noop`: returns at once (the cost of a delivery itself);
//! - `parse`: parses the pod into a typed `k8s_openapi` Pod and reads its phase;
//! - `get`: one `get` of the pod `arg` (`namespace/name`);
//! - `select`: one list of all pods by the label selector `arg`;
//! - `index`: one `by-index` query on the built-in `label` index for `arg` (`key=value`);
//! - `field`: reads the field at the JSON pointer `arg` through the object's handle.
//!
//! Results go nowhere: it logs nothing, so logging is not what is measured.

use std::sync::{LazyLock, OnceLock};

use kubewasm_sdk::k8s::api::core::v1::Pod;
use kubewasm_sdk::{Event, Gvk, HandleError, Manifest, Plugin, Subscription, cache, export_plugin};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    work: String,
    #[serde(default)]
    arg: String,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
/// Built once, like the type constants of the Python and JavaScript plugins: a `Gvk` holds
/// its strings, and building one per call would be timed as part of the query.
static POD: LazyLock<Gvk> = LazyLock::new(Gvk::pod);

struct Bench;

impl Plugin for Bench {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        match config.work.as_str() {
            "noop" | "parse" | "get" | "select" | "index" | "field" => {}
            other => return Err(format!("unknown work {other:?}")),
        }
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        Manifest::new()
            .subscribe(Subscription::to(Gvk::pod()))
            .query(Gvk::pod())
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let o = event.object();
        let failed = |e: kubewasm_sdk::QueryError| HandleError::fatal(e.explain());
        let Some(config) = CONFIG.get() else {
            return Err(HandleError::fatal("not initialised"));
        };
        match config.work.as_str() {
            "parse" => {
                let pod: Pod = o.parse().map_err(HandleError::fatal)?;
                std::hint::black_box(pod.status.and_then(|s| s.phase));
            }
            "get" => {
                let (namespace, name) = config.arg.split_once('/').unwrap_or(("", &config.arg));
                let found = cache::get(&POD, Some(namespace), name).map_err(failed)?;
                std::hint::black_box(found);
            }
            "select" => {
                let found = cache::list(&POD, None, Some(&config.arg)).map_err(failed)?;
                std::hint::black_box(found);
            }
            "index" => {
                let found = cache::by_index(&POD, kubewasm_sdk::index::LABEL, &config.arg)
                    .map_err(failed)?;
                std::hint::black_box(found);
            }
            "field" => {
                std::hint::black_box(o.field(&config.arg).map_err(failed)?);
            }
            _ => {}
        }
        Ok(())
    }
}

export_plugin!(Bench);
