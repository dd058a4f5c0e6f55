//! The wasm sandbox: the wasmtime engine, limits, pre-linked components, instances, and the
//! host side of the contract's imports (one file per WIT interface or resource: `cache.rs`,
//! `cluster.rs`, `logging.rs`, `objects.rs`; WASI's stdout and stderr in `stdio.rs`, outbound
//! `wasi:http` in `http.rs`).

pub mod admit;
mod cache;
mod clocks;
pub mod cluster;
mod compat;
mod compiled;
pub mod compiler;
pub mod convert;
pub mod deadline;
pub mod handles;
mod host_calls;
pub mod http;
mod http_send;
pub mod limits;
pub mod logging;
mod metrics;
mod objects;
pub mod shape;
pub mod state;
mod stdio;
mod version;
mod waits;

pub use cache::is_secret;
use compiled::CompiledCache;
pub use compiled::DEFAULT_CACHE_BYTES;
pub use compiler::Compiler;
pub use limits::Limits;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::gvk::Gvk;
use crate::informer::Informer;
use logging::PluginLogger;

/// Bindings generated from `wit/plugin.wit` (the contract, 0.5), and in [`bindings::v4`],
/// [`bindings::v3`] and [`bindings::v2`] from the frozen earlier contracts, for components
/// built before 0.5.
#[allow(missing_docs)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "kubewasm:plugin/plugin",
        // A host call can fail in ways that are not the plugin's answer (a handle the host no
        // longer knows): those end the call as a trap.
        imports: { default: trappable },
    });

    /// The 0.4 contract (`wit/compat/0.4`): its imports are answered by 0.5's
    /// (`compat/v4.rs`).
    pub mod v4 {
        wasmtime::component::bindgen!({
            path: "../wit/compat/0.4",
            world: "kubewasm:plugin/plugin",
            imports: { default: trappable },
            // One host type for an object handle, whichever contract lends it.
            with: { "kubewasm:plugin/types.object": super::kubewasm::plugin::types::Object },
        });
    }

    /// The 0.3 contract (`wit/compat/0.3`): its imports are answered by 0.5's
    /// (`compat/v3.rs`).
    pub mod v3 {
        wasmtime::component::bindgen!({
            path: "../wit/compat/0.3",
            world: "kubewasm:plugin/plugin",
            imports: { default: trappable },
            // One host type for an object handle, whichever contract lends it.
            with: { "kubewasm:plugin/types.object": super::kubewasm::plugin::types::Object },
        });
    }

    /// The 0.2 contract (`wit/compat/0.2`): its imports are answered by 0.5's
    /// (`compat/v2.rs`).
    pub mod v2 {
        wasmtime::component::bindgen!({
            path: "../wit/compat/0.2",
            world: "kubewasm:plugin/plugin",
            imports: { default: trappable },
            // One host type for an object handle, whichever contract lends it.
            with: { "kubewasm:plugin/types.object": super::kubewasm::plugin::types::Object },
        });
    }
}

use crate::informer::Notification;
use bindings::exports::kubewasm::plugin::handler::{HandleError, Manifest};

/// Most random bytes one WASI call may ask for (wasmtime's default is 64 MiB).
const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// Most WASI resources (streams, pollables, HTTP fields, requests and bodies) one instance
/// may hold at once (wasmtime's default is a million); creating more traps.
pub const MAX_WASI_RESOURCES: usize = 1024;

/// Component-model handles one instance may hold beyond its object and WASI resources (the
/// handles of resources a component defines for itself; wasmtime allows 100,000 by default,
/// each kept in host memory); creating more traps.
const SPARE_HANDLES: usize = 1024;

/// Largest set of HTTP header fields one `fields` resource may hold (wasmtime's default is
/// 128 KiB): with [`MAX_WASI_RESOURCES`], at most 16 MiB of headers per instance.
const MAX_HTTP_FIELDS_BYTES: usize = 16 << 10;

