//! Live plugin instances for the call benchmarks, with logging switched off.

use std::path::Path;
use std::sync::Arc;

use kubewasm::informer::Informer;
use kubewasm::plugins::PluginFile;
use kubewasm::wasm::logging::{LogRate, LogSink, PluginLogRecord, PluginLogger};
use kubewasm::wasm::{Engine, Instance, Limits, PluginContext};

/// Drops every line: logging is not what is measured.
pub struct Discard;

impl LogSink for Discard {
    fn record(&self, _: PluginLogRecord) {}
}

/// An initialised, described instance of the plugin at `path` with `config`, allowed to query
/// `informers`. Compiled code is cached in the benchmarks' temporary folder.
pub fn instance(path: &str, config: &str, informers: &[Arc<Informer>]) -> Instance {
    instance_with(path, config, informers, |_| {})
}

/// [`instance`], with its context changed by `tweak` first (state declared, say).
pub fn instance_with(
    path: &str,
    config: &str,
    informers: &[Arc<Informer>],
    tweak: impl FnOnce(&mut PluginContext),
) -> Instance {
    let limits = Limits {
        log_rate: LogRate {
            per_second: u32::MAX,
            burst: u32::MAX,
        },
        ..Limits::default()
    };
    let logger = Arc::new(PluginLogger::new(
        "bench",
        "v",
        Arc::new(Discard),
        limits.log_rate,
    ));
    let mut ctx = PluginContext::new("bench", logger, limits);
    ctx.grants = informers
        .iter()
        .map(|i| (i.gvk().clone(), i.clone()))
        .collect();
    tweak(&mut ctx);
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compiled");
    let engine =
        Engine::with_cache(Some(&cache), kubewasm::wasm::DEFAULT_CACHE_BYTES).expect("engine");
    let file = PluginFile::read(Path::new(path), kubewasm::plugins::DEFAULT_MAX_FILE_BYTES)
        .expect("plugin");
    let code = engine.compile(&file.bytes, &file.sha256).expect("compiles");
    let mut instance = engine.instantiate(&code, Arc::new(ctx)).expect("instance");
    instance.init(config).expect("no trap").expect("init");
    instance.describe().expect("describe");
    instance
}
