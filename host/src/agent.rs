//! The agent: the one place where a source, the informers, the wasm engine, the plugins, the
//! endpoints and leader election are wired together. The binary and the tests both start here.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::task::JoinHandle;

use crate::config::HostConfig;
use crate::crd::PluginResources;
use crate::informer::factory::InformerFactory;
use crate::keeper::{self, Keeper};
use crate::leader::{ElectionConfig, Elector, LeaderCallbacks};
use crate::object::Transform;
use crate::oci::ArtifactCache;
use crate::plugins::folder::{FolderWatcher, SyncReport};
use crate::plugins::registry::RegistryPlugins;
use crate::plugins::{PluginHost, Role};
use crate::serve::{Parts, Report, Status, serve};
use crate::shard::Transition;
use crate::source::Source;
use crate::source::kube::KubeSource;
use crate::source::kube::write::KubeWriter;
use crate::source::manifests::ManifestFolder;
use crate::split::{Sharding, Split};
use crate::wasm::logging::LogSink;
use crate::wasm::{Compiler, Engine};
use crate::write::Writer;

/// The log filter of `kubewasm run` when `RUST_LOG` is unset: info, less kube's per-request
/// failure line (an ERROR naming no resource, repeated on every retry; the host logs each
/// failure once with its type and next step).
pub const LOG_FILTER: &str = "info,kube_client::client::builder=off";

/// Where objects come from.
pub enum Cluster {
    /// A folder of YAML/JSON manifests playing the API server.
    Folder(PathBuf),
    /// A Kubernetes API server.
    Kube(kube::Client),
    /// Any other source (tests use a manifests folder they rescan themselves), and where
    /// plugin writes go (`None`: writes answer `unsupported`).
    Source(Arc<dyn Source>, Option<Arc<dyn Writer>>),
}

/// Everything an agent is started from.
pub struct AgentOptions {
    /// Where objects come from.
    pub cluster: Cluster,
    /// The host configuration (plugin settings, shutdown timeout).
    pub config: HostConfig,
    /// What is dropped from each object before it is cached.
    pub transform: Transform,
    /// Folder of compiled plugin code reused across restarts; `None`: compile every time.
    pub compiled_cache: Option<PathBuf>,
    /// Where plugin log lines go.
    pub log: Arc<dyn LogSink>,
    /// Where to serve `/metrics`, `/healthz`, `/readyz` and `/status` (port 0: any free one).
    pub metrics_address: Option<SocketAddr>,
    /// Leader election (API server only): only the leader delivers.
    pub election: Option<ElectionConfig>,
    /// Replicas splitting the work (API server only, with an election for the
    /// cluster-scoped work): each delivers its slices of the namespaced objects.
    pub sharding: Option<Sharding>,
    /// Where plugins are compiled: `kubewasm run` uses child processes of its own binary.
    pub compiler: Compiler,
}

impl AgentOptions {
    /// Options for `cluster` under `config`, with plugin lines going to `log`: no compiled-code
    /// cache, no endpoints, no election, managedFields dropped.
    pub fn new(cluster: Cluster, config: HostConfig, log: Arc<dyn LogSink>) -> Self {
        Self {
            cluster,
            config,
            transform: Transform::default(),
            compiled_cache: None,
            log,
            metrics_address: None,
            election: None,
            sharding: None,
            compiler: Compiler::InProcess,
        }
    }
}

/// How [`Agent::run_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Asked to stop.
    Stopped,
    /// This replica lost the leadership; it should restart as a follower.
    LostLeadership,
}

/// What the endpoints report: the agent's status once it has started, a starting one while
/// the cluster (a large manifests folder can take seconds) is read: `/healthz` answers from
/// the first moment, `/readyz` says why not yet.
#[derive(Default)]
struct Endpoints {
    shared: std::sync::OnceLock<Arc<Shared>>,
    sync_timeout: Duration,
}

impl Report for Endpoints {
    fn status(&self) -> Status {
        match self.shared.get() {
            Some(shared) => shared.status(),
            None => Status::new(Parts::starting(), self.sync_timeout),
        }
    }
}

/// What the endpoints and the election callbacks share.
struct Shared {
    plugins: Arc<PluginHost>,
    factory: Arc<InformerFactory>,
    kube: Option<Arc<KubeSource>>,
    /// Set once the plugins folder has been read.
    started: AtomicBool,
    /// How long a plugin or informer may take to sync before it stops counting for readiness.
    sync_timeout: Duration,
    /// Whether an API server that does not answer makes the host unready.
    readiness_follows_api_server: bool,
    /// Keeps plugin state on the API server, when the cluster is one.
    keeper: Option<Arc<Keeper>>,
    /// This replica's membership, when replicas split the work (taken at shutdown).
    split: std::sync::Mutex<Option<Split>>,
}

