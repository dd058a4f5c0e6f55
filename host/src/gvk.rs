//! Resource types: group, version and kind.

use std::fmt;

/// A resource type: API group (empty for the core group), version and kind.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Gvk {
    /// API group, empty for the core group.
    pub group: String,
    /// API version within the group.
    pub version: String,
    /// Kind, for example `Deployment`.
    pub kind: String,
}

/// The group and version of an `apiVersion`: `apps/v1` gives `apps` and `v1`; `v1` gives the
/// core group (empty) and `v1`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

impl Gvk {
    /// A resource type from its three parts.
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// A resource type from an object's `apiVersion` (`apps/v1` or `v1`) and `kind`.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = split_api_version(api_version);
        Self::new(group, version, kind)
    }

    /// A resource type written as `apiVersion/Kind` (`v1/Pod`, `apps/v1/Deployment`).
    pub fn parse(text: &str) -> Result<Self, NotAGvk> {
        match text.rsplit_once('/') {
            Some((api_version, kind)) if !api_version.is_empty() && !kind.is_empty() => {
                Ok(Self::from_api_version(api_version, kind))
            }
            _ => Err(NotAGvk(crate::text::cut(text.to_owned(), 120))),
        }
    }

    /// The `apiVersion` string: `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        kubewasm_sdk::api_version(&self.group, &self.version)
    }
}

/// Text that does not name a resource type as `apiVersion/Kind`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not apiVersion/Kind (for example apps/v1/Deployment)")]
pub struct NotAGvk(pub String);

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_round_trips_core_and_named_groups() {
        let core = Gvk::from_api_version("v1", "Pod");
        assert_eq!(core, Gvk::new("", "v1", "Pod"));
        assert_eq!(core.api_version(), "v1");
        let apps = Gvk::from_api_version("apps/v1", "Deployment");
        assert_eq!(apps.group, "apps");
        assert_eq!(apps.api_version(), "apps/v1");
        assert_eq!(apps.to_string(), "apps/v1/Deployment");
    }
}

/// Names of kubewasm's own custom resource, `KubewasmPlugin` (see `crd.rs`).
pub mod plugin_resource {
    /// Its API group.
    pub const GROUP: &str = "kubewasm.dev";
    /// Its version.
    pub const VERSION: &str = "v1alpha1";
    /// Its kind.
    pub const KIND: &str = "KubewasmPlugin";
    /// Its plural.
    pub const PLURAL: &str = "kubewasmplugins";
}
