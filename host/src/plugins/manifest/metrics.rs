//! The manifest's metrics (0.5), checked (`plugin_metrics::check` says what is wrong).

use crate::plugin_metrics::{Declared, Kind, check};
use crate::plugins::manifest::{ManifestError, error};
use crate::wasm::bindings::kubewasm::plugin::types as wit;

/// The declared metrics, checked.
pub fn metrics(declared: &[wit::Metric]) -> Result<Vec<Declared>, ManifestError> {
    if declared.len() > crate::plugin_metrics::MAX_METRICS {
        return Err(error(
            "metrics".into(),
            format!(
                "{} entries: at most {}",
                declared.len(),
                crate::plugin_metrics::MAX_METRICS
            ),
        ));
    }
    let metrics: Vec<Declared> = declared
        .iter()
        .map(|m| Declared {
            name: m.name.clone(),
            help: m.help.clone(),
            kind: match m.kind {
                wit::MetricKind::Counter => Kind::Counter,
                wit::MetricKind::Gauge => Kind::Gauge,
                wit::MetricKind::Histogram => Kind::Histogram,
            },
            labels: m.labels.clone(),
            buckets: m.buckets.clone(),
        })
        .collect();
    check(&metrics).map_err(|reason| error("metrics".into(), reason))?;
    for m in &metrics {
        crate::plugins::manifest::check_printable("metrics", &m.help)?;
    }
    Ok(metrics)
}
