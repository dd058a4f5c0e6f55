//! Every WASI function that can block, bounded by the call's deadline. Epoch interruption
//! stops guest code, not a host call waiting in `wasi:io/poll` or in a blocking stream
//! method; a plugin could otherwise hold its thread for ever (an HTTP request body written
//! and never sent blocks its writer until someone reads it, and no one will). Each such
//! function is replaced by the same WASI implementation under a timeout at the call's
//! deadline by the wall clock from its start (`deadline::CallClock::latest_wait_end`); a wait
//! still pending then traps, naming the function, and the instance is discarded as after any
//! trap. The clock waits (`clocks.rs`) end at the same instant, and a `poll` or `block` that
//! such a wait ended traps there too (`interrupt`), so a sleep past the deadline stops the
//! call even when the epoch ticker has not yet reached the deadline.
//!
//! The functions: `poll`, `pollable.block`, and the `blocking-*` methods of input and output
//! streams. Every other WASI call returns without waiting (`pollable.ready` polls once).

use std::future::Future;
use std::time::Instant;

use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi_io::bindings::wasi::io::{poll as io_poll, streams as io_streams};
use wasmtime_wasi_io::poll::DynPollable;
use wasmtime_wasi_io::streams::{DynInputStream, DynOutputStream, StreamResult};

use crate::wasm::HostState;

/// The `wasi:io` version whose functions are replaced; the linker resolves every
/// semver-compatible import (any `0.2.x`) to it.
const IO_VERSION: &str = "0.2.12";

/// Runs `wait` until it is done or `until`, whichever comes first; past `until` the call
/// traps with a message naming `what`.
fn within<F: Future>(until: Instant, what: &str, wait: F) -> wasmtime::Result<F::Output> {
    let until = tokio::time::Instant::from_std(until);
    wasmtime_wasi::runtime::in_tokio(async move { tokio::time::timeout_at(until, wait).await })
        .map_err(|_| {
            wasmtime::format_err!(
                "{what} was still waiting at the call's deadline: call stopped (a wait that only the plugin could end, such as a request body never sent)"
            )
        })
}

/// The trap for a call whose wait, asked past its deadline, ended there (`what` waited).
fn slept_out(state: &HostState, what: &str) -> wasmtime::Result<()> {
    if state.clock.slept_out() {
        return Err(wasmtime::format_err!(
            "interrupt: {what} waited to the call's deadline, as a wait the plugin asked for past it ends there: call stopped (as a loop is)"
        ));
    }
    Ok(())
}

/// A stream result as the guest receives it.
fn lowered<T>(
    table: &mut ResourceTable,
    result: StreamResult<T>,
) -> wasmtime::Result<Result<T, io_streams::StreamError>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(e) => io_streams::Host::convert_stream_error(table, e).map(Err),
    }
}

/// The deadline of the call on `state`, and its table.
fn deadline_and_table(state: &mut HostState) -> (Instant, &mut ResourceTable) {
    (state.clock.latest_wait_end(), &mut state.table)
}

/// Replaces WASI's blocking I/O functions in `linker` with ones bounded by the call's deadline.
pub fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(&format!("wasi:io/poll@{IO_VERSION}"))?;
    poll.func_wrap(
        "poll",
        |mut store, (pollables,): (Vec<Resource<DynPollable>>,)| {
            let (until, table) = deadline_and_table(store.data_mut());
            let ready = within(
                until,
                "wasi:io/poll.poll",
                io_poll::Host::poll(table, pollables),
            )??;
            slept_out(store.data(), "wasi:io/poll.poll")?;
            Ok((ready,))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store, (pollable,): (Resource<DynPollable>,)| {
            let (until, table) = deadline_and_table(store.data_mut());
            within(
                until,
                "wasi:io/poll.pollable.block",
                io_poll::HostPollable::block(table, pollable),
            )??;
            slept_out(store.data(), "wasi:io/poll.pollable.block")?;
            Ok(())
        },
    )?;

    let mut streams = linker.instance(&format!("wasi:io/streams@{IO_VERSION}"))?;
    // `[method]RESOURCE.NAME` of wasi:io/streams, calling `TRAIT::METHOD` under the bound.
    macro_rules! bounded {
        ($name:literal, $host:ident::$method:ident($($arg:ident: $ty:ty),*)) => {
            streams.func_wrap(
                concat!("[method]", $name),
                |mut store, ($($arg,)*): ($($ty,)*)| {
                    let (until, table) = deadline_and_table(store.data_mut());
                    let what = concat!("wasi:io/streams.", $name);
                    let done = within(until, what, io_streams::$host::$method(table, $($arg),*))?;
                    Ok((lowered(table, done)?,))
                },
            )?;
        };
    }
    type Out = Resource<DynOutputStream>;
    type In = Resource<DynInputStream>;
    bounded!("output-stream.blocking-write-and-flush", HostOutputStream::blocking_write_and_flush(stream: Out, bytes: Vec<u8>));
    bounded!("output-stream.blocking-write-zeroes-and-flush", HostOutputStream::blocking_write_zeroes_and_flush(stream: Out, len: u64));
    bounded!("output-stream.blocking-flush", HostOutputStream::blocking_flush(stream: Out));
    bounded!("output-stream.blocking-splice", HostOutputStream::blocking_splice(dest: Out, src: In, len: u64));
    bounded!("input-stream.blocking-read", HostInputStream::blocking_read(stream: In, len: u64));
    bounded!("input-stream.blocking-skip", HostInputStream::blocking_skip(stream: In, len: u64));
    linker.allow_shadowing(false);
    Ok(())
}
