//! The set of loaded plugins: prepare, activate (or hold on standby), replace, unload, and
//! whether this replica delivers at all (leadership).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::informer::factory::{InformerFactory, Lease};
use crate::informer::queue::{QueueStats, queue};
use crate::informer::{IndexClaim, Subscription};
use crate::plugins::admit::Admitter;
use crate::plugins::dispatch;
use crate::plugins::inspect::{Inspection, inspect};
use crate::plugins::manifest::PluginManifest;
use crate::plugins::shadow::{Comparison, Promotion, Side, candidate_of};
use crate::plugins::throttle::{Rate, WriteLimits};
use crate::plugins::trial::TrialLog;
use crate::plugins::{
    FailedPlugin, PluginError, PluginFile, PluginSettings, PluginStats, PluginStatus, Version,
};
use crate::plugins::{PluginsConfig, Reason};
use crate::shard::{Duty, Leadership, ShardKey, Transition};
use crate::wasm::logging::{LogSink, PluginLogger};
use crate::wasm::state::PluginState;
use crate::wasm::{Engine, Instance, PluginCode, PluginContext, WriteAccess};
use crate::write::Writer;

/// Whether a host delivers events from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Delivers (leader election off, or this replica already leads).
    Leader,
    /// Prepares plugins and keeps their caches warm, delivering nothing until
    /// [`PluginHost::lead`].
    Follower,
    /// One of replicas splitting the work by this key: plugins run from the start, and
    /// deliver what the host's [`Duty`] says (its slices; cluster-scoped work while it
    /// leads).
    Member(ShardKey),
}

/// What applying a plugin file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A plugin of that name was not loaded; now it is.
    Loaded,
    /// The new version replaced the running one.
    Replaced,
    /// The running version has the same content: nothing to do.
    Unchanged,
}

/// Time a stopping worker gets beyond the longest a call may take before it is abandoned.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// A worker of a version that no longer delivers new events but has not ended: replaced
/// (it finishes what it had received) or abandoned (a call outlived its wall cap), with
/// the memory its instances hold (counted against the plugin's cap, `wasm/limits.rs`).
struct Retiring {
    thread: JoinHandle<()>,
    memory: Arc<AtomicU64>,
}

/// A plugin version that delivers, on its own dispatch thread.
struct Running {
    file: Version,
    /// The settings it was prepared with.
    settings: PluginSettings,
    /// When this version was prepared.
    loaded: Instant,
    /// Its call deadline: a stopping worker's call in flight ends within its wall cap.
    deadline: Duration,
    logger: Arc<PluginLogger>,
    stats: Arc<PluginStats>,
    queue: Arc<QueueStats>,
    stop: Arc<AtomicBool>,
    /// Set when its worker ends: the next version's controller waits for it.
    ended: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Its registrations with the informers, shared with its worker (for resync).
    subscriptions: Arc<Mutex<Vec<Subscription>>>,
    /// Versions that replaced an earlier one under this name.
    reloads: u64,
    /// Its subscriptions' change filters (what they dropped is in its status).
    changes: Vec<Arc<crate::informer::Changes>>,
    /// What its instances hold in memory.
    memory: crate::wasm::limits::MemoryGauges,
    /// The contract version it was built for.
    contract: &'static str,
    /// The names of its schedules.
    schedules: Vec<String>,
    /// The type it reconciles, when it is a controller.
    reconciles: Option<String>,
    /// The type whose objects carry its finalizer, when it keeps one.
    finalizes: Option<crate::gvk::Gvk>,
    /// Its metrics, shared by its versions.
    metrics: Arc<crate::plugin_metrics::Registry>,
    /// What became of its HTTP requests.
    http: Arc<crate::wasm::http::HttpTally>,
    /// Keeps its queue open while it runs: a plugin with no subscription (queries and
    /// schedules, or admission only) has no other sender, and its worker would end at once,
    /// releasing its informers. Halting interrupts the worker's wait through it.
    open: crate::informer::queue::QueueSender,
}

