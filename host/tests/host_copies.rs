//! A plugin cannot make the host copy more than `limits::MAX_CALL_BYTES` out of it in one call,
//! however its arguments alias its own memory: the call traps before the host holds more.
//!
//! Its own test binary: the heap is counted by a global allocator, and one test at a time
//! runs in it.

use std::sync::Arc;

use kubewasm::gvk::Gvk;
use kubewasm::informer::{Informer, Notification};
use kubewasm::object::{KubeObject, Transform};
use kubewasm::wasm::limits::MAX_CALL_BYTES;
use serde_json::json;

#[path = "../benches/support/alloc.rs"]
#[allow(dead_code)]
mod alloc;
#[path = "../benches/support/instance.rs"]
mod instance;

#[global_allocator]
static HEAP: alloc::Counting = alloc::Counting;

/// The heap's growth at its peak while the hostile plugin handles one event in
/// `copy-flood` mode with `key`, and how the call ended.
fn flood(key: &str) -> (isize, String) {
    let informer = Arc::new(Informer::new(Gvk::new("", "v1", "ConfigMap")));
    let config = json!({"mode": "copy-flood", "key": key}).to_string();
    let mut instance = instance::instance(
        kubewasm_plugin_artifacts::HOSTILE,
        &config,
        std::slice::from_ref(&informer),
    );
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm-1", "namespace": "t"}
    });
    let object = KubeObject::from_value(cm, &Transform::default()).expect("config map");
    let event = Notification::Added {
        object: Arc::new(object),
        initial: false,
    };
    let before = alloc::live();
    alloc::reset_peak();
    let outcome = instance.handle(&event);
    let grew = alloc::peak() - before;
    let outcome = match outcome {
        Ok(answer) => format!("returned {answer:?}"),
        Err(trap) => format!("trapped: {trap:#}"),
    };
    (grew, outcome)
}

#[test]
fn one_call_copies_at_most_the_call_limit_out_of_a_plugin() {
    // `log`: one 64 KiB string passed as 1,000 field values (62.5 MiB to copy); `get`: a
    // 16 MiB name; `error`: a 16 MiB error returned from `handle`.
    for key in ["log", "get", "error"] {
        let (grew, outcome) = flood(key);
        let limit = isize::try_from(2 * MAX_CALL_BYTES).expect("small");
        assert!(
            grew < limit,
            "{key}: the host's heap grew by {grew} bytes during the call ({outcome})"
        );
        assert!(
            outcome.starts_with("trapped") && outcome.contains("too much data"),
            "{key}: {outcome}"
        );
    }
}
