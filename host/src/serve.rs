//! The host's HTTP endpoints: `/metrics` (Prometheus), `/healthz`, `/readyz` and `/status`
//! (JSON, what `kubewasm status` prints).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::gvk::Gvk;
use crate::informer::factory::InformerFactory;
use crate::metrics::{self, InformerSnapshot};
use crate::plugins::{PluginHost, PluginStatus};
use crate::source::kube::KubeSource;
use crate::source::kube::stats::ReflectorSnapshot;

/// What the endpoints report on.
pub struct Endpoints {
    /// The plugins.
    pub host: Arc<PluginHost>,
    /// The informers.
    pub factory: Arc<InformerFactory>,
    /// The API server source, when the host runs against one.
    pub kube: Option<Arc<KubeSource>>,
    /// Set once the plugins folder has been read at start.
    pub started: AtomicBool,
    /// Whether this replica delivers events (leader, or leader election off).
    pub leader: Arc<AtomicBool>,
}

/// The `/status` document.
#[derive(Debug, Serialize)]
pub struct Status {
    /// Whether `/readyz` answers 200.
    pub ready: bool,
    /// Why not, when not.
    pub not_ready: Vec<String>,
    /// Whether this replica delivers events.
    pub leader: bool,
    /// Loaded plugins.
    pub plugins: Vec<PluginStatus>,
    /// Running informers.
    pub informers: Vec<InformerSnapshot>,
    /// Reflector counters per resource type (API server source only).
    pub reflectors: Vec<(Gvk, ReflectorSnapshot)>,
}

impl Endpoints {
    /// Why the host is not ready: the folder not read yet, an informer a loaded plugin needs
    /// not synced, a plugin not handed its initial state. Empty when ready.
    pub fn not_ready(
        &self,
        plugins: &[PluginStatus],
        informers: &[InformerSnapshot],
    ) -> Vec<String> {
        let mut reasons = Vec::new();
        if !self.started.load(Ordering::Relaxed) {
            reasons.push("the plugins folder has not been read yet".to_owned());
        }
        for i in informers.iter().filter(|i| !i.synced) {
            reasons.push(format!("informer {} has not synced", i.gvk));
        }
        for p in plugins.iter().filter(|p| !p.synced) {
            reasons.push(format!(
                "plugin {} has not been handed its initial state",
                p.name
            ));
        }
        reasons
    }

    /// The current status.
    pub fn status(&self) -> Status {
        let plugins = self.host.status();
        let informers = self.factory.stats();
        let not_ready = self.not_ready(&plugins, &informers);
        Status {
            ready: not_ready.is_empty(),
            not_ready,
            leader: self.leader.load(Ordering::Relaxed),
            plugins,
            informers,
            reflectors: self.kube.as_ref().map(|k| k.stats()).unwrap_or_default(),
        }
    }

    /// The Prometheus text exposition.
    pub fn metrics(&self) -> String {
        let status = self.status();
        metrics::render(&metrics::Snapshot {
            plugins: &status.plugins,
            informers: &status.informers,
            reflectors: &status.reflectors,
            ready: status.ready,
            leader: status.leader,
        })
    }

    fn route(&self, request: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
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
                self.metrics(),
                "text/plain; version=0.0.4; charset=utf-8",
            ),
            "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into(), PLAIN),
            "/readyz" => {
                let status = self.status();
                if status.ready {
                    text(StatusCode::OK, "ready\n".into(), PLAIN)
                } else {
                    let body = status.not_ready.join("\n") + "\n";
                    text(StatusCode::SERVICE_UNAVAILABLE, body, PLAIN)
                }
            }
            "/status" => match serde_json::to_string_pretty(&self.status()) {
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
}

/// Serves the endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, endpoints: Arc<Endpoints>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("metrics endpoint: cannot accept a connection: {e}");
                continue;
            }
        };
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = endpoints.route(&request);
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
