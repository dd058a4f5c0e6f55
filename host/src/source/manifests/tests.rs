use std::fs;
use std::time::Duration;

use futures::{FutureExt, StreamExt};

use crate::captured_log::logged;

use super::*;

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: NAME\n  namespace: ns\ndata:\n  k: VALUE\n";

fn cm(name: &str, value: &str) -> String {
    CM.replace("NAME", name).replace("VALUE", value)
}

fn configmaps() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

/// Folds events into short texts: `list[a,b]` (a whole list), `apply a`, `delete a`.
#[derive(Default)]
struct Describe {
    listing: Option<Vec<String>>,
}

impl Describe {
    /// The text `e` completes, if any.
    fn push(&mut self, e: &SourceEvent) -> Option<String> {
        match e {
            SourceEvent::ListStarted => {
                self.listing = Some(Vec::new());
                None
            }
            SourceEvent::Listed(o) => {
                self.listing
                    .get_or_insert_with(Vec::new)
                    .push(o.name().to_owned());
                None
            }
            SourceEvent::ListDone => {
                let names = self.listing.take().unwrap_or_default();
                Some(format!("list[{}]", names.join(",")))
            }
            SourceEvent::Applied(o) => Some(format!("apply {}", o.name())),
            SourceEvent::Deleted(o) => Some(format!("delete {}", o.name())),
            SourceEvent::NamespaceListStarted(ns) | SourceEvent::NamespaceListDone(ns) => {
                panic!("a folder lists whole types, not namespace {ns}")
            }
        }
    }
}

/// Everything the stream has ready now.
fn ready(stream: &mut BoxStream<'static, SourceEvent>) -> Vec<String> {
    let mut describe = Describe::default();
    let mut out = Vec::new();
    while let Some(Some(e)) = stream.next().now_or_never() {
        out.extend(describe.push(&e));
    }
    out
}

#[test]
fn lists_multi_document_yaml_json_and_list_kinds_by_type() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("a.yaml"),
        format!("{}---\n{}", cm("a", "1"), cm("b", "1")),
    )
    .expect("write");
    fs::create_dir(dir.path().join("sub")).expect("mkdir");
    fs::write(
        dir.path().join("sub/c.json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}"#,
    )
    .expect("write");
    fs::write(
        dir.path().join("list.yml"),
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: ns\n",
    )
    .expect("write");
    fs::write(dir.path().join(".hidden.yaml"), cm("hidden", "1")).expect("write");
    fs::write(dir.path().join("notes.txt"), "not a manifest").expect("write");

    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("open");
    assert_eq!(folder.len(), 4);
    let mut cms = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut cms), ["list[a,b,c]"]);
    let mut namespaces = folder.watch(
        &Gvk::new("", "v1", "Namespace"),
        &crate::source::Scope::everything(),
    );
    assert_eq!(ready(&mut namespaces), ["list[ns]"]);
}

#[test]
fn changes_become_applies_and_deletes_and_renames_are_silent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a.yaml");
    fs::write(&file, format!("{}---\n{}", cm("a", "1"), cm("b", "1"))).expect("write");
    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("open");
    let mut events = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut events), ["list[a,b]"]);

    // Edit one document, drop the other.
    fs::write(&file, cm("a", "2")).expect("write");
    folder.rescan();
    assert_eq!(ready(&mut events), ["apply a", "delete b"]);

    // Rename the file: same objects, no event.
    fs::rename(&file, dir.path().join("renamed.yaml")).expect("rename");
    folder.rescan();
    assert!(ready(&mut events).is_empty());

    // Rewrite with identical content: no event either.
    fs::write(dir.path().join("renamed.yaml"), cm("a", "2")).expect("write");
    folder.rescan();
    assert!(ready(&mut events).is_empty());

    fs::remove_file(dir.path().join("renamed.yaml")).expect("remove");
    folder.rescan();
    assert_eq!(ready(&mut events), ["delete a"]);
}

#[test]
fn resource_versions_grow_and_uids_are_derived_when_absent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a.yaml");
    fs::write(&file, cm("a", "1")).expect("write");
    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("open");
    let mut events = folder.watch(&configmaps(), &crate::source::Scope::everything());
    let (Some(Some(SourceEvent::ListStarted)), Some(Some(SourceEvent::Listed(first)))) =
        (events.next().now_or_never(), events.next().now_or_never())
    else {
        panic!("expected a list first");
    };
    assert!(matches!(
        events.next().now_or_never(),
        Some(Some(SourceEvent::ListDone))
    ));
    fs::write(&file, cm("a", "2")).expect("write");
    folder.rescan();
    let Some(Some(SourceEvent::Applied(second))) = events.next().now_or_never() else {
        panic!("expected an apply");
    };
    let rv = |o: &KubeObject| o.resource_version().parse::<u64>().expect("numeric rv");
    assert!(rv(&second) > rv(&first));
    assert_eq!(first.uid(), second.uid(), "uid is stable across edits");
    assert_eq!(first.uid().len(), 36);
    assert!(second.json().contains(second.resource_version()));
}

