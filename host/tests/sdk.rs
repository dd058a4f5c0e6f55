//! The three SDKs are at parity: scripts/sdk_reference.py --check against
//! plugin-sdk/parity.json, which also keeps docs/SDK-REFERENCE.md current. (The Python and
//! JavaScript SDKs' own tests run in tests/languages.rs.)

use std::path::Path;
use std::process::Command;

mod support;

/// Runs `command` in `dir`; panics with its output unless it succeeds.
fn passes(what: &str, dir: &Path, command: &mut Command) {
    let output = command
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e} (run scripts/setup.sh)"));
    assert!(
        output.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_sdks_offer_the_same_helpers_and_the_reference_page_is_current() {
    let root = support::root();
    passes(
        "the SDK parity check (fix plugin-sdk/parity.json or the SDK it names; then run scripts/sdk_reference.py)",
        &root,
        Command::new(root.join("target/pyenv/bin/python"))
            .args(["scripts/sdk_reference.py", "--check"]),
    );
}
