//! Traces of event handling reach an OTLP/HTTP receiver: one span per delivery attempt with
//! the plugin, the object and the outcome, and one per write it sends, whose `traceparent`
//! the API server's own spans join. One test sends them to a real OpenTelemetry Collector;
//! the others to a receiver double (a hyper server on loopback) that decodes each request
//! with OpenTelemetry's own protobuf types, for exact checks of every field, one of them
//! beside a real kube-apiserver exporting its spans to a real collector. The tracer provider
//! is global to the process, so they run one after the other.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use kubewasm::agent::{Agent, AgentOptions, Cluster};
use kubewasm::traces::{Traces, TracesConfig};
use kubewasm::wasm::logging::MemorySink;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;

mod support;

/// Held by each test: the tracer provider is the process's.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An agent on a folder with ConfigMaps `shop/settings` and `shop/bad`, running audit-log
/// (handles both) and hostile in its `fatal` mode (refuses both, without retries); returns
/// once all four events were handled.
async fn handle_four_events(dir: &std::path::Path) -> Agent {
    let (cluster, plugins) = (dir.join("cluster"), dir.join("plugins"));
    std::fs::create_dir_all(&cluster).expect("mkdir");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    for name in ["settings", "bad"] {
        std::fs::write(
            cluster.join(format!("{name}.yaml")),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: shop}}\n"
            ),
        )
        .expect("write");
    }
    std::fs::copy(
        kubewasm_plugin_artifacts::AUDIT_LOG,
        plugins.join("audit-log.wasm"),
    )
    .expect("copy");
    std::fs::copy(
        kubewasm_plugin_artifacts::HOSTILE,
        plugins.join("hostile.wasm"),
    )
    .expect("copy");
    let config = support::configs(&[("hostile", r#"{"mode": "fatal"}"#)]);
    let options = AgentOptions::new(
        Cluster::Folder(cluster),
        config,
        Arc::new(MemorySink::default()),
    );
    let mut agent = Agent::start(options).await.expect("agent");
    agent.follow_plugins(&plugins).await.expect("plugins");
    let start = Instant::now();
    while ["audit-log", "hostile"]
        .iter()
        .map(|p| support::plugin_status(&agent, p))
        .map(|s| s.delivered + s.failed)
        .sum::<u64>()
        < 4
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "events not handled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_a_real_opentelemetry_collector() {
    let _one = ONE_AT_A_TIME.lock().await;
    let collector = kubewasm_testenv::otel::Collector::start()
        .await
        .expect("collector");
    let traces =
        Traces::start(&TracesConfig::new(&collector.endpoint).expect("endpoint")).expect("traces");
    let dir = tempfile::tempdir().expect("temp dir");
    let _agent = handle_four_events(dir.path()).await;
    tokio::task::spawn_blocking(move || traces.shutdown())
        .await
        .expect("flush");
    // The debug exporter prints each span it received, with its attributes and status.
    let start = Instant::now();
    let wanted = [
        "service.name: Str(kubewasm)",
        "Name           : handle",
        "Kind           : Consumer",
        "kubewasm.plugin: Str(audit-log)",
        "k8s.object.key: Str(shop/settings)",
        "kubewasm.event: Str(initial-add)",
        "Status code    : Error",
        "Status message : hostile: rejecting shop/bad",
    ];
    loop {
        let output = collector.output();
        let missing: Vec<&&str> = wanted.iter().filter(|w| !output.contains(**w)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the collector did not print {missing:?}:\n{}",
            collector.log_tail(60)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A span as received: its attributes as text, and the resource's.
#[derive(Debug, Clone)]
struct Received {
    span: Span,
    attributes: BTreeMap<String, String>,
    resource: BTreeMap<String, String>,
    content_type: String,
}

fn text(
    attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// Serves OTLP/HTTP on a free loopback port; what it received, span by span.
async fn receiver() -> (std::net::SocketAddr, Arc<Mutex<Vec<Received>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let store = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let store = store.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let store = store.clone();
                        async move {
                            let path_ok = request.uri().path() == "/v1/traces";
                            let content_type = request
                                .headers()
                                .get(hyper::header::CONTENT_TYPE)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            let body = request.into_body().collect().await?.to_bytes();
                            let decoded = ExportTraceServiceRequest::decode(body.as_ref());
                            let status = match (path_ok, decoded) {
                                (true, Ok(export)) => {
                                    let mut store = store.lock().expect("store");
                                    for resource_spans in export.resource_spans {
                                        let resource = text(
                                            &resource_spans
                                                .resource
                                                .map(|r| r.attributes)
                                                .unwrap_or_default(),
                                        );
                                        for scope in resource_spans.scope_spans {
                                            for span in scope.spans {
                                                store.push(Received {
                                                    attributes: text(&span.attributes),
                                                    span,
                                                    resource: resource.clone(),
                                                    content_type: content_type.clone(),
                                                });
                                            }
                                        }
                                    }
                                    200
                                }
                                _ => 400,
                            };
                            let mut response = Response::new(Full::new(Bytes::new()));
                            *response.status_mut() =
                                hyper::StatusCode::from_u16(status).expect("status");
                            response.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static("application/x-protobuf"),
                            );
                            Ok::<_, hyper::Error>(response)
                        }
                    });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    (address, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_delivery_attempt_is_a_span_at_the_otlp_receiver() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (address, received) = receiver().await;
    let traces = Traces::start(&TracesConfig::new(&format!("http://{address}")).expect("endpoint"))
        .expect("traces");

    let dir = tempfile::tempdir().expect("temp dir");
    let agent = handle_four_events(dir.path()).await;
    tokio::task::spawn_blocking(move || traces.shutdown())
        .await
        .expect("flush");

    let spans = received.lock().expect("spans").clone();
    let find = |plugin: &str, key: &str| {
        spans
            .iter()
            .find(|r| {
                r.attributes
                    .get("kubewasm.plugin")
                    .is_some_and(|p| p == plugin)
                    && r.attributes.get("k8s.object.key").is_some_and(|k| k == key)
            })
            .unwrap_or_else(|| panic!("no span for {plugin} {key} in {spans:#?}"))
    };
    let ok = find("audit-log", "shop/settings");
    assert_eq!(ok.span.name, "handle");
    assert_eq!(ok.content_type, "application/x-protobuf");
    assert_eq!(ok.attributes["kubewasm.event"], "initial-add");
    assert_eq!(ok.attributes["kubewasm.outcome"], "ok");
    assert_eq!(ok.attributes["k8s.resource"], "v1/ConfigMap");
    assert_eq!(
        ok.attributes["kubewasm.plugin.digest"],
        support::plugin_status(&agent, "audit-log").digest
    );
    assert_eq!(ok.resource["service.name"], "kubewasm");
    assert!(ok.span.end_time_unix_nano > ok.span.start_time_unix_nano);
    assert_eq!(
        ok.span.status.as_ref().map(|s| s.code),
        Some(StatusCode::Ok as i32)
    );

    // Each plugin's load is a span of its own, with what became of it.
    let load = spans
        .iter()
        .find(|r| {
            r.span.name == "load"
                && r.attributes
                    .get("kubewasm.plugin")
                    .is_some_and(|p| p == "audit-log")
        })
        .unwrap_or_else(|| panic!("no load span for audit-log in {spans:#?}"));
    assert_eq!(load.attributes["kubewasm.load.outcome"], "loaded");
    assert_eq!(
        load.attributes["kubewasm.plugin.digest"],
        ok.attributes["kubewasm.plugin.digest"]
    );

    let refused = find("hostile", "shop/bad");
    assert_eq!(refused.attributes["kubewasm.outcome"], "error");
    assert_eq!(refused.attributes["kubewasm.retry"], "false");
    let status = refused.span.status.clone().expect("a status");
    assert_eq!(status.code, StatusCode::Error as i32);
    assert!(
        status.message.contains("hostile: rejecting shop/bad"),
        "{status:?}"
    );
    assert_eq!(
        find("audit-log", "shop/bad").attributes["kubewasm.outcome"],
        "ok"
    );
}

/// A real kube-apiserver (namespace `shop` made) whose own spans go to a real collector over
/// OTLP/gRPC, sampling only requests whose traceparent says so (it passes its context on to
/// the webhooks it calls), and kubewasm's traces going to the receiver double.
struct TracedCluster {
    collector: kubewasm_testenv::otel::Collector,
    env: kubewasm_testenv::TestEnv,
    admin: kube::Client,
    received: Arc<Mutex<Vec<Received>>>,
    traces: Traces,
}

async fn traced_cluster() -> TracedCluster {
    let collector = kubewasm_testenv::otel::Collector::start()
        .await
        .expect("collector");
    let env = kubewasm_testenv::TestEnv::start_with(kubewasm_testenv::Options {
        traces_to: Some(collector.grpc_endpoint.clone()),
        ..Default::default()
    })
    .await
    .expect("test environment");
    let admin = env.client().await.expect("admin client");
    kubewasm_testenv::resources::create_namespace(&admin, "shop")
        .await
        .expect("namespace");
    let (address, received) = receiver().await;
    let traces = Traces::start(&TracesConfig::new(&format!("http://{address}")).expect("endpoint"))
        .expect("traces");
    TracedCluster {
        collector,
        env,
        admin,
        received,
        traces,
    }
}

/// Trace and span ids as the collector prints them.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_the_attempts_child_and_the_api_servers_spans_join_its_trace() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};
    let _one = ONE_AT_A_TIME.lock().await;
    let TracedCluster {
        collector,
        env: _env,
        admin,
        received,
        traces,
    } = traced_cluster().await;
    let config = support::labeler_in("shop");
    let options = AgentOptions::new(
        Cluster::Kube(admin.clone()),
        config,
        Arc::new(MemorySink::default()),
    );
    let mut agent = Agent::start(options).await.expect("agent");
    let plugins =
        kubewasm_testenv::PluginFolder::with(&[("labeler", kubewasm_plugin_artifacts::LABELER)]);
    agent.follow_plugins(plugins.path()).await.expect("plugins");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "example/c:1"}]}
    }))
    .expect("pod");
    let pods = Api::<Pod>::namespaced(admin.clone(), "shop");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("created");
    let start = Instant::now();
    while support::plugin_status(&agent, "labeler").writes_sent == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "no write sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::task::spawn_blocking(move || traces.shutdown())
        .await
        .expect("flush");

    let spans = received.lock().expect("spans").clone();
    let write = spans
        .iter()
        .find(|r| r.span.name == "write")
        .unwrap_or_else(|| panic!("no write span in {spans:#?}"));
    let attempt = spans
        .iter()
        .find(|r| r.span.name == "handle" && r.span.span_id == write.span.parent_span_id)
        .unwrap_or_else(|| panic!("no handle span is the write's parent: {spans:#?}"));
    assert_eq!(attempt.span.trace_id, write.span.trace_id);
    assert_eq!(attempt.attributes["k8s.object.key"], "shop/web");
    assert_eq!(write.attributes["kubewasm.plugin"], "labeler");
    assert_eq!(write.attributes["kubewasm.write.verb"], "apply");
    assert_eq!(write.attributes["k8s.object.name"], "web");
    assert_eq!(write.attributes["http.response.status_code"], "200");
    assert_eq!(
        write.span.status.as_ref().map(|s| s.code),
        Some(StatusCode::Ok as i32)
    );
    // The API server got the write span's traceparent: its own span of that request is the
    // write span's child, in the same trace.
    let parent = format!("Parent ID      : {}", hex(&write.span.span_id));
    let trace = format!("Trace ID       : {}", hex(&write.span.trace_id));
    let start = Instant::now();
    loop {
        let output = collector.output();
        if output.contains("service.name: Str(apiserver)")
            && output.contains(&parent)
            && output.contains(&trace)
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "kube-apiserver's span with {parent} did not reach the collector:\n{}",
            collector.log_tail(80)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_joins_the_trace_the_api_server_carries_to_its_webhook() {
    use kube::api::PostParams;
    use kubewasm::admission::ServeConfig;
    use kubewasm::admission::webhooks::{Target, render};
    let _one = ONE_AT_A_TIME.lock().await;
    let TracedCluster {
        collector: _collector,
        env,
        admin,
        received,
        traces,
    } = traced_cluster().await;
    let tls = tempfile::tempdir().expect("temp dir");
    let (cert_file, key_file) = (tls.path().join("tls.crt"), tls.path().join("tls.key"));
    let cert = env.serving_cert().expect("serving certificate");
    std::fs::write(&cert_file, &cert.cert).expect("write");
    std::fs::write(&key_file, &cert.key).expect("write");
    let mut config = support::configs(&[("image-policy", "{}")]);
    config.admission = Some(ServeConfig {
        address: "127.0.0.1:0".parse().expect("address"),
        cert_file,
        key_file,
        concurrency: 2,
        record_reviews: None,
    });
    let options = AgentOptions::new(
        Cluster::Kube(admin.clone()),
        config,
        Arc::new(MemorySink::default()),
    );
    let mut agent = Agent::start(options).await.expect("agent");
    let plugins = kubewasm_testenv::PluginFolder::with(&[(
        "image-policy",
        kubewasm_plugin_artifacts::IMAGE_POLICY,
    )]);
    agent.follow_plugins(plugins.path()).await.expect("plugins");
    let admission = agent
        .plugins()
        .admitter("image-policy")
        .expect("image-policy serves admission")
        .admission
        .clone();
    let served = agent.webhooks_address().expect("webhooks served");
    let ca = env.ca_cert();
    let yaml = render(
        "kubewasm",
        &[("image-policy".to_owned(), admission)],
        &Target::Url(format!("https://{served}")),
        Some(ca.as_bytes()),
    )
    .expect("webhook configuration");
    support::apply_yaml(&admin, &yaml)
        .await
        .expect("registered");

    // Pods created with a sampled traceparent of ours, until the webhook (no allow list yet:
    // every image refused) answers.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let body = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]}
    }))
    .expect("pod");
    let start = Instant::now();
    loop {
        let mut request = kube::core::Request::new("/api/v1/namespaces/shop/pods")
            .create(&PostParams::default(), body.clone())
            .expect("request");
        request.headers_mut().insert(
            "traceparent",
            format!("00-{trace}-00f067aa0ba902b7-01")
                .parse()
                .expect("header"),
        );
        match admin.request_text(request).await {
            Err(e) if e.to_string().contains("image-policy") => break,
            other => assert!(
                start.elapsed() < Duration::from_secs(60),
                "the webhook never refused: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::task::spawn_blocking(move || traces.shutdown())
        .await
        .expect("flush");
    let spans = received.lock().expect("spans").clone();
    let review = spans
        .iter()
        .find(|r| r.span.name == "review" && hex(&r.span.trace_id) == trace)
        .unwrap_or_else(|| panic!("no review span in our trace: {spans:#?}"));
    assert_eq!(review.attributes["kubewasm.plugin"], "image-policy");
    assert_eq!(review.attributes["kubewasm.review.operation"], "CREATE");
    assert_eq!(review.attributes["k8s.object.name"], "web");
    assert_eq!(review.attributes["kubewasm.review.allowed"], "false");
    // Its parent is the API server's span of the webhook call, not ours.
    assert!(!review.span.parent_span_id.is_empty());
    assert_ne!(hex(&review.span.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(review.span.kind, SpanKind::Server as i32);
}
