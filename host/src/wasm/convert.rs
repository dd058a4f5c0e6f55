//! Conversions between the host's types and the WIT types: events lend handles, never copies.

use crate::gvk::Gvk;
use crate::informer::Notification;
use crate::wasm::bindings::kubewasm::plugin::types as wit;
use crate::wasm::handles::Handles;

/// The WIT event for a notification, its objects lent from `handles` for one call.
pub fn event(n: &Notification, handles: &mut Handles) -> wit::Event {
    match n {
        Notification::Added { object: o, initial } => wit::Event::Added(wit::Added {
            object: handles.lend(o),
            initial: *initial,
        }),
        Notification::Updated { old, new } => wit::Event::Updated(wit::Updated {
            old: handles.lend(old),
            new: handles.lend(new),
        }),
        Notification::Deleted { object: o, stale } => wit::Event::Deleted(wit::Deleted {
            object: handles.lend(o),
            stale: *stale,
        }),
        Notification::Sync(o) => wit::Event::Sync(handles.lend(o)),
        Notification::Requeue(o) => wit::Event::Requeue(handles.lend(o)),
    }
}

/// The host resource type for a WIT one.
pub fn gvk(g: &wit::Gvk) -> Gvk {
    Gvk::new(&g.group, &g.version, &g.kind)
}
