//! `kubewasm new`: the project it creates, outside the checkout, builds and passes its own
//! test (`kubewasm test` on its test file) from cargo test, pytest and node's runner.

use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm");

/// Creates plugin `name` in `lang` under `parent`; its folder.
fn create(parent: &Path, lang: &str, name: &str) -> PathBuf {
    let dir = parent.join(name);
    let out = Command::new(KUBEWASM)
        .args(["new", "--lang", lang, name, "--dir"])
        .arg(&dir)
        .output()
        .expect("kubewasm runs");
    assert!(out.status.success(), "{out:?}");
    dir
}

/// Runs `command` in `dir` with `KUBEWASM` set; fails the test with its output.
fn passes(mut command: Command, dir: &Path) {
    let out = command
        .current_dir(dir)
        .env("KUBEWASM", KUBEWASM)
        .output()
        .expect("the test command runs");
    assert!(
        out.status.success(),
        "{command:?} in {}:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_new_rust_plugin_passes_its_test_from_cargo_test_and_is_small() {
    let parent = tempfile::tempdir().expect("temp dir");
    let dir = create(parent.path(), "rust", "ns-quota");
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["test", "--quiet"]);
    passes(cargo, &dir);
    let wasm = dir.join("target/wasm/wasm32-wasip2/release/ns_quota.wasm");
    let size = std::fs::metadata(&wasm).expect("built").len();
    assert!(
        size < 256 << 10,
        "{size} bytes: the size profile is missing"
    );
}

#[test]
fn a_new_python_plugin_passes_its_test_from_pytest() {
    let pyenv = support::root().join("target/pyenv/bin");
    if !pyenv.join("pytest").exists() {
        panic!("no target/pyenv/bin/pytest: run scripts/setup.sh");
    }
    let parent = tempfile::tempdir().expect("temp dir");
    let dir = create(parent.path(), "python", "ns-quota");
    let mut pytest = Command::new(pyenv.join("pytest"));
    pytest
        .arg("-q")
        .env("COMPONENTIZE_PY", pyenv.join("componentize-py"));
    passes(pytest, &dir);
}

#[test]
fn a_new_javascript_plugin_passes_its_test_from_node_test() {
    let parent = tempfile::tempdir().expect("temp dir");
    let dir = create(parent.path(), "javascript", "ns-quota");
    let mut install = Command::new("npm");
    install.args(["install", "--no-audit", "--no-fund", "--loglevel=error"]);
    passes(install, &dir);
    let mut test = Command::new("npm");
    test.arg("test");
    passes(test, &dir);
}

#[test]
fn a_bad_name_or_a_taken_folder_is_refused() {
    let parent = tempfile::tempdir().expect("temp dir");
    let out = Command::new(KUBEWASM)
        .args(["new", "--lang", "rust", "ns_quota"])
        .current_dir(parent.path())
        .output()
        .expect("kubewasm runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a plugin name"));
    std::fs::write(parent.path().join("taken"), "").expect("write");
    let out = Command::new(KUBEWASM)
        .args(["new", "--lang", "rust", "ok", "--dir"])
        .arg(parent.path())
        .output()
        .expect("kubewasm runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}
