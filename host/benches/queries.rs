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
//! Each sample times many calls in a row (`sample_size`), so a median is not at the mercy of
//! one slow call on a shared machine.
//!
//! Run with `cargo bench -p kubewasm --bench queries`.

use std::sync::Arc;

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

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

fn main() {
    support::logging::as_the_agent();
    divan::main();
}

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

/// Times converting and handling one event; `added` picks the add, else the update.
fn call(bencher: divan::Bencher, work: &str, arg: &str, added: bool) {
    let mut f = fixture(work, arg);
    let notification = if added {
        f.added.clone()
    } else {
        f.notification.clone()
    };
    bencher.bench_local(|| {
        f.instance
            .handle(&notification)
            .expect("no trap")
            .expect("handled");
    });
}

#[divan::bench(sample_count = 100, sample_size = 100)]
fn convert(bencher: divan::Bencher) {
    let f = fixture("noop", "");
    let mut handles = Handles::default();
    bencher.bench_local(|| {
        std::hint::black_box(convert::event(&f.notification, &mut handles));
        handles.end_call();
    });
}

#[divan::bench(sample_count = 100, sample_size = 100)]
fn deliver_noop(bencher: divan::Bencher) {
    call(bencher, "noop", "", false);
}

#[divan::bench(sample_count = 100, sample_size = 100)]
fn deliver_noop_added(bencher: divan::Bencher) {
    call(bencher, "noop", "", true);
}

#[divan::bench(sample_count = 100, sample_size = 100)]
fn query_get(bencher: divan::Bencher) {
    call(bencher, "get", "bench-5/pod-5", false);
}

#[divan::bench(sample_count = 100, sample_size = 10)]
fn query_select_10(bencher: divan::Bencher) {
    call(bencher, "select", "group=ten", false);
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

#[divan::bench(sample_count = 100, sample_size = 5)]
fn query_select_wide(bencher: divan::Bencher) {
    call(bencher, "select", &wide_selector(), false);
}

#[divan::bench(sample_count = 100, sample_size = 100)]
fn query_by_index_10(bencher: divan::Bencher) {
    call(bencher, "index", "group=ten", false);
}

#[divan::bench(sample_count = 100, sample_size = 5)]
fn query_by_index_1000(bencher: divan::Bencher) {
    call(bencher, "index", "app=web", false);
}

#[divan::bench(sample_count = 100, sample_size = 100)]
fn query_field(bencher: divan::Bencher) {
    call(bencher, "field", "/status/phase", false);
}
