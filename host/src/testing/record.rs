//! `kubewasm record`: what a cluster does, captured as a test file for `kubewasm test` to
//! replay: the initial state as the first step, then one step per change (a relist's changes
//! together), with no expectations yet.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;

use crate::gvk::Gvk;
use crate::object::KubeObject;
use crate::source::{Source, SourceEvent};

/// A reference as test files write it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
struct Reference {
    api_version: String,
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    name: String,
}

/// One recorded step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RecordedStep {
    name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    apply: Vec<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    delete: Vec<Reference>,
}

/// What `record` captured: a test file without expectations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recording {
    /// The plugin to replay it to (`--plugin` overrides it).
    plugin: String,
    /// The states.
    pub steps: Vec<RecordedStep>,
}

impl Recording {
    /// The test file's text, with a comment saying what was recorded.
    pub fn to_yaml(&self, what: &str) -> Result<String, serde_yaml_ng::Error> {
        Ok(format!(
            "# Recorded by kubewasm record: {what}.\n# Replay: kubewasm test --plugin PLUGIN.wasm THIS-FILE; add `expect:` to steps to check them.\n{}",
            serde_yaml_ng::to_string(self)?
        ))
    }
}

type Id = (Gvk, String);

fn reference(o: &KubeObject) -> Reference {
    Reference {
        api_version: o.gvk().api_version(),
        kind: o.gvk().kind.clone(),
        namespace: o.namespace().map(str::to_owned),
        name: o.name().to_owned(),
    }
}

/// The object's JSON, with what only the recording server meant dropped (resource version,
/// uid, creation time: the replaying folder gives its own).
fn manifest(o: &KubeObject) -> Value {
    let mut value: Value = serde_json::from_str(&o.json()).unwrap_or(Value::Null);
    if let Some(object) = value.as_object_mut() {
        // List items come without their type.
        object
            .entry("apiVersion")
            .or_insert_with(|| o.gvk().api_version().into());
        object
            .entry("kind")
            .or_insert_with(|| o.gvk().kind.clone().into());
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["resourceVersion", "uid", "creationTimestamp", "generation"] {
            meta.remove(field);
        }
    }
    value
}

/// Builds steps from source events: the state so far, a relist in progress.
#[derive(Default)]
struct Recorder {
    state: BTreeMap<Id, Arc<KubeObject>>,
    /// Per type, the objects a relist in progress has named, and its changes so far.
    relists: BTreeMap<Gvk, (BTreeSet<String>, RecordedStep)>,
    /// Types whose first list has not ended yet.
    initial: BTreeSet<Gvk>,
    first: RecordedStep,
    steps: Vec<RecordedStep>,
    events: usize,
}

impl Recorder {
    fn apply(&mut self, o: &Arc<KubeObject>) -> Option<Value> {
        let id = (o.gvk().clone(), o.key().to_owned());
        let changed = self
            .state
            .get(&id)
            .is_none_or(|old| old.resource_version() != o.resource_version() || !old.same_json(o));
        self.state.insert(id, o.clone());
        changed.then(|| manifest(o))
    }

    fn event(&mut self, gvk: &Gvk, event: SourceEvent) {
        match event {
            SourceEvent::ListStarted => {
                let name = format!("relist of {gvk}");
                let step = RecordedStep {
                    name,
                    apply: vec![],
                    delete: vec![],
                };
                self.relists.insert(gvk.clone(), (BTreeSet::new(), step));
            }
            SourceEvent::Listed(o) => {
                let change = self.apply(&o);
                let initial = self.initial.contains(gvk);
                if let Some((seen, step)) = self.relists.get_mut(gvk) {
                    seen.insert(o.key().to_owned());
                    if let Some(value) = change {
                        if initial {
                            self.first.apply.push(value);
                        } else {
                            step.apply.push(value);
                        }
                    }
                }
            }
            SourceEvent::ListDone => {
                let Some((seen, mut step)) = self.relists.remove(gvk) else {
                    return;
                };
                let gone: Vec<Id> = self
                    .state
                    .keys()
                    .filter(|(g, key)| g == gvk && !seen.contains(key))
                    .cloned()
                    .collect();
                for id in gone {
                    if let Some(o) = self.state.remove(&id) {
                        step.delete.push(reference(&o));
                    }
                }
                let initial = self.initial.remove(gvk);
                let unchanged = step.apply.is_empty() && step.delete.is_empty();
                if !initial && !unchanged {
                    self.events += 1;
                    self.steps.push(step);
                }
            }
            SourceEvent::Applied(o) => {
                if let Some(value) = self.apply(&o) {
                    self.events += 1;
                    self.steps.push(RecordedStep {
                        name: format!("changed {} {}", o.gvk(), o.key()),
                        apply: vec![value],
                        delete: vec![],
                    });
                }
            }
            // The recorder watches whole types: no source lists it namespace by namespace.
            SourceEvent::NamespaceListStarted(_) | SourceEvent::NamespaceListDone(_) => {}
            SourceEvent::Deleted(o) => {
                if self
                    .state
                    .remove(&(o.gvk().clone(), o.key().to_owned()))
                    .is_some()
                {
                    self.events += 1;
                    self.steps.push(RecordedStep {
                        name: format!("deleted {} {}", o.gvk(), o.key()),
                        apply: vec![],
                        delete: vec![reference(&o)],
                    });
                }
            }
        }
    }
}

