//! The loaded plugins: loading with clear errors, one dispatch thread each, unloading.

mod dispatch;
pub mod folder;
pub mod inspect;
pub mod manifest;
pub mod retry;
mod settings;
mod status;

pub use settings::{Grants, PluginSettings};
pub use status::{PluginStats, PluginStatus};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

use crate::informer::Subscription;
use crate::informer::factory::{InformerFactory, Lease};
use crate::informer::queue::{QueueStats, queue};
use crate::informer::store::StoreError;
use crate::runtime::logging::{LogSink, PluginLogger};
use crate::runtime::{Instance, Limits, LoadError, PluginCode, PluginContext, Runtime};
use inspect::{Inspection, inspect};
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

struct Running {
    path: PathBuf,
    hash: String,
    logger: Arc<PluginLogger>,
    stats: Arc<PluginStats>,
    queue: Arc<QueueStats>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Its registrations with the informers, shared with its worker (for resync).
    subscriptions: Arc<Mutex<Vec<Subscription>>>,
    /// Versions that replaced an earlier one under this name.
    reloads: u64,
}

impl Running {
    /// Stops delivering at once and waits for the worker.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.take_subscriptions();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(file = %self.path.display(), "plugin dispatch thread panicked");
        }
    }

    fn take_subscriptions(&self) -> Vec<Subscription> {
        std::mem::take(
            &mut *self
                .subscriptions
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// A new plugin version, compiled, initialised and described, with its informers claimed:
/// everything that can fail is done before it replaces anything.
struct Prepared {
    name: String,
    path: PathBuf,
    hash: String,
    code: PluginCode,
    ctx: Arc<PluginContext>,
    config: String,
    instance: Instance,
    manifest: PluginManifest,
    leases: Vec<Lease>,
    logger: Arc<PluginLogger>,
    /// The resync period from the configuration, for a manifest that sets none.
    resync_default: Option<std::time::Duration>,
}

/// What applying a plugin file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// A plugin of that name was not loaded; now it is.
    Loaded,
    /// The new version replaced the running one.
    Replaced,
    /// The running version has the same content: nothing to do.
    Unchanged,
}

/// A file that failed to load, kept so that status can show it and the same content is
/// not tried again.
struct Failure {
    hash: String,
    error: String,
    count: u64,
}

/// The set of loaded plugins, each delivering from the shared informers on its own thread.
pub struct PluginHost {
    runtime: Arc<Runtime>,
    factory: Arc<InformerFactory>,
    log: Arc<dyn LogSink>,
    defaults: PluginSettings,
    settings: HashMap<String, PluginSettings>,
    plugins: Mutex<BTreeMap<String, Running>>,
    failures: Mutex<BTreeMap<String, Failure>>,
    /// Whether loaded plugins deliver (false on a leader-election follower).
    leading: AtomicBool,
    /// Plugins prepared while not leading: caches warm, nothing delivered.
    standby: Mutex<BTreeMap<String, Prepared>>,
}

/// A plugin version: the first 12 hex digits of the SHA-256 of its file.
pub fn content_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
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
            failures: Mutex::new(BTreeMap::new()),
            leading: AtomicBool::new(true),
            standby: Mutex::new(BTreeMap::new()),
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

    /// Loads one plugin that is not loaded yet (see [`Self::apply`] to replace one).
    /// Blocking (compiling takes time): call it off the async runtime.
    pub fn load(&self, path: &Path) -> Result<(), PluginError> {
        let name = plugin_name(path);
        if self.plugins().contains_key(&name) {
            return Err(PluginError {
                plugin: name,
                path: path.to_owned(),
                reason: Reason::AlreadyLoaded,
            });
        }
        self.apply(path).map(|_| ())
    }

    /// Loads a plugin file, or replaces the running version of that name when the content
    /// differs. The new version is prepared completely first; if that fails, the running one
    /// keeps serving and the failure shows in status. Blocking: call it off the async runtime.
    pub fn apply(&self, path: &Path) -> Result<Applied, PluginError> {
        let bytes = std::fs::read(path).map_err(|e| PluginError {
            plugin: plugin_name(path),
            path: path.to_owned(),
            reason: Reason::Read(e),
        })?;
        self.apply_bytes(path, &bytes)
    }

    /// [`Self::apply`] with the file's content already read.
    pub fn apply_bytes(&self, path: &Path, bytes: &[u8]) -> Result<Applied, PluginError> {
        let name = plugin_name(path);
        let fail = |reason: Reason| PluginError {
            plugin: name.clone(),
            path: path.to_owned(),
            reason,
        };
        let hash = content_hash(bytes);
        if self.plugins().get(&name).is_some_and(|r| r.hash == hash)
            || self.standby().get(&name).is_some_and(|p| p.hash == hash)
        {
            return Ok(Applied::Unchanged);
        }
        let outcome = self
            .prepare(&name, path, bytes, hash.clone())
            .and_then(|p| self.activate_or_hold(p).map_err(fail));
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        match &outcome {
            Ok(_) => {
                failures.remove(&name);
            }
            Err(e) => {
                let count = failures.get(&name).map_or(0, |f| f.count) + 1;
                failures.insert(
                    name.clone(),
                    Failure {
                        hash,
                        error: e.reason.to_string(),
                        count,
                    },
                );
            }
        }
        outcome
    }

    /// The running version (content hash) of plugin `name`.
    pub fn version(&self, name: &str) -> Option<String> {
        self.plugins().get(name).map(|r| r.hash.clone())
    }

    /// True when `path`'s content already failed to load under its plugin name (so a rescan
    /// need not try it again until it changes).
    pub fn known_failure(&self, path: &Path, hash: &str) -> bool {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&plugin_name(path))
            .is_some_and(|f| f.hash == hash)
    }

    fn prepare(
        &self,
        name: &str,
        path: &Path,
        bytes: &[u8],
        hash: String,
    ) -> Result<Prepared, PluginError> {
        let settings = self.settings.get(name).unwrap_or(&self.defaults);
        let Inspection {
            code,
            mut ctx,
            config,
            mut instance,
            manifest,
            logger,
        } = inspect(
            &self.runtime,
            settings,
            self.log.clone(),
            name,
            path,
            bytes,
            &hash,
        )?;
        let fail = |reason: Reason| PluginError {
            plugin: name.to_owned(),
            path: path.to_owned(),
            reason,
        };
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

        Ok(Prepared {
            name: name.to_owned(),
            path: path.to_owned(),
            hash,
            code,
            ctx,
            config,
            instance,
            manifest,
            leases,
            logger,
            resync_default: settings.resync,
        })
    }

    /// Activates `p`, or holds it on standby while this replica does not lead.
    fn activate_or_hold(&self, p: Prepared) -> Result<Applied, Reason> {
        if !self.leading() {
            tracing::info!(plugin = %p.name, hash = %p.hash, "plugin on standby: this replica is not the leader");
            let replaced = self.standby().insert(p.name.clone(), p).is_some();
            return Ok(if replaced {
                Applied::Replaced
            } else {
                Applied::Loaded
            });
        }
        self.activate(p)
    }

    /// Starts delivering to a prepared version. When it replaces a running one, each of the
    /// old version's subscriptions is swapped for the new one's in one step per informer:
    /// events before the swap finish on the old version (its worker drains, then exits),
    /// events after go to the new one, which starts from the current state as initial adds.
    fn activate(&self, p: Prepared) -> Result<Applied, Reason> {
        let (tx, rx) = queue(p.ctx.limits.backlog);
        let mut plugins = self.plugins();
        let old = plugins.remove(&p.name);
        let mut old_subs = old
            .as_ref()
            .map(Running::take_subscriptions)
            .unwrap_or_default();
        let mut subs = Vec::new();
        for (gvk, filter) in &p.manifest.subscriptions {
            let Some(lease) = p.leases.iter().find(|l| l.informer().gvk() == gvk) else {
                continue;
            };
            let sub = match old_subs.iter().position(|s| s.informer().gvk() == gvk) {
                Some(i) => {
                    lease
                        .informer()
                        .swap(&old_subs.swap_remove(i), filter.clone(), tx.clone())
                }
                None => lease.informer().subscribe(filter.clone(), tx.clone()),
            };
            subs.push(sub);
        }
        // Types the new version no longer subscribes to stop reaching the old one too.
        drop(old_subs);
        drop(tx);
        let initial_lists = subs.len();
        let subscriptions = Arc::new(Mutex::new(subs));
        let queue = rx.stats();
        let stats = Arc::new(PluginStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = dispatch::start(dispatch::Setup {
            runtime: self.runtime.clone(),
            code: p.code,
            ctx: p.ctx,
            config: p.config,
            instance: p.instance,
            resync: p.manifest.resync.or(p.resync_default),
            leases: p.leases,
            rx,
            initial_lists,
            subscriptions: subscriptions.clone(),
            stats: stats.clone(),
            stop: stop.clone(),
        })
        .map_err(|e| Reason::Start(format!("cannot start its thread: {e}")))?;
        let (applied, reloads) = match old {
            Some(mut old) => {
                tracing::info!(plugin = %p.name, from = %old.hash, to = %p.hash, file = %p.path.display(), "plugin replaced");
                // The old worker finishes what it already received, then exits.
                if let Some(thread) = old.thread.take() {
                    std::thread::spawn(move || thread.join());
                }
                (Applied::Replaced, old.reloads + 1)
            }
            None => {
                tracing::info!(plugin = %p.name, hash = %p.hash, file = %p.path.display(), "plugin loaded");
                (Applied::Loaded, 0)
            }
        };
        plugins.insert(
            p.name,
            Running {
                path: p.path,
                hash: p.hash,
                logger: p.logger,
                stats,
                queue,
                stop,
                thread: Some(thread),
                subscriptions,
                reloads,
            },
        );
        Ok(applied)
    }

    /// Stops delivering to plugin `name` and drops its instance, queue and informer claims.
    /// Returns whether it was loaded.
    pub fn unload(&self, name: &str) -> bool {
        if self.standby().remove(name).is_some() {
            tracing::info!(plugin = %name, "plugin unloaded (it was on standby)");
            return true;
        }
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
        let failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        self.plugins()
            .iter()
            .map(|(name, r)| PluginStatus {
                reloads: r.reloads,
                reload_error: failures.get(name).map(|f| f.error.clone()),
                reload_failures: failures.get(name).map_or(0, |f| f.count),
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
                standby: false,
                queued: r.queue.depth(),
                coalesced: r.queue.coalesced(),
                durations: r.stats.durations.snapshot(),
                memory_bytes: r.stats.memory_bytes.load(Ordering::Relaxed),
                log_dropped: r.logger.dropped(),
            })
            .chain(self.standby().iter().map(|(name, p)| PluginStatus {
                name: name.clone(),
                path: p.path.clone(),
                hash: p.hash.clone(),
                synced: p.leases.iter().all(|l| l.informer().has_synced()),
                standby: true,
                reload_error: failures.get(name).map(|f| f.error.clone()),
                reload_failures: failures.get(name).map_or(0, |f| f.count),
                ..PluginStatus::default()
            }))
            .collect()
    }

    fn standby(&self) -> MutexGuard<'_, BTreeMap<String, Prepared>> {
        self.standby.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes loaded plugins wait on standby (prepared, caches warm, nothing delivered) until
    /// [`Self::lead`]: for a leader-election follower. Call before loading.
    pub fn follow(&self) {
        self.leading.store(false, Ordering::SeqCst);
    }

    /// Starts delivering to every plugin on standby; each gets the current state as its
    /// initial list. Blocking: call it off the async runtime.
    pub fn lead(&self) {
        self.leading.store(true, Ordering::SeqCst);
        let waiting = std::mem::take(&mut *self.standby());
        for (name, prepared) in waiting {
            match self.activate(prepared) {
                Ok(_) => tracing::info!(plugin = %name, "now leading: delivering"),
                Err(e) => tracing::error!(plugin = %name, "cannot start delivering: {e}"),
            }
        }
    }

    /// Whether loaded plugins deliver (not a follower waiting on standby).
    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// True when every loaded plugin has synced (see [`PluginStatus::synced`]).
    pub fn ready(&self) -> bool {
        self.status().iter().all(|s| s.synced)
    }

    /// Unloads every plugin.
    pub fn shutdown(&self) {
        self.standby().clear();
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
