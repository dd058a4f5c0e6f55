//! Files replaced whole: written under a hidden name of their writer's own and renamed into place,
//! so a reader sees the old file or the complete new one, and writers sharing a folder (hosts,
//! tests) never write into one file.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Extension of the files being written.
const PARTIAL: &str = "partial";

/// Age past which a partial file is taken for one a killed writer left.
const STALE: Duration = Duration::from_secs(3600);

/// Writes `bytes` to `path` through a partial file of this process and call, renamed over
/// `path` once complete; the partial file is removed on failure.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    // Hidden, so listings of the folder's entries (for eviction) pass it over.
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(
        ".{}-{}.{PARTIAL}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let partial = path.with_file_name(name);
    let written = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(&partial)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// True for a partial file [`write`] left: one it was writing longer than [`STALE`] ago.
fn is_stale_partial(entry: &std::fs::DirEntry) -> bool {
    entry.path().extension().is_some_and(|x| x == PARTIAL)
        && entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE)
}

/// Removes the partial files in `dir` that killed writers left.
pub fn remove_stale_partials(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten().filter(is_stale_partial) {
        let _ = std::fs::remove_file(entry.path());
    }
}

/// Removes the least recently modified entries of a cache folder (those `entry` accepts)
/// until they hold at most `max_bytes`, keeping `keep`, and the partial files killed writers
/// left; each removal is logged as `what` evicted.
pub fn evict_oldest(
    dir: &Path,
    max_bytes: u64,
    keep: &Path,
    entry: impl Fn(&Path) -> bool,
    what: &str,
) {
    remove_stale_partials(dir);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, u64, std::path::PathBuf)> = entries
        .flatten()
        .filter(|e| entry(&e.path()))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= max_bytes {
            break;
        }
        if path == keep {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                total -= len;
                tracing::info!(file = %path.display(), "{what} evicted: the cache holds at most {max_bytes} bytes");
            }
            Err(e) => tracing::warn!(file = %path.display(), "cannot evict {what}: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the files in `dir`.
    fn names(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn concurrent_writers_of_one_path_all_succeed_and_leave_one_whole_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("target");
        std::thread::scope(|scope| {
            for writer in 0..4u8 {
                let path = &path;
                scope.spawn(move || {
                    let bytes = vec![writer; 256 << 10];
                    for _ in 0..20 {
                        write(path, &bytes).expect("written");
                    }
                });
            }
        });
        let kept = std::fs::read(&path).expect("read");
        assert_eq!(kept.len(), 256 << 10);
        assert!(kept.iter().all(|b| *b == kept[0]), "a torn file");
        assert_eq!(names(dir.path()), ["target"]);
    }

    #[test]
    fn a_failed_write_leaves_no_partial_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Renaming a file over a folder fails.
        let path = dir.path().join("folder");
        std::fs::create_dir_all(path.join("inside")).expect("folder");
        assert!(write(&path, b"x").is_err());
        assert_eq!(names(dir.path()), ["folder"]);
    }

    #[test]
    fn only_partial_files_older_than_an_hour_are_removed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let stale = dir.path().join("a.1-0.partial");
        let fresh = dir.path().join("b.2-0.partial");
        let old_other = dir.path().join("c.cwasm");
        for path in [&stale, &fresh, &old_other] {
            std::fs::write(path, b"half").expect("write");
        }
        let long_ago = std::time::SystemTime::now() - 2 * STALE;
        for path in [&stale, &old_other] {
            std::fs::File::options()
                .write(true)
                .open(path)
                .and_then(|f| f.set_modified(long_ago))
                .expect("age the file");
        }
        remove_stale_partials(dir.path());
        assert!(!stale.exists(), "stale partial file kept");
        assert!(fresh.exists(), "a partial file being written was removed");
        assert!(old_other.exists(), "a file that is not partial was removed");
    }
}
