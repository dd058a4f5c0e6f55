//! What one plugin instance may use: its deadline, memory, query and log budgets, and the
//! limiter that enforces the memory cap inside wasmtime.

use std::time::Duration;

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use crate::wasm::logging::LogRate;

/// Per-plugin sandbox limits: what one instance may spend per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest time one call into the plugin may run.
    pub deadline: Duration,
    /// Largest linear memory one instance may grow to, in bytes.
    pub memory_bytes: usize,
    /// Largest total JSON size one query may return, in bytes.
    pub query_bytes: usize,
    /// How much the plugin may log (its `logging` calls, stdout and stderr together).
    pub log_rate: LogRate,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            query_bytes: 16 << 20,
            log_rate: LogRate::default(),
        }
    }
}

/// wasmtime's `StoreLimits` (cap, trap on a refused growth) plus the bytes of linear memory
/// and tables the instance has been granted so far.
pub struct Limiter {
    limits: StoreLimits,
    memory_bytes: usize,
}

impl Limiter {
    /// A limiter capping linear memory at `memory_bytes` in total.
    pub fn new(memory_bytes: usize) -> Self {
        Self {
            limits: StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            memory_bytes: 0,
        }
    }

    /// Bytes of linear memory granted to the instance (every memory, initial sizes included).
    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let granted = self.limits.memory_growing(current, desired, maximum)?;
        if granted {
            self.memory_bytes += desired.saturating_sub(current);
        }
        Ok(granted)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}
