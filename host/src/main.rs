//! The `kubewasm` command line.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kubewasm::config::HostConfig;
use kubewasm::informer::factory::InformerFactory;
use kubewasm::object::Transform;
use kubewasm::plugins::PluginHost;
use kubewasm::plugins::folder::FolderWatcher;
use kubewasm::runtime::Runtime;
use kubewasm::runtime::logging::TracingSink;
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
}

#[derive(clap::Args)]
struct RunArgs {
    /// Folder of plugin components (`*.wasm`).
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: PathBuf,
    /// Folder of YAML/JSON manifests to use instead of a Kubernetes cluster.
    #[arg(long, conflicts_with_all = ["kubeconfig", "context"])]
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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match cli.log_format {
        LogFormat::Human => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match cli.command {
        Command::Run(args) => runtime.block_on(run(args)),
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => HostConfig::load(path)?,
        None => HostConfig::default(),
    };
    let transform = if args.keep_managed_fields {
        Transform {
            drop_managed_fields: false,
            drop_last_applied: false,
        }
    } else {
        Transform::default()
    };
    let handle = tokio::runtime::Handle::current();
    let source: Arc<dyn Source> = match &args.cluster {
        Some(dir) => {
            let folder = ManifestFolder::open(dir, transform)?;
            tracing::info!(folder = %dir.display(), objects = folder.len(), "using the manifests folder as the cluster");
            Arc::new(folder)
        }
        None => Arc::new(KubeSource::new(
            kube_client(&args).await?,
            transform,
            handle.clone(),
        )),
    };
    let factory = InformerFactory::new(source, handle);
    let mut wasm = Runtime::new().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let cache_dir = args.cache_dir.clone().or_else(|| {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("kubewasm/compiled"))
    });
    if let Some(dir) = cache_dir {
        wasm = match wasm.with_cache(&dir) {
            Ok(cached) => cached,
            Err(e) => {
                tracing::warn!(folder = %dir.display(), "no compiled-code cache: {e}");
                Runtime::new().map_err(|e| anyhow::anyhow!("{e:#}"))?
            }
        };
    }
    let wasm = Arc::new(wasm);
    let mut host = PluginHost::new(
        wasm,
        factory,
        Arc::new(TracingSink),
        config.defaults().limits,
    );
    for (name, settings) in config.plugins() {
        host.configure(&name, settings);
    }
    let host = Arc::new(host);
    let watched = host.clone();
    let dir = args.plugins.clone();
    let (watcher, first) = tokio::task::spawn_blocking(move || FolderWatcher::start(watched, &dir))
        .await?
        .with_context(|| format!("plugins folder {}", args.plugins.display()))?;
    tracing::info!(
        loaded = first.loaded.len(),
        failed = first.failed.len(),
        folder = %args.plugins.display(),
        "plugins ready; following the folder for changes"
    );
    if first.loaded.is_empty() {
        tracing::warn!(folder = %args.plugins.display(), "no plugin loaded yet: drop a .wasm into the folder");
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    drop(watcher);
    tokio::task::spawn_blocking(move || host.shutdown()).await?;
    Ok(())
}

async fn kube_client(args: &RunArgs) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
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
