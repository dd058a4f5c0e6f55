//! Prometheus metrics: the handler-duration histogram and the text exposition of everything
//! the host counts.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::gvk::Gvk;
use crate::plugins::PluginStatus;
use crate::source::kube::stats::ReflectorSnapshot;

/// Upper bounds of the handler-duration buckets, in seconds.
pub const BUCKETS: [f64; 12] = [
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0,
];

/// A duration histogram that threads update without locks.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// A histogram's values at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HistogramSnapshot {
    /// Observations at or under each bound of [`BUCKETS`] (cumulative).
    pub cumulative: Vec<u64>,
    /// Observations.
    pub count: u64,
    /// Their sum, in nanoseconds.
    pub sum_nanos: u64,
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let seconds = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The current values.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect();
        HistogramSnapshot {
            cumulative,
            count: self.count.load(Ordering::Relaxed),
            sum_nanos: self.sum_nanos.load(Ordering::Relaxed),
        }
    }
}

/// One informer's counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InformerSnapshot {
    /// Its resource type.
    pub gvk: Gvk,
    /// Events received from the source (listed, applied and deleted objects).
    pub received: u64,
    /// Objects in its cache.
    pub cached: usize,
    /// Whether its first list has completed.
    pub synced: bool,
}

/// Everything `/metrics` shows.
pub struct Snapshot<'a> {
    /// Loaded plugins.
    pub plugins: &'a [PluginStatus],
    /// Running informers.
    pub informers: &'a [InformerSnapshot],
    /// Reflector counters per type (API server source only).
    pub reflectors: &'a [(Gvk, ReflectorSnapshot)],
    /// Whether the host is ready.
    pub ready: bool,
    /// Whether this replica delivers events (always, without leader election).
    pub leader: bool,
}

/// A Prometheus label value, escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Writer {
    out: String,
}

