//! Replicas' shares of the key space on a real kube-apiserver, twice: 1.36 with
//! `ShardedListAndWatch` (the server sends each replica its share) and 1.34 without it (the
//! server ignores the selector and the share is kept at decode); the results must be the
//! same, and each replica says which way it was filtered. Three informer factories, each one
//! replica's, split 300 ConfigMaps in 30
//! namespaces between them: every object is cached by exactly one, cluster-scoped objects by
//! all. A fourth replica's arrival moves a quarter of the slices: the others drop what they
//! give up without an event. When one leaves, the others take its slices over and hear
//! exactly its objects, as initial adds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubewasm::gvk::Gvk;
use kubewasm::informer::factory::{InformerFactory, Lease};
use kubewasm::informer::queue::{self, Delivery, QueueReceiver};
use kubewasm::informer::{Filter, Notification, Subscription};
use kubewasm::object::Transform;
use kubewasm::shard::{Cuts, ShardKey, Share, Slices, settle};
use kubewasm::source::Scope;
use kubewasm::source::kube::KubeSource;
use kubewasm_testenv::{TestEnv, resources};
use serde_json::json;

use crate::support;

const WAIT: Duration = Duration::from_secs(60);
const NAMESPACES: usize = 30;
const PER_NAMESPACE: usize = 10;

/// One replica: its factory, its sources' stats, a lease on ConfigMaps and on Namespaces,
/// and a subscriber on ConfigMaps.
struct Replica {
    factory: Arc<InformerFactory>,
    source: Arc<KubeSource>,
    maps: Lease,
    _namespaces: Lease,
    _sub: Subscription,
    rx: QueueReceiver,
}

impl Replica {
    fn start(client: &kube::Client, share: Share) -> Self {
        let tasks = tokio::runtime::Handle::current();
        let source = Arc::new(KubeSource::new(
            client.clone(),
            Transform::default(),
            tasks.clone(),
        ));
        let factory = InformerFactory::new(source.clone(), tasks);
        factory.set_share(Some(share));
        let maps = factory.acquire(&config_maps(), &Scope::everything());
        let namespaces = factory.acquire(&Gvk::new("", "v1", "Namespace"), &Scope::everything());
        let (tx, rx) = queue::queue(usize::MAX, usize::MAX);
        let sub = maps.informer().subscribe(Filter::default(), tx);
        Self {
            factory,
            source,
            maps,
            _namespaces: namespaces,
            _sub: sub,
            rx,
        }
    }

    /// The ConfigMaps it caches, by key, in the test's namespaces.
    fn cached(&self) -> BTreeSet<String> {
        self.maps
            .informer()
            .store()
            .list()
            .iter()
            .filter(|o| o.namespace().is_some_and(|ns| ns.starts_with("s-")))
            .map(|o| o.key().to_string())
            .collect()
    }

    /// What its subscriber received since the last call: `add`, `add-initial` or another
    /// kind, with the key.
    fn heard(&self) -> Vec<(String, String)> {
        self.rx
            .drain()
            .into_iter()
            .filter_map(|d| match d {
                Delivery::Event(Notification::Added { object, initial }) => Some((
                    if initial { "add-initial" } else { "add" }.to_owned(),
                    object.key().to_string(),
                )),
                Delivery::Event(n) => Some((format!("{n:?}"), n.object().key().to_string())),
                _ => None,
            })
            .filter(|(_, key)| key.starts_with("s-"))
            .collect()
    }
}

fn config_maps() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

/// Each member's share among `members`, by namespace, settled from the shares `before`
/// (a member new to the group claims nothing yet).
fn shares(before: &BTreeMap<String, Share>, members: &[&str]) -> BTreeMap<String, Share> {
    let claims = members
        .iter()
        .map(|m| {
            let held = before.get(*m).map_or(Slices::none(), |s| s.slices);
            ((*m).to_owned(), held)
        })
        .collect();
    settle(claims)
        .into_iter()
        .map(|(m, slices)| {
            (
                m,
                Share {
                    key: ShardKey::Namespace,
                    slices,
                    cuts: Cuts::EQUAL,
                },
            )
        })
        .collect()
}

