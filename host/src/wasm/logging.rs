//! Plugin log lines: the host side of the `logging` import, and where the lines go.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::field::display;

use crate::object::KubeObject;
use crate::text::{MAX_MESSAGE_BYTES, cut};
use crate::wasm::HostState;
use crate::wasm::bindings::kubewasm::plugin::logging;

/// Most fields kept on one log line; the rest are dropped (and a field says how many).
pub const MAX_FIELDS: usize = 32;
/// Longest field name kept.
pub const MAX_FIELD_NAME_BYTES: usize = 64;
/// Longest field value kept.
pub const MAX_FIELD_VALUE_BYTES: usize = 1024;

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
    /// The digest of the plugin version that logged it (see `PluginFile::digest`).
    pub digest: String,
    /// The key of the object whose event the plugin was handling, when it logged during one.
    pub key: Option<String>,
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
        // Display, not the Debug quoting `tracing` gives a bare `&str`: lines read
        // `plugin=audit key=ns/name`, like the host's own.
        let (plugin, digest) = (display(r.plugin.as_str()), display(r.digest.as_str()));
        let key = r.key.as_deref().map(display);
        let message = r.message.as_str();
        match r.level {
            Level::Trace => {
                tracing::trace!(target: "plugin", plugin, digest, key, "{message} {fields}")
            }
            Level::Debug => {
                tracing::debug!(target: "plugin", plugin, digest, key, "{message} {fields}")
            }
            Level::Info => {
                tracing::info!(target: "plugin", plugin, digest, key, "{message} {fields}")
            }
            Level::Warn => {
                tracing::warn!(target: "plugin", plugin, digest, key, "{message} {fields}")
            }
            Level::Error => {
                tracing::error!(target: "plugin", plugin, digest, key, "{message} {fields}")
            }
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

/// How much one plugin may log: a token bucket refilled at `per_second`, holding `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRate {
    /// Lines per second in the long run.
    pub per_second: u32,
    /// Lines allowed in one burst.
    pub burst: u32,
}

impl Default for LogRate {
    fn default() -> Self {
        Self {
            per_second: 100,
            burst: 500,
        }
    }
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
    warned: Option<Instant>,
}

/// One plugin's log: tags lines with its name, enforces its rate, counts what it drops.
pub struct PluginLogger {
    plugin: String,
    digest: String,
    sink: Arc<dyn LogSink>,
    rate: LogRate,
    bucket: Mutex<Bucket>,
    dropped: AtomicU64,
    /// Set while an event is retried: the first attempt's lines (a traceback, say) are
    /// enough, so later attempts write theirs at debug level.
    retrying: AtomicBool,
}

/// The key of the object whose event a thread's plugin call handles.
struct Handled {
    active: bool,
    /// Kept between calls: copying a key into it allocates only when a longer one comes.
    key: String,
}

thread_local! {
    /// What this thread's plugin call handles, named on every line logged meanwhile. Per
    /// thread, not per logger: a call and the lines it logs (through `logging` or its stdout
    /// and stderr) run on one thread. The key is copied, not the object's `Arc` cloned: ten
    /// plugin threads counting references on one object's shared counter cost more.
    static HANDLING: RefCell<Handled> = const {
        RefCell::new(Handled {
            active: false,
            key: String::new(),
        })
    };
}

/// While alive, names one object on the lines plugins log from this thread. Cheaper per event
/// than a `tracing` span: a span's fields are written out when it opens, whether or not
/// anything is logged in it.
pub struct Handling(());

impl Handling {
    /// Names `object` until the guard drops.
    pub fn enter(object: &KubeObject) -> Self {
        Self::enter_key(object.key())
    }

    /// Marks this thread as handling a call about `key` (an object's, or a trigger's name).
    pub fn enter_key(key: &str) -> Self {
        HANDLING.with_borrow_mut(|h| {
            h.key.clear();
            h.key.push_str(key);
            h.active = true;
        });
        Self(())
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        HANDLING.with_borrow_mut(|h| h.active = false);
    }
}

impl PluginLogger {
    /// The digest of the plugin version this logger writes for.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// A logger for the version `digest` of `plugin` writing to `sink` at most at `rate`.
    pub fn new(plugin: &str, digest: &str, sink: Arc<dyn LogSink>, rate: LogRate) -> Self {
        Self {
            plugin: plugin.to_owned(),
            digest: digest.to_owned(),
            sink,
            rate,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(rate.burst),
                refilled: Instant::now(),
                warned: None,
            }),
            dropped: AtomicU64::new(0),
            retrying: AtomicBool::new(false),
        }
    }

    /// Marks the attempts that follow as retries (their lines at debug level) or not.
    pub fn set_retrying(&self, retrying: bool) {
        self.retrying.store(retrying, Ordering::Relaxed);
    }

    /// Lines dropped so far for exceeding the rate.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes one line unless the plugin is over its rate; message and fields are cut to
    /// their caps first.
    pub fn log(&self, level: Level, message: String, mut fields: Vec<(String, String)>) {
        if !self.admit() {
            return;
        }
        let dropped = fields.len().saturating_sub(MAX_FIELDS);
        fields.truncate(MAX_FIELDS);
        let mut fields: Vec<(String, String)> = fields
            .into_iter()
            .map(|(k, v)| (cut(k, MAX_FIELD_NAME_BYTES), cut(v, MAX_FIELD_VALUE_BYTES)))
            .collect();
        if dropped > 0 {
            fields.push(("fields-dropped".to_owned(), dropped.to_string()));
        }
        let level = if self.retrying.load(Ordering::Relaxed) {
            level.min(Level::Debug)
        } else {
            level
        };
        let key = HANDLING.with_borrow(|h| h.active.then(|| h.key.clone()));
        self.sink.record(PluginLogRecord {
            plugin: self.plugin.clone(),
            digest: self.digest.clone(),
            key,
            level,
            message: cut(message, MAX_MESSAGE_BYTES),
            fields,
        });
    }

    fn admit(&self) -> bool {
        let mut b = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let refill = now.duration_since(b.refilled).as_secs_f64() * f64::from(self.rate.per_second);
        b.tokens = (b.tokens + refill).min(f64::from(self.rate.burst));
        b.refilled = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return true;
        }
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if b.warned
            .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1))
        {
            b.warned = Some(now);
            tracing::warn!(
                plugin = %self.plugin,
                "plugin logs more than {} lines/s; {dropped} lines dropped so far",
                self.rate.per_second
            );
        }
        false
    }
}

