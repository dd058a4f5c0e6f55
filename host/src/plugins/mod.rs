//! The loaded plugins: loading with clear errors, one dispatch thread each, unloading.

mod dispatch;
pub mod manifest;
pub mod retry;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

use crate::gvk::Gvk;
use crate::informer::factory::{InformerFactory, Lease};
use crate::informer::store::StoreError;
use crate::runtime::logging::{LogSink, PluginLogger};
use crate::runtime::{Limits, LoadError, PluginContext, Runtime, is_secret};
use manifest::{ManifestError, PluginManifest};

/// Why a plugin did not load.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin} ({}): {reason}", path.display())]
pub struct PluginError {
    /// The plugin's name (its file name without `.wasm`).
    pub plugin: String,
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub reason: Reason,
}

/// What went wrong while loading a plugin.
#[derive(Debug, thiserror::Error)]
pub enum Reason {
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Read(std::io::Error),
    /// The bytes are not a component of the plugin world.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A plugin of that name is already loaded.
    #[error("a plugin of this name is already loaded")]
    AlreadyLoaded,
    /// Instantiation or `describe` trapped.
    #[error("failed to start: {0}")]
    Start(String),
    /// The manifest is not acceptable.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A declared index clashes with another plugin's index of the same name.
    #[error("index conflict: {0}")]
    Index(#[from] StoreError),
    /// The plugin subscribes to a type the operator's configuration does not grant it.
    #[error(
        "manifest field `{field}`: subscribes to {gvk}, which the configuration does not grant this plugin"
    )]
    NotGranted {
        /// The manifest field.
        field: String,
        /// The type, as `apiVersion/Kind`.
        gvk: String,
    },
    /// `init` refused or trapped (it runs before `describe`).
    #[error("init failed: {0}")]
    Init(String),
}

/// What the operator grants one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Types the plugin may subscribe to and query. `None`: whatever its manifest declares,
    /// except Secrets.
    pub resources: Option<Vec<Gvk>>,
    /// The only Secrets (`namespace/name`) it may see. Secrets are denied without this.
    pub secrets: Vec<String>,
}

impl Grants {
    /// True when the plugin may subscribe to or query `gvk`.
    pub fn allows(&self, gvk: &Gvk) -> bool {
        if is_secret(gvk) {
            !self.secrets.is_empty()
        } else {
            self.resources.as_ref().is_none_or(|r| r.contains(gvk))
        }
    }
}

/// The operator's settings for one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSettings {
    /// Resource limits.
    pub limits: Limits,
    /// Configuration handed to `init` (JSON text).
    pub config: String,
    /// What it may read.
    pub grants: Grants,
}

impl Default for PluginSettings {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            config: "{}".to_owned(),
            grants: Grants::default(),
        }
    }
}

/// Counters of one plugin's deliveries.
#[derive(Debug, Default)]
pub struct PluginStats {
    /// Events handled successfully.
    pub delivered: AtomicU64,
    /// Failed attempts (error results and traps).
    pub failed: AtomicU64,
    /// Failed attempts scheduled for a retry.
    pub retried: AtomicU64,
    /// Failed attempts since the last success.
    pub consecutive_failures: AtomicU64,
    /// The reason of the latest failed attempt.
    pub last_error: Mutex<Option<String>>,
    /// Traps (each discards the instance).
    pub traps: AtomicU64,
    /// Events given up after the last attempt, or on a non-retryable error.
    pub given_up: AtomicU64,
    /// Set once every informer the plugin needs has synced (delivery starts then).
    pub synced: AtomicBool,
}

impl PluginStats {
    fn set_last_error(&self, reason: &str) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason.to_owned());
    }

    /// True while the plugin's attempts keep failing (10 or more in a row).
    pub fn degraded(&self) -> bool {
        self.consecutive_failures.load(Ordering::Relaxed) >= dispatch::DEGRADED_AFTER
    }
}

