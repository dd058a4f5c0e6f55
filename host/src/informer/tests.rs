use serde_json::json;

use super::queue::{Delivery, QueueReceiver};
use super::*;
use crate::object::Transform;

fn obj(name: &str, rv: &str, labels: serde_json::Value) -> Arc<KubeObject> {
    let value = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "labels": labels}
    });
    Arc::new(KubeObject::from_value(value, &Transform::default()).expect("valid object"))
}

/// Short text per notification: `+a@1` (add), `+a@1*` (initial add), `~a@1>2`, `-a@1`,
/// `-a@1?` (stale delete), `=a@1` (sync).
fn describe(n: &Notification) -> String {
    match n {
        Notification::Added { object, initial } => {
            format!(
                "+{}@{}{}",
                object.name(),
                object.resource_version(),
                if *initial { "*" } else { "" }
            )
        }
        Notification::Updated { old, new } => {
            format!(
                "~{}@{}>{}",
                new.name(),
                old.resource_version(),
                new.resource_version()
            )
        }
        Notification::Deleted { object, stale } => {
            format!(
                "-{}@{}{}",
                object.name(),
                object.resource_version(),
                if *stale { "?" } else { "" }
            )
        }
        Notification::Sync(object) => format!("={}@{}", object.name(), object.resource_version()),
        Notification::Requeue(object) => {
            format!("^{}@{}", object.name(), object.resource_version())
        }
    }
}

/// Everything queued, described; `|` marks the end of the initial state.
fn drain(rx: &QueueReceiver) -> Vec<String> {
    rx.drain()
        .iter()
        .map(|d| match d {
            Delivery::Event(n) => describe(n),
            Delivery::InitialListSent => "|".to_owned(),
            Delivery::Relisted => "relisted".to_owned(),
        })
        .collect()
}

/// A queue that never coalesces.
fn channel() -> (QueueSender, QueueReceiver) {
    queue::queue(usize::MAX, usize::MAX)
}

/// Feeds a complete list, object by object.
fn list(inf: &Informer, objects: Vec<Arc<KubeObject>>) {
    inf.apply(SourceEvent::ListStarted);
    for object in objects {
        inf.apply(SourceEvent::Listed(object));
    }
    inf.apply(SourceEvent::ListDone);
}

fn informer() -> Arc<Informer> {
    Arc::new(Informer::new(Gvk::new("", "v1", "ConfigMap")))
}

#[test]
fn relist_diffs_against_the_store_with_stale_tombstones() {
    let inf = informer();
    let (tx, rx) = channel();
    let _sub = inf.subscribe(Filter::default(), tx);
    assert!(!inf.has_synced());

    list(
        &inf,
        vec![obj("a", "1", json!({})), obj("b", "1", json!({}))],
    );
    assert!(inf.has_synced());
    assert_eq!(
        drain(&rx),
        ["+a@1*", "+b@1*", "|"],
        "first list is the initial state"
    );

    inf.apply(SourceEvent::Applied(obj("c", "2", json!({}))));
    inf.apply(SourceEvent::Applied(obj("a", "3", json!({}))));
    inf.apply(SourceEvent::Applied(obj("a", "3", json!({}))));
    assert_eq!(
        drain(&rx),
        ["+c@2", "~a@1>3"],
        "a replayed version is no event"
    );

    // Relist after a disconnect: b vanished, c changed, a unchanged, d is new.
    list(
        &inf,
        vec![
            obj("a", "3", json!({})),
            obj("c", "5", json!({})),
            obj("d", "5", json!({})),
        ],
    );
    assert_eq!(
        drain(&rx),
        ["~c@2>5", "+d@5", "-b@1?", "relisted"],
        "the relist's changes, then its mark"
    );
    let mut keys: Vec<String> = inf.store().keys().iter().map(|k| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["ns/a", "ns/c", "ns/d"]);

    inf.apply(SourceEvent::Deleted(obj("d", "6", json!({}))));
    inf.apply(SourceEvent::Deleted(obj("zz", "6", json!({}))));
    assert_eq!(drain(&rx), ["-d@6"], "deleting an unknown key is no event");
}

