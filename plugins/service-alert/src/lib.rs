//! Warns when a Service loses its last ready pod, and says when it has one again: once per
//! transition, however many pod updates, instance recycles, hot swaps or leader changes
//! come between.
//!
//! The transition is an edge: "no ready pod now" is not enough (every pod update that leaves
//! the Service empty would look like the one that emptied it), so the plugin remembers which
//! Services it alerted on in its `state`, kept by the host across instances, versions and
//! replicas. Each alert is a log line and an Event on the Service (`NoReadyPods`, then
//! `ReadyPodsBack`); its grant needs `events.k8s.io/v1/Event` with create and patch.

use kubewasm_sdk::cluster::{self, EventType};
use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Object, Plugin, Subscription, cache, export_plugin, log,
    state,
};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
}

/// The state key of a Service alerted on.
fn alerted(service: &Object) -> String {
    format!("empty/{}", service.key())
}

/// True when `pod` is Ready and not being deleted.
fn ready(pod: &Object) -> Result<bool, HandleError> {
    if pod.field("/metadata/deletionTimestamp")?.is_some() {
        return Ok(false);
    }
    let Some(conditions) = pod.field("/status/conditions")? else {
        return Ok(false);
    };
    let conditions: Vec<Condition> = conditions
        .parse()
        .map_err(|e| HandleError::fatal(format!("{}: status.conditions: {e}", pod.key())))?;
    Ok(conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True"))
}

/// Alerts or clears `service` when its state of readiness changed since the last alert.
fn check(service: &Object) -> Result<(), HandleError> {
    let Some(selector) = service.field("/spec/selector")? else {
        return Ok(()); // Endpoints managed by hand: nothing to count.
    };
    let selector: BTreeMap<String, String> = selector.parse().unwrap_or_default();
    if selector.is_empty() {
        return Ok(());
    }
    let selector: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let pods = cache::list(
        &Gvk::pod(),
        service.namespace().as_deref(),
        Some(&selector.join(",")),
    )?;
    let mut ready_pods = 0;
    for pod in &pods {
        if ready(pod)? {
            ready_pods += 1;
        }
    }
    let key = alerted(service);
    let was_empty = state::get(&key).is_some();
    let service_key = service.key();
    if ready_pods == 0 && !was_empty {
        let note = format!("no ready pod among the {} it selects", pods.len());
        cluster::record_event(service, EventType::Warning, "NoReadyPods", &note)?;
        log::warn(
            "service has no ready pods",
            &[("service", &service_key), ("pods", &pods.len().to_string())],
        );
        state::set(&key, "1").map_err(|e| HandleError::fatal(e.explain()))?;
    } else if ready_pods > 0 && was_empty {
        let note = format!("{ready_pods} ready pods again");
        cluster::record_event(service, EventType::Normal, "ReadyPodsBack", &note)?;
        log::info(
            "service has ready pods again",
            &[
                ("service", &service_key),
                ("ready", &ready_pods.to_string()),
            ],
        );
        state::remove(&key).map_err(|e| HandleError::fatal(e.explain()))?;
    }
    Ok(())
}

struct ServiceAlert;

impl Plugin for ServiceAlert {
    fn describe() -> Manifest {
        Manifest::new()
            .subscribe(Subscription::to(Gvk::service()))
            // Readiness, membership and deletion: other pod updates cost nothing.
            .subscribe(Subscription::to(Gvk::pod()).on_changes(&[
                "/status/conditions",
                "/metadata/labels",
                "/metadata/deletionTimestamp",
            ]))
            .with_state()
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let object = event.object();
        if object.gvk().kind == "Service" {
            if let Event::Deleted(_) = event {
                return state::remove(&alerted(object))
                    .map_err(|e| HandleError::fatal(e.explain()));
            }
            return check(object);
        }
        // A pod changed: every Service of its namespace that selects it, or did.
        let namespace = object.namespace();
        for service in cache::list(&Gvk::service(), namespace.as_deref(), None)? {
            check(&service)?;
        }
        Ok(())
    }

    fn synced() -> Result<(), HandleError> {
        for service in cache::list(&Gvk::service(), None, None)? {
            check(&service)?;
        }
        Ok(())
    }
}

export_plugin!(ServiceAlert);
