//! The loaded plugins: loading with clear errors, one dispatch thread each, the delivery
//! policy (retries, backoff, recycling), status, the plugins folder, unloading.

pub mod admit;
mod dispatch;
mod error;
mod file;
pub mod folder;
mod host;
pub mod inspect;
pub mod manifest;
pub mod registry;
mod retry;
mod settings;
pub mod shadow;
mod status;
pub mod throttle;
pub mod trial;
pub mod triggers;

pub use error::{PluginError, Reason};
pub use file::{PluginFile, Version, digest, plugin_name};
pub use host::{Outcome, PluginHost, Role};
pub use retry::Backoff;
pub use settings::{
    DEFAULT_COMPILE_TIMEOUT, DEFAULT_MAX_FILE_BYTES, DEFAULT_RELEASE_IDLE_AFTER,
    DEFAULT_STATE_WRITE_BYTES_PER_SECOND, Delivery, Grants, MAX_DEBOUNCE, PluginSettings,
    PluginsConfig,
};
pub use status::{
    Asked, CALL_KINDS, DEGRADED_AFTER, FailedPlugin, PluginStats, PluginStatus, WRITE_RESULTS,
};
pub use trial::Mode;
