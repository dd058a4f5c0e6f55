//! The host side of the `cluster` import: writes checked (grant, leadership, size, JSON) and
//! staged during `handle`. The plugins layer sends them once the call returned Ok; a failed
//! or trapped attempt sends nothing (docs/ARCHITECTURE.md, "Writes").

use serde_json::{Map, Value};
use wasmtime::component::Resource;

use crate::gvk::Gvk;
use crate::object::names;
use crate::wasm::bindings::kubewasm::plugin::cluster::{
    DeleteOptions, EventType, Host, Propagation as WitPropagation, Target as WitTarget, WriteError,
    WriteFailure,
};
use crate::wasm::bindings::kubewasm::plugin::types::{Gvk as WitGvk, Object};
use crate::wasm::{HostState, convert, limits};
use crate::write::{self, Action, Regarding, Target, Verb, Write};

pub use crate::wasm::limits::MAX_WRITE_BYTES;
/// Most writes one `handle` call may stage.
pub const MAX_WRITES_PER_CALL: usize = 64;
/// Most bytes the writes of one `handle` call may carry together.
pub const MAX_STAGED_BYTES: usize = 4 << 20;
/// Longest Event reason (the API server's limit).
pub const MAX_REASON_BYTES: usize = 128;
/// Longest Event note (the API server's limit for events.k8s.io/v1).
pub const MAX_NOTE_BYTES: usize = 1024;
/// Longest object name (a DNS subdomain).
const MAX_NAME_BYTES: usize = 253;

/// The writes one `handle` call staged, and what was refused.
#[derive(Default)]
pub struct Staging {
    /// True only during `handle`: writes outside it (in `init`) are refused.
    open: bool,
    staged: Vec<Write>,
    bytes: usize,
    denied: u64,
    /// Why the previous attempt's writes failed, for `previous-failures`.
    previous: Vec<WriteFailure>,
}

/// What one `handle` call left to send.
#[derive(Debug, Default)]
pub struct Staged {
    /// The writes, in the order they were staged.
    pub writes: Vec<Write>,
    /// Writes refused because they were not granted.
    pub denied: u64,
}

/// A refusal the API server gave an earlier attempt, as the plugin sees it.
pub fn failure(write: &Write, refusal: &write::Refusal) -> WriteFailure {
    let t = &write.target;
    WriteFailure {
        target: WitTarget {
            gvk: WitGvk {
                group: t.gvk.group.clone(),
                version: t.gvk.version.clone(),
                kind: t.gvk.kind.clone(),
            },
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            subresource: t.subresource.clone(),
        },
        verb: write.verb().to_owned(),
        reason: refusal.reason.clone(),
        message: refusal.message.clone(),
    }
}

impl Staging {
    /// Opens staging for one `handle` call, with the previous attempt's failures.
    pub fn open(&mut self, previous: Vec<WriteFailure>) {
        *self = Self {
            open: true,
            previous,
            ..Self::default()
        };
    }

    /// Closes staging and hands over what was staged.
    pub fn close(&mut self) -> Staged {
        let staged = Staged {
            writes: std::mem::take(&mut self.staged),
            denied: self.denied,
        };
        *self = Self::default();
        staged
    }
}

fn invalid(what: impl Into<String>) -> WriteError {
    WriteError::InvalidArgument(what.into())
}

