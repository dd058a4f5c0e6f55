//! Plugin writes to the folder's in-memory cluster, delivered back as events, so a plugin that
//! acts can be tried without a cluster. The files are never changed: written state lives on
//! top of them until the file that defines the object changes (then the file wins, as a
//! `kubectl apply` of it would).
//!
//! Deletion is the API server's: an object with finalizers gets a `deletionTimestamp` and
//! stays until a write removes the last of them; a deleted object's dependents (objects whose
//! ownerReferences name its uid) are deleted after it (background and foreground) or lose that
//! reference (orphan).
//!
//! Approximations, documented in docs/ARCHITECTURE.md: apply merges the given fields into the
//! object (there is no field ownership here, so lists are replaced whole); a subresource write
//! changes the object itself; names are never generated; foreground deletion deletes the
//! dependents first and then the object at once, with no waiting state.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::gvk::Gvk;
use crate::object::object_key;
use crate::source::SourceEvent;
use crate::source::manifests::{Id, ManifestFolder, Reported, Shared, State};
use crate::write::{
    Action, Occurrence, Propagation, Refusal, Write, Writer, event_gvk, event_object, micro_time,
};

/// True when the object's `metadata.finalizers` holds at least one entry.
pub(super) fn has_finalizers(value: &Value) -> bool {
    value
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// True when the object is being deleted (it has a `deletionTimestamp`).
fn terminating(value: &Value) -> bool {
    value.pointer("/metadata/deletionTimestamp").is_some()
}

/// Marks `value` as being deleted now, as the API server does for an object with finalizers.
pub(super) fn mark_deleted(value: &mut Value) {
    if let Some(Value::Object(meta)) = value.get_mut("metadata") {
        let now = crate::clock::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        meta.entry("deletionTimestamp")
            .or_insert(Value::String(now));
        meta.entry("deletionGracePeriodSeconds").or_insert(json!(0));
    }
}

fn refusal(reason: &str, message: String, retry: bool) -> Refusal {
    Refusal {
        reason: reason.to_owned(),
        message,
        retry,
    }
}

fn parse(what: &str, text: &str) -> Result<Value, Refusal> {
    serde_json::from_str(text).map_err(|e| refusal("Invalid", format!("{what}: {e}"), false))
}

impl Writer for ManifestFolder {
    fn send(&self, plugin: &str, write: &Write) -> Result<(), Refusal> {
        self.shared.write(plugin, write, false).map(drop)
    }

    fn dry_run(
        &self,
        plugin: &str,
        write: &Write,
        _within: std::time::Duration,
    ) -> Result<Option<Value>, Refusal> {
        self.shared.write(plugin, write, true)
    }
}

impl Shared {
    /// Applies one write to the in-memory state and tells the watchers of its type; with
    /// `dry_run`, only checks it and answers the object it would leave (none: deleted), as
    /// the API server's `dryRun=All` does.
    fn write(&self, plugin: &str, write: &Write, dry_run: bool) -> Result<Option<Value>, Refusal> {
        let t = &write.target;
        let mut state = self.state();
        let (gvk, namespace, name) = match &write.action {
            Action::RecordEvent { .. } => (event_gvk(), t.namespace.clone(), String::new()),
            _ => (t.gvk.clone(), t.namespace.clone(), t.name.clone()),
        };
        let current = |name: &str, state: &super::State| {
            let id = (gvk.clone(), object_key(namespace.as_deref(), name));
            state.objects.get(&id).map(|r| r.object.clone())
        };
        let missing = || {
            refusal(
                "NotFound",
                format!(
                    "{} {} not found in the manifests folder",
                    gvk.kind,
                    object_key(namespace.as_deref(), &name)
                ),
                false,
            )
        };
        let existing = |state: &super::State| -> Result<Value, Refusal> {
            let object = current(&name, state).ok_or_else(missing)?;
            parse("the stored object", &object.json())
        };
        let (name, value) = match &write.action {
            Action::Apply(body) => {
                let mut value = match current(&name, &state) {
                    Some(object) => parse("the stored object", &object.json())?,
                    None => json!({}),
                };
                json_patch::merge(&mut value, &parse("apply body", body)?);
                (name.clone(), Some(value))
            }
            Action::MergePatch(patch) => {
                let mut value = existing(&state)?;
                json_patch::merge(&mut value, &parse("merge patch", patch)?);
                (name.clone(), Some(value))
            }
            Action::JsonPatch(patch) => {
                let mut value = existing(&state)?;
                let ops: json_patch::Patch = serde_json::from_value(parse("JSON patch", patch)?)
                    .map_err(|e| refusal("Invalid", format!("JSON patch: {e}"), false))?;
                json_patch::patch(&mut value, &ops)
                    .map_err(|e| refusal("Invalid", format!("JSON patch: {e}"), false))?;
                (name.clone(), Some(value))
            }
            Action::Create(body) => {
                let value = parse("object", body)?;
                if value.pointer("/metadata/name").is_none() {
                    return Err(refusal(
                        "Invalid",
                        "metadata.name: the manifests folder does not generate names".into(),
                        false,
                    ));
                }
                if current(&name, &state).is_some() {
                    return Err(refusal(
                        "AlreadyExists",
                        format!(
                            "{} {} already exists",
                            gvk.kind,
                            object_key(namespace.as_deref(), &name)
                        ),
                        false,
                    ));
                }
                (name.clone(), Some(value))
            }
            Action::Delete(options) => {
                let object = current(&name, &state).ok_or_else(missing)?;
                if let Some(uid) = &options.uid
                    && *uid != object.uid()
                {
                    return Err(refusal(
                        "Conflict",
                        format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                            object.uid()
                        ),
                        false,
                    ));
                }
                if let Some(version) = &options.resource_version
                    && version != object.resource_version()
                {
                    return Err(refusal(
                        "Conflict",
                        format!(
                            "Precondition failed: ResourceVersion in precondition: {version}, ResourceVersion in object meta: {}",
                            object.resource_version()
                        ),
                        false,
                    ));
                }
                let mut value = parse("the stored object", &object.json())?;
                if !has_finalizers(&value) {
                    (name.clone(), None)
                } else if terminating(&value) {
                    // Already being deleted: the API server changes nothing.
                    return Ok(Some(value));
                } else {
                    mark_deleted(&mut value);
                    (name.clone(), Some(value))
                }
            }
            Action::RecordEvent { .. } if dry_run => {
                return Err(refusal(
                    "NotSent",
                    "Events are not sent in dry-run mode".into(),
                    false,
                ));
            }
            Action::RecordEvent { regarding, .. } => {
                let now = crate::clock::now();
                let fresh = format!("{}.{:x}", regarding.name, now.as_nanosecond());
                match state.series.observe(plugin, write, fresh, Instant::now()) {
                    Occurrence::Repeat(name, count) => {
                        let Some(object) = current(&name, &state) else {
                            state.series.forget(&name);
                            return Err(refusal("NotFound", format!("Event {name} is gone"), true));
                        };
                        let mut value = parse("the stored Event", &object.json())?;
                        value["series"] =
                            json!({"count": count, "lastObservedTime": micro_time(now)});
                        (name, Some(value))
                    }
                    Occurrence::New(name) => {
                        let ns = namespace.as_deref().unwrap_or("default");
                        let value = event_object(plugin, write, &name, ns, now);
                        (name, value)
                    }
                }
            }
        };
        // The last finalizer of an object being deleted is gone: so is the object.
        let value = value.filter(|v| !terminating(v) || has_finalizers(v));
        if dry_run {
            return self.check(value, &gvk, namespace.as_deref(), &name, state.version + 1);
        }
        let id = (gvk.clone(), object_key(namespace.as_deref(), &name));
        let mut dependents = Vec::new();
        let event = match value {
            None => {
                let Some(gone) = state.objects.remove(&id) else {
                    return Err(missing());
                };
                if !state.created.remove(&id) {
                    // Defined by a file: stays deleted until that file changes.
                    state.deleted.insert(id.clone(), gone.digest);
                }
                let propagation = match &write.action {
                    Action::Delete(options) => options.propagation,
                    _ => Propagation::Background,
                };
                dependents.push((gone.object.uid().to_owned(), propagation));
                SourceEvent::Deleted(gone.object)
            }
            Some(value) => {
                state.version += 1;
                let object =
                    self.written(value, &gvk, namespace.as_deref(), &name, state.version)?;
                let object = Arc::new(object);
                // A file's object keeps the file's digest: the next scan leaves it alone until
                // the file changes.
                let digest = match state.objects.get(&id) {
                    Some(r) => r.digest,
                    None => {
                        state.created.insert(id.clone());
                        [0; 32]
                    }
                };
                state.objects.insert(
                    id.clone(),
                    Reported {
                        digest,
                        object: object.clone(),
                    },
                );
                SourceEvent::Applied(object)
            }
        };
        state.notify(&id.0, &event);
        while let Some((uid, propagation)) = dependents.pop() {
            self.collect(&mut state, &uid, propagation, &mut dependents);
        }
        // Against a folder nothing else shows a plugin's writes (the files do not change).
        tracing::info!(plugin, verb = write.verb(), target = %write.target, "write applied to the folder's objects (its files are not changed)");
        Ok(None)
    }

    /// The object a dry run would leave (`value`, none when deleted), checked as a write of
    /// it is.
    fn check(
        &self,
        value: Option<Value>,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        version: u64,
    ) -> Result<Option<Value>, Refusal> {
        let Some(value) = value else {
            return Ok(None);
        };
        let object = self.written(value, gvk, namespace, name, version)?;
        parse("the object", &object.json()).map(Some)
    }

    /// `value` as the object a write leaves at `version`: it must be an object of type
    /// `gvk` named `name`.
    fn written(
        &self,
        value: Value,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        version: u64,
    ) -> Result<crate::object::KubeObject, Refusal> {
        let object = self
            .materialize(value, namespace, version, None)
            .map_err(|e| refusal("Invalid", e.to_string(), false))?;
        if object.gvk() != gvk || object.name() != name {
            return Err(refusal(
                "Invalid",
                format!(
                    "the write changes the object's type or name to {} {}",
                    object.gvk(),
                    object.name()
                ),
                false,
            ));
        }
        Ok(object)
    }

    /// The garbage collector's part for one deleted owner (`uid`): each dependent is deleted
    /// (and its own dependents after it), or, for `orphan`, loses its reference.
    fn collect(
        &self,
        state: &mut State,
        uid: &str,
        propagation: Propagation,
        next: &mut Vec<(String, Propagation)>,
    ) {
        let owned: Vec<Id> = state
            .objects
            .iter()
            .filter(|(_, r)| r.object.owners().any(|o| o.uid == uid))
            .map(|(id, _)| id.clone())
            .collect();
        for id in owned {
            let Some(reported) = state.objects.get(&id) else {
                continue;
            };
            let Ok(mut value) = serde_json::from_str::<Value>(&reported.object.json()) else {
                continue;
            };
            let gone = match propagation {
                Propagation::Orphan => {
                    if let Some(Value::Array(refs)) = value.pointer_mut("/metadata/ownerReferences")
                    {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
                    }
                    false
                }
                Propagation::Background | Propagation::Foreground => {
                    if has_finalizers(&value) {
                        if terminating(&value) {
                            continue;
                        }
                        mark_deleted(&mut value);
                        false
                    } else {
                        true
                    }
                }
            };
            let event = if gone {
                let Some(r) = state.objects.remove(&id) else {
                    continue;
                };
                if !state.created.remove(&id) {
                    state.deleted.insert(id.clone(), r.digest);
                }
                next.push((r.object.uid().to_owned(), Propagation::Background));
                SourceEvent::Deleted(r.object)
            } else {
                state.version += 1;
                let namespace = crate::source::manifests::id_namespace(&id);
                match self.materialize(value, namespace, state.version, None) {
                    Ok(object) => {
                        let object = Arc::new(object);
                        let digest = reported.digest;
                        state.objects.insert(
                            id.clone(),
                            Reported {
                                digest,
                                object: object.clone(),
                            },
                        );
                        SourceEvent::Applied(object)
                    }
                    Err(e) => {
                        tracing::error!(key = %id.1, "garbage collection: {e}");
                        continue;
                    }
                }
            };
            tracing::info!(resource = %id.0, key = %id.1, owner = uid, "dependent collected after its owner's deletion");
            let gvk: Gvk = id.0.clone();
            state.notify(&gvk, &event);
        }
    }
}
