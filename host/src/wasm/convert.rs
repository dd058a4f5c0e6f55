//! Conversions between the host's types and the WIT types. Copies bytes, never re-serializes.

use crate::gvk::Gvk;
use crate::informer::Notification;
use crate::object::KubeObject;
use crate::wasm::bindings::kubewasm::plugin::types as wit;

/// The WIT object for a cached object.
pub fn object(o: &KubeObject) -> wit::Object {
    wit::Object {
        api_version: o.gvk.api_version(),
        kind: o.gvk.kind.clone(),
        namespace: o.namespace.clone(),
        name: o.name.clone(),
        uid: o.uid.clone(),
        resource_version: o.resource_version.clone(),
        labels: o.labels.clone(),
        owner_references: o
            .owners
            .iter()
            .map(|r| wit::OwnerReference {
                api_version: r.api_version.clone(),
                kind: r.kind.clone(),
                name: r.name.clone(),
                uid: r.uid.clone(),
                controller: r.controller,
            })
            .collect(),
        json: o.json.to_string(),
    }
}

/// The WIT event for a notification.
pub fn event(n: &Notification) -> wit::Event {
    match n {
        Notification::Added { object: o, initial } => wit::Event::Added(wit::Added {
            object: object(o),
            initial: *initial,
        }),
        Notification::Updated { old, new } => wit::Event::Updated(wit::Updated {
            old: object(old),
            new: object(new),
        }),
        Notification::Deleted { object: o, stale } => wit::Event::Deleted(wit::Deleted {
            object: object(o),
            stale: *stale,
        }),
        Notification::Sync(o) => wit::Event::Sync(object(o)),
    }
}

/// The host resource type for a WIT one.
pub fn gvk(g: &wit::Gvk) -> Gvk {
    Gvk::new(&g.group, &g.version, &g.kind)
}
