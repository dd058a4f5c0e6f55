//! What the operator decides for each plugin: sandbox limits, delivery policy, configuration
//! and grants, looked up by plugin name.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::gvk::Gvk;
use crate::oci::Source;
use crate::plugins::retry::Backoff;
use crate::rate::Rate;
use crate::wasm::http::AllowedHost;
use crate::wasm::{Limits, is_secret};
use crate::write::WriteGrant;

/// What the operator grants one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Types the plugin may subscribe to and query. `None`: whatever its manifest declares,
    /// except Secrets.
    pub resources: Option<Vec<Gvk>>,
    /// The only Secrets (`namespace/name`) it may see. Secrets are denied without this.
    pub secrets: Vec<String>,
    /// What it may write; nothing without this.
    pub writes: Vec<WriteGrant>,
    /// The hosts it may send HTTP requests to; none without this.
    pub http: Vec<AllowedHost>,
    /// Those of `http` it may still reach in dry-run mode (a request there changes nothing).
    pub http_safe: Vec<AllowedHost>,
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

/// How events reach one plugin: retries, instance recycling and the queue's bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Attempts per event before it is given up; 0: no count, only `give_up_after`.
    pub max_attempts: u32,
    /// How long after its first failure an event that keeps failing in a way that may pass
    /// (an outage, a conflict, a trap) is given up.
    pub give_up_after: Duration,
    /// Backoff between attempts of one event.
    pub backoff: Backoff,
    /// Calls after which an instance is replaced by a fresh one (bounds the memory a
    /// garbage-collected guest accumulates); 0 for never.
    pub recycle_after_calls: u64,
    /// How long an instance may wait for work before it is released (the next event gets a
    /// fresh one); zero for never.
    pub release_idle_after: Duration,
    /// How long a key an event wakes waits for more events before a controller reconciles
    /// it; zero: at once, as client-go's work queue does. At most [`MAX_DEBOUNCE`].
    pub debounce: Duration,
    /// Queued events past which new ones fold into the waiting state of their object.
    pub backlog: usize,
    /// The same, in bytes of the objects the queued events hold.
    pub backlog_bytes: usize,
    /// The rate of its writes to the cluster (Events aside).
    pub write_rate: Rate,
    /// The rate of the Events it records.
    pub event_rate: Rate,
}

/// The longest reconcile debounce a configuration may set (past any clock's range, a
/// timer's instant could not be computed).
pub const MAX_DEBOUNCE: Duration = Duration::from_secs(3600);

impl Default for Delivery {
    fn default() -> Self {
        Self {
            max_attempts: 0,
            give_up_after: DEFAULT_GIVE_UP_AFTER,
            backoff: Backoff::default(),
            recycle_after_calls: 100_000,
            release_idle_after: DEFAULT_RELEASE_IDLE_AFTER,
            debounce: Duration::ZERO,
            backlog: 10_000,
            backlog_bytes: 64 << 20,
            // client-go's client defaults to 5 a second, burst 10; a plugin is a small
            // controller, and many run in one host.
            write_rate: Rate {
                per_second: 10,
                burst: 20,
            },
            event_rate: Rate {
                per_second: 5,
                burst: 25,
            },
        }
    }
}

/// Bytes of state all plugins together write through per second by default.
pub const DEFAULT_STATE_WRITE_BYTES_PER_SECOND: u32 = 1 << 20;

/// How long a failing event is retried by default: past an API server restart (about 10 s)
/// and a rolling upgrade of three control-plane nodes (minutes), as client-go's workqueue and
/// controller-runtime retry without a count.
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(15 * 60);

/// How long an instance may be idle by default: long enough that a steady trickle of events
/// reuses it, short enough that a quiet plugin costs its compiled code and little else.
pub const DEFAULT_RELEASE_IDLE_AFTER: Duration = Duration::from_secs(60);

