//! What one plugin instance may use: its deadline, memory, query and log budgets, and the
//! limiter that enforces the memory cap inside wasmtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime::ResourceLimiter;

use crate::wasm::logging::LogRate;

/// Per-plugin sandbox limits: what one instance may spend per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// CPU time one call into the plugin may use (see `deadline.rs` for the wall-clock bound).
    pub deadline: Duration,
    /// Largest total of one instance's linear memories and tables, in bytes.
    pub memory_bytes: usize,
    /// Largest total JSON size one query may return, in bytes.
    pub query_bytes: usize,
    /// Most object handles one instance may hold at once (query answers it has not dropped).
    pub handles: usize,
    /// How much the plugin may log (its `logging` calls, stdout and stderr together).
    pub log_rate: LogRate,
    /// How many HTTP requests the plugin may send (all its instances together).
    pub http_rate: crate::rate::Rate,
    /// How large its state may grow.
    pub state: crate::wasm::state::StateLimits,
    /// CPU time it may use per second, all its calls together (0: only the pool's bound).
    pub cpu_millis_per_second: u32,
    /// Label combinations its metrics may hold, all together.
    pub metric_series: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            query_bytes: 16 << 20,
            handles: crate::wasm::handles::DEFAULT_MAX_HANDLES,
            log_rate: LogRate::default(),
            http_rate: crate::rate::Rate {
                per_second: 10,
                burst: 20,
            },
            state: crate::wasm::state::StateLimits::default(),
            cpu_millis_per_second: crate::cpu::DEFAULT_MILLIS_PER_SECOND,
            metric_series: crate::plugin_metrics::DEFAULT_MAX_SERIES,
        }
    }
}

/// Longest label selector a plugin may pass, in a query or its manifest.
pub const MAX_SELECTOR_BYTES: usize = 4096;
/// Most requirements in one label selector.
pub const MAX_SELECTOR_REQUIREMENTS: usize = 32;
/// Longest other query argument (name, namespace, index name or value).
pub const MAX_ARGUMENT_BYTES: usize = 4096;

/// Most bytes one call may copy out of a plugin: the arguments of one call into the host, or
/// what one export returns. Past it the call traps before the host copies more (wasmtime's
/// hostcall fuel, 128 MiB by default, counted before each string or list is copied), so the
/// host never holds a plugin's arguments larger than this, however they alias the plugin's
/// memory. Twice the largest write body.
pub const MAX_CALL_BYTES: usize = 2 * MAX_WRITE_BYTES;

/// Largest JSON body (object or patch) of one write.
pub const MAX_WRITE_BYTES: usize = 1 << 20;

/// A label selector from a plugin, refused before parsing when too long and after when it
/// has too many requirements; errors never echo more than a bounded part of it.
pub fn selector(text: &str) -> Result<kubewasm_sdk::selector::Selector, String> {
    if text.len() > MAX_SELECTOR_BYTES {
        return Err(format!(
            "label selector of {} bytes: at most {MAX_SELECTOR_BYTES} bytes",
            text.len()
        ));
    }
    let selector = kubewasm_sdk::selector::Selector::parse(text).map_err(|e| e.to_string())?;
    let count = selector.requirements().len();
    if count > MAX_SELECTOR_REQUIREMENTS {
        return Err(format!(
            "label selector with {count} requirements: at most {MAX_SELECTOR_REQUIREMENTS}"
        ));
    }
    Ok(selector)
}

/// `value` (the query argument `what`) unless it is longer than [`MAX_ARGUMENT_BYTES`].
pub fn argument<'a>(what: &str, value: &'a str) -> Result<&'a str, String> {
    if value.len() > MAX_ARGUMENT_BYTES {
        return Err(format!(
            "{what} of {} bytes: at most {MAX_ARGUMENT_BYTES} bytes",
            value.len()
        ));
    }
    Ok(value)
}

/// Bytes accounted per table element: wasmtime keeps one pointer per element.
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();
/// Linear memories one instance may create (a component has one per core module that
/// defines its own; the examples in Rust, Python and JavaScript need at most two).
pub const MAX_MEMORIES: usize = 8;
/// Tables one instance may create (components add a few for their adapters' shims).
pub const MAX_TABLES: usize = 32;
/// Core instances one component instance may create.
pub const MAX_INSTANCES: usize = 64;

/// What the instances of one plugin hold, in bytes: those of one version, and those of every
/// version of the plugin's name (a replaced or unloaded version whose call is still stuck
/// holds its memory until the call ends).
#[derive(Debug, Clone, Default)]
pub struct MemoryGauges {
    /// The instances of this version.
    pub version: Arc<AtomicU64>,
    /// The instances of every version of the plugin.
    pub plugin: Arc<AtomicU64>,
}

