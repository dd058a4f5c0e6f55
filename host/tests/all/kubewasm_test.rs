//! `kubewasm test`: the example plugins' test files pass (service-alert's in all three
//! languages), and a wrong expectation fails with a diff naming exactly what differs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kubewasm::testing::spec::Spec;
use kubewasm::testing::{Options, StepResult, run};

use crate::support;

/// `kubewasm test --plugin PLUGIN FILE`.
fn kubewasm_test(plugin: &Path, file: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubewasm"))
        .arg("test")
        .arg("--plugin")
        .arg(plugin)
        .arg(file)
        .output()
        .expect("kubewasm runs")
}

fn options() -> Options {
    Options {
        compiled_cache: None,
        step_timeout: Duration::from_secs(60),
    }
}

/// Runs the test file at `file` (relative to the repository) on the built `plugin`.
fn run_file(file: &str, plugin: &str) -> Vec<StepResult> {
    let spec = Spec::load(&support::root().join(file), Some(Path::new(plugin))).expect("test file");
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    tasks
        .block_on(run(&spec, &options(), |_| {}))
        .expect("the test runs")
}

#[test]
fn the_example_test_files_pass() {
    for (file, plugin, steps) in [
        (
            "plugins/pod-phase/tests/pod-phase.test.yaml",
            kubewasm_plugin_artifacts::POD_PHASE,
            3,
        ),
        (
            "plugins/labeler/tests/labeler.test.yaml",
            kubewasm_plugin_artifacts::LABELER,
            3,
        ),
        (
            "plugins/service-alert/tests/service-alert.test.yaml",
            kubewasm_plugin_artifacts::SERVICE_ALERT,
            5,
        ),
        (
            "plugins/image-policy/tests/image-policy.test.yaml",
            kubewasm_plugin_artifacts::IMAGE_POLICY,
            4,
        ),
        (
            "plugins/pod-defaults/tests/pod-defaults.test.yaml",
            kubewasm_plugin_artifacts::POD_DEFAULTS,
            3,
        ),
        (
            "plugins/pod-age/tests/pod-age.test.yaml",
            kubewasm_plugin_artifacts::POD_AGE,
            4,
        ),
        (
            "plugins/namespace-provisioner/tests/namespace-provisioner.test.yaml",
            kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER,
            4,
        ),
    ] {
        let results = run_file(file, plugin);
        assert_eq!(results.len(), steps, "{file}");
        for step in &results {
            assert!(step.passed(), "{file}: {step:#?}");
        }
    }
}

/// Runs the test file `file` on the Python and the JavaScript build of plugin `what`, each of
/// which must pass its `steps` steps.
fn passes_in_python_and_javascript(
    what: &str,
    file: &str,
    [python, javascript]: [Option<&str>; 2],
    steps: usize,
) {
    for (language, plugin) in [("python", python), ("javascript", javascript)] {
        let plugin = plugin
            .unwrap_or_else(|| panic!("the {language} {what} is not built: run scripts/setup.sh"));
        let results = run_file(file, plugin);
        assert_eq!(results.len(), steps, "{language}");
        for step in &results {
            assert!(step.passed(), "{language}: {step:#?}");
        }
    }
}

/// The Python and JavaScript service-alert pass the Rust one's test file: the same edge kept
/// in state, on a fresh instance per call, from each SDK.
#[test]
fn service_alert_passes_its_test_file_in_python_and_javascript() {
    passes_in_python_and_javascript(
        "service-alert",
        "plugins/service-alert/tests/service-alert.test.yaml",
        [
            kubewasm_plugin_artifacts::SERVICE_ALERT_PY,
            kubewasm_plugin_artifacts::SERVICE_ALERT_JS,
        ],
        5,
    );
}

/// The App operator, in Python and in JavaScript, passes its test file: children applied and
/// owned, a status written once and not again by a reconcile that finds all as it was, the
/// finalizer's work done before the App goes.
#[test]
fn the_app_operator_passes_its_test_file_in_python_and_javascript() {
    passes_in_python_and_javascript(
        "app-operator",
        "plugins/python/app-operator/tests/app-operator.test.yaml",
        [
            kubewasm_plugin_artifacts::APP_OPERATOR_PY,
            kubewasm_plugin_artifacts::APP_OPERATOR_JS,
        ],
        4,
    );
}

