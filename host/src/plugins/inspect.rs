//! A plugin file checked without running it against any cache: compiled, instantiated,
//! initialised with its configuration, described, validated, and held against the operator's
//! grants. Loading (`PluginHost`) and `kubewasm check` and `rbac` all start here.

use std::sync::Arc;

use crate::gvk::Gvk;
use crate::plugins::manifest::PluginManifest;
use crate::plugins::{PluginError, PluginFile, PluginSettings, Reason};
use crate::text::{MAX_MESSAGE_BYTES, cut};
use crate::wasm::logging::{LogSink, PluginLogger};
use crate::wasm::{Engine, Instance, PluginCode, PluginContext, is_secret};

/// A plugin version that passed every check that needs no cache.
pub struct Inspection {
    /// Its compiled, pre-linked code.
    pub code: PluginCode,
    /// What its instances may reach, grants applied (no informers yet).
    pub ctx: PluginContext,
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

/// Checks plugin `file` under `settings`, logging to `log`; compiling may take at most
/// `compile_timeout`.
pub fn inspect(
    engine: &Arc<Engine>,
    compile_timeout: std::time::Duration,
    settings: &PluginSettings,
    log: Arc<dyn LogSink>,
    file: &PluginFile,
) -> Result<Inspection, PluginError> {
    // Messages from the plugin (refusals, traps) are cut before they are logged or kept.
    let fail = |reason: Reason| {
        match reason {
            Reason::Init(m) => Reason::Init(cut(m, MAX_MESSAGE_BYTES)),
            Reason::Start(m) => Reason::Start(cut(m, MAX_MESSAGE_BYTES)),
            other => other,
        }
        .of(file)
    };
    let code = tracing::info_span!("load", plugin = %file.name)
        .in_scope(|| engine.compile_within(&file.bytes, &file.sha256, compile_timeout))
        .map_err(|e| fail(Reason::Load(e)))?;
    let name = &file.name;
    let logger = Arc::new(PluginLogger::new(
        name,
        file.digest(),
        log,
        settings.limits.log_rate,
    ));
    let mut ctx = PluginContext::new(name, logger.clone(), settings.limits.clone());
    let mut instance = engine
        .instantiate(&code, Arc::new(ctx.clone()))
        .map_err(|e| fail(Reason::Start(format!("{e:#}"))))?;
    match instance.init(&settings.config) {
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
        instance,
        manifest,
        logger,
    })
}
