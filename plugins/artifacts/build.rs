//! Builds the guest plugins for wasm32-wasip2 and writes their paths into `plugins.rs`.
//!
//! A nested cargo needs its own target directory (the outer build holds the lock on the
//! workspace's), so guests go to `<target>/plugins`, shared with `scripts/demo.sh`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest packages and the constant that names each one's `.wasm`.
const PLUGINS: &[(&str, &str)] = &[
    ("pod-phase", "POD_PHASE"),
    ("deployment-view", "DEPLOYMENT_VIEW"),
    ("audit-log", "AUDIT_LOG"),
    ("owner-chain", "OWNER_CHAIN"),
    ("hostile", "HOSTILE"),
    ("bench", "BENCH"),
    ("labeler", "LABELER"),
    ("crashloop-events", "CRASHLOOP_EVENTS"),
    ("rollout-notifier", "ROLLOUT_NOTIFIER"),
    ("image-policy", "IMAGE_POLICY"),
    ("pod-defaults", "POD_DEFAULTS"),
    ("service-alert", "SERVICE_ALERT"),
    ("pod-age", "POD_AGE"),
    ("namespace-provisioner", "NAMESPACE_PROVISIONER"),
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
    out.push_str(&other_languages(&root, &target));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    std::fs::write(out_dir.join("plugins.rs"), out).expect("write plugins.rs");

    for dir in ["wit", "plugin-sdk"]
        .into_iter()
        .map(String::from)
        .chain(PLUGINS.iter().map(|(p, _)| format!("plugins/{p}")))
    {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
}

/// Builds the Python, JavaScript and Go plugins when their tool chains are installed (by
/// scripts/setup.sh; Go's is the machine's); each constant is `None` otherwise, and the tests
/// that need it say so.
fn other_languages(root: &Path, target: &Path) -> String {
    let dir = target.join("guests");
    std::fs::create_dir_all(&dir).expect("create target/plugins/guests");
    let python = root.join("target/pyenv/bin/componentize-py");
    let componentize_py = |app: &str, out: &str| {
        let out = dir.join(out);
        python.exists().then(|| {
            let status = Command::new(&python)
                .current_dir(root)
                // No __pycache__ in the source tree (it would also re-trigger this script).
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .args(["-d", "wit", "-w", "kubewasm:plugin/plugin", "componentize"])
                // The Python SDK, as the projects `kubewasm new` creates use it.
                .args(["-p", app, "-p", "plugin-sdk/python", "app", "-o"])
                .arg(&out)
                .status()
                .expect("run componentize-py");
            assert!(status.success(), "building {app} failed");
            out
        })
    };
    let py = componentize_py("plugins/python/owner-chain", "owner_chain_py.wasm");
    let labeler_py = componentize_py("plugins/python/labeler", "labeler_py.wasm");
    let alert_py = componentize_py("plugins/python/service-alert", "service_alert_py.wasm");
    let app_py = componentize_py("plugins/python/app-operator", "app_operator_py.wasm");
    let js_tools = root.join("plugins/javascript/node_modules/@bytecodealliance/componentize-js");
    // With weval (`scripts/setup.sh --weval`, which the benchmarks run), the JavaScript is
    // compiled ahead of time, as a user wanting speed would build it; the tests do without.
    let weval = root.join("target/weval/bin/weval");
    // weval's pre-initialisation does not see modules outside the plugin's own folder (it fails
    // with "Error loading module ../../../plugin-sdk/javascript/index.js"): plugins that import
    // the SDK are built without it.
    let componentize_js = |source: &str, name: &str, aot: bool| {
        let out = dir.join(name);
        js_tools.exists().then(|| {
            let mut node = Command::new("node");
            if aot && weval.exists() {
                node.env("WEVAL_BIN", &weval);
            }
            // From the checkout's root, which componentize-js maps as the component's root:
            // plugins import the SDK by relative path.
            let status = node
                .current_dir(root)
                .arg("plugins/javascript/build.mjs")
                .arg(source)
                .arg(&out)
                .status()
                .expect("run node");
            assert!(status.success(), "building {source} failed");
            out
        })
    };
    let js = componentize_js(
        "plugins/javascript/owner-chain/owner-chain.js",
        "owner_chain_js.wasm",
        true,
    );
    let alert_js = componentize_js(
        "plugins/javascript/service-alert/service-alert.js",
        "service_alert_js.wasm",
        false,
    );
    let app_js = componentize_js(
        "plugins/javascript/app-operator/app-operator.js",
        "app_operator_js.wasm",
        false,
    );
    for dir in [
        "plugins/python/owner-chain",
        "plugins/python/labeler",
        "plugins/python/service-alert",
        "plugins/python/app-operator",
        "plugins/javascript/owner-chain",
        "plugins/javascript/service-alert",
        "plugins/javascript/app-operator",
        "plugins/javascript/build.mjs",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-changed={}", python.display());
    println!("cargo:rerun-if-changed={}", js_tools.display());
    // Only when present: cargo reruns a build script for ever over a path that is missing.
    // `scripts/bench.sh` touches the JavaScript plugins after installing weval.
    if weval.exists() {
        println!("cargo:rerun-if-changed={}", weval.display());
    }
    let constant = |name: &str, what: &str, path: Option<PathBuf>| match path {
        Some(p) => format!(
            "/// Path of the built {what} plugin.\npub const {name}: Option<&str> = Some({:?});\n",
            p.display()
        ),
        None => format!(
            "/// Path of the built {what} plugin (not built: run scripts/setup.sh).\npub const {name}: Option<&str> = None;\n"
        ),
    };
    for dir in ["plugins/go", "plugin-sdk/go"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let has_go = go_available();
    let go: String = GO_PLUGINS
        .iter()
        .map(|(package, name)| {
            let out = dir.join(format!("{}_go.wasm", package.replace('-', "_")));
            let built = has_go.then(|| {
                kubewasm_go_tools::build_plugin(&root.join("plugins/go").join(package), &out)
                    .unwrap_or_else(|e| panic!("building the Go plugin {package} failed: {e:#}"));
                out
            });
            constant(name, &format!("Go {package}"), built)
        })
        .collect();
    constant("OWNER_CHAIN_PY", "Python owner-chain", py)
        + &constant("LABELER_PY", "Python labeler", labeler_py)
        + &constant("OWNER_CHAIN_JS", "JavaScript owner-chain", js)
        + &constant("SERVICE_ALERT_PY", "Python service-alert", alert_py)
        + &constant("SERVICE_ALERT_JS", "JavaScript service-alert", alert_js)
        + &constant("APP_OPERATOR_PY", "Python app-operator", app_py)
        + &constant("APP_OPERATOR_JS", "JavaScript app-operator", app_js)
        + &go
}

/// The Go plugins (`plugins/go/PACKAGE`) and the constant that names each one's component.
const GO_PLUGINS: &[(&str, &str)] = &[
    ("pod-phase", "POD_PHASE_GO"),
    ("owner-chain", "OWNER_CHAIN_GO"),
    ("labeler", "LABELER_GO"),
    ("hostile", "HOSTILE_GO"),
    ("service-alert", "SERVICE_ALERT_GO"),
    ("image-policy", "IMAGE_POLICY_GO"),
    ("pod-defaults", "POD_DEFAULTS_GO"),
    ("noop", "NOOP_GO"),
    ("namespace-provisioner", "NAMESPACE_PROVISIONER_GO"),
];

/// True when Go's tool chain is on PATH (the test suite needs it anyway, for the API server).
fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}
