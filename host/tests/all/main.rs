//! kubewasm's integration tests, in one binary: each links wasmtime and kube once instead of
//! once per file (wasmtime's own `tests/all` does the same). Run one file's tests with
//! `cargo test -p kubewasm --test all e2e_split::`.
//!
//! Kept apart, each in a binary of its own, are the tests that need a process to themselves:
//! `host_copies` (a counting global allocator), `traces` (the process's tracer provider),
//! `cpu_deadline` (keeps a core busy under timed checks) and `hostile_all` (the host's bounds
//! measured with nothing else running).

#[path = "../support/mod.rs"]
mod support;

mod admission_sandbox;
mod contract_versions;
mod controllers;
mod deploy_and_cli;
mod e2e_admission;
mod e2e_agent;
mod e2e_apiserver;
mod e2e_controllers;
mod e2e_members;
mod e2e_recovery;
mod e2e_scope;
mod e2e_shard;
mod e2e_split;
mod e2e_trial;
mod e2e_triggers;
mod e2e_writes;
mod example_cluster;
mod folder_writes;
mod helm_chart;
mod hot_reload;
mod http_grants;
mod kubewasm_test;
mod languages;
mod layers;
mod new_plugins;
mod plugin_resources;
mod reflector_faults;
mod registry_hostile;
mod registry_plugins;
mod sandbox;
mod write_storms;
