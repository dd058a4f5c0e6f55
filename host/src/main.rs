//! The `kubewasm` command line: parse, set up logging, hand over to the subcommand.

mod cli;

use std::io::IsTerminal;

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

/// How long, once a subcommand is done, its remaining background work may hold the exit.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

fn main() -> std::process::ExitCode {
    // A compiling child of the agent (`wasm/compiler.rs`): no logging, no runtime.
    let mut raw = std::env::args_os().skip(1);
    if raw
        .next()
        .is_some_and(|a| a == kubewasm::wasm::compiler::WORKER_COMMAND)
    {
        let memory = raw
            .next()
            .and_then(|m| m.into_string().ok())
            .unwrap_or_default();
        return kubewasm::wasm::compiler::worker_main(&memory);
    }
    let args = cli::Cli::parse();
    // Without RUST_LOG, the subcommand's own filter (`agent::LOG_FILTER` for a run).
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(args.command.default_log_filter()));
    // Logs go to stderr, so that what a command prints on stdout (YAML, a report) pipes
    // cleanly; colours only on a terminal, and never with NO_COLOR set (no-color.org).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    match args.log_format {
        cli::LogFormat::Human => logs.init(),
        cli::LogFormat::Json => logs.json().init(),
    }
    let outcome = kubewasm::agent::runtime()
        .map_err(anyhow::Error::from)
        .and_then(|tasks| {
            let outcome = tasks.block_on(args.command.run());
            // A plugin call stuck past the shutdown timeout must not hold the exit: once the
            // agent has given up on such calls, waiting for them again would only delay it.
            if kubewasm::agent::calls_abandoned() {
                tasks.shutdown_background();
            } else {
                tasks.shutdown_timeout(EXIT_GRACE);
            }
            outcome
        });
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubewasm: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
