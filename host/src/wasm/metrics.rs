//! The host side of the `metrics` import (0.5): updates of what the plugin declared, into its
//! registry (`plugin_metrics.rs`), from any call, at once (not staged: a metric counts what
//! happened, a failed attempt included).

use crate::plugin_metrics::MetricError;
use crate::wasm::HostState;
use crate::wasm::bindings::kubewasm::plugin::metrics::{Host, MetricError as WitError};

type Answer = wasmtime::Result<Result<(), WitError>>;

fn answer(updated: Result<(), MetricError>) -> Answer {
    Ok(updated.map_err(|e| match e {
        MetricError::Undeclared(m) => WitError::Undeclared(m),
        MetricError::OverBound(m) => WitError::OverBound(m),
        MetricError::InvalidArgument(m) => WitError::InvalidArgument(m),
    }))
}

impl Host for HostState {
    fn add(&mut self, name: String, labels: Vec<String>, value: f64) -> Answer {
        let _timed = self.host_calls.start();
        answer(self.ctx.metrics.add(&name, labels, value))
    }

    fn set(&mut self, name: String, labels: Vec<String>, value: f64) -> Answer {
        let _timed = self.host_calls.start();
        answer(self.ctx.metrics.set(&name, labels, value))
    }

    fn observe(&mut self, name: String, labels: Vec<String>, value: f64) -> Answer {
        let _timed = self.host_calls.start();
        answer(self.ctx.metrics.observe(&name, labels, value))
    }
}