/// A name or namespace from a plugin, bounded and non-empty.
fn name(what: &str, value: &str) -> Result<(), WriteError> {
    if value.is_empty() {
        return Err(invalid(format!("{what} is empty")));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(invalid(format!(
            "{what} of {} bytes: at most {MAX_NAME_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

// An object's name and namespace become segments of the write's URL: one that is not a single
// segment would aim the write at an object the grants were not checked for.

/// An object name from a plugin: bounded, and one URL segment as the API server requires.
fn object_name(what: &str, value: &str) -> Result<(), WriteError> {
    name(what, value)?;
    match names::name_problem(value) {
        Some(problem) => Err(invalid(format!("{what} {problem}"))),
        None => Ok(()),
    }
}

/// A namespace from a plugin: a DNS label, as the API server requires.
fn namespace(what: &str, value: &str) -> Result<(), WriteError> {
    match names::namespace_problem(value) {
        Some(problem) => Err(invalid(format!("{what} {problem}"))),
        None => Ok(()),
    }
}

fn gvk_of(gvk: &WitGvk) -> Result<Gvk, WriteError> {
    for (what, part) in [
        ("group", &gvk.group),
        ("version", &gvk.version),
        ("kind", &gvk.kind),
    ] {
        limits::argument(what, part).map_err(invalid)?;
    }
    if gvk.version.is_empty() || gvk.kind.is_empty() {
        return Err(invalid("gvk: version and kind are required"));
    }
    Ok(convert::gvk(gvk))
}

fn target_of(t: WitTarget) -> Result<Target, WriteError> {
    let gvk = gvk_of(&t.gvk)?;
    object_name("target name", &t.name)?;
    if let Some(ns) = &t.namespace {
        namespace("target namespace", ns)?;
    }
    if let Some(s) = &t.subresource
        && !write::SUBRESOURCES.contains(&s.as_str())
    {
        return Err(invalid(format!(
            "subresource {:?}: a plugin writes to status or scale",
            crate::text::cut(s.clone(), 40)
        )));
    }
    Ok(Target {
        gvk,
        namespace: t.namespace,
        name: t.name,
        subresource: t.subresource,
    })
}

/// Parses a body from a plugin, bounded in size.
fn json(what: &str, text: &str) -> Result<Value, WriteError> {
    if text.len() > MAX_WRITE_BYTES {
        return Err(WriteError::TooLarge(format!(
            "{what} of {} bytes: at most {MAX_WRITE_BYTES}",
            text.len()
        )));
    }
    serde_json::from_str(text).map_err(|e| invalid(format!("{what} is not JSON: {e}")))
}

/// Why a merge patch (an object) or a JSON patch (an array) would change the name or the
/// namespace of `target`, if it would: the grants were checked for the object it names.
fn moves(patch: &Value, target: &Target) -> Option<String> {
    const GUARDED: [&str; 4] = ["", "/metadata", "/metadata/name", "/metadata/namespace"];
    match patch {
        Value::Array(ops) => ops.iter().find_map(|op| {
            ["path", "from"]
                .into_iter()
                .filter_map(|field| op.get(field).and_then(Value::as_str))
                .find(|path| GUARDED.contains(path))
                .map(|path| format!("writes {path:?}"))
        }),
        Value::Object(object) => match object.get("metadata") {
            None => None,
            Some(Value::Object(meta)) => [
                ("name", Some(target.name.as_str())),
                ("namespace", target.namespace.as_deref()),
            ]
            .into_iter()
            .find_map(|(field, want)| match (meta.get(field), want) {
                (None, _) => None,
                (Some(Value::String(s)), Some(want)) if s == want => None,
                (Some(other), _) => Some(format!(
                    "sets metadata.{field} to {}",
                    crate::text::cut(other.to_string(), 80)
                )),
            }),
            Some(other) => Some(format!(
                "sets metadata to {}",
                crate::text::cut(other.to_string(), 80)
            )),
        },
        _ => None,
    }
}

/// Fills `field` of `object` with `want`, or refuses a different value.
fn fill(object: &mut Map<String, Value>, field: &str, want: &str) -> Result<(), WriteError> {
    match object.get(field) {
        None | Some(Value::Null) => {
            object.insert(field.to_owned(), Value::String(want.to_owned()));
            Ok(())
        }
        Some(Value::String(s)) if s == want => Ok(()),
        Some(other) => Err(invalid(format!(
            "{field} is {}, but the target says {want:?}",
            crate::text::cut(other.to_string(), 80)
        ))),
    }
}

/// An object body for `gvk`: apiVersion and kind filled in (or checked), and the namespace
/// and, when given, the name.
fn object_body(
    what: &str,
    text: &str,
    gvk: &Gvk,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<Value, WriteError> {
    let mut value = json(what, text)?;
    let Value::Object(object) = &mut value else {
        return Err(invalid(format!("{what} must be a JSON object")));
    };
    fill(object, "apiVersion", &gvk.api_version())?;
    fill(object, "kind", &gvk.kind)?;
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return Err(invalid(format!("{what}: metadata must be an object")));
    };
    if let Some(name) = name {
        fill(meta, "name", name)?;
    }
    if let Some(ns) = namespace {
        fill(meta, "namespace", ns)?;
    }
    Ok(value)
}

impl HostState {
    /// Checks a write against leadership and grants, and stages it.
    fn stage(&mut self, verbs: &[Verb], write: Write) -> Result<(), WriteError> {
        let plugin = &self.ctx.name;
        if !self.staging.open {
            return Err(WriteError::Unsupported(format!(
                "{}: writes are staged only during handle",
                write.verb()
            )));
        }
        let Some(writes) = &self.ctx.writes else {
            return Err(WriteError::Unsupported(format!(
                "{}: this host's cluster takes no writes",
                write.verb()
            )));
        };
        if !writes.duty.delivers_any() {
            return Err(WriteError::NotLeader(format!(
                "{}: this replica delivers nothing now (not the leader, no slice of its own); only a delivering replica writes",
                write.verb()
            )));
        }
        let t = &write.target;
        for verb in verbs {
            if let Err(why) = write::allowed(
                &writes.grants,
                *verb,
                &t.gvk,
                t.subresource.as_deref(),
                t.namespace.as_deref(),
            ) {
                self.staging.denied += 1;
                if writes.note_denial(&why) {
                    tracing::warn!(plugin = %plugin, "write denied (logged once): {why}");
                }
                return Err(WriteError::Denied(why));
            }
        }
        if self.staging.staged.len() >= MAX_WRITES_PER_CALL {
            return Err(WriteError::TooLarge(format!(
                "{} writes staged in this call already: at most {MAX_WRITES_PER_CALL}",
                self.staging.staged.len()
            )));
        }
        let bytes = self.staging.bytes + write.size();
        if bytes > MAX_STAGED_BYTES {
            return Err(WriteError::TooLarge(format!(
                "this call's writes would carry {bytes} bytes: at most {MAX_STAGED_BYTES}"
            )));
        }
        self.staging.bytes = bytes;
        self.staging.staged.push(write);
        Ok(())
    }

    fn patch(
        &mut self,
        target: WitTarget,
        what: &str,
        body: String,
        action: fn(String) -> Action,
        array: bool,
    ) -> Result<(), WriteError> {
        let target = target_of(target)?;
        let value = json(what, &body)?;
        if value.is_array() != array || !(value.is_array() || value.is_object()) {
            let want = if array { "array" } else { "object" };
            return Err(invalid(format!("{what} must be a JSON {want}")));
        }
        if let Some(why) = moves(&value, &target) {
            return Err(invalid(format!(
                "{what} {why}: a patch cannot move an object"
            )));
        }
        self.stage(
            &[Verb::Patch],
            Write {
                target,
                action: action(body),
            },
        )
    }
}

type Answer = wasmtime::Result<Result<(), WriteError>>;

impl Host for HostState {
    fn apply(&mut self, target: WitTarget, json: String) -> Answer {
        let _timed = self.host_calls.start();
        let staged = target_of(target).and_then(|target| {
            let body = object_body(
                "apply body",
                &json,
                &target.gvk,
                target.namespace.as_deref(),
                Some(&target.name),
            )?;
            self.stage(
                &[Verb::Patch],
                Write {
                    target,
                    action: Action::Apply(body.to_string()),
                },
            )
        });
        Ok(staged)
    }

    fn merge_patch(&mut self, target: WitTarget, patch: String) -> Answer {
        let _timed = self.host_calls.start();
        Ok(self.patch(target, "merge patch", patch, Action::MergePatch, false))
    }

    fn json_patch(&mut self, target: WitTarget, patch: String) -> Answer {
        let _timed = self.host_calls.start();
        Ok(self.patch(target, "JSON patch", patch, Action::JsonPatch, true))
    }

    fn create(&mut self, gvk: WitGvk, namespace: Option<String>, json: String) -> Answer {
        let _timed = self.host_calls.start();
        let staged = gvk_of(&gvk).and_then(|gvk| {
            if let Some(ns) = &namespace {
                self::namespace("namespace", ns)?;
            }
            let body = object_body("object", &json, &gvk, namespace.as_deref(), None)?;
            let meta = body.get("metadata");
            let text = |field: &str| meta.and_then(|m| m.get(field)).and_then(Value::as_str);
            let object_name = match (text("name"), text("generateName")) {
                (Some(n), _) => n.to_owned(),
                (None, Some(prefix)) => prefix.to_owned(),
                (None, None) => {
                    return Err(invalid(
                        "object: metadata.name (or metadata.generateName) is required",
                    ));
                }
            };
            self::object_name("metadata.name", &object_name)?;
            self.stage(
                &[Verb::Create],
                Write {
                    target: Target {
                        gvk,
                        namespace,
                        name: object_name,
                        subresource: None,
                    },
                    action: Action::Create(body.to_string()),
                },
            )
        });
        Ok(staged)
    }

    fn delete(&mut self, target: WitTarget, uid: Option<String>) -> Answer {
        let options = DeleteOptions {
            propagation: WitPropagation::Background,
            uid,
            resource_version: None,
        };
        self.delete_with(target, options)
    }

    fn delete_with(&mut self, target: WitTarget, options: DeleteOptions) -> Answer {
        let _timed = self.host_calls.start();
        let staged = target_of(target).and_then(|target| {
            if target.subresource.is_some() {
                return Err(invalid("delete: a subresource cannot be deleted"));
            }
            if let Some(uid) = &options.uid {
                name("uid", uid)?;
            }
            if let Some(version) = &options.resource_version {
                name("resourceVersion", version)?;
            }
            let propagation = match options.propagation {
                WitPropagation::Background => write::Propagation::Background,
                WitPropagation::Foreground => write::Propagation::Foreground,
                WitPropagation::Orphan => write::Propagation::Orphan,
            };
            self.stage(
                &[Verb::Delete],
                Write {
                    target,
                    action: Action::Delete(write::DeleteOptions {
                        propagation,
                        uid: options.uid,
                        resource_version: options.resource_version,
                    }),
                },
            )
        });
        Ok(staged)
    }

    fn record_event(
        &mut self,
        regarding: Resource<Object>,
        event_type: EventType,
        reason: String,
        note: String,
    ) -> Answer {
        let _timed = self.host_calls.start();
        let object = self.handles.get(&regarding)?.clone();
        let checked = (|| {
            if reason.is_empty() || reason.len() > MAX_REASON_BYTES {
                return Err(invalid(format!(
                    "reason of {} bytes: 1 to {MAX_REASON_BYTES}",
                    reason.len()
                )));
            }
            if note.len() > MAX_NOTE_BYTES {
                return Err(invalid(format!(
                    "note of {} bytes: at most {MAX_NOTE_BYTES}",
                    note.len()
                )));
            }
            Ok(())
        })();
        if let Err(e) = checked {
            return Ok(Err(e));
        }
        // client-go puts Events about cluster-scoped objects in `default`.
        let namespace = object.namespace().unwrap_or("default").to_owned();
        let write = Write {
            target: Target {
                gvk: write::event_gvk(),
                namespace: Some(namespace),
                name: object.name().to_owned(),
                subresource: None,
            },
            action: Action::RecordEvent {
                regarding: Regarding {
                    gvk: object.gvk().clone(),
                    namespace: object.namespace().map(str::to_owned),
                    name: object.name().to_owned(),
                    uid: object.uid().to_owned(),
                    resource_version: object.resource_version().to_owned(),
                },
                warning: matches!(event_type, EventType::Warning),
                reason,
                note,
            },
        };
        // The first occurrence creates the Event, repeats patch its series.
        Ok(self.stage(&[Verb::Create, Verb::Patch], write))
    }

    fn previous_failures(&mut self) -> wasmtime::Result<Vec<WriteFailure>> {
        Ok(self.staging.previous.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(namespace: Option<&str>, name: &str) -> WitTarget {
        WitTarget {
            gvk: WitGvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            subresource: None,
        }
    }

    #[test]
    fn targets_that_would_leave_their_url_segments_are_refused() {
        let refused = |ns: Option<&str>, name: &str| match target_of(target(ns, name)) {
            Err(WriteError::InvalidArgument(m)) => m,
            other => panic!("{ns:?} {name:?}: {other:?}"),
        };
        assert_eq!(
            refused(Some("shop"), "x/../../kube-system/secrets/y"),
            "target name may not contain `/` or `%`"
        );
        assert_eq!(
            refused(Some("shop"), "x%2F..%2Fy"),
            "target name may not contain `/` or `%`"
        );
        assert_eq!(refused(None, ".."), "target name may not be `.` or `..`");
        assert_eq!(
            refused(Some("shop/configmaps/x/../../kube-system"), "y"),
            "target namespace may hold only lowercase letters, digits and `-`"
        );
        let fine = target_of(target(Some("shop"), "system:web.1")).expect("accepted");
        assert_eq!(fine.name, "system:web.1");
    }

    #[test]
    fn patches_that_would_move_their_object_are_refused() {
        let t = target_of(target(Some("shop"), "web")).expect("a target");
        let moves = |patch: &str| moves(&serde_json::from_str(patch).expect("JSON"), &t);
        assert_eq!(moves(r#"{"metadata":{"labels":{"a":"b"}}}"#), None);
        assert_eq!(
            moves(r#"{"metadata":{"name":"web","namespace":"shop"}}"#),
            None
        );
        assert!(moves(r#"{"metadata":{"name":"other"}}"#).is_some_and(|m| m.contains("name")));
        assert!(moves(r#"{"metadata":{"namespace":"kube-system"}}"#).is_some());
        assert!(moves(r#"{"metadata":{"namespace":null}}"#).is_some());
        assert!(moves(r#"{"metadata":null}"#).is_some());
        assert_eq!(
            moves(r#"[{"op":"add","path":"/metadata/labels/a","value":"b"}]"#),
            None
        );
        for path in ["/metadata/namespace", "/metadata/name", "/metadata", ""] {
            let op = format!(r#"[{{"op":"replace","path":"{path}","value":"x"}}]"#);
            assert!(moves(&op).is_some(), "{path}");
        }
        assert!(moves(r#"[{"op":"move","from":"/metadata/name","path":"/spec/x"}]"#).is_some());
    }

    #[test]
    fn apply_bodies_get_their_type_and_name_and_refuse_another() {
        let pod = Gvk::new("", "v1", "Pod");
        let body = object_body(
            "apply body",
            r#"{"metadata":{"labels":{"a":"b"}}}"#,
            &pod,
            Some("shop"),
            Some("web"),
        )
        .expect("accepted");
        assert_eq!(
            body,
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}, "name": "web", "namespace": "shop"}})
        );
        let other = object_body(
            "apply body",
            r#"{"kind":"Service"}"#,
            &pod,
            None,
            Some("web"),
        )
        .expect_err("refused");
        assert!(
            matches!(&other, WriteError::InvalidArgument(m) if m.contains("kind is \"Service\"")),
            "{other:?}"
        );
        let named = object_body(
            "apply body",
            r#"{"metadata":{"name":"db"}}"#,
            &pod,
            None,
            Some("web"),
        )
        .expect_err("refused");
        assert!(matches!(named, WriteError::InvalidArgument(_)));
        assert!(matches!(
            object_body("apply body", "[1]", &pod, None, None),
            Err(WriteError::InvalidArgument(_))
        ));
        let huge = format!("\"{}\"", "x".repeat(MAX_WRITE_BYTES));
        assert!(matches!(
            object_body("apply body", &huge, &pod, None, None),
            Err(WriteError::TooLarge(_))
        ));
    }
}
