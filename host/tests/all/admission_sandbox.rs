//! Hostile admission handlers (the `hostile` plugin's `admit-*` modes) through the same path a
//! webhook request takes (`admission::decide` via `kubewasm test`): a trap, a handler that never
//! returns, side effects attempted during `admit`, and a patch that does not apply each end in
//! the failure policy's answer or a refusal, never a hung review or a write.

use std::path::Path;
use std::time::{Duration, Instant};

use kubewasm::admission::review::Answer;
use kubewasm::testing::spec::Spec;
use kubewasm::testing::{Options, StepResult, run};

/// Runs one step sending a Secret CREATE review to the hostile plugin in `mode`.
fn review_in_mode(mode: &str) -> StepResult {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("hostile.test.yaml");
    let text = format!(
        r#"name: hostile
config: {{mode: {mode}}}
steps:
  - name: a Secret is created
    review:
      operation: CREATE
      object: {{apiVersion: v1, kind: Secret, metadata: {{name: token, namespace: shop}}}}
    expect:
      writes: []
"#
    );
    std::fs::write(&file, text).expect("write the test file");
    let spec =
        Spec::load(&file, Some(Path::new(kubewasm_plugin_artifacts::HOSTILE))).expect("test file");
    let options = Options {
        compiled_cache: None,
        step_timeout: Duration::from_secs(60),
    };
    let tasks = tokio::runtime::Runtime::new().expect("runtime");
    let mut results = tasks
        .block_on(run(&spec, &options, |_| {}))
        .expect("the test runs");
    assert_eq!(results.len(), 1);
    let step = results.remove(0);
    assert!(step.passed(), "{mode}: {step:#?}");
    step
}

fn answer(step: &StepResult) -> &Answer {
    step.answer.as_ref().expect("the review was answered")
}

#[test]
fn a_trap_in_admit_gets_the_failure_policys_answer() {
    let closed = review_in_mode("admit-trap");
    let a = answer(&closed);
    assert!(!a.allowed && a.code == 500, "{a:?}");
    assert!(
        a.message
            .contains("kubewasm plugin hostile could not review this request")
            && a.message.contains("unreachable"),
        "{a:?}"
    );
    let open = review_in_mode("admit-trap-ignore");
    let a = answer(&open);
    assert!(a.allowed, "{a:?}");
    assert!(
        a.warnings.len() == 1 && a.warnings[0].contains("failurePolicy Ignore"),
        "{a:?}"
    );
}

#[test]
fn an_admit_that_never_returns_is_answered_within_the_webhooks_timeout() {
    // The plugin declares a 5 s webhook timeout; the host answers within 4 s (the timeout less
    // a margin for the network), so the API server gets the failure policy, not a timeout.
    let started = Instant::now();
    let step = review_in_mode("admit-loop");
    let a = answer(&step);
    assert!(!a.allowed && a.code == 500, "{a:?}");
    assert!(a.message.contains("could not review"), "{a:?}");
    // Wall clock on purpose: this is the bound the API server sees. The whole test file (host
    // start, compile, review) must end well before a loop left running would let it.
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn writes_and_state_changes_during_admit_are_refused() {
    let step = review_in_mode("admit-write");
    let a = answer(&step);
    // The plugin denies with what each attempt returned: both were refused, and neither a
    // write (the step expects none) nor a state entry was kept.
    assert!(!a.allowed, "{a:?}");
    let (write, state) = a
        .message
        .split_once("; state: ")
        .unwrap_or_else(|| panic!("{a:?}"));
    assert!(
        write.starts_with("hostile: write: ")
            && write.contains("writes are staged only during handle"),
        "{a:?}"
    );
    assert!(
        state.contains("state changes are possible in handle, synced and tick only"),
        "{a:?}"
    );
    assert!(step.state.is_empty(), "{:?}", step.state);
}

#[test]
fn a_patch_that_does_not_apply_fails_closed_naming_the_patch() {
    let step = review_in_mode("admit-bad-patch");
    let a = answer(&step);
    assert!(!a.allowed && a.code == 500 && a.patch.is_none(), "{a:?}");
    assert!(
        a.message.contains("could not review") && a.message.contains("/no/such/field"),
        "{a:?}"
    );
}