/// The operator's settings for one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSettings {
    /// What one instance may spend.
    pub limits: Limits,
    /// How events are delivered and retried.
    pub delivery: Delivery,
    /// Configuration handed to `init` (JSON text).
    pub config: String,
    /// What it may read.
    pub grants: Grants,
    /// Resync period when its manifest sets none.
    pub resync: Option<Duration>,
    /// Whether the operator set `resync` for this plugin, over its manifest's (`None` there:
    /// no resyncs).
    pub resync_over_manifest: bool,
    /// Schedules the operator configured: each replaces the manifest's of that name, or adds
    /// one.
    pub schedules: Vec<crate::plugins::manifest::Schedule>,
    /// The registry it is pulled from; `None`: the plugins folder.
    pub source: Option<Source>,
    /// Whether its writes and admission answers take effect, or are only reported.
    pub mode: crate::plugins::Mode,
    /// Equal live events after which its candidate (`NAME.candidate.wasm`) replaces it, with
    /// no difference and no failure; `None`: only by the operator.
    pub promote_after: Option<u64>,
}

impl PluginSettings {
    /// The resync period of a plugin whose manifest asks for `declared`.
    pub fn resync_with(&self, declared: Option<Duration>) -> Option<Duration> {
        if self.resync_over_manifest {
            self.resync
        } else {
            declared.or(self.resync)
        }
    }
}

impl Default for PluginSettings {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            delivery: Delivery::default(),
            config: "{}".to_owned(),
            grants: Grants::default(),
            resync: Some(DEFAULT_RESYNC),
            resync_over_manifest: false,
            schedules: Vec::new(),
            source: None,
            mode: crate::plugins::Mode::Serve,
            promote_after: None,
        }
    }
}

/// The default resync period, controller-runtime's: a write given up after an outage, or a
/// change a plugin missed, is made good within it.
pub const DEFAULT_RESYNC: Duration = Duration::from_secs(10 * 3600);

/// The default bound on compiling one plugin (an 18 MB Python component takes about 45 s in
/// a debug build on 2 cores, a few in release).
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(300);

/// The default bound on a plugin file's size.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

/// Settings for every plugin: the defaults, and complete settings for the plugins the
/// configuration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginsConfig {
    /// Largest plugin file read, in bytes; larger ones fail to load without being read.
    pub max_file_bytes: u64,
    /// Longest a plugin may take to compile; past it, the load fails.
    pub compile_timeout: Duration,
    /// CPU all plugins together may use, in millicores (0: no bound; `cpu.rs`).
    pub cpu_millicores: u32,
    /// Bytes of state all plugins together write through per second (0: no bound).
    pub state_write_bytes_per_second: u32,
    /// What a plugin the configuration does not name gets.
    pub defaults: PluginSettings,
    /// Plugins with an entry of their own, by name (their entries already include the
    /// defaults they do not override).
    pub named: BTreeMap<String, PluginSettings>,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        Self {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            compile_timeout: DEFAULT_COMPILE_TIMEOUT,
            cpu_millicores: crate::cpu::CpuPool::default_millicores(),
            state_write_bytes_per_second: DEFAULT_STATE_WRITE_BYTES_PER_SECOND,
            defaults: PluginSettings::default(),
            named: BTreeMap::new(),
        }
    }
}

impl PluginsConfig {
    /// The settings of plugin `name`.
    pub fn settings(&self, name: &str) -> &PluginSettings {
        self.named.get(name).unwrap_or(&self.defaults)
    }

    /// The plugins pulled from registries, with their sources.
    pub fn registry_sources(&self) -> impl Iterator<Item = (&str, &Source)> {
        self.named
            .iter()
            .filter_map(|(name, s)| Some((name.as_str(), s.source.as_ref()?)))
    }

    /// Whether plugin `name` comes from a registry (the plugins folder does not manage it).
    pub fn from_registry(&self, name: &str) -> bool {
        self.settings(name).source.is_some()
    }

    /// A warning when the configuration names plugins but not `name`, which then runs with
    /// the defaults: usually a file named differently from its entry (cargo writes
    /// `ns_quota.wasm` for a package `ns-quota`; a plugin's name is its file stem).
    pub fn missing_entry(&self, name: &str) -> Option<String> {
        if self.named.is_empty() || self.named.contains_key(name) {
            return None;
        }
        let spelled = |n: &str| n.replace('_', "-").to_lowercase();
        Some(
            match self.named.keys().find(|k| spelled(k) == spelled(name)) {
                Some(entry) => format!(
                    "the configuration has no entry plugins.{name} but one for plugins.{entry}: a plugin's name is its file name without .wasm, so this one runs with the defaults; rename the file to {entry}.wasm or the entry to {name}"
                ),
                None => format!(
                    "the configuration has no entry plugins.{name} (it names {}): this plugin runs with the defaults",
                    self.named.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            },
        )
    }
}
