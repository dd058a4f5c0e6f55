//! Builds the plugin for wasm32-wasip2 and runs `kubewasm test` on its test file.

use std::process::Command;

/// The kubewasm binary that created this project; `KUBEWASM` overrides it.
const KUBEWASM: &str = "{{kubewasm}}";

#[test]
fn the_plugin_passes_its_test_file() {
    let root = env!("CARGO_MANIFEST_DIR");
    // Its own target folder: the one `cargo test` uses is locked while tests run.
    let built = Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["build", "--release", "--target", "wasm32-wasip2"])
        .args(["--target-dir", "target/wasm"])
        .status()
        .expect("cargo runs");
    assert!(
        built.success(),
        "the plugin does not build (is the target installed? rustup target add wasm32-wasip2)"
    );
    let kubewasm = std::env::var("KUBEWASM").unwrap_or_else(|_| KUBEWASM.to_owned());
    let out = Command::new(&kubewasm)
        .current_dir(root)
        .args(["test", "tests/{{name}}.test.yaml"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {kubewasm}: {e}"));
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
