//! The host configuration file: defaults for every plugin and overrides per plugin.
//!
//! ```yaml
//! pluginsDir: /plugins         # plugin components; --plugins / KUBEWASM_PLUGINS override
//! metricsAddress: 0.0.0.0:9090 # /metrics /healthz /readyz /status; off when absent;
//!                              # --metrics-address / KUBEWASM_METRICS_ADDRESS override
//! shutdownTimeoutSeconds: 10   # on SIGTERM, how long in-flight handler calls may finish
//! leaderElection:              # off when absent; --leader-elect / KUBEWASM_LEADER_ELECT
//!   enabled: true
//!   namespace: kubewasm        # of the Lease (default: $POD_NAMESPACE, else "default")
//!   name: kubewasm             # of the Lease
//!   leaseDurationSeconds: 15   # a follower takes over this long after the leader vanished
//! defaults:                    # every plugin; each field optional
//!   resyncSeconds: 0           # resync period for plugins whose manifest sets none (0: off)
//!   limits:
//!     deadlineMs: 1000         # longest call into a plugin
//!     memoryMiB: 64            # linear memory per instance
//!     queryMiB: 16             # largest answer of one cache query
//!     maxAttempts: 10          # attempts per event before it is given up
//!     backoffBaseMs: 5         # first retry delay, doubling per attempt...
//!     backoffCapMs: 60000      # ...up to this
//!     logLinesPerSecond: 100   # logging calls, stdout and stderr together
//!     logBurst: 500
//!     recycleAfterCalls: 100000  # fresh instance after this many calls (0: never)
//!     backlog: 10000           # queued events past which an object's events fold into one
//! plugins:
//!   deployment-view:           # the plugin's file name without .wasm
//!     config: {namespaces: [shop]}   # handed to its init as JSON
//!     limits: {deadlineMs: 500}      # overrides, field by field
//!     grants:
//!       resources: [apps/v1/Deployment, apps/v1/ReplicaSet, v1/Pod, v1/Event]
//!       secrets: [shop/db-password]  # Secrets it may read, by namespace/name
//! ```
//!
//! Without `grants.resources` a plugin may read what its manifest declares, except Secrets.
//! Unknown fields are errors, reported with their place in the file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::gvk::Gvk;
use crate::plugins::{Grants, PluginSettings};
use crate::runtime::Limits;

/// Why the configuration file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
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
pub struct LimitsConfig {
    deadline_ms: Option<u64>,
    #[serde(rename = "memoryMiB")]
    memory_mib: Option<usize>,
    #[serde(rename = "queryMiB")]
    query_mib: Option<usize>,
    max_attempts: Option<u32>,
    backoff_base_ms: Option<u64>,
    backoff_cap_ms: Option<u64>,
    log_lines_per_second: Option<u32>,
    log_burst: Option<u32>,
    recycle_after_calls: Option<u64>,
    backlog: Option<usize>,
}

impl LimitsConfig {
    /// `base` with these overrides applied.
    fn apply(&self, mut base: Limits) -> Limits {
        if let Some(ms) = self.deadline_ms {
            base.deadline = Duration::from_millis(ms);
        }
        if let Some(mib) = self.memory_mib {
            base.memory_bytes = mib << 20;
        }
        if let Some(mib) = self.query_mib {
            base.query_bytes = mib << 20;
        }
        if let Some(n) = self.max_attempts {
            base.max_attempts = n;
        }
        if let Some(ms) = self.backoff_base_ms {
            base.backoff.base = Duration::from_millis(ms);
        }
        if let Some(ms) = self.backoff_cap_ms {
            base.backoff.cap = Duration::from_millis(ms);
        }
        if let Some(n) = self.log_lines_per_second {
            base.log_rate.per_second = n;
        }
        if let Some(n) = self.log_burst {
            base.log_rate.burst = n;
        }
        if let Some(n) = self.recycle_after_calls {
            base.recycle_after_calls = n;
        }
        if let Some(n) = self.backlog {
            base.backlog = n;
        }
        base
    }
}

/// What the operator grants one plugin.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantsConfig {
    resources: Option<Vec<String>>,
    #[serde(default)]
    secrets: Vec<String>,
}

/// Settings shared by every plugin.
#[derive(Debug, Default, Clone, Deserialize)]
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

/// One plugin's overrides.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginConfig {
    config: Option<serde_json::Value>,
    #[serde(default)]
    limits: LimitsConfig,
    grants: Option<GrantsConfig>,
}