impl logging::Host for HostState {
    fn log(
        &mut self,
        level: logging::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let _call = self.host_calls.start();
        let level = match level {
            logging::Level::Trace => Level::Trace,
            logging::Level::Debug => Level::Debug,
            logging::Level::Info => Level::Info,
            logging::Level::Warn => Level::Warn,
            logging::Level::Error => Level::Error,
        };
        self.ctx.log.log(level, message, fields);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_drops_and_counts_past_the_burst() {
        let sink = Arc::new(MemorySink::default());
        let logger = PluginLogger::new(
            "p",
            "v1",
            sink.clone(),
            LogRate {
                per_second: 1,
                burst: 3,
            },
        );
        for i in 0..10 {
            logger.log(Level::Info, format!("line {i}"), Vec::new());
        }
        assert_eq!(sink.records().len(), 3);
        assert_eq!(logger.dropped(), 7);
        logger.log(Level::Info, "x".repeat(MAX_MESSAGE_BYTES + 10), Vec::new());
        assert_eq!(logger.dropped(), 8, "no token left");
    }

    #[test]
    fn lines_of_retried_attempts_are_debug_lines() {
        let sink = Arc::new(MemorySink::default());
        let logger = PluginLogger::new("p", "d", sink.clone(), LogRate::default());
        logger.log(Level::Error, "first".into(), vec![]);
        logger.set_retrying(true);
        logger.log(Level::Error, "again".into(), vec![]);
        logger.log(Level::Trace, "trace stays".into(), vec![]);
        logger.set_retrying(false);
        logger.log(Level::Warn, "next event".into(), vec![]);
        let levels: Vec<Level> = sink.records().iter().map(|r| r.level).collect();
        assert_eq!(
            levels,
            [Level::Error, Level::Debug, Level::Trace, Level::Warn]
        );
    }

    #[test]
    fn lines_logged_while_handling_name_the_object() {
        let sink = Arc::new(MemorySink::default());
        let logger = PluginLogger::new("p", "d", sink.clone(), LogRate::default());
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop"}
        });
        let pod = KubeObject::from_value(pod, &Default::default()).expect("pod");
        logger.log(Level::Info, "init".into(), vec![]);
        let handling = Handling::enter(&pod);
        logger.log(Level::Info, "handling".into(), vec![]);
        drop(handling);
        logger.log(Level::Info, "between".into(), vec![]);
        let keys: Vec<Option<String>> = sink.records().into_iter().map(|r| r.key).collect();
        assert_eq!(keys, [None, Some("shop/web-1".to_owned()), None]);
    }

    #[test]
    fn the_tracing_sink_writes_plugin_and_key_as_the_host_does() {
        let record = PluginLogRecord {
            plugin: "audit".into(),
            digest: "3e45".into(),
            key: Some("shop/web-1".into()),
            level: Level::Warn,
            message: "pod seen".into(),
            fields: vec![("phase".into(), "Running".into())],
        };
        let lines = crate::captured_log::logged(|| TracingSink.record(record));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].ends_with(
                "WARN plugin: pod seen phase=Running plugin=audit digest=3e45 key=shop/web-1"
            ),
            "{lines:?}"
        );
    }

    #[test]
    fn fields_are_capped_in_number_and_size() {
        let sink = Arc::new(MemorySink::default());
        let logger = PluginLogger::new("p", "v1", sink.clone(), LogRate::default());
        let fields = (0..MAX_FIELDS + 5)
            .map(|i| (format!("{i}").repeat(100), "v".repeat(1 << 20)))
            .collect();
        logger.log(Level::Info, "m".into(), fields);
        let record = &sink.records()[0];
        assert_eq!(record.fields.len(), MAX_FIELDS + 1);
        assert_eq!(record.field("fields-dropped"), Some("5"));
        assert!(record.fields[..MAX_FIELDS].iter().all(|(k, v)| {
            k.len() <= MAX_FIELD_NAME_BYTES + 6 && v.len() <= MAX_FIELD_VALUE_BYTES + 6
        }));
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let sink = Arc::new(MemorySink::default());
        let logger = PluginLogger::new("p", "v1", sink.clone(), LogRate::default());
        logger.log(Level::Info, "é".repeat(MAX_MESSAGE_BYTES), Vec::new());
        let message = &sink.records()[0].message;
        assert!(message.ends_with(" [cut]"));
        assert!(message.len() <= MAX_MESSAGE_BYTES + 6);
    }
}
