//! A plugin file checked without running it against any cache: compiled, instantiated,
//! initialised with its configuration, described, validated, and held against the operator's
//! grants. Loading (`PluginHost`) and `kubewasm check` and `rbac` all start here.

use std::path::Path;
use std::sync::Arc;

use crate::gvk::Gvk;
use crate::plugins::manifest::PluginManifest;
use crate::plugins::{PluginError, PluginSettings, Reason};
use crate::runtime::logging::{LogSink, PluginLogger};
use crate::runtime::{Instance, PluginCode, PluginContext, Runtime, is_secret};

/// A plugin version that passed every check that needs no cache.
pub struct Inspection {
    /// Its compiled, pre-linked code.
    pub code: PluginCode,
    /// What its instances may reach, grants applied (no informers yet).
    pub ctx: PluginContext,
    /// The configuration handed to `init`.
    pub config: String,
    /// The instance that ran `init` and `describe`.
    pub instance: Instance,
    /// Its manifest, with `cached` reduced to the granted types.
    pub manifest: PluginManifest,
    /// Its logger.
    pub logger: Arc<PluginLogger>,
}

impl Inspection {
    /// Types the plugin queries but may not read (queries answer `denied`).
    pub fn denied(&self) -> Vec<Gvk> {
        let mut denied: Vec<Gvk> = self.ctx.denied.iter().cloned().collect();
        denied.sort();
        denied
    }
}

/// Checks plugin `name` from `path` (content `bytes`, version `hash`) under `settings`.
pub fn inspect(
    runtime: &Runtime,
    settings: &PluginSettings,
    log: Arc<dyn LogSink>,
    name: &str,
    path: &Path,
    bytes: &[u8],
    hash: &str,
) -> Result<Inspection, PluginError> {
    let fail = |reason: Reason| PluginError {
        plugin: name.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let code = runtime.compile(bytes).map_err(|e| fail(Reason::Load(e)))?;
    let logger = Arc::new(PluginLogger::new(name, hash, log, settings.limits.log_rate));
    let mut ctx = PluginContext::new(name, logger.clone(), settings.limits.clone());
    let mut instance = runtime
        .instantiate(&code, Arc::new(ctx.clone()))
        .map_err(|e| fail(Reason::Start(format!("{e:#}"))))?;
    let config = settings.config.clone();
    match instance.init(&config) {
        Ok(Ok(())) => {}
        Ok(Err(refusal)) => return Err(fail(Reason::Init(refusal))),
        Err(trap) => return Err(fail(Reason::Init(format!("trapped: {trap:#}")))),
    }
    let described = instance
        .describe()
        .map_err(|e| fail(Reason::Start(format!("describe trapped: {e:#}"))))?;
    let mut manifest = PluginManifest::validate(&described).map_err(|e| fail(e.into()))?;

    // The operator decides: subscriptions must be granted, ungranted queries answer denied.
    for (i, (gvk, filter)) in manifest.subscriptions.iter_mut().enumerate() {
        if !settings.grants.allows(gvk) {
            return Err(fail(Reason::NotGranted {
                field: format!("subscriptions[{i}]"),
                gvk: gvk.to_string(),
            }));
        }
        if is_secret(gvk) {
            filter.keys = Some(settings.grants.secrets.iter().cloned().collect());
        }
    }
    let (granted, denied): (Vec<Gvk>, Vec<Gvk>) = manifest
        .cached
        .iter()
        .cloned()
        .partition(|gvk| settings.grants.allows(gvk));
    manifest.cached = granted;
    ctx.denied = denied.into_iter().collect();
    ctx.secrets = settings.grants.secrets.iter().cloned().collect();
    Ok(Inspection {
        code,
        ctx,
        config,
        instance,
        manifest,
        logger,
    })
}