impl PluginConfig {
    /// This entry's settings on top of `defaults`.
    fn settings(&self, defaults: &PluginSettings) -> PluginSettings {
        let grants = self
            .grants
            .as_ref()
            .map_or_else(Grants::default, |g| Grants {
                resources: g
                    .resources
                    .as_ref()
                    .map(|rs| rs.iter().filter_map(|r| parse_gvk(r)).collect()),
                secrets: g.secrets.clone(),
            });
        PluginSettings {
            resync: defaults.resync,
            limits: self.limits.apply(defaults.limits.clone()),
            config: self
                .config
                .as_ref()
                .map_or_else(|| "{}".to_owned(), serde_json::Value::to_string),
            grants,
        }
    }
}

/// The host configuration file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostConfig {
    /// Folder of plugin components.
    pub plugins_dir: Option<PathBuf>,
    /// Address of the HTTP endpoints.
    pub metrics_address: Option<String>,
    /// Bound on the wait for in-flight handler calls at shutdown, in seconds.
    pub shutdown_timeout_seconds: Option<u64>,
    /// Leader election.
    #[serde(default)]
    pub leader_election: LeaderElectionConfig,
    #[serde(default)]
    defaults: DefaultsConfig,
    #[serde(default)]
    plugins: BTreeMap<String, PluginConfig>,
}

/// A resource type written as `apiVersion/Kind` (`v1/Pod`, `apps/v1/Deployment`).
fn parse_gvk(text: &str) -> Option<Gvk> {
    let (api_version, kind) = text.rsplit_once('/')?;
    (!api_version.is_empty() && !kind.is_empty()).then(|| Gvk::from_api_version(api_version, kind))
}

impl HostConfig {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses and validates configuration text; the error names the field.
    pub fn parse(text: &str) -> Result<Self, String> {
        let config: Self = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        if let Some(address) = &config.metrics_address
            && address.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(format!(
                "metricsAddress: {address:?} is not host:port with an IP address (for example 0.0.0.0:9090)"
            ));
        }
        if config
            .leader_election
            .lease_duration_seconds
            .is_some_and(|s| s < 2)
        {
            return Err("leaderElection.leaseDurationSeconds: must be at least 2".into());
        }
        for (name, plugin) in &config.plugins {
            let field = |f: String| format!("plugins.{name}.{f}");
            if let Some(grants) = &plugin.grants {
                for (i, r) in grants.resources.iter().flatten().enumerate() {
                    if parse_gvk(r).is_none() {
                        return Err(format!(
                            "{}: {r:?} is not apiVersion/Kind (for example apps/v1/Deployment)",
                            field(format!("grants.resources[{i}]"))
                        ));
                    }
                }
                for (i, s) in grants.secrets.iter().enumerate() {
                    if s.split('/').count() != 2 || s.starts_with('/') || s.ends_with('/') {
                        return Err(format!(
                            "{}: {s:?} is not namespace/name",
                            field(format!("grants.secrets[{i}]"))
                        ));
                    }
                }
            }
            let limits = plugin
                .limits
                .apply(config.defaults.limits.apply(Limits::default()));
            if limits.max_attempts == 0 {
                return Err(format!(
                    "{}: must be at least 1",
                    field("limits.maxAttempts".into())
                ));
            }
            if limits.deadline.is_zero() {
                return Err(format!(
                    "{}: must be positive",
                    field("limits.deadlineMs".into())
                ));
            }
        }
        Ok(config)
    }

    /// The settings every plugin without its own entry gets.
    pub fn defaults(&self) -> PluginSettings {
        PluginSettings {
            limits: self.defaults.limits.apply(Limits::default()),
            resync: self
                .defaults
                .resync_seconds
                .filter(|s| *s > 0)
                .map(Duration::from_secs),
            ..PluginSettings::default()
        }
    }

    /// The settings of plugin `name`: its own entry, else the defaults.
    pub fn settings(&self, name: &str) -> PluginSettings {
        let defaults = self.defaults();
        match self.plugins.get(name) {
            Some(p) => p.settings(&defaults),
            None => defaults,
        }
    }

    /// The plugins with settings of their own, with those settings.
    pub fn plugins(&self) -> Vec<(String, PluginSettings)> {
        let defaults = self.defaults();
        self.plugins
            .iter()
            .map(|(name, p)| (name.clone(), p.settings(&defaults)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            config.defaults().limits.deadline,
            Duration::from_millis(200)
        );
        let (name, view) = &config.plugins()[0];
        assert_eq!(name, "view");
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
        assert_eq!(host.settings("any").resync, Some(Duration::from_secs(30)));
        let bad_secret = HostConfig::parse("plugins:\n  v:\n    grants: {secrets: [db]}\n")
            .expect_err("bad secret");
        assert!(
            bad_secret.contains("plugins.v.grants.secrets[0]"),
            "{bad_secret}"
        );
        let zero = HostConfig::parse("plugins:\n  v:\n    limits: {maxAttempts: 0}\n")
            .expect_err("zero attempts");
        assert!(zero.contains("plugins.v.limits.maxAttempts"), "{zero}");
    }
}
