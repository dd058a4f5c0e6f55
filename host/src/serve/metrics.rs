//! The Prometheus text exposition of the host's status.

use std::fmt::Write as _;

use crate::gvk::Gvk;
use std::collections::BTreeMap;

use crate::histogram::{BUCKETS, HistogramSnapshot};
use crate::plugins::PluginStatus;
use crate::serve::Status;

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

    /// The samples of one histogram series with `labels`: its cumulative buckets (`le`
    /// added), sum in seconds and count.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        fn with_le<'a>(labels: &[(&'a str, &'a str)], le: &'a str) -> Vec<(&'a str, &'a str)> {
            labels.iter().copied().chain([("le", le)]).collect()
        }
        let bucket = format!("{name}_bucket");
        for (bound, count) in BUCKETS.iter().zip(&h.cumulative) {
            let le = bound.to_string();
            self.sample(&bucket, &with_le(labels, &le), count);
        }
        self.sample(&bucket, &with_le(labels, "+Inf"), h.count);
        self.sample(&format!("{name}_sum"), labels, h.sum_nanos as f64 / 1e9);
        self.sample(&format!("{name}_count"), labels, h.count);
    }

    /// A counter of each plugin by two labels, from a map of maps of its status.
    fn counter_by_two(
        &mut self,
        name: &str,
        help: &str,
        plugins: &[PluginStatus],
        (outer, inner): (&str, &str),
        counts: fn(&PluginStatus) -> &BTreeMap<String, BTreeMap<String, u64>>,
    ) {
        self.header(name, "counter", help);
        for p in plugins {
            for (a, by) in counts(p) {
                for (b, n) in by {
                    self.sample(name, &[("plugin", &p.name), (outer, a), (inner, b)], n);
                }
            }
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

/// Renders `status` in the Prometheus text exposition format (version 0.0.4).
pub fn render(status: &Status) -> String {
    let mut w = Writer { out: String::new() };
    w.header(
        "kubewasm_ready",
        "gauge",
        "1 when every loaded plugin has synced",
    );
    w.sample("kubewasm_ready", &[], u8::from(status.ready));
    w.header(
        "kubewasm_leader",
        "gauge",
        "1 when this replica delivers events (leader, or leader election off)",
    );
    w.sample("kubewasm_leader", &[], u8::from(status.leader));
    if let Some(split) = &status.sharding {
        w.header(
            "kubewasm_shard_members",
            "gauge",
            "Live members of this replica's group, as it last listed their Leases",
        );
        w.sample("kubewasm_shard_members", &[], split.members.len());
        w.header(
            "kubewasm_shard_slices_delivering",
            "gauge",
            "Slices of the key space (of 64) this replica delivers",
        );
        w.sample("kubewasm_shard_slices_delivering", &[], split.delivering);
        w.header(
            "kubewasm_shard_handovers_total",
            "counter",
            "Slices this replica took over or gave up since it started",
        );
        w.sample("kubewasm_shard_handovers_total", &[], split.handovers);
    }
    w.header(
        "kubewasm_abandoned_workers_total",
        "counter",
        "Plugin workers left behind because a call outlived its deadline while they stopped",
    );
    w.sample(
        "kubewasm_abandoned_workers_total",
        &[],
        status.abandoned_workers,
    );
    w.header(
        "kubewasm_retiring_workers",
        "gauge",
        "Workers of replaced or unloaded plugin versions still running",
    );
    w.sample("kubewasm_retiring_workers", &[], status.retiring_workers);
    w.header(
        "kubewasm_abandoned_memory_bytes",
        "gauge",
        "Linear memory and tables still held by workers of replaced, unloaded or abandoned plugin versions whose threads have not ended (counted against their plugin's memory cap)",
    );
    w.sample(
        "kubewasm_abandoned_memory_bytes",
        &[],
        status.abandoned_memory_bytes,
    );

    let informers = &status.informers;
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
        "kubewasm_cached_bytes",
        "gauge",
        "JSON text of the cached objects per resource type, in bytes",
        informers,
        |i| (resource(&i.gvk), i.cached_bytes as f64),
    );
    w.family(
        "kubewasm_informer_synced",
        "gauge",
        "1 once the resource type's first list has completed",
        informers,
        |i| (resource(&i.gvk), f64::from(u8::from(i.synced))),
    );
    let reflectors = &status.reflectors;
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
        "Failed discovery, list and watch requests, and watch events skipped as undecodable, per resource type",
        reflectors,
        |(g, r)| (resource(g), r.errors as f64),
    );
    w.family(
        "kubewasm_watch_silences_total",
        "counter",
        "Watches ended because nothing, not even a bookmark, arrived for 90 s (a hung API server), per resource type",
        reflectors,
        |(g, r)| (resource(g), r.silences as f64),
    );

    let plugins = &status.plugins;
    let counters: [(&str, &str, PluginValue); 15] = [
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
            "memory_recycles",
            "Instances replaced before a call because they neared the memory cap",
            |p| p.memory_recycles as f64,
        ),
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
        ("writes_sent", "Writes the cluster accepted", |p| {
            p.writes_sent as f64
        }),
        ("writes_failed", "Writes the cluster refused", |p| {
            p.writes_failed as f64
        }),
        (
            "writes_denied",
            "Writes refused because the configuration does not grant them",
            |p| p.writes_denied as f64,
        ),
        (
            "http_requests",
            "HTTP requests sent to granted hosts",
            |p| p.http_sent as f64,
        ),
        (
            "http_denied",
            "HTTP requests refused: the host is not granted",
            |p| p.http_denied as f64,
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
        "kubewasm_plugin_cpu_seconds_total",
        "counter",
        "CPU time the plugin's calls, and the host's work for it, used",
        plugins,
        |p| (plugin(p), p.cpu_us as f64 / 1e6),
    );
    w.family(
        "kubewasm_plugin_cpu_throttled_seconds_total",
        "counter",
        "Time the plugin's calls were held because it, or all plugins together, used their CPU budget",
        plugins,
        |p| (plugin(p), p.cpu_throttled_us as f64 / 1e6),
    );
    w.family(
        "kubewasm_plugin_cpu_throttled",
        "gauge",
        "1 while the plugin is held for its CPU budget",
        plugins,
        |p| (plugin(p), f64::from(u8::from(p.cpu_throttled))),
    );
    w.family(
        "kubewasm_plugin_queue_depth",
        "gauge",
        "Events waiting in the plugin's queue",
        plugins,
        |p| (plugin(p), p.queued as f64),
    );
    w.family(
        "kubewasm_plugin_write_wait_seconds_total",
        "counter",
        "Time the plugin's writes and Events waited for its write rate",
        plugins,
        |p| (plugin(p), p.write_wait_ms as f64 / 1e3),
    );
    w.family(
        "kubewasm_plugin_queue_oldest_seconds",
        "gauge",
        "How long the oldest event in the plugin's queue has waited",
        plugins,
        |p| (plugin(p), p.queued_oldest_ms as f64 / 1e3),
    );
    w.family(
        "kubewasm_plugin_queue_bytes",
        "gauge",
        "Bytes of the objects the events in the plugin's queue hold",
        plugins,
        |p| (plugin(p), p.queued_bytes as f64),
    );
    w.family(
        "kubewasm_plugin_memory_bytes",
        "gauge",
        "Linear memory of the plugin's current instance",
        plugins,
        |p| (plugin(p), p.memory_bytes as f64),
    );
    w.family(
        "kubewasm_plugin_memory_peak_bytes",
        "gauge",
        "The most linear memory one of the plugin's instances held after a call",
        plugins,
        |p| (plugin(p), p.memory_peak_bytes as f64),
    );
    w.family(
        "kubewasm_plugin_object_handles",
        "gauge",
        "Object handles the plugin's current instance holds",
        plugins,
        |p| (plugin(p), p.handles as f64),
    );
    w.family(
        "kubewasm_plugin_slowest_host_call_seconds",
        "gauge",
        "The most CPU time one call of the plugin into the host used, waits it asked for left out",
        plugins,
        |p| (plugin(p), p.slowest_host_call_us as f64 / 1e6),
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
        w.histogram(name, &[("plugin", &p.name)], &p.durations);
    }
    let name = "kubewasm_plugin_call_duration_seconds";
    w.header(
        name,
        "histogram",
        "Time of each call into the plugin, by kind (handle, synced, tick, reconcile, finalize)",
    );
    for p in plugins {
        for (call, h) in &p.calls {
            w.histogram(name, &[("plugin", &p.name), ("call", call)], h);
        }
    }
    w.counter_by_two(
        "kubewasm_plugin_writes_by_verb_total",
        "The plugin's writes by kind and result (sent, failed, skipped: would change nothing)",
        plugins,
        ("verb", "result"),
        |p| &p.writes_by_verb,
    );
    w.counter_by_two(
        "kubewasm_plugin_http_requests_by_host_total",
        "The plugin's HTTP requests by granted host and outcome (status class, error, refused, denied)",
        plugins,
        ("host", "outcome"),
        |p| &p.http_by_host,
    );
    admission(&mut w, plugins);
    trials(&mut w, plugins);
    controllers(&mut w, plugins);
    published(&mut w, &status.plugin_metrics);
    w.out
}

