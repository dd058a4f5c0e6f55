//! Plugins written in Python (componentize-py), JavaScript (componentize-js) and Go (the
//! standard tool chain and `kubewasm build`) run through the host like Rust ones: the same
//! owner-chain plugin in all four, with the same expected output, pod-phase and the labeler in
//! Rust and Go alike. The Python and JavaScript SDKs pass their own tests, and the SDKs offer
//! the same helpers (plugin-sdk/parity.json).

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::object::Transform;
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::wasm::logging::{MemorySink, PluginLogRecord};

use crate::support;

const WAIT: Duration = Duration::from_secs(120);

/// `pod replicaset deployment siblings` for every pod of examples/cluster.
const EXPECTED: [&str; 6] = [
    "batch/report-29371840-kd9wq - - 0",
    "shop/api-7c6d5b4f9-2ntwl api-7c6d5b4f9 api 2",
    "shop/api-7c6d5b4f9-8fjzc api-7c6d5b4f9 api 2",
    "shop/web-5d8f7c9b6-hv4rd web-5d8f7c9b6 web 3",
    "shop/web-5d8f7c9b6-q9mzt web-5d8f7c9b6 web 3",
    "shop/web-5d8f7c9b6-x7k2p web-5d8f7c9b6 web 3",
];

fn chains(lines: &[PluginLogRecord]) -> Vec<String> {
    let mut out: Vec<String> = lines
        .iter()
        .filter(|l| l.message == "owner chain")
        .map(|l| {
            ["pod", "replicaset", "deployment", "siblings"]
                .map(|f| l.field(f).unwrap_or("?"))
                .join(" ")
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn owner_chain_through_the_host(built: Option<&str>, language: &str) {
    let Some(built) = built else {
        panic!(
            "the {language} plugin was not built: run scripts/setup.sh, which installs its tool chain"
        );
    };
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    support::copy_examples(cluster.path());
    let folder = Arc::new(
        ManifestFolder::snapshot(cluster.path(), Transform::default()).expect("open cluster"),
    );
    let sink = Arc::new(MemorySink::default());
    // This test checks the chains and that no call trapped. CPython and StarlingMonkey under a
    // debug host, with the suite's other binaries on two shared cores, once took over the
    // default 1 s deadline (a trap, then a retry that delivered): the deadline itself is
    // checked by the hostile-plugin tests, not here.
    let mut config = support::configs(&[]);
    config.plugins.defaults.limits.deadline = Duration::from_secs(10);
    let options = AgentOptions {
        // Large components compile for seconds: share compiled code across test runs.
        compiled_cache: Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("compiled")),
        ..AgentOptions::new(
            Cluster::Source(folder.clone(), Some(folder.clone())),
            config,
            sink.clone(),
        )
    };
    let agent = runtime
        .block_on(Agent::start(options))
        .expect("the agent starts");
    let host = agent.plugins();
    let plugins = kubewasm_testenv::PluginFolder::new();
    let path = plugins.put(&format!("owner-chain-{language}"), built);
    host.load(&path).unwrap_or_else(|e| panic!("{e}"));

    let lines = sink.wait_until(WAIT, |rs| chains(rs).len() >= EXPECTED.len());
    assert_eq!(chains(&lines), EXPECTED, "{}", support::render(&lines));
    // Every object handle its queries were given went back to the host.
    let status = host.status();
    assert_eq!(status[0].handles, 0, "{language} kept handles: {status:?}");

    // A new pod of the web ReplicaSet: its chain, with one more sibling.
    let pod = fs::read_to_string(cluster.path().join("shop-web-stuck-pod.yaml")).expect("read");
    let pod = pod
        .replace("web-5d8f7c9b6-hv4rd", "web-5d8f7c9b6-new01")
        .replace(
            "5e0c1a52-0000-4000-8000-000000000106",
            "5e0c1a52-0000-4000-8000-000000000199",
        );
    fs::write(cluster.path().join("new-pod.yaml"), &pod).expect("write");
    // And one whose controller reference names the ReplicaSet with a uid it no longer has
    // (a replaced owner): the host's owner lookup must not return the new one.
    let orphan = pod
        .replace("web-5d8f7c9b6-new01", "web-5d8f7c9b6-old01")
        .replace(
            "5e0c1a52-0000-4000-8000-000000000199",
            "5e0c1a52-0000-4000-8000-000000000198",
        )
        .replace(
            "uid: 5e0c1a52-0000-4000-8000-000000000103",
            "uid: 5e0c1a52-0000-4000-8000-0000000000ff",
        );
    fs::write(cluster.path().join("orphan-pod.yaml"), orphan).expect("write");
    folder.rescan();
    let expected = [
        "shop/web-5d8f7c9b6-new01 web-5d8f7c9b6 web 4",
        "shop/web-5d8f7c9b6-old01 - - 0",
    ];
    let lines = sink.wait_until(WAIT, |rs| {
        expected.iter().all(|e| chains(rs).iter().any(|c| c == e))
    });
    for e in expected {
        assert!(
            chains(&lines).iter().any(|c| c == e),
            "{e}: {}",
            support::render(&lines)
        );
    }
    let status = &host.status()[0];
    assert_eq!((status.traps, status.given_up), (0, 0), "{status:?}");
}

#[test]
fn rust_plugin_walks_owner_references_through_the_cache() {
    owner_chain_through_the_host(Some(kubewasm_plugin_artifacts::OWNER_CHAIN), "rust");
}

#[test]
fn python_plugin_walks_owner_references_through_the_cache() {
    owner_chain_through_the_host(kubewasm_plugin_artifacts::OWNER_CHAIN_PY, "python");
}

#[test]
fn javascript_plugin_walks_owner_references_through_the_cache() {
    owner_chain_through_the_host(kubewasm_plugin_artifacts::OWNER_CHAIN_JS, "javascript");
}

#[test]
fn go_plugin_walks_owner_references_through_the_cache() {
    owner_chain_through_the_host(kubewasm_plugin_artifacts::OWNER_CHAIN_GO, "go");
}

/// What pod-phase logged: message and fields, one line each, sorted.
fn phase_lines(lines: &[PluginLogRecord], plugin: &str) -> Vec<String> {
    let mut out: Vec<String> = lines
        .iter()
        .filter(|l| l.plugin == plugin && l.message.starts_with("pod "))
        .map(|l| {
            let fields: Vec<String> = l
                .fields
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "plugin" | "digest" | "key"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("{}: {}", l.message, fields.join(" "))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn pod_phase_in_go_logs_what_the_rust_one_logs() {
    let go = kubewasm_plugin_artifacts::POD_PHASE_GO
        .expect("the Go pod-phase is built (Go's tool chain on PATH)");
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    support::copy_examples(cluster.path());
    let plugins = kubewasm_testenv::PluginFolder::new();
    plugins.put("pod-phase", kubewasm_plugin_artifacts::POD_PHASE);
    plugins.put("pod-phase-go", go);
    let sink = Arc::new(MemorySink::default());
    let (mut agent, folder) = support::snapshot_agent(
        &runtime,
        cluster.path(),
        support::configs(&[]),
        sink.clone(),
    );
    runtime
        .block_on(agent.follow_plugins(plugins.path()))
        .expect("plugins load");
    let both = |rs: &[PluginLogRecord], n: usize| {
        phase_lines(rs, "pod-phase").len() >= n && phase_lines(rs, "pod-phase-go").len() >= n
    };
    let lines = sink.wait_until(WAIT, |rs| both(rs, EXPECTED.len()));
    assert_eq!(
        phase_lines(&lines, "pod-phase-go"),
        phase_lines(&lines, "pod-phase"),
        "{}",
        support::render(&lines)
    );
    // A phase change and a delete: updated (old and new lent together) and deleted events.
    let stuck = cluster.path().join("shop-web-stuck-pod.yaml");
    let pod = fs::read_to_string(&stuck).expect("read");
    assert!(pod.contains("phase: Pending"), "{pod}");
    fs::write(&stuck, pod.replace("phase: Pending", "phase: Running")).expect("write");
    folder.rescan();
    sink.wait_until(WAIT, |rs| both(rs, EXPECTED.len() + 1));
    fs::remove_file(&stuck).expect("remove");
    folder.rescan();
    let lines = sink.wait_until(WAIT, |rs| both(rs, EXPECTED.len() + 2));
    let rust = phase_lines(&lines, "pod-phase");
    assert!(
        rust.iter().any(|l| l.starts_with("pod phase changed: "))
            && rust.iter().any(|l| l.starts_with("pod deleted: ")),
        "{rust:#?}"
    );
    assert_eq!(phase_lines(&lines, "pod-phase-go"), rust);
    let status = support::plugin_status(&agent, "pod-phase-go");
    assert_eq!(
        (status.traps, status.given_up, status.handles),
        (0, 0, 0),
        "{status:?}"
    );
}

#[test]
fn every_example_component_is_well_within_the_compile_limits() {
    use kubewasm::wasm::shape::{MAX_EXPORTS, MAX_FUNCTIONS, shape};
    let rust = [
        kubewasm_plugin_artifacts::POD_PHASE,
        kubewasm_plugin_artifacts::DEPLOYMENT_VIEW,
        kubewasm_plugin_artifacts::AUDIT_LOG,
        kubewasm_plugin_artifacts::OWNER_CHAIN,
    ];
    let others = [
        kubewasm_plugin_artifacts::OWNER_CHAIN_PY,
        kubewasm_plugin_artifacts::LABELER_PY,
        kubewasm_plugin_artifacts::OWNER_CHAIN_JS,
        kubewasm_plugin_artifacts::POD_PHASE_GO,
        kubewasm_plugin_artifacts::OWNER_CHAIN_GO,
    ];
    let paths: Vec<&str> = rust
        .into_iter()
        .chain(others.into_iter().map(|p| {
            p.expect(
                "the Python, JavaScript and Go plugins are built (scripts/setup.sh, Go on PATH)",
            )
        }))
        .collect();
    for path in paths {
        let s = shape(&fs::read(path).expect("read"));
        eprintln!("{path}: {s:?}");
        assert!(
            s.functions * 2 < MAX_FUNCTIONS && s.exports * 2 < MAX_EXPORTS,
            "{path}: {s:?}"
        );
    }
}

#[test]
fn the_labeler_writes_the_same_labels_from_rust_python_and_go() {
    use kubewasm::gvk::Gvk;
    use kubewasm::write::{Verb, WriteGrant};
    let python = kubewasm_plugin_artifacts::LABELER_PY
        .expect("the Python labeler is built (scripts/setup.sh)");
    let go = kubewasm_plugin_artifacts::LABELER_GO
        .expect("the Go labeler is built (Go's tool chain on PATH)");
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    support::copy_examples(cluster.path());
    let plugins = kubewasm_testenv::PluginFolder::new();
    plugins.put("labeler", kubewasm_plugin_artifacts::LABELER);
    plugins.put("labeler-py", python);
    plugins.put("labeler-go", go);
    let mut config = support::configs(&[
        ("labeler", r#"{"key": "from-rust", "value": "yes"}"#),
        ("labeler-py", r#"{"key": "from-python", "value": "yes"}"#),
        ("labeler-go", r#"{"key": "from-go", "value": "yes"}"#),
    ]);
    let pod = Gvk::new("", "v1", "Pod");
    for settings in config.plugins.named.values_mut() {
        settings.grants.writes = vec![WriteGrant {
            resources: vec![pod.clone()],
            subresources: vec![],
            verbs: vec![Verb::Patch],
            namespaces: Some(vec!["shop".into()]),
        }];
    }
    let sink = Arc::new(MemorySink::default());
    let mut agent = support::folder_agent(&runtime, cluster.path(), config, sink.clone());
    runtime
        .block_on(agent.follow_plugins(plugins.path()))
        .expect("plugins load");
    let pods = agent.factory().get(&pod).expect("pod informer");
    let labels = |key: &str| -> Vec<String> {
        let mut labeled: Vec<String> = pods
            .store()
            .list()
            .into_iter()
            .filter(|o| o.label(key) == Some("yes"))
            .map(|o| o.key().to_owned())
            .collect();
        labeled.sort();
        labeled
    };
    let shop: Vec<String> = EXPECTED
        .iter()
        .filter_map(|line| line.split(' ').next())
        .filter(|key| key.starts_with("shop/"))
        .map(str::to_owned)
        .collect();
    let deadline = std::time::Instant::now() + WAIT;
    while labels("from-python") != shop || labels("from-rust") != shop || labels("from-go") != shop
    {
        assert!(
            std::time::Instant::now() < deadline,
            "rust {:?}, python {:?}, go {:?}, expected {shop:?}\n{}",
            labels("from-rust"),
            labels("from-python"),
            labels("from-go"),
            support::render(&sink.records())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The batch pod's namespace is not granted: one denied write each, given up at once.
    for name in ["labeler", "labeler-py", "labeler-go"] {
        let deadline = std::time::Instant::now() + WAIT;
        let s = loop {
            let s = support::plugin_status(&agent, name);
            if s.given_up >= 1 || std::time::Instant::now() > deadline {
                break s;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(
            (s.writes_denied, s.given_up, s.retried),
            (1, 1, 0),
            "{name}: {s:?}"
        );
        assert!(
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("patch on v1/Pod in namespace batch is not granted")),
            "{name}: {s:?}"
        );
    }
}

/// Runs `command` in `dir`; panics with its output unless it succeeds, else returns it.
fn succeeds(what: &str, dir: &Path, command: &mut std::process::Command) -> String {
    let out = command
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e} (run scripts/setup.sh)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn the_python_sdk_passes_its_own_tests() {
    let root = support::root();
    let pytest = root.join("target/pyenv/bin/pytest");
    assert!(
        pytest.exists(),
        "no target/pyenv/bin/pytest: run scripts/setup.sh"
    );
    succeeds(
        "pytest plugin-sdk/python/tests",
        &root,
        std::process::Command::new(pytest)
            // Nothing written into the source tree (the plugins' build script watches it).
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-q", "-p", "no:cacheprovider", "plugin-sdk/python/tests"]),
    );
}

#[test]
fn the_javascript_sdk_passes_its_own_tests() {
    let root = support::root();
    let text = succeeds(
        "node --test (node is needed to build the JavaScript plugins too)",
        &root.join("plugin-sdk/javascript"),
        std::process::Command::new("node").args(["--test", "test/"]),
    );
    // node --test passes when it finds no test file at all; make sure the cases ran.
    assert!(
        text.contains("# pass") && !text.contains("# pass 0"),
        "{text}"
    );
}

#[test]
fn the_go_sdk_passes_its_own_tests() {
    let root = support::root();
    // The packages that need no bindings run on the machine's own Go (status: the shared
    // status cases); the rest is wasm-only and vetted by scripts/test.sh.
    let text = succeeds(
        "go test ./status/ (Go is needed to build the Go plugins too)",
        &root.join("plugin-sdk/go"),
        std::process::Command::new("go").args(["test", "-count=1", "-v", "./status/"]),
    );
    assert!(
        text.contains("--- PASS: TestWritesWhatTheOtherSDKsWrite"),
        "{text}"
    );
}

/// The four SDKs offer the same helpers: scripts/sdk_reference.py --check against
/// plugin-sdk/parity.json, which also keeps docs/SDK-REFERENCE.md current.
#[test]
fn the_sdks_offer_the_same_helpers_and_the_reference_page_is_current() {
    let root = support::root();
    succeeds(
        "the SDK parity check (fix plugin-sdk/parity.json or the SDK it names; then run scripts/sdk_reference.py)",
        &root,
        std::process::Command::new(root.join("target/pyenv/bin/python"))
            .args(["scripts/sdk_reference.py", "--check"]),
    );
}
