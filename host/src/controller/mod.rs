//! Controllers (contract 0.5): what a plugin's manifest declares it reconciles, owns and
//! watches, which keys an event on any of those types wakes, and the work queue of keys
//! (`queue.rs`) that makes one `reconcile` of a key stand for every event that woke it.

pub mod children;
pub mod queue;

use crate::gvk::Gvk;
use crate::informer::index::IndexFunc;
use crate::object::{Key, KubeObject};

pub use queue::WorkQueue;

/// The finalizer a controller plugin's objects carry: `kubewasm.dev/<plugin>`.
pub fn finalizer(plugin: &str) -> String {
    format!("kubewasm.dev/{plugin}")
}

/// The finalizers an object carries.
pub fn finalizers(object: &KubeObject) -> Vec<String> {
    match object.field(&["metadata".into(), "finalizers".into()]) {
        Some(serde_json::Value::Array(items)) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// True when the object carries `finalizer`.
pub fn holds_finalizer(object: &KubeObject, finalizer: &str) -> bool {
    finalizers(object).iter().any(|f| f == finalizer)
}

/// True when the object is being deleted (it has a `deletionTimestamp`).
pub fn terminating(object: &KubeObject) -> bool {
    object
        .field(&["metadata".into(), "deletionTimestamp".into()])
        .is_some()
}

/// How a watched object names the keys it wakes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Its values in this index are keys.
    Index(IndexFunc),
    /// The value of this label is a name in the watched object's namespace.
    Label(String),
}

/// A watched type and how it wakes keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The type.
    pub gvk: Gvk,
    /// The mapping.
    pub wakes: Wake,
}

/// What a controller plugin declared, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The type reconciled.
    pub reconciles: Gvk,
    /// The types it owns.
    pub owns: Vec<Gvk>,
    /// Other types that wake keys.
    pub watches: Vec<Watched>,
    /// Whether it keeps a finalizer on every live object of `reconciles`.
    pub finalizer: bool,
}

impl Spec {
    /// Every type whose events wake keys: the reconciled one first.
    pub fn types(&self) -> Vec<Gvk> {
        let mut types = vec![self.reconciles.clone()];
        for gvk in self.owns.iter().chain(self.watches.iter().map(|w| &w.gvk)) {
            if !types.contains(gvk) {
                types.push(gvk.clone());
            }
        }
        types
    }

    /// Whether events of `gvk` wake keys.
    pub fn wakes_on(&self, gvk: &Gvk) -> bool {
        self.reconciles == *gvk
            || self.owns.contains(gvk)
            || self.watches.iter().any(|w| w.gvk == *gvk)
    }

    /// The keys an event on `object` (of type `gvk`) wakes. `exists` tells whether the
    /// reconciled type's cache holds a key: an owner reference names no namespace, so a
    /// namespaced child's owner is looked up in its namespace first, then cluster-wide.
    pub fn wakes(&self, gvk: &Gvk, object: &KubeObject, exists: impl Fn(&str) -> bool) -> Vec<Key> {
        let mut keys: Vec<Key> = Vec::new();
        let mut wake = |key: Key| {
            if !keys.contains(&key) {
                keys.push(key);
            }
        };
        if self.reconciles == *gvk {
            wake(object.shared_key().clone());
        }
        if self.owns.contains(gvk)
            && let Some(owner) = object.controller()
            && self.is_reconciled_kind(owner.api_version, owner.kind)
        {
            let namespaced = crate::object::object_key(object.namespace(), owner.name);
            if object.namespace().is_some() && !exists(&namespaced) && exists(owner.name) {
                wake(Key::from(owner.name));
            } else {
                wake(Key::new(namespaced));
            }
        }
        for watched in self.watches.iter().filter(|w| w.gvk == *gvk) {
            match &watched.wakes {
                Wake::Index(func) => func.each_value(object, |v| {
                    if !v.is_empty() {
                        wake(Key::from(v));
                    }
                }),
                Wake::Label(label) => {
                    if let Some(name) = object.label(label).filter(|n| !n.is_empty()) {
                        wake(Key::new(crate::object::object_key(
                            object.namespace(),
                            name,
                        )));
                    }
                }
            }
        }
        keys
    }