/// What controller plugins' work queues hold, and the plugins' own metrics' bounds.
fn controllers(w: &mut Writer, plugins: &[PluginStatus]) {
    let controllers: Vec<PluginStatus> = plugins
        .iter()
        .filter(|p| p.reconciles.is_some())
        .cloned()
        .collect();
    w.family(
        "kubewasm_plugin_keys_waiting",
        "gauge",
        "A controller plugin's keys waiting to be reconciled",
        &controllers,
        |p| (plugin(p), p.keys_waiting as f64),
    );
    w.family(
        "kubewasm_plugin_finalizers_failing",
        "gauge",
        "Objects being deleted that a controller plugin's finalizer holds while its finalize fails",
        &controllers,
        |p| (plugin(p), p.finalizers_failing as f64),
    );
    w.family(
        "kubewasm_plugin_metric_series",
        "gauge",
        "Label combinations the plugin's own metrics hold",
        plugins,
        |p| (plugin(p), p.metric_series as f64),
    );
    w.family(
        "kubewasm_plugin_metric_updates_refused_total",
        "counter",
        "Updates of the plugin's own metrics refused for its series bound or a label value's length",
        plugins,
        |p| (plugin(p), p.metric_updates_refused as f64),
    );
}

/// What plugins publish from their own code, labelled with the plugin and its version.
fn published(w: &mut Writer, all: &[crate::plugin_metrics::PluginMetrics]) {
    use crate::plugin_metrics::{Value, bounds, published_name};
    let mut written = std::collections::HashSet::new();
    for p in all {
        for family in &p.families {
            let d = &family.declared;
            let name = published_name(&p.plugin, &d.name);
            // Two plugin names that read alike: the first one's metric is shown.
            if !written.insert(name.clone()) {
                continue;
            }
            w.header(
                &name,
                d.kind.as_str(),
                &d.help.replace('\\', "\\\\").replace('\n', "\\n"),
            );
            for (values, value) in &family.series {
                let mut labels: Vec<(&str, &str)> =
                    vec![("plugin", p.plugin.as_str()), ("digest", p.digest.as_str())];
                labels.extend(
                    d.labels
                        .iter()
                        .map(String::as_str)
                        .zip(values.iter().map(String::as_str)),
                );
                match value {
                    Value::Single(v) => w.sample(&name, &labels, v),
                    Value::Histogram {
                        buckets,
                        count,
                        sum,
                    } => {
                        let mut total = 0;
                        let bucket = format!("{name}_bucket");
                        let les: Vec<String> = bounds(d)
                            .iter()
                            .map(f64::to_string)
                            .chain(std::iter::once("+Inf".to_owned()))
                            .collect();
                        for (le, n) in les.iter().zip(buckets) {
                            total += n;
                            let mut with_le = labels.clone();
                            with_le.push(("le", le));
                            w.sample(&bucket, &with_le, total);
                        }
                        w.sample(&format!("{name}_sum"), &labels, sum);
                        w.sample(&format!("{name}_count"), &labels, count);
                    }
                }
            }
        }
    }
}

