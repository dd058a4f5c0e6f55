//! Issue 53's numbers: every hostile plugin at once beside a good one (pod-phase), on a real
//! kube-apiserver and etcd (the test environment's, on loopback), against the good plugin
//! alone in the same run: the good plugin's latency from a pod's create to its line (p50, p95,
//! p99), the host's peak resident memory against the sum of the caps plus 100 MiB, the time
//! SIGTERM took, and the writes and Events the API server received against their rates.
//!
//! Run with `cargo bench -p kubewasm --bench hostile` (needs `KUBEWASM_SERVERS`, which
//! scripts/bench.sh sets). `KUBEWASM_BENCH_QUICK=1`: fewer pods. The release `kubewasm` binary
//! is the agent.

#[path = "../tests/hostile_run/mod.rs"]
mod hostile_run;

use std::time::Duration;

use hostile_run::{EVENT_RATE, MEMORY_CAP, Run, SHUTDOWN_TIMEOUT, Sizes, WRITE_RATE, allowed};
use serde_json::json;

fn summary(what: &str, run: &Run) -> serde_json::Value {
    let us = |q| hostile_run::quantile(&run.latencies, q).as_micros() as u64;
    json!({
        "name": what,
        "pods": run.latencies.len(),
        "p50_us": us(0.50),
        "p95_us": us(0.95),
        "p99_us": us(0.99),
        "ready_ms": run.ready_after.as_millis() as u64,
        "peak_rss_mib": run.peak_rss >> 20,
        "caps_mib": (run.plugin_files as u64 * MEMORY_CAP + (100 << 20)) >> 20,
        "max_open_files": run.max_open_files,
        "sigterm_ms": run.sigterm.as_millis() as u64,
        "sigterm_bound_ms": (SHUTDOWN_TIMEOUT + Duration::from_secs(1)).as_millis() as u64,
        "exited_ok": run.exited_ok,
        "window_s": run.window.as_secs_f64(),
    })
}

fn main() -> anyhow::Result<()> {
    let quick = std::env::var_os("KUBEWASM_BENCH_QUICK").is_some();
    let sizes = Sizes {
        pods: if quick { 60 } else { 400 },
        per_second: 20,
        swaps: 6,
        globals: 1_000_000,
        settle: Duration::from_secs(5),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let env = hostile_run::environment().await?;
        let program = std::path::Path::new(env!("CARGO_BIN_EXE_kubewasm"));
        let alone = hostile_run::run(&env, program, &[], &sizes, "alone").await?;
        let files = hostile_run::hostile_files(&sizes)?;
        let beside = hostile_run::run(&env, program, &files, &sizes, "beside").await?;
        let writes = hostile_run::writes(&env)?;
        for (what, run) in [
            ("alone", &alone),
            ("beside 35 hostile plugins (16 CPU-bound)", &beside),
        ] {
            println!("HOSTILE {}", summary(what, run));
        }
        let ratio = hostile_run::quantile(&beside.latencies, 0.95).as_secs_f64()
            / hostile_run::quantile(&alone.latencies, 0.95).as_secs_f64();
        let feedback_max = writes.feedback.values().max().copied().unwrap_or(0);
        let line = json!({
            "p95_ratio": ratio,
            "storm_writes": writes.storm,
            "storm_allowed": allowed(WRITE_RATE, beside.window),
            "events": writes.events,
            "events_allowed": allowed(EVENT_RATE, beside.window),
            "feedback_max_per_object": feedback_max,
            "loop_limit": kubewasm::plugins::throttle::LOOP_LIMIT,
            "failed_plugins": beside.status["failed_plugins"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|f| json!({"name": f["name"], "error": f["error"]}))
                .collect::<Vec<_>>(),
            "abandoned_workers": beside.status["abandoned_workers"],
        });
        println!("HOSTILE_TOTALS {line}");
        anyhow::ensure!(
            beside.exited_ok && beside.sigterm <= SHUTDOWN_TIMEOUT + Duration::from_secs(1),
            "SIGTERM bound missed: {:?}",
            beside.sigterm
        );
        Ok(())
    })
}
