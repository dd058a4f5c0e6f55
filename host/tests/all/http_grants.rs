//! Outbound HTTP from plugins: the rollout notifier reaches a webhook on loopback that the
//! operator granted and nothing else, and a webhook that never answers cannot hold a call
//! past its deadline. The webhooks are real HTTP servers on loopback, started by the test.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubewasm::wasm::http::AllowedHost;
use kubewasm::wasm::logging::MemorySink;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support;

use support::plugin_status as status;

const WAIT: Duration = Duration::from_secs(60);

const STALLED: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: checkout, namespace: shop}
spec:
  selector: {matchLabels: {app: checkout}}
  template:
    metadata: {labels: {app: checkout}}
    spec: {containers: [{name: app, image: example/checkout:2}]}
status:
  conditions:
    - type: Progressing
      status: 'False'
      reason: ProgressDeadlineExceeded
      message: ReplicaSet checkout-7d9 has timed out progressing.
";

/// A webhook on loopback: every request it received (head and body), answered 200 unless
/// it is `silent` (then it reads and never answers).
struct Webhook {
    address: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<String>>>,
    connections: Arc<Mutex<u32>>,
}

async fn webhook(silent: bool) -> Webhook {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let requests = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(Mutex::new(0));
    let (seen, count) = (requests.clone(), connections.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            *count.lock().expect("lock") += 1;
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read until the head and a Content-Length body are complete.
                loop {
                    let Ok(n) = stream.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        let chunked = head
                            .to_ascii_lowercase()
                            .contains("transfer-encoding: chunked");
                        let done = if chunked {
                            body.ends_with("0\r\n\r\n")
                        } else {
                            body.len() >= length
                        };
                        if done {
                            seen.lock().expect("lock").push(text);
                            break;
                        }
                    }
                }
                if silent {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                }
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    Webhook {
        address,
        requests,
        connections,
    }
}

