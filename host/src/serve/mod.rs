//! The host's HTTP endpoints: `/metrics` (Prometheus), `/healthz`, `/readyz` and `/status`
//! (JSON, what `kubewasm status` prints), all from one typed [`Status`].

mod metrics;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::gvk::Gvk;
use crate::informer::factory::InformerStats;
use crate::plugins::PluginStatus;
use crate::source::kube::stats::ReflectorSnapshot;

/// What the endpoints report on: anything that can tell its current status.
pub trait Report: Send + Sync + 'static {
    /// The current status.
    fn status(&self) -> Status;
}

/// The `/status` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Whether `/readyz` answers 200.
    pub ready: bool,
    /// Why not, when not.
    pub not_ready: Vec<String>,
    /// Whether this replica delivers events.
    pub leader: bool,
    /// Plugin workers left behind because a call outlived its deadline while they stopped.
    pub abandoned_workers: u64,
    /// Loaded plugins.
    pub plugins: Vec<PluginStatus>,
    /// Running informers.
    pub informers: Vec<InformerStats>,
    /// Reflector counters per resource type (API server source only).
    pub reflectors: Vec<(Gvk, ReflectorSnapshot)>,
}

impl Status {
    /// The status of a host whose plugins folder has (`started`) or has not been read yet.
    /// This is the one definition of readiness: the folder has been read, every running
    /// informer has synced, and every plugin has been handed its initial state.
    pub fn new(
        started: bool,
        leader: bool,
        abandoned_workers: u64,
        plugins: Vec<PluginStatus>,
        informers: Vec<InformerStats>,
        reflectors: Vec<(Gvk, ReflectorSnapshot)>,
    ) -> Self {
        let mut not_ready = Vec::new();
        if !started {
            not_ready.push("the plugins folder has not been read yet".to_owned());
        }
        for i in informers.iter().filter(|i| !i.synced) {
            not_ready.push(format!("informer {} has not synced", i.gvk));
        }
        for p in plugins.iter().filter(|p| !p.synced) {
            not_ready.push(format!(
                "plugin {} has not been handed its initial state",
                p.name
            ));
        }
        Self {
            ready: not_ready.is_empty(),
            not_ready,
            leader,
            abandoned_workers,
            plugins,
            informers,
            reflectors,
        }
    }

    /// The Prometheus text exposition.
    pub fn metrics(&self) -> String {
        metrics::render(self)
    }
}

/// Answers one request from `report`.
fn route(report: &dyn Report, request: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let text = |code: StatusCode, body: String, kind: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = code;
        if let Ok(value) = hyper::header::HeaderValue::from_str(kind) {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    const PLAIN: &str = "text/plain; charset=utf-8";
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into(), PLAIN);
    }
    match request.uri().path() {
        "/metrics" => text(
            StatusCode::OK,
            report.status().metrics(),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into(), PLAIN),
        "/readyz" => {
            let status = report.status();
            if status.ready {
                text(StatusCode::OK, "ready\n".into(), PLAIN)
            } else {
                let body = status.not_ready.join("\n") + "\n";
                text(StatusCode::SERVICE_UNAVAILABLE, body, PLAIN)
            }
        }
        "/status" => match serde_json::to_string_pretty(&report.status()) {
            Ok(json) => text(StatusCode::OK, json, "application/json"),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string(), PLAIN),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /healthz, /readyz, /status\n".into(),
            PLAIN,
        ),
    }
}

/// Serves the endpoints on `listener`, reporting on `report`, until the task is dropped.
pub async fn serve(listener: TcpListener, report: Arc<dyn Report>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("metrics endpoint: cannot accept a connection: {e}");
                continue;
            }
        };
        let report = report.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = route(report.as_ref(), &request);
                async move { Ok::<_, Infallible>(response) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!("metrics endpoint: connection ended: {e}");
            }
        });
    }
}
