//! The memory cap of one instance, which also keeps count of the memory it grants.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

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
