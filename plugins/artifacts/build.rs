//! Builds the guest plugins for wasm32-wasip2 and writes their paths into `plugins.rs`.
//!
//! A nested cargo needs its own target directory (the outer build holds the lock on the
//! workspace's), so guests go to `<target>/plugins`, shared with `scripts/demo.sh`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The guest packages and the constant that names each one's `.wasm`.
const PLUGINS: &[(&str, &str)] = &[
    ("pod-phase", "POD_PHASE"),
    ("deployment-view", "DEPLOYMENT_VIEW"),
    ("audit-log", "AUDIT_LOG"),
    ("hostile", "HOSTILE"),
];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir.join("../..");
    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("plugins");

    let mut cmd = Command::new(env::var_os("CARGO").expect("set by cargo"));
    cmd.current_dir(&root)
        .args(["build", "--profile", "plugin", "--target", "wasm32-wasip2"])
        .arg("--target-dir")
        .arg(&target);
    for (package, _) in PLUGINS {
        cmd.args(["-p", package]);
    }
    // Flags and wrappers meant for the outer (native) build must not leak into the guests.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("cannot run cargo for the guest plugins");
    assert!(
        status.success(),
        "building the guest plugins failed; is the target installed? (rustup target add wasm32-wasip2)"
    );

    let mut out = String::new();
    for (package, constant) in PLUGINS {
        let wasm = target
            .join("wasm32-wasip2/plugin")
            .join(format!("{}.wasm", package.replace('-', "_")));
        let wasm = wasm
            .canonicalize()
            .expect("the guest build wrote its .wasm");
        out.push_str(&format!(
            "/// Path of the built `{package}` plugin.\npub const {constant}: &str = {:?};\n",
            wasm.display()
        ));
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    std::fs::write(out_dir.join("plugins.rs"), out).expect("write plugins.rs");

    for dir in [
        "wit",
        "plugin-sdk",
        "plugins/pod-phase",
        "plugins/deployment-view",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
}
