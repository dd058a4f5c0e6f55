//! The `kubewasm` command line.

mod cli;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kubewasm::config::HostConfig;
use kubewasm::informer::factory::InformerFactory;
use kubewasm::leader::{Elector, lead_while_elected};
use kubewasm::object::Transform;
use kubewasm::plugins::PluginHost;
use kubewasm::plugins::folder::FolderWatcher;
use kubewasm::runtime::Runtime;
use kubewasm::runtime::logging::TracingSink;
use kubewasm::serve::{Endpoints, serve};
use kubewasm::source::Source;
use kubewasm::source::kube::KubeSource;
use kubewasm::source::manifests::ManifestFolder;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "kubewasm",
    version,
    about = "React to Kubernetes events with WebAssembly components"
)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true, env = "KUBEWASM_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the informers and deliver their events to the plugins in a folder.
    Run(RunArgs),
    /// Validate a plugin and print what it subscribes to, queries and indexes, and what it
    /// may read under the configuration.
    Check(cli::CheckArgs),
    /// Print the least-privilege RBAC for the host's service account.
    Rbac(cli::RbacArgs),
    /// Print the plugins of a running host (from its `/status` endpoint).
    Status(cli::StatusArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Folder of plugin components (`*.wasm`); default: `pluginsDir` of the configuration.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Folder of YAML/JSON manifests to use instead of a Kubernetes cluster.
    #[arg(long, conflicts_with_all = ["kubeconfig", "context", "leader_elect"])]
    cluster: Option<PathBuf>,
    /// Kubeconfig file (default: in-cluster service account, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    context: Option<String>,
    /// Keep `metadata.managedFields` and the last-applied annotation in cached objects.
    #[arg(long)]
    keep_managed_fields: bool,
    /// Host configuration file (YAML): plugin limits, grants and configuration.
    #[arg(long, env = "KUBEWASM_CONFIG")]
    config: Option<PathBuf>,
    /// Folder for compiled plugin code, reused across restarts (default: the user's cache
    /// folder, `kubewasm/compiled`). Keep it writable by the host alone.
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Address for /metrics, /healthz, /readyz and /status (default: `metricsAddress` of the
    /// configuration; none: off).
    #[arg(long, env = "KUBEWASM_METRICS_ADDRESS")]
    metrics_address: Option<std::net::SocketAddr>,
    /// Elect a leader through a Lease; only the leader delivers events.
    #[arg(long, env = "KUBEWASM_LEADER_ELECT")]
    leader_elect: bool,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match cli.log_format {
        LogFormat::Human => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .and_then(|runtime| {
            runtime.block_on(async {
                match cli.command {
                    Command::Run(args) => run(args).await,
                    Command::Check(args) => cli::check(args).await,
                    Command::Rbac(args) => cli::rbac(args).await,
                    Command::Status(args) => cli::status(args).await,
                }
            })
        });
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubewasm: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The compiled-code cache folder: `--cache-dir`, else the user's cache folder.
fn compiled_cache(dir: Option<&Path>) -> Option<PathBuf> {
    dir.map(Path::to_owned).or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("kubewasm/compiled"))
    })
}

/// A wasm runtime with the compiled-code cache when it can be used.
fn wasm_runtime(cache_dir: Option<&Path>) -> anyhow::Result<Runtime> {
    let wasm = Runtime::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let Some(dir) = compiled_cache(cache_dir) else {
        return Ok(wasm);
    };
    match wasm.with_cache(&dir) {
        Ok(cached) => Ok(cached),
        Err(e) => {
            tracing::warn!(folder = %dir.display(), "no compiled-code cache: {e}");
            Runtime::new().map_err(|e| anyhow::anyhow!("{e:#}"))
        }
    }
}

fn load_config(path: Option<&Path>) -> anyhow::Result<HostConfig> {
    Ok(match path {
        Some(path) => HostConfig::load(path)?,
        None => HostConfig::default(),
    })
}

