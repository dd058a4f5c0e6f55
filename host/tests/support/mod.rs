//! Helpers shared by the integration tests: reading what plugins logged.
// Each test binary uses its own subset.
#![allow(dead_code)]

use kubewasm::wasm::logging::PluginLogRecord;

/// The lines of one plugin.
pub fn of(records: Vec<PluginLogRecord>, plugin: &str) -> Vec<PluginLogRecord> {
    records.into_iter().filter(|r| r.plugin == plugin).collect()
}

/// Every line, one per row, for assertion messages.
pub fn render(lines: &[PluginLogRecord]) -> String {
    lines
        .iter()
        .map(|r| format!("  [{}] {} {:?}", r.plugin, r.message, r.fields))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What audit-log lines say about objects of `kind`: `event key flag`, for example
/// `added ns/a initial`, `updated ns/a`, `deleted ns/b stale`.
pub fn audit(lines: &[PluginLogRecord], kind: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|r| r.field("kind") == Some(kind))
        .map(|r| {
            let line = format!(
                "{} {} {}",
                r.message,
                r.field("key").unwrap_or(""),
                r.field("flag").unwrap_or("")
            );
            line.trim_end().to_owned()
        })
        .collect()
}

/// The values of `field` in the lines whose message starts with `message`.
pub fn field_values(lines: &[PluginLogRecord], message: &str, field: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|r| r.message.starts_with(message))
        .filter_map(|r| r.field(field).map(str::to_owned))
        .collect()
}

/// A two-thread tokio runtime for the sources' and informers' tasks.
pub fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The checkout's root folder.
pub fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Copies examples/cluster into `dir`.
pub fn copy_examples(dir: &std::path::Path) {
    let examples = root().join("examples/cluster");
    for entry in std::fs::read_dir(examples).expect("read examples") {
        let entry = entry.expect("dir entry");
        std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy manifest");
    }
}

/// A host configuration handing each named plugin its `init` configuration (JSON text), with
/// the default limits and grants.
pub fn configs(configs: &[(&str, &str)]) -> kubewasm::config::HostConfig {
    let mut config = kubewasm::config::HostConfig::default();
    for (name, json) in configs {
        let mut settings = config.plugins.defaults.clone();
        settings.config = (*json).to_owned();
        config.plugins.named.insert((*name).to_owned(), settings);
    }
    config
}

/// The writes the test file `file` (relative to the checkout) grants plugin `name`: tests of
/// an example plugin on other clusters grant it what its `kubewasm test` file does.
pub fn writes_granted_by(file: &str, name: &str) -> Vec<kubewasm::write::WriteGrant> {
    let spec = kubewasm::testing::spec::Spec::load(&root().join(file), None)
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    spec.host.plugins.named[name].grants.writes.clone()
}

/// A host configuration for the labeler (labelling pods `team: shop`), granted to patch
/// Pods in `namespace` and nothing else.
pub fn labeler_in(namespace: &str) -> kubewasm::config::HostConfig {
    use kubewasm::write::{Verb, WriteGrant};
    let mut config = configs(&[("labeler", r#"{"key": "team", "value": "shop"}"#)]);
    if let Some(settings) = config.plugins.named.get_mut("labeler") {
        settings.grants.writes = vec![WriteGrant {
            resources: vec![kubewasm::gvk::Gvk::new("", "v1", "Pod")],
            subresources: vec![],
            verbs: vec![Verb::Patch],
            namespaces: Some(vec![namespace.to_owned()]),
        }];
    }
    config
}

/// An agent on the manifests folder `cluster`, started the way `kubewasm run --cluster` starts
/// it, with plugin lines going to `sink`.
pub fn folder_agent(
    tokio: &tokio::runtime::Runtime,
    cluster: &std::path::Path,
    config: kubewasm::config::HostConfig,
    sink: std::sync::Arc<kubewasm::wasm::logging::MemorySink>,
) -> kubewasm::agent::Agent {
    use kubewasm::agent::Cluster;
    agent(tokio, Cluster::Folder(cluster.to_owned()), config, sink)
}

/// An agent on a snapshot of the manifests folder `cluster` that changes only when the test
/// calls `rescan` on the returned folder (so no rescan races a test's own writes).
pub fn snapshot_agent(
    tokio: &tokio::runtime::Runtime,
    cluster: &std::path::Path,
    config: kubewasm::config::HostConfig,
    sink: std::sync::Arc<kubewasm::wasm::logging::MemorySink>,
) -> (
    kubewasm::agent::Agent,
    std::sync::Arc<kubewasm::source::manifests::ManifestFolder>,
) {
    use kubewasm::source::manifests::ManifestFolder;
    let folder = std::sync::Arc::new(
        ManifestFolder::snapshot(cluster, kubewasm::object::Transform::default())
            .expect("read the cluster folder"),
    );
    let cluster = kubewasm::agent::Cluster::Source(folder.clone(), Some(folder.clone()));
    (agent(tokio, cluster, config, sink), folder)
}

fn agent(
    tokio: &tokio::runtime::Runtime,
    cluster: kubewasm::agent::Cluster,
    config: kubewasm::config::HostConfig,
    sink: std::sync::Arc<kubewasm::wasm::logging::MemorySink>,
) -> kubewasm::agent::Agent {
    use kubewasm::agent::{Agent, AgentOptions};
    let options = AgentOptions {
        compiler: compiler(),
        ..AgentOptions::new(cluster, config, sink)
    };
    tokio
        .block_on(Agent::start(options))
        .expect("the agent starts")
}

/// Compiling as `kubewasm run` does: in child processes of the kubewasm binary.
pub fn compiler() -> kubewasm::wasm::Compiler {
    kubewasm::wasm::Compiler::Child {
        exe: env!("CARGO_BIN_EXE_kubewasm").into(),
        memory_bytes: kubewasm::wasm::compiler::DEFAULT_COMPILE_MEMORY_BYTES,
    }
}

/// Creates every object of a multi-document YAML text (RBAC from `kubewasm rbac`) as `admin`.
pub async fn apply_yaml(admin: &kube::Client, yaml: &str) -> anyhow::Result<()> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    use serde::Deserialize;
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let object = DynamicObject::deserialize(doc)?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| anyhow::anyhow!("no type"))?;
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", &types.api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(ns) => Api::namespaced_with(admin.clone(), ns, &resource),
            None => Api::all_with(admin.clone(), &resource),
        };
        api.create(&PostParams::default(), &object).await?;
    }
    Ok(())
}

