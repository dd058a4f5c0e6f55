//! The `KubewasmPlugin` custom resource: plugins declared in the cluster, followed live
//! through kubewasm's own informers, with their state written back as status conditions.
//!
//! A `KubewasmPlugin` (cluster-scoped, `kubewasm.dev/v1alpha1`) is named after its plugin; its
//! `spec` has the fields of a `plugins.NAME` entry of the configuration file (`source`,
//! `config`, `limits`, `grants`, `resyncSeconds`, `schedules`; a test holds the schema to them),
//! on top of the file's `defaults`, and `spec.source` is
//! required. Creating one pulls and loads the plugin; changing its spec applies the new
//! settings or source through the registry follower (prepare, then swap; a refused version
//! leaves the old one serving); deleting it unloads the plugin. A name the configuration file
//! already gives a plugin stays the file's.
//!
//! Status (`status.conditions`, `status.digest`, `status.observedGeneration`) is written by
//! the replica that delivers (the leader), through the status subresource, only when it
//! changes: `Ready` (a version is loaded) and `Degraded` (the spec is invalid, the newest
//! version was refused while an older one serves, or the handler keeps failing).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::HostConfig;
use crate::gvk::Gvk;
use crate::informer::factory::{InformerFactory, Lease};
use crate::informer::queue::{Delivery, queue};
use crate::informer::{Filter, Notification, Subscription};
use crate::plugins::registry::RegistryPlugins;
use crate::plugins::{FailedPlugin, PluginHost, PluginStatus};

pub use crate::gvk::plugin_resource::{GROUP, KIND, PLURAL, VERSION};
/// The CustomResourceDefinition, as installed (also in examples/deploy and the Helm chart).
pub const DEFINITION: &str = include_str!("../../examples/deploy/kubewasmplugin-crd.yaml");

/// How often status is compared with what was last written.
const STATUS_PERIOD: Duration = Duration::from_secs(1);
/// Longest one status write may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The custom resource's type.
pub fn gvk() -> Gvk {
    Gvk::new(GROUP, VERSION, KIND)
}

/// What was last made of one resource.
#[derive(Debug, Clone, Default)]
struct Tracked {
    /// `metadata.generation` of the spec acted on.
    generation: i64,
    /// Why that spec could not be used, if it could not.
    spec_error: Option<String>,
    /// The status last written, with its transition times (to write only changes).
    written: Option<Value>,
}