impl MemoryGauges {
    /// Gauges for a new version of the plugin whose versions together hold `plugin`.
    pub fn for_version(plugin: Arc<AtomicU64>) -> Self {
        Self {
            version: Arc::default(),
            plugin,
        }
    }

    /// Bytes the plugin's other versions hold.
    pub fn other_versions(&self) -> usize {
        let all = self.plugin.load(Ordering::Relaxed);
        let own = self.version.load(Ordering::Relaxed);
        usize::try_from(all.saturating_sub(own)).unwrap_or(usize::MAX)
    }

    fn add(&self, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.version.fetch_add(bytes, Ordering::Relaxed);
        self.plugin.fetch_add(bytes, Ordering::Relaxed);
    }

    fn sub(&self, bytes: usize) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.version.fetch_sub(bytes, Ordering::Relaxed);
        self.plugin.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// One accounting of an instance's memory: every linear memory and every table together,
/// initial sizes included, against one cap, which the memory the plugin's other versions
/// still hold counts against too. A growth past the cap traps (it is the plugin's failure,
/// and its instance is replaced); so do more memories, tables or core instances than
/// [`MAX_MEMORIES`], [`MAX_TABLES`] and [`MAX_INSTANCES`].
pub struct Limiter {
    cap: usize,
    gauges: MemoryGauges,
    granted: usize,
    /// The bytes granted by the last growth, taken back if wasmtime then fails it.
    last_growth: usize,
    /// Bytes granted when the instance was ready (after `init`).
    settled: usize,
}

impl Limiter {
    /// A limiter allowing `cap` bytes of linear memory and tables in total, counting what it
    /// grants in `gauges`.
    pub fn new(cap: usize, gauges: MemoryGauges) -> Self {
        Self {
            cap,
            gauges,
            granted: 0,
            last_growth: 0,
            settled: 0,
        }
    }

    /// Counts `bytes` the instance keeps outside linear memories and tables (`what`), before
    /// it is created: an error when they alone are over the cap.
    pub fn reserve(&mut self, bytes: u64, what: &str) -> wasmtime::Result<()> {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        let total = self.granted.saturating_add(bytes);
        if total > self.cap {
            return Err(wasmtime::Error::msg(format!(
                "memory cap: {bytes} bytes of {what} would take the instance to {total} bytes, over its cap of {} bytes",
                self.cap
            )));
        }
        self.granted = total;
        self.gauges.add(bytes);
        Ok(())
    }

    /// Counts what this instance holds in `gauges` from now on (its version was named).
    pub fn rebind(&mut self, gauges: MemoryGauges) {
        self.gauges.sub(self.granted);
        gauges.add(self.granted);
        self.gauges = gauges;
    }

    /// Marks the memory granted so far as the instance's starting size.
    pub fn settle(&mut self) {
        self.settled = self.granted;
    }

    /// Whether the instance has grown by three quarters of the room it had left under the
    /// cap when it settled: the next call may trap on the cap, a fresh instance will not.
    pub fn near_cap(&self) -> bool {
        let grown = self.granted.saturating_sub(self.settled);
        let room = self.cap.saturating_sub(self.settled);
        grown > room / 4 * 3
    }

    /// Bytes granted so far: linear memories and tables, initial sizes included.
    pub fn memory_bytes(&self) -> usize {
        self.granted
    }

    /// A memory or table growing from `current` to `desired` units of `unit_bytes`.
    fn grow(
        &mut self,
        what: &str,
        (current, desired, maximum): (usize, usize, Option<usize>),
        unit_bytes: usize,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|m| desired > m) {
            // It fails anyway; nothing to account (or to take back).
            self.last_growth = 0;
            return Ok(false);
        }
        let bytes = desired.saturating_sub(current).saturating_mul(unit_bytes);
        let total = self.granted.saturating_add(bytes);
        let others = self.gauges.other_versions();
        if total.saturating_add(others) > self.cap {
            self.last_growth = 0;
            let held = if others > 0 {
                format!(" while its earlier versions, still finishing a call, hold {others} bytes")
            } else {
                String::new()
            };
            return Err(wasmtime::Error::msg(format!(
                "memory cap: growing a {what} by {bytes} bytes would take the instance to {total} bytes of memory and tables{held}, over its cap of {} bytes",
                self.cap
            )));
        }
        self.granted = total;
        self.last_growth = bytes;
        self.gauges.add(bytes);
        Ok(true)
    }

    fn grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        let taken = std::mem::take(&mut self.last_growth);
        self.granted -= taken;
        self.gauges.sub(taken);
        Err(error)
    }
}