/// Each plugin's mode, and what its writes and reviews would have done while on trial.
fn trials(w: &mut Writer, plugins: &[PluginStatus]) {
    static NONE: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> =
        std::collections::BTreeMap::new();
    let name = "kubewasm_plugin_mode";
    w.header(
        name,
        "gauge",
        "1 for the plugin's mode: serve, monitor (admission answers reported, not given) or dry-run (writes too)",
    );
    for p in plugins {
        w.sample(name, &[("plugin", &p.name), ("mode", &p.mode)], 1);
    }
    w.counter_by_two(
        "kubewasm_plugin_dry_run_writes_total",
        "The plugin's writes sent as dry runs in dry-run mode, by kind and outcome (accepted, or the refusal's reason)",
        plugins,
        ("verb", "outcome"),
        |p| p.trial.as_ref().map_or(&NONE, |t| &t.writes),
    );
    w.counter_by_two(
        "kubewasm_admission_monitored_total",
        "Admission reviews allowed in monitor mode, by rule (type and operation) and what the plugin decided",
        plugins,
        ("rule", "decision"),
        |p| p.trial.as_ref().map_or(&NONE, |t| &t.reviews),
    );
    let name = "kubewasm_plugin_candidate_events_total";
    w.header(
        name,
        "counter",
        "Live events the plugin's candidate (NAME.candidate, in dry-run mode) handled as the serving version did (equal), otherwise (different), failed where it did not (candidate_failed), or that found no pair (unmatched)",
    );
    for p in plugins {
        if let Some(c) = &p.candidate {
            for (outcome, n) in [
                ("equal", c.equal),
                ("different", c.different),
                ("candidate_failed", c.candidate_failed),
                ("unmatched", c.unmatched),
            ] {
                w.sample(name, &[("plugin", &p.name), ("outcome", outcome)], n);
            }
        }
    }
}

