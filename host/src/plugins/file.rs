//! One plugin file: its name, path, bytes and content digest, read and hashed once.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

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
    /// Reads `path`.
    pub fn read(path: &Path) -> std::io::Result<Self> {
        Ok(Self::new(path, std::fs::read(path)?))
    }

    /// The file at `path` with content `bytes`.
    pub fn new(path: &Path, bytes: Vec<u8>) -> Self {
        Self {
            name: plugin_name(path),
            path: path.to_owned(),
            sha256: sha256_hex(&bytes),
            bytes,
        }
    }

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
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The plugin name for a file: its name without the `.wasm` extension.
pub fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
