//! The host configuration file: defaults for every plugin and overrides per plugin.
//!
//! ```yaml
//! pluginsDir: /plugins         # plugin components; --plugins / KUBEWASM_PLUGINS override
//! metricsAddress: 0.0.0.0:9090 # /metrics /healthz /readyz /status; off when absent;
//!                              # --metrics-address / KUBEWASM_METRICS_ADDRESS override
//! shutdownTimeoutSeconds: 10   # on SIGTERM, how long in-flight handler calls may finish
//! syncTimeoutSeconds: 300      # a plugin or informer not synced this long after it started
//!                              # stops holding /readyz at 503 (listed in /status sync_overdue)
//! maxPluginMiB: 64             # larger plugin files fail to load without being read
//! compileTimeoutSeconds: 300   # a plugin compiling longer fails to load (its compiling
//!                              # process is stopped)
//! compileMemoryMiB: 1024       # data memory a plugin's compiling process may use
//! compiledCacheMiB: 1024       # compiled-code cache folder, least recently used evicted
//! pluginCpuMillicores: 1000    # CPU all plugins together may use (1000: one core; default:
//!                              # every core but one, at least one; 0: no bound). Past it,
//!                              # plugins using more than their fair share of it wait
//!                              # (docs/SECURITY.md, "CPU over time")
//! stateWriteTotalKiBPerSecond: 1024  # plugin state all plugins together write through to
//!                              # the cluster (0: no bound); past it, changed maps wait
//! defaultNamespace: default    # with --cluster DIR: where namespaced objects written without
//!                              # a namespace land (as kubectl's context namespace)
//! pluginResources: false       # also load the plugins of KubewasmPlugin objects
//!                              # (examples/deploy/kubewasmplugin-crd.yaml), live
//! readinessFollowsApiServer: false  # /readyz 503 while the API server does not answer
//!                              # (a hang is noticed within 20 s); /healthz is not affected
//! admission:                   # admission webhooks of plugins that declare them; off when
//!   address: 0.0.0.0:8443      # absent (HTTPS, POST /admit/<plugin>, every replica serves)
//!   certFile: /etc/kubewasm/tls/tls.crt  # PEM chain and key, read again when they change
//!   keyFile: /etc/kubewasm/tls/tls.key
//!   concurrency: 2             # reviews running at once, all plugins together (default:
//!                              # one per core, at least 2); each plugin gets all but one
//!                              # (at most 4); one still waiting when the webhook's timeout
//!                              # less a margin is up gets its failure policy's answer
//!   recordReviews: /var/lib/kubewasm/reviews  # each plugin's answered reviews appended
//!                              # to <plugin>.reviews.test.yaml here, for `kubewasm test
//!                              # --compare` (Secrets' data left out; 64 MiB each at most)
//! traces:                      # OpenTelemetry traces of event handling; off when absent
//!   endpoint: http://otel-collector:4318  # OTLP over HTTP (protobuf); /v1/traces is added
//!   sampleRatio: 1.0           # the fraction of event traces kept
//!   serviceName: kubewasm      # the service.name resource attribute
//! otlpMetrics:                 # plugins' own metrics over OTLP; off when absent
//!   endpoint: http://otel-collector:4318  # OTLP over HTTP (protobuf); /v1/metrics is added
//!   intervalSeconds: 60        # between exports (1 to 3600)
//!   serviceName: kubewasm      # the service.name resource attribute
//! leaderElection:              # off when absent; --leader-elect / KUBEWASM_LEADER_ELECT
//!   enabled: true
//!   namespace: kubewasm        # of the Lease (default: $POD_NAMESPACE, else "default")
//!   name: kubewasm             # of the Lease
//!   leaseDurationSeconds: 15   # a follower takes over this long after the leader vanished;
//!                              # renewed every 2/15 of it, given up after 2/3 (client-go's)
//! sharding:                    # replicas split namespaced objects between them, each
//!   enabled: true              # delivering its slices; off when absent. Implies leader
//!                              # election (cluster-scoped work stays with the leader)
//!   key: namespace             # what decides an object's slice: namespace or uid
//!   group: kubewasm            # of the members' Leases (default: the election's name)
//! defaults:                    # every plugin; each field optional
//!   resyncSeconds: 36000       # resync period for plugins whose manifest sets none (0: off);
//!                              # controller-runtime's 10 h: an event given up is made good
//!   limits:
//!     deadlineMs: 1000         # CPU time a call may use (ten times that by the wall clock)
//!     memoryMiB: 64            # linear memory per instance (one that has grown by 3/4 of
//!                              # its room after init is replaced before its next call)
//!     queryMiB: 16             # largest list of keys or index values one query returns
//!     maxHandles: 10000        # object handles one instance may hold at once
//!     retryForSeconds: 900     # a failing event is retried with backoff this long after its
//!                              # first failure, then given up (a refusal that cannot pass,
//!                              # such as Forbidden or Invalid, or retry false: at once)
//!     maxAttempts: 0           # also give up after this many attempts (0: no count)
//!     backoffBaseMs: 5         # first retry delay, doubling per attempt...
//!     backoffCapMs: 60000      # ...up to this
//!     logLinesPerSecond: 100   # logging calls, stdout and stderr together
//!     logBurst: 500
//!     cpuMillisPerSecond: 1000 # CPU time the plugin may use per second, its calls (with
//!                              # its admission reviews) and the host's work for it together
//!                              # (0: only the pool's bound); past it, its calls wait, even
//!                              # mid-call
//!     recycleAfterCalls: 100000  # fresh instance after this many calls (0: never)
//!     releaseIdleSeconds: 60   # an instance idle this long is released; the next event
//!                              # gets a fresh one (0: never)
//!     reconcileDebounceMs: 0   # a controller: a key an event wakes waits this long for more
//!                              # events before its reconcile, so a storm costs at most one
//!                              # reconcile per key per period (0: at once, as client-go;
//!                              # at most 3600000)
//!     backlog: 10000           # queued events past which an object's events fold into one
//!     backlogMiB: 64           # the same for the bytes of the objects queued events hold
//!     writesPerSecond: 10      # writes to the cluster (0: no limit); the plugin waits
//!     writeBurst: 20
//!     eventsPerSecond: 5       # Events it records, likewise
//!     eventBurst: 25
//!     httpRequestsPerSecond: 10  # HTTP requests (refused past it; 16 open at once)
//!     httpBurst: 20
//!     stateKiB: 64             # the plugin's state (all its maps on a replica, when sharded):
//!                              # keys and values together (at most 140)...
//!     stateEntries: 1024       # ...entries (at most 8192)...
//!     stateValueKiB: 16        # ...and one value (a change past them is refused)
//!     stateWriteKiBPerSecond: 64  # its state written through to the cluster (0: no
//!                              # bound); a changed map waits, then is written as it is then
//!     metricSeries: 1000       # label combinations of the metrics it publishes, all
//!                              # together; a new one past this is refused (at most 100000)
//! plugins:
//!   deployment-view:           # the plugin's file name without .wasm
//!     candidate:               # its candidate, the file NAME.candidate.wasm beside it: run
//!       promoteAfter: 1000     # in dry-run on the same events, compared event by event, and
//!                              # renamed over NAME.wasm after this many equal live events
//!                              # with no difference and no failure (absent: only by
//!                              # `kubewasm promote`)
//!     mode: serve              # serve; monitor: its admission answers are reported, and
//!                              # every review is allowed as it came; dry-run: as monitor,
//!                              # and its writes are sent as dry runs (dryRun=All) and
//!                              # reported, its state stays in memory (/status "trial")
//!     config: {namespaces: [shop]}   # handed to its init as JSON
//!     limits: {deadlineMs: 500}      # overrides, field by field
//!     grants:
//!       resources: [apps/v1/Deployment, apps/v1/ReplicaSet, v1/Pod, v1/Event]
//!       secrets: [shop/db-password]  # Secrets it may read, by namespace/name
//!       writes:                      # what it may write (nothing without this)
//!         - resources: [v1/Pod]
//!           verbs: [patch]           # create, patch (apply and patches), delete
//!           subresources: [status]   # also these subresources (status, scale)
//!           namespaces: [shop]       # absent: every namespace and cluster-scoped objects
//!         - resources: [events.k8s.io/v1/Event]
//!           verbs: [create, patch]   # record-event: create, and patch for repeats
//!       http: [hooks.example.com, 127.0.0.1:8080]  # hosts it may send HTTP requests to
//!                                    # (no port: 80 and 443); none without this
//!       httpSafe: [127.0.0.1:8080]  # those of http it still reaches in dry-run mode
//!     resyncSeconds: 0         # its resync period, over its manifest's (0: no resyncs, so
//!                              # updates its change filters drop are never delivered whole)
//!     schedules:               # its schedules, by name: one its manifest declares runs on
//!       summary:               # this cron instead; another name adds a schedule (`tick`
//!         cron: "0 * * * *"    # is called with it). Five fields or @every 30s
//!         timeZone: Europe/Paris     # IANA name (default UTC)
//!         jitterSeconds: 30    # up to this much random delay per tick (at most 3600)
//!   pod-phase:
//!     source:                  # pulled from an OCI registry, not the plugins folder
//!       oci: oci://registry.example.com/plugins/pod-phase:1.2   # a tag (looked up
//!                                    # again every pollSeconds) or @sha256:... (pinned)
//!       digest: sha256:4a3d2a7e1bb5e7c8b3b0b8f5d1f2a6c9e0d4b7a8c5f1e2d3b4a5968778695a4b
//!                                    # the manifest digest it must have (optional)
//!       pollSeconds: 300
//!       pullSecret: /etc/kubewasm/regcred/.dockerconfigjson  # registry credentials
//!       caFile: /etc/kubewasm/registry-ca.pem  # trusted besides the system's roots
//!       cosignKey: /etc/kubewasm/cosign.pub    # it must carry a cosign signature by it
//! ```
//!
//! Without `grants.resources` a plugin may read what its manifest declares, except Secrets.
//! Unknown fields are errors, reported with their place in the file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::admission::ServeConfig;
use crate::gvk::Gvk;
use crate::leader::ElectionConfig;
use crate::members::MembersConfig;
use crate::oci;
use crate::plugins::manifest::{MAX_SCHEDULES, Schedule};
use crate::plugins::{Grants, PluginSettings, PluginsConfig};
use crate::shard::ShardKey;
use crate::source::manifests::scope::DEFAULT_NAMESPACE;
use crate::traces::TracesConfig;
use crate::wasm::http::AllowedHost;
use crate::wasm::state::{MAX_STATE_ENTRIES, MAX_STATE_KIB};
use crate::write::{SUBRESOURCES, Verb, WriteGrant};
use serde::Deserialize;

