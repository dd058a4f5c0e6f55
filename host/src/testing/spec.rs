//! The test file `kubewasm test` reads: which plugin, under which configuration, and the
//! cluster states it goes through with what each one must produce.
//!
//! ```yaml
//! plugin: target/wasm32-wasip2/release/hello.wasm  # relative to this file; --plugin overrides
//! name: hello                    # its name (configuration entry); default: the file stem
//! host: kubewasm.yaml            # a host configuration file, or one written inline
//! config: {namespaces: [shop]}   # handed to init; overrides the host configuration's
//! cluster: cluster/              # manifests the first state starts from (optional)
//! retries: 0                     # attempts after a failure (default 0: give up at once)
//! state: {seen/shop/web: "1"}    # the plugin's state when it starts (it must declare state)
//! now: 2030-01-01T00:00:00Z      # the wall clock the plugin and host read at the start
//! steps:
//!   - name: a web pod appears    # the first step is the state the plugin starts on
//!     now: 2030-01-01T02:00:00Z  # the clock from this step on (before its changes)
//!     apply:                     # objects created or replaced whole
//!       - {apiVersion: v1, kind: Pod, metadata: {name: web, namespace: shop}}
//!     delete:                    # objects removed
//!       - {apiVersion: v1, kind: Pod, namespace: shop, name: old}
//!     tick: summary              # then run this schedule once (as if it were due)
//!     reconcile:                 # then reconcile these keys of its controller once
//!       - {apiVersion: demo.kubewasm.dev/v1, kind: App, namespace: shop, name: web}
//!     review:                    # then send this admission review to the plugin
//!       operation: CREATE        # CREATE, UPDATE, DELETE or CONNECT
//!       object: {apiVersion: v1, kind: Pod, metadata: {name: web, namespace: shop}}
//!       oldObject: {...}         # for UPDATE and DELETE
//!       dryRun: false
//!       user: alice              # the user who asks (default: tester)
//!     expect:                    # what is not named is not checked
//!       logs:                    # every line of this step, in any order
//!         - {message: web pod, level: info, fields: {pod: shop/web}}  # fields: a subset
//!       writes:                  # every write sent in this step, in any order
//!         - {action: apply, target: v1/Pod shop/web, body: {metadata: {labels: {team: a}}}}
//!         - {action: record-event, target: v1/Pod shop/web, reason: Crashing}
//!       givenUp: 0               # events given up (default 0: any is a failure)
//!       state: {seen/shop/web: "1"}  # the plugin's whole state after the step
//!       stateIncludes: {seen/shop/web: "1", gone: null}  # these keys (null: absent)
//!       objects:                 # objects the cluster holds after it: fields a subset
//!         - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: shop},
//!            spec: {replicas: 2}}
//!       absent:                  # objects gone after it (pruned, or deleted)
//!         - {apiVersion: v1, kind: Service, namespace: shop, name: old}
//!       admission:               # the answer to the step's review
//!         allowed: false
//!         message: not allowed   # a part of the refusal's message
//!         patch: [{op: add, path: /metadata/labels/team, value: a}]  # the whole JSON patch
//!         warnings: [careful]    # every warning, in order
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::config::HostConfig;
use crate::gvk::Gvk;
use crate::object::object_key;

/// Why a test file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The file cannot be read.
    #[error("{path}: {cause}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The reason (in the message, so not a `source`: printed once).
        cause: std::io::Error,
    },
    /// The file is not a valid test file; the message names the field.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    plugin: Option<PathBuf>,
    name: Option<String>,
    host: Option<Value>,
    config: Option<Value>,
    cluster: Option<PathBuf>,
    #[serde(default)]
    retries: u32,
    state: Option<BTreeMap<String, String>>,
    now: Option<String>,
    steps: Vec<StepFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    name: Option<String>,
    now: Option<String>,
    #[serde(default)]
    apply: Vec<Value>,
    #[serde(default)]
    delete: Vec<Reference>,
    tick: Option<String>,
    #[serde(default)]
    reconcile: Vec<Reference>,
    review: Option<Review>,
    #[serde(default)]
    expect: Expect,
}

/// An admission review a step sends.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Review {
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    /// The object as it would be.
    pub object: Option<Value>,
    /// The object as it was.
    pub old_object: Option<Value>,
    /// A dry run.
    #[serde(default)]
    pub dry_run: bool,
    /// The user who asks.
    pub user: Option<String>,
}