#[test]
fn names_and_namespaces_the_api_server_refuses_are_reported_per_document() {
    let dir = tempfile::tempdir().expect("temp dir");
    let doc = |name: &str, ns: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: '{name}', namespace: '{ns}'}}\n"
        )
    };
    let text = [
        doc("ok", "shop"),
        doc("a/../b", "shop"),
        doc("c", "Shop"),
        doc("..", "shop"),
    ]
    .join("---\n");
    fs::write(dir.path().join("a.yaml"), text).expect("write");
    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("open");
    let errors: Vec<String> = folder.errors().into_iter().map(|(_, e)| e).collect();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].starts_with("document 2 (line 5): field `metadata.name` may not contain `/`"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("document 3 (line 9): field `metadata.namespace` may hold only"),
        "{errors:?}"
    );
    assert!(
        errors[2].starts_with("document 4 (line 13): field `metadata.name` may not be `.`"),
        "{errors:?}"
    );
    let mut events = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut events), ["list[ok]"]);
}

#[test]
fn an_invalid_file_is_reported_and_keeps_its_last_good_objects() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a.yaml");
    fs::write(&file, cm("a", "1")).expect("write");
    fs::write(
        dir.path().join("broken.yaml"),
        "apiVersion: v1\nkind: [oops\n",
    )
    .expect("write");
    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("open");
    let errors = folder.errors();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].0.ends_with("broken.yaml"));

    let mut events = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut events), ["list[a]"]);

    // A half-written edit: a.yaml now fails to parse; a stays as it was.
    fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns\n",
    )
    .expect("write");
    folder.rescan();
    assert!(ready(&mut events).is_empty());
    assert_eq!(folder.len(), 1);
    let reasons: Vec<String> = folder.errors().into_iter().map(|(_, e)| e).collect();
    assert_eq!(reasons.len(), 2);

    // A document without a name is invalid too, and the message names the field.
    fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: ns}\n",
    )
    .expect("write");
    folder.rescan();
    let a_error = folder
        .errors()
        .into_iter()
        .find(|(p, _)| p.ends_with("a.yaml"))
        .map(|(_, e)| e)
        .expect("a.yaml has an error");
    assert!(a_error.contains("metadata.name"), "{a_error}");

    // Fixed: the edit lands as an update and the error clears.
    fs::write(&file, cm("a", "2")).expect("write");
    folder.rescan();
    assert_eq!(ready(&mut events), ["apply a"]);
    assert_eq!(folder.errors().len(), 1);
}

#[test]
fn missing_folder_is_a_clear_error() {
    let err = ManifestFolder::snapshot(Path::new("/no/such/folder"), Transform::default())
        .err()
        .expect("must fail");
    assert!(err.to_string().contains("/no/such/folder"), "{err}");
}

#[tokio::test]
async fn follows_file_changes_through_the_watcher() {
    let dir = tempfile::tempdir().expect("temp dir");
    follows_changes(dir.path()).await;
}

/// `kubewasm run --cluster target/demo/cluster`: a folder named relative to the working
/// folder, whose changes the watcher reports as absolute paths.
#[tokio::test]
async fn follows_file_changes_in_a_folder_named_by_a_relative_path() {
    let dir = tempfile::Builder::new()
        .prefix("manifests-test")
        .tempdir_in(".")
        .expect("temp dir");
    let here = std::env::current_dir().expect("working folder");
    let relative = dir
        .path()
        .strip_prefix(&here)
        .expect("made in the working folder");
    assert!(relative.is_relative(), "{}", relative.display());
    follows_changes(relative).await;
}

/// Opens `dir` and checks a file written, edited and removed there is added, changed and
/// deleted.
async fn follows_changes(dir: &Path) {
    let folder = ManifestFolder::open(dir, Transform::default()).expect("open");
    let mut events = folder.watch(&configmaps(), &crate::source::Scope::everything());
    let mut describe = Describe::default();
    let mut next = async |events: &mut BoxStream<'static, SourceEvent>| loop {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10 s")
            .expect("stream open");
        if let Some(text) = describe.push(&e) {
            return text;
        }
    };
    assert_eq!(next(&mut events).await, "list[]");
    fs::write(dir.join("a.yaml"), cm("a", "1")).expect("write");
    assert_eq!(next(&mut events).await, "apply a");
    fs::write(dir.join("a.yaml"), cm("a", "2")).expect("write");
    assert_eq!(next(&mut events).await, "apply a");
    fs::remove_file(dir.join("a.yaml")).expect("remove");
    assert_eq!(next(&mut events).await, "delete a");
}