/// How long a plugin or informer may take to sync before it stops counting for readiness.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the configuration file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("configuration {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error (in the message, so not a `source`: printed once).
        cause: std::io::Error,
    },
    /// The file is not valid YAML of the expected shape.
    #[error("configuration {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the field and position.
        message: String,
    },
}

/// Limit overrides; every field optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LimitsConfig {
    deadline_ms: Option<u64>,
    #[serde(rename = "memoryMiB")]
    memory_mib: Option<usize>,
    #[serde(rename = "queryMiB")]
    query_mib: Option<usize>,
    max_handles: Option<usize>,
    max_attempts: Option<u32>,
    retry_for_seconds: Option<u64>,
    backoff_base_ms: Option<u64>,
    backoff_cap_ms: Option<u64>,
    log_lines_per_second: Option<u32>,
    log_burst: Option<u32>,
    cpu_millis_per_second: Option<u32>,
    recycle_after_calls: Option<u64>,
    release_idle_seconds: Option<u64>,
    reconcile_debounce_ms: Option<u64>,
    backlog: Option<usize>,
    #[serde(rename = "backlogMiB")]
    backlog_mib: Option<usize>,
    writes_per_second: Option<u32>,
    write_burst: Option<u32>,
    events_per_second: Option<u32>,
    event_burst: Option<u32>,
    http_requests_per_second: Option<u32>,
    http_burst: Option<u32>,
    #[serde(rename = "stateKiB")]
    state_kib: Option<usize>,
    state_entries: Option<usize>,
    #[serde(rename = "stateValueKiB")]
    state_value_kib: Option<usize>,
    #[serde(rename = "stateWriteKiBPerSecond")]
    state_write_kib_per_second: Option<u32>,
    metric_series: Option<usize>,
}