#[test]
fn late_subscriber_gets_current_state_then_live_events() {
    let inf = informer();
    list(
        &inf,
        vec![obj("b", "1", json!({})), obj("a", "1", json!({}))],
    );
    let (tx, rx) = channel();
    let _sub = inf.subscribe(Filter::default(), tx);
    inf.apply(SourceEvent::Applied(obj("a", "2", json!({}))));
    assert_eq!(drain(&rx), ["+a@1*", "+b@1*", "|", "~a@1>2"]);
}

#[test]
fn filters_turn_label_changes_into_adds_and_deletes() {
    let inf = informer();
    list(&inf, vec![]);
    let (tx, rx) = channel();
    let filter = Filter {
        namespaces: vec!["ns".into()],
        selector: Selector::parse("app=web").expect("valid selector"),
        keys: None,
        changes: None,
        also: Vec::new(),
    };
    let _sub = inf.subscribe(filter, tx);
    inf.apply(SourceEvent::Applied(obj("a", "1", json!({"app": "db"}))));
    inf.apply(SourceEvent::Applied(obj("a", "2", json!({"app": "web"}))));
    inf.apply(SourceEvent::Applied(obj(
        "a",
        "3",
        json!({"app": "web", "x": "y"}),
    )));
    inf.apply(SourceEvent::Applied(obj("a", "4", json!({"app": "db"}))));
    assert_eq!(drain(&rx), ["|", "+a@2", "~a@2>3", "-a@4"]);

    let (tx2, rx2) = channel();
    let other_ns = Filter {
        namespaces: vec!["elsewhere".into()],
        selector: Selector::everything(),
        keys: None,
        changes: None,
        also: Vec::new(),
    };
    let (tx3, rx3) = channel();
    let only_c = Filter {
        keys: Some(["ns/c".to_owned()].into()),
        ..Filter::default()
    };
    let _sub3 = inf.subscribe(only_c, tx3);
    let _sub2 = inf.subscribe(other_ns, tx2);
    inf.apply(SourceEvent::Applied(obj("b", "5", json!({}))));
    inf.apply(SourceEvent::Applied(obj("c", "6", json!({}))));
    assert_eq!(drain(&rx2), ["|"]);
    assert_eq!(
        drain(&rx3),
        ["|", "+c@6"],
        "a key filter passes only its keys"
    );
}

#[test]
fn resync_sends_sync_events_and_dropping_unsubscribes() {
    let inf = informer();
    list(&inf, vec![obj("a", "1", json!({}))]);
    let (tx, rx) = channel();
    let sub = inf.subscribe(Filter::default(), tx);
    sub.resync();
    assert_eq!(drain(&rx), ["+a@1*", "|", "=a@1"]);
    assert_eq!(inf.subscriber_count(), 1);
    drop(sub);
    assert_eq!(inf.subscriber_count(), 0);
}

#[test]
fn a_gone_receiver_is_unsubscribed_on_the_next_event() {
    let inf = informer();
    list(&inf, vec![]);
    let (tx, rx) = channel();
    let sub = inf.subscribe(Filter::default(), tx);
    drop(rx);
    inf.apply(SourceEvent::Applied(obj("a", "1", json!({}))));
    assert_eq!(inf.subscriber_count(), 0);
    drop(sub);
}

#[test]
fn wait_synced_times_out_then_sees_the_list() {
    let inf = informer();
    assert!(!inf.wait_synced(Duration::from_millis(10)));
    let feeder = inf.clone();
    let t = std::thread::spawn(move || list(&feeder, vec![]));
    assert!(inf.wait_synced(Duration::from_secs(5)));
    t.join().expect("feeder thread");
}

