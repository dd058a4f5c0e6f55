//! Controllers (contract 0.5) on the manifests folder, with the example namespace provisioner:
//! children applied with their parent's ownerReference and apply-set label, pruned when no
//! longer applied and never when not the parent's; events that arrive while a key is being
//! reconciled fold into one more reconcile; a finalizer is added, holds a deleted object until
//! `finalize` returns Ok, then goes with it; and the plugin's own metrics reach `/metrics`,
//! within their bound even from a plugin that makes up series without end.

use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::agent::Agent;
use kubewasm::gvk::Gvk;
use kubewasm::plugins::PluginSettings;
use kubewasm::source::manifests::ManifestFolder;
use kubewasm::wasm::logging::MemorySink;

use crate::support;

const WAIT: Duration = Duration::from_secs(60);
const PART_OF: &str = "applyset.kubernetes.io/part-of";
/// The provisioner's test file, which grants it the writes it needs.
pub const PROVISIONER_TEST: &str =
    "plugins/namespace-provisioner/tests/namespace-provisioner.test.yaml";

fn namespace(name: &str, labels: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels: {labels}\n")
}

fn children_types() -> [Gvk; 4] {
    [
        Gvk::new("", "v1", "ResourceQuota"),
        Gvk::new("", "v1", "LimitRange"),
        Gvk::new("networking.k8s.io", "v1", "NetworkPolicy"),
        Gvk::new("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ]
}

/// The provisioner's settings: `config`, and the writes a controller of its children needs.
fn provisioner(config: &str) -> PluginSettings {
    let mut settings = support::configs(&[]).plugins.defaults.clone();
    settings.config = config.to_owned();
    settings.grants.writes = support::writes_granted_by(PROVISIONER_TEST, "provisioner");
    settings.limits.deadline = Duration::from_secs(10);
    settings
}

struct Run {
    _runtime: tokio::runtime::Runtime,
    cluster: tempfile::TempDir,
    _plugins: kubewasm_testenv::PluginFolder,
    agent: Agent,
    folder: Arc<ManifestFolder>,
    sink: Arc<MemorySink>,
}

impl Run {
    fn start(files: &[(&str, String)], settings: PluginSettings) -> Self {
        let runtime = support::tokio();
        let cluster = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            fs::write(cluster.path().join(name), text).expect("write");
        }
        let mut config = support::configs(&[]);
        config.plugins.named.insert("provisioner".into(), settings);
        let sink = Arc::new(MemorySink::default());
        let (agent, folder) =
            support::snapshot_agent(&runtime, cluster.path(), config, sink.clone());
        let plugins = kubewasm_testenv::PluginFolder::new();
        let file = plugins.put(
            "provisioner",
            kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER,
        );
        agent.plugins().load(&file).expect("the provisioner loads");
        Self {
            _runtime: runtime,
            cluster,
            _plugins: plugins,
            agent,
            folder,
            sink,
        }
    }

    /// [`Self::start`] with one Namespace, team-a, labelled `team: shop`, once its four
    /// children are in place.
    fn team_a(settings: PluginSettings) -> Self {
        let run = Self::start(
            &[("team-a.yaml", namespace("team-a", "{team: shop}"))],
            settings,
        );
        run.until("team-a's children", |r| r.children_in("team-a") == 4);
        run
    }

    fn write(&self, name: &str, text: &str) {
        fs::write(self.cluster.path().join(name), text).expect("write");
        self.folder.rescan();
    }

    fn remove(&self, name: &str) {
        fs::remove_file(self.cluster.path().join(name)).expect("remove");
        self.folder.rescan();
    }

    fn object(&self, gvk: &Gvk, key: &str) -> Option<Arc<kubewasm::object::KubeObject>> {
        self.agent.factory().get(gvk)?.store().get(key)
    }

    fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let end = Instant::now() + WAIT;
        while !done(self) {
            let status = support::plugin_status(&self.agent, "provisioner");
            assert!(Instant::now() < end, "{what}: {status:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn children_in(&self, namespace: &str) -> usize {
        let names = ["team-quota", "team-limits", "default-deny", "team-edit"];
        children_types()
            .iter()
            .zip(names)
            .filter(|(gvk, name)| self.object(gvk, &format!("{namespace}/{name}")).is_some())
            .count()
    }

    /// The value of the plugin's `reconciles_total` for `outcome`.
    fn reconciles(&self, outcome: &str) -> f64 {
        let metrics = self.agent.status().metrics();
        let line = "kubewasm_custom_provisioner_reconciles_total{plugin=\"provisioner\",digest=\"";
        metrics
            .lines()
            .filter(|l| l.starts_with(line) && l.contains(&format!("outcome=\"{outcome}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

fn quiet(run: &Run) {
    run.until("the provisioner settles", |r| {
        let s = support::plugin_status(&r.agent, "provisioner");
        s.synced && s.idle && s.queued == 0 && s.keys_waiting == 0
    });
}

#[test]
fn children_are_applied_owned_and_pruned_and_a_stranger_is_left_alone() {
    let stranger = "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: hand-made, namespace: team-a}\nspec: {hard: {pods: '5'}}\n";
    let run = Run::start(
        &[
            ("team-a.yaml", namespace("team-a", "{team: shop}")),
            ("plain.yaml", namespace("plain", "{}")),
            ("stranger.yaml", stranger.to_owned()),
        ],
        provisioner("{}"),
    );
    run.until("team-a's four children", |r| r.children_in("team-a") == 4);
    quiet(&run);
    assert_eq!(run.children_in("plain"), 0, "no team, no children");
    let parent = run
        .object(&Gvk::new("", "v1", "Namespace"), "team-a")
        .expect("team-a is cached");
    let quota = run
        .object(&children_types()[0], "team-a/team-quota")
        .expect("the quota");
    let owner = quota.controller().expect("the quota has a controller");
    assert_eq!(
        (owner.kind, owner.name, owner.uid),
        ("Namespace", "team-a", parent.uid())
    );
    let id = quota
        .label(PART_OF)
        .expect("the apply-set label")
        .to_owned();
    assert!(id.starts_with("applyset-") && id.ends_with("-v1"), "{id}");

    // The label goes: so do the children, and only they.
    run.write("team-a.yaml", &namespace("team-a", "{}"));
    run.until("team-a's children pruned", |r| r.children_in("team-a") == 0);
    quiet(&run);
    assert!(
        run.object(&children_types()[0], "team-a/hand-made")
            .is_some(),
        "a quota someone else made is never pruned"
    );
    assert!(run.reconciles("unlabelled") >= 1.0);
    let status = support::plugin_status(&run.agent, "provisioner");
    assert_eq!(status.reconciles.as_deref(), Some("v1/Namespace"));
    assert_eq!((status.failed, status.given_up), (0, 0), "{status:#?}");
    assert!(
        status.writes_sent >= 8,
        "four applies and four deletes: {status:#?}"
    );
}

/// Changes team-a's labels once for each of `n`, waits for quiet, and gives the reconciles
/// that found it labelled since `before`.
fn changes(run: &Run, n: std::ops::RangeInclusive<u32>, before: f64) -> f64 {
    for n in n {
        run.write(
            "team-a.yaml",
            &namespace("team-a", &format!("{{team: shop, n: '{n}'}}")),
        );
    }
    quiet(run);
    run.reconciles("applied") - before
}

#[test]
fn events_during_a_reconcile_fold_into_one_more() {
    let run = Run::team_a(provisioner(r#"{"reconcileMs": 1500}"#));
    quiet(&run);
    let before = run.reconciles("applied");
    // A reconcile starts with the first change, then 300 more changes land while it waits.
    run.write("team-a.yaml", &namespace("team-a", "{team: shop, n: '0'}"));
    run.until("a reconcile is running", |r| {
        !support::plugin_status(&r.agent, "provisioner").idle
    });
    let reconciles = changes(&run, 1..=300, before);
    assert!(
        (1.0..=2.0).contains(&reconciles),
        "301 changes of one key gave {reconciles} reconciles"
    );
}

#[test]
fn a_debounce_folds_a_burst_of_changes_into_one_reconcile() {
    let mut settings = provisioner("{}");
    settings.delivery.debounce = Duration::from_millis(1500);
    let run = Run::team_a(settings);
    quiet(&run);
    let before = run.reconciles("applied");
    let reconciles = changes(&run, 0..=29, before);
    // Thirty rescans take well under the debounce on an idle machine; a loaded one may split
    // them in two.
    assert!(
        (1.0..=2.0).contains(&reconciles),
        "30 changes within the debounce gave {reconciles} reconciles"
    );
}

#[test]
fn a_key_requeued_for_later_leaves_the_controller_idle_until_then() {
    let run = Run::team_a(provisioner(r#"{"requeueSeconds": 3600}"#));
    // Idle with the key timed an hour ahead, as with a schedule: `kubewasm test` steps and
    // instance release wait for idle.
    run.until("the provisioner idle", |r| {
        let s = support::plugin_status(&r.agent, "provisioner");
        s.synced && s.idle && s.queued == 0
    });
    let s = support::plugin_status(&run.agent, "provisioner");
    assert_eq!(s.keys_waiting, 1, "the requeued key waits: {s:#?}");
    // An event on it is work again, reconciled at once.
    let before = run.reconciles("applied");
    run.write("team-a.yaml", &namespace("team-a", "{team: shop, n: '1'}"));
    run.until("team-a reconciled again", |r| {
        r.reconciles("applied") > before
    });
}

#[test]
fn a_finalizer_holds_a_deleted_object_until_finalize_lets_it_go() {
    let run = Run::start(
        &[("team-a.yaml", namespace("team-a", "{team: shop}"))],
        provisioner(r#"{"finalizer": true}"#),
    );
    let finalizer = "kubewasm.dev/provisioner";
    let held = |r: &Run| {
        r.object(&Gvk::new("", "v1", "Namespace"), "team-a")
            .and_then(|o| serde_json::from_str::<serde_json::Value>(&o.json()).ok())
            .is_some_and(|v| {
                v.pointer("/metadata/finalizers")
                    .and_then(|f| f.as_array())
                    .is_some_and(|f| f.iter().any(|x| x == finalizer))
            })
    };
    run.until("the finalizer added", held);
    quiet(&run);
    // Deleted (its file removed): it stays until `finalize` returns Ok, then goes.
    run.remove("team-a.yaml");
    run.until("team-a gone", |r| {
        r.object(&Gvk::new("", "v1", "Namespace"), "team-a")
            .is_none()
    });
    let released = support::field_values(&run.sink.records(), "released", "namespace");
    assert_eq!(released, ["team-a"], "finalize ran once");
    quiet(&run);
    let status = support::plugin_status(&run.agent, "provisioner");
    assert_eq!(
        (status.failed, status.finalizers_failing),
        (0, 0),
        "{status:#?}"
    );
}

#[test]
fn a_trapping_reconcile_backs_off_for_its_key_while_the_others_go_on() {
    let run = Run::start(
        &[
            ("bad.yaml", namespace("bad", "{team: shop}")),
            ("good.yaml", namespace("good", "{team: shop}")),
        ],
        provisioner(r#"{"trapOn": "bad"}"#),
    );
    run.until("good's children", |r| r.children_in("good") == 4);
    // Another key goes on while `bad` fails: a change of `good` is reconciled at once.
    run.write("good.yaml", &namespace("good", "{team: ops}"));
    run.until("good's binding follows its team", |r| {
        r.object(&children_types()[3], "good/team-edit")
            .is_some_and(|b| b.json().contains("\"ops\""))
    });
    // `bad` is retried with its own backoff (5 ms doubling, client-go's): about ten
    // attempts in three seconds, not one per loop of the worker; never given up.
    let start = support::plugin_status(&run.agent, "provisioner").traps;
    std::thread::sleep(Duration::from_secs(3));
    let status = support::plugin_status(&run.agent, "provisioner");
    let traps = status.traps - start;
    assert!(
        (1..=12).contains(&traps) && status.traps >= 3,
        "{traps} traps in 3 s after {start}: {status:#?}"
    );
    assert_eq!(run.children_in("bad"), 0);
    assert_eq!(status.given_up, 0, "{status:#?}");
}

#[test]
fn a_hot_swap_reconciles_a_key_only_after_the_old_versions_call_on_it_ended() {
    let run = Run::team_a(provisioner(r#"{"reconcileMs": 1500}"#));
    quiet(&run);
    // A change starts a reconcile; a new version arrives while it waits.
    run.write("team-a.yaml", &namespace("team-a", "{team: shop, n: '1'}"));
    run.until("a reconcile is running", |r| {
        !support::plugin_status(&r.agent, "provisioner").idle
    });
    let old = run.agent.plugins().digest("provisioner").expect("loaded");
    let variant = kubewasm_plugin_artifacts::variant(
        kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER,
        "fenced",
    );
    let built = tempfile::NamedTempFile::new().expect("temp file");
    fs::write(built.path(), variant).expect("write");
    let path = run._plugins.put("provisioner", built.path());
    let file = kubewasm::plugins::PluginFile::read(&path, 64 << 20).expect("read");
    run.agent.plugins().apply(&file).expect("replaced");
    quiet(&run);
    // In the order they were logged: the new version's first reconcile of team-a starts
    // after the old version's last one ended.
    let lines: Vec<_> = run
        .sink
        .records()
        .into_iter()
        .filter(|r| r.field("namespace") == Some("team-a"))
        .collect();
    let old_end = lines
        .iter()
        .rposition(|r| r.digest == old && r.message == "team namespace provisioned")
        .expect("the old version's reconcile ended");
    let new_start = lines
        .iter()
        .position(|r| r.digest != old && r.message == "reconciling")
        .expect("the new version reconciled team-a");
    let shown: Vec<_> = lines
        .iter()
        .map(|r| format!("{} {}", &r.digest[..6], r.message))
        .collect();
    assert!(old_end < new_start, "{shown:#?}");
}

#[test]
fn a_controller_without_the_grants_it_needs_is_refused_naming_them() {
    let mut settings = provisioner(r#"{"finalizer": true}"#);
    settings.grants.writes.truncate(1);
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    let mut config = support::configs(&[]);
    config.plugins.named.insert("provisioner".into(), settings);
    let sink = Arc::new(MemorySink::default());
    let (agent, _folder) = support::snapshot_agent(&runtime, cluster.path(), config, sink);
    let plugins = kubewasm_testenv::PluginFolder::new();
    let file = plugins.put(
        "provisioner",
        kubewasm_plugin_artifacts::NAMESPACE_PROVISIONER,
    );
    let error = agent
        .plugins()
        .load(&file)
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("controller.finalizer") && error.contains("grants.writes"),
        "{error}"
    );
    drop(runtime);
}

#[test]
fn a_plugin_making_up_series_stays_within_its_bound() {
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    fs::write(
        cluster.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: t}\n",
    )
    .expect("write");
    let mut config = support::configs(&[("flood", r#"{"mode": "metric-flood"}"#)]);
    let settings = config.plugins.named.get_mut("flood").expect("configured");
    settings.limits.metric_series = 50;
    let sink = Arc::new(MemorySink::default());
    let (agent, _folder) = support::snapshot_agent(&runtime, cluster.path(), config, sink.clone());
    let plugins = kubewasm_testenv::PluginFolder::new();
    let file = plugins.put("flood", kubewasm_plugin_artifacts::HOSTILE);
    agent.plugins().load(&file).expect("loads");
    let end = Instant::now() + WAIT;
    while support::field_values(&sink.records(), "metric flood", "refused").is_empty() {
        assert!(Instant::now() < end, "{:#?}", agent.plugins().status());
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = support::field_values(&sink.records(), "metric flood", "refused");
    assert_eq!(refused, ["9950"], "all past the bound refused");
    let long = support::field_values(&sink.records(), "metric flood", "long");
    assert!(
        long[0].contains("over bound") && long[0].contains("128 bytes"),
        "{long:?}"
    );
    let undeclared = support::field_values(&sink.records(), "metric flood", "undeclared");
    assert!(undeclared[0].contains("undeclared"), "{undeclared:?}");
    let status = support::plugin_status(&agent, "flood");
    assert_eq!(status.metric_series, 50);
    assert_eq!(status.metric_updates_refused, 9951);
    let metrics = agent.status().metrics();
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("kubewasm_custom_flood_seen_total{"))
        .count();
    assert_eq!(series, 50, "the scrape holds the bound, no more");
    assert!(metrics.contains("# TYPE kubewasm_custom_flood_seen_total counter"));
    assert!(
        metrics.contains("kubewasm_plugin_metric_updates_refused_total{plugin=\"flood\"} 9951")
    );
}
