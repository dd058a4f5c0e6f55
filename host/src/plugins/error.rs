//! Why a plugin did not load.

use std::path::PathBuf;

use crate::informer::store::StoreError;
use crate::plugins::manifest::ManifestError;
use crate::wasm::LoadError;

/// Why a plugin did not load.
#[derive(Debug, thiserror::Error)]
#[error("plugin {plugin} ({}): {reason}", path.display())]
pub struct PluginError {
    /// The plugin's name (its file name without `.wasm`).
    pub plugin: String,
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub reason: Reason,
}

/// What went wrong while loading a plugin.
#[derive(Debug, thiserror::Error)]
pub enum Reason {
    /// The file could not be read.
    #[error("cannot read the file: {0}")]
    Read(std::io::Error),
    /// The artifact could not be pulled from its registry, or failed its checks there.
    #[error("cannot pull the artifact: {0}")]
    Pull(Box<crate::oci::OciError>),
    /// The bytes are not a component of the plugin world.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A plugin of that name is already loaded.
    #[error("a plugin of this name is already loaded")]
    AlreadyLoaded,
    /// Instantiation or `describe` trapped.
    #[error("failed to start: {0}")]
    Start(String),
    /// The manifest is not acceptable.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A declared index clashes with another plugin's index of the same name.
    #[error("index conflict: {0}")]
    Index(StoreError),
    /// The plugin subscribes to a type the operator's configuration does not grant it.
    #[error(
        "manifest field `{field}`: subscribes to {gvk}, which the configuration does not grant this plugin"
    )]
    NotGranted {
        /// The manifest field.
        field: String,
        /// The type, as `apiVersion/Kind`.
        gvk: String,
    },
    /// The plugin's controller needs a write the configuration does not grant it.
    #[error("manifest field `{field}`: {why}; add it to this plugin's grants.writes")]
    WriteNotGranted {
        /// The manifest field.
        field: String,
        /// What needs which write.
        why: String,
    },
    /// The plugin needs what the host does not offer in the mode it runs in.
    #[error("not supported here: {0}")]
    NotSupported(String),
    /// `init` refused or trapped (it runs before `describe`).
    #[error("init failed: {0}")]
    Init(String),
}

impl Reason {
    /// This reason, for plugin `file`.
    pub fn of(self, file: &crate::plugins::PluginFile) -> PluginError {
        PluginError {
            plugin: file.name.clone(),
            path: file.path.clone(),
            reason: self,
        }
    }
}