#[test]
fn special_files_are_never_opened_and_symlink_loops_are_read_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.yaml"), cm("a", "1")).expect("write");
    fs::create_dir(dir.path().join("sub")).expect("mkdir");
    fs::write(dir.path().join("sub/b.yaml"), cm("b", "1")).expect("write");
    // A loop back to the root, and a FIFO named like a manifest: reading it would block.
    std::os::unix::fs::symlink(dir.path(), dir.path().join("sub/loop")).expect("symlink");
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe.yaml"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let (files, skipped) = manifest_files(dir.path());
    let names: Vec<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(dir.path())
                .expect("inside")
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["a.yaml", "sub/b.yaml"], "each file once");
    let reasons: Vec<Skipped> = skipped.values().cloned().collect();
    assert_eq!(
        reasons,
        [Skipped::NotRegular, Skipped::ReadAlready],
        "{skipped:?}"
    );
    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("reads");
    assert_eq!(folder.len(), 2);
}

fn open(dir: &Path) -> ManifestFolder {
    ManifestFolder::snapshot(dir, Transform::default()).expect("open")
}

/// The objects a fresh watch of `gvk` lists, as `namespace/name` keys.
fn keys(folder: &ManifestFolder, gvk: &Gvk) -> Vec<String> {
    let mut events = folder.watch(gvk, &crate::source::Scope::everything());
    let mut keys = Vec::new();
    while let Some(Some(e)) = events.next().now_or_never() {
        if let SourceEvent::Listed(o) = e {
            keys.push(o.key().to_owned());
        }
    }
    keys
}

#[test]
fn an_edit_is_seen_even_when_the_file_sets_a_resource_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a.yaml");
    let with_rv = |value: &str| {
        cm("a", value).replace("  name: a\n", "  name: a\n  resourceVersion: \"5\"\n")
    };
    fs::write(&file, with_rv("1")).expect("write");
    let folder = open(dir.path());
    let mut events = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut events), ["list[a]"]);
    fs::write(&file, with_rv("2")).expect("write");
    folder.rescan();
    assert_eq!(ready(&mut events), ["apply a"]);
    let cached = folder
        .shared
        .state()
        .objects
        .values()
        .next()
        .map(|r| r.object.clone());
    let cached = cached.expect("a");
    assert!(cached.json().contains(r#""k":2"#), "{}", cached.json());
    assert_ne!(
        cached.resource_version(),
        "5",
        "the folder sets versions itself"
    );
}

#[test]
fn a_bad_document_costs_only_itself_and_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let task = "apiVersion: tekton.dev/v1\nkind: Task\nmetadata:\n  name: build\n  namespace: ci\n";
    let run = "apiVersion: tekton.dev/v1\nkind: PipelineRun\nmetadata:\n  generateName: build-\n  namespace: ci\n";
    let dup = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d\n  name: e\n";
    fs::write(
        dir.path().join("ci.yaml"),
        format!("{task}---\n{run}---\n{dup}---\n{}", cm("ok", "1")),
    )
    .expect("write");
    let folder = open(dir.path());
    assert_eq!(
        keys(&folder, &Gvk::new("tekton.dev", "v1", "Task")),
        ["ci/build"]
    );
    assert_eq!(keys(&folder, &configmaps()), ["ns/ok"]);
    let errors: Vec<String> = folder
        .errors()
        .into_iter()
        .map(|(p, e)| {
            assert!(p.ends_with("ci.yaml"));
            e
        })
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("document 2 (line 7): ") && errors[0].contains("generateName"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("document 3 (line 13): ") && errors[1].contains("name"),
        "{errors:?}"
    );
}

