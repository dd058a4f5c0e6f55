//! Plugin writes to the folder's in-memory cluster, delivered back as events, so a plugin that
//! acts can be tried without a cluster. The files are never changed: written state lives on
//! top of them until the file that defines the object changes (then the file wins, as a
//! `kubectl apply` of it would).
//!
//! Approximations, documented in docs/ARCHITECTURE.md: apply merges the given fields into the
//! object (there is no field ownership here, so lists are replaced whole); a subresource write
//! changes the object itself; names are never generated.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use crate::object::object_key;
use crate::source::SourceEvent;
use crate::source::manifests::{ManifestFolder, Reported, Shared};
use crate::write::{
    Action, Occurrence, Refusal, Write, Writer, event_gvk, event_object, micro_time,
};

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
        self.shared.write(plugin, write)
    }
}

impl Shared {
    /// Applies one write to the in-memory state and tells the watchers of its type.
    fn write(&self, plugin: &str, write: &Write) -> Result<(), Refusal> {
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
            Action::Delete(uid) => {
                let object = current(&name, &state).ok_or_else(missing)?;
                if let Some(uid) = uid
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
                (name.clone(), None)
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
        let id = (gvk.clone(), object_key(namespace.as_deref(), &name));
        let event = match value {
            None => {
                let Some(gone) = state.objects.remove(&id) else {
                    return Err(missing());
                };
                if !state.created.remove(&id) {
                    // Defined by a file: stays deleted until that file changes.
                    state.deleted.insert(id.clone(), gone.digest);
                }
                SourceEvent::Deleted(gone.object)
            }
            Some(value) => {
                state.version += 1;
                let object = self
                    .materialize(value, namespace.as_deref(), state.version, None)
                    .map_err(|e| refusal("Invalid", e.to_string(), false))?;
                if *object.gvk() != gvk || object.name() != name {
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
        // Against a folder nothing else shows a plugin's writes (the files do not change).
        tracing::info!(plugin, verb = write.verb(), target = %write.target, "write applied to the folder's objects (its files are not changed)");
        Ok(())
    }
}
