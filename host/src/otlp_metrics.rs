//! Plugins' own metrics (contract 0.5, `plugin_metrics.rs`) sent over OTLP/HTTP (protobuf) at
//! a fixed interval; off unless the configuration names an endpoint (`otlpMetrics:`).
//!
//! Each export carries every series of every plugin, cumulative since the host started, under
//! the name `/metrics` gives it (`kubewasm_custom_<plugin>_<metric>`) with the attributes
//! `plugin`, `digest` and the metric's labels: counters as monotonic sums, gauges as gauges,
//! histograms with their declared bounds. What a plugin can put in an export is bounded as
//! its series are (`limits.metricSeries`, label value length).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use crate::plugin_metrics::{Kind, PluginMetrics, Value, bounds, published_name};

/// Longest wait between exports the configuration may set.
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// Longest one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP metrics configuration (`otlpMetrics:` in the configuration file).
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpMetricsConfig {
    /// The collector's OTLP/HTTP base URL; `/v1/metrics` is added unless the path ends with it.
    pub endpoint: String,
    /// Time between exports.
    pub interval: Duration,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

/// Why an OTLP metrics setting is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OtlpMetricsError {
    /// The endpoint is not an http:// or https:// URL.
    #[error("endpoint {0:?} is not an http:// or https:// URL")]
    Endpoint(String),
    /// The interval is zero or over an hour.
    #[error("interval {0:?} is not between 1 second and 1 hour")]
    Interval(Duration),
}

impl OtlpMetricsConfig {
    /// Exports to `endpoint` every `interval`, as service `kubewasm`.
    pub fn new(endpoint: &str, interval: Duration) -> Result<Self, OtlpMetricsError> {
        let uri: Result<http::Uri, _> = endpoint.parse();
        if !uri.is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https"))) {
            return Err(OtlpMetricsError::Endpoint(crate::text::cut(
                endpoint.to_owned(),
                200,
            )));
        }
        if interval < Duration::from_secs(1) || interval > MAX_INTERVAL {
            return Err(OtlpMetricsError::Interval(interval));
        }
        Ok(Self {
            endpoint: endpoint.to_owned(),
            interval,
            service_name: "kubewasm".to_owned(),
        })
    }

    /// The URL metrics are posted to.
    pub fn metrics_url(&self) -> String {
        crate::traces::otlp_url(&self.endpoint, "/v1/metrics")
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

/// The export request for `plugins`' series, cumulative from `start` to `now`.
pub fn encode(
    plugins: &[PluginMetrics],
    service: &str,
    start: SystemTime,
    now: SystemTime,
) -> Vec<u8> {
    let (start, now) = (nanos(start), nanos(now));
    let mut metrics = Vec::new();
    for p in plugins {
        for family in &p.families {
            let declared = &family.declared;
            let attributes = |labels: &[String]| -> Vec<KeyValue> {
                let mut out = vec![
                    attribute("plugin", &p.plugin),
                    attribute("digest", &p.digest),
                ];
                out.extend(
                    declared
                        .labels
                        .iter()
                        .zip(labels)
                        .map(|(k, v)| attribute(k, v)),
                );
                out
            };
            let number = |labels: &[String], value: f64| NumberDataPoint {
                attributes: attributes(labels),
                start_time_unix_nano: start,
                time_unix_nano: now,
                value: Some(number_data_point::Value::AsDouble(value)),
                ..NumberDataPoint::default()
            };
            let singles = || {
                family
                    .series
                    .iter()
                    .filter_map(|(labels, value)| match value {
                        Value::Single(v) => Some(number(labels, *v)),
                        Value::Histogram { .. } => None,
                    })
            };
            let data = match declared.kind {
                Kind::Counter => metric::Data::Sum(Sum {
                    data_points: singles().collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                }),
                Kind::Gauge => metric::Data::Gauge(Gauge {
                    data_points: singles().collect(),
                }),
                Kind::Histogram => metric::Data::Histogram(Histogram {
                    data_points: family
                        .series
                        .iter()
                        .filter_map(|(labels, value)| match value {
                            Value::Histogram {
                                buckets,
                                count,
                                sum,
                            } => Some(HistogramDataPoint {
                                attributes: attributes(labels),
                                start_time_unix_nano: start,
                                time_unix_nano: now,
                                count: *count,
                                sum: Some(*sum),
                                bucket_counts: buckets.clone(),
                                explicit_bounds: bounds(declared).to_vec(),
                                ..HistogramDataPoint::default()
                            }),
                            Value::Single(_) => None,
                        })
                        .collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                }),
            };
            metrics.push(Metric {
                name: published_name(&p.plugin, &declared.name),
                description: declared.help.clone(),
                data: Some(data),
                ..Metric::default()
            });
        }
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    attribute("service.name", service),
                    attribute("service.version", env!("CARGO_PKG_VERSION")),
                ],
                ..Resource::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "kubewasm".to_owned(),
                    ..InstrumentationScope::default()
                }),
                metrics,
                ..ScopeMetrics::default()
            }],
            ..ResourceMetrics::default()
        }],
    }
    .encode_to_vec()
}

