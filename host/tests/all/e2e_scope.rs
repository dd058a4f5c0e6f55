//! Scopes pushed to a real kube-apiserver (kubewasm-testenv): a host whose plugins name
//! namespaces watches those namespaces only, so a service account with Roles in them and no
//! cluster-wide right runs it; a label selector every subscription shares is filtered by the
//! server; and a plugin with a wider scope arriving and leaving while objects change costs the
//! other plugins no event they would not have had.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::gvk::Gvk;
use kubewasm::rbac;
use kubewasm::wasm::logging::{MemorySink, PluginLogRecord};
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;
use support::{audit, render};

use crate::support;

const WAIT: Duration = Duration::from_secs(60);

fn config_maps() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

/// audit-log's configuration: ConfigMaps in `namespaces`.
fn audit_in(namespaces: &[&str]) -> String {
    json!({"resources": ["v1/ConfigMap"], "namespaces": namespaces}).to_string()
}

fn config_map(name: &str, labels: serde_json::Value) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"v": "1"}
    }))?)
}

/// A host on `client` with `configs` for its plugins; `files` are in its plugins folder.
async fn host(
    client: kube::Client,
    configs: &[(&str, &str)],
    files: &[&str],
) -> anyhow::Result<(Agent, Arc<MemorySink>, kubewasm_testenv::PluginFolder)> {
    let dir = kubewasm_testenv::PluginFolder::new();
    for name in files {
        dir.put(name, kubewasm_plugin_artifacts::AUDIT_LOG);
    }
    let sink = Arc::new(MemorySink::default());
    let mut agent = Agent::start(AgentOptions::new(
        Cluster::Kube(client),
        support::configs(configs),
        sink.clone(),
    ))
    .await?;
    let report = agent.follow_plugins(dir.path()).await?;
    anyhow::ensure!(report.failed.is_empty(), "plugins failed: {report:?}");
    Ok((agent, sink, dir))
}

/// Polls `check` until it gives a value.
async fn wait<T>(what: &str, check: impl Fn() -> Option<T>) -> anyhow::Result<T> {
    support::wait_for(what, WAIT, check).await
}

fn lines(sink: &MemorySink, plugin: &str) -> Vec<PluginLogRecord> {
    support::of(sink.records(), plugin)
}

