//! What one changed file costs in a large manifests folder: 5,000 files of about 10 KB (the
//! size of the folder of real manifests the recovery round was checked on), one of them
//! edited, read as the folder's watcher reads a burst that names it, against reading the whole
//! folder again (what every change cost before). Each sample ends when the change has been
//! reported as an event.
//!
//! Run with `cargo bench -p kubewasm --bench folder`.

use std::path::Path;

use futures::{FutureExt, StreamExt};
use kubewasm::follow::Changes;
use kubewasm::gvk::Gvk;
use kubewasm::object::Transform;
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::source::{Source, SourceEvent};

/// The agent's allocator, so what is measured is what the agent does.
#[global_allocator]
static ALLOCATOR: kubewasm::Allocator = kubewasm::Allocator;

const FILES: usize = 5_000;

fn main() {
    divan::main();
}

fn manifest(i: usize, value: usize) -> String {
    let data = "x".repeat(10_000);
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  namespace: bench\n  labels: {{v: '{value}'}}\ndata:\n  blob: {data}\n"
    )
}

fn folder() -> (tempfile::TempDir, ManifestFolder) {
    let dir = tempfile::tempdir().expect("temp dir");
    for i in 0..FILES {
        std::fs::write(dir.path().join(format!("cm-{i}.yaml")), manifest(i, 0)).expect("write");
    }
    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("read");
    (dir, folder)
}

/// Edits one file, has `read` take the change, and waits for its event.
fn change_one(
    dir: &Path,
    stream: &mut futures::stream::BoxStream<'static, SourceEvent>,
    value: &mut usize,
    read: impl FnOnce(&Path),
) {
    *value += 1;
    let path = dir.join("cm-2500.yaml");
    std::fs::write(&path, manifest(2500, *value)).expect("write");
    read(&path);
    match stream.next().now_or_never() {
        Some(Some(SourceEvent::Applied(o))) => assert_eq!(o.name(), "cm-2500"),
        other => panic!("no event for the change: {other:?}"),
    }
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn one_changed_file(bencher: divan::Bencher) {
    let (dir, folder) = folder();
    let mut stream = folder.watch(
        &Gvk::new("", "v1", "ConfigMap"),
        &kubewasm::source::Scope::everything(),
    );
    while let Some(Some(e)) = stream.next().now_or_never() {
        if matches!(e, SourceEvent::ListDone) {
            break;
        }
    }
    let mut value = 0;
    bencher.bench_local(|| {
        change_one(dir.path(), &mut stream, &mut value, |path| {
            folder.apply_changes(Changes {
                paths: [path.to_owned()].into(),
                all: false,
            })
        })
    });
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn whole_folder_read_again(bencher: divan::Bencher) {
    let (dir, folder) = folder();
    let mut stream = folder.watch(
        &Gvk::new("", "v1", "ConfigMap"),
        &kubewasm::source::Scope::everything(),
    );
    while let Some(Some(e)) = stream.next().now_or_never() {
        if matches!(e, SourceEvent::ListDone) {
            break;
        }
    }
    let mut value = 0;
    bencher.bench_local(|| change_one(dir.path(), &mut stream, &mut value, |_| folder.rescan()));
}