#[test]
fn namespaces_are_placed_as_kubectl_places_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("a.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: no-ns}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: team, namespace: wrong}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n---\napiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g, namespace: here}\n",
    )
    .expect("write");
    let folder = open(dir.path());
    assert_eq!(keys(&folder, &configmaps()), ["default/no-ns"]);
    let lines = logged(|| folder.rescan());
    assert!(
        lines.is_empty(),
        "nothing changed, nothing logged: {lines:?}"
    );
    assert_eq!(keys(&folder, &Gvk::new("", "v1", "Namespace")), ["team"]);
    let widgets = Gvk::new("example.com", "v1", "Widget");
    let gadgets = Gvk::new("example.com", "v1", "Gadget");
    // Unknown kinds are taken as written.
    assert_eq!(keys(&folder, &widgets), ["w"]);
    assert_eq!(keys(&folder, &gadgets), ["here/g"]);
    // Definitions in the folder decide: Widget namespaced, Gadget cluster-scoped.
    let crd = |kind: &str, scope: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {kind}s.example.com}}\nspec:\n  group: example.com\n  scope: {scope}\n  names: {{kind: {kind}, plural: {kind}s}}\n"
        )
    };
    fs::write(
        dir.path().join("crds.yaml"),
        format!(
            "{}---\n{}",
            crd("Widget", "Namespaced"),
            crd("Gadget", "Cluster")
        ),
    )
    .expect("write");
    let mut watch = folder.watch(&widgets, &crate::source::Scope::everything());
    ready(&mut watch);
    let lines = logged(|| folder.rescan());
    assert_eq!(ready(&mut watch), ["apply w", "delete w"]);
    assert_eq!(keys(&folder, &widgets), ["default/w"]);
    assert_eq!(keys(&folder, &gadgets), ["g"]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("Gadget g is cluster-scoped")
                && l.contains("here")
                && l.contains("a.yaml")),
        "{lines:?}"
    );
}

#[test]
fn problems_are_logged_when_they_appear_and_when_they_clear() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.yaml"), cm("a", "1")).expect("write");
    fs::write(dir.path().join("b.yaml"), cm("a", "2")).expect("write");
    fs::write(dir.path().join("c.yaml"), "kind: [oops\n").expect("write");
    let mut folder = None;
    let first = logged(|| folder = Some(open(dir.path())));
    let folder = folder.expect("open");
    let count = |lines: &[String], text: &str| lines.iter().filter(|l| l.contains(text)).count();
    assert_eq!(count(&first, "defined twice"), 1, "{first:?}");
    assert_eq!(count(&first, "c.yaml"), 1, "{first:?}");
    let again = logged(|| folder.rescan());
    assert!(
        again.is_empty(),
        "an unchanged folder logs nothing: {again:?}"
    );
    fs::remove_file(dir.path().join("b.yaml")).expect("remove");
    fs::write(dir.path().join("c.yaml"), cm("c", "1")).expect("write");
    let cleared = logged(|| folder.rescan());
    assert_eq!(count(&cleared, "no longer defined twice"), 1, "{cleared:?}");
    assert_eq!(count(&cleared, "valid again"), 1, "{cleared:?}");
}

#[test]
fn empty_files_hold_no_objects_in_either_format() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.json"), "").expect("write");
    fs::write(dir.path().join("b.yaml"), "").expect("write");
    fs::write(dir.path().join("c.json"), "\u{feff}").expect("write");
    let folder = open(dir.path());
    assert!(folder.errors().is_empty(), "{:?}", folder.errors());
    assert!(folder.is_empty());
}

#[test]
fn a_configured_namespace_takes_the_place_of_default() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("a.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: no-ns}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: has-ns, namespace: x}\n",
    )
    .expect("write");
    let folder =
        ManifestFolder::snapshot_in(dir.path(), Transform::default(), "team").expect("open");
    assert_eq!(keys(&folder, &configmaps()), ["team/no-ns", "x/has-ns"]);
}

/// Changes naming `paths` under `dir`.
fn changes(dir: &Path, paths: &[&str]) -> crate::follow::Changes {
    crate::follow::Changes {
        paths: paths.iter().map(|p| dir.join(p)).collect(),
        all: false,
    }
}

#[test]
fn a_change_costs_the_files_it_names_not_the_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    for i in 0..100 {
        fs::write(
            dir.path().join(format!("cm-{i}.yaml")),
            cm(&format!("c{i}"), "1"),
        )
        .expect("write");
    }
    let folder = ManifestFolder::snapshot(dir.path(), Transform::default()).expect("open");
    let mut stream = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut stream).len(), 1, "the list");
    let read = folder.files_read();

    // One file edited, one removed, one added: three files read, three events.
    fs::write(dir.path().join("cm-7.yaml"), cm("c7", "2")).expect("write");
    fs::remove_file(dir.path().join("cm-8.yaml")).expect("remove");
    fs::write(dir.path().join("new.yaml"), cm("fresh", "1")).expect("write");
    // An editor's swap file is no manifest and costs nothing.
    fs::write(dir.path().join(".cm-7.yaml.swp"), "x").expect("write");
    folder.apply_changes(changes(
        dir.path(),
        &["cm-7.yaml", "cm-8.yaml", "new.yaml", ".cm-7.yaml.swp"],
    ));
    assert_eq!(folder.files_read() - read, 2, "the edited and the new file");
    let mut events = ready(&mut stream);
    events.sort();
    assert_eq!(events, ["apply c7", "apply fresh", "delete c8"]);

    // A folder changing (or changes that may have been missed) reads everything again.
    fs::create_dir(dir.path().join("sub")).expect("mkdir");
    fs::write(dir.path().join("sub/s.yaml"), cm("s", "1")).expect("write");
    let read = folder.files_read();
    folder.apply_changes(changes(dir.path(), &["sub"]));
    assert_eq!(folder.files_read() - read, 101);
    assert_eq!(ready(&mut stream), ["apply s"]);
    let read = folder.files_read();
    folder.apply_changes(crate::follow::Changes {
        all: true,
        ..Default::default()
    });
    assert_eq!(folder.files_read() - read, 101);
    assert!(ready(&mut stream).is_empty(), "nothing changed");

    // A removed folder takes its manifests with it.
    fs::remove_dir_all(dir.path().join("sub")).expect("remove");
    folder.apply_changes(changes(dir.path(), &["sub"]));
    assert_eq!(ready(&mut stream), ["delete s"]);
}