#[test]
fn swap_hands_over_with_no_event_lost_or_doubled() {
    let inf = informer();
    list(&inf, vec![obj("a", "1", json!({}))]);
    let (old_tx, old_rx) = channel();
    let old = inf.subscribe(Filter::default(), old_tx);
    inf.apply(SourceEvent::Applied(obj("a", "2", json!({}))));
    let (new_tx, new_rx) = channel();
    let new = inf.swap(&old, Filter::default(), new_tx);
    inf.apply(SourceEvent::Applied(obj("b", "3", json!({}))));
    drop(old);
    assert_eq!(drain(&old_rx), ["+a@1*", "|", "~a@1>2"], "before the swap");
    assert_eq!(
        drain(&new_rx),
        ["+a@2*", "|", "+b@3"],
        "current state, then after the swap"
    );
    assert_eq!(inf.subscriber_count(), 1);
    drop(new);
    assert_eq!(inf.subscriber_count(), 0);
}

#[test]
fn a_relist_streams_into_the_store_and_restarts_cleanly() {
    let inf = informer();
    let (tx, rx) = channel();
    let _sub = inf.subscribe(Filter::default(), tx);
    list(
        &inf,
        vec![obj("a", "1", json!({})), obj("b", "1", json!({}))],
    );
    drain(&rx);

    // Each listed object is applied as it arrives, not when the list ends.
    inf.apply(SourceEvent::ListStarted);
    inf.apply(SourceEvent::Listed(obj("a", "2", json!({}))));
    assert_eq!(drain(&rx), ["~a@1>2"]);
    assert_eq!(inf.store().len(), 2, "b stays until the list is complete");
    // The list fails half way and starts over: only the second attempt decides what is gone.
    inf.apply(SourceEvent::ListStarted);
    inf.apply(SourceEvent::Listed(obj("b", "1", json!({}))));
    inf.apply(SourceEvent::Listed(obj("c", "3", json!({}))));
    inf.apply(SourceEvent::ListDone);
    assert_eq!(drain(&rx), ["+c@3", "-a@2?", "relisted"]);
    let mut keys: Vec<String> = inf.store().keys().iter().map(|k| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["ns/b", "ns/c"]);
}

/// A pod as the reflector decodes it, and the same pod with `change` applied and a new version.
fn decoded_update(change: impl Fn(&mut serde_json::Value)) -> (KubeObject, KubeObject) {
    let gvk = Arc::new(crate::gvk::Gvk::new("", "v1", "Pod"));
    let pod = kubewasm_testenv::generate::pod(3, 4096, 10);
    let mut changed = pod.clone();
    changed["metadata"]["resourceVersion"] = json!("11");
    change(&mut changed);
    let decode = |v: &serde_json::Value| {
        KubeObject::from_server_json(&v.to_string(), &gvk, &Transform::default()).expect("pod")
    };
    (decode(&pod), decode(&changed))
}

#[test]
fn change_filters_see_what_changed_under_each_pointer() {
    let filter = |pointers: &[&str]| {
        let texts: Vec<String> = pointers.iter().map(|p| (*p).to_owned()).collect();
        Changes::new(&texts).expect("pointers")
    };
    let labels = filter(&["/metadata/labels"]);
    let deletion = filter(&["/metadata/deletionTimestamp"]);
    let version = filter(&["/metadata/resourceVersion"]);
    let spec = filter(&["/spec"]);
    let phase = filter(&["/status/phase"]);

    // Status only: metadata differs in its version alone.
    let (old, new) = decoded_update(|p| p["status"]["phase"] = json!("Failed"));
    assert!(old.same_metadata_but_version(&new));
    assert!(!labels.changed(&old, &new) && !deletion.changed(&old, &new));
    assert!(!spec.changed(&old, &new));
    assert!(phase.changed(&old, &new) && version.changed(&old, &new));

    // A label: metadata differs beyond its version, and the lookup decides.
    let (old, new) = decoded_update(|p| p["metadata"]["labels"]["tier"] = json!("gold"));
    assert!(!old.same_metadata_but_version(&new));
    assert!(labels.changed(&old, &new));
    assert!(!deletion.changed(&old, &new) && !phase.changed(&old, &new));

    // An annotation: labels and deletion unchanged, though metadata is not the same.
    let (old, new) = decoded_update(|p| p["metadata"]["annotations"] = json!({"a": "b"}));
    assert!(!labels.changed(&old, &new) && !deletion.changed(&old, &new));

    // Being deleted.
    let (old, new) = decoded_update(|p| {
        p["metadata"]["deletionTimestamp"] = json!("2026-11-28T10:00:00Z");
    });
    assert!(deletion.changed(&old, &new) && !labels.changed(&old, &new));

    // The spec.
    let (old, new) = decoded_update(|p| p["spec"]["nodeName"] = json!("node-9"));
    assert!(spec.changed(&old, &new) && !phase.changed(&old, &new));
}

