//! Calls into a Rust plugin on a cache of 1,000 pods of 4 KB (generated, managedFields as a
//! server sends them, dropped on the way in as by default):
//! - `convert`: the host's own work for one event (lending its objects as handles);
//! - `deliver_noop`: that plus the call into a plugin that returns at once, for an update
//!   (old and new object) and for an add (one object);
//! - `query_*`: the call into a plugin that makes one query from its handler; minus
//!   `deliver_noop`, that is the query's latency as a plugin sees it: `get` one pod by a name
//!   the plugin knows, `select`
//!   the 10 pods matching a label selector (`select_wide`: none, by a selector of 800 values),
//!   `by_index` 10 or 1,000 pods through the built-in
//!   `label` index; `field` reads `/status/phase` through the handle (the last field of the
//!   pod's JSON, so the host walks all of it).
//!
//! The cases run in rounds side by side (`support/rounds.rs`): each sample times many calls in
//! a row, and a noisy spell of the shared machine falls on one round of every case. A query's
//! latency is taken against `deliver_noop` within each round.
//!
//! Run with `cargo bench -p kubewasm --bench queries`.

use std::sync::Arc;
use std::time::Duration;

use kubewasm::gvk::Gvk;
use kubewasm::informer::{Informer, Notification};
use kubewasm::object::{KubeObject, Transform};
use kubewasm::source::SourceEvent;
use kubewasm::wasm::handles::Handles;
use kubewasm::wasm::{Instance, convert};
use kubewasm_testenv::generate;
use serde_json::json;

#[path = "support/mod.rs"]
mod support;

use support::rounds::{self, Case, Plan};

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

const PODS: usize = 1000;

/// A cache of `PODS` pods; the first ten carry the label `group=ten`.
fn informer() -> Arc<Informer> {
    let informer = Arc::new(Informer::new(Gvk::new("", "v1", "Pod")));
    informer.apply(SourceEvent::ListStarted);
    for i in 0..PODS {
        let mut pod = generate::pod(i, 4096, 10 + i as u64);
        if i < 10 {
            pod["metadata"]["labels"]["group"] = json!("ten");
        }
        let object = KubeObject::from_value(pod, &Transform::default()).expect("valid pod");
        informer.apply(SourceEvent::Listed(Arc::new(object)));
    }
    informer.apply(SourceEvent::ListDone);
    informer
}

struct Fixture {
    instance: Instance,
    notification: Notification,
    added: Notification,
}

fn fixture(work: &str, arg: &str) -> Fixture {
    let informer = informer();
    let config = json!({"work": work, "arg": arg}).to_string();
    let instance = support::instance::instance(
        kubewasm_plugin_artifacts::BENCH,
        &config,
        std::slice::from_ref(&informer),
    );
    let pod = informer.store().get("bench-5/pod-5").expect("pod 5");
    Fixture {
        instance,
        notification: Notification::Updated {
            old: pod.clone(),
            new: pod.clone(),
        },
        added: Notification::Added {
            object: pod,
            initial: false,
        },
    }
}

/// A case that converts and handles one event: the add when `added`, else the update.
fn call(name: &'static str, work: &str, arg: &str, added: bool) -> Case<'static> {
    let mut f = fixture(work, arg);
    let notification = if added {
        f.added.clone()
    } else {
        f.notification.clone()
    };
    Case::new(name, move || {
        f.instance
            .handle(&notification)
            .expect("no trap")
            .expect("handled");
    })
}

/// `app in (...)` with 800 values of three letters, none of them the pods' `web`: a list
/// whose selector compares each pod's label with every value in turn unless the values are
/// searched (a hostile plugin's worst case within the 4 KiB selector limit).
fn wide_selector() -> String {
    // a00 to h99.
    let values: Vec<String> = (0..800)
        .map(|i| format!("{}{:02}", char::from(b'a' + (i / 100) as u8), i % 100))
        .collect();
    format!("app in ({})", values.join(","))
}

fn main() {
    support::logging::as_the_agent();
    let mut handles = Handles::default();
    let converted = fixture("noop", "").notification;
    let mut cases = vec![
        Case::new("convert", move || {
            std::hint::black_box(convert::event(&converted, &mut handles));
            handles.end_call();
        }),
        call("deliver_noop", "noop", "", false),
        call("deliver_noop_added", "noop", "", true),
        call("query_get", "get", "bench-5/pod-5", false),
        call("query_select_10", "select", "group=ten", false),
        call("query_select_wide", "select", &wide_selector(), false),
        call("query_by_index_10", "index", "group=ten", false),
        call("query_by_index_1000", "index", "app=web", false),
        call("query_field", "field", "/status/phase", false),
    ];
    // Nine cases of 20 ms a round: the run takes about 8 s.
    rounds::run(
        "queries",
        Plan::new(40, Duration::from_millis(20)),
        &mut cases,
    );
}
