//! Metrics from plugin code (contract 0.5): what a plugin declared in its manifest, and the
//! series its calls update, kept per plugin name across its versions and instances and bounded
//! so a plugin cannot grow the host's memory or the scrape.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// Most label combinations one plugin holds, over all its metrics, unless configured.
pub const DEFAULT_MAX_SERIES: usize = 1000;
/// The most `metricSeries` may allow one plugin.
pub const MAX_SERIES: usize = 100_000;
/// Longest label value, in bytes.
pub const MAX_LABEL_VALUE_BYTES: usize = 128;
/// Most metrics one plugin declares.
pub const MAX_METRICS: usize = 64;
/// Most labels one metric declares.
pub const MAX_LABELS: usize = 8;
/// Most buckets one histogram declares.
pub const MAX_BUCKETS: usize = 32;
/// Longest metric, label or help text a manifest declares, in bytes.
const MAX_NAME_BYTES: usize = 64;
const MAX_HELP_BYTES: usize = 512;

/// A histogram's buckets when the manifest gives none: Prometheus' client defaults.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets.
    Histogram,
}

impl Kind {
    /// The exposition's TYPE word.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    /// The update that goes with the kind (`add`, `set`, `observe`).
    fn update(self) -> &'static str {
        match self {
            Kind::Counter => "add",
            Kind::Gauge => "set",
            Kind::Histogram => "observe",
        }
    }
}