/// How often the engine's epoch advances: the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Why a plugin file could not be turned into runnable code.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes are not a valid WebAssembly component.
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// The component has more functions or exports than a plugin may.
    #[error("too complex to compile: {0}")]
    TooComplex(String),
    /// The component does not fit the `kubewasm:plugin` world of its version.
    #[error("does not match the kubewasm:plugin world: {0}")]
    WrongWorld(String),
    /// The component was built for another version of the contract.
    #[error(
        "built for {found}, but this host speaks kubewasm:plugin@{} (and runs {}): rebuild it against the current SDK or wit/plugin.wit",
        version::CONTRACT,
        version::earlier()
    )]
    WrongVersion {
        /// The contract version the component imports or exports, for example `kubewasm:plugin@0.1.0`.
        found: String,
    },
}

/// What a plugin instance can reach in the host: its name, its granted caches and its log.
#[derive(Clone)]
pub struct PluginContext {
    /// The plugin's name.
    pub name: String,
    /// The informers this plugin may query, by resource type.
    pub grants: HashMap<Gvk, Arc<Informer>>,
    /// The objects it sees of a granted type, where that is not every object: queries answer
    /// within it, and an object outside it is an error naming the declaration.
    pub scopes: HashMap<Gvk, crate::source::Scope>,
    /// Types the plugin asked for that the operator did not grant: queries answer `denied`.
    pub denied: HashSet<Gvk>,
    /// The plugin's own indexes: the name it declared, by type, to the name in the store
    /// (scoped to the plugin, so no plugin reaches or squats another's).
    pub indexes: HashMap<(Gvk, String), String>,
    /// The only Secrets (`namespace/name`) the plugin may see, when it was granted any.
    pub secrets: BTreeSet<String>,
    /// Its log, shared by all its instances.
    pub log: Arc<PluginLogger>,
    /// Its limits.
    pub limits: Limits,
    /// Types whose denial was already logged (once per plugin and type).
    pub denial_logged: Arc<Mutex<HashSet<Gvk>>>,
    /// Where its writes go and what it may write; `None` when the cluster takes no writes.
    pub writes: Option<Arc<WriteAccess>>,
    /// The hosts it may send HTTP requests to.
    pub http_hosts: Arc<Vec<http::AllowedHost>>,
    /// Its HTTP request rate, shared by its instances.
    pub http_rate: Arc<Mutex<crate::rate::Bucket>>,
    /// What became of its HTTP requests, by granted host and outcome.
    pub http_tally: Arc<http::HttpTally>,
    /// Its state, shared by its instances and versions.
    pub state: Arc<state::PluginState>,
    /// Whether its manifest declares `state`.
    pub state_declared: bool,
    /// Its CPU budget over time, shared by its instances and versions (none: unbounded).
    pub cpu: Option<Arc<crate::cpu::CpuBudget>>,
    /// What this version's instances, and all the plugin's versions', hold in memory.
    pub memory: limits::MemoryGauges,
    /// Its metrics (0.5), shared by its instances and versions.
    pub metrics: Arc<crate::plugin_metrics::Registry>,
}

/// Distinct write denials logged per plugin; later ones are only counted.
const MAX_DENIALS_LOGGED: usize = 256;

/// What a plugin may write, and where its writes go.
pub struct WriteAccess {
    /// The operator's `grants.writes` for the plugin.
    pub grants: Vec<crate::write::WriteGrant>,
    /// The cluster that takes the writes.
    pub writer: Arc<dyn crate::write::Writer>,
    /// What this replica delivers: writes go out only for what it delivers.
    pub duty: Arc<crate::shard::Duty>,
    /// Denials already logged.
    logged: Mutex<HashSet<String>>,
}

impl WriteAccess {
    /// Access through `writer` under `grants` for what `duty` delivers.
    pub fn new(
        grants: Vec<crate::write::WriteGrant>,
        writer: Arc<dyn crate::write::Writer>,
        duty: Arc<crate::shard::Duty>,
    ) -> Self {
        Self {
            grants,
            writer,
            duty,
            logged: Mutex::default(),
        }
    }