#[test]
fn the_folder_reads_what_kubectl_reads_case_by_case() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).expect("write");
    // go-yaml's layout: a quoted value continued at its key's indentation.
    write(
        "quoted.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: quoted\n  namespace: ns\ndata:\n  text: \"a long\n  value\"\n",
    );
    // A cluster-scoped object's namespace is dropped, so it is not checked.
    write(
        "binding.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: b\n  namespace: \"${NAMESPACE:-default}\"\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\n",
    );
    // A .json file holding YAML: kubectl decides by content.
    write("yaml-in.json", &cm("in-json", "1"));
    // A null label or annotation value reads as empty, as the API server reads it.
    write(
        "nulls.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nulls\n  namespace: ns\n  labels: {a: null}\n  annotations: {b: ~}\n",
    );
    // Versions no API server serves any more, and an apiVersion without a version.
    write(
        "psp.yaml",
        "apiVersion: policy/v1beta1\nkind: PodSecurityPolicy\nmetadata: {name: old}\n",
    );
    write(
        "old-deployment.yaml",
        "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: old, namespace: ns}\n",
    );
    write(
        "no-version.yaml",
        "apiVersion: apps/\nkind: Deployment\nmetadata: {name: x, namespace: ns}\n",
    );
    let folder = open(dir.path());
    let cms = keys(&folder, &configmaps());
    assert_eq!(cms, ["ns/in-json", "ns/nulls", "ns/quoted"]);
    let mut events = folder.watch(&configmaps(), &crate::source::Scope::everything());
    while let Some(Some(e)) = events.next().now_or_never() {
        if let SourceEvent::Listed(o) = e {
            let json: Value = serde_json::from_str(&o.json()).expect("JSON");
            match o.name() {
                "quoted" => assert_eq!(json["data"]["text"], "a long value"),
                "nulls" => {
                    assert_eq!(json["metadata"]["labels"]["a"], "");
                    assert_eq!(o.label("a"), Some(""));
                }
                _ => {}
            }
        }
    }
    let binding = Gvk::new("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding");
    assert_eq!(
        keys(&folder, &binding),
        ["b"],
        "cluster-scoped, namespace dropped"
    );
    let errors = folder.errors();
    let error_of = |file: &str| {
        errors
            .iter()
            .find(|(p, _)| p.ends_with(file))
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("no error for {file}: {errors:?}"))
    };
    assert!(error_of("psp.yaml").contains("removed in Kubernetes 1.25"));
    assert!(error_of("old-deployment.yaml").contains("no matches for kind \"Deployment\""));
    assert!(error_of("no-version.yaml").contains("group/version"));
    assert_eq!(errors.len(), 3, "{errors:?}");
}

#[test]
fn a_document_removed_beside_a_bad_one_is_deleted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("two.yaml");
    fs::write(&path, format!("{}---\n{}", cm("a", "1"), cm("b", "1"))).expect("write");
    let folder = open(dir.path());
    let mut stream = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut stream), ["list[a,b]"]);
    // b half-saved (broken): a half-saved edit deletes nothing.
    fs::write(
        &path,
        format!("{}---\n{}  bad: [\n", cm("a", "1"), cm("b", "1")),
    )
    .expect("write");
    folder.rescan();
    assert!(ready(&mut stream).is_empty(), "b kept while broken");
    // a removed, b still broken: b stays, a goes.
    fs::write(&path, format!("{}  bad: [\n", cm("b", "1"))).expect("write");
    folder.rescan();
    assert_eq!(ready(&mut stream), ["delete a"]);
}

