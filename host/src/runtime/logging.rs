//! Plugin log lines: the host side of the `logging` import.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Severity of a plugin log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Diagnostic detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

/// One line a plugin logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLogRecord {
    /// The plugin's name.
    pub plugin: String,
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: String,
    /// Key and value fields.
    pub fields: Vec<(String, String)>,
}

impl PluginLogRecord {
    /// The value of field `key`, if present.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Where plugin log lines go.
pub trait LogSink: Send + Sync {
    /// Takes one line.
    fn record(&self, record: PluginLogRecord);
}

/// Writes plugin log lines to the host's `tracing` log, tagged with the plugin name.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingSink;

impl LogSink for TracingSink {
    fn record(&self, r: PluginLogRecord) {
        let fields = r
            .fields
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let (plugin, message) = (r.plugin.as_str(), r.message.as_str());
        match r.level {
            Level::Trace => tracing::trace!(target: "plugin", plugin, "{message} {fields}"),
            Level::Debug => tracing::debug!(target: "plugin", plugin, "{message} {fields}"),
            Level::Info => tracing::info!(target: "plugin", plugin, "{message} {fields}"),
            Level::Warn => tracing::warn!(target: "plugin", plugin, "{message} {fields}"),
            Level::Error => tracing::error!(target: "plugin", plugin, "{message} {fields}"),
        }
    }
}

/// Keeps plugin log lines in memory, for tests of plugins and of the host.
#[derive(Debug, Default)]
pub struct MemorySink {
    records: Mutex<Vec<PluginLogRecord>>,
}

impl MemorySink {
    /// Every line so far.
    pub fn records(&self) -> Vec<PluginLogRecord> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits up to `timeout` until `done` holds for the lines so far; returns them either way.
    pub fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&[PluginLogRecord]) -> bool,
    ) -> Vec<PluginLogRecord> {
        let deadline = Instant::now() + timeout;
        loop {
            let records = self.records();
            if done(&records) || Instant::now() >= deadline {
                return records;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl LogSink for MemorySink {
    fn record(&self, record: PluginLogRecord) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
    }
}
