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
use crate::plugins::{FailedPlugin, PluginStatus};
use crate::source::kube::stats::ReflectorSnapshot;
use crate::split::SplitStatus;

/// How long a client may take to send a request's headers before it is disconnected (a
/// client that opens connections and sends nothing would otherwise hold them forever).
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the endpoints report on: anything that can tell its current status.
pub trait Report: Send + Sync + 'static {
    /// The current status.
    fn status(&self) -> Status;
}

/// What a status is made from.
pub struct Parts {
    /// Whether the plugins folder has been read.
    pub started: bool,
    /// Whether this replica delivers events.
    pub leader: bool,
    /// Plugin workers left behind.
    pub abandoned_workers: u64,
    /// Workers of replaced or unloaded versions still running.
    pub retiring_workers: u64,
    /// Linear memory the retiring and abandoned workers still running hold.
    pub abandoned_memory_bytes: u64,
    /// Loaded plugins.
    pub plugins: Vec<PluginStatus>,
    /// Plugins that failed and have no version loaded.
    pub failed_plugins: Vec<FailedPlugin>,
    /// Running informers.
    pub informers: Vec<InformerStats>,
    /// Reflector counters per resource type.
    pub reflectors: Vec<(Gvk, ReflectorSnapshot)>,
    /// Whether the API server answers (`None`: the cluster is a manifests folder).
    pub api_server_reachable: Option<bool>,
    /// Whether an API server that does not answer makes the host unready.
    pub readiness_follows_api_server: bool,
    /// This replica's part when replicas split the work.
    pub sharding: Option<SplitStatus>,
    /// What the plugins publish from their own code.
    pub plugin_metrics: Vec<crate::plugin_metrics::PluginMetrics>,
}

impl Parts {
    /// A host still starting: nothing read, nothing loaded.
    pub fn starting() -> Self {
        Self {
            started: false,
            leader: false,
            abandoned_workers: 0,
            retiring_workers: 0,
            abandoned_memory_bytes: 0,
            plugins: Vec::new(),
            failed_plugins: Vec::new(),
            informers: Vec::new(),
            reflectors: Vec::new(),
            api_server_reachable: None,
            readiness_follows_api_server: false,
            sharding: None,
            plugin_metrics: Vec::new(),
        }
    }
}

/// The `/status` document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Whether `/readyz` answers 200.
    pub ready: bool,
    /// Why not, when not.
    pub not_ready: Vec<String>,
    /// What did not sync within the sync timeout and no longer counts for readiness.
    pub sync_overdue: Vec<String>,
    /// Whether this replica delivers events.
    pub leader: bool,
    /// Plugin workers left behind because a call outlived its deadline while they stopped.
    pub abandoned_workers: u64,
    /// Workers of replaced or unloaded versions still running (finishing what they had
    /// received, or abandoned).
    #[serde(default)]
    pub retiring_workers: u64,
    /// Linear memory and tables the retiring workers hold (counted against their plugin's
    /// memory cap until they end).
    #[serde(default)]
    pub abandoned_memory_bytes: u64,
    /// Loaded plugins.
    pub plugins: Vec<PluginStatus>,
    /// Plugins that failed (file or artifact) and have no version loaded.
    #[serde(default)]
    pub failed_plugins: Vec<FailedPlugin>,
    /// Running informers.
    pub informers: Vec<InformerStats>,
    /// Reflector counters per resource type (API server source only).
    pub reflectors: Vec<(Gvk, ReflectorSnapshot)>,
    /// Whether the API server answers (absent for a manifests folder).
    #[serde(default)]
    pub api_server_reachable: Option<bool>,
    /// This replica's part when replicas split the work (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding: Option<SplitStatus>,
    /// What the plugins publish from their own code: on `/metrics`, not in `/status`.
    #[serde(skip)]
    pub plugin_metrics: Vec<crate::plugin_metrics::PluginMetrics>,
}