/// The Go twins of the example plugins pass the Rust ones' test files: events, writes, state
/// on a fresh instance per call, schedules' neighbours (`synced`) and both kinds of admission
/// go through the generated glue as through the Rust SDK.
#[test]
fn the_go_examples_pass_the_rust_ones_test_files() {
    let go =
        |p: Option<&'static str>| p.expect("the Go plugins are built (Go's tool chain on PATH)");
    for (file, plugin, steps) in [
        (
            "plugins/pod-phase/tests/pod-phase.test.yaml",
            go(kubewasm_plugin_artifacts::POD_PHASE_GO),
            3,
        ),
        (
            "plugins/labeler/tests/labeler.test.yaml",
            go(kubewasm_plugin_artifacts::LABELER_GO),
            3,
        ),
        (
            "plugins/service-alert/tests/service-alert.test.yaml",
            go(kubewasm_plugin_artifacts::SERVICE_ALERT_GO),
            5,
        ),
        (
            "plugins/image-policy/tests/image-policy.test.yaml",
            go(kubewasm_plugin_artifacts::IMAGE_POLICY_GO),
            4,
        ),
        (
            "plugins/pod-defaults/tests/pod-defaults.test.yaml",
            go(kubewasm_plugin_artifacts::POD_DEFAULTS_GO),
            3,
        ),
        (
            "plugins/namespace-provisioner/tests/namespace-provisioner.test.yaml",
            go(kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER_GO),
            4,
        ),
    ] {
        // Under the Rust plugin's file name: the test files' grants name the plugin by it.
        let dir = tempfile::tempdir().expect("temp dir");
        let name = file.split('/').nth(1).expect("plugins/NAME/tests");
        let copy = dir.path().join(format!("{name}.wasm"));
        std::fs::copy(plugin, &copy).expect("copy");
        let results = run_file(file, copy.to_str().expect("a UTF-8 path"));
        assert_eq!(results.len(), steps, "{file}");
        for step in &results {
            assert!(step.passed(), "{file} (Go): {step:#?}");
        }
    }
}

#[test]
fn a_cluster_folder_is_the_first_state_read_as_the_folder_source_reads_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = dir.path().join("cluster");
    std::fs::create_dir(&cluster).expect("mkdir");
    support::copy_examples(&cluster);
    // Hidden files are not manifests, for the runner as for the folder source.
    std::fs::write(cluster.join(".draft.yaml"), "not: [a manifest").expect("write");
    let file = dir.path().join("cluster.test.yaml");
    std::fs::write(&file, "cluster: cluster\nsteps: [{}]\n").expect("write");
    let spec = Spec::load(&file, Some(Path::new(kubewasm_plugin_artifacts::POD_PHASE)))
        .expect("test file");
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    let results = tasks
        .block_on(run(&spec, &options(), |_| {}))
        .expect("the test runs");
    // One `pod seen` line per pod of examples/cluster.
    assert_eq!(results[0].lines, 6, "{results:#?}");
    assert!(results[0].passed(), "{results:#?}");
}

const WRONG: &str = "
name: pod-phase
steps:
  - apply: [{apiVersion: v1, kind: Pod, metadata: {name: a, namespace: shop}, status: {phase: Pending}}]
    expect:
      logs: [{message: pod seen, fields: {pod: shop/a, phase: Running}}]
  - name: nothing changes but a write is expected
    expect:
      writes: [{action: apply, target: v1/Pod shop/a}]
      givenUp: 1
";