/// The expected answer to a step's review.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedAnswer {
    /// Whether the request may go on.
    pub allowed: bool,
    /// A part of the refusal's message.
    pub message: Option<String>,
    /// The whole JSON patch (absent: not checked; `[]`: none).
    pub patch: Option<Value>,
    /// Every warning, in order.
    pub warnings: Option<Vec<String>>,
}

/// An object named by type and key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Reference {
    /// `group/version`, or `v1`.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace; none for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl Reference {
    /// Its type.
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.api_version, &self.kind)
    }

    /// `apiVersion/Kind namespace/name`, as written in expectations and reports.
    pub fn display(&self) -> String {
        format!(
            "{} {}",
            self.gvk(),
            object_key(self.namespace.as_deref(), &self.name)
        )
    }

    /// The reference of a manifest, or what it lacks.
    pub fn of(object: &Value) -> Result<Self, String> {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
        let need = |pointer: &str| {
            text(pointer)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("no {}", &pointer[1..].replace('/', ".")))
        };
        Ok(Self {
            api_version: need("/apiVersion")?,
            kind: need("/kind")?,
            namespace: text("/metadata/namespace").map(str::to_owned),
            name: need("/metadata/name")?,
        })
    }
}

/// What one step must produce; `None` leaves that part unchecked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    /// Every log line of the step, in any order.
    pub logs: Option<Vec<LogLine>>,
    /// Every write sent during the step, in any order.
    pub writes: Option<Vec<ExpectedWrite>>,
    /// Events given up during the step.
    #[serde(default)]
    pub given_up: u64,
    /// The plugin's whole state after the step.
    pub state: Option<BTreeMap<String, String>>,
    /// Some keys of the plugin's state after the step: each with its value, or absent (null).
    pub state_includes: Option<BTreeMap<String, Option<String>>>,
    /// The answer to the step's review.
    pub admission: Option<ExpectedAnswer>,
    /// Objects the cluster holds after the step, each with at least the fields given.
    pub objects: Option<Vec<Value>>,
    /// Objects the cluster no longer holds after the step.
    pub absent: Option<Vec<Reference>>,
}

/// An expected log line: its message, and optionally its level and some of its fields.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogLine {
    /// The message, exactly.
    pub message: String,
    /// `trace`, `debug`, `info`, `warn` or `error`; any when absent.
    pub level: Option<String>,
    /// Fields the line must carry with these values (others are allowed).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

/// An expected write.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedWrite {
    /// `apply`, `merge-patch`, `json-patch`, `create`, `delete` or `record-event`.
    pub action: String,
    /// `apiVersion/Kind namespace/name` (`(status)` after it for a subresource); for
    /// `record-event` the object the Event is about.
    pub target: String,
    /// JSON the body must contain (objects: these keys, recursively; other values: equal).
    pub body: Option<Value>,
    /// For `record-event`: the reason.
    pub reason: Option<String>,
    /// For `record-event`: `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub event_type: Option<String>,
}

/// One cluster state and what reaching it must produce.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its name in reports (`step N` when the file gives none).
    pub name: String,
    /// The wall clock from this step on, set before its changes.
    pub now: Option<jiff::Timestamp>,
    /// Objects created or replaced whole.
    pub apply: Vec<(Reference, Value)>,
    /// Objects removed.
    pub delete: Vec<Reference>,
    /// A schedule to run once after the changes.
    pub tick: Option<String>,
    /// Keys of the plugin's controller to reconcile once after the changes (and the tick).
    pub reconcile: Vec<Reference>,
    /// An admission review to send after the changes.
    pub review: Option<Review>,
    /// What it must produce.
    pub expect: Expect,
}

/// A test file, read and checked.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The plugin component.
    pub plugin: PathBuf,
    /// The plugin's name.
    pub name: String,
    /// The host configuration, with the file's `config` applied to the plugin's entry.
    pub host: HostConfig,
    /// Folder of manifests the first state starts from.
    pub cluster: Option<PathBuf>,
    /// The plugin's state when it starts.
    pub state: Option<BTreeMap<String, String>>,
    /// The wall clock the plugin and the host read when the test starts.
    pub now: Option<jiff::Timestamp>,
    /// The states, in order.
    pub steps: Vec<Step>,
}

const LEVELS: [&str; 5] = ["trace", "debug", "info", "warn", "error"];
/// The write kinds a step may expect, as the contract names them.
const ACTIONS: [&str; 6] = crate::write::WRITE_VERBS;

