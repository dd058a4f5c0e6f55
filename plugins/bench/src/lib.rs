//! The benchmarks' plugin: subscribes to Pods and does as little or as much as it is told.
//!
//! Configuration: `{"work": "noop" | "parse" | "get" | "select" | "index" | "field" |
//! "state-get" | "state-set" | "admit", "arg": "...", "changes": ["/spec"]}`.
//! - `noop`: returns at once (the cost of a delivery itself);
//! - `parse`: parses the pod into a typed `k8s_openapi` Pod and reads its phase;
//! - `get`: one `get` of the pod `arg` (`namespace/name`);
//! - `select`: one list of all pods by the label selector `arg`;
//! - `index`: one `by-index` query on the built-in `label` index for `arg` (`key=value`);
//! - `field`: reads the field at the JSON pointer `arg` through the object's handle;
//! - `state-get`, `state-set`: reads the state entry `arg`, or sets it to `"1"` (the plugin
//!   declares state);
//! - `admit`: also declares a validating webhook on Pods that allows every request;
//! - `metric`: adds one to its counter `events`, on the series `slot` of the call's number
//!   modulo `arg` (default 1), so `arg` calls make `arg` series.
//! - `reconcile`: instead of subscribing, declares a controller of ConfigMaps that owns
//!   Services, with the host's finalizer when `finalizer` is true; each `reconcile` (and
//!   `finalize`) busies itself for `arg` microseconds (default 0: returns at once).
//!
//! `changes` subscribes with a change filter on those pointers.
//!
//! Results go nowhere: it logs nothing, so logging is not what is measured.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant};

use kubewasm_sdk::k8s::api::core::v1::Pod;
use kubewasm_sdk::{
    Admission, AdmissionRequest, AdmissionResponse, AdmissionRule, Controller, Event, Gvk,
    HandleError, Manifest, Metric, ObjectKey, Operation, Plugin, Subscription, cache,
    export_plugin, metrics, state,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    work: String,
    #[serde(default)]
    arg: String,
    #[serde(default)]
    changes: Vec<String>,
    #[serde(default)]
    finalizer: bool,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
/// Built once, like the type constants of the Python and JavaScript plugins: a `Gvk` holds
/// its strings, and building one per call would be timed as part of the query.
static POD: LazyLock<Gvk> = LazyLock::new(Gvk::pod);
/// The `slot` label values of `metric`, made once so the update is what is timed.
static SLOTS: OnceLock<Vec<String>> = OnceLock::new();
/// How long each `reconcile` spends.
static BUSY: OnceLock<Duration> = OnceLock::new();
/// Calls of `metric` so far.
static CALLS: AtomicUsize = AtomicUsize::new(0);

struct Bench;

impl Plugin for Bench {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        match config.work.as_str() {
            "noop" | "parse" | "get" | "select" | "index" | "field" | "state-get" | "state-set"
            | "admit" => {}
            "reconcile" => {
                let _ = BUSY.set(Duration::from_micros(number(&config.arg, 0)?));
            }
            "metric" => {
                let series: usize = number(&config.arg, 1)?;
                let _ = SLOTS.set((0..series.max(1)).map(|i| i.to_string()).collect());
            }
            other => return Err(format!("unknown work {other:?}")),
        }
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        let Some(config) = CONFIG.get() else {
            return Manifest::new();
        };
        if config.work == "reconcile" {
            let mut controller = Controller::of(Gvk::config_map()).owns(Gvk::service());
            if config.finalizer {
                controller = controller.with_finalizer();
            }
            return Manifest::new().controller(controller);
        }
        let changes: Vec<&str> = config.changes.iter().map(String::as_str).collect();
        let mut subscription = Subscription::to(Gvk::pod());
        if !changes.is_empty() {
            subscription = subscription.on_changes(&changes);
        }
        let manifest = Manifest::new().subscribe(subscription).query(Gvk::pod());
        match config.work.as_str() {
            "state-get" | "state-set" => manifest.with_state(),
            "metric" => manifest.metric(Metric::counter(
                "events",
                "Calls of the bench plugin",
                &["slot"],
            )),
            "admit" => manifest.admission(Admission::validating(vec![AdmissionRule::on(
                Gvk::pod(),
                &[Operation::Create],
            )])),
            _ => manifest,
        }
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
            "state-get" => {
                std::hint::black_box(state::get(&config.arg));
            }
            "metric" => {
                let slots = SLOTS.get().map(Vec::as_slice).unwrap_or_default();
                if let Some(slot) =
                    slots.get(CALLS.fetch_add(1, Ordering::Relaxed) % slots.len().max(1))
                {
                    metrics::inc("events", &[slot]).map_err(|e| HandleError::fatal(e.explain()))?;
                }
            }
            "state-set" => {
                state::set(&config.arg, "1").map_err(|e| HandleError::fatal(e.explain()))?;
            }
            _ => {}
        }
        Ok(())
    }

    fn admit(_request: AdmissionRequest<'_>) -> AdmissionResponse {
        AdmissionResponse::allow()
    }

    fn reconcile(key: ObjectKey) -> Result<(), HandleError> {
        busy();
        std::hint::black_box(key);
        Ok(())
    }

    fn finalize(key: ObjectKey) -> Result<(), HandleError> {
        busy();
        std::hint::black_box(key);
        Ok(())
    }
}

/// The number `arg` holds, `default` when it is empty.
fn number<T: std::str::FromStr>(arg: &str, default: T) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    if arg.is_empty() {
        return Ok(default);
    }
    arg.parse().map_err(|e| format!("arg {arg:?}: {e}"))
}

/// Spends `reconcile`'s time on the CPU, by the clock.
fn busy() {
    let busy = BUSY.get().copied().unwrap_or_default();
    if busy.is_zero() {
        return;
    }
    let until = Instant::now() + busy;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

export_plugin!(Bench);
