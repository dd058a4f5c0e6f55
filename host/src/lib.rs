//! kubewasm: Kubernetes informers whose events are handled by WebAssembly components.
//!
//! The path of one event: a [`source`] lists and watches a resource type, an
//! [`informer::Informer`] applies it to its [`informer::store::Store`] and fans it out to
//! subscribers, and [`plugins`] deliver it to each plugin's component through [`runtime`].

pub mod config;
pub mod gvk;
pub mod informer;
pub mod leader;
pub mod metrics;
pub mod object;
pub mod plugins;
pub mod rbac;
pub mod runtime;
pub mod serve;
pub mod source;
pub mod watch;
