//! Pulled content on disk, named by its digest and checked against it when read: a restart
//! with a pinned digest needs no registry, and a moved tag fetches only what changed.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::oci::reference::Digest;

/// A folder of content named by SHA-256, at most `max_bytes`, least recently used evicted.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl ArtifactCache {
    /// The cache in `dir` (created when first written), holding at most `max_bytes`.
    pub fn new(dir: &Path, max_bytes: u64) -> Self {
        Self {
            dir: dir.to_owned(),
            max_bytes,
        }
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("sha256-{}", digest.hex()))
    }

    /// The content of `digest`, if cached and intact (a file that does not hash to its name is
    /// removed).
    pub fn get(&self, digest: &Digest) -> Option<Vec<u8>> {
        let path = self.path(digest);
        let bytes = std::fs::read(&path).ok()?;
        if &Digest::of(&bytes) != digest {
            tracing::warn!(file = %path.display(), "cached content does not match its digest; removed");
            let _ = std::fs::remove_file(&path);
            return None;
        }
        // Mark it used, for eviction.
        if let Ok(file) = std::fs::File::options().append(true).open(&path) {
            let _ = file.set_modified(SystemTime::now());
        }
        Some(bytes)
    }

    /// Stores `bytes` under `digest` (theirs: the caller checked it). Failing to cache is a
    /// warning, never an error.
    pub fn put(&self, digest: &Digest, bytes: &[u8]) {
        let path = self.path(digest);
        if path.exists() {
            return;
        }
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| crate::whole_file::write(&path, bytes));
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), "cannot cache pulled content: {e}");
            return;
        }
        self.evict(&path);
    }

    /// Whether the mark `name` (a check passed once, such as a signature) is present.
    pub fn marked(&self, name: &str) -> bool {
        self.dir.join(name).is_file()
    }

    /// Records the mark `name`; failing to is a warning.
    pub fn mark(&self, name: &str) {
        let written = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::write(self.dir.join(name), b""));
        if let Err(e) = written {
            tracing::warn!(dir = %self.dir.display(), "cannot record {name}: {e}");
        }
    }

    /// Removes the least recently used entries until the folder fits, keeping `keep`.
    fn evict(&self, keep: &Path) {
        let artifact = |p: &Path| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("sha256-"))
        };
        crate::whole_file::evict_oldest(&self.dir, self.max_bytes, keep, artifact, "artifact");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_found_by_digest_checked_and_evicted_oldest_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = ArtifactCache::new(dir.path(), 10);
        let (a, b) = (b"aaaaaa".as_slice(), b"bbbbbb".as_slice());
        cache.put(&Digest::of(a), a);
        assert_eq!(cache.get(&Digest::of(a)).as_deref(), Some(a));
        // Tampered content is not served.
        std::fs::write(cache.path(&Digest::of(a)), b"evil").expect("tamper");
        assert_eq!(cache.get(&Digest::of(a)), None);
        assert!(!cache.path(&Digest::of(a)).exists(), "removed");
        cache.put(&Digest::of(a), a);
        std::thread::sleep(std::time::Duration::from_millis(20));
        // 12 bytes > 10: the older entry goes.
        cache.put(&Digest::of(b), b);
        assert_eq!(cache.get(&Digest::of(a)), None);
        assert_eq!(cache.get(&Digest::of(b)).as_deref(), Some(b));
    }
}