impl Writer {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", label(v)))
            .collect();
        if labels.is_empty() {
            let _ = writeln!(self.out, "{name} {value}");
        } else {
            let _ = writeln!(self.out, "{name}{{{}}} {value}", labels.join(","));
        }
    }

    /// One metric with a sample per item.
    fn family<T>(
        &mut self,
        name: &str,
        kind: &str,
        help: &str,
        items: &[T],
        sample: impl Fn(&T) -> (Vec<(&'static str, String)>, f64),
    ) {
        self.header(name, kind, help);
        for item in items {
            let (labels, value) = sample(item);
            let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
            self.sample(name, &labels, value);
        }
    }
}

/// Reads one value of a plugin's status.
type PluginValue = fn(&PluginStatus) -> f64;

fn resource(gvk: &Gvk) -> Vec<(&'static str, String)> {
    vec![("resource", gvk.to_string())]
}

fn plugin(p: &PluginStatus) -> Vec<(&'static str, String)> {
    vec![("plugin", p.name.clone())]
}

/// Renders `snapshot` in the Prometheus text exposition format (version 0.0.4).
pub fn render(snapshot: &Snapshot<'_>) -> String {
    let mut w = Writer { out: String::new() };
    w.header(
        "kubewasm_ready",
        "gauge",
        "1 when every loaded plugin has synced",
    );
    w.sample("kubewasm_ready", &[], u8::from(snapshot.ready));
    w.header(
        "kubewasm_leader",
        "gauge",
        "1 when this replica delivers events (leader, or leader election off)",
    );
    w.sample("kubewasm_leader", &[], u8::from(snapshot.leader));

    let informers = snapshot.informers;
    w.family(
        "kubewasm_events_received_total",
        "counter",
        "Objects received from the source per resource type (listed, applied, deleted)",
        informers,
        |i| (resource(&i.gvk), i.received as f64),
    );
    w.family(
        "kubewasm_cached_objects",
        "gauge",
        "Objects in the cache per resource type",
        informers,
        |i| (resource(&i.gvk), i.cached as f64),
    );
    w.family(
        "kubewasm_informer_synced",
        "gauge",
        "1 once the resource type's first list has completed",
        informers,
        |i| (resource(&i.gvk), f64::from(u8::from(i.synced))),
    );
    let reflectors = snapshot.reflectors;
    w.family(
        "kubewasm_watch_starts_total",
        "counter",
        "Watch requests the API server accepted, per resource type",
        reflectors,
        |(g, r)| (resource(g), r.watches as f64),
    );
    w.family(
        "kubewasm_relists_total",
        "counter",
        "Relists forced by an expired resourceVersion (410 Gone), per resource type",
        reflectors,
        |(g, r)| (resource(g), r.relists as f64),
    );
    w.family(
        "kubewasm_watch_errors_total",
        "counter",
        "Failed list and watch requests, per resource type",
        reflectors,
        |(g, r)| (resource(g), r.errors as f64),
    );

    let plugins = snapshot.plugins;
    let counters: [(&str, &str, PluginValue); 9] = [
        ("delivered", "Events handled successfully", |p| {
            p.delivered as f64
        }),
        ("failed", "Failed attempts (error results and traps)", |p| {
            p.failed as f64
        }),
        ("retried", "Failed attempts scheduled for a retry", |p| {
            p.retried as f64
        }),
        ("dropped", "Events given up after their last attempt", |p| {
            p.given_up as f64
        }),
        (
            "coalesced",
            "Events folded into a newer state of their object",
            |p| p.coalesced as f64,
        ),
        ("traps", "Traps (each discards the instance)", |p| {
            p.traps as f64
        }),
        (
            "reloads",
            "New versions that replaced the running one",
            |p| p.reloads as f64,
        ),
        (
            "reload_failures",
            "Failed loads since the last good one",
            |p| p.reload_failures as f64,
        ),
        (
            "log_lines_dropped",
            "Log lines dropped by the rate limit",
            |p| p.log_dropped as f64,
        ),
    ];
    for (name, help, value) in counters {
        w.family(
            &format!("kubewasm_plugin_{name}_total"),
            "counter",
            help,
            plugins,
            |p| (plugin(p), value(p)),
        );
    }
    w.family(
        "kubewasm_plugin_queue_depth",
        "gauge",
        "Events waiting in the plugin's queue",
        plugins,
        |p| (plugin(p), p.queued as f64),
    );
    w.family(
        "kubewasm_plugin_memory_bytes",
        "gauge",
        "Linear memory of the plugin's current instance",
        plugins,
        |p| (plugin(p), p.memory_bytes as f64),
    );
    w.family(
        "kubewasm_plugin_synced",
        "gauge",
        "1 once the plugin has been handed the initial state of every type it watches",
        plugins,
        |p| (plugin(p), f64::from(u8::from(p.synced))),
    );
    w.family(
        "kubewasm_plugin_degraded",
        "gauge",
        "1 while the plugin's attempts keep failing",
        plugins,
        |p| (plugin(p), f64::from(u8::from(p.degraded))),
    );
    let name = "kubewasm_plugin_handler_duration_seconds";
    w.header(
        name,
        "histogram",
        "Time of each call into the plugin's handler",
    );
    for p in plugins {
        let h = &p.durations;
        for (bound, count) in BUCKETS.iter().zip(&h.cumulative) {
            let le = bound.to_string();
            w.sample(
                &format!("{name}_bucket"),
                &[("plugin", &p.name), ("le", &le)],
                count,
            );
        }
        w.sample(
            &format!("{name}_bucket"),
            &[("plugin", &p.name), ("le", "+Inf")],
            h.count,
        );
        w.sample(
            &format!("{name}_sum"),
            &[("plugin", &p.name)],
            h.sum_nanos as f64 / 1e9,
        );
        w.sample(&format!("{name}_count"), &[("plugin", &p.name)], h.count);
    }
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_labels_escaped() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(3));
        h.observe(Duration::from_millis(2));
        h.observe(Duration::from_secs(9));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.cumulative[0], 1, "3 µs is under 10 µs");
        assert_eq!(s.cumulative[5], 2, "2 ms is under 5 ms");
        assert_eq!(
            s.cumulative[11], 2,
            "9 s is over every bound, counted in +Inf only"
        );
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