/// Follows `KubewasmPlugin` objects until dropped.
pub struct PluginResources {
    _subscription: Subscription,
    _lease: Lease,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for PluginResources {
    fn drop(&mut self) {
        if let Some(writer) = &self.writer {
            writer.abort();
        }
    }
}

impl PluginResources {
    /// Watches the custom resource through `factory` and applies each object to `host` and
    /// `registry`; with a `client`, writes their status. Call it inside a tokio runtime.
    pub fn start(
        factory: &Arc<InformerFactory>,
        host: Arc<PluginHost>,
        registry: Arc<RegistryPlugins>,
        config: HostConfig,
        client: Option<kube::Client>,
    ) -> std::io::Result<Self> {
        let lease = factory.acquire(&gvk(), &crate::source::Scope::everything());
        let (tx, rx) = queue(10_000, 64 << 20);
        let subscription = lease.informer().subscribe(Filter::default(), tx);
        let tracked: Arc<Mutex<BTreeMap<String, Tracked>>> = Arc::default();
        let controller = Controller {
            host: host.clone(),
            registry,
            config,
            tracked: tracked.clone(),
        };
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("kubewasm-plugins-crd".into())
            .spawn(move || {
                let _entered = runtime.enter();
                loop {
                    match rx.recv_timeout(Duration::from_secs(3600)) {
                        Ok(Delivery::Event(notification)) => controller.apply(&notification),
                        Ok(Delivery::InitialListSent | Delivery::Relisted) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(_) => return,
                    }
                }
            })?;
        let writer = client.map(|client| tokio::spawn(write_status(client, host, tracked)));
        Ok(Self {
            _subscription: subscription,
            _lease: lease,
            writer,
        })
    }
}

/// Applies notifications about the custom resource to the host.
struct Controller {
    host: Arc<PluginHost>,
    registry: Arc<RegistryPlugins>,
    config: HostConfig,
    tracked: Arc<Mutex<BTreeMap<String, Tracked>>>,
}

impl Controller {
    fn tracked(&self) -> MutexGuard<'_, BTreeMap<String, Tracked>> {
        self.tracked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn apply(&self, notification: &Notification) {
        let object = notification.object();
        let name = object.name().to_owned();
        if let Notification::Deleted { .. } = notification {
            if self.tracked().remove(&name).is_some() {
                self.registry.follow(&name, None);
                self.host.configure(&name, None);
                self.host.unload(&name);
                tracing::info!(plugin = %name, "KubewasmPlugin deleted: plugin unloaded");
            }
            return;
        }
        // Parsed once: the generation and the spec are both read from it.
        let value: Value = serde_json::from_str(&object.json()).unwrap_or(Value::Null);
        let generation = value
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let spec_error = match self.settings(&name, &value) {
            Ok(settings) => {
                // Status writes and resyncs come back as updates: act on real changes only.
                let current = self.host.settings();
                if current.named.get(&name) != Some(&settings) {
                    tracing::info!(plugin = %name, generation, "KubewasmPlugin applied");
                    self.host.configure(&name, Some(settings.clone()));
                    self.registry.follow(&name, settings.source);
                }
                None
            }
            Err(e) => {
                tracing::error!(plugin = %name, generation, "KubewasmPlugin refused: {e}");
                Some(e)
            }
        };
        let mut tracked = self.tracked();
        let entry = tracked.entry(name).or_default();
        entry.generation = generation;
        entry.spec_error = spec_error;
    }