impl LimitsConfig {
    /// `base` with these overrides applied; `field` names this block in errors.
    fn apply(&self, mut base: PluginSettings, field: &str) -> Result<PluginSettings, String> {
        let (limits, delivery) = (&mut base.limits, &mut base.delivery);
        if let Some(ms) = self.deadline_ms {
            if ms == 0 {
                return Err(format!("{field}.deadlineMs: must be positive"));
            }
            limits.deadline = Duration::from_millis(ms);
        }
        if let Some(mib) = self.memory_mib {
            if mib == 0 {
                return Err(format!("{field}.memoryMiB: must be positive"));
            }
            limits.memory_bytes = mib << 20;
        }
        if let Some(mib) = self.query_mib {
            limits.query_bytes = mib << 20;
        }
        if let Some(n) = self.max_handles {
            if n == 0 {
                return Err(format!("{field}.maxHandles: must be at least 1"));
            }
            limits.handles = n;
        }
        if let Some(n) = self.log_lines_per_second {
            limits.log_rate.per_second = n;
        }
        if let Some(n) = self.log_burst {
            limits.log_rate.burst = n;
        }
        if let Some(n) = self.cpu_millis_per_second {
            limits.cpu_millis_per_second = n;
        }
        if let Some(n) = self.metric_series {
            if n > crate::plugin_metrics::MAX_SERIES {
                return Err(format!(
                    "{field}.metricSeries: {n} is more than {}",
                    crate::plugin_metrics::MAX_SERIES
                ));
            }
            limits.metric_series = n;
        }
        if let Some(kib) = self.state_write_kib_per_second {
            limits.state.write_bytes_per_second = kib.saturating_mul(1 << 10);
        }
        if let Some(n) = self.max_attempts {
            delivery.max_attempts = n;
        }
        if let Some(seconds) = self.retry_for_seconds {
            if seconds == 0 {
                return Err(format!("{field}.retryForSeconds: must be positive"));
            }
            delivery.give_up_after = Duration::from_secs(seconds);
        }
        if let Some(ms) = self.backoff_base_ms {
            delivery.backoff.base = Duration::from_millis(ms);
        }
        if let Some(ms) = self.backoff_cap_ms {
            delivery.backoff.cap = Duration::from_millis(ms);
        }
        if let Some(n) = self.recycle_after_calls {
            delivery.recycle_after_calls = n;
        }
        if let Some(seconds) = self.release_idle_seconds {
            delivery.release_idle_after = Duration::from_secs(seconds);
        }
        if let Some(ms) = self.reconcile_debounce_ms {
            let most = crate::plugins::MAX_DEBOUNCE;
            if u128::from(ms) > most.as_millis() {
                return Err(format!(
                    "{field}.reconcileDebounceMs: {ms} is more than {} (an hour)",
                    most.as_millis()
                ));
            }
            delivery.debounce = Duration::from_millis(ms);
        }
        if let Some(n) = self.backlog {
            delivery.backlog = n;
        }
        if let Some(mib) = self.backlog_mib {
            delivery.backlog_bytes = mib.saturating_mul(1 << 20);
        }
        for (value, into, name) in [
            (self.state_kib, &mut limits.state.bytes, "stateKiB"),
            (
                self.state_entries,
                &mut limits.state.entries,
                "stateEntries",
            ),
            (
                self.state_value_kib,
                &mut limits.state.value_bytes,
                "stateValueKiB",
            ),
        ] {
            match value {
                Some(0) => return Err(format!("{field}.{name}: must be positive")),
                Some(n)
                    if (name == "stateKiB" && n > MAX_STATE_KIB)
                        || (name == "stateEntries" && n > MAX_STATE_ENTRIES) =>
                {
                    let most = if name == "stateKiB" {
                        MAX_STATE_KIB
                    } else {
                        MAX_STATE_ENTRIES
                    };
                    return Err(format!(
                        "{field}.{name}: {n} is more than {most} (the state is kept in one \
                         ConfigMap of at most 1 MB, and JSON may write a byte as six)"
                    ));
                }
                Some(n) if name == "stateEntries" => *into = n,
                Some(n) => *into = n.saturating_mul(1 << 10),
                None => {}
            }
        }
        for (value, into) in [
            (self.writes_per_second, &mut delivery.write_rate.per_second),
            (self.write_burst, &mut delivery.write_rate.burst),
            (self.events_per_second, &mut delivery.event_rate.per_second),
            (self.event_burst, &mut delivery.event_rate.burst),
            (
                self.http_requests_per_second,
                &mut limits.http_rate.per_second,
            ),
            (self.http_burst, &mut limits.http_rate.burst),
        ] {
            if let Some(n) = value {
                *into = n;
            }
        }
        Ok(base)
    }
}

/// A Secret written as `namespace/name`.
fn parse_secret(text: &str) -> Result<String, String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(text.to_owned())
        }
        _ => Err(format!("{text:?} is not namespace/name")),
    }
}

/// Each of `items` parsed, or the first error prefixed with `field[i]`.
fn parse_each<T, E: std::fmt::Display>(
    items: Vec<String>,
    field: &str,
    parse: fn(&str) -> Result<T, E>,
) -> Result<Vec<T>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse(item).map_err(|e| format!("{field}[{i}]: {e}")))
        .collect()
}

/// What the operator grants one plugin.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantsConfig {
    resources: Option<Vec<String>>,
    #[serde(default)]
    secrets: Vec<String>,
    #[serde(default)]
    writes: Vec<WriteGrantConfig>,
    #[serde(default)]
    http: Vec<String>,
    #[serde(default, rename = "httpSafe")]
    http_safe: Vec<String>,
}

/// One rule of `grants.writes` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteGrantConfig {
    resources: Vec<String>,
    #[serde(default)]
    subresources: Vec<String>,
    verbs: Vec<String>,
    namespaces: Option<Vec<String>>,
}

impl WriteGrantConfig {
    fn parse(self, field: &str) -> Result<WriteGrant, String> {
        let need = |list: &[String], what: &str| {
            if list.is_empty() {
                Err(format!("{field}.{what}: name at least one"))
            } else {
                Ok(())
            }
        };
        need(&self.resources, "resources")?;
        need(&self.verbs, "verbs")?;
        let subresources = parse_each(self.subresources, &format!("{field}.subresources"), |s| {
            if SUBRESOURCES.contains(&s) {
                Ok(s.to_owned())
            } else {
                Err(format!(
                    "{s:?}: a plugin writes to the subresources status or scale"
                ))
            }
        })?;
        let namespaces = match self.namespaces {
            Some(list) => {
                need(&list, "namespaces")?;
                Some(parse_each(list, &format!("{field}.namespaces"), |ns| {
                    if is_namespace_name(ns) {
                        Ok(ns.to_owned())
                    } else {
                        Err(format!("{ns:?} is not a namespace name"))
                    }
                })?)
            }
            None => None,
        };
        Ok(WriteGrant {
            resources: parse_each(self.resources, &format!("{field}.resources"), Gvk::parse)?,
            subresources,
            verbs: parse_each(self.verbs, &format!("{field}.verbs"), Verb::parse)?,
            namespaces,
        })
    }
}

/// Settings shared by every plugin.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DefaultsConfig {
    #[serde(default)]
    limits: LimitsConfig,
    resync_seconds: Option<u64>,
}

/// Leader election settings.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    /// Whether to elect a leader (only the leader delivers events).
    #[serde(default)]
    pub enabled: bool,
    /// Namespace of the Lease.
    pub namespace: Option<String>,
    /// Name of the Lease.
    pub name: Option<String>,
    /// Validity of the Lease without renewal, in seconds.
    pub lease_duration_seconds: Option<u64>,
}

/// How replicas split the work.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardingConfig {
    /// Whether replicas split namespaced objects between them (implies leader election).
    #[serde(default)]
    pub enabled: bool,
    /// What a namespaced object's slice is decided by: `namespace` (default) or `uid`.
    #[serde(default)]
    pub key: ShardKey,
    /// The group of the members' Leases (default: the election Lease's name).
    pub group: Option<String>,
}

