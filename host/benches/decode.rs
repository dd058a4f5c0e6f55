//! Decoding what the API server sends into cached objects: one MODIFIED watch line of a
//! generated pod (managedFields as a server sends them, dropped on the way in as by default)
//! against a serde_json tree of the same line, the same pod's metadata as a metadata watch
//! sends it, and a list page of 500 pods read in one pass
//! against reading it into a copy of each item first.
//!
//! Run with `cargo bench -p kubewasm --bench decode`.

use std::sync::Arc;

use kubewasm::gvk::Gvk;
use kubewasm::object::{Keep, Transform};
use kubewasm::source::kube::wire::{self, WatchEvent};
use kubewasm_testenv::generate;

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

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

/// The same line as a metadata watch sends it (`PartialObjectMetadata`, managedFields
/// included), decoded keeping metadata only.
#[divan::bench(args = [4096], sample_count = 100, sample_size = 50)]
fn watch_line_metadata(bencher: divan::Bencher, bytes: usize) {
    let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
    let pod = generate::pod(7, bytes, 42);
    let line = format!(
        r#"{{"type":"MODIFIED","object":{}}}"#,
        serde_json::json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                           "metadata": pod["metadata"]})
    );
    let transform = Transform::default().keeping(Keep::MetadataOnly);
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

/// A list page of 500 pods of about `bytes` bytes, as the API server sends one.
fn page(bytes: usize) -> String {
    let items: Vec<String> = (0..500)
        .map(|i| {
            let mut pod = generate::pod(i, bytes, 42);
            if let Some(o) = pod.as_object_mut() {
                o.remove("apiVersion");
                o.remove("kind");
            }
            pod.to_string()
        })
        .collect();
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"42"}},"items":[{}]}}"#,
        items.join(",")
    )
}

/// A page read in one pass, each item decoded where it lies in the response's text, as the
/// reflector does.
#[divan::bench(args = [4096], sample_count = 20, sample_size = 2)]
fn list_page(bencher: divan::Bencher, bytes: usize) {
    let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
    let text = page(bytes);
    let transform = Transform::default();
    bencher.bench_local(|| {
        let page = wire::Page::parse(&text, &gvk, &transform).expect("a page");
        assert!(page.objects.iter().all(Result::is_ok));
        assert_eq!(page.objects.len(), 500);
        page
    });
}

/// The same page read by serde_json into a copy of each item, then decoded: the reflector's
/// way before it read pages in place.
#[divan::bench(args = [4096], sample_count = 20, sample_size = 2)]
fn list_page_copied_items(bencher: divan::Bencher, bytes: usize) {
    #[derive(serde::Deserialize)]
    struct Copied {
        items: Vec<Box<serde_json::value::RawValue>>,
    }
    let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
    let text = page(bytes);
    let transform = Transform::default();
    bencher.bench_local(|| {
        let page: Copied = serde_json::from_str(&text).expect("a page");
        let objects: Vec<_> = page
            .items
            .iter()
            .map(|i| wire::object(&gvk, i.get(), &transform).expect("decodes"))
            .collect();
        assert_eq!(objects.len(), 500);
        objects
    });
}
