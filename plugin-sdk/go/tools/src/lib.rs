//! Go plugins for kubewasm: the Go SDK's canonical ABI glue, generated from the WIT contract
//! (`generate`), and turning a Go core module into a component (`componentize`).

pub mod componentize;
pub mod generate;

use std::path::Path;

/// The contract's world, as the generator and the componentizer read it.
pub const WORLD: &str = "kubewasm:plugin/plugin@0.5.0";

/// The Go package the glue belongs to.
pub const GO_PACKAGE: &str = "kubewasm";

/// The contract this crate was built with.
pub const CONTRACT_WIT: &str = include_str!("../../../../wit/plugin.wit");

/// The contract this crate was built with, parsed, and its plugin world.
pub fn contract_world() -> anyhow::Result<(wit_parser::Resolve, wit_parser::WorldId)> {
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve.push_str("plugin.wit", CONTRACT_WIT)?;
    let world = resolve.select_world(&[pkg], Some("plugin"))?;
    Ok((resolve, world))
}

/// A Go package's core module, built by `go` (its tool chain on PATH) for `wasip1`.
pub fn go_build(package_dir: &Path, out: &Path) -> anyhow::Result<()> {
    use anyhow::Context;
    let status = std::process::Command::new("go")
        .current_dir(package_dir)
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .args([
            "build",
            "-buildmode=c-shared",
            "-trimpath",
            "-ldflags=-s -w",
            "-o",
        ])
        .arg(out)
        .arg(".")
        .status()
        .context("running go (the Go tool chain, 1.24 or later, must be on PATH)")?;
    anyhow::ensure!(
        status.success(),
        "go build in {} failed",
        package_dir.display()
    );
    Ok(())
}

/// What `build_plugin` did with the output file.
#[derive(Debug, PartialEq, Eq)]
pub enum Built {
    /// The component was written.
    Written,
    /// The file already held these exact bytes and was left alone (so its time and the
    /// host's compiled-code cache stay valid).
    UpToDate,
}

/// Builds the Go package in `package_dir` as a plugin component at `out`. Go's builds are
/// reproducible (`-trimpath`), so an unchanged package gives the same bytes.
pub fn build_plugin(package_dir: &Path, out: &Path) -> anyhow::Result<Built> {
    use anyhow::Context;
    let core = out.with_extension("core.wasm");
    go_build(package_dir, &core)?;
    let bytes = std::fs::read(&core).with_context(|| core.display().to_string())?;
    std::fs::remove_file(&core).ok();
    let (resolve, world) = contract_world()?;
    let component = componentize::componentize(&bytes, &resolve, world)
        .with_context(|| format!("componentizing {}", core.display()))?;
    if std::fs::read(out).is_ok_and(|old| old == component) {
        return Ok(Built::UpToDate);
    }
    std::fs::write(out, component).with_context(|| out.display().to_string())?;
    Ok(Built::Written)
}

/// Reads the WIT package in `wit_dir` and selects the plugin world.
pub fn load_world(wit_dir: &Path) -> anyhow::Result<(wit_parser::Resolve, wit_parser::WorldId)> {
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve.push_path(wit_dir)?;
    let world = resolve.select_world(&[pkg], Some("plugin"))?;
    Ok((resolve, world))
}

/// The Go SDK's `bindings.go` for the WIT in `wit_dir`, formatted by `gofmt`.
pub fn bindings(wit_dir: &Path) -> anyhow::Result<String> {
    let (resolve, world) = load_world(wit_dir)?;
    let text = generate::generate(
        &resolve,
        world,
        GO_PACKAGE,
        "The kubewasm contract (wit/plugin.wit) in Go: its types, imports and exports.",
    )?;
    gofmt(&text)
}

/// `text` as `gofmt` writes it (Go's tool chain must be on PATH).
pub fn gofmt(text: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("gofmt")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running gofmt (Go's tool chain must be on PATH)")?;
    let mut stdin = child.stdin.take().context("gofmt's stdin")?;
    let input = text.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().context("gofmt")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writing to gofmt panicked"))??;
    anyhow::ensure!(
        out.status.success(),
        "gofmt refused the generated Go: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}