/// One plugin's overrides.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginConfig {
    config: Option<serde_json::Value>,
    #[serde(default)]
    limits: LimitsConfig,
    grants: Option<GrantsConfig>,
    source: Option<SourceConfig>,
    #[serde(rename = "resyncSeconds")]
    resync_seconds: Option<u64>,
    #[serde(default)]
    schedules: BTreeMap<String, ScheduleConfig>,
    mode: Option<String>,
    candidate: Option<CandidateConfig>,
}

/// How a plugin's candidate version is promoted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CandidateConfig {
    promote_after: Option<u64>,
}

/// A schedule the operator gives a plugin, by name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScheduleConfig {
    cron: String,
    time_zone: Option<String>,
    #[serde(default)]
    jitter_seconds: u32,
}

impl PluginConfig {
    /// `defaults` with this entry applied; `field` names the entry in errors.
    fn settings(self, defaults: &PluginSettings, field: &str) -> Result<PluginSettings, String> {
        let mut settings = self
            .limits
            .apply(defaults.clone(), &format!("{field}.limits"))?;
        if let Some(candidate) = self.candidate {
            if candidate.promote_after == Some(0) {
                return Err(format!("{field}.candidate.promoteAfter: must be positive"));
            }
            settings.promote_after = candidate.promote_after;
        }
        if let Some(mode) = self.mode {
            settings.mode =
                crate::plugins::Mode::parse(&mode).map_err(|e| format!("{field}.mode: {e}"))?;
        }
        if let Some(grants) = self.grants {
            let field = format!("{field}.grants");
            let http = parse_each(grants.http, &format!("{field}.http"), AllowedHost::parse)?;
            let http_safe = parse_each(
                grants.http_safe,
                &format!("{field}.httpSafe"),
                AllowedHost::parse,
            )?;
            if let Some((i, host)) = http_safe
                .iter()
                .enumerate()
                .find(|(_, h)| !http.contains(h))
            {
                return Err(format!(
                    "{field}.httpSafe[{i}]: {host} is not in {field}.http (a host safe in dry-run mode must be granted)"
                ));
            }
            settings.grants = Grants {
                resources: match grants.resources {
                    Some(rs) => Some(parse_each(rs, &format!("{field}.resources"), Gvk::parse)?),
                    None => None,
                },
                secrets: parse_each(grants.secrets, &format!("{field}.secrets"), parse_secret)?,
                writes: grants
                    .writes
                    .into_iter()
                    .enumerate()
                    .map(|(i, w)| w.parse(&format!("{field}.writes[{i}]")))
                    .collect::<Result<_, _>>()?,
                http,
                http_safe,
            };
        }
        if let Some(config) = self.config {
            settings.config = config.to_string();
        }
        if let Some(source) = self.source {
            settings.source = Some(source.parse(&format!("{field}.source"))?);
        }
        if let Some(seconds) = self.resync_seconds {
            settings.resync = (seconds > 0).then(|| Duration::from_secs(seconds));
            settings.resync_over_manifest = true;
        }
        if self.schedules.len() > MAX_SCHEDULES {
            return Err(format!(
                "{field}.schedules: {} entries: at most {MAX_SCHEDULES}",
                self.schedules.len()
            ));
        }
        for (name, s) in &self.schedules {
            let schedule = Schedule::parse(name, &s.cron, s.time_zone.as_deref(), s.jitter_seconds)
                .map_err(|(part, reason)| {
                    let part = match part {
                        "time-zone" => "timeZone",
                        "jitter-seconds" => "jitterSeconds",
                        "name" => return format!("{field}.schedules.{name:?}: {reason}"),
                        other => other,
                    };
                    format!("{field}.schedules.{name}.{part}: {reason}")
                })?;
            settings.schedules.push(schedule);
        }
        Ok(settings)
    }
}

/// Where a plugin is pulled from, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SourceConfig {
    oci: String,
    digest: Option<String>,
    poll_seconds: Option<u64>,
    pull_secret: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    cosign_key: Option<PathBuf>,
}

impl SourceConfig {
    fn parse(self, field: &str) -> Result<oci::Source, String> {
        let reference =
            oci::Reference::parse(&self.oci).map_err(|e| format!("{field}.oci: {e}"))?;
        let mut source = oci::Source::new(reference);
        if let Some(text) = self.digest {
            let digest = oci::Digest::parse(&text).map_err(|e| format!("{field}.digest: {e}"))?;
            if source.digest.as_ref().is_some_and(|d| d != &digest) {
                return Err(format!(
                    "{field}.digest: {digest} differs from the digest in {field}.oci"
                ));
            }
            source.digest = Some(digest);
        }
        if let Some(seconds) = self.poll_seconds {
            if seconds == 0 {
                return Err(format!("{field}.pollSeconds: must be positive"));
            }
            source.poll = Duration::from_secs(seconds);
        }
        source.pull_secret = self.pull_secret;
        source.ca_file = self.ca_file;
        source.cosign_key = self.cosign_key;
        Ok(source)
    }
}

/// The admission webhook server as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AdmissionFile {
    address: String,
    cert_file: PathBuf,
    key_file: PathBuf,
    concurrency: Option<usize>,
    record_reviews: Option<PathBuf>,
}

impl AdmissionFile {
    fn parse(self) -> Result<ServeConfig, String> {
        Ok(ServeConfig {
            address: self.address.parse().map_err(|_| {
                format!(
                    "admission.address: {:?} is not host:port with an IP address (for example 0.0.0.0:8443)",
                    crate::text::cut(self.address.clone(), 80)
                )
            })?,
            cert_file: self.cert_file,
            key_file: self.key_file,
            concurrency: match self.concurrency {
                Some(0) => return Err("admission.concurrency: at least 1".into()),
                Some(n) => n,
                None => crate::admission::default_concurrency(),
            },
            record_reviews: self.record_reviews,
        })
    }
}

/// The OTLP metrics settings as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OtlpMetricsFile {
    endpoint: String,
    interval_seconds: Option<u64>,
    service_name: Option<String>,
}

impl OtlpMetricsFile {
    fn parse(self) -> Result<crate::otlp_metrics::OtlpMetricsConfig, String> {
        let every = Duration::from_secs(self.interval_seconds.unwrap_or(60));
        let mut config = crate::otlp_metrics::OtlpMetricsConfig::new(&self.endpoint, every)
            .map_err(|e| match e {
                crate::otlp_metrics::OtlpMetricsError::Endpoint(_) => {
                    format!("otlpMetrics.endpoint: {e}")
                }
                crate::otlp_metrics::OtlpMetricsError::Interval(_) => {
                    format!("otlpMetrics.intervalSeconds: {e}")
                }
            })?;
        if let Some(name) = self.service_name {
            config.service_name = name;
        }
        Ok(config)
    }
}

/// The traces settings as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TracesFile {
    endpoint: String,
    sample_ratio: Option<f64>,
    service_name: Option<String>,
}