impl Drop for Limiter {
    fn drop(&mut self) {
        self.gauges.sub(self.granted);
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow("linear memory", (current, desired, maximum), 1)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow("table", (current, desired, maximum), TABLE_ELEMENT_BYTES)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.grow_failed(error)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Instance, Module, Store};

    fn instantiate(wat: &str, cap: usize) -> (Store<Limiter>, wasmtime::Result<Instance>) {
        let engine = Engine::default();
        let module = Module::new(&engine, wat).expect("valid module");
        let mut store = Store::new(&engine, Limiter::new(cap, MemoryGauges::default()));
        store.limiter(|l| l);
        let instance = Instance::new(&mut store, &module, &[]);
        (store, instance)
    }

    #[test]
    fn the_cap_holds_over_every_memory_together() {
        // Four memories of 20 MiB: each under a 64 MiB cap, together over it.
        let pages = 20 * 16;
        let wat = format!("(module {})", format!("(memory {pages})").repeat(4));
        let (store, instance) = instantiate(&wat, 64 << 20);
        let error = instance.expect_err("over the cap in total");
        assert!(format!("{error:#}").contains("memory cap"), "{error:#}");
        assert!(store.data().memory_bytes() <= 64 << 20);
        let (store, instance) = instantiate(&wat, 100 << 20);
        instance.expect("80 MiB fit under 100 MiB");
        assert_eq!(store.data().memory_bytes(), 80 << 20);
    }

    #[test]
    fn near_cap_counts_growth_after_settling_against_the_room_left() {
        // 16 MiB at the start under a 64 MiB cap: 48 MiB of room, near the cap past 36 MiB
        // of growth.
        let wat = r#"(module
            (memory 256)
            (func (export "grow") (param i32) (result i32)
                (memory.grow (local.get 0))))"#;
        let (mut store, instance) = instantiate(wat, 64 << 20);
        let instance = instance.expect("16 MiB fit");
        store.data_mut().settle();
        assert!(!store.data().near_cap(), "nothing grown yet");
        let grow = instance
            .get_typed_func::<i32, i32>(&mut store, "grow")
            .expect("export");
        let mib = 16;
        assert_eq!(grow.call(&mut store, 36 * mib).expect("fits"), 256);
        assert!(
            !store.data().near_cap(),
            "36 MiB of 48 is not past three quarters"
        );
        assert!(grow.call(&mut store, 1).expect("fits") > 0);
        assert!(store.data().near_cap(), "one page more is");
        store.data_mut().settle();
        assert!(!store.data().near_cap(), "measured from the new start");
    }

    #[test]
    fn tables_count_against_the_same_cap() {
        let wat = r#"(module
            (memory 16)
            (table 0 funcref)
            (func (export "grow") (param i32) (result i32)
                (table.grow 0 (ref.null func) (local.get 0))))"#;
        let (mut store, instance) = instantiate(wat, 2 << 20);
        let instance = instance.expect("1 MiB of memory fits");
        let grow = instance
            .get_typed_func::<i32, i32>(&mut store, "grow")
            .expect("export");
        assert_eq!(grow.call(&mut store, 1000).expect("small growth"), 0);
        let error = grow
            .call(&mut store, 50_000_000)
            .expect_err("50 M elements are 400 MB");
        assert!(format!("{error:?}").contains("memory cap"), "{error:?}");
        assert_eq!(
            store.data().memory_bytes(),
            (1 << 20) + 1000 * TABLE_ELEMENT_BYTES
        );
    }

    #[test]
    fn selectors_and_arguments_are_bounded_before_any_work() {
        let huge = "a=b,".repeat(1 << 20);
        let error = selector(&huge).expect_err("4 MiB");
        assert!(
            error.len() < 200,
            "the error does not echo the selector: {error}"
        );
        let many: Vec<String> = (0..MAX_SELECTOR_REQUIREMENTS + 1)
            .map(|i| format!("k{i}=v"))
            .collect();
        let error = selector(&many.join(",")).expect_err("too many requirements");
        assert!(error.contains("33 requirements"), "{error}");
        selector("app=web,tier in (a,b)").expect("an ordinary selector");
        assert!(argument("name", &"n".repeat(MAX_ARGUMENT_BYTES + 1)).is_err());
        assert_eq!(argument("name", "web"), Ok("web"));
    }

    #[test]
    fn memories_beyond_the_count_are_refused() {
        let wat = format!("(module {})", "(memory 1)".repeat(MAX_MEMORIES + 1));
        let (_, instance) = instantiate(&wat, 64 << 20);
        assert!(instance.is_err(), "{} memories", MAX_MEMORIES + 1);
    }
}