    /// True the first time this denial is seen (a bounded number are remembered).
    fn note_denial(&self, why: &str) -> bool {
        let mut logged = self
            .logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        logged.len() < MAX_DENIALS_LOGGED && logged.insert(why.to_owned())
    }
}

impl PluginContext {
    /// A context with no grants yet.
    pub fn new(name: &str, log: Arc<PluginLogger>, limits: Limits) -> Self {
        Self {
            name: name.to_owned(),
            grants: HashMap::new(),
            scopes: HashMap::new(),
            denied: HashSet::new(),
            indexes: HashMap::new(),
            secrets: BTreeSet::new(),
            log,
            denial_logged: Arc::default(),
            writes: None,
            http_hosts: Arc::default(),
            http_rate: Arc::new(Mutex::new(crate::rate::Bucket::new(
                limits.http_rate,
                std::time::Instant::now(),
            ))),
            http_tally: Arc::default(),
            state: Arc::default(),
            state_declared: false,
            cpu: None,
            memory: limits::MemoryGauges::default(),
            metrics: Arc::default(),
            limits,
        }
    }
}

/// The data of one instance's store.
pub struct HostState {
    wasi: WasiCtx,
    /// Where the instance's monotonic clock starts (see `clocks.rs`).
    clock_origin: std::time::Instant,
    table: ResourceTable,
    handles: handles::Handles,
    limits: limits::Limiter,
    host_calls: host_calls::HostCalls,
    /// The deadline of the call in progress.
    clock: deadline::CallClock,
    staging: cluster::Staging,
    /// The call in progress: its state changes and requeue.
    call: state::StateCall,
    http: wasmtime_wasi_http::WasiHttpCtx,
    http_hooks: http::HttpHooks,
    ctx: Arc<PluginContext>,
}

impl wasmtime_wasi_http::WasiHttpView for HostState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The wasmtime engine and linker shared by every plugin, with the compiled-code cache.
pub struct Engine {
    engine: wasmtime::Engine,
    linker: Linker<HostState>,
    cache: Option<CompiledCache>,
    /// Compilations running now, abandoned ones included.
    compiling: std::sync::atomic::AtomicUsize,
    /// The pre-linked code of every loaded plugin, by content: identical files (one plugin
    /// under two names, a reload of the same bytes) share one copy of the code and its
    /// metadata, freed when the last one goes.
    live: Mutex<HashMap<String, Weak<dyn compat::Pre>>>,
    /// Where components are compiled.
    compiler: Compiler,
    /// Compiling children now running.
    children: compiler::Children,
}

/// The settings of every engine, a compiling child's included (machine code is only valid for
/// an engine with the settings it was compiled under).
fn engine_config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    // Every call is synchronous: without the machinery for component-model concurrency a
    // call into a plugin costs about a quarter as much (docs/BENCHMARKS.md). wasmtime is
    // also built without it (host/Cargo.toml), which takes its remaining checks off the
    // call path.
    config.concurrency_support(false);
    config
}

/// Compilations that may run at once, abandoned ones included (a plugin whose compile ran
/// past its time keeps a core busy until it ends; two of them at most).
const MAX_COMPILES: usize = 2;

/// A compiled, type-checked and pre-linked plugin, ready to instantiate cheaply.
#[derive(Clone)]
pub struct PluginCode {
    pre: Arc<dyn compat::Pre>,
    /// True when the machine code came from the precompiled cache.
    pub cached: bool,
    /// Bytes each instance keeps outside its linear memories and tables (`shape.rs`),
    /// counted against its memory cap.
    pub instance_bytes: u64,
}

impl PluginCode {
    /// True when the plugin imports a cache query that reads indexes: only then does it need
    /// the built-in indexes of the types it is granted kept current.
    pub fn queries_indexes(&self) -> bool {
        let pre = self.pre.instance_pre();
        version::queries_indexes(pre.component(), pre.engine())
    }
}

