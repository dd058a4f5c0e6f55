//! The `check`, `rbac` and `status` subcommands, and the shared client and election setup.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use kubewasm::config::HostConfig;
use kubewasm::gvk::Gvk;
use kubewasm::informer::index::IndexFunc;
use kubewasm::leader::ElectionConfig;
use kubewasm::plugins::folder::plugin_files;
use kubewasm::plugins::inspect::{Inspection, inspect};
use kubewasm::plugins::{content_hash, plugin_name};
use kubewasm::rbac;
use kubewasm::runtime::Runtime;
use kubewasm::runtime::logging::TracingSink;

use crate::{load_config, wasm_runtime};

/// Arguments of `kubewasm check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The plugin component.
    plugin: PathBuf,
    /// Host configuration file, for the plugin's configuration and grants.
    #[arg(long, env = "KUBEWASM_CONFIG")]
    config: Option<PathBuf>,
    /// Folder for compiled plugin code (see `run`).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

/// Arguments of `kubewasm rbac`.
#[derive(clap::Args)]
pub struct RbacArgs {
    /// Folder of plugin components; default: `pluginsDir` of the configuration.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Host configuration file (grants shape what each plugin reads).
    #[arg(long, env = "KUBEWASM_CONFIG")]
    config: Option<PathBuf>,
    /// Name of the ClusterRole and its binding.
    #[arg(long, default_value = "kubewasm")]
    name: String,
    /// Namespace of the host's service account.
    #[arg(long, default_value = "kubewasm")]
    namespace: String,
    /// The host's service account.
    #[arg(long, default_value = "kubewasm")]
    service_account: String,
    /// Also grant what leader election needs (a Lease in the namespace); implied by
    /// `leaderElection.enabled` in the configuration.
    #[arg(long)]
    leader_elect: bool,
    /// Folder for compiled plugin code (see `run`).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

/// Arguments of `kubewasm status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// Address of the host's endpoints (its `metricsAddress`).
    #[arg(
        long,
        default_value = "127.0.0.1:9090",
        env = "KUBEWASM_METRICS_ADDRESS"
    )]
    address: String,
}

/// A client from a kubeconfig file and context, or the in-cluster service account.
pub async fn kube_client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// The plugins folder: the flag (or `KUBEWASM_PLUGINS`), else `pluginsDir` of the configuration.
pub fn plugins_dir(flag: Option<&Path>, config: &HostConfig) -> anyhow::Result<PathBuf> {
    flag.map(Path::to_owned)
        .or_else(|| config.plugins_dir.clone())
        .context("no plugins folder: pass --plugins (or KUBEWASM_PLUGINS) or set pluginsDir in the configuration")
}

/// The election's Lease and this replica's identity: `$POD_NAME` (or the host name) plus the
/// process id, so two hosts on one machine differ.
pub fn election_config(config: &HostConfig) -> ElectionConfig {
    let le = &config.leader_election;
    let namespace = le
        .namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into());
    let name = le.name.clone().unwrap_or_else(|| "kubewasm".into());
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|| "kubewasm".into());
    let mut election =
        ElectionConfig::new(&namespace, &name, &format!("{host}-{}", std::process::id()));
    if let Some(seconds) = le.lease_duration_seconds {
        election.lease_duration = std::time::Duration::from_secs(seconds);
        election.renew_deadline = election.lease_duration * 2 / 3;
    }
    election
}

/// Inspects one plugin file under `config` with `runtime`, off the async runtime.
async fn inspect_file(
    path: &Path,
    config: &HostConfig,
    runtime: &Arc<Runtime>,
) -> anyhow::Result<(String, String, Inspection)> {
    let (path, runtime) = (path.to_owned(), runtime.clone());
    let name = plugin_name(&path);
    let settings = config.settings(&name);
    tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
        let hash = content_hash(&bytes);
        let inspection = inspect(
            &runtime,
            &settings,
            Arc::new(TracingSink),
            &name,
            &path,
            &bytes,
            &hash,
        )?;
        Ok((name, hash, inspection))
    })
    .await?
}

