//! kubewasm: Kubernetes informers whose events are handled by WebAssembly components.
//!
//! The path of one event: a [`source`] lists and watches a resource type, an
//! [`informer::Informer`] applies it to its [`informer::store::Store`] and fans it out to
//! subscribers, and [`plugins`] deliver it to each plugin's component through the [`wasm`]
//! sandbox. [`agent::Agent`] wires them together with the [`serve`] endpoints and [`leader`]
//! election.
//!
//! Layers, lowest first; a module imports only from layers below it (checked by
//! `tests/all/layers.rs`, which also keeps this list whole): `clock`, `text`, `priority`, `rate`,
//! `cpu`, `schedule`, `captured_log` (tests only), `whole_file`, `gvk`, `yaml`, `object`,
//! `shard`, `write`, `histogram`, `plugin_metrics`, `follow`, `leader`, `members`, `rbac`,
//! `oci`, `traces`, `otlp_metrics` · `source` · `informer` · `controller` · `wasm` · `plugins` · `keeper`,
//! `admission` · `config` · `crd`,
//! `split`, `serve` · `agent` · `testing`. [`keeper`] writes plugin state through to the
//! cluster while this replica leads; [`admission`] serves plugins' admission webhooks.

pub mod admission;
pub mod agent;
#[cfg(test)]
pub mod captured_log;
pub mod clock;
pub mod config;
pub mod controller;
pub mod cpu;
pub mod crd;
pub mod follow;
pub mod gvk;
pub mod histogram;
pub mod informer;
pub mod keeper;
pub mod leader;
pub mod members;
pub mod object;
pub mod oci;
pub mod otlp_metrics;
pub mod plugin_metrics;
pub mod plugins;
pub mod priority;
pub mod rate;
pub mod rbac;
pub mod schedule;
pub mod serve;
pub mod shard;
pub mod source;
pub mod split;
pub mod testing;
pub mod text;
pub mod traces;
pub mod wasm;
pub mod whole_file;
pub mod write;
pub mod yaml;

/// The memory allocator the agent runs with, for its binary and for benchmarks that measure it.
///
/// glibc's allocator takes an arena lock whenever one thread frees a block of more than 1 KiB
/// that another allocated, and every cached object is decoded on a reflector's thread and
/// dropped on the informer's or a plugin's: the ingest path spent about a tenth of its time in
/// those locks. jemalloc frees into the freeing thread's cache. (mimalloc did too, but kept
/// each idle plugin thread's pages resident: 300 KiB a plugin.)
pub use tikv_jemallocator::Jemalloc as Allocator;