/// The status of plugin `name` on `agent` (all zero when it is not loaded).
pub fn plugin_status(
    agent: &kubewasm::agent::Agent,
    name: &str,
) -> kubewasm::plugins::PluginStatus {
    agent
        .plugins()
        .status()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_default()
}

/// The example plugins under the names examples/deploy and the Helm chart configure.
pub fn deployed_plugins() -> kubewasm_testenv::PluginFolder {
    kubewasm_testenv::PluginFolder::with(&[
        ("pod-phase", kubewasm_plugin_artifacts::POD_PHASE),
        (
            "deployment-view",
            kubewasm_plugin_artifacts::DEPLOYMENT_VIEW,
        ),
    ])
}

/// (id, command, nice) of each of this process's threads, from `/proc` (none elsewhere).
pub fn threads() -> Vec<(String, String, i32)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let (head, tail) = stat.rsplit_once(')')?;
            let command = head.split_once('(')?.1.to_owned();
            // After the command: state is field 3, nice field 19.
            let nice = tail.split_whitespace().nth(16)?.parse().ok()?;
            Some((t.file_name().to_string_lossy().into_owned(), command, nice))
        })
        .collect()
}

/// `GET path` from an HTTP/1.0 server at `address`: the status code and body.
pub fn http_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    kubewasm_testenv::agent_process::http_get(address, path)
}

/// A loopback address with a port free a moment ago.
pub fn free_address() -> std::net::SocketAddr {
    kubewasm_testenv::agent_process::free_address().expect("a free port")
}

/// Relists after 410 Gone, summed over `agent`'s reflectors.
pub fn relists(agent: &kubewasm::agent::Agent) -> u64 {
    agent
        .status()
        .reflectors
        .iter()
        .map(|(_, r)| r.relists)
        .sum()
}

/// Polls an async `check` every 100 ms until it holds, for at most `within`.
pub async fn until_async<F: std::future::Future<Output = anyhow::Result<bool>>>(
    what: &str,
    within: std::time::Duration,
    check: impl Fn() -> F,
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + within;
    while !check().await? {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{what} did not happen"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Polls `check` every 50 ms until it gives a value, for at most `within`.
pub async fn wait_for<T>(
    what: &str,
    within: std::time::Duration,
    check: impl Fn() -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{what} did not happen"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// An agent on `cluster` with `config`, following the plugins folder `folder`, once every
/// plugin in it loaded.
pub async fn following(
    cluster: kubewasm::agent::Cluster,
    config: kubewasm::config::HostConfig,
    folder: &std::path::Path,
) -> anyhow::Result<kubewasm::agent::Agent> {
    use kubewasm::agent::{Agent, AgentOptions};
    let options = AgentOptions::new(
        cluster,
        config,
        std::sync::Arc::new(kubewasm::wasm::logging::MemorySink::default()),
    );
    let mut agent = Agent::start(options).await?;
    let report = agent.follow_plugins(folder).await?;
    anyhow::ensure!(report.failed.is_empty(), "plugins failed: {report:?}");
    Ok(agent)
}