async fn wait<T>(what: &str, check: impl Fn() -> Option<T>) -> anyhow::Result<T> {
    support::wait_for(what, WAIT, check).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_split_the_objects_by_namespace_filtered_by_the_server() -> anyhow::Result<()> {
    split_and_hand_over(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_split_the_objects_by_namespace_filtered_at_decode_by_an_older_server()
-> anyhow::Result<()> {
    split_and_hand_over(false).await
}

/// Three replicas split the objects, a fourth joins, one leaves, on a server with sharded
/// lists (`sharded`) or without.
async fn split_and_hand_over(sharded: bool) -> anyhow::Result<()> {
    let env = TestEnv::start_with(kubewasm_testenv::Options {
        sharded_lists: sharded,
        ..Default::default()
    })
    .await?;
    let client = env.client().await?;
    let mut all = BTreeSet::new();
    for n in 0..NAMESPACES {
        // Names that differ early: FNV-1a barely moves its top bits for a change in a
        // name's last byte or two, so `s-1` ... `s-29` would share three slices (see
        // docs/design/sharding.md).
        let ns = format!("s-{:08x}", (n as u32).wrapping_mul(0x9e37_79b1));
        resources::create_namespace(&client, &ns).await?;
        let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
        for i in 0..PER_NAMESPACE {
            let map: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": format!("m-{i}")}}))?;
            api.create(&PostParams::default(), &map).await?;
            all.insert(format!("{ns}/m-{i}"));
        }
    }

    let three = shares(&BTreeMap::new(), &["a", "b", "c"]);
    let replicas: BTreeMap<String, Replica> = three
        .iter()
        .map(|(m, share)| (m.clone(), Replica::start(&client, *share)))
        .collect();
    let namespaces_cached = |r: &Replica| {
        r.factory
            .get(&Gvk::new("", "v1", "Namespace"))
            .map(|i| i.store().list().len())
            .unwrap_or_default()
    };
    let holdings = wait("each replica synced its share and the namespaces", || {
        let held: BTreeMap<&String, BTreeSet<String>> =
            replicas.iter().map(|(m, r)| (m, r.cached())).collect();
        let total: usize = held.values().map(BTreeSet::len).sum();
        let namespaces = replicas
            .values()
            .all(|r| namespaces_cached(r) >= NAMESPACES);
        (total == all.len() && namespaces).then_some(held)
    })
    .await?;
    // Exactly one owner per object, and the union is every object.
    let mut union = BTreeSet::new();
    for (m, held) in &holdings {
        assert!(!held.is_empty(), "{m} holds nothing");
        for key in held {
            assert!(union.insert(key.clone()), "{key} is held twice");
            let ns = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            let share = &three[*m];
            assert!(share.holds(kubewasm::shard::fnv1a64(ns)), "{key} on {m}");
        }
    }
    assert_eq!(union, all);
    for (m, r) in &replicas {
        // Cluster-scoped objects are everyone's (waited for above).
        assert!(namespaces_cached(r) >= NAMESPACES, "{m}");
        // Filtered where the server can, at decode where it cannot, and said so.
        let mode = r
            .source
            .stats()
            .into_iter()
            .find(|(g, _)| *g == config_maps())
            .and_then(|(_, s)| s.shard_filter);
        let expected = if sharded {
            kubewasm::source::kube::stats::ShardFilter::Server
        } else {
            kubewasm::source::kube::stats::ShardFilter::Client
        };
        assert_eq!(mode, Some(expected), "{m}");
        let initial = r.heard();
        assert!(
            initial.iter().all(|(kind, _)| kind == "add-initial"),
            "{m}: {initial:?}"
        );
    }

    // A fourth member: each old replica gives up what moves, the newcomer takes it over.
    let four = shares(&three, &["a", "b", "c", "d"]);
    let newcomer = Replica::start(&client, four["d"]);
    for (m, r) in &replicas {
        r.factory.set_share(Some(four[m]));
    }
    let moved: BTreeSet<String> = all
        .iter()
        .filter(|key| {
            let ns = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            four["d"].holds(kubewasm::shard::fnv1a64(ns))
        })
        .cloned()
        .collect();
    wait("the newcomer holds its share", || {
        (newcomer.cached() == moved).then_some(())
    })
    .await?;
    wait("the others gave it up", || {
        replicas
            .iter()
            .all(|(m, r)| r.cached() == &holdings[m] - &moved)
            .then_some(())
    })
    .await?;
    // Exactly the newcomer's fair share of the slices moved, and only to it.
    assert_eq!(four["d"].slices.count(), 16, "slices moved");
    std::thread::sleep(Duration::from_millis(500));
    for (m, r) in &replicas {
        assert_eq!(
            r.heard(),
            Vec::<(String, String)>::new(),
            "{m} heard the hand-over"
        );
    }
    let joined = newcomer.heard();
    assert!(
        joined.iter().all(|(kind, _)| kind == "add-initial"),
        "{joined:?}"
    );

    // b leaves: a, c and d take its slices over, each hearing exactly its part of b's
    // objects, as initial adds.
    let mut replicas = replicas;
    replicas.insert("d".to_owned(), newcomer);
    let b = replicas.remove("b").expect("b");
    let b_held = b.cached();
    drop(b);
    let three_again = shares(&four, &["a", "c", "d"]);
    for (m, r) in &replicas {
        r.factory.set_share(Some(three_again[m]));
    }
    let owner_of = |key: &String| {
        let ns = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
        three_again
            .iter()
            .find(|(_, s)| s.holds(kubewasm::shard::fnv1a64(ns)))
            .map(|(m, _)| m.clone())
            .unwrap_or_default()
    };
    wait(
        "b's objects taken over, every object held once again",
        || {
            let total: usize = replicas.values().map(|r| r.cached().len()).sum();
            let placed = replicas
                .iter()
                .all(|(m, r)| r.cached().iter().all(|k| owner_of(k) == *m));
            (placed && total == all.len()).then_some(())
        },
    )
    .await?;
    std::thread::sleep(Duration::from_millis(500));
    for (m, r) in &replicas {
        let heard = r.heard();
        let expected: BTreeSet<String> = b_held
            .iter()
            .filter(|k| owner_of(k) == *m)
            .cloned()
            .collect();
        let keys: BTreeSet<String> = heard.iter().map(|(_, k)| k.clone()).collect();
        assert!(
            heard.iter().all(|(kind, _)| kind == "add-initial") && keys == expected,
            "{m} heard {heard:?}, expected initial adds of {expected:?}"
        );
    }
    Ok(())
}
