//! The classic informer example: on Deployment, ReplicaSet, Pod and (pod) Event events, find the
//! Deployment's current ReplicaSet, that ReplicaSet's pods (through the owner index), and each
//! not-ready pod's latest Event (through an index on `involvedObject.uid`), then log one summary
//! line per Deployment when that summary changes. Everything comes from the host's cache; the
//! only instance memory is the last summary logged per Deployment, a disposable de-duplication
//! cache (a fresh instance logs each summary once more).
//!
//! Configuration (optional): `{"namespaces": ["shop"]}` limits it to those namespaces.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Object, Plugin, Subscription, cache, export_plugin, log,
};
use serde::Deserialize;

/// Index on core Events by the uid of the object they are about.
const INVOLVED_UID: &str = "involved-uid";
/// The annotation the deployment controller puts on a Deployment and its ReplicaSets.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// The operator's configuration.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    namespaces: Vec<String>,
}

static CONFIG: OnceLock<Config> = OnceLock::new();
/// Last summary logged per Deployment key.
static LOGGED: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Logs `fields` for `deployment` unless it is exactly what was logged last for it.
fn log_once(deployment: &str, message: &str, fields: &[(&str, &str)]) {
    let line = format!("{message} {fields:?}");
    let mut logged = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    if logged.get(deployment) != Some(&line) {
        log::info(message, fields);
        logged.insert(deployment.to_owned(), line);
    }
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KubeEvent {
    #[serde(default)]
    message: String,
    last_timestamp: Option<String>,
    event_time: Option<String>,
    #[serde(default)]
    metadata: EventMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct EventMeta {
    creation_timestamp: Option<String>,
}

impl KubeEvent {
    /// When it last happened (RFC 3339 strings compare in time order).
    fn when(&self) -> &str {
        self.last_timestamp
            .as_deref()
            .or(self.event_time.as_deref())
            .or(self.metadata.creation_timestamp.as_deref())
            .unwrap_or("")
    }
}

fn parse<T: for<'de> Deserialize<'de>>(o: &Object) -> Result<T, HandleError> {
    o.parse()
        .map_err(|e| HandleError::fatal(format!("{} {}: {e}", o.gvk().kind, o.key())))
}

/// The owner of `o` with this kind, preferring the controller.
fn owner_named(o: &Object, kind: &str) -> Option<String> {
    o.owner_references()
        .into_iter()
        .filter(|r| r.kind == kind)
        .max_by_key(|r| r.controller)
        .map(|r| r.name)
}

/// The Deployment an object that is not one belongs to: its owner, its owner's owner, or
/// (for an Event) that of the pod it is about.
fn deployment_of(o: &Object) -> Result<Option<Object>, HandleError> {
    let ns = o.namespace();
    let ns = ns.as_deref();
    let deployment_name = match o.gvk().kind.as_str() {
        "Event" => {
            if o.text("/involvedObject/kind")?.as_deref() != Some("Pod") {
                return Ok(None);
            }
            let name = o.text("/involvedObject/name")?.unwrap_or_default();
            return match cache::get(&Gvk::pod(), ns, &name)? {
                Some(pod) => deployment_of(&pod),
                None => Ok(None),
            };
        }
        "ReplicaSet" => owner_named(o, "Deployment"),
        "Pod" => {
            let Some(rs_name) = owner_named(o, "ReplicaSet") else {
                return Ok(None);
            };
            match cache::get(&Gvk::replica_set(), ns, &rs_name)? {
                Some(rs) => owner_named(&rs, "Deployment"),
                None => None,
            }
        }
        _ => None,
    };
    match deployment_name {
        Some(name) => Ok(cache::get(&Gvk::deployment(), ns, &name)?),
        None => Ok(None),
    }
}

/// True when the pod's `Ready` condition is `True`; reads only its conditions.
fn is_ready(pod: &Object) -> Result<bool, HandleError> {
    let conditions: Vec<Condition> = match pod.field("/status/conditions")? {
        Some(v) => v
            .parse()
            .map_err(|e| HandleError::fatal(format!("{}: conditions: {e}", pod.key())))?,
        None => Vec::new(),
    };
    Ok(conditions
        .iter()
        .any(|c| c.kind == "Ready" && c.status == "True"))
}

/// The newest Event about an object, by index, not by scanning.
fn latest_event(uid: &str) -> Result<Option<String>, HandleError> {
    let mut latest: Option<KubeEvent> = None;
    for e in cache::by_index(&Gvk::event(), INVOLVED_UID, uid)? {
        let e: KubeEvent = parse(&e)?;
        if latest.as_ref().is_none_or(|l| e.when() >= l.when()) {
            latest = Some(e);
        }
    }
    Ok(latest.map(|e| e.message))
}

fn summarize(deployment: &Object) -> Result<(), HandleError> {
    let key = deployment.key();
    let Some(revision) = deployment.annotation(REVISION) else {
        log_once(
            &key,
            "deployment has no revision yet",
            &[("deployment", &key)],
        );
        return Ok(());
    };
    // The current ReplicaSet: owned by this Deployment and at its revision.
    let mut current = None;
    for rs in cache::by_index(
        &Gvk::replica_set(),
        kubewasm_sdk::index::OWNER_UID,
        &deployment.uid(),
    )? {
        if rs.annotation(REVISION).as_deref() == Some(revision.as_str()) {
            current = Some(rs);
        }
    }
    let Some(rs) = current else {
        log_once(
            &key,
            "deployment summary",
            &[
                ("deployment", &key),
                ("revision", &revision),
                ("replicaset", "none"),
                ("ready", "0/0"),
            ],
        );
        return Ok(());
    };
    let pods = cache::by_index(&Gvk::pod(), kubewasm_sdk::index::OWNER_UID, &rs.uid())?;
    let mut ready = 0;
    let mut not_ready = Vec::new();
    for pod in &pods {
        if is_ready(pod)? {
            ready += 1;
        } else {
            let why = latest_event(&pod.uid())?.unwrap_or_else(|| "no events".into());
            not_ready.push(format!("{}: {why}", pod.name()));
        }
    }
    let counts = format!("{ready}/{}", pods.len());
    let not_ready = not_ready.join("; ");
    log_once(
        &key,
        "deployment summary",
        &[
            ("deployment", &key),
            ("revision", &revision),
            ("replicaset", &rs.name()),
            ("ready", &counts),
            ("not-ready", &not_ready),
        ],
    );
    Ok(())
}

struct DeploymentView;

impl Plugin for DeploymentView {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        // A second init on the same instance keeps the first configuration, which is the same.
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        let namespaces: Vec<&str> = CONFIG
            .get()
            .map(|c| c.namespaces.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let to = |gvk| Subscription::to(gvk).in_namespaces(&namespaces);
        Manifest::new()
            .subscribe(to(Gvk::deployment()))
            .subscribe(to(Gvk::replica_set()))
            .subscribe(to(Gvk::pod()))
            // A new Event can change a not-ready pod's latest message: refresh on Events too.
            .subscribe(to(Gvk::event()))
            .index(Gvk::event(), INVOLVED_UID, "/involvedObject/uid")
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let object = event.object();
        let is_deployment = object.gvk().kind == "Deployment";
        if let Event::Deleted(d) = &event
            && is_deployment
        {
            let key = d.object.key();
            LOGGED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            log::info("deployment deleted", &[("deployment", &key)]);
            return Ok(());
        }
        if is_deployment {
            return summarize(object);
        }
        match deployment_of(object)? {
            Some(deployment) => summarize(&deployment),
            None => Ok(()),
        }
    }
}

export_plugin!(DeploymentView);