/// Lists and watches `types` on `source` until `stop` completes or `max_events` changes
/// after the initial state; what happened, as a test file.
pub async fn record(
    source: Arc<dyn Source>,
    types: &[Gvk],
    max_events: usize,
    stop: impl Future<Output = ()>,
) -> Recording {
    let streams = types.iter().map(|gvk| {
        let gvk = gvk.clone();
        source
            .watch(&gvk, &crate::source::Scope::everything())
            .map(move |e| (gvk.clone(), e))
    });
    let mut events = futures::stream::select_all(streams);
    let mut recorder = Recorder {
        initial: types.iter().cloned().collect(),
        first: RecordedStep {
            name: "initial state".into(),
            apply: vec![],
            delete: vec![],
        },
        ..Recorder::default()
    };
    tokio::pin!(stop);
    while recorder.events < max_events {
        tokio::select! {
            () = &mut stop => break,
            next = events.next() => match next {
                Some((gvk, event)) => recorder.event(&gvk, event),
                None => break,
            },
        }
    }
    let mut steps = vec![recorder.first];
    steps.extend(recorder.steps);
    Recording {
        plugin: "PLUGIN.wasm".into(),
        steps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Transform;
    use serde_json::json;

    fn pod(name: &str, rv: &str) -> Arc<KubeObject> {
        let value = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "a", "resourceVersion": rv, "uid": "u"}});
        Arc::new(KubeObject::from_value(value, &Transform::default()).expect("object"))
    }

    #[test]
    fn a_relist_after_the_initial_state_is_one_step_of_its_changes() {
        let gvk = Gvk::new("", "v1", "Pod");
        let mut r = Recorder {
            initial: [gvk.clone()].into(),
            ..Recorder::default()
        };
        for e in [
            SourceEvent::ListStarted,
            SourceEvent::Listed(pod("x", "1")),
            SourceEvent::Listed(pod("y", "1")),
            SourceEvent::ListDone,
            SourceEvent::Applied(pod("x", "2")),
            // A relist (after 410 Gone): y changed, x vanished meanwhile, z is new.
            SourceEvent::ListStarted,
            SourceEvent::Listed(pod("y", "3")),
            SourceEvent::Listed(pod("z", "3")),
            SourceEvent::ListDone,
            // An unchanged relist records nothing.
            SourceEvent::ListStarted,
            SourceEvent::Listed(pod("y", "3")),
            SourceEvent::Listed(pod("z", "3")),
            SourceEvent::ListDone,
        ] {
            r.event(&gvk, e);
        }
        assert_eq!(r.first.apply.len(), 2);
        // What only the recording server meant is gone from the manifests.
        assert_eq!(
            r.first.apply[0]["metadata"],
            json!({"name": "x", "namespace": "a"})
        );
        let names: Vec<&str> = r.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["changed v1/Pod a/x", "relist of v1/Pod"]);
        let relist = &r.steps[1];
        assert_eq!(relist.apply.len(), 2, "y changed and z is new");
        assert_eq!(relist.delete.len(), 1);
        assert_eq!(relist.delete[0].name, "x");
        assert_eq!(r.events, 2);
    }
}
