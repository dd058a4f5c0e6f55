//! `kubewasm test`: runs a plugin through the cluster states of test files and reports, per
//! step, what differs from what the file expects; with `--compare OLD NEW`, runs both
//! versions through each file and reports what differs between them.

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
    #[arg(long, conflicts_with = "compare")]
    plugin: Option<PathBuf>,
    /// Replay each file (a recording) through two versions of the plugin and report the
    /// writes, admission answers and state that differ; the files' expectations are not
    /// checked.
    #[arg(long, num_args = 2, value_names = ["OLD", "NEW"])]
    compare: Option<Vec<PathBuf>>,
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
    if let Some(versions) = &args.compare {
        return compare(&args.files, versions, &options).await;
    }
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

/// `kubewasm test --compare OLD NEW`: exit status 0 when both versions behaved alike in
/// every step of every file, 1 otherwise.
async fn compare(
    files: &[PathBuf],
    versions: &[PathBuf],
    options: &Options,
) -> anyhow::Result<ExitCode> {
    let [old, new] = versions else {
        anyhow::bail!("--compare takes two plugin files, OLD and NEW");
    };
    let (mut same, mut differ) = (0, 0);
    for file in files {
        let old_spec = Spec::load(file, Some(old))?;
        let new_spec = Spec::load(file, Some(new))?;
        println!(
            "{}: plugin {}, OLD {} against NEW {}",
            file.display(),
            old_spec.name,
            old.display(),
            new.display()
        );
        let before = run(&old_spec, options, |_| {}).await?;
        let after = run(&new_spec, options, |_| {}).await?;
        for (a, b) in before.iter().zip(&after) {
            let differences = kubewasm::testing::compare::step_differences(a, b);
            if differences.is_empty() {
                same += 1;
                println!("  same {}", a.name);
            } else {
                differ += 1;
                println!("  DIFF {}", a.name);
                for line in differences {
                    println!("         {line}");
                }
            }
        }
    }
    println!("{same} steps the same, {differ} differ");
    Ok(if differ == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
