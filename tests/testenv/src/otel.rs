//! A real OpenTelemetry Collector (the OTLP receiver and the debug exporter, built from the Go
//! module proxy by `scripts/test-tools.sh`) on loopback, for tests that export traces and
//! metrics.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::process::Server;
use crate::{free_port, tools_dir};

/// A running collector that prints every span and metric it receives, in detail, to its log.
pub struct Collector {
    server: Server,
    log: PathBuf,
    /// Its OTLP/HTTP endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Its OTLP/gRPC endpoint, `127.0.0.1:PORT` (kube-apiserver exports there).
    pub grpc_endpoint: String,
    _dir: tempfile::TempDir,
}

impl Collector {
    /// Starts a collector on a free loopback port and waits until it receives.
    pub async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("kubewasm-otelcol-")
            .tempdir()?;
        let address = format!("127.0.0.1:{}", free_port()?);
        let grpc = format!("127.0.0.1:{}", free_port()?);
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: {address}\n\
                 \x20     grpc:\n        endpoint: {grpc}\n\
                 exporters:\n  debug:\n    verbosity: detailed\n\
                 service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [debug]\n\
                 \x20   metrics:\n      receivers: [otlp]\n      exporters: [debug]\n\
                 \x20 telemetry:\n    metrics:\n      level: none\n"
            ),
        )?;
        let log = dir.path().join("otelcol.log");
        let mut server = Server::start(
            "otelcol",
            &tools_dir()?.join("otelcol"),
            &["--config".into(), config.display().to_string()],
            &log,
        )?;
        let deadline = Instant::now() + crate::READY_TIMEOUT;
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("Everything is ready")
        {
            if !server.is_running() {
                bail!("the collector exited:\n{}", server.log_tail(20));
            }
            if Instant::now() > deadline {
                bail!(
                    "the collector was not ready in time:\n{}",
                    server.log_tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self {
            server,
            log,
            endpoint: format!("http://{address}"),
            grpc_endpoint: grpc,
            _dir: dir,
        })
    }

    /// Everything the collector printed so far (the spans it received among it).
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.server.log_tail(lines)
    }
}
