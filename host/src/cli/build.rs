//! `kubewasm build`: a Go plugin package as a component, with the Go tool chain and the
//! contract this binary carries.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `kubewasm build`.
#[derive(clap::Args)]
pub struct BuildArgs {
    /// The Go package (`package main` importing the kubewasm Go SDK).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// The component to write (default: the folder's name with `.wasm`, in it).
    #[arg(short, long)]
    out: Option<PathBuf>,
}

/// `kubewasm build`.
pub async fn build(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("the Go package {}", args.dir.display()))?;
    anyhow::ensure!(
        std::fs::read_dir(&dir)?
            .any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "go"))),
        "{} holds no .go file: pass the folder of a Go plugin's main package",
        dir.display()
    );
    let out = match args.out {
        Some(out) => out,
        None => {
            let name = dir.file_name().context("the package folder's name")?;
            dir.join(name).with_extension("wasm")
        }
    };
    let built = tokio::task::spawn_blocking({
        let out = out.clone();
        move || kubewasm_go_tools::build_plugin(&dir, &out)
    })
    .await??;
    match built {
        kubewasm_go_tools::Built::Written => println!("built {}", out.display()),
        kubewasm_go_tools::Built::UpToDate => println!("{} is up to date", out.display()),
    }
    Ok(ExitCode::SUCCESS)
}
