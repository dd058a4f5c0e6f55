//! The subcommands, one file each, and what they share.

mod build;
mod check;
mod finalizers;
mod new;
mod promote;
mod rbac;
mod record;
mod run;
mod status;
mod test;
mod top;
mod webhooks;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kubewasm::config::HostConfig;
use kubewasm::plugins::folder::plugin_files;
use kubewasm::plugins::inspect::{Inspection, inspect};
use kubewasm::plugins::{PluginFile, plugin_name};
use kubewasm::wasm::logging::TracingSink;
use kubewasm::wasm::{Compiler, Engine};

/// The command line.
#[derive(Parser)]
#[command(
    name = "kubewasm",
    version,
    about = "React to Kubernetes events with WebAssembly components"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true, env = "KUBEWASM_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How log lines are written.
#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// One readable line each.
    Human,
    /// One JSON object each.
    Json,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Run the informers and deliver their events to the plugins in a folder.
    Run(run::RunArgs),
    /// Validate a plugin and print what it subscribes to, queries and indexes, and what it
    /// may read under the configuration.
    Check(check::CheckArgs),
    /// Print the least-privilege RBAC for the host's service account.
    Rbac(rbac::RbacArgs),
    /// Print the Validating/MutatingWebhookConfiguration for the plugins that declare
    /// admission.
    Webhooks(webhooks::WebhooksArgs),
    /// Print the plugins of a running host (from its `/status` endpoint).
    Status(status::StatusArgs),
    /// Show what each plugin of a running host costs, refreshed (CPU, calls, memory,
    /// writes, HTTP, state).
    Top(top::TopArgs),
    /// Record a cluster's objects and changes as a test file for `test` to replay.
    Record(record::RecordArgs),
    /// Build a Go plugin package as a component (Go's tool chain, the WASI adapter included).
    Build(build::BuildArgs),
    /// Create a plugin project (Rust, Python, JavaScript or Go) with a test.
    New(new::NewArgs),
    /// Run a plugin through the cluster states of test files and check what it logs and
    /// writes in each.
    Test(test::TestArgs),
    /// Release the objects a removed controller plugin still holds with its finalizer.
    Finalizers(finalizers::FinalizersArgs),
    /// Replace a plugin of the plugins folder by its candidate (NAME.candidate.wasm).
    Promote(promote::PromoteArgs),
}

impl Command {
    /// The log filter when `RUST_LOG` is unset: `test` reports on stdout and logs only
    /// warnings; the others log at info.
    pub fn default_log_filter(&self) -> &'static str {
        match self {
            Command::Test(_) | Command::Record(_) | Command::Finalizers(_) => {
                "warn,kube_client::client::builder=off"
            }
            _ => kubewasm::agent::LOG_FILTER,
        }
    }

    /// Runs the subcommand.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Run(args) => run::run(args).await,
            Command::Check(args) => check::check(args).await,
            Command::Rbac(args) => rbac::rbac(args).await,
            Command::Webhooks(args) => webhooks::webhooks(args).await,
            Command::Status(args) => status::status(args).await,
            Command::Top(args) => top::top(args).await,
            Command::Test(args) => test::test(args).await,
            Command::New(args) => new::new(args).await,
            Command::Build(args) => build::build(args).await,
            Command::Record(args) => record::record_cmd(args).await,
            Command::Finalizers(args) => finalizers::finalizers(args).await,
            Command::Promote(args) => promote::promote(args).await,
        }
    }
}

/// The configuration file, or the defaults without one.
fn load_config(path: Option<&Path>) -> anyhow::Result<HostConfig> {
    Ok(match path {
        Some(path) => HostConfig::load(path)?,
        None => HostConfig::default(),
    })
}

/// The plugins folder: the flag (or `KUBEWASM_PLUGINS`), else `pluginsDir` of the configuration.
fn plugins_dir(flag: Option<&Path>, config: &HostConfig) -> anyhow::Result<PathBuf> {
    flag.map(Path::to_owned)
        .or_else(|| config.plugins_dir.clone())
        .context("no plugins folder: pass --plugins (or KUBEWASM_PLUGINS) or set pluginsDir in the configuration")
}

/// A wasm engine with the compiled-code cache in `dir`, else in the user's cache folder.
fn engine(cache_dir: Option<&Path>, config: &HostConfig) -> anyhow::Result<Arc<Engine>> {
    let dir = cache_dir
        .map(Path::to_owned)
        .or_else(Engine::default_cache_dir);
    Ok(Arc::new(
        Engine::with_cache(dir.as_deref(), config.compiled_cache_bytes)
            .map_err(|e| anyhow::anyhow!("{e:#}"))?
            .compile_in(Compiler::child_of_this_binary(config.compile_memory_bytes)?),
    ))
}