impl Spec {
    /// Reads the test file at `path`; `plugin` replaces the file's `plugin`.
    pub fn load(path: &Path, plugin: Option<&Path>) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Unreadable {
            path: path.to_owned(),
            cause: source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, base, plugin).map_err(|message| SpecError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses a test file's text; relative paths in it are relative to `base`.
    pub fn parse(text: &str, base: &Path, plugin: Option<&Path>) -> Result<Self, String> {
        let file: SpecFile = crate::yaml::from_str_at(text, 1)?;
        let plugin = match (plugin, file.plugin) {
            (Some(p), _) => p.to_owned(),
            (None, Some(p)) => base.join(p),
            (None, None) => return Err("plugin: name the component (or pass --plugin)".into()),
        };
        let name = match file.name {
            Some(name) => name,
            None => plugin
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_owned)
                .ok_or_else(|| format!("plugin: {} has no file name", plugin.display()))?,
        };
        let mut host = match file.host {
            None => HostConfig::default(),
            Some(Value::String(p)) => HostConfig::load(&base.join(p)).map_err(|e| e.to_string())?,
            Some(inline @ Value::Object(_)) => {
                HostConfig::parse(&inline.to_string()).map_err(|e| format!("host: {e}"))?
            }
            Some(_) => return Err("host: a file name or a host configuration".into()),
        };
        let plugins = &mut host.plugins;
        let settings = plugins
            .named
            .entry(name.clone())
            .or_insert_with(|| plugins.defaults.clone());
        if let Some(config) = file.config {
            settings.config = config.to_string();
        }
        // A failing event is given up at its first failure (a typo would otherwise be retried
        // for retryForSeconds while the step waits), unless the file asks for retries.
        settings.delivery.max_attempts = file.retries.saturating_add(1);
        if file.steps.is_empty() {
            return Err("steps: give at least one (the state the plugin starts on)".into());
        }
        let steps = file
            .steps
            .into_iter()
            .enumerate()
            .map(|(i, step)| {
                let field = format!("steps[{i}]");
                let name = step.name.unwrap_or_else(|| format!("step {}", i + 1));
                check_expect(&step.expect).map_err(|e| format!("{field}.expect.{e}"))?;
                if let Some(review) = &step.review {
                    crate::wasm::admit::Operation::parse(&review.operation).ok_or_else(|| {
                        format!(
                            "{field}.review.operation: {:?} is none of CREATE, UPDATE, DELETE, CONNECT",
                            review.operation
                        )
                    })?;
                    if review.object.is_none() && review.old_object.is_none() {
                        return Err(format!("{field}.review: give object or oldObject"));
                    }
                }
                if step.expect.admission.is_some() && step.review.is_none() {
                    return Err(format!(
                        "{field}.expect.admission: the step sends no review"
                    ));
                }
                let apply = step
                    .apply
                    .into_iter()
                    .enumerate()
                    .map(|(j, object)| {
                        let reference = Reference::of(&object)
                            .map_err(|e| format!("{field}.apply[{j}]: {e}"))?;
                        Ok((reference, object))
                    })
                    .collect::<Result<_, String>>()?;
                let now = step
                    .now
                    .as_deref()
                    .map(timestamp)
                    .transpose()
                    .map_err(|e| format!("{field}.now: {e}"))?;
                Ok(Step {
                    name,
                    now,
                    apply,
                    delete: step.delete,
                    tick: step.tick,
                    reconcile: step.reconcile,
                    review: step.review,
                    expect: step.expect,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            plugin,
            name,
            host,
            cluster: file.cluster.map(|c| base.join(c)),
            state: file.state,
            now: file
                .now
                .as_deref()
                .map(timestamp)
                .transpose()
                .map_err(|e| format!("now: {e}"))?,
            steps,
        })
    }
}

/// A time written in a test file: RFC 3339, as Kubernetes writes timestamps.
fn timestamp(text: &str) -> Result<jiff::Timestamp, String> {
    text.parse()
        .map_err(|e| format!("{text:?} is not a time such as 2030-01-01T00:00:00Z ({e})"))
}

fn check_expect(expect: &Expect) -> Result<(), String> {
    for (i, line) in expect.logs.iter().flatten().enumerate() {
        if let Some(level) = &line.level
            && !LEVELS.contains(&level.as_str())
        {
            return Err(format!(
                "logs[{i}].level: {level:?} is not one of {}",
                LEVELS.join(", ")
            ));
        }
    }
    for (i, object) in expect.objects.iter().flatten().enumerate() {
        Reference::of(object).map_err(|e| format!("objects[{i}]: {e}"))?;
    }
    for (i, write) in expect.writes.iter().flatten().enumerate() {
        if !ACTIONS.contains(&write.action.as_str()) {
            return Err(format!(
                "writes[{i}].action: {:?} is not one of {}",
                write.action,
                ACTIONS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Spec, String> {
        Spec::parse(text, Path::new("/t"), None)
    }

    #[test]
    fn a_full_file_reads_with_paths_relative_to_it() {
        let spec = parse(
            "plugin: p/hello.wasm
config: {team: a}
cluster: c
steps:
  - apply: [{apiVersion: v1, kind: Pod, metadata: {name: web, namespace: shop}}]
    expect:
      logs: [{message: hi, level: info, fields: {pod: shop/web}}]
      writes: [{action: apply, target: v1/Pod shop/web, body: {a: 1}}]
  - name: gone
    delete: [{apiVersion: v1, kind: Pod, namespace: shop, name: web}]
    expect: {givenUp: 1}
",
        )
        .expect("valid");
        assert_eq!(spec.plugin, Path::new("/t/p/hello.wasm"));
        assert_eq!(spec.name, "hello");
        assert_eq!(spec.cluster.as_deref(), Some(Path::new("/t/c")));
        assert_eq!(spec.host.plugins.named["hello"].config, r#"{"team":"a"}"#);
        assert_eq!(spec.steps[0].name, "step 1");
        assert_eq!(spec.steps[0].apply[0].0.display(), "v1/Pod shop/web");
        assert_eq!(spec.steps[1].name, "gone");
        assert_eq!(spec.steps[1].delete[0].display(), "v1/Pod shop/web");
        assert_eq!(spec.steps[1].expect.given_up, 1);
    }

    #[test]
    fn a_controller_step_reads_its_keys_and_the_objects_it_expects() {
        let spec = parse(
            "plugin: c.wasm
steps:
  - reconcile: [{apiVersion: v1, kind: Namespace, name: team-a}]
    expect:
      objects: [{apiVersion: v1, kind: ResourceQuota, metadata: {name: q, namespace: team-a}}]
      absent: [{apiVersion: v1, kind: LimitRange, namespace: team-a, name: l}]
",
        )
        .expect("valid");
        let step = &spec.steps[0];
        assert_eq!(step.reconcile[0].display(), "v1/Namespace team-a");
        assert_eq!(step.expect.objects.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            step.expect.absent.as_ref().map(|a| a[0].display()),
            Some("v1/LimitRange team-a/l".to_owned())
        );
    }

    #[test]
    fn mistakes_name_their_field() {
        let cases = [
            ("steps: [{}]", "plugin:"),
            ("plugin: a.wasm\nsteps: []", "steps:"),
            (
                "plugin: a.wasm\nsteps: [{apply: [{kind: Pod}]}]",
                "steps[0].apply[0]: no apiVersion",
            ),
            (
                "plugin: a.wasm\nsteps: [{}, {expect: {logs: [{message: m, level: loud}]}}]",
                "steps[1].expect.logs[0].level",
            ),
            (
                "plugin: a.wasm\nsteps: [{expect: {writes: [{action: put, target: x}]}}]",
                "steps[0].expect.writes[0].action",
            ),
            ("plugin: a.wasm\nsteps: [{aply: []}]", "aply"),
            (
                "plugin: a.wasm\nsteps: [{expect: {objects: [{apiVersion: v1, kind: Pod}]}}]",
                "steps[0].expect.objects[0]: no metadata.name",
            ),
            (
                "plugin: a.wasm\nsteps: [{reconcile: [{apiVersion: v1, name: x}]}]",
                "kind",
            ),
            (
                "plugin: a.wasm\nnow: tomorrow\nsteps: [{}]",
                "now: \"tomorrow\" is not a time",
            ),
            (
                "plugin: a.wasm\nsteps: [{}, {now: 2030-13-01T00:00:00Z}]",
                "steps[1].now: ",
            ),
            (
                "plugin: a.wasm\nsteps: [{review: {operation: PATCH, object: {}}}]",
                "steps[0].review.operation",
            ),
            (
                "plugin: a.wasm\nsteps: [{expect: {admission: {allowed: true}}}]",
                "steps[0].expect.admission: the step sends no review",
            ),
            (
                "plugin: a.wasm\nhost: {plugins: {a: {limits: {deadlineMs: 0}}}}\nsteps: [{}]",
                "host: plugins.a.limits.deadlineMs",
            ),
        ];
        for (text, want) in cases {
            let error = parse(text).expect_err(text);
            assert!(error.contains(want), "{text}: {error}");
        }
    }
}
