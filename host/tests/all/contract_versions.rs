//! Components built for contracts 0.2, 0.3 and 0.4 keep loading unchanged beside 0.5 ones:
//! the example plugins as they were built against each (tests/contract-0.N, never rebuilt)
//! run on the example cluster next to the same plugins built for 0.5, and say the same things
//! (pod-phase built for 0.4 and 0.5 declares the one field it reads, so this also shows a
//! projection changes nothing it sees); the 0.2 labeler's writes go through 0.5's write path;
//! and the 0.3 and 0.4 builds of the plugins that use what 0.3 added (state, schedules,
//! admission) pass their own test files.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::gvk::Gvk;
use kubewasm::wasm::logging::{MemorySink, PluginLogRecord};
use kubewasm::write::{Verb, WriteGrant};

use crate::support;

const WAIT: Duration = Duration::from_secs(60);

fn fixture(file: &str) -> PathBuf {
    support::root().join("tests/contract-0.2").join(file)
}

fn fixture_0_3(file: &str) -> PathBuf {
    support::root().join("tests/contract-0.3").join(file)
}

fn fixture_0_4(file: &str) -> PathBuf {
    support::root().join("tests/contract-0.4").join(file)
}

/// What a plugin logged, as comparable lines: message and fields, in order of the log.
fn said(lines: &[PluginLogRecord], plugin: &str) -> BTreeSet<String> {
    lines
        .iter()
        .filter(|l| l.plugin == plugin)
        .map(|l| format!("{} {:?}", l.message, l.fields))
        .collect()
}

#[test]
fn plugins_built_for_0_2_0_3_and_0_4_run_beside_0_5_ones_and_say_the_same() {
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    support::copy_examples(cluster.path());
    let pod = Gvk::new("", "v1", "Pod");
    let mut config = support::configs(&[
        ("labeler-02", r#"{"key": "team", "value": "shop"}"#),
        ("owner-chain-02", "{}"),
        ("owner-chain-03", "{}"),
        ("owner-chain-04", "{}"),
        ("owner-chain", "{}"),
    ]);
    config
        .plugins
        .named
        .get_mut("labeler-02")
        .expect("configured")
        .grants
        .writes = vec![WriteGrant {
        resources: vec![pod.clone()],
        subresources: vec![],
        verbs: vec![Verb::Patch],
        namespaces: None,
    }];
    let plugins = kubewasm_testenv::PluginFolder::new();
    for (name, from) in [
        ("pod-phase-02", fixture("pod_phase.wasm")),
        ("pod-phase", kubewasm_plugin_artifacts::POD_PHASE.into()),
        ("deployment-view-02", fixture("deployment_view.wasm")),
        (
            "deployment-view",
            kubewasm_plugin_artifacts::DEPLOYMENT_VIEW.into(),
        ),
        ("owner-chain-02", fixture("owner_chain.wasm")),
        ("owner-chain", kubewasm_plugin_artifacts::OWNER_CHAIN.into()),
        ("labeler-02", fixture("labeler.wasm")),
        ("pod-phase-03", fixture_0_3("pod_phase.wasm")),
        ("deployment-view-03", fixture_0_3("deployment_view.wasm")),
        ("owner-chain-03", fixture_0_3("owner_chain.wasm")),
        ("pod-phase-04", fixture_0_4("pod_phase.wasm")),
        ("deployment-view-04", fixture_0_4("deployment_view.wasm")),
        ("owner-chain-04", fixture_0_4("owner_chain.wasm")),
    ] {
        plugins.put(name, &from);
    }
    let sink = Arc::new(MemorySink::default());
    let mut agent = support::folder_agent(&runtime, cluster.path(), config, sink.clone());
    let report = runtime
        .block_on(agent.follow_plugins(plugins.path()))
        .expect("the folder is read");
    assert!(report.failed.is_empty(), "{report:?}");

    let status = agent.plugins().status();
    let contract = |name: &str| {
        status
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.contract.clone())
            .unwrap_or_default()
    };
    assert_eq!(contract("pod-phase-02"), "0.2.0");
    assert_eq!(contract("pod-phase-03"), "0.3.0");
    assert_eq!(contract("pod-phase-04"), "0.4.0");
    assert_eq!(contract("pod-phase"), "0.5.0");

    // Every plugin handed its initial state, and the labeler's writes came back as updates.
    let deadline = Instant::now() + WAIT;
    let pods = agent.factory().get(&pod).expect("pods cached");
    let labeled = |key: &str| {
        pods.store()
            .get(key)
            .is_some_and(|o| o.label("team") == Some("shop"))
    };
    loop {
        let all_synced = agent.plugins().status().iter().all(|s| s.synced && s.idle);
        if all_synced
            && labeled("shop/api-7c6d5b4f9-2ntwl")
            && labeled("batch/report-29371840-kd9wq")
        {
            break;
        }
        assert!(Instant::now() < deadline, "{:#?}", agent.plugins().status());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let lines = sink.records();
    for (old, new) in [
        ("pod-phase-02", "pod-phase"),
        ("deployment-view-02", "deployment-view"),
        ("owner-chain-02", "owner-chain"),
        ("pod-phase-03", "pod-phase"),
        ("deployment-view-03", "deployment-view"),
        ("owner-chain-03", "owner-chain"),
        ("pod-phase-04", "pod-phase"),
        ("deployment-view-04", "deployment-view"),
        ("owner-chain-04", "owner-chain"),
    ] {
        let (then, now) = (said(&lines, old), said(&lines, new));
        assert!(!then.is_empty(), "{old} said nothing");
        assert_eq!(then, now, "{old} and {new} say the same");
    }
    let labeler = support::plugin_status(&agent, "labeler-02");
    assert!(labeler.writes_sent >= 1, "{labeler:#?}");
    assert_eq!((labeler.failed, labeler.given_up), (0, 0), "{labeler:#?}");
}

/// Runs a plugin's own test file against another build of it.
fn passes_its_tests(file: &str, plugin: &std::path::Path, steps: usize) {
    use kubewasm::testing::spec::Spec;
    let spec = Spec::load(&support::root().join(file), Some(plugin)).expect("test file");
    let options = kubewasm::testing::Options {
        compiled_cache: None,
        step_timeout: WAIT,
    };
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    let results = tasks
        .block_on(kubewasm::testing::run(&spec, &options, |_| {}))
        .expect("the test runs");
    assert_eq!(results.len(), steps, "{file}");
    for step in &results {
        assert!(step.passed(), "{file} with {}: {step:#?}", plugin.display());
    }
}

#[test]
fn plugins_built_for_0_3_and_0_4_pass_their_own_tests_state_schedules_and_admission_included() {
    for (file, fixture, steps) in [
        (
            "plugins/pod-phase/tests/pod-phase.test.yaml",
            "pod_phase.wasm",
            3,
        ),
        (
            "plugins/service-alert/tests/service-alert.test.yaml",
            "service_alert.wasm",
            5,
        ),
        (
            "plugins/image-policy/tests/image-policy.test.yaml",
            "image_policy.wasm",
            4,
        ),
        ("plugins/pod-age/tests/pod-age.test.yaml", "pod_age.wasm", 4),
    ] {
        passes_its_tests(file, &fixture_0_3(fixture), steps);
        passes_its_tests(file, &fixture_0_4(fixture), steps);
    }
}
