//! The `kubewasm` command line: parse, set up logging, hand over to the subcommand.

mod cli;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match args.log_format {
        cli::LogFormat::Human => logs.init(),
        cli::LogFormat::Json => logs.json().init(),
    }
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|tasks| tasks.block_on(args.command.run()));
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubewasm: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