impl Engine {
    /// An engine with epoch deadlines, and a linker with WASI and the kubewasm imports;
    /// components are compiled in this process (see [`Self::compile_in`]).
    pub fn new() -> wasmtime::Result<Self> {
        let engine = wasmtime::Engine::new(&engine_config())?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    deadline::tick();
                    std::thread::sleep(EPOCH_TICK);
                }
            })?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        clocks::add_to_linker(&mut linker)?;
        // Outbound HTTP, for the hosts each plugin is granted (`http.rs`).
        wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker)?;
        // After everything that links WASI's I/O: every blocking wait ends at the deadline.
        waits::add_to_linker(&mut linker)?;
        bindings::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        // Components built for 0.4, 0.3 and 0.2 keep loading: their imports, answered by 0.5's.
        bindings::v4::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        bindings::v3::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        bindings::v2::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)?;
        Ok(Self {
            engine,
            linker,
            cache: None,
            compiling: std::sync::atomic::AtomicUsize::new(0),
            live: Mutex::default(),
            compiler: Compiler::InProcess,
            children: compiler::Children::default(),
        })
    }

    /// Compiles components with `compiler` from now on: in child processes for plugins from
    /// anyone (the agent), in-process for trusted ones.
    pub fn compile_in(mut self, compiler: Compiler) -> Self {
        self.compiler = compiler;
        self
    }

    /// Stops every compilation running in a child process: their loads fail at once
    /// (shutdown never waits for a compile).
    pub fn stop_compiling(&self) {
        self.children.kill_all();
    }

    /// [`Self::new`], keeping compiled machine code in `dir` when given (at most
    /// `max_bytes` of it, least recently used evicted first), keyed by the component's
    /// content hash and the engine's settings, so an unchanged plugin loads in milliseconds
    /// instead of compiling. The folder must be writable only by the host's user: its files
    /// are loaded as code. A folder that cannot be created is logged and left out.
    pub fn with_cache(dir: Option<&Path>, max_bytes: u64) -> wasmtime::Result<Self> {
        let mut engine = Self::new()?;
        if let Some(dir) = dir {
            match CompiledCache::open(dir, max_bytes, &engine.engine) {
                Ok(cache) => engine.cache = Some(cache),
                Err(e) => {
                    tracing::warn!(folder = %dir.display(), "no compiled-code cache: {e}")
                }
            }
        }
        Ok(engine)
    }

    /// The default compiled-code folder: `kubewasm/compiled` in the user's cache folder.
    pub fn default_cache_dir() -> Option<PathBuf> {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("kubewasm/compiled"))
    }

    /// [`Self::compile`] within `timeout`. With a child-process compiler the child is killed
    /// then. In-process, the compilation runs on a thread of its own that cannot be stopped:
    /// the caller gets an error and goes on, the compilation ends on its own (its code is
    /// cached for next time); at most [`MAX_COMPILES`] run at once, past that compiling is
    /// refused.
    pub fn compile_within(
        self: &Arc<Self>,
        bytes: &[u8],
        sha256: &str,
        timeout: Duration,
    ) -> Result<PluginCode, LoadError> {
        use std::sync::atomic::Ordering;
        if let Compiler::Child { exe, memory_bytes } = &self.compiler {
            return self.compile_with(bytes, sha256, |engine, binary| {
                let code =
                    compiler::in_child(exe, *memory_bytes, binary, timeout, &engine.children)?;
                let loaded = match &engine.cache {
                    Some(cache) => cache.store(&engine.engine, sha256, &code),
                    None => compiled::from_memory(&engine.engine, &code),
                };
                loaded.map_err(|e| LoadError::NotAComponent(format!("{e:#}")))
            });
        }
        if self.compiling.fetch_add(1, Ordering::SeqCst) >= MAX_COMPILES {
            self.compiling.fetch_sub(1, Ordering::SeqCst);
            return Err(LoadError::TooComplex(format!(
                "{MAX_COMPILES} compilations that ran past their time are still running; refused until they end"
            )));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (engine, bytes, sha256) = (self.clone(), bytes.to_vec(), sha256.to_owned());
        // Below the host, with the compiler threads it starts: a file made to compile
        // slowly cannot take the informers' CPU, even past its timeout (`priority.rs`).
        let spawned = crate::priority::spawn_below_host("compile".into(), move || {
            let code = engine.compile(&bytes, &sha256);
            engine.compiling.fetch_sub(1, Ordering::SeqCst);
            // The receiver is gone when the caller gave up; the code is cached anyway.
            let _ = tx.send(code);
        });
        if let Err(e) = spawned {
            self.compiling.fetch_sub(1, Ordering::SeqCst);
            return Err(LoadError::NotAComponent(format!(
                "cannot start compiling: {e}"
            )));
        }
        rx.recv_timeout(timeout).unwrap_or_else(|_| {
            Err(LoadError::TooComplex(format!(
                "compiling took longer than {timeout:?} (compileTimeoutSeconds); abandoned"
            )))
        })
    }

    /// Compiles component bytes (whose SHA-256 in hex is `sha256`) in this process and checks
    /// them against the plugin world. Blocking: seconds for large components, so call it off
    /// the async runtime.
    pub fn compile(&self, bytes: &[u8], sha256: &str) -> Result<PluginCode, LoadError> {
        self.compile_with(bytes, sha256, |engine, binary| {
            match &engine.cache {
                Some(cache) => cache.compile(&engine.engine, binary, sha256),
                None => Component::new(&engine.engine, binary),
            }
            .map_err(|e| LoadError::NotAComponent(format!("{e:#}")))
        })
    }

    /// [`Self::compile`] with `machine_code` turning checked component bytes into code when
    /// neither the loaded plugins nor the cache have it.
    fn compile_with(
        &self,
        bytes: &[u8],
        sha256: &str,
        machine_code: impl FnOnce(&Self, &[u8]) -> Result<Component, LoadError>,
    ) -> Result<PluginCode, LoadError> {
        // Text (WAT) is accepted too, turned into binary first so the same checks apply; a
        // file that is neither says so plainly.
        let binary = if bytes.starts_with(b"\0asm") {
            std::borrow::Cow::Borrowed(bytes)
        } else if bytes.trim_ascii_start().starts_with(b"(") {
            std::borrow::Cow::Owned(
                wat::parse_bytes(bytes)
                    .map_err(|e| LoadError::NotAComponent(format!("{e}")))?
                    .into_owned(),
            )
        } else {
            return Err(LoadError::NotAComponent(
                "no WebAssembly header (\\0asm) at the start of the file".into(),
            ));
        };
        let shape = shape::shape(&binary);
        if let Some(refused) = shape::refusal(shape) {
            return Err(LoadError::TooComplex(refused));
        }
        let instance_bytes = shape.instance_bytes;
        if let Some(pre) = self.live().get(sha256).and_then(Weak::upgrade) {
            return Ok(PluginCode {
                pre,
                cached: true,
                instance_bytes,
            });
        }
        let cached = self
            .cache
            .as_ref()
            .and_then(|c| c.lookup(&self.engine, sha256));
        let (component, cached) = match cached {
            Some(component) => (component, true),
            None => {
                // Seconds for a large component: say so, once (later loads hit the cache).
                let digest = sha256.get(..12).unwrap_or(sha256);
                tracing::info!(digest, bytes = binary.len(), "compiling to machine code");
                let started = std::time::Instant::now();
                let component = machine_code(self, &binary)?;
                tracing::info!(
                    digest,
                    seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
                    "compiled; the machine code is cached"
                );
                (component, false)
            }
        };
        let contract = version::of(&component, &self.engine)
            .map_err(|found| LoadError::WrongVersion { found })?;
        let linked = self.linker.instantiate_pre(&component);
        let pre: Arc<dyn compat::Pre> = linked
            .and_then(|linked| compat::pre(contract, linked))
            .map_err(|e| LoadError::WrongWorld(format!("{e:#}")))?
            .into();
        let mut live = self.live();
        live.retain(|_, code| code.strong_count() > 0);
        live.insert(sha256.to_owned(), Arc::downgrade(&pre));
        Ok(PluginCode {
            pre,
            cached,
            instance_bytes,
        })
    }

    /// The code of loaded plugins, by content.
    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<dyn compat::Pre>>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A fresh instance of `code` in a store of its own, with no ambient authority.
    pub fn instantiate(
        &self,
        code: &PluginCode,
        ctx: Arc<PluginContext>,
    ) -> wasmtime::Result<Instance> {
        let mut limits = limits::Limiter::new(ctx.limits.memory_bytes, ctx.memory.clone());
        limits.reserve(
            code.instance_bytes,
            "globals and function references of its core instances",
        )?;
        let max_handles = ctx
            .limits
            .handles
            .saturating_add(MAX_WASI_RESOURCES + SPARE_HANDLES);
        // No preopened folders, network, environment or arguments: only clocks, random, and
        // stdout/stderr into the plugin's log.
        let clock_origin = std::time::Instant::now();
        let host_calls = host_calls::HostCalls::default();
        let wasi = WasiCtx::builder()
            .monotonic_clock(clocks::Clock(clock_origin))
            .wall_clock(clocks::WallClock)
            .max_random_size(MAX_RANDOM_BYTES)
            .stdout(stdio::LogStream::stdout(
                ctx.log.clone(),
                host_calls.clone(),
            ))
            .stderr(stdio::LogStream::stderr(
                ctx.log.clone(),
                host_calls.clone(),
            ))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_WASI_RESOURCES);
        let mut http = wasmtime_wasi_http::WasiHttpCtx::new();
        http.set_field_size_limit(MAX_HTTP_FIELDS_BYTES);
        let state = HostState {
            wasi,
            clock_origin,
            table,
            handles: handles::Handles::default(),
            limits,
            host_calls,
            clock: {
                let mut clock = deadline::CallClock::new(ctx.limits.deadline);
                clock.set_budget(ctx.cpu.clone());
                clock
            },
            staging: cluster::Staging::default(),
            call: state::StateCall::default(),
            http,
            http_hooks: http::HttpHooks::new(
                &ctx.name,
                ctx.http_hosts.clone(),
                ctx.http_rate.clone(),
                ctx.http_tally.clone(),
            ),
            ctx,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_hostcall_fuel(limits::MAX_CALL_BYTES);
        store.set_max_component_handles(max_handles);
        store.epoch_deadline_callback(|mut store| Ok(store.data_mut().clock.checkpoint()));
        let first = store.data_mut().clock.start();
        store.set_epoch_deadline(first);
        let plugin = code.pre.instantiate(&mut store)?;
        Ok(Instance {
            store,
            plugin,
            previous_failures: Vec::new(),
            staged: cluster::Staged::default(),
            effects: Effects::default(),
            init_cost: Duration::ZERO,
        })
    }
}

