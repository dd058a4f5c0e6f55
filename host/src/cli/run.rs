//! `kubewasm run`: the agent, until SIGTERM or Ctrl-C (or a lost leadership).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use kubewasm::agent::{Agent, AgentOptions, Cluster, Exit, identity, kube_client};
use kubewasm::object::Transform;
use kubewasm::split::Sharding;
use kubewasm::traces::Traces;
use kubewasm::wasm::logging::TracingSink;
use kubewasm::wasm::{Compiler, Engine};

use super::{load_config, plugins_dir};

/// Arguments of `kubewasm run`.
#[derive(clap::Args)]
pub struct RunArgs {
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

/// `kubewasm run`.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let plugins = plugins_dir(args.plugins.as_deref(), &config)?;
    let cluster = match args.cluster {
        Some(dir) => Cluster::Folder(dir),
        None => {
            Cluster::Kube(kube_client(args.kubeconfig.as_deref(), args.context.as_deref()).await?)
        }
    };
    let identity = identity();
    let election = (args.leader_elect || config.elects()).then(|| config.election(&identity));
    let sharding = config
        .members(&identity)
        .map(|(members, key)| Sharding { members, key });
    let options = AgentOptions {
        transform: if args.keep_managed_fields {
            Transform::keep_everything()
        } else {
            Transform::default()
        },
        compiled_cache: args.cache_dir.or_else(Engine::default_cache_dir),
        metrics_address: args.metrics_address.or(config.metrics_address),
        election,
        sharding,
        compiler: Compiler::child_of_this_binary(config.compile_memory_bytes)?,
        ..AgentOptions::new(cluster, config, Arc::new(TracingSink))
    };
    let mut shutdown = std::pin::pin!(shutdown_signal()?);
    let otlp_metrics = options.config.otlp_metrics.clone();
    let traces = match &options.config.traces {
        Some(config) => Some(Traces::start(config)?),
        None => None,
    };
    // SIGTERM is honoured while starting too: reading a large manifests folder or compiling
    // a plugin is given up, not waited for.
    let mut agent = tokio::select! {
        agent = Agent::start(options) => agent?,
        () = &mut shutdown => {
            tracing::info!("stopped while starting");
            return Ok(ExitCode::SUCCESS);
        }
    };
    // Plugins' own metrics over OTLP, from every replica, until the process ends.
    let _exporting = otlp_metrics.map(|config| {
        let host = agent.plugins().clone();
        tokio::spawn(kubewasm::otlp_metrics::run(config, move || host.metrics()))
    });
    let exit = tokio::select! {
        first = agent.follow_plugins(&plugins) => {
            let first = first?;
            tracing::info!(
                loaded = first.loaded.len(),
                failed = first.failed.len(),
                folder = %plugins.display(),
                "plugins ready; following the folder for changes"
            );
            if first.loaded.is_empty() {
                tracing::warn!(folder = %plugins.display(), "no plugin loaded yet: drop a .wasm into the folder");
            }
            None
        }
        () = &mut shutdown => Some(()),
    };
    let exit = match exit {
        // Stopped while loading the plugins: stop what did start (compiles are killed).
        Some(()) => agent.run_until(async {}).await,
        None => agent.run_until(shutdown).await,
    };
    if let Some(traces) = traces {
        // The last spans, sent within the export timeout.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
    Ok(match exit {
        Exit::Stopped => ExitCode::SUCCESS,
        Exit::LostLeadership => {
            tracing::error!("stopping so that this replica restarts as a follower");
            ExitCode::FAILURE
        }
    })
}

/// Completes on Ctrl-C or SIGTERM. The signals are caught from the moment this is called,
/// so call it before anything a signal should be able to stop.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}
