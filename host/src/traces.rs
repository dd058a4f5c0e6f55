//! OpenTelemetry traces of event handling, exported over OTLP/HTTP (protobuf); off unless the
//! configuration names an endpoint.
//!
//! Each delivery attempt is one span `handle` (kind consumer) with the plugin, its version,
//! the object's type and key, the event, and the outcome; a failed attempt has status error
//! and the (bounded) reason. Spans are batched on the SDK's own thread (at most 2,048 waiting,
//! more are dropped, 512 per request) and sent by our HTTP client (the registry client's
//! hyper and rustls), each export bounded by the configured timeout. While traces are off,
//! [`enabled`] is false and delivery builds nothing.
//!
//! A write an attempt sends to the API server is a child span `write` (kind client) with its
//! verb, target and the server's answer, and the request carries that span's W3C
//! `traceparent` header, so the API server's own spans (with its tracing on) join the trace.
//! Each admission review is a span `review` (kind server) under the API server's request
//! span when its `traceparent` names one, and each plugin load and registry pull a span
//! (`load`, `pull`) of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::TracerProvider as _;

use crate::oci::client::{BodyError, read_body};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};

/// Set while traces are exported.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are being exported (cheap: delivery checks it per attempt).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The traces configuration (`traces:` in the configuration file).
#[derive(Debug, Clone, PartialEq)]
pub struct TracesConfig {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`); `/v1/traces` is added
    /// unless the path already ends with it.
    pub endpoint: String,
    /// The fraction of event traces kept, 0 to 1.
    pub sample_ratio: f64,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Longest one export may take.
    pub timeout: Duration,
}

impl TracesConfig {
    /// Traces to `endpoint`, every span kept, as service `kubewasm`, 10 s per export; the
    /// endpoint must be an http:// or https:// URL.
    pub fn new(endpoint: &str) -> Result<Self, String> {
        let config = Self {
            endpoint: endpoint.to_owned(),
            sample_ratio: 1.0,
            service_name: "kubewasm".to_owned(),
            timeout: Duration::from_secs(10),
        };
        let uri: http::Uri = config
            .traces_url()
            .parse()
            .map_err(|e| format!("not a URL: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err("not an http:// or https:// URL".into());
        }
        Ok(config)
    }

    /// The URL spans are posted to.
    pub fn traces_url(&self) -> String {
        otlp_url(&self.endpoint, "/v1/traces")
    }
}

/// An OTLP/HTTP collector's URL for one signal (`/v1/traces`, `/v1/metrics`): `endpoint`
/// with the signal's path added, unless it ends with it already.
pub fn otlp_url(endpoint: &str, signal: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with(signal) {
        base.to_owned()
    } else {
        format!("{base}{signal}")
    }
}

/// The W3C `traceparent` header value naming `span` as the parent.
pub fn traceparent(span: &opentelemetry::trace::SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

/// Makes `span` the current context on this thread until the guard is dropped (so writes
/// sent meanwhile become its children).
pub fn enter(span: &impl opentelemetry::trace::Span) -> opentelemetry::ContextGuard {
    use opentelemetry::trace::TraceContextExt as _;
    opentelemetry::Context::current()
        .with_remote_span_context(span.span_context().clone())
        .attach()
}

/// The remote parent a W3C `traceparent` header value names, if it is well formed.
pub fn parent_of(traceparent: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version != "00" || parts.next().is_some() || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// A span of the host's own work (a review, a load, a pull, a write).
pub struct Span(opentelemetry::global::BoxedSpan);

impl Span {
    /// Starts span `name` of `kind` with the attributes `attributes` makes, under the parent
    /// `traceparent` names when it is well formed, else this thread's current span or none;
    /// nothing, and no attribute made, while traces are off.
    pub fn start(
        name: &'static str,
        kind: opentelemetry::trace::SpanKind,
        traceparent: Option<&str>,
        attributes: impl FnOnce() -> Vec<opentelemetry::KeyValue>,
    ) -> Option<Self> {
        use opentelemetry::trace::TraceContextExt as _;
        if !enabled() {
            return None;
        }
        let parent = match traceparent.and_then(parent_of) {
            Some(remote) => opentelemetry::Context::current().with_remote_span_context(remote),
            None => opentelemetry::Context::current(),
        };
        Some(Self::under(&parent, name, kind, attributes()))
    }

    fn under(
        parent: &opentelemetry::Context,
        name: &'static str,
        kind: opentelemetry::trace::SpanKind,
        attributes: Vec<opentelemetry::KeyValue>,
    ) -> Self {
        use opentelemetry::trace::Tracer as _;
        let tracer = opentelemetry::global::tracer("kubewasm");
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&tracer, parent);
        Self(span)
    }

    /// Sets one attribute.
    pub fn set(&mut self, attribute: opentelemetry::KeyValue) {
        use opentelemetry::trace::Span as _;
        self.0.set_attribute(attribute);
    }

    /// Ends it, failed with `error` (cut to a plugin message's bound) or ok.
    pub fn end(mut self, error: Option<&str>) {
        use opentelemetry::trace::{Span as _, Status};
        match error {
            None => self.0.set_status(Status::Ok),
            Some(e) => self.0.set_status(Status::error(crate::text::cut(
                e.to_owned(),
                crate::text::MAX_MESSAGE_BYTES,
            ))),
        }
        self.0.end();
    }
}

/// The span of one write to the API server, a child of the current attempt's.
pub struct WriteSpan {
    span: Span,
    traceparent: String,
}

impl WriteSpan {
    /// A span for `write` by `plugin` under this thread's current span; none while traces
    /// are off or no sampled span is current.
    pub fn start(plugin: &str, write: &crate::write::Write) -> Option<Self> {
        use opentelemetry::KeyValue;
        use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _};
        if !enabled() {
            return None;
        }
        let parent = opentelemetry::Context::current();
        if !parent.span().span_context().is_sampled() {
            return None;
        }
        let t = &write.target;
        let mut attributes = vec![
            KeyValue::new("kubewasm.plugin", plugin.to_owned()),
            KeyValue::new("kubewasm.write.verb", write.verb()),
            KeyValue::new("k8s.resource", t.gvk.to_string()),
            KeyValue::new("k8s.object.name", t.name.clone()),
        ];
        if let Some(ns) = &t.namespace {
            attributes.push(KeyValue::new("k8s.namespace.name", ns.clone()));
        }
        if let Some(sub) = &t.subresource {
            attributes.push(KeyValue::new("k8s.subresource", sub.clone()));
        }
        let span = Span::under(&parent, "write", SpanKind::Client, attributes);
        let traceparent = traceparent(span.0.span_context());
        Some(Self { span, traceparent })
    }

    /// The `traceparent` header its request carries.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// Ends it with the API server's answer: `status` of the last response (0 for none) and
    /// the write's outcome (the server's message, read up to 1 MiB, cut as a plugin's is).
    pub fn end(mut self, status: u16, outcome: &Result<(), crate::write::Refusal>) {
        use opentelemetry::KeyValue;
        if status != 0 {
            self.span.set(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        match outcome {
            Ok(()) => self.span.end(None),
            Err(refusal) => {
                self.span.set(KeyValue::new(
                    "kubewasm.write.reason",
                    refusal.reason.clone(),
                ));
                self.span.end(Some(&refusal.message));
            }
        }
    }
}

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("traces: {0}")]
pub struct TracesError(String);

/// The exporting pipeline; [`Traces::shutdown`] flushes what is waiting.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Installs the global tracer provider exporting to `config.endpoint`. Call it inside a
    /// tokio runtime (exports run on it).
    pub fn start(config: &TracesConfig) -> Result<Self, TracesError> {
        let url = config.traces_url();
        let connector =
            crate::oci::client::connector(&[], false).map_err(|e| TracesError(e.to_string()))?;
        let client = ExportClient {
            http: Client::builder(TokioExecutor::new()).build(connector),
            tasks: tokio::runtime::Handle::current(),
            timeout: config.timeout,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(url)
            .with_timeout(config.timeout)
            .with_http_client(client)
            .build()
            .map_err(|e| TracesError(e.to_string()))?;
        let batches = BatchConfigBuilder::default()
            .with_max_queue_size(2048)
            .with_max_export_batch_size(512)
            .with_scheduled_delay(Duration::from_secs(1))
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batches)
            .build();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(resource)
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        ENABLED.store(true, Ordering::Relaxed);
        tracing::info!(endpoint = %config.traces_url(), ratio = config.sample_ratio, "exporting traces of event handling (OTLP/HTTP)");
        Ok(Self { provider })
    }

    /// A tracer of this pipeline (delivery uses the global one).
    pub fn tracer(&self) -> opentelemetry_sdk::trace::Tracer {
        self.provider.tracer("kubewasm")
    }

    /// Stops exporting after sending what waits (at most the export timeout). Blocking.
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("traces: the last spans were not all sent: {e}");
        }
    }
}

/// The exporter's HTTP client: requests run on the tokio runtime (the SDK exports from a
/// thread of its own), each bounded in time and its answer in size.
#[derive(Debug)]
struct ExportClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    tasks: tokio::runtime::Handle,
    timeout: Duration,
}

/// Largest collector answer read.
const MAX_ANSWER_BYTES: u64 = 64 << 10;

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ExportClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, Full::new(body));
        let http = self.http.clone();
        let timeout = self.timeout;
        let send = async move {
            let response = http.request(request).await?;
            let (parts, body) = response.into_parts();
            let bytes = read_body(body, MAX_ANSWER_BYTES, 0)
                .await
                .map_err(|e| match e {
                    BodyError::TooLarge => "the collector's answer is over 64 KiB".into(),
                    BodyError::Read(e) => opentelemetry_http::HttpError::from(e),
                })?;
            Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(
                parts,
                Bytes::from(bytes),
            ))
        };
        // The timer is made on the runtime: the SDK's export thread has no reactor.
        let task = self
            .tasks
            .spawn(async move { tokio::time::timeout(timeout, send).await });
        match task.await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(format!("no answer from the collector within {timeout:?}").into()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_and_a_malformed_one_names_no_parent() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = parent_of(header).expect("well formed");
        assert!(parent.is_remote() && parent.is_sampled());
        assert_eq!(traceparent(&parent), header);
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parent_of(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn the_traces_path_is_added_once() {
        for (endpoint, url) in [
            ("http://c:4318", "http://c:4318/v1/traces"),
            ("http://c:4318/", "http://c:4318/v1/traces"),
            ("https://c/otlp/v1/traces", "https://c/otlp/v1/traces"),
        ] {
            assert_eq!(
                TracesConfig::new(endpoint).expect("valid").traces_url(),
                url
            );
        }
        for bad in ["ftp://c:4318", "c:4318", "http://bad host"] {
            assert!(TracesConfig::new(bad).is_err(), "{bad}");
        }
    }
}
