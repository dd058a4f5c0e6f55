//! `kubewasm promote NAME`: the candidate `NAME.candidate.wasm` of the plugins folder
//! replaces `NAME.wasm`, by one rename; a host following the folder swaps it in as it swaps
//! any replaced file, and unloads the candidate.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use super::{load_config, plugins_dir};

/// Arguments of `kubewasm promote`.
#[derive(clap::Args)]
pub struct PromoteArgs {
    /// The plugin whose candidate replaces it.
    name: String,
    /// Folder of plugin components; default: `pluginsDir` of the configuration.
    #[arg(long, env = "KUBEWASM_PLUGINS")]
    plugins: Option<PathBuf>,
    /// Host configuration file (for its `pluginsDir`).
    #[arg(long, env = "KUBEWASM_CONFIG")]
    config: Option<PathBuf>,
}

/// `kubewasm promote`: renames the candidate's file over the serving version's.
pub async fn promote(args: PromoteArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(args.config.as_deref())?;
    let dir = plugins_dir(args.plugins.as_deref(), &config)?;
    let name = &args.name;
    let (from, to) = (
        dir.join(format!(
            "{name}{}.wasm",
            kubewasm::plugins::shadow::CANDIDATE
        )),
        dir.join(format!("{name}.wasm")),
    );
    anyhow::ensure!(
        from.is_file(),
        "{}: no candidate of plugin {name} (drop one in as {name}.candidate.wasm)",
        from.display()
    );
    anyhow::ensure!(
        to.is_file(),
        "{}: plugin {name} is not in this folder; its candidate can only replace a file here",
        to.display()
    );
    std::fs::rename(&from, &to)
        .with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
    println!("{} now serves as {}", from.display(), to.display());
    Ok(ExitCode::SUCCESS)
}
