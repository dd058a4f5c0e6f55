//! One plugin file: its name, path, bytes and content digest, read and hashed once.

use std::io::Read;
use std::path::{Path, PathBuf};

/// A plugin file as read from disk: what loading, checking and status all work from.
#[derive(Clone)]
pub struct PluginFile {
    /// The plugin's name: the file name without `.wasm`.
    pub name: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// Its content.
    pub bytes: Vec<u8>,
    /// The SHA-256 of its content, in hex.
    pub sha256: String,
}

impl std::fmt::Debug for PluginFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginFile")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("bytes", &self.bytes.len())
            .field("sha256", &self.sha256)
            .finish()
    }
}

impl PluginFile {
    /// Reads `path`, a regular file of at most `max_bytes` (checked before reading, and
    /// while reading, should it grow).
    pub fn read(path: &Path, max_bytes: u64) -> std::io::Result<Self> {
        let too_large = |len: u64| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{len} bytes or more: plugin files may be at most {max_bytes} bytes (maxPluginMiB)"
                ),
            )
        };
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        if meta.len() > max_bytes {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max_bytes {
            return Err(too_large(bytes.len() as u64));
        }
        Ok(Self::new(path, bytes))
    }

    /// The file at `path` with content `bytes`.
    pub fn new(path: &Path, bytes: Vec<u8>) -> Self {
        Self::named(&plugin_name(path), path, bytes)
    }

    /// Plugin `name` with content `bytes` from `origin` (a file, or an artifact's reference).
    pub fn named(name: &str, origin: &Path, bytes: Vec<u8>) -> Self {
        Self {
            name: name.to_owned(),
            path: origin.to_owned(),
            sha256: sha256_hex(&bytes),
            bytes,
        }
    }

    /// The version's short name: the first 12 hex digits of the SHA-256 of the file.
    pub fn digest(&self) -> &str {
        &self.sha256[..12]
    }

    /// What names this version once it is compiled: the file without its content, which a
    /// loaded plugin does not keep (a Rust plugin's file is often larger than all else it
    /// holds while idle).
    pub fn version(&self) -> Version {
        Version {
            name: self.name.clone(),
            path: self.path.clone(),
            sha256: self.sha256.clone(),
        }
    }
}

/// A loaded plugin version: its name, file and content hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The plugin's name: the file name without `.wasm`.
    pub name: String,
    /// Where it was read from.
    pub path: PathBuf,
    /// The SHA-256 of its content, in hex.
    pub sha256: String,
}

impl Version {
    /// The version's short name: the first 12 hex digits of the SHA-256 of the file.
    pub fn digest(&self) -> &str {
        &self.sha256[..12]
    }
}

/// The short digest of `bytes`, as [`PluginFile::digest`] names a version.
pub fn digest(bytes: &[u8]) -> String {
    let mut hex = sha256_hex(bytes);
    hex.truncate(12);
    hex
}

fn sha256_hex(bytes: &[u8]) -> String {
    crate::oci::Digest::of(bytes).hex().to_owned()
}

/// The plugin name for a file: its name without the `.wasm` extension.
pub fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_over_the_bound_are_refused_before_they_are_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("big.wasm");
        // A sparse 3 GB file: refused from its size alone.
        std::fs::File::create(&path)
            .and_then(|f| f.set_len(3 << 30))
            .expect("sparse file");
        let error = PluginFile::read(&path, 64 << 20).expect_err("too large");
        assert!(
            error.to_string().contains("at most 67108864 bytes"),
            "{error}"
        );
        std::fs::write(&path, b"\0asm").expect("write");
        let file = PluginFile::read(&path, 64 << 20).expect("small");
        assert_eq!((file.name.as_str(), file.bytes.len()), ("big", 4));
        assert!(PluginFile::read(dir.path(), 64 << 20).is_err(), "a folder");
    }
}
