//! `kubewasm new`: the project it creates, outside the checkout, builds and passes its own
//! test (`kubewasm test` on its test file) from cargo test, pytest, node's runner and go test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

const KUBEWASM: &str = env!("CARGO_BIN_EXE_kubewasm");

/// Creates plugin `name` in `lang` under `parent`; its folder.
fn create(parent: &Path, lang: &str, name: &str) -> PathBuf {
    create_with(parent, lang, name, &[])
}

/// [`create`], with more arguments of `kubewasm new`.
fn create_with(parent: &Path, lang: &str, name: &str, more: &[&str]) -> PathBuf {
    let dir = parent.join(name);
    let out = Command::new(KUBEWASM)
        .args(["new", "--lang", lang, name, "--dir"])
        .arg(&dir)
        .args(more)
        .output()
        .expect("kubewasm runs");
    assert!(out.status.success(), "{out:?}");
    dir
}

/// Runs `command` in `dir` with `KUBEWASM` set; fails the test with its output, else returns
/// its standard output.
fn passes(mut command: Command, dir: &Path) -> String {
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
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A second build of an unchanged project keeps the component it built (the same bytes, so
/// the host's compiled-code cache hits), and an edited source builds it again.
fn rebuilds_only_when_changed(dir: &Path, build: impl Fn() -> Command, source: &str) {
    let wasm = dir.join("ns-quota.wasm");
    let before = std::fs::read(&wasm).expect("built");
    let out = passes(build(), dir);
    assert!(out.contains("ns-quota.wasm is up to date"), "{out}");
    assert_eq!(
        std::fs::read(&wasm).expect("kept"),
        before,
        "the same bytes"
    );
    let path = dir.join(source);
    let text = std::fs::read_to_string(&path).expect("source");
    std::fs::write(&path, format!("{text}\n")).expect("edit");
    let out = passes(build(), dir);
    assert!(
        !out.contains("up to date"),
        "an edited source builds again: {out}"
    );
}

/// How long from `kubewasm new` to its test passing took, printed for the record (a
/// measurement, not a bound: the machine is shared).
fn took(lang: &str, started: std::time::Instant) {
    eprintln!(
        "kubewasm new --lang {lang} to its test passing: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn a_new_rust_plugin_passes_its_test_from_cargo_test_and_is_small() {
    let parent = tempfile::tempdir().expect("temp dir");
    let started = std::time::Instant::now();
    let dir = create(parent.path(), "rust", "ns-quota");
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["test", "--quiet"]);
    passes(cargo, &dir);
    took("rust", started);
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
    let started = std::time::Instant::now();
    let dir = create(parent.path(), "python", "ns-quota");
    let mut pytest = Command::new(pyenv.join("pytest"));
    pytest
        .arg("-q")
        .env("COMPONENTIZE_PY", pyenv.join("componentize-py"));
    passes(pytest, &dir);
    took("python", started);
    let build = || {
        let mut bash = Command::new("bash");
        bash.arg("build.sh")
            .env("COMPONENTIZE_PY", pyenv.join("componentize-py"));
        bash
    };
    rebuilds_only_when_changed(&dir, build, "app.py");
}

#[test]
fn a_new_javascript_plugin_passes_its_test_from_node_test() {
    let parent = tempfile::tempdir().expect("temp dir");
    let started = std::time::Instant::now();
    let dir = create(parent.path(), "javascript", "ns-quota");
    let mut install = Command::new("npm");
    install.args(["install", "--no-audit", "--no-fund", "--loglevel=error"]);
    passes(install, &dir);
    let mut test = Command::new("npm");
    test.arg("test");
    passes(test, &dir);
    took("javascript", started);
    let build = || {
        let mut node = Command::new("node");
        node.arg("build.mjs");
        node
    };
    rebuilds_only_when_changed(&dir, build, "plugin.js");
}

#[test]
fn a_new_go_plugin_passes_its_test_from_go_test() {
    let parent = tempfile::tempdir().expect("temp dir");
    let started = std::time::Instant::now();
    let dir = create(parent.path(), "go", "ns-quota");
    let mut test = Command::new("go");
    test.args(["test", "./..."]);
    let out = passes(test, &dir);
    assert!(out.contains("ok"), "{out}");
    took("go", started);
    // `kubewasm check` accepts the component and reads its manifest.
    let mut check = Command::new(KUBEWASM);
    check.args(["check", "ns-quota.wasm"]);
    let out = passes(check, &dir);
    assert!(
        out.contains("valid") && out.contains("v1/Pod") && out.contains("app=web"),
        "{out}"
    );
    // Go builds are reproducible: an unchanged package is the same component, left alone.
    let build = || {
        let mut kubewasm = Command::new(KUBEWASM);
        kubewasm.args(["build", ".", "-o", "ns-quota.wasm"]);
        kubewasm
    };
    let wasm = dir.join("ns-quota.wasm");
    let before = std::fs::read(&wasm).expect("built");
    let out = passes(build(), &dir);
    assert!(out.contains("ns-quota.wasm is up to date"), "{out}");
    assert_eq!(std::fs::read(&wasm).expect("kept"), before);
    // A change of code (not of layout, which Go compiles to the same bytes) builds again.
    let main = dir.join("main.go");
    let text = std::fs::read_to_string(&main).expect("source");
    std::fs::write(&main, text.replace(r#"phase = "-""#, r#"phase = "?""#)).expect("edit");
    let out = passes(build(), &dir);
    assert!(
        out.contains("built "),
        "an edited source builds again: {out}"
    );
    assert_ne!(std::fs::read(&wasm).expect("rebuilt"), before);
}

/// `kubewasm new --controller`: in every language, a controller whose test file reconciles a
/// key, checks the child it owns and sees it pruned, passes from the language's own test.
#[test]
fn a_new_controller_passes_its_test_in_every_language() {
    let pyenv = support::root().join("target/pyenv/bin");
    assert!(
        pyenv.join("pytest").exists(),
        "no target/pyenv/bin/pytest: run scripts/setup.sh"
    );
    let parent = tempfile::tempdir().expect("temp dir");
    for lang in ["go", "python", "javascript", "rust"] {
        let started = std::time::Instant::now();
        let dir = create_with(
            parent.path(),
            lang,
            &format!("quota-{lang}"),
            &["--controller"],
        );
        let test = std::fs::read_to_string(dir.join(format!("tests/quota-{lang}.test.yaml")))
            .expect("a test file");
        assert!(
            test.contains("reconcile:") && test.contains("absent:"),
            "{test}"
        );
        let commands: Vec<Command> = match lang {
            "go" => {
                let mut test = Command::new("go");
                test.args(["test", "./..."]);
                vec![test]
            }
            "python" => {
                let mut pytest = Command::new(pyenv.join("pytest"));
                pytest
                    .arg("-q")
                    .env("COMPONENTIZE_PY", pyenv.join("componentize-py"));
                vec![pytest]
            }
            "javascript" => {
                let mut install = Command::new("npm");
                install.args(["install", "--no-audit", "--no-fund", "--loglevel=error"]);
                let mut test = Command::new("npm");
                test.arg("test");
                vec![install, test]
            }
            _ => {
                let mut cargo = Command::new(env!("CARGO"));
                cargo.args(["test", "--quiet"]);
                vec![cargo]
            }
        };
        for command in commands {
            passes(command, &dir);
        }
        took(&format!("{lang} --controller"), started);
    }
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
