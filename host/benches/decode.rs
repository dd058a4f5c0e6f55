//! Decoding one watch line into a cached object, as the reflector does for every event: a
//! MODIFIED line of a generated pod (managedFields as a server sends them, dropped on the way
//! in as by default), against what a JSON tree of the same line costs with serde_json.
//!
//! Run with `cargo bench -p kubewasm --bench decode`.

use std::sync::Arc;

use kubewasm::gvk::Gvk;
use kubewasm::object::Transform;
use kubewasm::source::kube::wire::{self, WatchEvent};
use kubewasm_testenv::generate;

fn main() {
    divan::main();
}

/// A MODIFIED line of a pod of about `bytes` bytes.
fn line(bytes: usize) -> String {
    let pod = generate::pod(7, bytes, 42);
    format!(r#"{{"type":"MODIFIED","object":{pod}}}"#)
}

#[divan::bench(args = [1024, 4096, 16384], sample_count = 100, sample_size = 50)]
fn watch_line(bencher: divan::Bencher, bytes: usize) {
    let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
    let line = line(bytes);
    let transform = Transform::default();
    bencher.bench_local(|| {
        let event = wire::watch_line(&gvk, &line, &transform).expect("decodes");
        assert!(matches!(event, WatchEvent::Modified(_)));
        event
    });
}

#[divan::bench(args = [1024, 4096, 16384], sample_count = 100, sample_size = 50)]
fn serde_json_tree(bencher: divan::Bencher, bytes: usize) {
    let line = line(bytes);
    bencher.bench_local(|| serde_json::from_str::<serde_json::Value>(&line).expect("parses"));
}