/// Exports what `read` gives every `config.interval`, until the task is dropped. A failed
/// export is logged (once until one succeeds again) and the next one carries everything.
pub async fn run(config: OtlpMetricsConfig, read: impl Fn() -> Vec<PluginMetrics>) {
    let started = SystemTime::now();
    let url = config.metrics_url();
    let client = match crate::oci::client::connector(&[], false) {
        Ok(connector) => {
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector)
        }
        Err(e) => {
            tracing::error!("otlpMetrics: no HTTP client, nothing is exported: {e}");
            return;
        }
    };
    tracing::info!(endpoint = %url, every = ?config.interval, "exporting plugins' metrics (OTLP/HTTP)");
    let mut failing = false;
    let mut ticks = tokio::time::interval(config.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let body = encode(&read(), &config.service_name, started, SystemTime::now());
        let request = http::Request::post(&url)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(body)));
        let sent = match request {
            Ok(request) => tokio::time::timeout(EXPORT_TIMEOUT, client.request(request))
                .await
                .map_err(|_| format!("no answer within {EXPORT_TIMEOUT:?}"))
                .and_then(|r| r.map_err(|e| e.to_string()))
                .and_then(|r| {
                    if r.status().is_success() {
                        Ok(())
                    } else {
                        Err(format!("the collector answered {}", r.status()))
                    }
                }),
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Ok(()) if failing => {
                failing = false;
                tracing::info!(endpoint = %url, "otlpMetrics: exporting again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(endpoint = %url, "otlpMetrics: export failed ({e}); trying again every {:?}", config.interval);
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin_metrics::{Declared, Registry};

    #[test]
    fn every_series_is_exported_with_its_plugin_labels_and_kind() {
        let registry = Registry::new(100);
        let declared = |name: &str, kind, buckets: Vec<f64>| Declared {
            name: name.into(),
            help: format!("{name} help"),
            kind,
            labels: vec!["to".into()],
            buckets,
        };
        registry.declare(&[
            declared("sent_total", Kind::Counter, vec![]),
            declared("queue", Kind::Gauge, vec![]),
            declared("latency_seconds", Kind::Histogram, vec![0.1, 1.0]),
        ]);
        registry
            .add("sent_total", vec!["ops".into()], 2.0)
            .expect("added");
        registry.set("queue", vec!["ops".into()], 7.0).expect("set");
        for v in [0.05, 0.5, 4.0] {
            registry
                .observe("latency_seconds", vec!["ops".into()], v)
                .expect("observed");
        }
        let plugins = [PluginMetrics {
            plugin: "pod-alerts".into(),
            digest: "abc".into(),
            families: registry.snapshot(),
        }];
        let start = UNIX_EPOCH + Duration::from_secs(100);
        let now = start + Duration::from_secs(60);
        let bytes = encode(&plugins, "kubewasm", start, now);
        let request = ExportMetricsServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let scope = &request.resource_metrics[0].scope_metrics[0];
        let find = |name: &str| -> &Metric {
            scope
                .metrics
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("no {name} in {scope:#?}"))
        };
        let attributes = |a: &[KeyValue]| -> Vec<(String, String)> {
            a.iter()
                .map(|kv| {
                    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(any_value::Value::StringValue(s)) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (kv.key.clone(), value)
                })
                .collect()
        };
        let labels = vec![
            ("plugin".to_owned(), "pod-alerts".to_owned()),
            ("digest".to_owned(), "abc".to_owned()),
            ("to".to_owned(), "ops".to_owned()),
        ];
        match &find("kubewasm_custom_pod_alerts_sent_total").data {
            Some(metric::Data::Sum(sum)) => {
                assert!(sum.is_monotonic);
                assert_eq!(
                    sum.aggregation_temporality,
                    AggregationTemporality::Cumulative as i32
                );
                let point = &sum.data_points[0];
                assert_eq!(attributes(&point.attributes), labels);
                assert_eq!(point.value, Some(number_data_point::Value::AsDouble(2.0)));
                assert_eq!(point.start_time_unix_nano, 100_000_000_000);
                assert_eq!(point.time_unix_nano, 160_000_000_000);
            }
            other => panic!("a counter is a sum: {other:?}"),
        }
        match &find("kubewasm_custom_pod_alerts_queue").data {
            Some(metric::Data::Gauge(g)) => {
                assert_eq!(
                    g.data_points[0].value,
                    Some(number_data_point::Value::AsDouble(7.0))
                );
            }
            other => panic!("a gauge: {other:?}"),
        }
        match &find("kubewasm_custom_pod_alerts_latency_seconds").data {
            Some(metric::Data::Histogram(h)) => {
                let point = &h.data_points[0];
                assert_eq!(point.explicit_bounds, [0.1, 1.0]);
                assert_eq!(point.bucket_counts, [1, 1, 1]);
                assert_eq!(point.count, 3);
                assert!(
                    point.sum.is_some_and(|s| (s - 4.55).abs() < 1e-9),
                    "{:?}",
                    point.sum
                );
                assert_eq!(attributes(&point.attributes), labels);
            }
            other => panic!("a histogram: {other:?}"),
        }
        assert_eq!(
            find("kubewasm_custom_pod_alerts_queue").description,
            "queue help"
        );
    }

    #[test]
    fn bad_settings_are_refused_naming_what_is_wrong() {
        let every = Duration::from_secs(30);
        assert_eq!(
            OtlpMetricsConfig::new("ftp://c", every),
            Err(OtlpMetricsError::Endpoint("ftp://c".into()))
        );
        assert_eq!(
            OtlpMetricsConfig::new("http://c:4318", Duration::ZERO),
            Err(OtlpMetricsError::Interval(Duration::ZERO))
        );
        let ok = OtlpMetricsConfig::new("http://c:4318/", every).expect("valid");
        assert_eq!(ok.metrics_url(), "http://c:4318/v1/metrics");
        let ok = OtlpMetricsConfig::new("http://c:4318/v1/metrics", every).expect("valid");
        assert_eq!(ok.metrics_url(), "http://c:4318/v1/metrics");
    }
}
