//! Plugin stdout and stderr: each complete line becomes a log line of the plugin, under the same
//! rate limit as its `logging` calls. Writes never block; one write takes at most
//! [`MAX_WRITE_BYTES`] (what `check-write` permits: more is a trap, as WASI says), and is split
//! into lines in one pass, so a write costs time linear in its size.

use std::sync::Arc;

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use crate::text::MAX_MESSAGE_BYTES;
use crate::wasm::host_calls::HostCalls;
use crate::wasm::logging::{Level, PluginLogger};

/// The most one `write` (or `write-zeroes`) may pass; `check-write` permits exactly this.
pub const MAX_WRITE_BYTES: usize = 64 * 1024;

/// A plugin's stdout (info) or stderr (warn), for `WasiCtxBuilder::stdout`/`stderr`.
#[derive(Clone)]
pub struct LogStream {
    logger: Arc<PluginLogger>,
    stream: &'static str,
    level: Level,
    calls: HostCalls,
}

impl LogStream {
    /// The plugin's stdout; writes are timed into `calls`.
    pub fn stdout(logger: Arc<PluginLogger>, calls: HostCalls) -> Self {
        Self {
            logger,
            stream: "stdout",
            level: Level::Info,
            calls,
        }
    }

    /// The plugin's stderr; writes are timed into `calls`.
    pub fn stderr(logger: Arc<PluginLogger>, calls: HostCalls) -> Self {
        Self {
            logger,
            stream: "stderr",
            level: Level::Warn,
            calls,
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

impl LineWriter {
    /// Emits every complete line of `bytes` (after what is pending), keeps the rest pending,
    /// and cuts a pending line that grew past the message cap.
    fn push(&mut self, bytes: &[u8]) {
        let mut start = 0;
        for (i, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'\n') {
            if self.pending.is_empty() {
                self.emit(&bytes[start..i]);
            } else {
                self.pending.extend_from_slice(&bytes[start..i]);
                let line = std::mem::take(&mut self.pending);
                self.emit(&line);
            }
            start = i + 1;
        }
        self.pending.extend_from_slice(&bytes[start..]);
        if self.pending.len() > MAX_MESSAGE_BYTES {
            let piece = std::mem::take(&mut self.pending);
            self.emit(&piece);
        }
    }
}

fn too_large(len: usize) -> StreamError {
    StreamError::trap(&format!(
        "a write of {len} bytes to stdout or stderr exceeds the {MAX_WRITE_BYTES} bytes check-write permits"
    ))
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if bytes.len() > MAX_WRITE_BYTES {
            return Err(too_large(bytes.len()));
        }
        let _call = self.target.calls.start();
        self.push(&bytes);
        Ok(())
    }

    fn write_zeroes(&mut self, len: usize) -> StreamResult<()> {
        if len > MAX_WRITE_BYTES {
            return Err(too_large(len));
        }
        let _call = self.target.calls.start();
        self.push(&vec![0; len]);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(MAX_WRITE_BYTES)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasm::logging::{LogRate, MemorySink};

    fn writer(sink: &Arc<MemorySink>) -> LineWriter {
        let rate = LogRate {
            per_second: u32::MAX,
            burst: u32::MAX,
        };
        let logger = Arc::new(PluginLogger::new("p", "d", sink.clone(), rate));
        LineWriter {
            target: LogStream::stdout(logger, HostCalls::default()),
            pending: Vec::new(),
        }
    }

    #[test]
    fn lines_split_across_writes_and_long_lines_are_cut() {
        let sink = Arc::new(MemorySink::default());
        let mut w = writer(&sink);
        w.write(Bytes::from_static(b"one\ntw")).expect("write");
        w.write(Bytes::from_static(b"o\r\nthree")).expect("write");
        w.write(Bytes::from(vec![b'x'; MAX_MESSAGE_BYTES + 1]))
            .expect("write");
        drop(w);
        let lines: Vec<String> = sink.records().into_iter().map(|r| r.message).collect();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(&lines[..2], ["one", "two"]);
        assert!(lines[2].starts_with("threexxx"));
    }

    #[test]
    fn a_write_of_newlines_becomes_one_line_each_and_oversized_writes_trap() {
        let sink = Arc::new(MemorySink::default());
        let mut w = writer(&sink);
        w.write(Bytes::from(vec![b'\n'; MAX_WRITE_BYTES]))
            .expect("a full permit of newlines");
        assert_eq!(sink.records().len(), MAX_WRITE_BYTES);
        assert!(
            w.write(Bytes::from(vec![b'\n'; MAX_WRITE_BYTES + 1]))
                .is_err()
        );
        assert!(
            w.write_zeroes(usize::MAX).is_err(),
            "no allocation of usize::MAX"
        );
        assert_eq!(
            sink.records().len(),
            MAX_WRITE_BYTES,
            "nothing more was logged"
        );
    }
}
