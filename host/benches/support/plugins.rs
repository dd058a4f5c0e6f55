//! How benchmarks start an agent, what they read of its plugins, and the admission review
//! they decide.

use std::path::Path;
use std::sync::Arc;

use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::config::HostConfig;
use kubewasm::plugins::PluginStatus;
use kubewasm_testenv::generate;
use serde_json::json;

/// An agent's options as the benchmarks start one on `cluster` with `config`: compiled code
/// cached across runs in the target folder, plugin lines dropped.
pub fn agent_options(cluster: Cluster, config: HostConfig) -> AgentOptions {
    AgentOptions {
        compiled_cache: Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("compiled")),
        ..AgentOptions::new(cluster, config, Arc::new(super::instance::Discard))
    }
}

/// `name`'s status in `agent`.
pub fn status(agent: &Agent, name: &str) -> PluginStatus {
    agent
        .plugins()
        .status()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("plugin {name} is running"))
}

/// A CREATE review of a pod with two containers from allowed registries (4 KB).
pub fn review_body() -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0a1b2c3d-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "shop",
            "name": "web-1",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": generate::pod(1, 4096, 10),
            "dryRun": false
        }
    })
    .to_string()
    .into_bytes()
}