#[test]
fn removing_a_definition_leaves_its_objects_where_they_were() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("crd.yaml"),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec: {group: example.com, scope: Namespaced, names: {kind: Widget, plural: widgets}}\n",
    )
    .expect("write");
    fs::write(
        dir.path().join("w.yaml"),
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
    )
    .expect("write");
    let folder = open(dir.path());
    let widget = Gvk::new("example.com", "v1", "Widget");
    assert_eq!(keys(&folder, &widget), ["default/w"]);
    let mut stream = folder.watch(&widget, &crate::source::Scope::everything());
    assert_eq!(ready(&mut stream), ["list[w]"]);
    fs::remove_file(dir.path().join("crd.yaml")).expect("remove");
    folder.rescan();
    assert!(ready(&mut stream).is_empty(), "not moved to another key");
    assert_eq!(keys(&folder, &widget), ["default/w"]);
}

/// A small deterministic generator (xorshift): a failing sequence replays from its seed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Every object the folder holds now, by type and key, as JSON without its resource version.
fn contents(folder: &ManifestFolder) -> BTreeMap<String, String> {
    folder
        .shared
        .state()
        .objects
        .iter()
        .map(|((gvk, key), r)| {
            let mut value: Value = serde_json::from_str(&r.object.json()).expect("json");
            if let Some(Value::Object(meta)) = value.get_mut("metadata") {
                meta.remove("resourceVersion");
            }
            (format!("{gvk} {key}"), value.to_string())
        })
        .collect()
}

/// One random file body: objects defined once or twice, broken files, definitions that come,
/// go and change scope, custom objects without a namespace.
fn random_file(dice: &mut Dice) -> Option<String> {
    let name = |dice: &mut Dice| ["a", "b", "c"][dice.roll(3)];
    let value = |dice: &mut Dice| ["1", "2"][dice.roll(2)];
    Some(match dice.roll(9) {
        0 | 1 => cm(name(dice), value(dice)),
        2 => format!(
            "{}---\n{}",
            cm(name(dice), value(dice)),
            cm(name(dice), value(dice))
        ),
        3 => format!(
            "{}---\n{}  bad: [\n",
            cm(name(dice), value(dice)),
            cm(name(dice), "1")
        ),
        4 => "a: [\n".into(),
        5 => String::new(),
        6 => format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: widgets.example.com}}\nspec: {{group: example.com, scope: {}, names: {{kind: Widget, plural: widgets}}}}\n",
            ["Namespaced", "Cluster"][dice.roll(2)]
        ),
        7 => format!(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: {}{}}}\nspec: {{v: {}}}\n",
            name(dice),
            ["", ", namespace: ns"][dice.roll(2)],
            value(dice)
        ),
        _ => return None,
    })
}

#[test]
fn a_change_read_per_file_ends_where_reading_the_whole_folder_ends() {
    for seed in 1..=40u64 {
        let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let dir = tempfile::tempdir().expect("temp dir");
        let per_file = open(dir.path());
        let whole = open(dir.path());
        for step in 0..30 {
            let mut touched = Vec::new();
            for _ in 0..=dice.roll(2) {
                let file = format!("f{}.yaml", dice.roll(5));
                let path = dir.path().join(&file);
                match random_file(&mut dice) {
                    Some(body) => fs::write(&path, body).expect("write"),
                    None => {
                        let _ = fs::remove_file(&path);
                    }
                }
                touched.push(file);
            }
            let touched: Vec<&str> = touched.iter().map(String::as_str).collect();
            per_file.apply_changes(changes(dir.path(), &touched));
            whole.rescan();
            assert_eq!(
                contents(&per_file),
                contents(&whole),
                "seed {seed}, step {step}, touched {touched:?}"
            );
            assert_eq!(
                per_file.errors(),
                whole.errors(),
                "seed {seed}, step {step}"
            );
        }
    }
}