/// A snapshot of one plugin's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginStatus {
    /// The plugin's name.
    pub name: String,
    /// The file it was loaded from.
    pub path: PathBuf,
    /// First 12 hex digits of the SHA-256 of the file.
    pub hash: String,
    /// Events handled successfully.
    pub delivered: u64,
    /// Failed attempts.
    pub failed: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// True while its attempts keep failing.
    pub degraded: bool,
    /// The reason of its latest failed attempt.
    pub last_error: Option<String>,
    /// Traps.
    pub traps: u64,
    /// Events given up.
    pub given_up: u64,
    /// True once every informer the plugin needs has synced.
    pub synced: bool,
    /// Log lines dropped for exceeding its log rate.
    pub log_dropped: u64,
}

struct Running {
    path: PathBuf,
    hash: String,
    logger: Arc<PluginLogger>,
    stats: Arc<PluginStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(file = %self.path.display(), "plugin dispatch thread panicked");
        }
    }
}

/// The set of loaded plugins, each delivering from the shared informers on its own thread.
pub struct PluginHost {
    runtime: Arc<Runtime>,
    factory: Arc<InformerFactory>,
    log: Arc<dyn LogSink>,
    defaults: PluginSettings,
    settings: HashMap<String, PluginSettings>,
    plugins: Mutex<BTreeMap<String, Running>>,
}