fn wait_for(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !check() {
        assert!(Instant::now() < deadline, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_notifier_reaches_its_granted_webhook_and_nothing_else_within_its_deadline() {
    let rt = support::tokio();
    let granted = rt.block_on(webhook(false));
    let other = rt.block_on(webhook(false));
    let silent = rt.block_on(webhook(true));
    let cluster = tempfile::tempdir().expect("tempdir");
    std::fs::write(cluster.path().join("checkout.yaml"), STALLED).expect("write");
    let url = |w: &Webhook| format!(r#"{{"url": "http://{}/rollouts"}}"#, w.address);
    let configs = [
        ("notify", url(&granted)),
        ("notify-elsewhere", url(&other)),
        ("notify-silent", url(&silent)),
    ];
    let named: Vec<(&str, &str)> = configs.iter().map(|(n, c)| (*n, c.as_str())).collect();
    let mut config = support::configs(&named);
    let allow = |w: &Webhook| vec![AllowedHost::parse(&w.address.to_string()).expect("host")];
    for (name, hosts) in [
        ("notify", allow(&granted)),
        // Granted the first webhook, configured to post to the second.
        ("notify-elsewhere", allow(&granted)),
        ("notify-silent", allow(&silent)),
    ] {
        let settings = config.plugins.named.get_mut(name).expect("configured");
        settings.grants.http = hosts;
        if name == "notify-silent" {
            settings.limits.deadline = Duration::from_millis(300);
        }
    }
    let plugins = kubewasm_testenv::PluginFolder::new();
    for (name, _) in &configs {
        plugins.put(name, kubewasm_plugin_artifacts::ROLLOUT_NOTIFIER);
    }
    let mut agent =
        support::folder_agent(&rt, cluster.path(), config, Arc::new(MemorySink::default()));
    rt.block_on(agent.follow_plugins(plugins.path()))
        .expect("plugins load");

    // The granted webhook gets one message about the stalled rollout.
    wait_for("the webhook's message", || {
        !granted.requests.lock().expect("lock").is_empty()
    });
    wait_for("notify delivered", || {
        status(&agent, "notify").delivered >= 1
    });
    let requests = granted.requests.lock().expect("lock").clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(
        requests[0].starts_with("POST /rollouts HTTP/1.1"),
        "{}",
        requests[0]
    );
    assert!(
        requests[0].contains("rollout of shop/checkout stalled: ReplicaSet checkout-7d9"),
        "{}",
        requests[0]
    );
    let notify = status(&agent, "notify");
    assert_eq!((notify.http_sent, notify.http_denied), (1, 0), "{notify:?}");
    // By host and outcome: the granted address answered 200.
    let by_host = |pairs: &[(&str, &str, u64)]| {
        let mut m: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> =
            Default::default();
        for (host, outcome, n) in pairs {
            m.entry((*host).to_owned())
                .or_default()
                .insert((*outcome).to_owned(), *n);
        }
        m
    };
    let granted_host = granted.address.to_string();
    assert_eq!(notify.http_by_host, by_host(&[(&granted_host, "2xx", 1)]));

    // A host not granted: refused in the host, the server never sees a connection.
    wait_for("the refusal", || {
        status(&agent, "notify-elsewhere").given_up >= 1
    });
    let elsewhere = status(&agent, "notify-elsewhere");
    assert_eq!(
        (elsewhere.http_sent, elsewhere.http_denied),
        (0, 1),
        "{elsewhere:?}"
    );
    assert!(
        elsewhere
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("grants.http")),
        "{elsewhere:?}"
    );
    assert_eq!(*other.connections.lock().expect("lock"), 0);
    assert_eq!(
        elsewhere.http_by_host,
        by_host(&[("(not granted)", "denied", 1)]),
        "a host not granted is not named: what a plugin asks for cannot grow the table"
    );

    // A webhook that never answers: every attempt ends at the 300 ms deadline, so the
    // attempts keep coming (retried) instead of one call hanging.
    wait_for("two attempts at the silent webhook", || {
        status(&agent, "notify-silent").failed >= 2
    });
    let s = status(&agent, "notify-silent");
    assert_eq!(s.delivered, 0, "{s:?}");
    let within_half_a_second = s.durations.cumulative[9];
    assert_eq!(
        within_half_a_second, s.durations.count,
        "every call ended within 0.5 s: {s:?}"
    );
    assert!(s.http_sent >= 2, "{s:?}");
    let silent_host = silent.address.to_string();
    let errors = s
        .http_by_host
        .get(&silent_host)
        .and_then(|o| o.get("error"));
    assert!(errors.is_some_and(|n| *n >= 2), "{:?}", s.http_by_host);
}

#[test]
fn a_granted_name_that_resolves_inward_is_refused_after_resolution() {
    // `localhost` is granted by name, but it resolves to loopback: a name may not reach the
    // host's own endpoints, cloud metadata or the pod's own addresses (only a grant of the
    // address itself does).
    let rt = support::tokio();
    let hook = rt.block_on(webhook(false));
    let cluster = tempfile::tempdir().expect("tempdir");
    std::fs::write(cluster.path().join("checkout.yaml"), STALLED).expect("write");
    let port = hook.address.port();
    let url = format!(r#"{{"url": "http://localhost:{port}/rollouts"}}"#);
    let mut config = support::configs(&[("notify", &url)]);
    let settings = config.plugins.named.get_mut("notify").expect("configured");
    settings.grants.http = vec![AllowedHost::parse(&format!("localhost:{port}")).expect("host")];
    let plugins = kubewasm_testenv::PluginFolder::new();
    plugins.put("notify", kubewasm_plugin_artifacts::ROLLOUT_NOTIFIER);
    let mut agent =
        support::folder_agent(&rt, cluster.path(), config, Arc::new(MemorySink::default()));
    rt.block_on(agent.follow_plugins(plugins.path()))
        .expect("plugins load");
    wait_for("the refusal", || status(&agent, "notify").http_denied >= 1);
    let notify = status(&agent, "notify");
    assert_eq!(notify.delivered, 0, "{notify:?}");
    assert!(
        notify
            .last_error
            .as_deref()
            .is_some_and(|e| e.to_ascii_lowercase().contains("prohibited")),
        "{notify:?}"
    );
    assert_eq!(
        *hook.connections.lock().expect("lock"),
        0,
        "never connected"
    );
}