/// One live instance of a plugin. After any error from a call (a trap), throw it away.
pub struct Instance {
    store: Store<HostState>,
    plugin: Box<dyn compat::Exports>,
    /// Handed to the next `handle` call's `previous-failures`.
    previous_failures: Vec<bindings::kubewasm::plugin::cluster::WriteFailure>,
    /// What the last call staged.
    staged: cluster::Staged,
    /// The last call's changes to the plugin's state, and the requeue it asked for.
    effects: Effects,
    /// What `init` cost (see [`Instance::init_cost`]).
    init_cost: Duration,
}

/// What one delivery asks of a plugin.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    /// `handle` an event.
    Event(&'a Notification),
    /// Every subscription's initial state has been handed over.
    Synced,
    /// A schedule, by name, is due.
    Tick(&'a str),
    /// `reconcile` the object of a cache key (a controller).
    Reconcile(&'a str),
    /// `finalize` the object of a cache key before it goes (a controller's finalizer).
    Finalize(&'a str),
}

/// What a call asked for besides its writes, applied only if it succeeded.
#[derive(Debug, Default)]
pub struct Effects {
    /// Changes to the plugin's state (`None`: removed).
    pub state: std::collections::BTreeMap<String, Option<String>>,
    /// Deliver the event's object again after this long.
    pub requeue: Option<Duration>,
}

impl Instance {
    fn arm(&mut self) {
        let state = self.store.data_mut();
        let first = state.clock.start();
        // Only a plugin granted hosts can send a request that needs the call's deadline.
        if !state.http_hooks.allowed.is_empty() {
            state.http_hooks.deadline = std::time::Instant::now() + state.ctx.limits.deadline;
        }
        self.store.set_epoch_deadline(first);
    }

    /// Calls `describe` (an earlier manifest reads as 0.5's with none of the additions).
    pub fn describe(&mut self) -> wasmtime::Result<Manifest> {
        self.arm();
        self.plugin.describe(&mut self.store)
    }

    /// The contract version the component was built for (`0.5.0`, `0.4.0`, `0.3.0`, `0.2.0`).
    pub fn contract(&self) -> &'static str {
        self.plugin.contract().version()
    }

    /// Calls `init`; the inner error is the plugin's own refusal.
    pub fn init(&mut self, config: &str) -> wasmtime::Result<Result<(), String>> {
        let (wall, cpu) = (std::time::Instant::now(), deadline::cpu_now());
        self.arm();
        let outcome = self.plugin.init(&mut self.store, config);
        self.store.data_mut().clock.finish();
        self.store.data_mut().limits.settle();
        self.init_cost = match (cpu, deadline::cpu_now()) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => wall.elapsed(),
        };
        outcome
    }

    /// What its `init` cost: the CPU time it used (the wall time where threads have no CPU
    /// clock); zero before `init`.
    pub fn init_cost(&self) -> Duration {
        self.init_cost
    }

    /// Bytes of linear memory the instance has been granted.
    pub fn memory_bytes(&self) -> usize {
        self.store.data().limits.memory_bytes()
    }

    /// Whether the instance has used most of the memory room it had after `init` (see
    /// [`limits::Limiter::near_cap`]).
    pub fn near_memory_cap(&self) -> bool {
        self.store.data().limits.near_cap()
    }

    /// The longest of this instance's timed calls into the host (see `host_calls.rs`).
    pub fn slowest_host_call(&self) -> Duration {
        self.store.data().host_calls.slowest()
    }

    /// Calls `handle` with `n`'s objects lent as handles for the call; the inner error is the
    /// plugin's own failure report.
    /// What it staged is kept for [`Self::take_staged`].
    pub fn handle(&mut self, n: &Notification) -> wasmtime::Result<Result<(), HandleError>> {
        self.call(Call::Event(n))
    }

    /// Makes `call`: `handle`, `synced` or `tick` (a 0.2 component exports only `handle`: the
    /// others answer Ok without a call). What it staged is kept for [`Self::take_staged`] and
    /// [`Self::take_effects`].
    pub fn call(&mut self, call: Call<'_>) -> wasmtime::Result<Result<(), HandleError>> {
        if !self.plugin.exports(&call) {
            return Ok(Ok(()));
        }
        self.arm();
        let previous = std::mem::take(&mut self.previous_failures);
        let state = self.store.data_mut();
        state.staging.open(previous);
        state
            .call
            .open(matches!(call, Call::Event(_) | Call::Reconcile(_)));
        let outcome = self.plugin.call(&mut self.store, call);
        let state = self.store.data_mut();
        state.clock.finish();
        state.handles.end_call();
        self.staged = state.staging.close();
        let (changes, requeue) = state.call.close();
        self.effects = Effects {
            state: changes,
            requeue,
        };
        outcome
    }

    /// What the last call asked for besides its writes (applied only if it returned Ok).
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    /// The writes the last `handle` call staged (sent only if it returned Ok).
    pub fn take_staged(&mut self) -> cluster::Staged {
        std::mem::take(&mut self.staged)
    }

    /// Which of the plugin's state maps the next calls use.
    pub fn set_state_scope(&mut self, scope: state::StateScope) {
        self.store.data_mut().call.scope = scope;
    }

    /// Why the previous attempt's writes failed, for the next `handle` call.
    pub fn set_previous_failures(
        &mut self,
        failures: Vec<bindings::kubewasm::plugin::cluster::WriteFailure>,
    ) {
        self.previous_failures = failures;
    }

    /// Object handles the plugin holds now.
    pub fn handles_held(&self) -> usize {
        self.store.data().handles.owned()
    }

    /// Replaces what this instance can reach (after `describe` told what it needs).
    pub fn set_context(&mut self, ctx: Arc<PluginContext>) {
        let state = self.store.data_mut();
        state.http_hooks.allowed = ctx.http_hosts.clone();
        state.clock.set_budget(ctx.cpu.clone());
        state.limits.rebind(ctx.memory.clone());
        state.ctx = ctx;
    }

    /// HTTP requests sent and refused since the last time these were taken.
    pub fn take_http_counts(&mut self) -> (u64, u64) {
        let hooks = &mut self.store.data_mut().http_hooks;
        (std::mem::take(&mut hooks.sent), hooks.take_denied())
    }

    /// What the instance holds after a call, and the HTTP requests since the last reading.
    pub fn usage(&mut self) -> Usage {
        let (http_sent, http_denied) = self.take_http_counts();
        Usage {
            memory_bytes: self.memory_bytes(),
            handles: self.handles_held(),
            http_sent,
            http_denied,
            slowest_host_call: self.slowest_host_call(),
        }
    }
}

/// What an instance holds after a call ([`Instance::usage`]), for its plugin's accounting.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// Bytes of linear memory granted.
    pub memory_bytes: usize,
    /// Object handles held.
    pub handles: usize,
    /// HTTP requests sent since the last reading.
    pub http_sent: u64,
    /// HTTP requests refused since the last reading.
    pub http_denied: u64,
    /// The longest of the instance's timed calls into the host.
    pub slowest_host_call: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_instance_keeps_outside_its_memories_counts_against_its_cap() {
        let engine = Engine::new().expect("engine");
        let bytes = std::fs::read(kubewasm_plugin_artifacts::POD_PHASE).expect("built");
        let mut code = engine
            .compile(&bytes, "pod-phase-globals")
            .expect("compiles");
        assert!(
            code.instance_bytes > 0,
            "its functions and globals are counted"
        );
        let log = Arc::new(PluginLogger::new(
            "p",
            "digest",
            Arc::new(logging::MemorySink::default()),
            logging::LogRate::default(),
        ));
        let ctx = Arc::new(PluginContext::new("p", log, Limits::default()));
        let fits = engine.instantiate(&code, ctx.clone()).expect("fits");
        assert!(
            fits.memory_bytes() as u64 >= code.instance_bytes,
            "counted in its memory"
        );
        code.instance_bytes = Limits::default().memory_bytes as u64 + 1;
        let error = engine.instantiate(&code, ctx).err().expect("over the cap");
        assert!(format!("{error:#}").contains("globals"), "{error:#}");
    }

    #[test]
    fn identical_files_share_their_code_until_the_last_goes() {
        let engine = Engine::new().expect("engine");
        let bytes = std::fs::read(kubewasm_plugin_artifacts::POD_PHASE).expect("built");
        // The key only has to name the content.
        let sha = "pod-phase";
        let a = engine.compile(&bytes, sha).expect("compiles");
        let b = engine.compile(&bytes, sha).expect("compiles");
        assert!(Arc::ptr_eq(&a.pre, &b.pre), "one copy for one content");
        let weak = Arc::downgrade(&a.pre);
        drop((a, b));
        assert!(
            weak.upgrade().is_none(),
            "freed with the last plugin holding it"
        );
        let _c = engine.compile(&bytes, sha).expect("compiles again");
        assert_eq!(engine.live().len(), 1, "one entry, the dead one replaced");
    }
}
