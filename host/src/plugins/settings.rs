//! What the operator decides for one plugin: limits, configuration and grants.

use crate::gvk::Gvk;
use crate::runtime::{Limits, is_secret};

/// What the operator grants one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Types the plugin may subscribe to and query. `None`: whatever its manifest declares,
    /// except Secrets.
    pub resources: Option<Vec<Gvk>>,
    /// The only Secrets (`namespace/name`) it may see. Secrets are denied without this.
    pub secrets: Vec<String>,
}

impl Grants {
    /// True when the plugin may subscribe to or query `gvk`.
    pub fn allows(&self, gvk: &Gvk) -> bool {
        if is_secret(gvk) {
            !self.secrets.is_empty()
        } else {
            self.resources.as_ref().is_none_or(|r| r.contains(gvk))
        }
    }
}

/// The operator's settings for one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSettings {
    /// Resource limits.
    pub limits: Limits,
    /// Configuration handed to `init` (JSON text).
    pub config: String,
    /// What it may read.
    pub grants: Grants,
    /// Resync period when its manifest sets none.
    pub resync: Option<std::time::Duration>,
}

impl Default for PluginSettings {
    fn default() -> Self {
        Self {
            resync: None,
            limits: Limits::default(),
            config: "{}".to_owned(),
            grants: Grants::default(),
        }
    }
}