#[test]
fn a_wrong_expectation_fails_with_a_diff_and_exit_status_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("wrong.test.yaml");
    std::fs::write(&file, WRONG).expect("write");
    let out = kubewasm_test(Path::new(kubewasm_plugin_artifacts::POD_PHASE), &file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for line in [
        "  FAIL step 1 (1 log lines, 0 writes)",
        "- any \"pod seen\" phase=\"Running\" pod=\"shop/a\"",
        "+ info \"pod seen\" pod=\"shop/a\" phase=\"Pending\" initial=\"true\"",
        "  FAIL nothing changes but a write is expected (0 log lines, 0 writes)",
        "events given up: 0, expected 1; last error: none",
        "- apply v1/Pod shop/a",
        "0 steps passed, 2 failed",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}

#[test]
fn a_broken_test_file_or_plugin_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bad.test.yaml");
    std::fs::write(&file, "steps:\n  - delete: [{kind: Pod, name: a}]\n").expect("write");
    let out = kubewasm_test(Path::new(kubewasm_plugin_artifacts::POD_PHASE), &file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("bad.test.yaml") && stderr.contains("apiVersion"),
        "{stderr}"
    );

    let not_wasm = dir.path().join("nope.wasm");
    std::fs::write(&not_wasm, "not a component").expect("write");
    std::fs::write(&file, "steps: [{}]\n").expect("write");
    let out = kubewasm_test(&not_wasm, &file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("did not load") && stderr.contains("nope.wasm"),
        "{stderr}"
    );
}

#[test]
fn schedules_run_only_when_a_step_asks_however_often_their_cron_falls_due() {
    // pod-age's summary on a cron due every second, and three seconds between the steps: a
    // test still runs it once, when the second step asks.
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("pod-age.test.yaml");
    let text = r#"name: pod-age
host: {plugins: {pod-age: {schedules: {summary: {cron: "@every 1s"}}}}}
steps:
  - name: a pending pod
    apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: stuck, namespace: shop, creationTimestamp: "2020-01-01T00:00:00Z"}, status: {phase: Pending}}
    expect:
      logs:
        - {message: pod pending too long, level: warn, fields: {pod: shop/stuck}}
        - {message: pods by phase, level: info, fields: {phases: Pending=1}}
  - name: the summary, asked once
    tick: summary
    expect:
      logs:
        - {message: pods by phase, level: info, fields: {phases: Pending=1}}
"#;
    std::fs::write(&file, text).expect("write the test file");
    let spec =
        Spec::load(&file, Some(Path::new(kubewasm_plugin_artifacts::POD_AGE))).expect("test file");
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    let results = tasks
        .block_on(run(&spec, &options(), |_| {
            // Between the steps: three of the cron's seconds.
            std::thread::sleep(std::time::Duration::from_secs(3));
        }))
        .expect("the test runs");
    assert_eq!(results.len(), 2);
    for step in &results {
        assert!(step.passed(), "{step:#?}");
    }
}

/// `now:` sets the wall clock the plugin reads, per file and per step; `tick:` steps run the
/// tick at once (they used to wait for the worker's 30-second idle timer).
#[test]
fn a_test_file_sets_the_clock_and_its_tick_steps_run_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("pod-age.test.yaml");
    let pod = |name: &str, created: &str| {
        format!(
            "      - {{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: shop, creationTimestamp: \"{created}\"}}, status: {{phase: Pending}}}}\n"
        )
    };
    let tick = "  - tick: summary\n    expect: {logs: [{message: pods by phase}]}\n";
    let text = format!(
        "name: pod-age
now: 2030-01-01T00:10:00Z
steps:
  - name: ten minutes pending is too long, one minute is not
    apply:
{}{}    expect:
      logs:
        - {{message: pod pending too long, level: warn, fields: {{pod: shop/stuck}}}}
        - {{message: pods by phase, level: info, fields: {{phases: Pending=2}}}}
{tick}{tick}{tick}  - name: an hour later a pod made at half past is too old
    now: 2030-01-01T01:00:00Z
    apply:
{}    expect:
      logs:
        - {{message: pod pending too long, level: warn, fields: {{pod: shop/late}}}}
",
        pod("stuck", "2030-01-01T00:00:00Z"),
        pod("fresh", "2030-01-01T00:09:00Z"),
        pod("late", "2030-01-01T00:30:00Z"),
    );
    std::fs::write(&file, text).expect("write the test file");
    let started = std::time::Instant::now();
    let out = kubewasm_test(Path::new(kubewasm_plugin_artifacts::POD_AGE), &file);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("5 steps passed, 0 failed"), "{stdout}");
    // Three ticks each waited up to 30 s before; now a step ends 250 ms after it settles.
    assert!(
        took < Duration::from_secs(25),
        "three tick steps took {took:?}"
    );
}

