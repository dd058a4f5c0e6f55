//! The Kubernetes source under faults a real API server cannot be made to produce on demand,
//! against `ApiDouble`, an in-process double of the API server (see kubewasm-testenv). The
//! same source against the real kube-apiserver is in e2e_apiserver.rs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kubewasm::gvk::Gvk;
use kubewasm::informer::factory::{InformerFactory, Lease};
use kubewasm::informer::queue::{Delivery, QueueReceiver, queue};
use kubewasm::informer::{Filter, Notification, Subscription};
use kubewasm::object::Transform;
use kubewasm::source::kube::KubeSource;
use kubewasm::source::{Source, SourceEvent};
use kubewasm_testenv::double::{ApiDouble, Fault, Seen, Verb};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

/// An informer for ConfigMaps fed by the double, with one subscriber.
struct Feed {
    source: Arc<KubeSource>,
    rx: QueueReceiver,
    _sub: Subscription,
    _lease: Lease,
}

fn feed(double: &ApiDouble) -> anyhow::Result<Feed> {
    let handle = tokio::runtime::Handle::current();
    let source = Arc::new(KubeSource::new(
        double.client()?,
        Transform::default(),
        handle.clone(),
    ));
    let factory = InformerFactory::new(source.clone(), handle);
    let lease = factory.acquire(
        &Gvk::new("", "v1", "ConfigMap"),
        &kubewasm::source::Scope::everything(),
    );
    let (tx, rx) = queue(usize::MAX, usize::MAX);
    let sub = lease.informer().subscribe(Filter::default(), tx);
    Ok(Feed {
        source,
        rx,
        _sub: sub,
        _lease: lease,
    })
}

/// `+a` add, `+a*` initial add, `~a` update, `-a` delete, `-a?` stale delete, `|` end of the
/// initial state, `relisted` the end of a later list.
fn describe(d: &Delivery) -> String {
    match d {
        Delivery::InitialListSent => "|".into(),
        Delivery::Relisted => "relisted".into(),
        Delivery::Event(Notification::Added { object, initial }) => {
            format!("+{}{}", object.name(), if *initial { "*" } else { "" })
        }
        Delivery::Event(Notification::Updated { new, .. }) => format!("~{}", new.name()),
        Delivery::Event(Notification::Deleted { object, stale }) => {
            format!("-{}{}", object.name(), if *stale { "?" } else { "" })
        }
        Delivery::Event(Notification::Sync(o) | Notification::Requeue(o)) => {
            format!("={}", o.name())
        }
    }
}