#[test]
fn subscribers_with_the_same_change_filter_share_its_answer_and_keep_their_counts() {
    let inf = informer();
    list(&inf, vec![obj("a", "1", json!({"app": "web"}))]);
    let filter = |pointers: &[&str]| {
        let texts: Vec<String> = pointers.iter().map(|p| (*p).to_owned()).collect();
        Arc::new(Changes::new(&texts).expect("valid pointers"))
    };
    let labels_a = filter(&["/metadata/labels"]);
    let labels_b = filter(&["/metadata/labels"]);
    let data = filter(&["/data"]);
    let mut receivers = Vec::new();
    let mut subs = Vec::new();
    for changes in [&labels_a, &data, &labels_b] {
        let (tx, rx) = channel();
        let f = Filter {
            changes: Some(changes.clone()),
            ..Filter::default()
        };
        subs.push(inf.subscribe(f, tx));
        receivers.push(rx);
    }
    // Labels change, then only the resource version does.
    inf.apply(SourceEvent::Applied(obj("a", "2", json!({"app": "api"}))));
    inf.apply(SourceEvent::Applied(obj("a", "3", json!({"app": "api"}))));
    let seen: Vec<Vec<String>> = receivers.iter().map(drain).collect();
    assert_eq!(seen[0], ["+a@1*", "|", "~a@1>2"]);
    assert_eq!(seen[1], ["+a@1*", "|"], "no /data in either update");
    assert_eq!(seen[2], seen[0], "the same filter, the same answer");
    let filtered = |c: &Arc<Changes>| c.filtered.load(Ordering::Relaxed);
    assert_eq!(
        (filtered(&labels_a), filtered(&data), filtered(&labels_b)),
        (1, 2, 1),
        "each subscriber counts its own drops"
    );
    assert_eq!(inf.state().change_filters, 2, "two distinct filters");
    drop(subs);
    assert_eq!(
        inf.state().change_filters,
        0,
        "what is kept follows the subscribers"
    );
}

/// A ConfigMap `name` in namespace `ns` at version `rv`.
fn in_ns(ns: &str, name: &str, rv: &str, labels: serde_json::Value) -> Arc<KubeObject> {
    let value = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels}
    });
    Arc::new(KubeObject::from_value(value, &Transform::default()).expect("valid object"))
}

fn namespaces(list: &[&str]) -> Scope {
    let list: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
    Scope::of(&list, &Selector::everything())
}

fn only(list: &[&str]) -> Filter {
    Filter {
        namespaces: list.iter().map(|s| (*s).to_owned()).collect(),
        ..Filter::default()
    }
}

/// Feeds one namespace's complete list.
fn list_ns(inf: &Informer, ns: &str, objects: Vec<Arc<KubeObject>>) {
    inf.apply(SourceEvent::NamespaceListStarted(ns.into()));
    for object in objects {
        inf.apply(SourceEvent::Listed(object));
    }
    inf.apply(SourceEvent::NamespaceListDone(ns.into()));
}

fn keys(inf: &Informer) -> Vec<String> {
    let mut keys: Vec<String> = inf.store().keys().iter().map(|k| k.to_string()).collect();
    keys.sort();
    keys
}