/// `stateIncludes` checks the keys it names (null: absent) and leaves the others alone.
#[test]
fn state_includes_checks_only_the_keys_it_names() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("alert.test.yaml");
    let text = "name: service-alert
host:
  plugins:
    service-alert:
      grants:
        writes:
          - {resources: [events.k8s.io/v1/Event], verbs: [create, patch]}
steps:
  - apply:
      - {apiVersion: v1, kind: Service, metadata: {name: web, namespace: shop}, spec: {selector: {app: web}}}
      - {apiVersion: v1, kind: Pod, metadata: {name: w1, namespace: shop, labels: {app: web}}, status: {conditions: [{type: Ready, status: \"False\"}]}}
    expect:
      stateIncludes: {empty/shop/web: \"2\", empty/shop/other: null}
";
    std::fs::write(&file, text).expect("write");
    let out = kubewasm_test(Path::new(kubewasm_plugin_artifacts::SERVICE_ALERT), &file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(r#"state "empty/shop/web": "1", expected "2""#),
        "{stdout}"
    );
    assert!(!stdout.contains("empty/shop/other"), "{stdout}");
}

/// A plugin in dry-run mode writes nothing a step sees: the labeler's label is checked by the
/// folder and not applied.
#[test]
fn a_plugin_in_dry_run_mode_writes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("labeler.test.yaml");
    let text = "config: {key: team, value: shop}
host:
  plugins:
    labeler:
      mode: dry-run
      grants:
        writes:
          - {resources: [v1/Pod], verbs: [patch], namespaces: [shop]}
steps:
  - apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop}}
    expect:
      writes: []
      logs:
        - {message: labeling pod, fields: {pod: shop/web-1, label: team=shop}}
";
    std::fs::write(&file, text).expect("write");
    let out = kubewasm_test(Path::new(kubewasm_plugin_artifacts::LABELER), &file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // In serve mode the same file fails: the write is expected to be absent.
    std::fs::write(&file, text.replace("mode: dry-run", "mode: serve")).expect("write");
    let out = kubewasm_test(Path::new(kubewasm_plugin_artifacts::LABELER), &file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
}

/// `--compare` replays one recording through two versions: alike, exit 0; a version that
/// stops writing shows each write it no longer sends, exit 1.
#[test]
fn compare_shows_the_writes_one_version_sends_and_the_other_does_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("recorded.test.yaml");
    let text = "# Recorded by kubewasm record (by hand here).
name: labeler
config: {key: team, value: shop}
host:
  plugins:
    labeler:
      grants:
        writes:
          - {resources: [v1/Pod], verbs: [patch], namespaces: [shop]}
steps:
  - name: initial
    apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop}}
  - name: another pod
    apply:
      - {apiVersion: v1, kind: Pod, metadata: {name: web-2, namespace: shop, labels: {team: shop}}}
";
    std::fs::write(&file, text).expect("write");
    let compare = |old: &str, new: &str| {
        Command::new(env!("CARGO_BIN_EXE_kubewasm"))
            .args(["test", "--compare", old, new])
            .arg(&file)
            .output()
            .expect("kubewasm runs")
    };
    let labeler = kubewasm_plugin_artifacts::LABELER;
    let out = compare(labeler, labeler);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("2 steps the same, 0 differ"), "{stdout}");
    // pod-phase only logs: the labeler's one label is what it no longer writes.
    let out = compare(labeler, kubewasm_plugin_artifacts::POD_PHASE);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("DIFF initial"), "{stdout}");
    assert!(
        stdout.contains(r#"- apply v1/Pod shop/web-1 body={"#),
        "{stdout}"
    );
    assert!(stdout.contains("same another pod"), "{stdout}");
    assert!(stdout.contains("1 steps the same, 1 differ"), "{stdout}");
}