fn synced(agent: &Agent, plugin: &str) -> bool {
    agent
        .status()
        .plugins
        .iter()
        .any(|p| p.name == plugin && p.synced)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_in_the_plugins_namespaces_suffice_and_a_shared_selector_is_filtered_by_the_server()
-> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    for ns in ["kubewasm", "team-a", "team-b", "elsewhere"] {
        resources::create_namespace(&admin, ns).await?;
    }
    // What `kubewasm rbac` makes of two plugins reading ConfigMaps in team-a and team-b.
    let mut reads = rbac::Reads::default();
    let namespaces = ["team-a".to_owned(), "team-b".to_owned()].into();
    reads.add(&config_maps(), Some(&namespaces));
    let identity = rbac::Identity {
        name: "team".into(),
        namespace: "kubewasm".into(),
        service_account: "team".into(),
        leader_election: false,
        sharding: None,
        plugin_resources: false,
        plugin_state: false,
    };
    let yaml = rbac::render(&reads, &[], &identity, "test");
    assert!(
        !yaml.contains("kind: ClusterRole"),
        "nothing cluster-wide is granted:\n{yaml}"
    );
    support::apply_yaml(&admin, &yaml).await?;

    // Every subscription shares `tier=web`, so the server filters by it.
    let selected = |ns: &[&str]| {
        json!({"resources": ["v1/ConfigMap"], "namespaces": ns, "selector": "tier=web"}).to_string()
    };
    let client = env.service_account_client("kubewasm", "team").await?;
    let (agent, sink, _dir) = host(
        client,
        &[
            ("audit-a", &selected(&["team-a"])),
            ("audit-ab", &selected(&["team-a", "team-b"])),
        ],
        &["audit-a", "audit-ab"],
    )
    .await?;
    for plugin in ["audit-a", "audit-ab"] {
        wait(plugin, || synced(&agent, plugin).then_some(())).await?;
    }
    // In each namespace an unlabelled ConfigMap, then a labelled one: one watch stream
    // carries both in order, so once the second is seen the first was filtered, not late.
    for ns in ["team-a", "team-b", "elsewhere"] {
        let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
        api.create(&PostParams::default(), &config_map("plain", json!({}))?)
            .await?;
        api.create(
            &PostParams::default(),
            &config_map("cm", json!({"tier": "web"}))?,
        )
        .await?;
    }
    wait("audit-ab saw both team namespaces", || {
        let mut seen = audit(&lines(&sink, "audit-ab"), "ConfigMap");
        seen.sort();
        (seen.len() >= 2).then_some(seen)
    })
    .await
    .map(|seen| {
        assert_eq!(
            seen,
            ["added team-a/cm", "added team-b/cm"],
            "{}",
            render(&lines(&sink, "audit-ab"))
        )
    })?;
    // Each plugin's thread delivers at its own pace: wait for this one too.
    let seen = wait("audit-a saw team-a", || {
        let seen = audit(&lines(&sink, "audit-a"), "ConfigMap");
        (!seen.is_empty()).then_some(seen)
    })
    .await?;
    assert_eq!(seen, ["added team-a/cm"]);
    let status = agent.status();
    let informer = status
        .informers
        .iter()
        .find(|i| i.gvk == config_maps())
        .ok_or_else(|| anyhow::anyhow!("no ConfigMap informer: {status:?}"))?;
    assert_eq!(informer.scope, "namespaces team-a, team-b; labels tier=web");
    assert_eq!(
        informer.cached, 2,
        "neither elsewhere nor the unlabelled ones"
    );
    assert_eq!(
        informer.received, 2,
        "the server sent only the labelled ConfigMaps of the two namespaces"
    );
    let (_, reflector) = status
        .reflectors
        .iter()
        .find(|(g, _)| *g == config_maps())
        .ok_or_else(|| anyhow::anyhow!("no ConfigMap reflector"))?;
    assert_eq!(
        reflector.errors, 0,
        "no request was refused: {:?}",
        reflector.last_error
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wider_plugin_coming_and_going_costs_the_others_no_event() -> anyhow::Result<()> {
    let wide = ["one", "two"];
    widen_and_narrow(&audit_in(&["one"]), &wide, "namespaces one").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_needing_whole_objects_coming_and_going_costs_a_declaring_one_no_event()
-> anyhow::Result<()> {
    // The narrow plugin declares it reads `/data/v`: the cache keeps only that until the
    // wide plugin, which declares nothing, needs whole objects, and again after it goes.
    let narrow =
        json!({"resources": ["v1/ConfigMap"], "namespaces": ["one"], "fields": ["/data/v"]});
    let scope = "namespaces one; metadata and /data/v";
    widen_and_narrow(&narrow.to_string(), &["one"], scope).await
}

/// Loads audit-log as `narrow` with `narrow_config`, then loads and unloads it as `wide`
/// (whole ConfigMaps in `wide_namespaces`) while ConfigMaps are created and changed in
/// namespaces one and two; the narrow plugin (which reads namespace one) must see each of its
/// objects added and changed, nothing more, and the informer end at `scope` after two
/// rescopes.
async fn widen_and_narrow(
    narrow_config: &str,
    wide_namespaces: &[&str],
    scope: &str,
) -> anyhow::Result<()> {
    let wide_config = audit_in(wide_namespaces);
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    for ns in ["one", "two"] {
        resources::create_namespace(&admin, ns).await?;
    }
    let (agent, sink, dir) = host(
        admin.clone(),
        &[("narrow", narrow_config), ("wide", &wide_config)],
        &["narrow"],
    )
    .await?;
    wait("narrow synced", || synced(&agent, "narrow").then_some(())).await?;

    // Objects keep changing in both namespaces while the wide plugin loads and unloads: each
    // ConfigMap is created, then changed once.
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (admin, stop, progress) = (admin.clone(), stop.clone(), progress.clone());
        tokio::spawn(async move {
            let mut written = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for ns in ["one", "two"] {
                    let api = Api::<ConfigMap>::namespaced(admin.clone(), ns);
                    let name = format!("cm-{written}");
                    api.create(&PostParams::default(), &config_map(&name, json!({}))?)
                        .await?;
                    let change = json!({"data": {"v": "2"}});
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&change))
                        .await?;
                }
                written += 1;
                progress.store(written, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok(written)
        })
    };
    // A few objects more in each phase, however slow the machine.
    let a_few_more = || {
        let from = progress.load(Ordering::Relaxed);
        let progress = progress.clone();
        wait("a few more objects written", move || {
            (progress.load(Ordering::Relaxed) >= from + 3).then_some(())
        })
    };
    a_few_more().await?;
    dir.put("wide", kubewasm_plugin_artifacts::AUDIT_LOG);
    wait("wide synced", || synced(&agent, "wide").then_some(())).await?;
    a_few_more().await?;
    std::fs::remove_file(dir.path().join("wide.wasm"))?;
    wait("wide unloaded", || {
        (!agent.status().plugins.iter().any(|p| p.name == "wide")).then_some(())
    })
    .await?;
    a_few_more().await?;
    stop.store(true, Ordering::Relaxed);
    let written = writer.await??;

    // The narrow plugin saw each of its objects added, then changed, and reach its last
    // version. A change made while the type was being listed again for the new scope comes
    // with that list: an object created and changed in that gap is one add of its changed
    // state, as in any relist. Never a delete, a second add, or anything from two.
    let last: BTreeMap<String, String> = Api::<ConfigMap>::namespaced(admin.clone(), "one")
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|c| {
            let name = c.metadata.name.unwrap_or_default();
            (
                format!("one/{name}"),
                c.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(last.len(), written, "every ConfigMap written in one");
    let by_key = || {
        let mut by_key: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for line in lines(&sink, "narrow") {
            let key = line.field("key").unwrap_or_default().to_owned();
            let rv = line.field("rv").unwrap_or_default().to_owned();
            by_key
                .entry(key)
                .or_default()
                .push((line.message.clone(), rv));
        }
        by_key
    };
    let seen = wait(
        "narrow saw the last version of every ConfigMap in one",
        || {
            let seen = by_key();
            let caught_up = last.iter().all(|(key, rv)| {
                seen.get(key)
                    .and_then(|events| events.last())
                    .is_some_and(|(_, seen_rv)| seen_rv == rv)
            });
            caught_up.then_some(seen)
        },
    )
    .await?;
    let keys: Vec<&String> = seen.keys().collect();
    assert_eq!(keys, last.keys().collect::<Vec<_>>(), "nothing from two");
    for (key, events) in &seen {
        let kinds: Vec<&str> = events.iter().map(|(m, _)| m.as_str()).collect();
        assert!(
            matches!(kinds.as_slice(), ["added", "updated"] | ["added"]),
            "{key}: {kinds:?}\n{}",
            render(&lines(&sink, "narrow"))
        );
    }
    // The wide plugin's view: each object at most added once, never deleted.
    let wide = audit(&lines(&sink, "wide"), "ConfigMap");
    let mut adds = BTreeMap::new();
    for line in &wide {
        assert!(
            !line.starts_with("deleted"),
            "{}",
            render(&lines(&sink, "wide"))
        );
        if let Some(key) = line.strip_prefix("added ") {
            *adds
                .entry(key.trim_end_matches(" initial").to_owned())
                .or_insert(0) += 1;
        }
    }
    assert!(adds.values().all(|n| *n == 1), "{adds:?}");
    for ns in wide_namespaces {
        assert!(
            adds.keys().any(|k| k.starts_with(&format!("{ns}/"))),
            "{adds:?}"
        );
    }
    let status = agent.status();
    let informer = status
        .informers
        .iter()
        .find(|i| i.gvk == config_maps())
        .ok_or_else(|| anyhow::anyhow!("no ConfigMap informer"))?;
    assert_eq!(informer.scope, scope, "narrowed again");
    assert_eq!(informer.rescopes, 2, "widened once, narrowed once");
    Ok(())
}

/// A client of `env` that records the `Accept` header of every request it sends.
async fn recording_client(
    env: &TestEnv,
) -> anyhow::Result<(kube::Client, Arc<std::sync::Mutex<Vec<String>>>)> {
    let file = kube::config::Kubeconfig::read_from(env.kubeconfig())?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    let accepts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = accepts.clone();
    let record = tower::util::MapRequestLayer::new(move |request: http::Request<_>| {
        let accept = request
            .headers()
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        seen.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(format!("{} {accept}", request.uri().path()));
        request
    });
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&record)
        .build();
    Ok((client, accepts))
}

/// The cached pods' JSON, parsed, by name.
fn cached(informer: &kubewasm::informer::Informer) -> BTreeMap<String, serde_json::Value> {
    informer
        .store()
        .list()
        .iter()
        .map(|o| {
            let v: serde_json::Value = serde_json::from_str(&o.json()).unwrap_or_default();
            (o.name().to_owned(), v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_is_asked_of_the_server_and_a_wider_keep_refreshes_without_events()
-> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    use kubewasm::informer::Filter;
    use kubewasm::informer::factory::InformerFactory;
    use kubewasm::informer::queue::{self, Delivery};
    use kubewasm::object::{Keep, Transform};
    use kubewasm::source::Scope;
    use kubewasm::source::kube::KubeSource;

    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "p").await?;
    let pods = Api::<Pod>::namespaced(admin.clone(), "p");
    let pod = |name: &str| -> anyhow::Result<Pod> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "example/c:1"}]}
        }))?)
    };
    for name in ["a", "b"] {
        pods.create(&PostParams::default(), &pod(name)?).await?;
    }
    let (client, accepts) = recording_client(&env).await?;
    let tasks = tokio::runtime::Handle::current();
    let source = Arc::new(KubeSource::new(client, Transform::default(), tasks.clone()));
    let factory = InformerFactory::new(source, tasks);
    let gvk = Gvk::new("", "v1", "Pod");
    let metadata = factory.acquire(&gvk, &Scope::everything().keeping(Keep::MetadataOnly));
    let informer = metadata.informer().clone();
    wait("metadata-only sync", || informer.has_synced().then_some(())).await?;
    let objects = cached(&informer);
    assert_eq!(objects.len(), 2);
    for (name, o) in &objects {
        assert_eq!(
            o["kind"], "Pod",
            "{name}: the type asked, not PartialObjectMetadata"
        );
        assert_eq!(o["metadata"]["labels"]["app"], "web");
        assert!(o.get("spec").is_none() && o.get("status").is_none(), "{o}");
    }
    let asked = accepts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let pod_requests: Vec<&String> = asked.iter().filter(|a| a.contains("/pods")).collect();
    assert!(
        !pod_requests.is_empty()
            && pod_requests
                .iter()
                .all(|a| a.contains("as=PartialObjectMetadata") && a.contains("g=meta.k8s.io")),
        "every pod request asked for metadata only: {asked:?}"
    );

    // A subscriber, then a wider need: the phase. The type is listed again with it, each
    // object's stored state gains its phase, and the subscriber hears nothing.
    let (tx, rx) = queue::queue(usize::MAX, usize::MAX);
    let _sub = informer.subscribe(Filter::default(), tx);
    let before_widening = informer.store().text_bytes();
    let initial = rx.drain();
    assert_eq!(initial.len(), 3, "two initial adds and the mark");
    let phase = factory.acquire(
        &gvk,
        &Scope::everything().keeping(Keep::fields(&["/status/phase"])),
    );
    wait("the phase cached", || {
        cached(&informer)
            .values()
            .all(|o| o["status"]["phase"] == "Pending")
            .then_some(())
    })
    .await?;
    let metadata_bytes = before_widening;
    assert!(
        informer.store().text_bytes() > metadata_bytes,
        "the phase adds bytes to the cache"
    );
    for o in cached(&informer).values() {
        assert!(o.get("spec").is_none(), "only the phase is added: {o}");
        assert_eq!(o["status"].as_object().map(|s| s.len()), Some(1), "{o}");
    }
    pods.create(&PostParams::default(), &pod("c")?).await?;
    let events = wait("c's add", || {
        let events = rx.drain();
        (!events.is_empty()).then_some(events)
    })
    .await?;
    let added: Vec<String> = events
        .iter()
        .map(|d| match d {
            Delivery::Event(n) => format!("{:?} {}", std::mem::discriminant(n), n.object().name()),
            other => format!("{other:?}"),
        })
        .collect();
    assert!(
        added.len() == 1 && added[0].ends_with(" c"),
        "the widening was silent; c's add is the one event: {added:?}"
    );

    // The phase is needed no more: listed again as metadata, nothing heard.
    drop(phase);
    wait("the phase dropped", || {
        cached(&informer)
            .values()
            .all(|o| o.get("status").is_none())
            .then_some(())
    })
    .await?;
    assert!(rx.drain().is_empty(), "narrowing was silent too");
    assert_eq!(informer.scope().keep(), &Keep::MetadataOnly);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_only_plugin_has_the_server_send_metadata_and_is_told_what_it_did_not_declare()
-> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let admin = env.client().await?;
    resources::create_namespace(&admin, "m").await?;
    let maps = Api::<ConfigMap>::namespaced(admin.clone(), "m");
    maps.create(&PostParams::default(), &config_map("one", json!({}))?)
        .await?;
    let (client, accepts) = recording_client(&env).await?;
    let dir = kubewasm_testenv::PluginFolder::new();
    dir.put("meta", kubewasm_plugin_artifacts::HOSTILE);
    let sink = Arc::new(MemorySink::default());
    let mut agent = Agent::start(AgentOptions::new(
        Cluster::Kube(client),
        support::configs(&[("meta", r#"{"mode": "metadata-only"}"#)]),
        sink.clone(),
    ))
    .await?;
    let report = agent.follow_plugins(dir.path()).await?;
    anyhow::ensure!(report.failed.is_empty(), "plugins failed: {report:?}");
    wait("meta synced", || synced(&agent, "meta").then_some(())).await?;
    maps.create(&PostParams::default(), &config_map("two", json!({}))?)
        .await?;
    let logged = wait("both ConfigMaps seen", || {
        let logged = lines(&sink, "meta");
        let names = support::field_values(&logged, "name", "value");
        (names.iter().any(|n| n == "one") && names.iter().any(|n| n == "two")).then_some(logged)
    })
    .await?;
    // Metadata is there; what it did not declare is an error naming the declaration.
    for what in ["v", "data", "json", "queried"] {
        let outcomes = support::field_values(&logged, what, "outcome");
        assert!(
            !outcomes.is_empty() && outcomes.iter().all(|o| o == "undeclared"),
            "{what}: {}",
            render(&logged)
        );
    }
    let detail = support::field_values(&logged, "v", "detail");
    assert!(detail[0].contains("metadata only"), "{detail:?}");
    // The server was asked for metadata only, on every list and watch of ConfigMaps (the
    // host's own objects in its namespace are not the informer's).
    let asked = accepts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let maps_asked: Vec<&String> = asked
        .iter()
        .filter(|a| a.starts_with("/api/v1/configmaps "))
        .collect();
    assert!(
        !maps_asked.is_empty()
            && maps_asked
                .iter()
                .all(|a| a.contains("as=PartialObjectMetadata") && a.contains("g=meta.k8s.io")),
        "every ConfigMap request asked for metadata only: {asked:?}"
    );
    let informer = agent.factory().get(&config_maps()).expect("cached");
    assert!(
        informer
            .store()
            .list()
            .iter()
            .all(|o| !o.json().contains("\"data\"")),
        "the cache holds no data"
    );
    Ok(())
}
