//! Following a folder: one action after each burst of file-system changes.

use std::path::Path;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};

/// How long a followed folder must be quiet after a change before it is read again: the
/// manifests folder and the plugins folder alike.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// The longest a burst of changes can hold back a reading: a file that never stops changing
/// is still read this often.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// Watches `path` and calls `act` on a thread of its own once after each burst of changes,
/// when [`DEBOUNCE`] has passed without another, or [`MAX_WAIT`] after the burst began.
/// Stops when the returned watcher is dropped.
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
                let began = Instant::now();
                while began.elapsed() < MAX_WAIT {
                    let quiet = DEBOUNCE.min(MAX_WAIT.saturating_sub(began.elapsed()));
                    match rx.recv_timeout(quiet) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_file_that_never_stops_changing_is_still_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let readings = Arc::new(AtomicUsize::new(0));
        let counted = readings.clone();
        let _watcher = debounced(
            dir.path(),
            RecursiveMode::NonRecursive,
            "test-watch",
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
            },
        )
        .expect("watch");
        // A write every 5 ms for four times the longest wait: never a quiet period.
        let started = Instant::now();
        let mut i = 0_u64;
        while started.elapsed() < MAX_WAIT * 4 {
            std::fs::write(dir.path().join("f.yaml"), i.to_string()).expect("write");
            i += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            readings.load(Ordering::SeqCst) >= 2,
            "read {} times during {i} writes",
            readings.load(Ordering::SeqCst)
        );
    }
}