/// The plugins a generating command (`rbac`, `webhooks`) prints for: the folder, the host's
/// configuration and the compiled-code cache.
#[derive(clap::Args)]
pub struct FolderArgs {
    /// Folder of plugin components; default: `pluginsDir` of the configuration.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Host configuration file (grants and each plugin's configuration shape what is
    /// printed).
    #[arg(long, env = "KUBEWASM_CONFIG")]
    config: Option<PathBuf>,
    /// Folder for compiled plugin code (see `run`).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

/// What a generating command prints for: the configuration, the folder, and every plugin of
/// it inspected.
struct Folder {
    config: HostConfig,
    dir: PathBuf,
    loaded: Vec<(PluginFile, Inspection)>,
}

impl FolderArgs {
    /// Inspects every plugin `run` would load; an error naming those that do not load, as
    /// nothing is printed for `what` then.
    async fn inspect(&self, what: &str) -> anyhow::Result<Folder> {
        let config = load_config(self.config.as_deref())?;
        let dir = plugins_dir(self.plugins.as_deref(), &config)?;
        // One engine for every file (each new one would start its own epoch ticker).
        let engine = engine(self.cache_dir.as_deref(), &config)?;
        let (loaded, failed) = inspect_all(&dir, &config, &engine).await?;
        anyhow::ensure!(
            failed.is_empty(),
            "no {what} printed: these plugins do not load:\n{}",
            failed.join("\n")
        );
        Ok(Folder {
            config,
            dir,
            loaded,
        })
    }
}

/// Every plugin `run` would load with `config` from folder `dir` and from registries, inspected:
/// those that load, and an error line for each that does not.
async fn inspect_all(
    dir: &Path,
    config: &HostConfig,
    engine: &Arc<Engine>,
) -> anyhow::Result<(Vec<(PluginFile, Inspection)>, Vec<String>)> {
    // Exactly the files `run` would load from the folder.
    let files = plugin_files(dir).with_context(|| format!("plugins folder {}", dir.display()))?;
    let mut loaded = Vec::new();
    let mut failed = Vec::new();
    // A file named like a plugin pulled from a registry is not loaded (`run` ignores it).
    for path in files
        .iter()
        .filter(|p| !config.plugins.from_registry(&plugin_name(p)))
    {
        match inspect_file(path, config, engine).await {
            Ok(inspected) => loaded.push(inspected),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    // Plugins the configuration pulls from registries, pulled and checked as `run` does.
    for (name, source) in config.plugins.registry_sources() {
        match inspect_pulled(name, source, config, engine).await {
            Ok(inspected) => loaded.push(inspected),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    Ok((loaded, failed))
}

/// Reads and inspects one plugin file under `config` with `engine`, off the async runtime.
async fn inspect_file(
    path: &Path,
    config: &HostConfig,
    engine: &Arc<Engine>,
) -> anyhow::Result<(PluginFile, Inspection)> {
    let file = {
        let (path, max) = (path.to_owned(), config.plugins.max_file_bytes);
        tokio::task::spawn_blocking(move || {
            PluginFile::read(&path, max).with_context(|| format!("{}", path.display()))
        })
        .await??
    };
    inspect_plugin(file, config, engine).await
}

/// Pulls plugin `name` from its registry `source` (checked as `run` checks it) and inspects it.
async fn inspect_pulled(
    name: &str,
    source: &kubewasm::oci::Source,
    config: &HostConfig,
    engine: &Arc<Engine>,
) -> anyhow::Result<(PluginFile, Inspection)> {
    let context = || format!("plugin {name} ({})", source.reference);
    let puller = kubewasm::oci::Puller::new(source.clone(), None, config.plugins.max_file_bytes)
        .with_context(context)?;
    let manifest = puller.manifest().await.with_context(context)?;
    let pulled = puller.pull(manifest).await.with_context(context)?;
    let origin = source.reference.at(&pulled.manifest).to_string();
    let file = PluginFile::named(name, Path::new(&origin), pulled.wasm);
    inspect_plugin(file, config, engine).await
}

/// Compiles, instantiates and describes `file` under its configured settings.
async fn inspect_plugin(
    file: PluginFile,
    config: &HostConfig,
    engine: &Arc<Engine>,
) -> anyhow::Result<(PluginFile, Inspection)> {
    let (engine, config) = (engine.clone(), config.clone());
    tokio::task::spawn_blocking(move || {
        let settings = config.plugins.settings(&file.name);
        let inspection = inspect(
            &engine,
            config.plugins.compile_timeout,
            settings,
            Arc::new(TracingSink),
            &file,
        )?;
        Ok((file, inspection))
    })
    .await?
}