impl Feed {
    /// The next `n` deliveries, waiting up to `WAIT`; fails with what arrived otherwise.
    async fn next(&self, n: usize) -> anyhow::Result<Vec<String>> {
        let deadline = Instant::now() + WAIT;
        let mut got = Vec::new();
        while got.len() < n {
            anyhow::ensure!(Instant::now() < deadline, "only got {got:?}");
            match self.rx.recv_timeout(Duration::ZERO) {
                Ok(d) => got.push(describe(&d)),
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        Ok(got)
    }

    /// Fails if anything is delivered within `quiet`.
    async fn nothing_more(&self, quiet: Duration) -> anyhow::Result<()> {
        tokio::time::sleep(quiet).await;
        let extra: Vec<String> = self.rx.drain().iter().map(describe).collect();
        anyhow::ensure!(extra.is_empty(), "unexpected deliveries: {extra:?}");
        Ok(())
    }
}

fn of(requests: &[Seen], verb: Verb) -> Vec<Seen> {
    requests
        .iter()
        .filter(|r| r.verb == Some(verb))
        .cloned()
        .collect()
}

/// Waits until the double has seen a request matching `pred`.
async fn seen(
    double: &ApiDouble,
    what: &str,
    pred: impl Fn(&[Seen]) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    while !pred(&double.requests()) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what} never happened; requests: {:#?}",
            double.requests()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_pages_of_500_then_a_watch_with_client_go_parameters() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    double.set_streaming_lists(false);
    double.set_page_delay(Duration::from_millis(100));
    for i in 0..1201 {
        double.create("ns", &format!("cm-{i:04}"), json!({"i": i}));
    }
    let listed_at = double.resource_version();
    let feed = feed(&double)?;
    let initial = feed.next(1202).await?;
    assert!(
        initial[..1201].iter().all(|d| d.ends_with('*')),
        "initial adds"
    );
    assert_eq!(initial[1201], "|");

    let requests = double.requests();
    let streaming = of(&requests, Verb::Watch);
    assert_eq!(
        streaming[0].param("sendInitialEvents"),
        "true",
        "a streaming list is tried first"
    );
    let lists = of(&requests, Verb::List);
    assert_eq!(lists.len(), 3, "1201 objects in pages of 500: {lists:#?}");
    assert!(lists.iter().all(|l| l.param("limit") == "500"));
    assert_eq!(
        lists[0].param("resourceVersion"),
        "",
        "a consistent first read"
    );
    assert_ne!(lists[1].param("continue"), "");
    assert_ne!(lists[2].param("continue"), "");

    double.create("ns", "new", json!({}));
    double.update("ns", "new", json!({"x": "1"}));
    double.delete("ns", "cm-0000");
    assert_eq!(feed.next(3).await?, ["+new", "~new", "-cm-0000"]);
    let watches = of(&double.requests(), Verb::Watch);
    let watch = &watches[1];
    assert_eq!(watch.param("resourceVersion"), listed_at.to_string());
    assert_eq!(watch.param("allowWatchBookmarks"), "true");
    assert_eq!(watch.param("sendInitialEvents"), "");
    let timeout: u64 = watch.param("timeoutSeconds").parse()?;
    assert!((300..600).contains(&timeout), "timeout {timeout} s");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_needs_no_list_request_and_goes_on_as_the_watch() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    double.create("ns", "a", json!({}));
    double.create("ns", "b", json!({}));
    let feed = feed(&double)?;
    assert_eq!(feed.next(3).await?, ["+a*", "+b*", "|"]);
    double.update("ns", "a", json!({"v": "2"}));
    assert_eq!(feed.next(1).await?, ["~a"]);
    let requests = double.requests();
    assert!(of(&requests, Verb::List).is_empty(), "{requests:#?}");
    let watches = of(&requests, Verb::Watch);
    assert_eq!(
        watches.len(),
        1,
        "one request lists and watches: {watches:#?}"
    );
    assert_eq!(watches[0].param("resourceVersionMatch"), "NotOlderThan");
    assert_eq!(watches[0].param("resourceVersion"), "", "a consistent read");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_cut_half_way_is_streamed_again() -> anyhow::Result<()> {
    // A cut is not a refusal: the list starts over by streaming, never falls back to pages.
    let double = ApiDouble::start().await?;
    for name in ["a", "b", "c"] {
        double.create("ns", name, json!({}));
    }
    double.fault(Fault::CutWatch { after: 1 });
    let feed = feed(&double)?;
    assert_eq!(feed.next(4).await?, ["+a*", "+b*", "+c*", "|"]);
    let requests = double.requests();
    assert!(of(&requests, Verb::List).is_empty(), "{requests:#?}");
    let watches = of(&requests, Verb::Watch);
    assert!(
        watches.len() >= 2
            && watches[..2]
                .iter()
                .all(|w| w.param("sendInitialEvents") == "true"),
        "streamed twice: {watches:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_cut_mid_stream_resumes_from_the_last_event_without_relist() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    let feed = feed(&double)?;
    assert_eq!(feed.next(1).await?, ["|"]);
    // The next watch dies after two events; the one after resumes where it stopped.
    double.fault(Fault::CutWatch { after: 2 });
    double.cut_watches();
    let rvs: Vec<u64> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| double.create("ns", n, json!({})))
        .collect();
    assert_eq!(feed.next(4).await?, ["+a", "+b", "+c", "+d"]);
    feed.nothing_more(Duration::from_millis(300)).await?;
    let requests = double.requests();
    assert!(of(&requests, Verb::List).is_empty(), "no relist");
    let watches = of(&requests, Verb::Watch);
    assert!(watches.len() >= 3, "{watches:#?}");
    assert!(
        watches[1..]
            .iter()
            .all(|w| w.param("sendInitialEvents").is_empty()),
        "resumed, not relisted: {watches:#?}"
    );
    assert_eq!(
        watches
            .last()
            .map(|w| w.param("resourceVersion").to_owned()),
        Some(rvs[1].to_string()),
        "resumed after b, the last event before the cut"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_relists_from_the_last_version_then_consistently_with_tombstones() -> anyhow::Result<()>
{
    let double = ApiDouble::start().await?;
    double.set_streaming_lists(false);
    for name in ["a", "b", "c"] {
        double.create("ns", name, json!({}));
    }
    let feed = feed(&double)?;
    assert_eq!(feed.next(4).await?, ["+a*", "+b*", "+c*", "|"]);
    double.create("ns", "e", json!({}));
    assert_eq!(feed.next(1).await?, ["+e"]);
    let last_seen = double.resource_version();
    let lists_before = of(&double.requests(), Verb::List).len();

    // While the watch is down: b deleted, c changed, d created, history compacted. The list
    // from the last version seen is refused too, so the relist becomes a consistent read.
    double.fault(Fault::Status {
        verb: Verb::List,
        code: 410,
    });
    double.while_disconnected(|d| {
        d.delete("ns", "b");
        d.update("ns", "c", json!({"v": "2"}));
        d.create("ns", "d", json!({}));
        d.compact();
    });
    assert_eq!(feed.next(4).await?, ["~c", "+d", "-b?", "relisted"]);
    feed.nothing_more(Duration::from_millis(300)).await?;

    let lists = of(&double.requests(), Verb::List)[lists_before..].to_vec();
    assert_eq!(lists.len(), 2, "{lists:#?}");
    assert_eq!(lists[0].param("resourceVersion"), last_seen.to_string());
    assert_eq!(lists[0].param("resourceVersionMatch"), "NotOlderThan");
    assert_eq!(
        lists[1].param("resourceVersion"),
        "",
        "then a consistent read"
    );
    let stats = &feed.source.stats()[0].1;
    assert_eq!(stats.relists, 1, "{stats:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_alone_keep_the_resume_version_fresh() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    double.create("ns", "a", json!({}));
    double.set_bookmarks(Some(Duration::from_millis(20)));
    let feed = feed(&double)?;
    assert_eq!(feed.next(2).await?, ["+a*", "|"]);
    // Other types change; this one only hears bookmarks. Then history is compacted away.
    double.advance(100);
    let advanced = double.resource_version();
    tokio::time::sleep(Duration::from_millis(300)).await;
    double.while_disconnected(|d| {
        d.compact();
    });
    seen(&double, "a resumed watch", |r| {
        of(r, Verb::Watch).len() >= 2
    })
    .await?;
    feed.nothing_more(Duration::from_millis(300)).await?;
    let watches = of(&double.requests(), Verb::Watch);
    assert_eq!(
        watches[1].param("resourceVersion"),
        advanced.to_string(),
        "resumed from the bookmark, so compaction forced no relist"
    );
    assert!(of(&double.requests(), Verb::List).is_empty());
    assert_eq!(feed.source.stats()[0].1.relists, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_500_and_429_back_off_then_recover() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    double.set_streaming_lists(false);
    double.create("ns", "a", json!({}));
    for code in [500, 429] {
        double.fault(Fault::Status {
            verb: Verb::List,
            code,
        });
    }
    let feed = feed(&double)?;
    assert_eq!(feed.next(2).await?, ["+a*", "|"]);
    double.fault(Fault::Status {
        verb: Verb::Watch,
        code: 500,
    });
    double.cut_watches();
    double.create("ns", "b", json!({}));
    assert_eq!(feed.next(1).await?, ["+b"]);

    // kube's client retries the 429 itself (its default retry policy); the reflector backs
    // off on the 500s.
    let lists = of(&double.requests(), Verb::List);
    assert_eq!(lists.len(), 3, "500, 429, then the list: {lists:#?}");
    // `b` may come on the watch before its cut lands: the rewatch's 500 is counted after.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while feed.source.stats()[0].1.errors < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = &feed.source.stats()[0].1;
    assert!(stats.errors >= 2, "{stats:?}");
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("500")),
        "{stats:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_spaces_out_retries() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    double.set_streaming_lists(false);
    for _ in 0..2 {
        double.fault(Fault::Status {
            verb: Verb::List,
            code: 500,
        });
    }
    let started = Instant::now();
    let feed = feed(&double)?;
    assert_eq!(feed.next(1).await?, ["|"]);
    // client-go's backoff: 800 ms then 1.6 s, each jittered down by at most half.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1200),
        "retried after {took:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_back_from_an_outage_is_reconnected_to_at_once() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    double.create("ns", "a", json!({}));
    let feed = feed(&double)?;
    assert_eq!(feed.next(2).await?, ["+a*", "|"]);
    // Down long enough for the backoff to grow: after five failures the next attempt waits
    // 6.4 to 12.8 s.
    double.set_down(true);
    let deadline = Instant::now() + Duration::from_secs(60);
    while feed.source.stats()[0].1.errors < 5 {
        anyhow::ensure!(Instant::now() < deadline, "{:?}", feed.source.stats());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::ensure!(!feed.source.reachable(), "the probe sees it down");
    double.set_down(false);
    let back = Instant::now();
    double.create("ns", "b", json!({}));
    assert_eq!(feed.next(1).await?, ["+b"]);
    // The probe asks once a second, and every waiting reflector tries when it answers.
    let took = back.elapsed();
    assert!(took < Duration::from_secs(5), "reconnected {took:?} after");
    assert!(feed.source.reachable());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_names_the_type_and_the_missing_permission_then_recovers() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    double.set_streaming_lists(false);
    double.fault(Fault::Status {
        verb: Verb::List,
        code: 403,
    });
    let feed = feed(&double)?;
    seen(&double, "the retried list", |r| {
        of(r, Verb::List).len() >= 2
    })
    .await?;
    let stats = &feed.source.stats()[0].1;
    let error = stats.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("forbidden")
            && error.contains("may not list configmaps (core group)")
            && error.contains("get, list and watch"),
        "{error}"
    );
    assert_eq!(feed.next(1).await?, ["|"], "synced once allowed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_the_server_does_not_serve_is_empty_and_its_discovery_failures_are_counted()
-> anyhow::Result<()> {
    use futures::StreamExt;
    let double = ApiDouble::start().await?;
    let source = KubeSource::new(
        double.client()?,
        Transform::default(),
        tokio::runtime::Handle::current(),
    );
    let widgets = Gvk::new("example.com", "v1", "Widget");
    let mut events = source.watch(&widgets, &kubewasm::source::Scope::everything());
    // Reported once as an empty list, so it holds nothing back.
    let first = tokio::time::timeout(WAIT, events.next()).await?;
    assert!(matches!(first, Some(SourceEvent::ListStarted)), "{first:?}");
    let second = tokio::time::timeout(WAIT, events.next()).await?;
    assert!(matches!(second, Some(SourceEvent::ListDone)), "{second:?}");
    // Looked for again on a backoff (0.8 s, then 1.6 s ...), each failure counted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = source
        .stats()
        .into_iter()
        .find(|(g, _)| g == &widgets)
        .map(|(_, s)| s)
        .expect("stats for the type");
    assert!(stats.errors >= 2, "{stats:?}");
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("discovery: ")),
        "{stats:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_lines_that_cannot_be_decoded_are_skipped_counted_and_named() -> anyhow::Result<()> {
    let double = ApiDouble::start().await?;
    let feed = feed(&double)?;
    assert_eq!(feed.next(1).await?, ["|"]);
    let errors = |feed: &Feed| feed.source.stats()[0].1.clone();

    // One line of 17 MiB, past the longest kept (16 MiB): read to its end, never held whole.
    let huge = format!(
        "{{\"type\":\"ADDED\",\"object\":{{\"kind\":\"ConfigMap\",\"data\":{{\"x\":\"{}\"}}}}}}\n",
        "x".repeat(17 << 20)
    );
    let bytes = huge.len();
    double.fault(Fault::Line(huge.into()));
    double.cut_watches();
    double.create("ns", "a", json!({}));
    assert_eq!(feed.next(1).await?, ["+a"], "the stream goes on after it");
    let stats = errors(&feed);
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains(&format!(
                "skipping watch event: line of {bytes} bytes is longer than the 16777216 kept"
            ))),
        "{stats:?}"
    );

    // A line that is not JSON.
    double.fault(Fault::Line("{\"type\":\"ADDED\",\"object\":{\n".into()));
    double.cut_watches();
    double.create("ns", "b", json!({}));
    assert_eq!(feed.next(1).await?, ["+b"]);
    let after = errors(&feed);
    assert!(after.errors > stats.errors, "{after:?}");
    assert!(
        after
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("skipping watch event: ") && !e.contains("longer than")),
        "{after:?}"
    );

    // An event type of 1 MiB: the reason quotes it, cut to 4 KiB before it is kept.
    let kind = "T".repeat(1 << 20);
    double.fault(Fault::Line(
        format!("{{\"type\":\"{kind}\",\"object\":{{}}}}\n").into(),
    ));
    double.cut_watches();
    double.create("ns", "c", json!({}));
    assert_eq!(feed.next(1).await?, ["+c"]);
    let cut = errors(&feed).last_error.unwrap_or_default();
    assert!(
        cut.starts_with("skipping watch event: unknown watch event type \"TTT")
            && cut.ends_with(" [cut]")
            && cut.len() <= 4096 + " [cut]".len(),
        "{} bytes: {}",
        cut.len(),
        &cut[..cut.len().min(200)]
    );
    Ok(())
}
