//! Write kubewasm plugins in Rust.
//!
//! A plugin is a WASI 0.2 component built for `wasm32-wasip2` that implements [`Plugin`] and
//! exports it with [`export_plugin!`]. The host owns every watch and the cache: the plugin
//! says what it wants in [`Plugin::describe`], receives [`Event`]s in [`Plugin::handle`], and
//! asks the cache questions through [`cache`]. Objects are handles to the host's cached
//! objects ([`Object`]): a plugin reads the fields it needs (`pod.text("/status/phase")`,
//! `pod.label("app")`, `pod.owner_references()`) or parses the whole object when it wants a
//! typed view (`pod.parse::<k8s::api::core::v1::Pod>()`). Instances are disposable (after a trap, on a
//! reload): what must outlive one (an alert already sent) goes in [`state`].
//!
//! Contract `kubewasm:plugin@0.5.0`. Besides events: change filters
//! ([`Subscription::on_changes`]), declared reads ([`Subscription::fields`],
//! [`Subscription::metadata_only`]), requeues ([`triggers::requeue_after`]),
//! [`Plugin::synced`], schedules ([`Manifest::schedule`], [`Plugin::tick`]), [`state`], and
//! admission ([`Manifest::admission`], [`Plugin::admit`]).
//!
//! ```no_run
//! use kubewasm_sdk::{Event, Gvk, HandleError, Manifest, Plugin, Subscription, export_plugin, log};
//!
//! struct NewPods;
//!
//! impl Plugin for NewPods {
//!     fn describe() -> Manifest {
//!         Manifest::new().subscribe(Subscription::to(Gvk::pod()).selector("app=web"))
//!     }
//!
//!     fn handle(event: Event<'_>) -> Result<(), HandleError> {
//!         if let Event::Added(added) = &event {
//!             // Objects are handles: each call reads one thing from the host's cache.
//!             let node = added.object.text("/spec/nodeName")?.unwrap_or_else(|| "-".into());
//!             log::info("new pod", &[("pod", &added.object.key()), ("node", &node)]);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! export_plugin!(NewPods);
//! # fn main() {}
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --release` and drop the `.wasm` into the
//! host's plugins folder.

pub mod index;
pub mod selector;

/// The `apiVersion` string for a group and version: `group/version`, or `version` for the
/// core group (empty group).
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// The cache's key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

#[cfg(feature = "guest")]
mod guest;
#[cfg(feature = "guest")]
pub mod status;
#[cfg(feature = "guest")]
pub use guest::*;

/// Typed Kubernetes objects (the `k8s` feature): `object.parse::<k8s::api::core::v1::Pod>()`.
#[cfg(feature = "k8s")]
pub use k8s_openapi as k8s;