/// One metric a plugin declared.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// Its name, without the host's prefix.
    pub name: String,
    /// Its HELP text.
    pub help: String,
    /// Its kind.
    pub kind: Kind,
    /// Its label names.
    pub labels: Vec<String>,
    /// A histogram's bucket upper bounds (empty for the others).
    pub buckets: Vec<f64>,
}

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MetricError {
    /// Not declared, another kind, or the wrong number of label values.
    #[error("{0}")]
    Undeclared(String),
    /// Past the plugin's series bound, or a label value too long.
    #[error("{0}")]
    OverBound(String),
    /// A value the metric cannot take.
    #[error("{0}")]
    InvalidArgument(String),
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks a manifest's metrics: names, labels, buckets, and how many. The error names the
/// metric and what is wrong with it.
pub fn check(declared: &[Declared]) -> Result<(), String> {
    if declared.len() > MAX_METRICS {
        return Err(format!(
            "metrics: {} declared, at most {MAX_METRICS}",
            declared.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for m in declared {
        let name = &m.name;
        let shown: String = name.chars().take(MAX_NAME_BYTES).collect();
        if !valid_name(name) {
            return Err(format!(
                "metric {shown:?}: a name is 1 to {MAX_NAME_BYTES} letters, digits and _, not starting with a digit"
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(format!("metric {name}: declared twice"));
        }
        if m.help.len() > MAX_HELP_BYTES {
            return Err(format!(
                "metric {name}: help is longer than {MAX_HELP_BYTES} bytes"
            ));
        }
        if m.labels.len() > MAX_LABELS {
            return Err(format!(
                "metric {name}: {} labels, at most {MAX_LABELS}",
                m.labels.len()
            ));
        }
        let mut labels = std::collections::HashSet::new();
        for label in &m.labels {
            if !valid_name(label) || label.starts_with("__") {
                return Err(format!(
                    "metric {name}: label {:?} is not a label name (letters, digits and _, not starting with a digit or __)",
                    label.chars().take(MAX_NAME_BYTES).collect::<String>()
                ));
            }
            if matches!(label.as_str(), "plugin" | "digest" | "le") {
                return Err(format!(
                    "metric {name}: label {label} is the host's (plugin, digest and le are reserved)"
                ));
            }
            if !labels.insert(label.as_str()) {
                return Err(format!("metric {name}: label {label} declared twice"));
            }
        }
        match m.kind {
            Kind::Histogram => {
                if m.buckets.len() > MAX_BUCKETS {
                    return Err(format!(
                        "metric {name}: {} buckets, at most {MAX_BUCKETS}",
                        m.buckets.len()
                    ));
                }
                let increasing = m.buckets.windows(2).all(|w| w[0] < w[1]);
                if !increasing || m.buckets.iter().any(|b| !b.is_finite()) {
                    return Err(format!(
                        "metric {name}: buckets must be finite and increasing"
                    ));
                }
            }
            Kind::Counter | Kind::Gauge if !m.buckets.is_empty() => {
                return Err(format!(
                    "metric {name}: only a histogram has buckets ({} is a {})",
                    name,
                    m.kind.as_str()
                ));
            }
            Kind::Counter | Kind::Gauge => {}
        }
    }
    Ok(())
}

/// The values of one series.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A counter's or a gauge's value.
    Single(f64),
    /// A histogram's observations per bucket (not cumulative), their count and sum.
    Histogram {
        /// Observations per bucket, the last one past every bound (`+Inf`).
        buckets: Vec<u64>,
        /// Observations.
        count: u64,
        /// Their sum.
        sum: f64,
    },
}

struct Family {
    declared: Declared,
    series: HashMap<Vec<String>, Value>,
}

#[derive(Default)]
struct Families {
    by_name: HashMap<String, Family>,
    series: usize,
    refused: u64,
}

/// One plugin's metrics: shared by its instances and kept across its versions.
pub struct Registry {
    max_series: usize,
    families: Mutex<Families>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("max_series", &self.max_series)
            .finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_SERIES)
    }
}

/// One metric's series at one moment, for the exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilySnapshot {
    /// What was declared.
    pub declared: Declared,
    /// Each series' label values and value, sorted by label values.
    pub series: Vec<(Vec<String>, Value)>,
}

impl Registry {
    /// A registry holding at most `max_series` label combinations.
    pub fn new(max_series: usize) -> Self {
        Self {
            max_series,
            families: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Families> {
        self.families.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a version's declarations (checked with [`check`]): a metric declared the same
    /// way keeps its series, one declared otherwise (kind, labels, buckets) starts again, one
    /// no longer declared is dropped.
    pub fn declare(&self, declared: &[Declared]) {
        let mut families = self.lock();
        let mut kept: HashMap<String, Family> = HashMap::new();
        for d in declared {
            let family = match families.by_name.remove(&d.name) {
                Some(f)
                    if f.declared.kind == d.kind
                        && f.declared.labels == d.labels
                        && f.declared.buckets == d.buckets =>
                {
                    Family {
                        declared: d.clone(),
                        series: f.series,
                    }
                }
                _ => Family {
                    declared: d.clone(),
                    series: HashMap::new(),
                },
            };
            kept.insert(d.name.clone(), family);
        }
        families.series = kept.values().map(|f| f.series.len()).sum();
        families.by_name = kept;
    }

    /// Adds `value` to counter `name`.
    pub fn add(&self, name: &str, labels: Vec<String>, value: f64) -> Result<(), MetricError> {
        if !value.is_finite() || value < 0.0 {
            return Err(MetricError::InvalidArgument(format!(
                "counter {name}: {value} cannot be added (0 or more, finite)"
            )));
        }
        self.update(name, Kind::Counter, labels, |v, _| {
            if let Value::Single(x) = v {
                *x += value;
            }
        })
    }

    /// Sets gauge `name` to `value`.
    pub fn set(&self, name: &str, labels: Vec<String>, value: f64) -> Result<(), MetricError> {
        if !value.is_finite() {
            return Err(MetricError::InvalidArgument(format!(
                "gauge {name}: {value} is not finite"
            )));
        }
        self.update(name, Kind::Gauge, labels, |v, _| {
            if let Value::Single(x) = v {
                *x = value;
            }
        })
    }

    /// Records `value` in histogram `name`.
    pub fn observe(&self, name: &str, labels: Vec<String>, value: f64) -> Result<(), MetricError> {
        if !value.is_finite() {
            return Err(MetricError::InvalidArgument(format!(
                "histogram {name}: {value} is not finite"
            )));
        }
        self.update(name, Kind::Histogram, labels, |v, declared| {
            if let Value::Histogram {
                buckets,
                count,
                sum,
            } = v
            {
                let bounds = bounds(declared);
                let i = bounds
                    .iter()
                    .position(|b| value <= *b)
                    .unwrap_or(bounds.len());
                if let Some(bucket) = buckets.get_mut(i) {
                    *bucket += 1;
                }
                *count += 1;
                *sum += value;
            }
        })
    }

    fn update(
        &self,
        name: &str,
        kind: Kind,
        labels: Vec<String>,
        change: impl FnOnce(&mut Value, &Declared),
    ) -> Result<(), MetricError> {
        let mut guard = self.lock();
        let families = &mut *guard;
        let Some(family) = families.by_name.get_mut(name) else {
            let shown: String = name.chars().take(MAX_NAME_BYTES).collect();
            return Err(MetricError::Undeclared(format!(
                "metric {shown:?} is not declared in the manifest's metrics"
            )));
        };
        let declared = &family.declared;
        if declared.kind != kind {
            return Err(MetricError::Undeclared(format!(
                "metric {name} is a {}: update it with {}",
                declared.kind.as_str(),
                declared.kind.update()
            )));
        }
        if labels.len() != declared.labels.len() {
            return Err(MetricError::Undeclared(format!(
                "metric {name} has {} labels ({}), given {} values",
                declared.labels.len(),
                declared.labels.join(", "),
                labels.len()
            )));
        }
        if let Some(long) = labels.iter().position(|v| v.len() > MAX_LABEL_VALUE_BYTES) {
            families.refused += 1;
            return Err(MetricError::OverBound(format!(
                "metric {name}: the value of label {} is longer than {MAX_LABEL_VALUE_BYTES} bytes",
                declared.labels[long]
            )));
        }
        if let Some(value) = family.series.get_mut(&labels) {
            change(value, declared);
            return Ok(());
        }
        if families.series >= self.max_series {
            families.refused += 1;
            return Err(MetricError::OverBound(format!(
                "metric {name}: a new series past the plugin's {} (metricSeries)",
                self.max_series
            )));
        }
        let mut value = match kind {
            Kind::Counter | Kind::Gauge => Value::Single(0.0),
            Kind::Histogram => Value::Histogram {
                buckets: vec![0; bounds(declared).len() + 1],
                count: 0,
                sum: 0.0,
            },
        };
        change(&mut value, declared);
        family.series.insert(labels, value);
        families.series += 1;
        Ok(())
    }

    /// The most series it holds.
    pub fn max_series(&self) -> usize {
        self.max_series
    }

    /// Metrics declared.
    pub fn declared(&self) -> usize {
        self.lock().by_name.len()
    }

    /// Series held now, over all metrics.
    pub fn series(&self) -> usize {
        self.lock().series
    }

    /// Updates refused for the series bound or a label value's length, so far.
    pub fn refused(&self) -> u64 {
        self.lock().refused
    }

    /// Every metric and its series, sorted by name and label values.
    pub fn snapshot(&self) -> Vec<FamilySnapshot> {
        let families = self.lock();
        let mut out: Vec<FamilySnapshot> = families
            .by_name
            .values()
            .map(|f| {
                let mut series: Vec<(Vec<String>, Value)> = f
                    .series
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                series.sort_by(|a, b| a.0.cmp(&b.0));
                FamilySnapshot {
                    declared: f.declared.clone(),
                    series,
                }
            })
            .collect();
        out.sort_by(|a, b| a.declared.name.cmp(&b.declared.name));
        out
    }
}

/// One plugin's metrics at one moment, for the exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginMetrics {
    /// The plugin's name.
    pub plugin: String,
    /// The digest of its running version.
    pub digest: String,
    /// Its metrics.
    pub families: Vec<FamilySnapshot>,
}

/// The name a plugin's metric is exposed under: `kubewasm_custom_<plugin>_<metric>`, the
/// plugin's name with what a metric name cannot hold as `_`.
pub fn published_name(plugin: &str, metric: &str) -> String {
    let plugin: String = plugin
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("kubewasm_custom_{plugin}_{metric}")
}

/// A histogram's bucket bounds: as declared, or the defaults.
pub fn bounds(declared: &Declared) -> &[f64] {
    if declared.buckets.is_empty() {
        &DEFAULT_BUCKETS
    } else {
        &declared.buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(name: &str, kind: Kind, labels: &[&str]) -> Declared {
        Declared {
            name: name.into(),
            help: format!("{name} help"),
            kind,
            labels: labels.iter().map(|l| (*l).to_owned()).collect(),
            buckets: Vec::new(),
        }
    }

    fn values(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_manifest_names_what_is_wrong_with_each_metric() {
        let bad = |d: Declared| check(&[d]).expect_err("refused");
        assert!(bad(metric("9lives", Kind::Counter, &[])).contains("not starting with a digit"));
        assert!(bad(metric("a-b", Kind::Counter, &[])).contains("letters, digits and _"));
        assert!(bad(metric("x", Kind::Gauge, &["plugin"])).contains("reserved"));
        assert!(bad(metric("x", Kind::Gauge, &["a", "a"])).contains("label a declared twice"));
        let mut h = metric("h", Kind::Histogram, &[]);
        h.buckets = vec![1.0, 0.5];
        assert!(bad(h).contains("increasing"));
        let mut c = metric("c", Kind::Counter, &[]);
        c.buckets = vec![1.0];
        assert!(bad(c).contains("only a histogram has buckets"));
        let twice = check(&[
            metric("x", Kind::Counter, &[]),
            metric("x", Kind::Gauge, &[]),
        ]);
        assert!(twice.expect_err("refused").contains("declared twice"));
        assert_eq!(
            check(&[metric("sent_total", Kind::Counter, &["to"])]),
            Ok(())
        );
    }

    #[test]
    fn updates_check_kind_labels_and_values() {
        let r = Registry::default();
        r.declare(&[
            metric("sent", Kind::Counter, &["to"]),
            metric("depth", Kind::Gauge, &[]),
        ]);
        r.add("sent", values(&["a"]), 2.0).expect("added");
        r.add("sent", values(&["a"]), 0.5).expect("added");
        r.set("depth", vec![], 3.0).expect("set");
        r.set("depth", vec![], 1.0).expect("set again");
        assert!(matches!(
            r.add("nope", vec![], 1.0),
            Err(MetricError::Undeclared(_))
        ));
        let wrong_kind = r.set("sent", values(&["a"]), 1.0).expect_err("a counter");
        assert!(
            wrong_kind.to_string().contains("update it with add"),
            "{wrong_kind}"
        );
        assert!(matches!(
            r.add("sent", vec![], 1.0),
            Err(MetricError::Undeclared(_))
        ));
        assert!(matches!(
            r.add("sent", values(&["a"]), -1.0),
            Err(MetricError::InvalidArgument(_))
        ));
        assert!(matches!(
            r.set("depth", vec![], f64::NAN),
            Err(MetricError::InvalidArgument(_))
        ));
        let snapshot = r.snapshot();
        assert_eq!(snapshot[0].declared.name, "depth");
        assert_eq!(snapshot[0].series, vec![(vec![], Value::Single(1.0))]);
        assert_eq!(
            snapshot[1].series,
            vec![(values(&["a"]), Value::Single(2.5))]
        );
    }

    #[test]
    fn a_histogram_counts_each_observation_in_its_bucket() {
        let r = Registry::default();
        let mut h = metric("seconds", Kind::Histogram, &[]);
        h.buckets = vec![0.1, 1.0];
        r.declare(&[h]);
        for v in [0.05, 0.1, 0.5, 7.0] {
            r.observe("seconds", vec![], v).expect("observed");
        }
        let snapshot = r.snapshot();
        let Value::Histogram {
            buckets,
            count,
            sum,
        } = &snapshot[0].series[0].1
        else {
            panic!("a histogram: {snapshot:?}");
        };
        assert_eq!((buckets.as_slice(), *count), (&[2, 1, 1][..], 4));
        assert!((sum - 7.65).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn series_past_the_bound_and_long_values_are_refused_and_counted() {
        let r = Registry::new(3);
        r.declare(&[metric("seen", Kind::Counter, &["key"])]);
        for key in ["a", "b", "c"] {
            r.add("seen", values(&[key]), 1.0)
                .expect("within the bound");
        }
        let over = r
            .add("seen", values(&["d"]), 1.0)
            .expect_err("past the bound");
        assert!(matches!(over, MetricError::OverBound(_)), "{over}");
        r.add("seen", values(&["a"]), 1.0)
            .expect("an existing series still moves");
        let long = "x".repeat(MAX_LABEL_VALUE_BYTES + 1);
        assert!(matches!(
            r.add("seen", vec![long], 1.0),
            Err(MetricError::OverBound(_))
        ));
        assert_eq!((r.series(), r.refused()), (3, 2));
    }

    #[test]
    fn a_new_version_keeps_series_declared_alike_and_drops_the_rest() {
        let r = Registry::default();
        r.declare(&[
            metric("kept", Kind::Counter, &[]),
            metric("relabelled", Kind::Counter, &["a"]),
            metric("dropped", Kind::Gauge, &[]),
        ]);
        r.add("kept", vec![], 5.0).expect("added");
        r.add("relabelled", values(&["x"]), 1.0).expect("added");
        r.set("dropped", vec![], 1.0).expect("set");
        r.declare(&[
            metric("kept", Kind::Counter, &[]),
            metric("relabelled", Kind::Counter, &["b"]),
        ]);
        let snapshot = r.snapshot();
        let names: Vec<&str> = snapshot.iter().map(|f| f.declared.name.as_str()).collect();
        assert_eq!(names, ["kept", "relabelled"]);
        assert_eq!(snapshot[0].series, vec![(vec![], Value::Single(5.0))]);
        assert!(snapshot[1].series.is_empty(), "other labels: started again");
        assert_eq!(r.series(), 1);
    }
}