async fn run(args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let plugins_dir = cli::plugins_dir(args.plugins.as_deref(), &config)?;
    let metrics_address = match (args.metrics_address, &config.metrics_address) {
        (Some(address), _) => Some(address),
        // Validated when the configuration was read.
        (None, Some(address)) => address.parse().ok(),
        (None, None) => None,
    };
    let leader_elect = args.leader_elect || config.leader_election.enabled;
    let shutdown_timeout = Duration::from_secs(config.shutdown_timeout_seconds.unwrap_or(10));
    let transform = if args.keep_managed_fields {
        Transform {
            drop_managed_fields: false,
            drop_last_applied: false,
        }
    } else {
        Transform::default()
    };
    let handle = tokio::runtime::Handle::current();
    let (source, kube, client): (Arc<dyn Source>, _, _) = match &args.cluster {
        Some(dir) => {
            let folder = ManifestFolder::open(dir, transform)?;
            tracing::info!(folder = %dir.display(), objects = folder.len(), "using the manifests folder as the cluster");
            (Arc::new(folder), None, None)
        }
        None => {
            let client =
                cli::kube_client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
            let kube = Arc::new(KubeSource::new(client.clone(), transform, handle.clone()));
            (kube.clone(), Some(kube), Some(client))
        }
    };
    let factory = InformerFactory::new(source, handle);
    let wasm = Arc::new(wasm_runtime(args.cache_dir.as_deref())?);
    let mut host = PluginHost::new(
        wasm,
        factory.clone(),
        Arc::new(TracingSink),
        config.defaults().limits,
    );
    for (name, settings) in config.plugins() {
        host.configure(&name, settings);
    }
    let host = Arc::new(host);
    let leading = Arc::new(AtomicBool::new(!leader_elect));
    if leader_elect {
        host.follow();
    }
    let endpoints = Arc::new(Endpoints {
        host: host.clone(),
        factory,
        kube,
        started: AtomicBool::new(false),
        leader: leading.clone(),
    });
    let server = match metrics_address {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("metrics address {address}"))?;
            tracing::info!(%address, "serving /metrics, /healthz, /readyz and /status");
            Some(tokio::spawn(serve(listener, endpoints.clone())))
        }
        None => None,
    };

    let watched = host.clone();
    let dir = plugins_dir.clone();
    let (watcher, first) = tokio::task::spawn_blocking(move || FolderWatcher::start(watched, &dir))
        .await?
        .with_context(|| format!("plugins folder {}", plugins_dir.display()))?;
    endpoints.started.store(true, Ordering::Relaxed);
    tracing::info!(
        loaded = first.loaded.len(),
        failed = first.failed.len(),
        folder = %plugins_dir.display(),
        "plugins ready; following the folder for changes"
    );
    if first.loaded.is_empty() {
        tracing::warn!(folder = %plugins_dir.display(), "no plugin loaded yet: drop a .wasm into the folder");
    }

    let (lost_tx, mut lost_rx) = tokio::sync::oneshot::channel::<()>();
    let election = match (leader_elect, client) {
        (true, Some(client)) => {
            let config = cli::election_config(&config);
            tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "leader election on: waiting on standby");
            let elector = Elector::new(client.clone(), config.clone(), leading.clone());
            let host = host.clone();
            let task = tokio::spawn(async move {
                lead_while_elected(elector, host).await;
                let _ = lost_tx.send(());
            });
            Some((task, client, config))
        }
        _ => None,
    };

    let mut code = std::process::ExitCode::SUCCESS;
    tokio::select! {
        () = shutdown_signal() => tracing::info!("shutting down: no new events; in-flight handler calls may finish within {shutdown_timeout:?}"),
        _ = &mut lost_rx => {
            tracing::error!("lost the leadership: stopping so that this replica restarts as a follower");
            code = std::process::ExitCode::FAILURE;
        }
    }
    drop(watcher);
    if let Some((task, ..)) = &election {
        task.abort();
    }
    let stopping = host.clone();
    let stopped = tokio::task::spawn_blocking(move || stopping.shutdown());
    if tokio::time::timeout(shutdown_timeout, stopped)
        .await
        .is_err()
    {
        tracing::warn!("handler calls still running after {shutdown_timeout:?}; exiting anyway");
    }
    // Only now, with delivery stopped, may another replica take over.
    if let Some((_, client, config)) = election {
        Elector::new(client, config, leading).release().await;
    }
    if let Some(server) = server {
        server.abort();
    }
    Ok(code)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(e) => {
                    tracing::warn!("cannot listen for SIGTERM: {e}");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