/// The admission reviews of the plugins that serve admission.
fn admission(w: &mut Writer, plugins: &[PluginStatus]) {
    let serving: Vec<(&str, &crate::plugins::admit::AdmissionStatus)> = plugins
        .iter()
        .filter_map(|p| p.admission.as_ref().map(|a| (p.name.as_str(), a)))
        .collect();
    let name = "kubewasm_admission_reviews_total";
    w.header(name, "counter", "Admission reviews answered, per decision");
    for (plugin, a) in &serving {
        for (decision, count) in &a.decisions {
            w.sample(name, &[("plugin", plugin), ("decision", decision)], count);
        }
    }
    let name = "kubewasm_admission_review_duration_seconds";
    w.header(
        name,
        "histogram",
        "Time of each admission review in the host (decode, plugin call, encode), per decision",
    );
    for (plugin, a) in &serving {
        for (decision, h) in &a.durations {
            w.histogram(name, &[("plugin", plugin), ("decision", decision)], h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_plugins_cost_is_broken_out_by_call_kind_write_verb_and_http_host() {
        use crate::histogram::HistogramSnapshot;
        use std::collections::BTreeMap;
        let mut cumulative = vec![0u64; BUCKETS.len()];
        cumulative[4..].iter_mut().for_each(|n| *n = 3);
        let reconcile = HistogramSnapshot {
            cumulative,
            count: 3,
            sum_nanos: 1_500_000,
        };
        let nested = |pairs: &[(&str, &str, u64)]| {
            let mut m: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
            for (a, b, n) in pairs {
                m.entry((*a).into()).or_default().insert((*b).into(), *n);
            }
            m
        };
        let plugin = PluginStatus {
            name: "provisioner".into(),
            calls: [("reconcile".to_owned(), reconcile)].into(),
            memory_peak_bytes: 4096,
            writes_by_verb: nested(&[("apply", "sent", 7), ("delete", "failed", 1)]),
            http_by_host: nested(&[("hooks.example.com:443", "5xx", 2)]),
            ..PluginStatus::default()
        };
        let mut parts = crate::serve::Parts::starting();
        parts.plugins = vec![plugin];
        let text = crate::serve::Status::new(parts, std::time::Duration::from_secs(60)).metrics();
        for line in [
            r#"kubewasm_plugin_call_duration_seconds_bucket{plugin="provisioner",call="reconcile",le="0.001"} 3"#,
            r#"kubewasm_plugin_call_duration_seconds_count{plugin="provisioner",call="reconcile"} 3"#,
            r#"kubewasm_plugin_call_duration_seconds_sum{plugin="provisioner",call="reconcile"} 0.0015"#,
            r#"kubewasm_plugin_memory_peak_bytes{plugin="provisioner"} 4096"#,
            r#"kubewasm_plugin_writes_by_verb_total{plugin="provisioner",verb="apply",result="sent"} 7"#,
            r#"kubewasm_plugin_writes_by_verb_total{plugin="provisioner",verb="delete",result="failed"} 1"#,
            r#"kubewasm_plugin_http_requests_by_host_total{plugin="provisioner",host="hooks.example.com:443",outcome="5xx"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        // Kinds it was never called for have no series.
        assert!(!text.contains(r#"call="handle""#), "{text}");
    }

    #[test]
    fn the_charts_dashboard_and_alerts_ask_only_for_metrics_the_host_serves() {
        let text = crate::serve::Status::new(
            crate::serve::Parts::starting(),
            std::time::Duration::from_secs(60),
        )
        .metrics();
        let served: std::collections::HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .collect();
        let asked = |source: &str| -> Vec<String> {
            let mut names = Vec::new();
            let mut rest = source;
            while let Some(at) = rest.find("kubewasm_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                names.push(name);
            }
            names
        };
        let sources = [
            (
                "dashboards/kubewasm.json",
                include_str!("../../../examples/helm/kubewasm/dashboards/kubewasm.json"),
            ),
            (
                "templates/prometheusrule.yaml",
                include_str!("../../../examples/helm/kubewasm/templates/prometheusrule.yaml"),
            ),
        ];
        for (file, source) in sources {
            let names = asked(source);
            assert!(names.len() >= 4, "{file}: {names:?}");
            for name in names {
                let known = served.contains_key(name.as_str())
                    || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                        name.strip_suffix(suffix)
                            .is_some_and(|base| served.get(base) == Some(&"histogram"))
                    });
                assert!(
                    known,
                    "{file} asks for {name}, which /metrics does not serve"
                );
            }
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn plugin_metrics_carry_their_plugin_and_digest_and_cumulative_buckets() {
        use crate::plugin_metrics::{Declared, Kind, PluginMetrics, Registry};
        let registry = Registry::default();
        let declared = |name: &str, kind, buckets: Vec<f64>| Declared {
            name: name.into(),
            help: format!("{name} help"),
            kind,
            labels: vec!["to".into()],
            buckets,
        };
        registry.declare(&[
            declared("latency_seconds", Kind::Histogram, vec![0.1, 1.0]),
            declared("sent_total", Kind::Counter, vec![]),
        ]);
        for v in [0.0625, 0.5, 4.0] {
            registry
                .observe("latency_seconds", vec!["ops".into()], v)
                .expect("observed");
        }
        registry
            .add("sent_total", vec!["ops".into()], 2.0)
            .expect("added");
        let mut parts = crate::serve::Parts::starting();
        parts.plugin_metrics = vec![PluginMetrics {
            plugin: "pod-alerts".into(),
            digest: "abc".into(),
            families: registry.snapshot(),
        }];
        let text = crate::serve::Status::new(parts, std::time::Duration::from_secs(60)).metrics();
        let name = "kubewasm_custom_pod_alerts_latency_seconds";
        let labels = r#"plugin="pod-alerts",digest="abc",to="ops""#;
        for line in [
            format!("# TYPE {name} histogram"),
            format!("{name}_bucket{{{labels},le=\"0.1\"}} 1"),
            format!("{name}_bucket{{{labels},le=\"1\"}} 2"),
            format!("{name}_bucket{{{labels},le=\"+Inf\"}} 3"),
            format!("{name}_count{{{labels}}} 3"),
            "# TYPE kubewasm_custom_pod_alerts_sent_total counter".to_owned(),
            format!("kubewasm_custom_pod_alerts_sent_total{{{labels}}} 2"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert!(
            text.contains(&format!("{name}_sum{{{labels}}} 4.5625")),
            "{text}"
        );
    }
}
