//! The host's `tracing` lines as text, for tests of what a log reader sees.
//!
//! One subscriber, the fmt subscriber the agent installs, is made the process's global default
//! on first use, and writes into a buffer of the calling thread while `logged` runs there. A
//! subscriber per call (`with_default`) is not enough when tests run in parallel: `tracing`
//! caches per call site whether anyone listens, and a call site first reached on another
//! thread while no such subscriber existed could stay silent for this one.

use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    /// The calling thread's capture, while `logged` runs on it.
    static CAPTURE: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Writes into the current thread's capture, if any; elsewhere the line goes nowhere.
struct ThreadCapture;

impl std::io::Write for ThreadCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(buf) = c.borrow_mut().as_mut() {
                buf.extend_from_slice(bytes);
            }
        });
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines `f` logs on this thread (info and above) through the fmt subscriber the agent
/// installs. Panics if another global subscriber was installed first.
pub fn logged(f: impl FnOnce()) -> Vec<String> {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadCapture)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
    });
    CAPTURE.with(|c| *c.borrow_mut() = Some(Vec::new()));
    f();
    let bytes = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}
