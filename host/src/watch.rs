//! Following a folder: one action after each burst of file-system changes.

use std::path::Path;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

/// How long a followed folder must be quiet after a change before it is read again: the
/// manifests folder and the plugins folder alike.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Watches `path` and calls `act` on a thread of its own once after each burst of changes,
/// when [`DEBOUNCE`] has passed without another. Stops when the returned watcher is dropped.
pub fn debounced(
    path: &Path,
    mode: RecursiveMode,
    thread_name: &str,
    mut act: impl FnMut() + Send + 'static,
) -> std::io::Result<notify::RecommendedWatcher> {
    let (tx, rx) = channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            // The receiver only goes away after the watcher that owns this sender.
            let _ = tx.send(());
        }
    })
    .map_err(std::io::Error::other)?;
    watcher.watch(path, mode).map_err(std::io::Error::other)?;
    std::thread::Builder::new()
        .name(thread_name.into())
        .spawn(move || {
            while rx.recv().is_ok() {
                loop {
                    match rx.recv_timeout(DEBOUNCE) {
                        Ok(()) => continue,
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                act();
            }
        })?;
    Ok(watcher)
}