impl Running {
    /// Stops delivering at once: no new event reaches the worker, which returns after the
    /// call in flight, if any.
    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.open.interrupt();
        drop(self.take_subscriptions());
    }

    /// Halts, then waits for the worker at most as long as a call may take by the wall clock
    /// and a grace period.
    /// Returns the worker when it had to be abandoned (its thread ends on its own, if ever).
    fn stop(&mut self) -> Option<Retiring> {
        self.halt();
        let thread = self.thread.take()?;
        let until = Instant::now() + crate::wasm::deadline::wall_cap(self.deadline) + STOP_GRACE;
        while !thread.is_finished() {
            if Instant::now() >= until {
                tracing::error!(plugin = %self.file.name, "a call did not return within {:?} of its longest time; its worker is abandoned", STOP_GRACE);
                return Some(Retiring {
                    thread,
                    memory: self.memory.version.clone(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if thread.join().is_err() {
            tracing::error!(plugin = %self.file.name, "plugin dispatch thread panicked");
        }
        None
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
    file: Version,
    /// When it was prepared (the start of its time to sync).
    loaded: Instant,
    code: PluginCode,
    ctx: Arc<PluginContext>,
    settings: PluginSettings,
    instance: Instance,
    manifest: PluginManifest,
    leases: Vec<Lease>,
    claims: Vec<IndexClaim>,
    logger: Arc<PluginLogger>,
    write_limits: Arc<Mutex<WriteLimits>>,
    /// Where its writes and reviews are reported while they take no effect (its mode is not
    /// `serve`).
    trial: Option<Arc<TrialLog>>,
    /// Where it reports each live event's outcome while a candidate runs beside the serving
    /// version, and which of the two it is.
    compare: (Arc<Comparison>, Side),
    /// A candidate's promotion on its own, when its settings ask for one.
    promotion: Option<Promotion>,
}

/// A file that failed to load, kept so that status can show it and the same content is
/// not tried again.
struct LoadFailure {
    sha256: String,
    /// The file or artifact that failed.
    origin: std::path::PathBuf,
    error: String,
    count: u64,
}

/// Which versions deliver and which wait, under one lock (whether this replica leads is
/// its [`Duty`]'s, moved only under this lock).
struct Plugins {
    /// Schedules run only when asked ([`PluginHost::tick`]), never on their crons.
    on_demand_schedules: bool,
    running: BTreeMap<String, Running>,
    /// Prepared while not leading: caches warm, nothing delivered.
    standby: BTreeMap<String, Prepared>,
    /// Replaced versions still finishing what they had received.
    retiring: Vec<Retiring>,
}

/// The set of loaded plugins, each delivering from the shared informers on its own thread.
pub struct PluginHost {
    engine: Arc<Engine>,
    factory: Arc<InformerFactory>,
    log: Arc<dyn LogSink>,
    /// Replaced whole when a plugin's settings change (custom resources).
    settings: std::sync::RwLock<Arc<PluginsConfig>>,
    plugins: Mutex<Plugins>,
    failures: Mutex<BTreeMap<String, LoadFailure>>,
    /// Workers that did not stop in time and were left behind.
    abandoned: AtomicU64,
    /// Abandoned workers whose threads may still run.
    left_behind: Mutex<Vec<Retiring>>,
    /// What every version of each plugin holds in memory together, by name.
    memory: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    /// Every plugin's state, by name.
    states: Mutex<BTreeMap<String, Arc<PluginState>>>,
    /// Every plugin's metrics, by name: kept across its versions while their bound stays.
    metrics: Mutex<BTreeMap<String, Arc<crate::plugin_metrics::Registry>>>,
    /// What all plugins together may use of the CPU.
    cpu_pool: Arc<crate::cpu::CpuPool>,
    /// Every plugin's CPU budget, by name: kept across its versions, so a new version does not
    /// start with a fresh one.
    budgets: Mutex<BTreeMap<String, Arc<crate::cpu::CpuBudget>>>,
    /// Each plugin's write rates and loops, by name: its versions share them.
    write_limits: Mutex<BTreeMap<String, Arc<Mutex<WriteLimits>>>>,
    /// The admission side of each loaded plugin that declares admission, by name.
    admitters: Mutex<BTreeMap<String, Arc<Admitter>>>,
    /// What each plugin's writes and reviews would have done while on trial, by name: kept
    /// across its versions and modes.
    trials: Mutex<BTreeMap<String, Arc<TrialLog>>>,
    /// The pairing of each plugin's serving and candidate versions, by the serving name.
    comparisons: Mutex<BTreeMap<String, Arc<Comparison>>>,
    /// The cluster plugins write to; `None` when it takes no writes.
    writer: Option<Arc<dyn Writer>>,
    /// What this replica delivers, read by workers before each call and write.
    duty: Arc<Duty>,
}

impl PluginHost {
    /// A host with no plugins yet, taking each plugin's settings from `settings` by name;
    /// plugins write through `writer` when there is one.
    pub fn new(
        engine: Arc<Engine>,
        factory: Arc<InformerFactory>,
        log: Arc<dyn LogSink>,
        settings: PluginsConfig,
        role: Role,
        writer: Option<Arc<dyn Writer>>,
    ) -> Self {
        Self {
            writer,
            duty: Arc::new(match role {
                Role::Leader => Duty::whole(true),
                Role::Follower => Duty::whole(false),
                Role::Member(key) => Duty::sharded(key),
            }),
            engine,
            factory,
            log,
            cpu_pool: Arc::new(crate::cpu::CpuPool::new(settings.cpu_millicores)),
            budgets: Mutex::default(),
            write_limits: Mutex::default(),
            settings: std::sync::RwLock::new(Arc::new(settings)),
            plugins: Mutex::new(Plugins {
                on_demand_schedules: false,
                running: BTreeMap::new(),
                standby: BTreeMap::new(),
                retiring: Vec::new(),
            }),
            failures: Mutex::new(BTreeMap::new()),
            abandoned: AtomicU64::new(0),
            left_behind: Mutex::default(),
            memory: Mutex::default(),
            states: Mutex::default(),
            metrics: Mutex::default(),
            admitters: Mutex::default(),
            trials: Mutex::default(),
            comparisons: Mutex::default(),
        }
    }

    /// The admission side of loaded plugin `name`, when it declares admission (on standby
    /// too: every replica reviews).
    pub fn admitter(&self, name: &str) -> Option<Arc<Admitter>> {
        self.admitters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// The admission side of plugin `name`'s candidate and the comparison of the two, while
    /// a candidate runs.
    pub fn candidate_admitter(&self, name: &str) -> Option<(Arc<Admitter>, Arc<Comparison>)> {
        let comparison = self
            .comparisons
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .filter(|c| c.active())?
            .clone();
        let admitter = self.admitter(&format!("{name}{}", crate::plugins::shadow::CANDIDATE))?;
        Some((admitter, comparison))
    }

    fn set_admitter(&self, name: &str, admitter: Option<Arc<Admitter>>) {
        let mut admitters = self
            .admitters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match admitter {
            Some(a) => admitters.insert(name.to_owned(), a),
            None => admitters.remove(name),
        };
    }

    /// The wasm engine plugins are compiled and run in.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The state of plugin `name` (kept while the host runs, whatever its versions do).
    pub fn state_of(&self, name: &str) -> Arc<PluginState> {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// The pairing of plugin `name`'s serving version and its candidate.
    fn comparison_of(&self, name: &str) -> Arc<Comparison> {
        self.comparisons
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// The settings plugin `name` runs with: its entry's, or for a candidate
    /// (`NAME.candidate`) the serving plugin's, in dry-run mode.
    fn settings_for(all: &PluginsConfig, name: &str) -> PluginSettings {
        match candidate_of(name) {
            Some(base) => PluginSettings {
                mode: crate::plugins::Mode::DryRun,
                ..all.settings(base).clone()
            },
            None => all.settings(name).clone(),
        }
    }

    /// The trial reports of plugin `name` (kept while the host runs).
    fn trial_of(&self, name: &str) -> Arc<TrialLog> {
        self.trials
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// The CPU budget of plugin `name` at `millis_per_second` (a budget at another rate is
    /// replaced, its counts kept only in the metrics already scraped).
    fn budget_of(&self, name: &str, millis_per_second: u32) -> Arc<crate::cpu::CpuBudget> {
        kept_by_name(
            &self.budgets,
            name,
            |b| b.millis_per_second() == millis_per_second,
            || crate::cpu::CpuBudget::new(millis_per_second, self.cpu_pool.clone()),
        )
    }

    /// The write rates and loops of plugin `name`, kept while its rates stay as configured.
    fn write_limits_of(&self, name: &str, rates: (Rate, Rate)) -> Arc<Mutex<WriteLimits>> {
        kept_by_name(
            &self.write_limits,
            name,
            |l| l.lock().unwrap_or_else(PoisonError::into_inner).rates() == rates,
            || Arc::new(Mutex::new(WriteLimits::new(rates, Instant::now()))),
        )
    }

    /// The metrics of plugin `name` holding at most `max_series` series, kept across its
    /// versions while the bound stays.
    fn metrics_of(&self, name: &str, max_series: usize) -> Arc<crate::plugin_metrics::Registry> {
        kept_by_name(
            &self.metrics,
            name,
            |r| r.max_series() == max_series,
            || Arc::new(crate::plugin_metrics::Registry::new(max_series)),
        )
    }

    /// The metrics of every running plugin: name, version digest, and each metric's series.
    pub fn metrics(&self) -> Vec<crate::plugin_metrics::PluginMetrics> {
        self.plugins()
            .running
            .iter()
            .filter(|(_, r)| r.metrics.declared() > 0)
            .map(|(name, r)| crate::plugin_metrics::PluginMetrics {
                plugin: name.clone(),
                digest: r.file.digest().to_owned(),
                families: r.metrics.snapshot(),
            })
            .collect()
    }

    /// Every plugin's state, by name.
    pub fn states(&self) -> Vec<(String, Arc<PluginState>)> {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect()
    }

    /// From now on, plugins' schedules run only through [`Self::tick`], never on their crons:
    /// `kubewasm test` runs them on demand, and a real schedule falling due while a test runs
    /// would add a tick the test did not ask for.
    pub fn run_schedules_on_demand_only(&self) {
        self.plugins().on_demand_schedules = true;
    }

    /// Runs schedule `schedule` of running plugin `name` once, as if it were due (for
    /// `kubewasm test`); the error says why it cannot.
    pub fn tick(&self, name: &str, schedule: &str) -> Result<(), String> {
        self.ask(name, |running, asked| {
            if !running.schedules.iter().any(|s| s == schedule) {
                return Err(format!(
                    "plugin {name} has no schedule {schedule:?} (it has: {})",
                    if running.schedules.is_empty() {
                        "none".to_owned()
                    } else {
                        running.schedules.join(", ")
                    }
                ));
            }
            asked.ticks.push(schedule.to_owned());
            Ok(())
        })
    }

    /// Queues key `key` (`namespace/name`, or `name`) of running controller plugin `name` for
    /// a reconcile now, as if an event had woken it (for `kubewasm test`); the error says why
    /// it cannot.
    pub fn reconcile(&self, name: &str, key: &str) -> Result<(), String> {
        self.ask(name, |running, asked| {
            if running.reconciles.is_none() {
                return Err(format!(
                    "plugin {name} is not a controller (its manifest declares none)"
                ));
            }
            asked
                .reconciles
                .push(crate::object::Key::new(key.to_owned()));
            Ok(())
        })
    }

    /// Adds to what running plugin `name`'s worker is asked to run now, as `add` decides, and
    /// wakes the worker; the error says why it cannot.
    fn ask(
        &self,
        name: &str,
        add: impl FnOnce(&Running, &mut crate::plugins::Asked) -> Result<(), String>,
    ) -> Result<(), String> {
        let plugins = self.plugins();
        let running = plugins
            .running
            .get(name)
            .ok_or_else(|| format!("plugin {name} is not delivering"))?;
        add(
            running,
            &mut running
                .stats
                .asked
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )?;
        // The worker may be in a long idle wait: it runs what was asked now, not at its next
        // timer.
        running.open.nudge();
        Ok(())
    }

    /// Workers abandoned because a call outlived its wall cap while they stopped.
    pub fn abandoned(&self) -> u64 {
        self.abandoned.load(Ordering::Relaxed)
    }

    fn stop(&self, running: &mut Running) {
        if let Some(abandoned) = running.stop() {
            self.abandoned.fetch_add(1, Ordering::Relaxed);
            let mut left = self
                .left_behind
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            left.retain(|a| !a.thread.is_finished());
            left.push(abandoned);
        }
    }

    /// Workers of replaced or unloaded versions still running: abandoned ones and those
    /// finishing what they had received.
    pub fn retiring_workers(&self) -> u64 {
        self.retiring(|r| r.len() as u64)
    }

    /// Linear memory and tables still held by the workers of [`Self::retiring_workers`] (it
    /// counts against each plugin's memory cap until they end).
    pub fn abandoned_memory_bytes(&self) -> u64 {
        self.retiring(|r| {
            r.iter()
                .map(|a| a.memory.load(Ordering::Relaxed))
                .sum::<u64>()
        })
    }

    /// `f` of the workers of replaced or unloaded versions that have not ended (the ended
    /// ones forgotten).
    fn retiring<T>(&self, f: impl Fn(&[&Retiring]) -> T) -> T {
        let mut left = self
            .left_behind
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        left.retain(|a| !a.thread.is_finished());
        let mut plugins = self.plugins();
        plugins.retiring.retain(|a| !a.thread.is_finished());
        let all: Vec<&Retiring> = left.iter().chain(plugins.retiring.iter()).collect();
        f(&all)
    }

    /// What every version of plugin `name` holds in memory together.
    fn memory_of(&self, name: &str) -> Arc<AtomicU64> {
        self.memory
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    fn plugins(&self) -> MutexGuard<'_, Plugins> {
        self.plugins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failures(&self) -> MutexGuard<'_, BTreeMap<String, LoadFailure>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The settings of every plugin.
    pub fn settings(&self) -> Arc<PluginsConfig> {
        self.settings
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Gives plugin `name` its own settings (`None`: back to the defaults). A loaded version
    /// keeps its settings until it is applied again.
    pub fn configure(&self, name: &str, settings: Option<PluginSettings>) {
        let mut current = self
            .settings
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut next = PluginsConfig::clone(&current);
        match settings {
            Some(settings) => next.named.insert(name.to_owned(), settings),
            None => next.named.remove(name),
        };
        *current = Arc::new(next);
    }

    /// Largest plugin file this host reads.
    pub fn max_file_bytes(&self) -> u64 {
        self.settings().max_file_bytes
    }

    /// Reads and loads a plugin that is not loaded yet (see [`Self::apply`] to replace one).
    /// Blocking (compiling takes time): call it off the async runtime.
    pub fn load(&self, path: &Path) -> Result<Outcome, PluginError> {
        let file = PluginFile::read(path, self.max_file_bytes()).map_err(|e| PluginError {
            plugin: crate::plugins::plugin_name(path),
            path: path.to_owned(),
            reason: Reason::Read(e),
        })?;
        if self.plugins().running.contains_key(&file.name) {
            return Err(Reason::AlreadyLoaded.of(&file));
        }
        self.apply(&file)
    }

    /// Loads a plugin file, or replaces the running version of that name when the content
    /// differs. The new version is prepared completely first; if that fails, the running one
    /// keeps serving and the failure shows in status. Blocking: call it off the async runtime.
    pub fn apply(&self, file: &PluginFile) -> Result<Outcome, PluginError> {
        if self.loaded_as(file) {
            return Ok(Outcome::Unchanged);
        }
        let span = crate::traces::Span::start(
            "load",
            opentelemetry::trace::SpanKind::Internal,
            None,
            || {
                vec![
                    opentelemetry::KeyValue::new("kubewasm.plugin", file.name.clone()),
                    opentelemetry::KeyValue::new(
                        "kubewasm.plugin.digest",
                        file.digest().to_owned(),
                    ),
                    opentelemetry::KeyValue::new(
                        "kubewasm.load.from",
                        file.path.display().to_string(),
                    ),
                ]
            },
        );
        let prepared = self.prepare(file);
        // Held while the version goes live, so that status never shows the new version with
        // the previous version's error (status takes this lock first).
        let mut failures = self.failures();
        let outcome = prepared.and_then(|p| {
            let admitter = self.admitter_for(&p);
            let outcome = self.activate_or_hold(p).map_err(|r| r.of(file))?;
            self.set_admitter(&file.name, admitter);
            Ok(outcome)
        });
        match &outcome {
            Ok(loaded) => {
                failures.remove(&file.name);
                if *loaded == Outcome::Loaded
                    && let Some(warning) = self
                        .settings()
                        .missing_entry(candidate_of(&file.name).unwrap_or(&file.name))
                {
                    tracing::warn!(plugin = %file.name, "{warning}");
                }
            }
            Err(e) => {
                let count = failures.get(&file.name).map_or(0, |f| f.count) + 1;
                failures.insert(
                    file.name.clone(),
                    LoadFailure {
                        sha256: file.sha256.clone(),
                        origin: file.path.clone(),
                        error: e.reason.to_string(),
                        count,
                    },
                );
            }
        }
        if let Some(mut span) = span {
            match &outcome {
                Ok(o) => {
                    span.set(opentelemetry::KeyValue::new(
                        "kubewasm.load.outcome",
                        format!("{o:?}").to_lowercase(),
                    ));
                    span.end(None);
                }
                Err(e) => span.end(Some(&e.reason.to_string())),
            }
        }
        outcome
    }

    /// Whether `file`'s content is loaded under its name with the settings it would get now.
    fn loaded_as(&self, file: &PluginFile) -> bool {
        let settings = self.settings();
        let wanted = &Self::settings_for(&settings, &file.name);
        let plugins = self.plugins();
        let loaded = |version: &Version, with: &PluginSettings| {
            version.digest() == file.digest() && with == wanted
        };
        plugins
            .running
            .get(&file.name)
            .is_some_and(|r| loaded(&r.file, &r.settings))
            || plugins
                .standby
                .get(&file.name)
                .is_some_and(|p| loaded(&p.file, &p.settings))
    }

    /// The digest of the version of plugin `name` that is loaded (delivering or on standby).
    pub fn digest(&self, name: &str) -> Option<String> {
        let plugins = self.plugins();
        plugins
            .running
            .get(name)
            .map(|r| &r.file)
            .or_else(|| plugins.standby.get(name).map(|p| &p.file))
            .map(|f| f.digest().to_owned())
    }

    /// Records that the plugin file at `path` cannot be read (`error`): logged when it is
    /// new, shown in status like any failed load. `None` when the file simply vanished.
    pub fn refuse(&self, path: &Path, error: std::io::Error) -> Option<String> {
        if error.kind() == std::io::ErrorKind::NotFound {
            return None;
        }
        let failure = PluginError {
            plugin: crate::plugins::plugin_name(path),
            path: path.to_owned(),
            reason: Reason::Read(error),
        };
        let name = failure.plugin.clone();
        self.record(failure);
        Some(name)
    }

    /// Records a failure that came before any content (the file or artifact could not be
    /// had): logged when its reason is new, shown in status like any failed load; the
    /// running version, if any, keeps serving.
    pub fn record(&self, failure: PluginError) {
        let text = failure.reason.to_string();
        let mut failures = self.failures();
        let entry = failures
            .entry(failure.plugin.clone())
            .or_insert_with(|| LoadFailure {
                sha256: String::new(),
                origin: failure.path.clone(),
                error: String::new(),
                count: 0,
            });
        if entry.error != text {
            tracing::error!("{failure}");
            entry.origin = failure.path.clone();
            entry.error = text;
            entry.sha256 = String::new();
            entry.count += 1;
        }
    }

    /// Forgets the last failure of plugin `name` (its source names the loaded version again).
    pub fn forget_failure(&self, name: &str) {
        self.failures().remove(name);
    }

    /// True when `file`'s content already failed to load under its plugin name (so a rescan
    /// need not try it again until it changes).
    pub fn known_failure(&self, file: &PluginFile) -> bool {
        self.failures()
            .get(&file.name)
            .is_some_and(|f| f.sha256 == file.sha256)
    }

    fn prepare(&self, file: &PluginFile) -> Result<Prepared, PluginError> {
        let all = self.settings();
        let settings = Self::settings_for(&all, &file.name);
        let Inspection {
            code,
            mut ctx,
            mut instance,
            manifest,
            logger,
        } = inspect(
            &self.engine,
            all.compile_timeout,
            &settings,
            self.log.clone(),
            file,
        )?;
        let leases: Vec<Lease> = manifest
            .cached
            .iter()
            .map(|gvk| self.factory.acquire(gvk, &manifest.scope(gvk)))
            .collect();
        // Declared indexes belong to this version of this plugin: scoped names, removed with
        // their last claim (when the version is replaced or unloaded).
        let mut claims = Vec::new();
        for index in &manifest.indexes {
            if let Some(lease) = leases.iter().find(|l| l.informer().gvk() == &index.gvk) {
                let scoped = format!("{}@{}/{}", file.name, file.digest(), index.name);
                let claim = IndexClaim::new(lease.informer(), &scoped, index.func.clone())
                    .map_err(|e| Reason::Index(e).of(file))?;
                claims.push(claim);
                ctx.indexes
                    .insert((index.gvk.clone(), index.name.clone()), scoped);
            }
        }
        // The built-in indexes of every granted type, kept while a plugin that can query
        // them is loaded, or a controller (its children are found by label); none for a
        // plugin that imports no index query.
        if code.queries_indexes() || manifest.controller.is_some() {
            claims.extend(leases.iter().map(|l| IndexClaim::builtins(l.informer())));
        }
        ctx.grants = leases
            .iter()
            .map(|l| (l.informer().gvk().clone(), l.informer().clone()))
            .collect();
        ctx.scopes = leases
            .iter()
            .filter(|l| !l.scope().is_everything())
            .map(|l| (l.informer().gvk().clone(), l.scope().clone()))
            .collect();
        let mode = settings.mode;
        ctx.http_hosts = Arc::new(if mode.dry_run() {
            settings.grants.http_safe.clone()
        } else {
            settings.grants.http.clone()
        });
        // One map per plugin name: its versions and instances share it. In dry-run, a copy
        // of it, never written to the cluster nor seen by the serving versions.
        ctx.state = if mode.dry_run() {
            let copy = PluginState::default();
            copy.whole()
                .replace(self.state_of(&file.name).whole().snapshot());
            Arc::new(copy)
        } else {
            self.state_of(&file.name)
        };
        ctx.state_declared = manifest.state;
        let budget = self.budget_of(&file.name, settings.limits.cpu_millis_per_second);
        let pointers: usize = manifest
            .subscriptions
            .iter()
            .filter_map(|(_, f)| f.changes.as_ref())
            .map(|c| {
                c.charge_to(budget.clone());
                c.pointers().len()
            })
            .sum();
        if pointers > 0 {
            tracing::info!(plugin = %file.name, pointers, "its change filters compare {pointers} pointers on each update of their types; the host's time for that is charged to the plugin's CPU budget, and while it is past the budget updates pass without a comparison");
        }
        ctx.cpu = Some(budget);
        if let Some(c) = &manifest.controller {
            controller_fits(c, &settings, self.duty.shard_key()).map_err(|e| e.of(file))?;
        }
        ctx.metrics = self.metrics_of(&file.name, settings.limits.metric_series);
        ctx.metrics.declare(&manifest.metrics);
        ctx.memory = crate::wasm::limits::MemoryGauges::for_version(self.memory_of(&file.name));
        ctx.writes = self.writer.as_ref().map(|writer| {
            Arc::new(WriteAccess::new(
                settings.grants.writes.clone(),
                writer.clone(),
                self.duty.clone(),
            ))
        });
        let ctx = Arc::new(ctx);
        instance.set_context(ctx.clone());
        let write_limits = self.write_limits_of(
            &file.name,
            (settings.delivery.write_rate, settings.delivery.event_rate),
        );
        // Only files of the plugins folder are renamed: never a registry's cached artifact.
        let promotion = candidate_of(&file.name).and_then(|base| {
            let after = settings.promote_after?;
            let in_folder = |n: &str| all.settings(n).source.is_none();
            let to = file.path.with_file_name(format!("{base}.wasm"));
            (in_folder(base) && in_folder(&file.name) && to.is_file()).then(|| Promotion {
                after,
                from: file.path.clone(),
                to,
            })
        });
        let compare = match candidate_of(&file.name) {
            Some(base) => (self.comparison_of(base), Side::Candidate),
            None => (self.comparison_of(&file.name), Side::Serving),
        };
        Ok(Prepared {
            compare,
            promotion,
            trial: mode.monitors().then(|| self.trial_of(&file.name)),
            write_limits,
            file: file.version(),
            loaded: Instant::now(),
            code,
            ctx,
            settings,
            instance,
            manifest,
            leases,
            claims,
            logger,
        })
    }

    /// The admission side of `p`, when it declares admission.
    fn admitter_for(&self, p: &Prepared) -> Option<Arc<Admitter>> {
        let admission = p.manifest.admission.clone()?;
        // Its own claims on the informers it queries: reviews read live caches whatever the
        // delivering side does (a follower's plugins only wait on standby).
        let leases = p
            .leases
            .iter()
            .map(|l| self.factory.acquire(l.informer().gvk(), l.scope()))
            .collect();
        Some(Arc::new(Admitter::new(
            self.engine.clone(),
            p.code.clone(),
            p.ctx.clone(),
            p.settings.config.clone(),
            admission,
            leases,
            p.trial.clone(),
        )))
    }

    /// Activates `p`, or holds it on standby while this replica does not lead.
    fn activate_or_hold(&self, p: Prepared) -> Result<Outcome, Reason> {
        let mut plugins = self.plugins();
        if self.duty.runs_plugins() {
            return activate(&self.engine, &self.duty, &mut plugins, p);
        }
        tracing::info!(plugin = %p.file.name, digest = %p.file.digest(), "plugin on standby: this replica is not the leader");
        let replaced = plugins.standby.insert(p.file.name.clone(), p).is_some();
        Ok(if replaced {
            Outcome::Replaced
        } else {
            Outcome::Loaded
        })
    }

    /// Stops delivering to plugin `name` and drops its instance, queue and informer claims.
    /// Returns whether it was loaded.
    pub fn unload(&self, name: &str) -> bool {
        self.set_admitter(name, None);
        let mut plugins = self.plugins();
        if plugins.standby.remove(name).is_some() {
            tracing::info!(plugin = %name, "plugin unloaded (it was on standby)");
            return true;
        }
        let Some(mut running) = plugins.running.remove(name) else {
            return false;
        };
        drop(plugins);
        if let Some(base) = candidate_of(name) {
            self.comparison_of(base).stop();
        }
        self.stop(&mut running);
        tracing::info!(plugin = %name, "plugin unloaded");
        self.warn_of_finalizers(name, running.finalizes.as_ref());
        true
    }

    /// Says how many objects of `gvk` still carry the finalizer of plugin `name`, unloaded:
    /// they stay until it is back or an operator releases them.
    fn warn_of_finalizers(&self, name: &str, gvk: Option<&crate::gvk::Gvk>) {
        let Some(informer) = gvk.and_then(|g| self.factory.get(g)) else {
            return;
        };
        let finalizer = crate::controller::finalizer(name);
        let held = informer
            .store()
            .list()
            .iter()
            .filter(|o| crate::controller::holds_finalizer(o, &finalizer))
            .count();
        if held > 0 {
            tracing::warn!(
                plugin = %name, objects = held,
                "unloaded while {held} objects of {} carry its finalizer {finalizer}: they stay until it is loaded again or `kubewasm finalizers release {name} --type {}` releases them",
                informer.gvk(), informer.gvk()
            );
        }
    }

    /// The plugins that failed and have no version loaded, by name.
    pub fn failed(&self) -> Vec<FailedPlugin> {
        let failures = self.failures();
        let plugins = self.plugins();
        failures
            .iter()
            .filter(|(name, _)| {
                !plugins.running.contains_key(*name) && !plugins.standby.contains_key(*name)
            })
            .map(|(name, f)| FailedPlugin {
                name: name.clone(),
                path: f.origin.clone(),
                error: f.error.clone(),
                failures: f.count,
            })
            .collect()
    }

    /// The loaded plugins, by name.
    pub fn status(&self) -> Vec<PluginStatus> {
        let failures = self.failures();
        let plugins = self.plugins();
        let admitters = self
            .admitters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let trials = self.trials.lock().unwrap_or_else(PoisonError::into_inner);
        let comparisons = self
            .comparisons
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let reload = |name: &str, s: PluginStatus| {
            let state = states.get(name);
            let (state_entries, state_bytes) = state.map(|s| s.totals()).unwrap_or_default();
            let counted = |c: fn(&PluginState) -> &AtomicU64| {
                state.map_or(0, |s| c(s).load(Ordering::Relaxed))
            };
            let budget = budgets.get(name);
            PluginStatus {
                cpu_us: budget.map_or(0, |b| b.used_us()),
                cpu_throttled_us: budget.map_or(0, |b| b.throttled_us()),
                cpu_throttled: budget.is_some_and(|b| b.throttling()),
                reload_error: failures.get(name).map(|f| f.error.clone()),
                reload_failures: failures.get(name).map_or(0, |f| f.count),
                admission: admitters.get(name).map(|a| a.status()),
                trial: trials.get(name).map(|t| t.status()),
                candidate: comparisons.get(name).map(|c| c.status()).filter(|c| {
                    c.running
                        || c.dropped.is_some()
                        || c.equal + c.different + c.candidate_failed > 0
                }),
                state_entries,
                state_bytes,
                state_written_bytes: counted(|s| &s.written_bytes),
                state_writes_deferred: counted(|s| &s.writes_deferred),
                ..s
            }
        };
        let running = plugins.running.iter().map(|(name, r)| {
            reload(
                name,
                PluginStatus {
                    name: name.clone(),
                    path: r.file.path.clone(),
                    digest: r.file.digest().to_owned(),
                    reloads: r.reloads,
                    running_seconds: r.loaded.elapsed().as_secs(),
                    queued: r.queue.depth(),
                    queued_oldest_ms: u64::try_from(r.queue.oldest_age().as_millis())
                        .unwrap_or(u64::MAX),
                    queued_bytes: r.queue.bytes(),
                    coalesced: r.queue.coalesced(),
                    log_dropped: r.logger.dropped(),
                    filtered: r
                        .changes
                        .iter()
                        .map(|c| c.filtered.load(Ordering::Relaxed))
                        .sum(),
                    unchecked: r
                        .changes
                        .iter()
                        .map(|c| c.unchecked.load(Ordering::Relaxed))
                        .sum(),
                    contract: r.contract.to_owned(),
                    mode: r.settings.mode.to_string(),
                    reconciles: r.reconciles.clone(),
                    metric_series: r.metrics.series(),
                    http_by_host: r.http.snapshot(),
                    metric_updates_refused: r.metrics.refused(),
                    ..r.stats.status()
                },
            )
        });
        let standby = plugins.standby.iter().map(|(name, p)| {
            reload(
                name,
                PluginStatus {
                    name: name.clone(),
                    path: p.file.path.clone(),
                    digest: p.file.digest().to_owned(),
                    synced: p.leases.iter().all(|l| l.informer().has_synced()),
                    standby: true,
                    mode: p.settings.mode.to_string(),
                    running_seconds: p.loaded.elapsed().as_secs(),
                    ..PluginStatus::default()
                },
            )
        });
        running.chain(standby).collect()
    }

    /// Starts delivering to every plugin on standby; each gets the current state as its
    /// initial list. Reports leading only once they all deliver. Blocking: call it off the
    /// async runtime.
    pub fn lead(&self) {
        let mut plugins = self.plugins();
        // Deliveries are this replica's from now on, before any plugin starts: a dispatch
        // thread that reached its initial list before this would drop it as not its own.
        // It reports leading only once every plugin delivers.
        self.duty.step(Transition::Elected);
        for (name, prepared) in std::mem::take(&mut plugins.standby) {
            match activate(&self.engine, &self.duty, &mut plugins, prepared) {
                Ok(_) => tracing::info!(plugin = %name, "now leading: delivering"),
                Err(e) => tracing::error!(plugin = %name, "cannot start delivering: {e}"),
            }
        }
        self.duty.step(Transition::Activated);
    }

    /// Stops every delivery at once (no new call starts; calls in flight finish on their
    /// own threads): for a replica that lost the leadership. The plugins are unloaded.
    pub fn stop_leading(&self) {
        // Writes staged from now on are refused, and none staged before is sent.
        self.duty.step(Transition::Deposed);
        let mut plugins = self.plugins();
        plugins.standby.clear();
        self.admitters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        for (name, running) in std::mem::take(&mut plugins.running) {
            running.halt();
            if let Some(base) = candidate_of(&name) {
                self.comparison_of(base).stop();
            }
            tracing::info!(plugin = %name, "delivery stopped: no longer the leader");
        }
    }

    /// Whether this replica leads: delivers every event (not a follower waiting on
    /// standby), or, when replicas split the work, the cluster-scoped ones.
    pub fn leading(&self) -> bool {
        // A replica taking over delivers (its duty) before every plugin of it does.
        self.duty.leadership() == Leadership::Leading && self.duty.leading()
    }

    /// What this replica delivers now.
    pub fn duty(&self) -> &Arc<Duty> {
        &self.duty
    }

    /// Unloads every plugin, waiting for each worker's call in flight.
    pub fn shutdown(&self) {
        let mut plugins = self.plugins();
        plugins.standby.clear();
        let running = std::mem::take(&mut plugins.running);
        drop(plugins);
        for (name, mut r) in running {
            self.stop(&mut r);
            tracing::info!(plugin = %name, "plugin unloaded");
        }
    }
}

/// What `kept` holds for plugin `name` (shared by its versions) while `fits` says it is
/// still as configured; otherwise a new one from `make`, kept from then on.
fn kept_by_name<T>(
    kept: &Mutex<BTreeMap<String, Arc<T>>>,
    name: &str,
    fits: impl FnOnce(&T) -> bool,
    make: impl FnOnce() -> Arc<T>,
) -> Arc<T> {
    let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = kept.get(name)
        && fits(found)
    {
        return found.clone();
    }
    let made = make();
    kept.insert(name.to_owned(), made.clone());
    made
}

/// Starts delivering to a prepared version. When it replaces a running one, each of the old
/// version's subscriptions is swapped for the new one's in one step per informer: events
/// before the swap finish on the old version (its worker drains, then exits), events after go
/// to the new one, which starts from the current state as initial adds.
fn activate(
    engine: &Arc<Engine>,
    duty: &Arc<Duty>,
    plugins: &mut Plugins,
    p: Prepared,
) -> Result<Outcome, Reason> {
    let delivery = &p.settings.delivery;
    let (tx, rx) = queue(delivery.backlog, delivery.backlog_bytes);
    let settings = p.settings.clone();
    let deadline = p.ctx.limits.deadline;
    let old = plugins.running.remove(&p.file.name);
    let mut old_subs = old
        .as_ref()
        .map(Running::take_subscriptions)
        .unwrap_or_default();
    // One subscriber per type: a plugin subscribed twice to one type gets each event once.
    let mut merged: Vec<(crate::gvk::Gvk, crate::informer::Filter)> = Vec::new();
    for (gvk, filter) in &p.manifest.subscriptions {
        match merged.iter_mut().find(|(g, _)| g == gvk) {
            Some((_, first)) => first.also.push(filter.clone()),
            None => merged.push((gvk.clone(), filter.clone())),
        }
    }
    let mut subs = Vec::new();
    for (gvk, filter) in merged {
        let Some(lease) = p.leases.iter().find(|l| l.informer().gvk() == &gvk) else {
            continue;
        };
        let sub = match old_subs.iter().position(|s| s.informer().gvk() == &gvk) {
            Some(i) => lease
                .informer()
                .swap(&old_subs.swap_remove(i), filter, tx.clone()),
            None => lease.informer().subscribe(filter, tx.clone()),
        };
        subs.push(sub);
    }
    // Types the new version no longer subscribes to stop reaching the old one too.
    drop(old_subs);
    let open = tx;
    let initial_lists = subs.len();
    let subscriptions = Arc::new(Mutex::new(subs));
    let changes = p
        .manifest
        .subscriptions
        .iter()
        .filter_map(|(_, f)| f.changes.clone())
        .collect();
    let contract = p.instance.contract();
    let memory = p.ctx.memory.clone();
    let queue = rx.stats();
    let stats = Arc::new(PluginStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicBool::new(false));
    // A controller's new version reconciles nothing while the old one may be in a call: at
    // most the old one's longest call by the wall clock, and the grace a stop gives it.
    let after = old.as_ref().map(|o| {
        let longest = crate::wasm::deadline::wall_cap(o.deadline) + STOP_GRACE;
        (o.ended.clone(), Instant::now() + longest)
    });
    let runs =
        crate::plugins::manifest::with_configured(&p.manifest.schedules, &p.settings.schedules);
    let schedules: Vec<String> = runs.iter().map(|s| s.name.clone()).collect();
    let resync = p.settings.resync_with(p.manifest.resync);
    let reconciles = p
        .manifest
        .controller
        .as_ref()
        .map(|c| c.reconciles.to_string());
    let finalizes = p
        .manifest
        .controller
        .as_ref()
        .filter(|c| c.finalizer)
        .map(|c| c.reconciles.clone());
    let metrics = p.ctx.metrics.clone();
    let http = p.ctx.http_tally.clone();
    let thread = dispatch::start(dispatch::Setup {
        engine: engine.clone(),
        code: p.code,
        ctx: p.ctx,
        config: p.settings.config,
        delivery: p.settings.delivery,
        instance: p.instance,
        resync,
        leases: p.leases,
        claims: p.claims,
        rx,
        initial_lists,
        schedules: if plugins.on_demand_schedules {
            Vec::new()
        } else {
            runs
        },
        subscriptions: subscriptions.clone(),
        stats: stats.clone(),
        stop: stop.clone(),
        duty: duty.clone(),
        write_limits: p.write_limits,
        controller: p.manifest.controller.clone(),
        ended: ended.clone(),
        after,
        dry_run: p.trial.filter(|_| settings.mode.dry_run()),
        compare: Some(p.compare.clone()),
    })
    .map_err(|e| Reason::Start(format!("cannot start its thread: {e}")))?;
    if let (comparison, Side::Candidate) = &p.compare {
        comparison.start(p.promotion.clone());
        tracing::info!(plugin = %p.file.name, "candidate running beside the serving version, in dry-run mode: live events are compared");
    }
    let (outcome, reloads) = match old {
        Some(mut old) => {
            tracing::info!(plugin = %p.file.name, from = %old.file.digest(), to = %p.file.digest(), file = %p.file.path.display(), "plugin replaced");
            // The old worker finishes what it already received, then exits on its own; until
            // then what it holds counts against the plugin's memory cap and shows in status.
            if let Some(thread) = old.thread.take() {
                plugins.retiring.retain(|r| !r.thread.is_finished());
                plugins.retiring.push(Retiring {
                    thread,
                    memory: old.memory.version.clone(),
                });
            }
            (Outcome::Replaced, old.reloads + 1)
        }
        None => {
            tracing::info!(plugin = %p.file.name, digest = %p.file.digest(), file = %p.file.path.display(), "plugin loaded");
            (Outcome::Loaded, 0)
        }
    };
    plugins.running.insert(
        p.file.name.clone(),
        Running {
            deadline,
            settings,
            loaded: p.loaded,
            file: p.file,
            logger: p.logger,
            stats,
            queue,
            stop,
            ended,
            thread: Some(thread),
            subscriptions,
            reloads,
            changes,
            memory,
            contract,
            schedules,
            reconciles,
            finalizes,
            metrics,
            http,
            open,
        },
    );
    Ok(outcome)
}

/// Whether this host can run controller `c` with `settings`: not under sharding by uid (a
/// child and its parent have different uids, so different replicas would see them), and with
/// a patch grant on the reconciled type when it keeps a finalizer.
fn controller_fits(
    c: &crate::controller::Spec,
    settings: &PluginSettings,
    sharding: Option<crate::shard::ShardKey>,
) -> Result<(), Reason> {
    if sharding == Some(crate::shard::ShardKey::Uid) {
        return Err(Reason::NotSupported(
            "a controller under sharding by uid: a parent and its children would be placed apart; shard by namespace".into(),
        ));
    }
    // Granted in every namespace (a grant with no namespaces also covers cluster-scoped
    // objects).
    let granted = crate::write::allowed(
        &settings.grants.writes,
        crate::write::Verb::Patch,
        &c.reconciles,
        None,
        None,
    )
    .is_ok();
    if c.finalizer && !granted {
        return Err(Reason::WriteNotGranted {
            field: "controller.finalizer".into(),
            why: format!(
                "the finalizer is added and removed by a patch of {}, in every namespace",
                c.reconciles
            ),
        });
    }
    for (i, gvk) in c.owns.iter().enumerate() {
        let prunes = crate::write::allowed(
            &settings.grants.writes,
            crate::write::Verb::Delete,
            gvk,
            None,
            None,
        );
        if prunes.is_err() {
            return Err(Reason::WriteNotGranted {
                field: format!("controller.owns[{i}]"),
                why: format!(
                    "children no longer applied are deleted: delete of {gvk}, in every namespace"
                ),
            });
        }
    }
    Ok(())
}

impl Drop for PluginHost {
    fn drop(&mut self) {
        self.shutdown();
    }
}