/// The plugin name for a file: its name without the `.wasm` extension.
pub fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl PluginHost {
    /// A host with no plugins yet; plugins without settings of their own get `limits`.
    pub fn new(
        runtime: Arc<Runtime>,
        factory: Arc<InformerFactory>,
        log: Arc<dyn LogSink>,
        limits: Limits,
    ) -> Self {
        Self {
            runtime,
            factory,
            log,
            defaults: PluginSettings {
                limits,
                ..PluginSettings::default()
            },
            settings: HashMap::new(),
            plugins: Mutex::new(BTreeMap::new()),
        }
    }

    /// Sets plugin `name`'s settings (used when it next loads).
    pub fn configure(&mut self, name: &str, settings: PluginSettings) {
        self.settings.insert(name.to_owned(), settings);
    }

    /// Sets the configuration (JSON text) handed to plugin `name`'s `init`.
    pub fn set_config(&mut self, name: &str, json: String) {
        self.settings
            .entry(name.to_owned())
            .or_insert_with(|| self.defaults.clone())
            .config = json;
    }

    fn plugins(&self) -> MutexGuard<'_, BTreeMap<String, Running>> {
        self.plugins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Loads every `.wasm` file in `dir`, in name order. Each failure is logged with the file
    /// and the reason, and the others still load. Returns the failures.
    pub fn load_dir(&self, dir: &Path) -> std::io::Result<Vec<PluginError>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
            .collect();
        files.sort();
        let mut failures = Vec::new();
        for file in files {
            if let Err(e) = self.load(&file) {
                tracing::error!("{e}");
                failures.push(e);
            }
        }
        Ok(failures)
    }

    /// Loads one plugin: compile, check, init, describe, start its informers, then deliver.
    /// Blocking (compiling takes time): call it off the async runtime.
    pub fn load(&self, path: &Path) -> Result<(), PluginError> {
        let name = plugin_name(path);
        let fail = |reason: Reason| PluginError {
            plugin: name.clone(),
            path: path.to_owned(),
            reason,
        };
        if self.plugins().contains_key(&name) {
            return Err(fail(Reason::AlreadyLoaded));
        }
        let bytes = std::fs::read(path).map_err(|e| fail(Reason::Read(e)))?;
        let hash: String = Sha256::digest(&bytes)
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect();
        let code = self
            .runtime
            .compile(&bytes)
            .map_err(|e| fail(Reason::Load(e)))?;

        let settings = self.settings.get(&name).unwrap_or(&self.defaults).clone();
        let logger = Arc::new(PluginLogger::new(
            &name,
            self.log.clone(),
            settings.limits.log_rate,
        ));
        let mut ctx = PluginContext::new(&name, logger.clone(), settings.limits.clone());
        let mut instance = self
            .runtime
            .instantiate(&code, Arc::new(ctx.clone()))
            .map_err(|e| fail(Reason::Start(format!("{e:#}"))))?;
        let config = settings.config.clone();
        match instance.init(&config) {
            Ok(Ok(())) => {}
            Ok(Err(refusal)) => return Err(fail(Reason::Init(refusal))),
            Err(trap) => return Err(fail(Reason::Init(format!("trapped: {trap:#}")))),
        }
        let described = instance
            .describe()
            .map_err(|e| fail(Reason::Start(format!("describe trapped: {e:#}"))))?;
        let mut manifest = PluginManifest::validate(&described).map_err(|e| fail(e.into()))?;

        // The operator decides: subscriptions must be granted, ungranted queries answer denied.
        for (i, (gvk, filter)) in manifest.subscriptions.iter_mut().enumerate() {
            if !settings.grants.allows(gvk) {
                return Err(fail(Reason::NotGranted {
                    field: format!("subscriptions[{i}]"),
                    gvk: gvk.to_string(),
                }));
            }
            if is_secret(gvk) {
                filter.keys = Some(settings.grants.secrets.iter().cloned().collect());
            }
        }
        let (granted, denied): (Vec<Gvk>, Vec<Gvk>) = manifest
            .cached
            .iter()
            .cloned()
            .partition(|gvk| settings.grants.allows(gvk));
        manifest.cached = granted;
        ctx.denied = denied.into_iter().collect();
        ctx.secrets = settings.grants.secrets.iter().cloned().collect();

        let leases: Vec<Lease> = manifest
            .cached
            .iter()
            .map(|gvk| self.factory.acquire(gvk))
            .collect();
        for index in &manifest.indexes {
            if let Some(lease) = leases.iter().find(|l| l.informer().gvk() == &index.gvk) {
                lease
                    .informer()
                    .store()
                    .add_index(&index.name, index.func.clone())
                    .map_err(|e| fail(e.into()))?;
            }
        }
        ctx.grants = leases
            .iter()
            .map(|l| (l.informer().gvk().clone(), l.informer().clone()))
            .collect();
        let ctx = Arc::new(ctx);
        instance.set_context(ctx.clone());

        let stats = Arc::new(PluginStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let worker = dispatch::start(dispatch::Setup {
            runtime: self.runtime.clone(),
            code,
            ctx,
            config,
            instance,
            manifest,
            leases,
            stats: stats.clone(),
            stop: stop.clone(),
        })
        .map_err(|e| fail(Reason::Start(format!("cannot start its thread: {e}"))))?;
        tracing::info!(plugin = %name, hash = %hash, file = %path.display(), "plugin loaded");
        self.plugins().insert(
            name,
            Running {
                path: path.to_owned(),
                hash,
                logger,
                stats,
                stop,
                thread: Some(worker),
            },
        );
        Ok(())
    }

    /// Stops delivering to plugin `name` and drops its instance, queue and informer claims.
    /// Returns whether it was loaded.
    pub fn unload(&self, name: &str) -> bool {
        let running = self.plugins().remove(name);
        match running {
            Some(mut running) => {
                running.stop();
                tracing::info!(plugin = %name, "plugin unloaded");
                true
            }
            None => false,
        }
    }

    /// The loaded plugins, by name.
    pub fn status(&self) -> Vec<PluginStatus> {
        self.plugins()
            .iter()
            .map(|(name, r)| PluginStatus {
                name: name.clone(),
                path: r.path.clone(),
                hash: r.hash.clone(),
                delivered: r.stats.delivered.load(Ordering::Relaxed),
                failed: r.stats.failed.load(Ordering::Relaxed),
                retried: r.stats.retried.load(Ordering::Relaxed),
                degraded: r.stats.degraded(),
                last_error: r
                    .stats
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone(),
                traps: r.stats.traps.load(Ordering::Relaxed),
                given_up: r.stats.given_up.load(Ordering::Relaxed),
                synced: r.stats.synced.load(Ordering::Relaxed),
                log_dropped: r.logger.dropped(),
            })
            .collect()
    }

    /// Unloads every plugin.
    pub fn shutdown(&self) {
        let names: Vec<String> = self.plugins().keys().cloned().collect();
        for name in names {
            self.unload(&name);
        }
    }
}

impl Drop for PluginHost {
    fn drop(&mut self) {
        self.shutdown();
    }
}
