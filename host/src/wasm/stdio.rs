//! Plugin stdout and stderr: each complete line becomes a log line of the plugin, under the same
//! rate limit as its `logging` calls. Writes never block and never fail.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::wasm::logging::{Level, MAX_MESSAGE_BYTES, PluginLogger};

/// A plugin's stdout (info) or stderr (warn), for `WasiCtxBuilder::stdout`/`stderr`.
#[derive(Clone)]
pub struct LogStream {
    logger: Arc<PluginLogger>,
    stream: &'static str,
    level: Level,
}

impl LogStream {
    /// The plugin's stdout.
    pub fn stdout(logger: Arc<PluginLogger>) -> Self {
        Self {
            logger,
            stream: "stdout",
            level: Level::Info,
        }
    }

    /// The plugin's stderr.
    pub fn stderr(logger: Arc<PluginLogger>) -> Self {
        Self {
            logger,
            stream: "stderr",
            level: Level::Warn,
        }
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(LineWriter {
            target: self.clone(),
            pending: Vec::new(),
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        // Only WASI 0.2 guests run here; their writes go through `p2_stream`.
        Box::new(tokio::io::sink())
    }
}

/// Splits written bytes into lines; a line longer than the message cap is emitted in pieces.
struct LineWriter {
    target: LogStream,
    pending: Vec<u8>,
}

impl LineWriter {
    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line)
            .trim_end_matches('\r')
            .to_owned();
        self.target.logger.log(
            self.target.level,
            text,
            vec![("stream".to_owned(), self.target.stream.to_owned())],
        );
    }
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.pending.extend_from_slice(&bytes);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.emit(&line[..line.len() - 1]);
        }
        if self.pending.len() > MAX_MESSAGE_BYTES {
            let piece: Vec<u8> = std::mem::take(&mut self.pending);
            self.emit(&piece);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.emit(&rest);
        }
    }
}