#[test]
fn a_plugins_write_to_the_folder_is_logged_at_info() {
    use crate::write::{Action, Target, Write, Writer};
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.yaml"), cm("a", "1")).expect("write");
    let folder = open(dir.path());
    let write = Write {
        target: Target {
            gvk: configmaps(),
            namespace: Some("ns".into()),
            name: "a".into(),
            subresource: None,
        },
        action: Action::MergePatch(r#"{"data":{"k":"2"}}"#.into()),
    };
    let lines = logged(|| folder.send("labeler", &write).expect("applied"));
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(
        line.contains(" INFO ")
            && line.contains("plugin=\"labeler\"")
            && line.contains("verb=\"merge-patch\"")
            && line.contains("ns/a"),
        "{line}"
    );
}

#[test]
fn a_dry_run_answers_what_a_write_would_leave_and_changes_nothing() {
    use crate::write::{Action, DeleteOptions, Target, Write, Writer};
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.yaml"), cm("a", "1")).expect("write");
    let folder = open(dir.path());
    let before = contents(&folder);
    let target = Target {
        gvk: configmaps(),
        namespace: Some("ns".into()),
        name: "a".into(),
        subresource: None,
    };
    let write = |action| Write {
        target: target.clone(),
        action,
    };
    let within = std::time::Duration::from_secs(1);
    let patched = folder
        .dry_run(
            "p",
            &write(Action::MergePatch(r#"{"data":{"k":"2"}}"#.into())),
            within,
        )
        .expect("accepted")
        .expect("an object");
    assert_eq!(patched.pointer("/data/k"), Some(&serde_json::json!("2")));
    let deleted = folder
        .dry_run(
            "p",
            &write(Action::Delete(DeleteOptions::default())),
            within,
        )
        .expect("accepted");
    assert_eq!(deleted, None);
    let renamed = folder.dry_run(
        "p",
        &write(Action::MergePatch(r#"{"metadata":{"name":"b"}}"#.into())),
        within,
    );
    assert_eq!(renamed.expect_err("refused").reason, "Invalid");
    let missing = Write {
        target: Target {
            name: "nope".into(),
            ..target.clone()
        },
        action: Action::MergePatch("{}".into()),
    };
    assert_eq!(
        folder
            .dry_run("p", &missing, within)
            .expect_err("refused")
            .reason,
        "NotFound"
    );
    assert_eq!(
        contents(&folder),
        before,
        "a dry run changed the folder's objects"
    );
}

#[test]
fn each_watch_gets_objects_cut_to_what_its_scope_keeps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a.yaml");
    let two = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n  labels:\n    team: shop\ndata:\n  k: \"1\"\n  other: \"2\"\n";
    fs::write(&file, two).expect("write");
    let mut opened = None;
    let lines = logged(|| {
        opened = Some(ManifestFolder::snapshot(dir.path(), Transform::default()).expect("open"));
    });
    let folder = opened.expect("opened");
    assert_eq!(folder.len(), 1, "{lines:?}");
    let keep_k =
        crate::source::Scope::everything().keeping(crate::object::Keep::fields(&["/data/k"]));
    let meta = crate::source::Scope::everything().keeping(crate::object::Keep::MetadataOnly);
    let mut whole = folder.watch(&configmaps(), &crate::source::Scope::everything());
    let mut cut = folder.watch(&configmaps(), &keep_k);
    let mut bare = folder.watch(&configmaps(), &meta);
    let objects = |stream: &mut BoxStream<'static, SourceEvent>| -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        while let Some(Some(e)) = stream.next().now_or_never() {
            if let SourceEvent::Listed(o) | SourceEvent::Applied(o) = e {
                out.push(serde_json::from_str(&o.json()).expect("json"));
            }
        }
        out
    };
    let data = |v: &serde_json::Value| v.get("data").cloned().unwrap_or_default();
    assert_eq!(
        data(&objects(&mut whole)[0]),
        serde_json::json!({"k": "1", "other": "2"})
    );
    assert_eq!(data(&objects(&mut cut)[0]), serde_json::json!({"k": "1"}));
    let listed = objects(&mut bare);
    assert!(listed[0].get("data").is_none(), "{}", listed[0]);
    assert_eq!(
        listed[0]["metadata"]["labels"]["team"], "shop",
        "metadata is kept"
    );

    // A change reaches each watch cut its own way too.
    fs::write(&file, two.replace("k: \"1\"", "k: \"3\"")).expect("write");
    folder.rescan();
    assert_eq!(data(&objects(&mut whole)[0])["other"], "2");
    assert_eq!(data(&objects(&mut cut)[0]), serde_json::json!({"k": "3"}));
    assert!(objects(&mut bare)[0].get("data").is_none());
}

#[test]
fn broken_symlinks_named_like_manifests_are_each_said_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.yaml"), cm("a", "1")).expect("write");
    let link = |target: &str, name: &str| {
        std::os::unix::fs::symlink(dir.path().join(target), dir.path().join(name)).expect("symlink")
    };
    link("self.yaml", "self.yaml");
    link("b.yaml", "a-loop.yaml");
    link("a-loop.yaml", "b.yaml");
    link("gone.yaml", "dangling.yaml");
    link("gone", "not-a-manifest");
    let (_, skipped) = manifest_files(dir.path());
    let names: Vec<String> = skipped
        .iter()
        .map(|(p, why)| {
            assert!(matches!(why, Skipped::Unreachable(_)), "{why:?}");
            p.file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        ["a-loop.yaml", "b.yaml", "dangling.yaml", "self.yaml"]
    );
    let mut folder = None;
    let lines = logged(|| folder = Some(open(dir.path())));
    let folder = folder.expect("open");
    assert_eq!(folder.len(), 1);
    for name in ["a-loop.yaml", "b.yaml", "dangling.yaml", "self.yaml"] {
        let said: Vec<&String> = lines.iter().filter(|l| l.contains(name)).collect();
        assert_eq!(said.len(), 1, "{name}: {lines:?}");
        assert!(said[0].contains("cannot follow this symlink"), "{said:?}");
    }
    let again = logged(|| folder.rescan());
    assert!(again.is_empty(), "said once: {again:?}");
}

#[test]
fn a_bad_document_holds_only_objects_of_its_own_kind_and_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("two.yaml");
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: ns\n";
    fs::write(&path, format!("{}---\n{secret}", cm("a", "1"))).expect("write");
    let folder = open(dir.path());
    let mut stream = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut stream), ["list[a]"]);
    // The ConfigMap removed; the Secret now has only generateName, which the folder refuses.
    fs::write(
        &path,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  generateName: s-\n  namespace: ns\n",
    )
    .expect("write");
    folder.rescan();
    assert_eq!(
        ready(&mut stream),
        ["delete a"],
        "a Secret without a name cannot be the ConfigMap"
    );
    assert_eq!(
        keys(&folder, &Gvk::new("", "v1", "Secret")),
        ["ns/s"],
        "kept"
    );
}