impl Status {
    /// The status of a host whose plugins folder has (`started`) or has not been read yet.
    /// This is the one definition of readiness: the folder has been read and holds at least
    /// one loaded plugin, every running
    /// informer has synced and every plugin has been handed its initial state, except those
    /// that did not within `sync_timeout` of their start: they are listed as overdue and no
    /// longer count, so one plugin (or one type it asked for) cannot hold the host unready.
    pub fn new(parts: Parts, sync_timeout: std::time::Duration) -> Self {
        let Parts {
            started,
            leader,
            abandoned_workers,
            retiring_workers,
            abandoned_memory_bytes,
            plugins,
            failed_plugins,
            informers,
            reflectors,
            api_server_reachable,
            readiness_follows_api_server,
            sharding,
            plugin_metrics,
        } = parts;
        let timeout = sync_timeout.as_secs();
        let mut not_ready = Vec::new();
        let mut sync_overdue = Vec::new();
        if !started {
            not_ready.push(
                "starting: the cluster and the plugins folder have not been read yet".to_owned(),
            );
        } else if plugins.is_empty() {
            // A host with nothing to deliver to is not doing its job, whatever its cache.
            not_ready.push("no plugin is loaded".to_owned());
        }
        let unsynced_informers = informers.iter().filter(|i| !i.synced).map(|i| {
            let reason = format!("informer {} has not synced", i.gvk);
            (reason, i.running_seconds)
        });
        let unsynced_plugins = plugins.iter().filter(|p| !p.synced).map(|p| {
            let reason = format!("plugin {} has not been handed its initial state", p.name);
            (reason, p.running_seconds)
        });
        if let Some(split) = sharding.as_ref().filter(|s| !s.joined) {
            not_ready.push(format!(
                "not a member of sharding group {} yet: its Lease has not been written (the \
                 log says why)",
                split.group
            ));
        }
        if readiness_follows_api_server && api_server_reachable == Some(false) {
            not_ready.push("the API server does not answer (readinessFollowsApiServer)".to_owned());
        }
        for (reason, age) in unsynced_informers.chain(unsynced_plugins) {
            if age >= timeout {
                sync_overdue.push(format!("{reason} within {timeout} s"));
            } else {
                not_ready.push(reason);
            }
        }
        Self {
            ready: not_ready.is_empty(),
            not_ready,
            sync_overdue,
            leader,
            abandoned_workers,
            retiring_workers,
            abandoned_memory_bytes,
            plugins,
            failed_plugins,
            informers,
            reflectors,
            api_server_reachable,
            sharding,
            plugin_metrics,
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
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(io, service)
                .await
            {
                tracing::debug!("metrics endpoint: connection ended: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn parts(plugin_age: u64, informer_age: u64) -> Parts {
        Parts {
            started: true,
            leader: true,
            abandoned_workers: 0,
            retiring_workers: 0,
            abandoned_memory_bytes: 0,
            api_server_reachable: None,
            readiness_follows_api_server: false,
            sharding: None,
            plugin_metrics: Vec::new(),
            plugins: vec![PluginStatus {
                name: "stuck".into(),
                running_seconds: plugin_age,
                ..PluginStatus::default()
            }],
            failed_plugins: Vec::new(),
            informers: vec![InformerStats {
                gvk: Gvk::new("", "v1", "Secret"),
                received: 0,
                cached: 0,
                cached_bytes: 0,
                synced: false,
                running_seconds: informer_age,
                scope: "everything".into(),
                rescopes: 0,
            }],
            reflectors: Vec::new(),
        }
    }

    #[test]
    fn what_does_not_sync_in_time_stops_holding_readiness() {
        let young = Status::new(parts(5, 5), Duration::from_secs(60));
        assert!(!young.ready);
        assert_eq!(young.not_ready.len(), 2, "{:?}", young.not_ready);
        let old = Status::new(parts(61, 61), Duration::from_secs(60));
        assert!(old.ready, "{:?}", old.not_ready);
        assert_eq!(old.sync_overdue.len(), 2, "{:?}", old.sync_overdue);
        assert!(old.sync_overdue[1].contains("plugin stuck"));
        let mixed = Status::new(parts(61, 5), Duration::from_secs(60));
        assert!(!mixed.ready, "the young informer still counts");
    }

    #[test]
    fn a_host_without_plugins_is_not_ready() {
        let mut empty = parts(61, 61);
        empty.plugins.clear();
        let status = Status::new(empty, Duration::from_secs(60));
        assert!(!status.ready);
        assert_eq!(status.not_ready, ["no plugin is loaded"]);
    }

    #[test]
    fn a_sharded_replica_that_never_joined_is_not_ready() {
        let split = |joined| {
            let mut p = parts(61, 61);
            p.sharding = Some(SplitStatus {
                group: "kubewasm".into(),
                joined,
                ..SplitStatus::default()
            });
            Status::new(p, Duration::from_secs(60))
        };
        let never = split(false);
        assert!(!never.ready);
        assert!(
            never.not_ready[0].contains("not a member of sharding group kubewasm"),
            "{:?}",
            never.not_ready
        );
        assert!(split(true).ready, "joined once, its readiness is as before");
    }

    struct Fixed;

    impl Report for Fixed {
        fn status(&self) -> Status {
            Status::new(parts(0, 0), Duration::from_secs(60))
        }
    }

    #[tokio::test]
    async fn a_client_that_sends_no_headers_is_disconnected() {
        use tokio::io::AsyncReadExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(serve(listener, Arc::new(Fixed)));
        let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let started = tokio::time::Instant::now();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(HEADER_READ_TIMEOUT * 2, silent.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(_)) | Ok(Err(_))),
            "still connected after {:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() >= HEADER_READ_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
    }
}