    /// The settings the spec of `object` (plugin `name`) asks for.
    fn settings(
        &self,
        name: &str,
        object: &Value,
    ) -> Result<crate::plugins::PluginSettings, String> {
        if self.config.plugins.named.contains_key(name) {
            return Err(format!(
                "the configuration file already defines plugin {name} (plugins.{name}); it stays the file's"
            ));
        }
        let spec = object.get("spec").unwrap_or(&Value::Null);
        if spec.get("source").is_none() {
            return Err("spec.source: required (where to pull the plugin from)".into());
        }
        if spec.get("candidate").is_some() {
            return Err("spec.candidate: a KubewasmPlugin's candidate version is not built yet; run one as NAME.candidate.wasm in the plugins folder".into());
        }
        self.config.plugin_entry(spec, "spec")
    }
}

/// Writes each tracked resource's status when it changes, while this replica leads.
async fn write_status(
    client: kube::Client,
    host: Arc<PluginHost>,
    tracked: Arc<Mutex<BTreeMap<String, Tracked>>>,
) {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL);
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut ticker = tokio::time::interval(STATUS_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !host.leading() {
            continue;
        }
        let (running, failed) = (host.status(), host.failed());
        // What changed since it was last written, with its transition times.
        let pending: Vec<(String, Value)> = {
            let tracked = tracked.lock().unwrap_or_else(PoisonError::into_inner);
            tracked
                .iter()
                .filter_map(|(name, t)| {
                    let status = status(name, t, &running, &failed);
                    let same = t
                        .written
                        .as_ref()
                        .is_some_and(|w| without_times(w) == status);
                    (!same).then(|| (name.clone(), with_times(&status, t.written.as_ref())))
                })
                .collect()
        };
        for (name, status) in pending {
            let body = json!({ "status": status });
            let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
            match tokio::time::timeout(WRITE_TIMEOUT, api.patch_status(&name, &params, &patch))
                .await
            {
                Ok(Ok(_)) => {
                    let mut tracked = tracked.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(t) = tracked.get_mut(&name) {
                        t.written = Some(status);
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(plugin = %name, "cannot write the KubewasmPlugin status: {e}")
                }
                Err(_) => {
                    tracing::warn!(plugin = %name, "writing the KubewasmPlugin status took over {WRITE_TIMEOUT:?}")
                }
            }
        }
    }
}

/// The status of plugin `name` (without transition times, so that equal states compare
/// equal).
fn status(
    name: &str,
    tracked: &Tracked,
    running: &[PluginStatus],
    failed: &[FailedPlugin],
) -> Value {
    let loaded = running.iter().find(|p| p.name == name);
    let failure = failed.iter().find(|f| f.name == name);
    let condition = |kind: &str, ok: bool, reason: &str, message: String| {
        json!({
            "type": kind,
            "status": if ok { "True" } else { "False" },
            "reason": reason,
            "message": crate::text::cut(message, 1024),
            "observedGeneration": tracked.generation,
        })
    };
    let ready = match (loaded, &tracked.spec_error, failure) {
        (Some(p), _, _) => condition(
            "Ready",
            true,
            "Loaded",
            format!("serving {} ({})", p.path.display(), p.digest),
        ),
        (None, Some(e), _) => condition("Ready", false, "InvalidSpec", e.clone()),
        (None, None, Some(f)) => condition("Ready", false, "LoadFailed", f.error.clone()),
        (None, None, None) => condition("Ready", false, "Pulling", "not loaded yet".into()),
    };
    let degraded = match loaded {
        Some(_) if tracked.spec_error.is_some() => condition(
            "Degraded",
            true,
            "InvalidSpec",
            format!(
                "the running version keeps its settings: {}",
                tracked.spec_error.clone().unwrap_or_default()
            ),
        ),
        Some(p) if p.reload_error.is_some() => condition(
            "Degraded",
            true,
            "UpdateRefused",
            format!(
                "the running version keeps serving: {}",
                p.reload_error.clone().unwrap_or_default()
            ),
        ),
        Some(p) if p.finalizers_failing > 0 => condition(
            "Degraded",
            true,
            "FinalizersFailing",
            format!(
                "{} object(s) being deleted wait on its finalizer: finalize keeps failing ({}); \
                 `kubewasm finalizers release {name} --type {}` lets them go",
                p.finalizers_failing,
                p.last_error.clone().unwrap_or_default(),
                p.reconciles.clone().unwrap_or_default()
            ),
        ),
        Some(p) if p.degraded => condition(
            "Degraded",
            true,
            "HandlerFailing",
            p.last_error.clone().unwrap_or_default(),
        ),
        _ => condition("Degraded", false, "AsExpected", String::new()),
    };
    let digest = loaded
        .and_then(|p| p.path.to_str()?.rsplit_once('@').map(|(_, d)| d.to_owned()))
        .unwrap_or_default();
    let mut status = json!({
        "observedGeneration": tracked.generation,
        "digest": digest,
        "conditions": [ready, degraded],
    });
    if let Some(p) = loaded {
        status["mode"] = json!(p.mode);
    }
    // A summary; the reports themselves are in /status.
    if let Some(t) = loaded.and_then(|p| p.trial.as_ref()) {
        let refused: u64 = t
            .writes
            .values()
            .flat_map(|by| by.iter().filter(|(o, _)| *o != "accepted").map(|(_, n)| n))
            .sum();
        status["trial"] = json!({
            "dryRunWrites": t.writes_total(),
            "dryRunWritesRefused": refused,
            "monitoredReviews": t.reviews.values().flat_map(|d| d.values()).sum::<u64>(),
            "monitoredDenied": t.reviews_decided("denied"),
            "monitoredPatched": t.reviews_decided("patched"),
            "lastWrite": t.last_writes.last().map(|w| format!("{} {}: {}", w.verb, w.target, w.outcome)),
        });
    }
    status
}

/// `status` as written, less the transition times.
fn without_times(status: &Value) -> Value {
    let mut status = status.clone();
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions {
            if let Some(fields) = condition.as_object_mut() {
                fields.remove("lastTransitionTime");
            }
        }
    }
    status
}