/// `kubewasm check`.
pub async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let (name, hash, inspection) = inspect_file(
        &args.plugin,
        &config,
        &Arc::new(wasm_runtime(args.cache_dir.as_deref())?),
    )
    .await?;
    let m = &inspection.manifest;
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!(
        "plugin {name} (version {hash}) from {}: valid",
        args.plugin.display()
    ));
    line("subscribes to:".into());
    for (gvk, filter) in &m.subscriptions {
        let namespaces = if filter.namespaces.is_empty() {
            "all namespaces".to_owned()
        } else {
            format!("namespaces {}", filter.namespaces.join(", "))
        };
        let selector = filter.selector.to_string();
        let selector = if selector.is_empty() {
            "every label".to_owned()
        } else {
            format!("labels {selector}")
        };
        line(format!("  {gvk}  ({namespaces}; {selector})"));
    }
    if m.subscriptions.is_empty() {
        line("  nothing".into());
    }
    let subscribed: BTreeSet<&Gvk> = m.subscriptions.iter().map(|(g, _)| g).collect();
    let queried: Vec<String> = m
        .cached
        .iter()
        .filter(|g| !subscribed.contains(g))
        .map(Gvk::to_string)
        .collect();
    line(format!(
        "queries (besides its subscriptions): {}",
        if queried.is_empty() {
            "none".to_owned()
        } else {
            queried.join(", ")
        }
    ));
    for index in &m.indexes {
        if let IndexFunc::JsonPointer(pointer) = &index.func {
            line(format!(
                "index: {} {:?} on {pointer}",
                index.gvk, index.name
            ));
        }
    }
    line(format!(
        "resync: {}",
        m.resync
            .map_or_else(|| "off".to_owned(), |d| format!("every {d:?}"))
    ));
    line(format!(
        "may read ({}):",
        args.config.as_ref().map_or_else(
            || "no configuration: whatever its manifest declares except Secrets".to_owned(),
            |c| format!("under {}", c.display())
        )
    ));
    for gvk in &m.cached {
        line(format!("  {gvk}  get, list, watch"));
    }
    for gvk in inspection.denied() {
        line(format!(
            "  {gvk}  DENIED: not granted to plugins.{name}; its queries answer `denied`"
        ));
    }
    let secrets = &inspection.ctx.secrets;
    if !secrets.is_empty() {
        let mut secrets: Vec<&String> = secrets.iter().collect();
        secrets.sort();
        line(format!(
            "  Secrets, only: {}",
            secrets
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// `kubewasm rbac`.
pub async fn rbac(args: RbacArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let dir = plugins_dir(args.plugins.as_deref(), &config)?;
    // Exactly the files `run` would load from the folder.
    let files = plugin_files(&dir).with_context(|| format!("plugins folder {}", dir.display()))?;
    // One engine for every file (each new one would start its own epoch ticker).
    let runtime = Arc::new(wasm_runtime(args.cache_dir.as_deref())?);
    let mut types = BTreeSet::new();
    let mut failed = Vec::new();
    for file in &files {
        match inspect_file(file, &config, &runtime).await {
            Ok((_, _, inspection)) => types.extend(inspection.manifest.cached.iter().cloned()),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    anyhow::ensure!(
        failed.is_empty(),
        "no RBAC printed: these plugins do not load:\n{}",
        failed.join("\n")
    );
    let identity = rbac::Identity {
        name: args.name,
        namespace: args.namespace,
        service_account: args.service_account,
        leader_election: args.leader_elect || config.leader_election.enabled,
    };
    let names: Vec<String> = files.iter().map(|f| plugin_name(f)).collect();
    let sources = format!("the plugins {}", names.join(", "));
    print!("{}", rbac::render(&types, &identity, &sources));
    Ok(ExitCode::SUCCESS)
}

/// `kubewasm status`: one line per plugin from the host's `/status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let address = args.address.trim_start_matches("http://").to_owned();
    let body = tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut stream = std::net::TcpStream::connect(&address)
            .with_context(|| format!("cannot reach the host at {address}"))?;
        write!(
            stream,
            "GET /status HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .context("malformed HTTP response")?;
        anyhow::ensure!(
            head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
            "{}",
            head.lines().next().unwrap_or_default()
        );
        Ok(body.to_owned())
    })
    .await??;
    let status: serde_json::Value = serde_json::from_str(&body).context("malformed /status")?;
    let ready = status["ready"].as_bool().unwrap_or(false);
    let leader = status["leader"].as_bool().unwrap_or(false);
    println!(
        "host: {}, {}",
        if ready { "ready" } else { "not ready" },
        if leader {
            "delivering"
        } else {
            "follower (standby)"
        }
    );
    for reason in status["not_ready"].as_array().into_iter().flatten() {
        println!("  not ready: {}", reason.as_str().unwrap_or_default());
    }
    println!(
        "{:<24} {:<12} {:<10} {:>10} {:>8} {:>7}  LAST ERROR",
        "PLUGIN", "VERSION", "STATE", "DELIVERED", "FAILED", "QUEUED"
    );
    for p in status["plugins"].as_array().into_iter().flatten() {
        let state = if p["standby"].as_bool() == Some(true) {
            "standby"
        } else if p["degraded"].as_bool() == Some(true) {
            "degraded"
        } else if p["synced"].as_bool() == Some(true) {
            "running"
        } else {
            "syncing"
        };
        let error = p["reload_error"]
            .as_str()
            .map(|e| format!("reload failed: {e}"))
            .or_else(|| p["last_error"].as_str().map(str::to_owned))
            .unwrap_or_default();
        println!(
            "{:<24} {:<12} {:<10} {:>10} {:>8} {:>7}  {error}",
            p["name"].as_str().unwrap_or_default(),
            p["hash"].as_str().unwrap_or_default(),
            state,
            p["delivered"].as_u64().unwrap_or(0),
            p["failed"].as_u64().unwrap_or(0),
            p["queued"].as_u64().unwrap_or(0),
        );
    }
    Ok(ExitCode::SUCCESS)
}