impl TracesFile {
    fn parse(self) -> Result<TracesConfig, String> {
        let mut config = TracesConfig::new(&self.endpoint).map_err(|e| {
            let endpoint = crate::text::cut(self.endpoint.clone(), 200);
            format!("traces.endpoint: {endpoint:?} is {e}")
        })?;
        if let Some(ratio) = self.sample_ratio {
            if !(0.0..=1.0).contains(&ratio) {
                return Err(format!(
                    "traces.sampleRatio: {ratio} is not between 0 and 1"
                ));
            }
            config.sample_ratio = ratio;
        }
        if let Some(name) = self.service_name {
            config.service_name = name;
        }
        Ok(config)
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileConfig {
    plugins_dir: Option<PathBuf>,
    metrics_address: Option<String>,
    shutdown_timeout_seconds: Option<u64>,
    sync_timeout_seconds: Option<u64>,
    #[serde(rename = "maxPluginMiB")]
    max_plugin_mib: Option<u64>,
    compile_timeout_seconds: Option<u64>,
    #[serde(rename = "compileMemoryMiB")]
    compile_memory_mib: Option<u64>,
    #[serde(rename = "compiledCacheMiB")]
    compiled_cache_mib: Option<u64>,
    plugin_cpu_millicores: Option<u32>,
    #[serde(rename = "stateWriteTotalKiBPerSecond")]
    state_write_total_kib_per_second: Option<u32>,
    default_namespace: Option<String>,
    #[serde(default)]
    plugin_resources: bool,
    #[serde(default)]
    readiness_follows_api_server: bool,
    traces: Option<TracesFile>,
    otlp_metrics: Option<OtlpMetricsFile>,
    admission: Option<AdmissionFile>,
    #[serde(default)]
    leader_election: LeaderElectionConfig,
    #[serde(default)]
    sharding: ShardingConfig,
    #[serde(default)]
    defaults: DefaultsConfig,
    #[serde(default)]
    plugins: BTreeMap<String, PluginConfig>,
}

/// The host configuration, parsed and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// Folder of plugin components.
    pub plugins_dir: Option<PathBuf>,
    /// Address of the HTTP endpoints.
    pub metrics_address: Option<SocketAddr>,
    /// Bound on the wait for in-flight handler calls at shutdown.
    pub shutdown_timeout: Duration,
    /// Bound on the compiled-code cache folder, in bytes.
    pub compiled_cache_bytes: u64,
    /// Cap on the data memory of a process compiling a plugin, in bytes.
    pub compile_memory_bytes: u64,
    /// How long a plugin or informer may take to sync before it stops counting for
    /// readiness.
    pub sync_timeout: Duration,
    /// Where a manifests folder's namespaced objects written without a namespace land
    /// (`default`, as with kubectl).
    pub default_namespace: String,
    /// Leader election.
    pub leader_election: LeaderElectionConfig,
    /// Replicas splitting the work.
    pub sharding: ShardingConfig,
    /// Whether plugins are also declared by `KubewasmPlugin` objects.
    pub plugin_resources: bool,
    /// Whether `/readyz` answers 503 while the API server does not answer.
    pub readiness_follows_api_server: bool,
    /// Where traces of event handling go; `None`: off.
    pub traces: Option<TracesConfig>,
    /// Where plugins' own metrics are exported over OTLP; `None`: off.
    pub otlp_metrics: Option<crate::otlp_metrics::OtlpMetricsConfig>,
    /// Where admission webhooks are served; `None`: off.
    pub admission: Option<ServeConfig>,
    /// Every plugin's settings.
    pub plugins: PluginsConfig,
}

impl PartialEq for LeaderElectionConfig {
    fn eq(&self, other: &Self) -> bool {
        (
            self.enabled,
            &self.namespace,
            &self.name,
            self.lease_duration_seconds,
        ) == (
            other.enabled,
            &other.namespace,
            &other.name,
            other.lease_duration_seconds,
        )
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            plugins_dir: None,
            metrics_address: None,
            shutdown_timeout: Duration::from_secs(10),
            compiled_cache_bytes: crate::wasm::DEFAULT_CACHE_BYTES,
            compile_memory_bytes: crate::wasm::compiler::DEFAULT_COMPILE_MEMORY_BYTES,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            default_namespace: DEFAULT_NAMESPACE.to_owned(),
            leader_election: LeaderElectionConfig::default(),
            sharding: ShardingConfig::default(),
            plugin_resources: false,
            readiness_follows_api_server: false,
            traces: None,
            otlp_metrics: None,
            admission: None,
            plugins: PluginsConfig::default(),
        }
    }
}

/// True for a valid namespace name (an RFC 1123 label).
fn is_namespace_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=63).contains(&name.len())
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