impl Shared {
    fn sharded(&self) -> bool {
        self.plugins.duty().shard_key().is_some()
    }
}

impl Report for Shared {
    fn status(&self) -> Status {
        let parts = Parts {
            started: self.started.load(Ordering::SeqCst),
            leader: self.plugins.leading(),
            abandoned_workers: self.plugins.abandoned(),
            retiring_workers: self.plugins.retiring_workers(),
            abandoned_memory_bytes: self.plugins.abandoned_memory_bytes(),
            plugins: self.plugins.status(),
            failed_plugins: self.plugins.failed(),
            informers: self.factory.stats(),
            reflectors: self.kube.as_ref().map(|k| k.stats()).unwrap_or_default(),
            api_server_reachable: self.kube.as_ref().map(|k| k.reachable()),
            readiness_follows_api_server: self.readiness_follows_api_server,
            sharding: self
                .split
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .map(Split::status),
            plugin_metrics: self.plugins.metrics(),
        };
        Status::new(parts, self.sync_timeout)
    }
}

impl LeaderCallbacks for Shared {
    fn started_leading(&self) {
        // The state an earlier leader kept comes first: plugins go on from it.
        if let Some(keeper) = &self.keeper {
            let read = tokio::runtime::Handle::current()
                .block_on(tokio::time::timeout(STATE_READ_WAIT, keeper.load()));
            match read {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!("{e}: leading with the state held here"),
                Err(_) => tracing::error!(
                    "plugin state not read within {STATE_READ_WAIT:?}: leading with the state held here"
                ),
            }
        }
        if self.sharded() {
            // Members deliver their slices already: leading adds the cluster-scoped work,
            // with no plugin to start.
            self.plugins.duty().step(Transition::Elected);
            self.plugins.duty().step(Transition::Activated);
        } else {
            self.plugins.lead();
        }
    }

    fn confirmed_until(&self, until: Instant) {
        self.plugins.duty().confirm_leading_until(until);
    }

    fn stopped_leading(&self) {
        if self.sharded() {
            tracing::error!("lost the leadership: cluster-scoped delivery stopped");
            self.plugins.duty().step(Transition::Deposed);
        } else {
            tracing::error!("lost the leadership: delivery stopped");
            self.plugins.stop_leading();
        }
    }
}

/// How long a replica that starts leading waits for the kept plugin state before it leads
/// without it (it is read again later).
const STATE_READ_WAIT: Duration = Duration::from_secs(10);

struct Election {
    elector: Arc<tokio::sync::Mutex<Elector>>,
    task: JoinHandle<()>,
    lost: tokio::sync::oneshot::Receiver<()>,
}

/// A running host: informers, plugins, endpoints and, when configured, leader election.
pub struct Agent {
    shared: Arc<Shared>,
    manifests: Option<Arc<ManifestFolder>>,
    server: Option<(SocketAddr, JoinHandle<()>)>,
    watcher: Option<FolderWatcher>,
    registry: Option<Arc<RegistryPlugins>>,
    /// Where pulled artifacts are cached (beside the compiled code).
    artifacts: Option<ArtifactCache>,
    /// `KubewasmPlugin` objects followed, when the configuration asks for it.
    resources: Option<PluginResources>,
    /// The configuration (for the defaults of plugins declared in the cluster).
    config: HostConfig,
    /// The API server, when the cluster is one.
    client: Option<kube::Client>,
    election: Option<Election>,
    /// Writes plugin state through to the API server while this replica leads.
    keeper_task: Option<JoinHandle<()>>,
    /// The admission webhooks' server, when configured.
    webhooks: Option<(SocketAddr, JoinHandle<()>)>,
    shutdown_timeout: Duration,
}