#[test]
fn a_scope_listed_namespace_by_namespace_syncs_when_the_last_one_ends() {
    let inf = Arc::new(Informer::scoped(
        Gvk::new("", "v1", "ConfigMap"),
        namespaces(&["a", "b"]),
    ));
    let (tx, rx) = channel();
    let _sub = inf.subscribe(Filter::default(), tx);
    list_ns(&inf, "a", vec![in_ns("a", "x", "1", json!({}))]);
    assert!(!inf.has_synced(), "b has not listed yet");
    list_ns(&inf, "b", vec![in_ns("b", "y", "1", json!({}))]);
    assert!(inf.has_synced());
    assert_eq!(drain(&rx), ["+x@1*", "+y@1*", "|"]);

    // a's watch expired and a is listed again: only a's vanished objects go.
    list_ns(&inf, "a", vec![]);
    assert_eq!(drain(&rx), ["-x@1?", "relisted"]);
    assert_eq!(keys(&inf), ["b/y"]);

    // Objects outside the scope are never stored, whatever the source sends.
    inf.apply(SourceEvent::Applied(in_ns("c", "z", "2", json!({}))));
    assert_eq!(keys(&inf), ["b/y"]);
    assert!(drain(&rx).is_empty());
}

#[test]
fn widening_adds_only_what_is_new_and_narrowing_reaches_no_remaining_subscriber() {
    let inf = Arc::new(Informer::scoped(
        Gvk::new("", "v1", "ConfigMap"),
        namespaces(&["a"]),
    ));
    let (tx1, rx1) = channel();
    let _narrow = inf.subscribe(only(&["a"]), tx1);
    list_ns(&inf, "a", vec![in_ns("a", "x", "1", json!({}))]);
    assert_eq!(drain(&rx1), ["+x@1*", "|"]);

    // A plugin wanting a and b arrives: the informer is rescoped before it subscribes.
    inf.rescope(namespaces(&["a", "b"]));
    let (tx2, rx2) = channel();
    let _wide = inf.subscribe(only(&["a", "b"]), tx2);
    assert_eq!(
        drain(&rx2),
        ["+x@1*"],
        "what is cached now; no end mark yet"
    );
    // The new scope's list: x unchanged, x2 created meanwhile, y in b.
    let a_now = || {
        vec![
            in_ns("a", "x", "1", json!({})),
            in_ns("a", "x2", "3", json!({})),
        ]
    };
    list_ns(&inf, "a", a_now());
    list_ns(&inf, "b", vec![in_ns("b", "y", "2", json!({}))]);
    assert_eq!(
        drain(&rx1),
        ["+x2@3"],
        "the first plugin sees its namespace's real change only: no delete and add of x, no relist"
    );
    assert_eq!(drain(&rx2), ["+x2@3*", "+y@2*", "|"]);
    inf.apply(SourceEvent::Applied(in_ns("b", "y", "4", json!({}))));
    assert_eq!(drain(&rx2), ["~y@2>4"]);
    assert!(drain(&rx1).is_empty());

    // The wide plugin goes: b's objects leave the cache, and the narrow plugin hears nothing.
    drop(_wide);
    inf.rescope(namespaces(&["a"]));
    assert_eq!(keys(&inf), ["a/x", "a/x2"]);
    list_ns(&inf, "a", a_now());
    assert!(drain(&rx1).is_empty(), "narrowing is silent for what stays");
}

#[test]
fn an_object_leaving_a_selector_scope_is_a_delete() {
    let selector = Selector::parse("app=web").expect("selector");
    let inf = Arc::new(Informer::scoped(
        Gvk::new("", "v1", "ConfigMap"),
        Scope::of(&[], &selector),
    ));
    let (tx, rx) = channel();
    let _sub = inf.subscribe(
        Filter {
            selector,
            ..Filter::default()
        },
        tx,
    );
    list(
        &inf,
        vec![
            obj("a", "1", json!({"app": "web"})),
            obj("b", "1", json!({"app": "db"})),
        ],
    );
    assert_eq!(drain(&rx), ["+a@1*", "|"]);
    assert_eq!(keys(&inf), ["ns/a"], "b was never stored");
    inf.apply(SourceEvent::Applied(obj("a", "2", json!({"app": "db"}))));
    assert_eq!(drain(&rx), ["-a@1"]);
    assert!(keys(&inf).is_empty());
}