    /// Whether an owner reference's `apiVersion` and `kind` name the reconciled type (its
    /// group and kind: any version of it).
    fn is_reconciled_kind(&self, api_version: &str, kind: &str) -> bool {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        kind == self.reconciles.kind && group == self.reconciles.group
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Transform;

    fn object(kind: &str, namespace: Option<&str>, name: &str, extra: &str) -> KubeObject {
        let ns = namespace.map_or(String::new(), |n| format!(r#","namespace":"{n}""#));
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"name":"{name}"{ns}{extra}}}}}"#
        );
        KubeObject::from_json(&text, &Transform::default()).expect("an object")
    }

    fn spec() -> Spec {
        Spec {
            reconciles: Gvk::new("example.com", "v1", "App"),
            owns: vec![Gvk::new("apps", "v1", "Deployment")],
            watches: vec![
                Watched {
                    gvk: Gvk::new("", "v1", "ConfigMap"),
                    wakes: Wake::Label("app".into()),
                },
                Watched {
                    gvk: Gvk::new("", "v1", "Secret"),
                    wakes: Wake::Index(IndexFunc::JsonPointer("/metadata/annotations/apps".into())),
                },
            ],
            finalizer: false,
        }
    }

    fn names(keys: Vec<Key>) -> Vec<String> {
        keys.into_iter().map(|k| k.as_str().to_owned()).collect()
    }

    #[test]
    fn a_reconciled_object_wakes_its_own_key() {
        let s = spec();
        let app = object("App", Some("t"), "web", "");
        assert_eq!(names(s.wakes(&s.reconciles, &app, |_| false)), ["t/web"]);
    }

    #[test]
    fn an_owned_child_wakes_its_controller_of_the_reconciled_kind_only() {
        let s = spec();
        let deployments = Gvk::new("apps", "v1", "Deployment");
        let owned = |api: &str, kind: &str, controller: bool| {
            object(
                "Deployment",
                Some("t"),
                "web-abc",
                &format!(
                    r#","ownerReferences":[{{"apiVersion":"{api}","kind":"{kind}","name":"web","uid":"u1","controller":{controller}}}]"#
                ),
            )
        };
        let wakes = |o: &KubeObject| names(s.wakes(&deployments, o, |_| false));
        assert_eq!(wakes(&owned("example.com/v1", "App", true)), ["t/web"]);
        assert_eq!(
            wakes(&owned("example.com/v2", "App", true)),
            ["t/web"],
            "any version of the group"
        );
        assert!(wakes(&owned("other.com/v1", "App", true)).is_empty());
        assert!(
            wakes(&owned("example.com/v1", "App", false)).is_empty(),
            "not its controller"
        );
        let orphan = object("Deployment", Some("t"), "lonely", "");
        assert!(wakes(&orphan).is_empty());
    }

    #[test]
    fn a_namespaced_child_of_a_cluster_scoped_parent_wakes_the_parent() {
        let s = Spec {
            reconciles: Gvk::new("", "v1", "Namespace"),
            owns: vec![Gvk::new("", "v1", "ResourceQuota")],
            watches: Vec::new(),
            finalizer: false,
        };
        let quota = object(
            "ResourceQuota",
            Some("team-a"),
            "quota",
            r#","ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"team-a","uid":"u","controller":true}]"#,
        );
        let keys = s.wakes(&s.owns[0], &quota, |k| k == "team-a");
        assert_eq!(names(keys), ["team-a"]);
    }

    #[test]
    fn watched_objects_wake_keys_by_label_or_index() {
        let s = spec();
        let cm = object(
            "ConfigMap",
            Some("t"),
            "settings",
            r#","labels":{"app":"web"}"#,
        );
        assert_eq!(names(s.wakes(&s.watches[0].gvk, &cm, |_| false)), ["t/web"]);
        let unlabelled = object("ConfigMap", Some("t"), "other", "");
        assert!(
            s.wakes(&s.watches[0].gvk, &unlabelled, |_| false)
                .is_empty()
        );
        let secret = object(
            "Secret",
            Some("t"),
            "creds",
            r#","annotations":{"apps":"t/web"}"#,
        );
        assert_eq!(
            names(s.wakes(&s.watches[1].gvk, &secret, |_| false)),
            ["t/web"]
        );
    }

    #[test]
    fn types_lists_each_once_reconciled_first() {
        let mut s = spec();
        s.owns.push(s.watches[0].gvk.clone());
        let types = s.types();
        assert_eq!(types[0], s.reconciles);
        assert_eq!(types.len(), 4);
        assert!(s.wakes_on(&Gvk::new("", "v1", "Secret")));
        assert!(!s.wakes_on(&Gvk::new("", "v1", "Pod")));
    }
}