impl HostConfig {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            cause: source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses and validates configuration text; the error names the field.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: FileConfig = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        if file
            .leader_election
            .lease_duration_seconds
            .is_some_and(|s| s < 2)
        {
            return Err("leaderElection.leaseDurationSeconds: must be at least 2".into());
        }
        let mut defaults = file
            .defaults
            .limits
            .apply(PluginSettings::default(), "defaults.limits")?;
        if let Some(seconds) = file.defaults.resync_seconds {
            defaults.resync = (seconds > 0).then(|| Duration::from_secs(seconds));
        }
        let mut named = BTreeMap::new();
        for (name, plugin) in file.plugins {
            let settings = plugin.settings(&defaults, &format!("plugins.{name}"))?;
            named.insert(name, settings);
        }
        let metrics_address = match file.metrics_address {
            Some(text) => Some(text.parse().map_err(|_| {
                format!(
                    "metricsAddress: {text:?} is not host:port with an IP address (for example 0.0.0.0:9090)"
                )
            })?),
            None => None,
        };
        let default_namespace = match file.default_namespace {
            Some(ns) if is_namespace_name(&ns) => ns,
            Some(ns) => {
                return Err(format!(
                    "defaultNamespace: {:?} is not a namespace name (lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit)",
                    crate::text::cut(ns, 80)
                ));
            }
            None => DEFAULT_NAMESPACE.to_owned(),
        };
        Ok(Self {
            plugins_dir: file.plugins_dir,
            metrics_address,
            default_namespace,
            shutdown_timeout: Duration::from_secs(file.shutdown_timeout_seconds.unwrap_or(10)),
            leader_election: file.leader_election,
            sharding: file.sharding,
            plugin_resources: file.plugin_resources,
            readiness_follows_api_server: file.readiness_follows_api_server,
            traces: file.traces.map(TracesFile::parse).transpose()?,
            otlp_metrics: file.otlp_metrics.map(OtlpMetricsFile::parse).transpose()?,
            admission: file.admission.map(AdmissionFile::parse).transpose()?,
            sync_timeout: file
                .sync_timeout_seconds
                .map_or(DEFAULT_SYNC_TIMEOUT, Duration::from_secs),
            compiled_cache_bytes: file
                .compiled_cache_mib
                .map_or(crate::wasm::DEFAULT_CACHE_BYTES, |mib| mib << 20),
            compile_memory_bytes: match file.compile_memory_mib {
                Some(mib) if !(64..=1 << 20).contains(&mib) => {
                    return Err(format!(
                        "compileMemoryMiB: {mib} is not between 64 and 1048576"
                    ));
                }
                Some(mib) => mib << 20,
                None => crate::wasm::compiler::DEFAULT_COMPILE_MEMORY_BYTES,
            },
            plugins: PluginsConfig {
                compile_timeout: file
                    .compile_timeout_seconds
                    .map_or(crate::plugins::DEFAULT_COMPILE_TIMEOUT, Duration::from_secs),
                max_file_bytes: file
                    .max_plugin_mib
                    .map_or(crate::plugins::DEFAULT_MAX_FILE_BYTES, |mib| mib << 20),
                cpu_millicores: file
                    .plugin_cpu_millicores
                    .unwrap_or_else(crate::cpu::CpuPool::default_millicores),
                state_write_bytes_per_second: file.state_write_total_kib_per_second.map_or(
                    crate::plugins::DEFAULT_STATE_WRITE_BYTES_PER_SECOND,
                    |kib| kib.saturating_mul(1 << 10),
                ),
                defaults,
                named,
            },
        })
    }

    /// One plugin's settings from an entry written as JSON (a `KubewasmPlugin`'s spec: the
    /// fields of a `plugins.NAME` entry), on top of this configuration's defaults; errors
    /// name the field under `field`.
    pub fn plugin_entry(
        &self,
        entry: &serde_json::Value,
        field: &str,
    ) -> Result<PluginSettings, String> {
        let plugin: PluginConfig =
            serde_json::from_value(entry.clone()).map_err(|e| format!("{field}: {e}"))?;
        plugin.settings(&self.plugins.defaults, field)
    }

    /// The election's Lease and this replica's `identity`.
    pub fn election(&self, identity: &str) -> ElectionConfig {
        let le = &self.leader_election;
        let namespace = le
            .namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into());
        let name = le.name.as_deref().unwrap_or("kubewasm");
        let mut election = ElectionConfig::new(&namespace, name, identity);
        if let Some(seconds) = le.lease_duration_seconds {
            // client-go's proportions (15 s, 10 s, 2 s): a short lease renews as often, in
            // proportion, as the default one; a retry as long as the renew deadline would
            // let the deadline pass before the first renewal was tried.
            election.lease_duration = Duration::from_secs(seconds);
            election.renew_deadline = election.lease_duration * 2 / 3;
            election.retry = election.lease_duration * 2 / 15;
        }
        election
    }

    /// Whether this replica elects a leader: asked for, or implied by sharding.
    pub fn elects(&self) -> bool {
        self.leader_election.enabled || self.sharding.enabled
    }

    /// The members' Leases of this replica's group when sharding is on: beside the
    /// election's Lease, with its timings.
    pub fn members(&self, identity: &str) -> Option<(MembersConfig, ShardKey)> {
        if !self.sharding.enabled {
            return None;
        }
        let election = self.election(identity);
        let group = self.sharding.group.as_deref().unwrap_or(&election.name);
        let mut members = MembersConfig::new(&election.namespace, group, identity);
        members.lease_duration = election.lease_duration;
        members.renew_deadline = election.renew_deadline;
        members.retry = election.retry;
        Some((members, self.sharding.key))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_short_lease_is_renewed_several_times_before_its_deadline() {
        for seconds in [2, 3, 15, 60] {
            let mut config = HostConfig::default();
            config.leader_election.enabled = true;
            config.sharding.enabled = true;
            config.leader_election.lease_duration_seconds = Some(seconds);
            let election = config.election("me");
            let (members, _) = config.members("me").expect("sharding is on");
            for (retry, deadline) in [
                (election.retry, election.renew_deadline),
                (members.retry, members.renew_deadline),
            ] {
                assert!(
                    retry * 4 < deadline,
                    "{seconds} s: {retry:?} against {deadline:?}"
                );
            }
        }
        let default = HostConfig::default().election("me");
        assert_eq!(default.retry, Duration::from_secs(2));
    }

    #[test]
    fn an_unreadable_file_names_its_cause_once_however_it_is_printed() {
        let path = Path::new("/nonexistent/kubewasm.yaml");
        let Err(error) = HostConfig::load(path) else {
            panic!("{} read", path.display());
        };
        let plain = error.to_string();
        // anyhow's `{:#}` prints the message, then each source's.
        let chained = format!("{:#}", anyhow::Error::from(error));
        assert!(plain.contains("/nonexistent/kubewasm.yaml"), "{plain}");
        for text in [plain, chained] {
            assert_eq!(text.matches("No such file").count(), 1, "{text}");
        }
    }

    /// The reference in this module's documentation: every field, with its default.
    fn reference() -> String {
        let source = include_str!("config.rs");
        let docs: Vec<&str> = source
            .lines()
            .map_while(|l| l.strip_prefix("//!"))
            .map(|l| l.strip_prefix(' ').unwrap_or(l))
            .collect();
        let start = docs
            .iter()
            .position(|l| *l == "```yaml")
            .expect("a yaml block")
            + 1;
        let end = start
            + docs[start..]
                .iter()
                .position(|l| *l == "```")
                .expect("its end");
        docs[start..end].iter().map(|l| format!("{l}\n")).collect()
    }

    /// The fields serde accepts where `probe` puts an unknown one.
    pub(crate) fn accepted(probe: &str) -> Vec<String> {
        let error = HostConfig::parse(probe).expect_err(probe);
        let (_, expected) = error
            .split_once("expected")
            .expect("serde names the fields");
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn sharding_implies_an_election_and_shares_its_lease_settings() {
        let host = HostConfig::parse(
            "leaderElection: {namespace: ops, name: agents, leaseDurationSeconds: 6}\nsharding: {enabled: true, key: uid}\n",
        )
        .expect("valid");
        assert!(host.elects(), "sharding implies an election");
        let (members, key) = host.members("pod-1").expect("sharding is on");
        assert_eq!(key, ShardKey::Uid);
        assert_eq!(
            (members.namespace.as_str(), members.group.as_str()),
            ("ops", "agents")
        );
        assert_eq!(members.lease_duration, Duration::from_secs(6));
        assert_eq!(members.renew_deadline, Duration::from_secs(4));
        assert!(HostConfig::default().members("pod-1").is_none());
        let bad = HostConfig::parse("sharding: {enabled: true, key: name}\n").expect_err("key");
        assert!(
            bad.contains("sharding.key") || bad.contains("unknown variant `name`"),
            "{bad}"
        );
    }

    #[test]
    fn the_reference_parses_and_names_every_field_and_docs_hold_it() {
        let reference = reference();
        HostConfig::parse(&reference).expect("the reference is a valid configuration");
        let hay = format!("\n{reference}");
        for probe in [
            "zzz: 1",
            "leaderElection: {zzz: 1}",
            "defaults: {zzz: 1}",
            "defaults: {limits: {zzz: 1}}",
            "plugins: {a: {zzz: 1}}",
            "plugins: {a: {grants: {zzz: 1}}}",
            "plugins: {a: {grants: {writes: [{zzz: 1}]}}}",
            "plugins: {a: {source: {oci: h/a, zzz: 1}}}",
            "plugins: {a: {schedules: {s: {cron: '@hourly', zzz: 1}}}}",
            "traces: {endpoint: 'http://c', zzz: 1}",
        ] {
            for field in accepted(probe) {
                assert!(
                    hay.contains(&format!(" {field}:")) || hay.contains(&format!("\n{field}:")),
                    "{field} (where {probe:?} probes) is missing from the reference in config.rs"
                );
            }
        }
        let docs =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/CONFIGURATION.md");
        let text = std::fs::read_to_string(&docs).unwrap_or_default();
        let block = format!("```yaml\n{reference}```\n");
        if std::env::var_os("KUBEWASM_BLESS").is_some() {
            let head = text.split("```yaml").next().unwrap_or_default().to_owned();
            let tail = text.splitn(3, "```").nth(2).unwrap_or_default();
            let tail = tail.strip_prefix('\n').unwrap_or(tail);
            std::fs::write(&docs, format!("{head}{block}{tail}")).expect("write the docs");
        } else {
            assert!(
                text.contains(&block),
                "docs/CONFIGURATION.md is not config.rs's reference: KUBEWASM_BLESS=1 cargo test -p kubewasm --lib config::"
            );
        }
    }

    const EXAMPLE: &str = r#"
defaults:
  limits: {deadlineMs: 200, logBurst: 10}
plugins:
  view:
    config: {namespaces: [shop]}
    limits: {memoryMiB: 8}
    grants:
      resources: [apps/v1/Deployment, v1/Pod]
      secrets: [shop/db]
"#;

    #[test]
    fn plugin_overrides_apply_on_top_of_defaults() {
        let config = HostConfig::parse(EXAMPLE).expect("valid");
        assert_eq!(
            config.plugins.defaults.limits.deadline,
            Duration::from_millis(200)
        );
        let view = config.plugins.settings("view");
        assert_eq!(
            view.limits.deadline,
            Duration::from_millis(200),
            "inherited"
        );
        assert_eq!(view.limits.log_rate.burst, 10, "inherited");
        assert_eq!(view.limits.memory_bytes, 8 << 20, "overridden");
        assert_eq!(view.config, r#"{"namespaces":["shop"]}"#);
        assert_eq!(
            view.grants.resources,
            Some(vec![
                Gvk::new("apps", "v1", "Deployment"),
                Gvk::new("", "v1", "Pod")
            ])
        );
        assert_eq!(view.grants.secrets, ["shop/db"]);
    }

    #[test]
    fn errors_name_the_field() {
        let unknown = HostConfig::parse("plugins:\n  view:\n    limits: {deadline: 5}\n")
            .expect_err("unknown field");
        assert!(
            unknown.contains("deadline") && unknown.contains("plugins.view"),
            "{unknown}"
        );
        let bad_gvk = HostConfig::parse("plugins:\n  view:\n    grants: {resources: [Pod]}\n")
            .expect_err("bad resource");
        assert!(
            bad_gvk.contains("plugins.view.grants.resources[0]"),
            "{bad_gvk}"
        );
        let bad_address = HostConfig::parse("metricsAddress: localhost\n").expect_err("address");
        assert!(bad_address.starts_with("metricsAddress:"), "{bad_address}");
        let host = HostConfig::parse(
            "pluginsDir: /p\nmetricsAddress: 0.0.0.0:9090\nleaderElection: {enabled: true}\ndefaults: {resyncSeconds: 30}\n",
        )
        .expect("valid");
        assert!(host.leader_election.enabled);
        assert_eq!(
            host.plugins.settings("any").resync,
            Some(Duration::from_secs(30))
        );
        let bad_secret = HostConfig::parse("plugins:\n  v:\n    grants: {secrets: [db]}\n")
            .expect_err("bad secret");
        assert!(
            bad_secret.contains("plugins.v.grants.secrets[0]"),
            "{bad_secret}"
        );
        let zero = HostConfig::parse("plugins:\n  v:\n    limits: {retryForSeconds: 0}\n")
            .expect_err("zero retry time");
        assert!(zero.contains("plugins.v.limits.retryForSeconds"), "{zero}");
        let zero = HostConfig::parse("plugins:\n  v:\n    limits: {maxHandles: 0}\n")
            .expect_err("zero handles");
        assert!(zero.contains("plugins.v.limits.maxHandles"), "{zero}");
        for (text, field) in [
            ("traces: {endpoint: 'ftp://c:21'}", "traces.endpoint: "),
            (
                "otlpMetrics: {endpoint: 'ftp://c:21'}",
                "otlpMetrics.endpoint: ",
            ),
            (
                "otlpMetrics: {endpoint: 'http://c', intervalSeconds: 0}",
                "otlpMetrics.intervalSeconds: ",
            ),
            (
                "traces: {endpoint: 'http://c', sampleRatio: 2}",
                "traces.sampleRatio: ",
            ),
            (
                "plugins: {v: {source: {oci: 'h/a', digest: 'md5:x'}}}",
                "plugins.v.source.digest: ",
            ),
            (
                "plugins: {v: {source: {oci: 'h'}}}",
                "plugins.v.source.oci: ",
            ),
        ] {
            refused_naming(text, field);
        }
    }

    /// That `text` is refused with an error starting with `field`.
    fn refused_naming(text: &str, field: &str) {
        let error = HostConfig::parse(text).expect_err(text);
        assert!(error.starts_with(field), "{text}: {error}");
    }

    #[test]
    fn the_operator_sets_schedules_and_resyncs_over_the_manifest() {
        let config = HostConfig::parse(
            "plugins:\n  a:\n    resyncSeconds: 0\n    schedules:\n      summary: {cron: '@every 30s'}\n      extra: {cron: '0 * * * *', timeZone: Europe/Paris, jitterSeconds: 5}\n  b:\n    resyncSeconds: 60\n",
        )
        .expect("valid");
        let a = config.plugins.settings("a");
        assert_eq!(a.resync_with(Some(Duration::from_secs(5))), None, "off");
        let b = config.plugins.settings("b");
        assert_eq!(
            b.resync_with(Some(Duration::from_secs(5))),
            Some(Duration::from_secs(60))
        );
        let other = config.plugins.settings("c");
        assert_eq!(
            other.resync_with(Some(Duration::from_secs(5))),
            Some(Duration::from_secs(5)),
            "without an entry the manifest's period stands"
        );
        let declared = [
            Schedule::parse("summary", "*/5 * * * *", None, 0).expect("valid"),
            Schedule::parse("nightly", "0 3 * * *", None, 0).expect("valid"),
        ];
        let runs = crate::plugins::manifest::with_configured(&declared, &a.schedules);
        let runs: Vec<(&str, &str, Option<&str>)> = runs
            .iter()
            .map(|s| (s.name.as_str(), s.text.as_str(), s.time_zone.as_deref()))
            .collect();
        assert_eq!(
            runs,
            [
                ("nightly", "0 3 * * *", None),
                ("extra", "0 * * * *", Some("Europe/Paris")),
                ("summary", "@every 30s", None),
            ]
        );
        for (text, field) in [
            (
                "plugins: {a: {schedules: {s: {cron: '61 * * * *'}}}}",
                "plugins.a.schedules.s.cron: ",
            ),
            (
                "plugins: {a: {schedules: {s: {cron: '@every 1m', timeZone: Mars/Base}}}}",
                "plugins.a.schedules.s.timeZone: ",
            ),
            (
                "plugins: {a: {schedules: {s: {cron: '@hourly', jitterSeconds: 7200}}}}",
                "plugins.a.schedules.s.jitterSeconds: ",
            ),
            (
                "plugins: {a: {schedules: {'': {cron: '@hourly'}}}}",
                "plugins.a.schedules.\"\": ",
            ),
        ] {
            refused_naming(text, field);
        }
    }

    #[test]
    fn the_handle_limit_is_configurable() {
        let config = HostConfig::parse("defaults:\n  limits: {maxHandles: 3}\n").expect("valid");
        assert_eq!(config.plugins.settings("any").limits.handles, 3);
        assert_eq!(
            HostConfig::parse("{}")
                .expect("valid")
                .plugins
                .settings("any")
                .limits
                .handles,
            crate::wasm::handles::DEFAULT_MAX_HANDLES
        );
    }

    #[test]
    fn state_bounds_are_configurable_per_plugin() {
        let config = HostConfig::parse(
            "defaults:\n  limits: {stateKiB: 8}\nplugins:\n  a:\n    limits: {stateEntries: 3, stateValueKiB: 1}\n",
        )
        .expect("valid");
        let a = config.plugins.settings("a").limits.state;
        assert_eq!((a.bytes, a.entries, a.value_bytes), (8 << 10, 3, 1 << 10));
        let other = config.plugins.settings("b").limits.state;
        assert_eq!(
            other.entries,
            crate::wasm::state::StateLimits::default().entries
        );
        let zero = HostConfig::parse("defaults:\n  limits: {stateEntries: 0}\n")
            .expect_err("no entries at all");
        assert!(zero.contains("defaults.limits.stateEntries"), "{zero}");
        let huge = HostConfig::parse("plugins:\n  a:\n    limits: {stateKiB: 900}\n")
            .expect_err("more than one ConfigMap holds");
        assert!(
            huge.contains("plugins.a.limits.stateKiB: 900 is more than 140"),
            "{huge}"
        );
        let many = HostConfig::parse("defaults:\n  limits: {stateEntries: 100000}\n")
            .expect_err("too many entries");
        assert!(
            many.contains("stateEntries: 100000 is more than 8192"),
            "{many}"
        );
        HostConfig::parse("defaults:\n  limits: {stateKiB: 140, stateEntries: 8192}\n")
            .expect("the most allowed");
    }

    #[test]
    fn a_plugins_mode_and_its_safe_hosts_are_read_and_checked() {
        let config = HostConfig::parse(
            "plugins:\n  a:\n    mode: dry-run\n    grants: {http: [hooks.example.com, x.example.com:8080], httpSafe: [x.example.com:8080]}\n  b: {}\n",
        )
        .expect("valid");
        let a = config.plugins.settings("a");
        assert_eq!(a.mode, crate::plugins::Mode::DryRun);
        assert_eq!(a.grants.http_safe.len(), 1);
        assert_eq!(a.grants.http_safe[0].to_string(), "x.example.com:8080");
        assert_eq!(
            config.plugins.settings("b").mode,
            crate::plugins::Mode::Serve
        );
        let bad = HostConfig::parse("plugins:\n  a: {mode: audit}\n").expect_err("no such mode");
        assert!(
            bad.contains("plugins.a.mode: \"audit\": a mode is serve, monitor or dry-run"),
            "{bad}"
        );
        let unsafe_host = HostConfig::parse(
            "plugins:\n  a:\n    grants: {http: [a.example.com], httpSafe: [b.example.com]}\n",
        )
        .expect_err("a safe host must be granted");
        assert!(
            unsafe_host
                .contains("plugins.a.grants.httpSafe[0]: b.example.com (ports 80, 443) is not in"),
            "{unsafe_host}"
        );
    }

    #[test]
    fn a_reconcile_debounce_is_at_most_an_hour() {
        let long = HostConfig::parse(
            "plugins:\n  a:\n    limits: {reconcileDebounceMs: 18446744073709551615}\n",
        )
        .expect_err("a debounce past any clock");
        assert!(
            long.contains(
                "plugins.a.limits.reconcileDebounceMs: 18446744073709551615 is more than 3600000"
            ),
            "{long}"
        );
        let config = HostConfig::parse("defaults:\n  limits: {reconcileDebounceMs: 3600000}\n")
            .expect("an hour is allowed");
        assert_eq!(
            config.plugins.settings("a").delivery.debounce,
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn defaults_are_validated_without_a_plugin_entry() {
        let zero = HostConfig::parse("defaults:\n  limits: {deadlineMs: 0}\n")
            .expect_err("a zero deadline in the defaults");
        assert!(zero.contains("defaults.limits.deadlineMs"), "{zero}");
    }

    #[test]
    fn typed_values_come_out_parsed() {
        let config = HostConfig::parse(
            "metricsAddress: 127.0.0.1:9090\nshutdownTimeoutSeconds: 3\ndefaults: {resyncSeconds: 7, limits: {backlog: 5}}\n",
        )
        .expect("valid");
        assert_eq!(config.metrics_address, Some(([127, 0, 0, 1], 9090).into()));
        assert_eq!(config.shutdown_timeout, Duration::from_secs(3));
        let unnamed = config.plugins.settings("not-in-the-file");
        assert_eq!(unnamed.resync, Some(Duration::from_secs(7)));
        assert_eq!(unnamed.delivery.backlog, 5);
    }

    #[test]
    fn the_default_namespace_is_a_namespace_name() {
        assert_eq!(HostConfig::default().default_namespace, "default");
        let team = HostConfig::parse("defaultNamespace: team-a\n").expect("valid");
        assert_eq!(team.default_namespace, "team-a");
        for bad in ["Team", "-a", "a_b", "", &"a".repeat(64)] {
            let e = HostConfig::parse(&format!("defaultNamespace: \"{bad}\"\n"))
                .expect_err("not a namespace name");
            assert!(e.starts_with("defaultNamespace: "), "{e}");
        }
    }
}
