//! `kubewasm test`: runs a plugin through the cluster states of test files and reports, per
//! step, what differs from what the file expects.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kubewasm::testing::spec::Spec;
use kubewasm::testing::{Options, run};
use kubewasm::wasm::Engine;

/// Arguments of `kubewasm test`.
#[derive(clap::Args)]
pub struct TestArgs {
    /// Test files (the format: docs/TESTING.md).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The plugin component, instead of each file's `plugin`.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Longest one step may take to settle, in seconds.
    #[arg(long, default_value_t = 60)]
    step_timeout: u64,
    /// Folder for compiled plugin code (see `run`).
    #[arg(long, env = "KUBEWASM_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

/// `kubewasm test`: exit status 0 when every step of every file passed, 1 otherwise.
pub async fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let options = Options {
        compiled_cache: args.cache_dir.or_else(Engine::default_cache_dir),
        step_timeout: Duration::from_secs(args.step_timeout),
    };
    let (mut passed, mut failed) = (0, 0);
    for file in &args.files {
        let spec = Spec::load(file, args.plugin.as_deref())?;
        println!(
            "{}: plugin {} ({})",
            file.display(),
            spec.name,
            spec.plugin.display()
        );
        let results = run(&spec, &options, |step| {
            let verdict = if step.passed() { "ok  " } else { "FAIL" };
            println!(
                "  {verdict} {} ({} log lines, {} writes)",
                step.name, step.lines, step.writes
            );
            if !step.state.is_empty() {
                println!(
                    "         state: {}",
                    serde_json::to_string(&step.state).unwrap_or_default()
                );
            }
            if let Some(answer) = &step.answer {
                let patch = answer
                    .patch
                    .as_ref()
                    .map_or_else(String::new, |p| format!(", patch {p}"));
                let verdict = if answer.allowed {
                    "allowed".to_owned()
                } else {
                    format!("denied ({}): {}", answer.code, answer.message)
                };
                println!("         admission: {verdict}{patch}");
            }
            for problem in &step.problems {
                println!("         {problem}");
            }
        })
        .await?;
        for step in results {
            if step.passed() {
                passed += 1;
            } else {
                failed += 1;
            }
        }
    }
    println!("{passed} steps passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