#[test]
fn a_wider_keep_replaces_stored_states_without_an_event() {
    let inf = informer();
    let (tx, rx) = channel();
    let _sub = inf.subscribe(Filter::default(), tx);
    let bare = |rv: &str| obj("a", rv, json!({}));
    let with_data = |rv: &str| {
        let value = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv},
            "data": {"k": "v"}
        });
        Arc::new(KubeObject::from_value(value, &Transform::default()).expect("valid"))
    };
    list(&inf, vec![bare("1")]);
    assert_eq!(drain(&rx), ["+a@1*", "|"]);
    // The same state listed again outside a new scope's list: nothing changes.
    list(&inf, vec![with_data("1")]);
    assert_eq!(drain(&rx), ["relisted"]);
    assert!(
        !inf.store()
            .get("ns/a")
            .expect("a")
            .json()
            .contains("\"data\"")
    );
    // Listed for a new scope that keeps more: stored in place, silently.
    inf.rescope(Scope::everything());
    list(&inf, vec![with_data("1")]);
    assert!(drain(&rx).is_empty(), "no event for an unchanged object");
    assert!(
        inf.store()
            .get("ns/a")
            .expect("a")
            .json()
            .contains("\"data\"")
    );
}

#[test]
fn a_subscriber_with_several_filters_on_one_type_gets_each_event_once() {
    let inf = informer();
    list(
        &inf,
        vec![obj("a", "1", json!({"app": "web", "tier": "gold"}))],
    );
    let (tx, rx) = channel();
    let pointers = |p: &str| Some(Arc::new(Changes::new(&[p.to_owned()]).expect("pointer")));
    // Two overlapping subscriptions: web objects on label changes of `tier`, gold objects on
    // label changes of `owner`.
    let web = Filter {
        selector: Selector::parse("app=web").expect("selector"),
        changes: pointers("/metadata/labels/tier"),
        ..Filter::default()
    };
    let gold = Filter {
        selector: Selector::parse("tier=gold").expect("selector"),
        changes: pointers("/metadata/labels/owner"),
        ..Filter::default()
    };
    let _sub = inf.subscribe(
        Filter {
            also: vec![gold],
            ..web
        },
        tx,
    );
    let labels = |rv: &str, l: serde_json::Value| inf.apply(SourceEvent::Applied(obj("a", rv, l)));
    // Neither pointer changed: dropped, not delivered twice or once.
    labels("2", json!({"app": "web", "tier": "gold", "x": "1"}));
    // The second filter's pointer changed: delivered once.
    labels(
        "3",
        json!({"app": "web", "tier": "gold", "x": "1", "owner": "me"}),
    );
    // Out of the first filter, still in the second: an update, as the second sees it.
    labels(
        "4",
        json!({"app": "db", "tier": "gold", "x": "1", "owner": "you"}),
    );
    // Out of both: one delete. Into one: one add.
    labels("5", json!({"app": "db", "tier": "silver"}));
    labels("6", json!({"app": "web", "tier": "silver"}));
    assert_eq!(
        drain(&rx),
        ["+a@1*", "|", "~a@2>3", "~a@3>4", "-a@5", "+a@6"]
    );
}

#[test]
fn change_filters_charge_their_plugin_and_stop_comparing_past_its_budget() {
    let (old, new) = decoded_update(|p| p["status"]["phase"] = json!("Failed"));
    let spec = Changes::new(&["/spec".to_owned()]).expect("pointer");
    let budget = crate::cpu::CpuBudget::new(10, Arc::new(crate::cpu::CpuPool::new(0)));
    spec.charge_to(budget.clone());
    assert!(
        !spec.changed(&old, &new),
        "compared while within the budget"
    );
    assert!(budget.used_us() > 0, "the comparison was charged");
    assert_eq!(spec.unchecked.load(Ordering::Relaxed), 0);
    budget.charge(std::time::Duration::from_secs(1), std::time::Instant::now());
    assert!(
        spec.changed(&old, &new),
        "past the budget, the update passes without a comparison"
    );
    assert_eq!(spec.unchecked.load(Ordering::Relaxed), 1);
}
