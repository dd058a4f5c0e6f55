//! WASI's monotonic clock with waits bounded by the call deadline. Epoch interruption stops
//! guest code, not a host call blocked in `wasi:io/poll`; so a wait the plugin asks for
//! (`subscribe-duration`, `subscribe-instant`) ends at the latest one deadline after the call
//! began, by the wall clock, and the call is then stopped (`deadline.rs`).

use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime_wasi::p2::{Pollable, subscribe};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

use crate::wasm::HostState;

/// The WASI package version whose clock functions are replaced; the linker resolves every
/// semver-compatible import (any `0.2.x`) to it.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// The instance's monotonic clock: nanoseconds since the instance was created.
pub struct Clock(pub Instant);

impl HostMonotonicClock for Clock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The wall clock plugins read: the host's ([`crate::clock`]), which a test can set.
pub struct WallClock;

impl HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        crate::clock::since_epoch()
    }
}

/// A wait that is over at an instant.
struct Wait(tokio::time::Instant);

#[wasmtime_wasi::async_trait]
impl Pollable for Wait {
    async fn ready(&mut self) {
        tokio::time::sleep_until(self.0).await;
    }
}

/// A pollable ready after `nanos`, or at the call's deadline if that is sooner.
fn wait(
    state: &mut HostState,
    nanos: u64,
) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi::p2::DynPollable>> {
    let until = state.clock.wait_for(Duration::from_nanos(nanos));
    let resource = state
        .table
        .push(Wait(tokio::time::Instant::from_std(until)))?;
    subscribe(&mut state.table, resource)
}

/// Replaces WASI's `subscribe-duration` and `subscribe-instant` in `linker` with bounded ones.
pub fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap("subscribe-duration", |mut store, (nanos,): (u64,)| {
        Ok((wait(store.data_mut(), nanos)?,))
    })?;
    clock.func_wrap("subscribe-instant", |mut store, (when,): (u64,)| {
        let state = store.data_mut();
        let now = Clock(state.clock_origin).now();
        Ok((wait(state, when.saturating_sub(now))?,))
    })?;
    linker.allow_shadowing(false);
    Ok(())
}
