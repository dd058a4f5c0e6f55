//! Following a folder: one action after each burst of file-system changes (named apart from
//! the API's watches, which are `source`'s).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};

/// How long a followed folder must be quiet after a change that may be one of many (a write
/// into a file still open) before it is read again: the manifests folder and the plugins
/// folder alike.
pub const DEBOUNCE: Duration = Duration::from_millis(200);
/// How long after a change that completes something (a file closed after writing, a file
/// renamed into place, as `mv` and ConfigMap volume updates do, or removed) the folder is
/// read, so that the other files of one copy land in the same reading.
pub const SETTLE: Duration = Duration::from_millis(10);
/// The longest a burst of changes can hold back a reading: a file that never stops changing
/// is still read this often.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// True for a change after which the file is whole: closed after writing, renamed into
/// place, removed.
fn completes(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
            | EventKind::Remove(_)
    )
}

/// What changed in one burst.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The paths the file system named.
    pub paths: BTreeSet<PathBuf>,
    /// Changes may have been missed (the watcher's queue overflowed, or it failed): read
    /// everything.
    pub all: bool,
}

/// One notification from the watcher.
struct Note {
    complete: bool,
    paths: Vec<PathBuf>,
    all: bool,
}

/// Watches `path` and calls `act` on a thread of its own once after each burst of changes:
/// [`SETTLE`] after a change that completes a file, [`DEBOUNCE`] after any other, with no
/// change since; at the latest [`MAX_WAIT`] after the burst began. Stops when the returned
/// watcher is dropped.
pub fn debounced(
    path: &Path,
    mode: RecursiveMode,
    thread_name: &str,
    mut act: impl FnMut(Changes) + Send + 'static,
) -> std::io::Result<notify::RecommendedWatcher> {
    let (tx, rx) = channel::<Note>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // The receiver only goes away after the watcher that owns this sender.
        let note = match event {
            Err(_) => Note {
                complete: true,
                paths: Vec::new(),
                all: true,
            },
            Ok(event) => {
                let complete = completes(&event.kind);
                if !complete && event.kind.is_access() {
                    return;
                }
                Note {
                    complete,
                    all: event.need_rescan(),
                    paths: event.paths,
                }
            }
        };
        let _ = tx.send(note);
    })
    .map_err(std::io::Error::other)?;
    match mode {
        RecursiveMode::Recursive => watch_tree(&mut watcher, path),
        RecursiveMode::NonRecursive => watcher.watch(path, mode),
    }
    .map_err(std::io::Error::other)?;
    std::thread::Builder::new()
        .name(thread_name.into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let began = Instant::now();
                let mut changes = Changes::default();
                let mut complete = first.complete;
                let add = |note: Note, changes: &mut Changes| {
                    changes.all |= note.all;
                    changes.paths.extend(note.paths);
                };
                add(first, &mut changes);
                loop {
                    let quiet = if complete { SETTLE } else { DEBOUNCE };
                    let left = MAX_WAIT.saturating_sub(began.elapsed());
                    if left.is_zero() {
                        break;
                    }
                    match rx.recv_timeout(quiet.min(left)) {
                        Ok(next) => {
                            complete = next.complete;
                            add(next, &mut changes);
                        }
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                act(changes);
            }
        })?;
    Ok(watcher)
}

/// Watches `root` and the folders under it: recursively where it can (folders made inside
/// are then watched as they appear); below a folder that cannot be watched whole, each of its
/// folders on its own, leaving out those that cannot be watched at all (their permissions),
/// which the folder's reader reports. The error: `root` itself cannot be watched.
fn watch_tree(watcher: &mut impl Watcher, root: &Path) -> notify::Result<()> {
    if watcher.watch(root, RecursiveMode::Recursive).is_ok() {
        return Ok(());
    }
    watcher.watch(root, RecursiveMode::NonRecursive)?;
    let mut seen = BTreeSet::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(real) = std::fs::canonicalize(&dir) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        if !seen.insert(real) {
            continue;
        }
        for entry in entries.flatten() {
            let path = entry.path();
            if !std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            if watcher.watch(&path, RecursiveMode::Recursive).is_ok() {
                continue;
            }
            if watcher.watch(&path, RecursiveMode::NonRecursive).is_ok() {
                dirs.push(path);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A watch on `dir` that counts its readings.
    fn counting(dir: &Path) -> (notify::RecommendedWatcher, Arc<AtomicUsize>) {
        let readings = Arc::new(AtomicUsize::new(0));
        let counted = readings.clone();
        let watcher = debounced(dir, RecursiveMode::NonRecursive, "test-watch", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .expect("watch");
        (watcher, readings)
    }

    #[test]
    fn a_file_that_never_stops_changing_is_still_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_watcher, readings) = counting(dir.path());
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

    /// Waits up to a second for `readings` to reach `n`; how long it took.
    fn until(readings: &AtomicUsize, n: usize) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(1) {
            if readings.load(Ordering::SeqCst) >= n {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    #[test]
    fn a_burst_names_the_paths_it_changed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (tx, rx) = channel();
        let _watcher = debounced(
            dir.path(),
            RecursiveMode::NonRecursive,
            "test-watch",
            move |c| {
                let _ = tx.send(c);
            },
        )
        .expect("watch");
        std::fs::write(dir.path().join("a.yaml"), "a").expect("write");
        std::fs::write(dir.path().join("b.yaml"), "b").expect("write");
        let mut seen = BTreeSet::new();
        while seen.len() < 2 {
            let changes = rx.recv_timeout(Duration::from_secs(5)).expect("a burst");
            assert!(!changes.all);
            seen.extend(
                changes
                    .paths
                    .into_iter()
                    .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())),
            );
        }
        assert_eq!(
            seen,
            BTreeSet::from(["a.yaml".to_owned(), "b.yaml".to_owned()])
        );
    }

    #[test]
    fn a_completed_write_or_rename_is_read_without_the_debounce_and_an_open_file_waits() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (_watcher, readings) = counting(dir.path());
        // Written and closed: read well before the debounce would end.
        std::fs::write(dir.path().join("a.yaml"), "a").expect("write");
        let took = until(&readings, 1).expect("read");
        assert!(took < DEBOUNCE / 2, "{took:?}");
        // Renamed into place (how `mv` and ConfigMap volumes replace files): the same.
        std::fs::write(dir.path().join(".tmp"), "b").expect("write");
        until(&readings, 2).expect("read after the temporary file");
        std::fs::rename(dir.path().join(".tmp"), dir.path().join("b.yaml")).expect("rename");
        let took = until(&readings, 3).expect("read");
        assert!(took < DEBOUNCE / 2, "{took:?}");
        // A file still open for writing: the debounce holds the reading back.
        let mut open = std::fs::File::create(dir.path().join("c.yaml")).expect("create");
        std::io::Write::write_all(&mut open, b"c").expect("write");
        std::thread::sleep(DEBOUNCE / 2);
        assert_eq!(readings.load(Ordering::SeqCst), 3, "read while still open");
        drop(open);
        until(&readings, 4).expect("read once closed");
    }
}