#[test]
fn after_a_yaml_syntax_error_a_file_is_not_read_on_as_kubectl_stops_there() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("three.yaml");
    fs::write(
        &path,
        format!("{}---\nkind: [oops\n---\n{}", cm("a", "1"), cm("c", "1")),
    )
    .expect("write");
    let folder = open(dir.path());
    assert_eq!(
        keys(&folder, &configmaps()),
        ["ns/a"],
        "c, after the error, is not read"
    );
    let errors = folder.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].1.contains("the 1 document after it is not read"),
        "{errors:?}"
    );
    // A file that held c before the error came keeps it while the error stays.
    fs::write(&path, format!("{}---\n{}", cm("a", "1"), cm("c", "1"))).expect("write");
    folder.rescan();
    let mut stream = folder.watch(&configmaps(), &crate::source::Scope::everything());
    assert_eq!(ready(&mut stream), ["list[a,c]"]);
    fs::write(
        &path,
        format!("{}---\nkind: [oops\n---\n{}", cm("a", "1"), cm("c", "2")),
    )
    .expect("write");
    folder.rescan();
    assert!(ready(&mut stream).is_empty(), "c kept as it was");
}

#[test]
fn a_list_with_an_item_that_is_no_object_loads_none_of_its_items() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("list.yaml"),
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: ns}}\n- 42\n",
    )
    .expect("write");
    let folder = open(dir.path());
    assert!(folder.is_empty());
    let errors = folder.errors();
    assert!(
        errors.len() == 1
            && errors[0]
                .1
                .contains("item 2 of the List is not an object but a number"),
        "{errors:?}"
    );
}

#[test]
fn kinds_a_built_in_group_does_not_have_are_refused_as_kubectl_refuses_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Each case is in scope.rs; here, that the folder refuses what `unserved` refuses.
    for (file, api_version, kind) in [
        ("deployment.yaml", "v1", "Deployment"),
        ("gateway.yaml", "gateway.networking.k8s.io/v1", "Gateway"),
    ] {
        fs::write(
            dir.path().join(file),
            format!(
                "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: x, namespace: ns}}\n"
            ),
        )
        .expect("write");
    }
    let folder = open(dir.path());
    let errors = folder.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].0.ends_with("deployment.yaml") && errors[0].1.contains("no matches for kind"),
        "{errors:?}"
    );
    // A third-party group named like a built-in one is taken as written.
    assert_eq!(
        keys(
            &folder,
            &Gvk::new("gateway.networking.k8s.io", "v1", "Gateway")
        ),
        ["ns/x"]
    );
}

#[test]
fn a_files_unchanged_problems_are_not_logged_again_when_it_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("a.yaml");
    let bad = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: x-\n";
    fs::write(&path, format!("{bad}---\n{}", cm("a", "1"))).expect("write");
    let mut folder = None;
    let first = logged(|| folder = Some(open(dir.path())));
    let folder = folder.expect("open");
    let count = |lines: &[String]| lines.iter().filter(|l| l.contains("generateName")).count();
    assert_eq!(count(&first), 1, "{first:?}");
    fs::write(&path, format!("{bad}---\n{}", cm("a", "2"))).expect("write");
    let changed = logged(|| folder.rescan());
    assert_eq!(count(&changed), 0, "{changed:?}");
}