/// `status` with each condition's `lastTransitionTime`: kept from `before` when the
/// condition's status did not change, now otherwise.
fn with_times(status: &Value, before: Option<&Value>) -> Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut status = status.clone();
    let previous = |kind: &str| {
        before
            .as_ref()?
            .get("conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
    };
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions {
            let kind = condition["type"].as_str().unwrap_or_default().to_owned();
            let time = match previous(&kind) {
                Some(old) if old["status"] == condition["status"] => old
                    .get("lastTransitionTime")
                    .cloned()
                    .unwrap_or_else(|| Value::String(now.clone())),
                _ => Value::String(now.clone()),
            };
            condition["lastTransitionTime"] = time;
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controller_whose_finalize_fails_is_degraded_and_says_how_to_release() {
        let tracked = Tracked {
            generation: 3,
            spec_error: None,
            written: None,
        };
        let mut running = PluginStatus {
            name: "provisioner".into(),
            reconciles: Some("v1/Namespace".into()),
            last_error: Some("bucket service unavailable".into()),
            ..PluginStatus::default()
        };
        let degraded = |running: &PluginStatus| {
            status("provisioner", &tracked, std::slice::from_ref(running), &[])["conditions"][1]
                .clone()
        };
        assert_eq!(degraded(&running)["status"], "False");
        running.finalizers_failing = 2;
        let condition = degraded(&running);
        assert_eq!(condition["status"], "True");
        assert_eq!(condition["reason"], "FinalizersFailing");
        let message = condition["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("2 object(s) being deleted wait on its finalizer")
                && message.contains("bucket service unavailable")
                && message.contains("kubewasm finalizers release provisioner --type v1/Namespace"),
            "{message}"
        );
    }

    #[test]
    fn the_plugin_resources_schema_has_every_field_of_a_plugin_entry() {
        // The API server prunes what a CRD's schema does not name: a field missing there
        // would be dropped from a KubewasmPlugin without a word.
        let crd: serde_json::Value = serde_yaml_ng::from_str(DEFINITION).expect("the CRD is YAML");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        let at = |path: &[&str]| {
            let mut node = spec;
            for step in path {
                node = if *step == "*" {
                    &node["additionalProperties"]
                } else if *step == "[]" {
                    &node["items"]
                } else {
                    &node["properties"][*step]
                };
            }
            node["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        for (probe, path) in [
            ("plugins: {a: {zzz: 1}}", &[][..]),
            ("plugins: {a: {limits: {zzz: 1}}}", &["limits"][..]),
            ("plugins: {a: {grants: {zzz: 1}}}", &["grants"][..]),
            (
                "plugins: {a: {grants: {writes: [{zzz: 1}]}}}",
                &["grants", "writes", "[]"][..],
            ),
            (
                "plugins: {a: {source: {oci: h/a, zzz: 1}}}",
                &["source"][..],
            ),
            (
                "plugins: {a: {schedules: {s: {cron: '@hourly', zzz: 1}}}}",
                &["schedules", "*"][..],
            ),
        ] {
            let named = at(path);
            // Refused in a KubewasmPlugin, with an error saying so: its candidate version
            // is a file of the plugins folder.
            let refused = ["candidate"];
            for field in crate::config::tests::accepted(probe)
                .into_iter()
                .filter(|f| !refused.contains(&f.as_str()))
            {
                assert!(
                    named.contains(&field),
                    "examples/deploy/kubewasmplugin-crd.yaml: spec.{} lacks {field} (has {named:?})",
                    path.join(".")
                );
            }
        }
    }
}