impl Agent {
    /// Starts everything but the plugins folder (see [`Self::follow_plugins`]): the endpoints
    /// first (so a taken port fails at once), then the source, informers, engine and plugin
    /// host, then the election. Call it inside a tokio runtime.
    pub async fn start(options: AgentOptions) -> anyhow::Result<Self> {
        let listener = match options.metrics_address {
            Some(address) => Some(
                tokio::net::TcpListener::bind(address)
                    .await
                    .with_context(|| format!("metrics address {address}"))?,
            ),
            None => None,
        };
        // Served from now on: a liveness probe gets its answer while the cluster is read.
        let endpoints = Arc::new(Endpoints {
            shared: std::sync::OnceLock::new(),
            sync_timeout: options.config.sync_timeout,
        });
        let server = match listener {
            Some(listener) => {
                let address = listener.local_addr()?;
                tracing::info!(%address, "serving /metrics, /healthz, /readyz and /status");
                Some((address, tokio::spawn(serve(listener, endpoints.clone()))))
            }
            None => None,
        };
        // Stopped if the start fails or is given up.
        let server = ServerGuard(server);
        let tasks = tokio::runtime::Handle::current();
        // Plugins write to the cluster they read: the API server, or the folder's memory.
        let (source, manifests, kube, client, writer): (Arc<dyn Source>, _, _, _, _) =
            match options.cluster {
                Cluster::Folder(dir) => {
                    let transform = options.transform.clone();
                    let namespace = options.config.default_namespace.clone();
                    let folder = tokio::task::spawn_blocking(move || {
                        ManifestFolder::open_in(&dir, transform, &namespace)
                            .with_context(|| format!("manifests folder {}", dir.display()))
                    })
                    .await??;
                    let folder = Arc::new(folder);
                    tracing::info!(
                        objects = folder.len(),
                        "using the manifests folder as the cluster"
                    );
                    let writer = Some(folder.clone() as Arc<dyn Writer>);
                    (folder.clone(), Some(folder), None, None, writer)
                }
                Cluster::Kube(client) => {
                    let kube = Arc::new(KubeSource::new(
                        client.clone(),
                        options.transform.clone(),
                        tasks.clone(),
                    ));
                    let writer = KubeWriter::new(client.clone(), tasks.clone());
                    let writer = Some(Arc::new(writer) as Arc<dyn Writer>);
                    (kube.clone(), None, Some(kube), Some(client), writer)
                }
                Cluster::Source(source, writer) => (source, None, None, None, writer),
            };
        anyhow::ensure!(
            options.election.is_none() || client.is_some(),
            "leader election needs a Kubernetes API server, not a manifests folder"
        );
        anyhow::ensure!(
            options.sharding.is_none() || (client.is_some() && options.election.is_some()),
            "sharding needs a Kubernetes API server and leader election (the leader delivers the cluster-scoped work)"
        );
        let config = options.config.clone();
        let client_for_status = client.clone();
        let factory = InformerFactory::new(source, tasks);
        let engine = Arc::new(
            Engine::with_cache(
                options.compiled_cache.as_deref(),
                options.config.compiled_cache_bytes,
            )?
            .compile_in(options.compiler),
        );
        let role = match (&options.sharding, &options.election) {
            (Some(sharding), _) => Role::Member(sharding.key),
            (None, Some(_)) => Role::Follower,
            (None, None) => Role::Leader,
        };
        let state_namespace = options
            .election
            .as_ref()
            .map(|e| e.namespace.clone())
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".to_owned());
        let plugins = Arc::new(PluginHost::new(
            engine,
            factory.clone(),
            options.log,
            options.config.plugins,
            role,
            writer,
        ));
        let webhooks = match &options.config.admission {
            Some(serve) => {
                let tls = crate::admission::tls::Reloading::new(&serve.cert_file, &serve.key_file)
                    .context("admission webhooks")?;
                let listener = tokio::net::TcpListener::bind(serve.address)
                    .await
                    .with_context(|| format!("admission address {}", serve.address))?;
                let address = listener.local_addr()?;
                tracing::info!(%address, "serving admission webhooks at /admit/<plugin>");
                let record = match &serve.record_reviews {
                    Some(dir) => Some(
                        crate::admission::record::ReviewRecorder::new(dir).with_context(|| {
                            format!("admission.recordReviews {}", dir.display())
                        })?,
                    ),
                    None => None,
                };
                let pool = crate::admission::Pool::start(serve.concurrency, record)
                    .context("admission webhooks: review threads")?;
                let task = tokio::spawn(crate::admission::serve(
                    listener,
                    Arc::new(tls),
                    plugins.clone(),
                    Arc::new(pool),
                ));
                Some((address, task))
            }
            None => None,
        };
        let keeper = client
            .as_ref()
            .map(|c| Arc::new(Keeper::new(c.clone(), &state_namespace, plugins.clone())));
        if let (Some(keeper), Role::Leader) = (&keeper, role) {
            // Without an election this replica leads from the start: read the state first.
            match tokio::time::timeout(STATE_READ_WAIT, keeper.load()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!("{e}: starting with empty plugin state"),
                Err(_) => tracing::error!(
                    "plugin state not read within {STATE_READ_WAIT:?}: starting with empty plugin state"
                ),
            }
        }
        let keeper_task = keeper
            .clone()
            .map(|keeper| tokio::spawn(async move { keeper.run(keeper::DEFAULT_INTERVAL).await }));
        if options.config.readiness_follows_api_server
            && let Some(kube) = &kube
        {
            kube.keep_watching();
        }
        let shared = Arc::new(Shared {
            plugins,
            factory,
            kube,
            started: AtomicBool::new(false),
            sync_timeout: options.config.sync_timeout,
            readiness_follows_api_server: options.config.readiness_follows_api_server,
            keeper,
            split: std::sync::Mutex::new(None),
        });
        if let (Some(sharding), Some(client)) = (options.sharding, &client) {
            tracing::info!(group = %sharding.members.group, identity = %sharding.members.identity, "sharding on: joining the group");
            let split = Split::start(
                client.clone(),
                sharding,
                shared.plugins.duty().clone(),
                shared.factory.clone(),
                shared.keeper.clone(),
            );
            *shared
                .split
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(split);
        }
        let _ = endpoints.shared.set(shared.clone());
        let election = match (options.election, client) {
            (Some(config), Some(client)) => {
                tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "leader election on: waiting on standby");
                let elector = Arc::new(tokio::sync::Mutex::new(Elector::new(client, config)));
                let (lost_tx, lost) = tokio::sync::oneshot::channel();
                let (running, callbacks) = (elector.clone(), shared.clone());
                let sharded = shared.sharded();
                let task = tokio::spawn(async move {
                    loop {
                        running.lock().await.run(callbacks.clone()).await;
                        // A member goes on delivering its slices and stands again.
                        if !sharded {
                            break;
                        }
                    }
                    let _ = lost_tx.send(());
                });
                Some(Election {
                    elector,
                    task,
                    lost,
                })
            }
            _ => None,
        };
        let artifacts = options
            .compiled_cache
            .as_deref()
            .map(|dir| ArtifactCache::new(&dir.join("oci"), options.config.compiled_cache_bytes));
        Ok(Self {
            shared,
            manifests,
            server: server.take(),
            watcher: None,
            registry: None,
            artifacts,
            resources: None,
            config,
            client: client_for_status,
            election,
            keeper_task,
            webhooks,
            shutdown_timeout: options.config.shutdown_timeout,
        })
    }

    /// Loads every plugin of `dir` and every plugin the configuration pulls from a registry,
    /// and follows their changes from then on; the host counts as started once this first
    /// round is done (a registry that cannot be reached counts as a failed load).
    pub async fn follow_plugins(&mut self, dir: &Path) -> anyhow::Result<SyncReport> {
        let (plugins, folder) = (self.shared.plugins.clone(), dir.to_owned());
        let (watcher, mut first) =
            tokio::task::spawn_blocking(move || FolderWatcher::start(plugins, &folder))
                .await?
                .with_context(|| format!("plugins folder {}", dir.display()))?;
        self.watcher = Some(watcher);
        let (registry, pulled) =
            RegistryPlugins::start(self.shared.plugins.clone(), self.artifacts.clone()).await;
        let registry = Arc::new(registry);
        if self.config.plugin_resources {
            self.resources = Some(PluginResources::start(
                &self.shared.factory,
                self.shared.plugins.clone(),
                registry.clone(),
                self.config.clone(),
                self.client.clone(),
            )?);
        }
        self.registry = Some(registry);
        first.loaded.extend(pulled.loaded);
        first.failed.extend(pulled.failed);
        self.shared.started.store(true, Ordering::SeqCst);
        Ok(first)
    }

    /// The loaded plugins.
    pub fn plugins(&self) -> &Arc<PluginHost> {
        &self.shared.plugins
    }

    /// The shared informers.
    pub fn factory(&self) -> &Arc<InformerFactory> {
        &self.shared.factory
    }

    /// The manifests folder, when it is the cluster.
    pub fn manifests(&self) -> Option<&Arc<ManifestFolder>> {
        self.manifests.as_ref()
    }

    /// The API server source, when the cluster is one.
    pub fn kube(&self) -> Option<&Arc<KubeSource>> {
        self.shared.kube.as_ref()
    }

    /// Where the admission webhooks are served, when they are.
    pub fn webhooks_address(&self) -> Option<SocketAddr> {
        self.webhooks.as_ref().map(|(a, _)| *a)
    }

    /// Where the endpoints are served, when they are.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|(address, _)| *address)
    }

    /// The current status (what `/status` serves).
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// Runs until `shutdown` completes or the leadership is lost, then stops: the folder
    /// watcher first, then delivery (calls in flight get the configured shutdown timeout),
    /// then, with delivery stopped, the Lease is released so a follower takes over at once.
    pub async fn run_until(mut self, shutdown: impl Future<Output = ()>) -> Exit {
        let exit = {
            let lost = async {
                match self.election.as_mut() {
                    Some(election) => {
                        let _ = (&mut election.lost).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown => Exit::Stopped,
                () = lost => Exit::LostLeadership,
            }
        };
        if exit == Exit::Stopped {
            tracing::info!(
                "shutting down: no new events; calls in flight may finish within {:?}",
                self.shutdown_timeout
            );
        }
        // A compile in progress is stopped, not waited for.
        self.shared.plugins.engine().stop_compiling();
        self.watcher = None;
        self.resources = None;
        self.registry = None;
        if let Some(election) = &mut self.election {
            election.task.abort();
            let _ = (&mut election.task).await;
        }
        let plugins = self.shared.plugins.clone();
        let stopped = tokio::task::spawn_blocking(move || plugins.shutdown());
        if tokio::time::timeout(self.shutdown_timeout, stopped)
            .await
            .is_err()
        {
            tracing::warn!(
                "handler calls still running after {:?}; exiting anyway",
                self.shutdown_timeout
            );
            CALLS_ABANDONED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // The last changes are kept before another replica may take over.
        if let Some(task) = self.keeper_task.take() {
            task.abort();
        }
        if let (Some(keeper), Exit::Stopped) = (&self.shared.keeper, exit) {
            // Every map, before another replica may take over.
            keeper.write_changed(usize::MAX).await;
        }
        // Only now, with delivery stopped, may another replica take over.
        let split = self
            .shared
            .split
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(split) = split {
            split.leave().await;
        }
        if let Some(election) = &self.election {
            election.elector.lock().await.release().await;
        }
        exit
    }
}

/// Set once a shutdown has stopped waiting for handler calls still running.
static CALLS_ABANDONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether an agent of this process stopped waiting for handler calls at shutdown: the
/// process should then exit without waiting for its background work again.
pub fn calls_abandoned() -> bool {
    CALLS_ABANDONED.load(std::sync::atomic::Ordering::Relaxed)
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some((_, server)) = &self.server {
            server.abort();
        }
        if let Some(election) = &self.election {
            election.task.abort();
        }
        if let Some(task) = &self.keeper_task {
            task.abort();
        }
        if let Some((_, task)) = &self.webhooks {
            task.abort();
        }
    }
}

/// The endpoints' task while the agent starts: aborted if the start fails or is given up.
struct ServerGuard(Option<(SocketAddr, JoinHandle<()>)>);

impl ServerGuard {
    fn take(mut self) -> Option<(SocketAddr, JoinHandle<()>)> {
        self.0.take()
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if let Some((_, task)) = &self.0 {
            task.abort();
        }
    }
}

/// The async runtime the agent runs on: one worker thread unless `TOKIO_WORKER_THREADS` says
/// otherwise.
///
/// The async side only reads watches, decodes, applies to the cache and serves endpoints;
/// plugin calls, compilations and blocking work have threads of their own. With two workers,
/// every hand-over along the path of an event (hyper's connection task to the reflector, the
/// reflector to the informer) could wake the other worker to steal the task, and the ingest
/// path spent about a sixth of its CPU on those wake-ups for no more events per second
/// (docs/BENCHMARKS.md measures the agent on this runtime).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(1);
    }
    builder.enable_all().build()
}

/// This replica's identity in an election: `$POD_NAME` (or the host name) plus the process
/// id, so two hosts on one machine differ.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|| "kubewasm".into());
    format!("{host}-{}", std::process::id())
}

/// A client from a kubeconfig file and context, or the in-cluster service account, then
/// `$KUBECONFIG`, then `~/.kube/config`.
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
    Ok(crate::source::kube::client::client(config)?)
}
