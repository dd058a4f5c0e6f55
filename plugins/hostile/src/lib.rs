//! A deliberately hostile plugin for the sandbox tests; not an example to follow.
//!
//! It subscribes to ConfigMaps and misbehaves as its configuration says:
//! `{"mode": "loop" | "alloc" | "panic" | "panic-on" | "error" | "fatal" | "log-flood" |
//! "metric-flood" |
//! "secret" | "big-query" | "scoped" | "count" | "slow" | ..., "key": "ns/name"}` (`key` for
//! `panic-on`; `scoped` subscribes to namespace t only and queries beyond it; `declared`
//! declares it reads `/data/v` only and reads that, `/data`, the whole object and, through
//! a query, its own object's `/binaryData`, logging each answer's value; `metadata-only`
//! declares metadata only and reads the same; `count`
//! is harmless: it logs how many events this instance has handled, to observe recycling;
//! `slow` burns about 20 ms of CPU per event (`rounds`: 20,000,000 by default), to fall behind; `huge-args` passes 1 MiB
//! arguments to every query; `huge-log` logs a 1 MiB message with 48 fields of 16 KiB and
//! fails with a 1 MiB error; `copy-flood` asks the host to copy tens of MiB in one call (`key`:
//! `log`, `get` or `error`); `squat` declares an index under deployment-view's index
//! name; `sleep` sleeps an hour in every call; `requeue-now` asks for every event again at
//! once; `hoard` keeps every object handle it is given and asks for more; `huge-pointer`
//! reads fields by 1 MiB and 900 KB JSON pointers; `write-ungranted` tries writes nobody
//! granted; `write-huge` tries oversized and malformed writes; `write-then-fail` stages a
//! create of `<name>-copy` and fails the first two attempts of each event; `wasi-hoard`
//! creates WASI resources (HTTP header fields) without end and never drops them; `leak` keeps
//! 3 MiB more each event, as a collected heap that settles high does, and logs like `count`;
//! `forge-log` logs, prints and fails with text holding line breaks, terminal escapes and a
//! bidirectional override, to forge host log lines; `unsent-body` writes into the body of an
//! HTTP request it never sends until the write blocks, in every call, and `init-unsent-body`
//! does the same in `init`; `write-loop` patches the object it handles with a new value every
//! time, each write an event of its own; `write-same` patches it with the same label every
//! time; `write-storm` applies 64 ConfigMaps of 64 KiB with new contents for every event, each
//! of them an event again; `write-move` tries patches that move the object to another name or
//! namespace; `slow-init` burns about 40 ms of CPU in `init`, then counts like `count`;
//! `admit-trap` and `admit-trap-ignore` declare a validating webhook on Secrets that panics,
//! with failure policy Fail and Ignore; `admit-loop` one that never returns; `admit-slow` one
//! that takes 50 ms of CPU per review, then allows; `admit-write`
//! and `admit-bad-patch` one that tries a write and a state change, and a mutating one whose
//! JSON patch does not apply); `event-flood` records 50 Events with new reasons for every
//! event; `http-flood` opens 1,000 HTTP requests to `key` (`host:port`) in one call and logs
//! how many the host let through); `hold-then-spin` takes 8 MiB for `key`, then spins to its deadline.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// Events handled by this instance.
static CALLS: AtomicU32 = AtomicU32::new(0);

use kubewasm_sdk::cluster::{self, Target, WriteError};
use kubewasm_sdk::{
    Admission, AdmissionRequest, AdmissionResponse, AdmissionRule, Event, Gvk, HandleError,
    Manifest, Mutation, Operation, Plugin, QueryError, Subscription, cache, export_plugin, log,
    state,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct Config {
    mode: String,
    #[serde(default)]
    key: String,
    /// Rounds `slow` burns per event (default 20,000,000).
    #[serde(default)]
    rounds: Option<u64>,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

fn secret() -> Gvk {
    Gvk::new("", "v1", "Secret")
}

/// Logs what a query answered: `denied`, `too-large`, ... or `ok`.
fn report<T>(what: &str, answer: Result<T, QueryError>) {
    let outcome = match &answer {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.explain(),
    };
    let kind = outcome.split(':').next().unwrap_or("").to_owned();
    log::warn(what, &[("outcome", &kind), ("detail", &outcome)]);
}

/// Logs what a write answered: `denied`, `too large`, ... or `ok`.
fn report_write(what: &str, answer: Result<(), WriteError>) {
    let outcome = match &answer {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.explain(),
    };
    let kind = outcome.split(':').next().unwrap_or("").to_owned();
    log::warn(what, &[("outcome", &kind), ("detail", &outcome)]);
}

/// Attempts per object key seen by this instance (`write-then-fail`).
static ATTEMPTS: std::sync::Mutex<Vec<(String, u32)>> = std::sync::Mutex::new(Vec::new());

fn attempt(key: &str) -> u32 {
    let mut attempts = ATTEMPTS.lock().unwrap_or_else(|e| e.into_inner());
    match attempts.iter_mut().find(|(k, _)| k == key) {
        Some((_, n)) => {
            *n += 1;
            *n
        }
        None => {
            attempts.push((key.to_owned(), 1));
            1
        }
    }
}

struct Hostile;

impl Plugin for Hostile {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = serde_json::from_str(config).map_err(|e| e.to_string())?;
        if config.mode == "init-unsent-body" {
            write_unsent_body();
        }
        if config.mode == "slow-init" {
            burn(40_000_000);
        }
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        let manifest = Manifest::new()
            .subscribe(Subscription::to(Gvk::config_map()))
            .query(secret());
        let mode = CONFIG.get().map(|c| c.mode.as_str()).unwrap_or_default();
        if let Some(rest) = mode.strip_prefix("admit-") {
            let rules = vec![AdmissionRule::on(secret(), &[Operation::Create])];
            let admission = match rest {
                "trap-ignore" => Admission::validating(rules).ignore_failures(),
                "bad-patch" => Admission::mutating(rules),
                _ => Admission::validating(rules),
            };
            return manifest
                .with_state()
                .admission(admission.timeout_seconds(5));
        }
        if mode == "metric-flood" {
            // A counter labelled by a value it makes up without end.
            return manifest.metric(kubewasm_sdk::Metric::counter(
                "seen_total",
                "Made-up series",
                &["id"],
            ));
        }
        if mode == "declared" {
            return Manifest::new()
                .subscribe(Subscription::to(Gvk::config_map()).fields(&["/data/v"]));
        }
        if mode == "metadata-only" {
            return Manifest::new().subscribe(Subscription::to(Gvk::config_map()).metadata_only());
        }
        if mode == "scoped" {
            // Sees ConfigMaps of namespace t only, and queries past that.
            return Manifest::new()
                .subscribe(Subscription::to(Gvk::config_map()).in_namespaces(&["t"]));
        }
        if CONFIG.get().is_some_and(|c| c.mode == "squat") {
            // deployment-view's index name, on the same type, computed differently.
            return manifest.query(Gvk::event()).index(
                Gvk::event(),
                "involved-uid",
                "/metadata/name",
            );
        }
        manifest
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let Some(config) = CONFIG.get() else {
            return Err(HandleError::fatal("not initialised"));
        };
        let key = event.object().key();
        match config.mode.as_str() {
            "metric-flood" => {
                // Ten thousand new series a call, and a label value of 1 MiB: the host keeps
                // its bound and refuses the rest.
                let mut refused = 0u32;
                for i in 0..10_000u32 {
                    let id = format!("{key}-{i}");
                    if kubewasm_sdk::metrics::inc("seen_total", &[&id]).is_err() {
                        refused += 1;
                    }
                }
                let huge = "x".repeat(1 << 20);
                let long = kubewasm_sdk::metrics::inc("seen_total", &[&huge]);
                let undeclared = kubewasm_sdk::metrics::inc("not_declared", &[]);
                log::info(
                    "metric flood",
                    &[
                        ("refused", &refused.to_string()),
                        ("long", &format!("{:?}", long.map_err(|e| e.explain()))),
                        (
                            "undeclared",
                            &format!("{:?}", undeclared.map_err(|e| e.explain())),
                        ),
                    ],
                );
            }
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "hold-then-spin" if key == config.key => {
                let held = vec![1u8; 8 << 20];
                std::hint::black_box(&held);
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "panic" => panic!("hostile: panic on {key}"),
            "panic-on" if key == config.key => panic!("hostile: panic on {key}"),
            "error" => return Err(HandleError::retry(format!("hostile: refusing {key}"))),
            "fatal" => return Err(HandleError::fatal(format!("hostile: rejecting {key}"))),
            "log-flood" => {
                for i in 0..5_000 {
                    log::info("flood", &[("i", &i.to_string())]);
                    println!("flood on stdout {i}");
                }
            }
            "secret" => {
                let ns = event.object().namespace();
                report(
                    "secret get",
                    cache::get(&secret(), ns.as_deref(), "db-password"),
                );
                report("secret list", cache::list(&secret(), None, None));
            }
            "big-query" => report("big list", cache::list(&Gvk::config_map(), None, None)),
            "declared" | "metadata-only" => {
                let object = event.object();
                let read = |what: &str, answer: Result<Option<String>, QueryError>| {
                    let (detail, value) = match answer {
                        Ok(value) => ("ok".to_owned(), value.unwrap_or_default()),
                        Err(e) => (e.explain(), String::new()),
                    };
                    let outcome = detail.split(':').next().unwrap_or("").to_owned();
                    let fields = [
                        ("outcome", &outcome),
                        ("detail", &detail),
                        ("value", &value),
                    ];
                    log::warn(what, &fields.map(|(k, v)| (k, v.as_str())));
                };
                read("v", object.text("/data/v"));
                read("name", object.text("/metadata/name"));
                read(
                    "data",
                    object.field("/data").map(|v| v.map(|_| "some".into())),
                );
                read("json", object.json().map(Some));
                // Not there once deleted.
                let namespace = object.namespace();
                if let Ok(Some(own)) =
                    cache::get(&Gvk::config_map(), namespace.as_deref(), &object.name())
                {
                    read("queried", own.text("/binaryData"));
                }
            }
            "scoped" => {
                let cm = Gvk::config_map();
                report("outside", cache::get(&cm, Some("elsewhere"), "x"));
                report("absent", cache::get(&cm, Some("t"), "absent"));
                let own = cache::get(&cm, Some("t"), &event.object().name());
                log::warn("own", &[("found", &matches!(own, Ok(Some(_))).to_string())]);
                let all = cache::list(&cm, None, None);
                let count = all.as_ref().map(Vec::len).unwrap_or_default();
                log::warn("list", &[("count", &count.to_string())]);
                report("list elsewhere", cache::list(&cm, Some("elsewhere"), None));
            }
            "hoard" => {
                // Keeps every handle it is given, across events, and asks for more.
                let answer = cache::list(&Gvk::config_map(), None, None);
                report("hoard", answer.map(std::mem::forget));
            }
            "unsent-body" => write_unsent_body(),
            "wasi-hoard" => loop {
                let fields = wasip2::http::types::Fields::new();
                std::mem::forget(fields);
            },
            "write-ungranted" => {
                let o = event.object();
                report_write("delete it", cluster::delete(&Target::of(o), None));
                let secret = Target {
                    gvk: secret(),
                    namespace: o.namespace(),
                    name: "db-password".into(),
                    subresource: None,
                };
                report_write(
                    "patch a secret",
                    cluster::merge_patch(&secret, r#"{"data":{"password":"b3du"}}"#),
                );
                let role = r#"{"metadata":{"name":"hostile-admin"},"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}"#;
                report_write(
                    "create a cluster role",
                    cluster::create(
                        &Gvk::new("rbac.authorization.k8s.io", "v1", "ClusterRole"),
                        None,
                        role,
                    ),
                );
            }
            "write-huge" => {
                let o = event.object();
                let target = Target::of(o);
                let huge = format!(
                    r#"{{"metadata":{{"annotations":{{"a":"{}"}}}}}}"#,
                    "x".repeat((1 << 20) + 1024)
                );
                report_write("huge apply", cluster::apply(&target, &huge));
                report_write("not json", cluster::merge_patch(&target, "{not json"));
                report_write(
                    "patch not a list",
                    cluster::json_patch(&target, r#"{"op":"add"}"#),
                );
                report_write(
                    "huge note",
                    cluster::record_event(
                        o,
                        cluster::EventType::Warning,
                        "Huge",
                        &"n".repeat(4096),
                    ),
                );
                report_write(
                    "bad subresource",
                    cluster::merge_patch(
                        &Target {
                            subresource: Some("exec".into()),
                            ..target.clone()
                        },
                        "{}",
                    ),
                );
                let mut last = Ok(());
                for _ in 0..100 {
                    last = cluster::merge_patch(&target, r#"{"metadata":{"labels":{"a":"b"}}}"#);
                    if last.is_err() {
                        break;
                    }
                }
                report_write("many writes", last);
                // Nothing above may reach the cluster: fail the call so staged writes drop.
                return Err(HandleError::fatal("hostile: write-huge done"));
            }
            "write-then-fail" => {
                let o = event.object();
                let name = o.name();
                if matches!(event, Event::Added(_)) && !name.ends_with("-copy") {
                    let n = attempt(&key);
                    let previous = cluster::previous_failures().len().to_string();
                    log::info(
                        "attempt",
                        &[
                            ("key", &key),
                            ("n", &n.to_string()),
                            ("previous-failures", &previous),
                        ],
                    );
                    let copy = format!(
                        r#"{{"metadata":{{"name":"{name}-copy"}},"data":{{"from":"{key}"}}}}"#
                    );
                    cluster::create(&Gvk::config_map(), o.namespace().as_deref(), &copy)?;
                    if n < 3 {
                        return Err(HandleError::retry(format!(
                            "hostile: attempt {n} fails after staging"
                        )));
                    }
                }
            }
            "write-loop" => {
                let o = event.object();
                let rv = o.resource_version();
                let patch = format!(r#"{{"metadata":{{"annotations":{{"loop":"{rv}"}}}}}}"#);
                cluster::merge_patch(&Target::of(o), &patch)?;
            }
            "write-same" => {
                let o = event.object();
                cluster::merge_patch(&Target::of(o), r#"{"metadata":{"labels":{"same":"yes"}}}"#)?;
            }
            "write-storm" => {
                let o = event.object();
                let value = o.resource_version().repeat(64 << 10 >> 4);
                for i in 0..64 {
                    let target = Target {
                        gvk: Gvk::config_map(),
                        namespace: o.namespace(),
                        name: format!("storm-{i}"),
                        subresource: None,
                    };
                    let body = format!(r#"{{"data":{{"v":"{value}"}}}}"#);
                    cluster::apply(&target, &body)?;
                }
            }
            "event-flood" => {
                let o = event.object();
                let rv = o.resource_version();
                for i in 0..50 {
                    let reason = format!("Flood{rv}x{i}");
                    cluster::record_event(o, cluster::EventType::Warning, &reason, "flood")?;
                }
            }
            "http-flood" => http_flood(&config.key),
            "write-move" => {
                let target = Target::of(event.object());
                report_write(
                    "merge rename",
                    cluster::merge_patch(&target, r#"{"metadata":{"name":"elsewhere"}}"#),
                );
                report_write(
                    "merge move",
                    cluster::merge_patch(&target, r#"{"metadata":{"namespace":"kube-system"}}"#),
                );
                report_write(
                    "json move",
                    cluster::json_patch(
                        &target,
                        r#"[{"op":"replace","path":"/metadata/namespace","value":"kube-system"}]"#,
                    ),
                );
                report_write(
                    "json metadata",
                    cluster::json_patch(
                        &target,
                        r#"[{"op":"replace","path":"/metadata","value":{"name":"x"}}]"#,
                    ),
                );
                return Err(HandleError::fatal("hostile: write-move done"));
            }
            "huge-pointer" => {
                let o = event.object();
                report("huge pointer", o.field(&"/a".repeat(1 << 19)));
                report("deep pointer", o.field(&"/metadata".repeat(100_000)));
            }
            "huge-args" => {
                // Under the host's 2 MiB copy limit, far over its argument limits.
                let huge = "a".repeat(1 << 20);
                let selector = "a=b,".repeat(1 << 18);
                let cm = Gvk::config_map();
                report("huge get", cache::get(&cm, Some(&huge), "x"));
                report("huge list", cache::list(&cm, None, Some(&selector)));
                report("huge index", cache::by_index(&cm, &huge, "x"));
                report("huge value", cache::index_keys(&cm, "namespace", &huge));
                report(
                    "huge kind",
                    cache::get(&Gvk::new("", "v1", &huge), None, "x"),
                );
                // A newcomer's guess at the namespace index's name.
                report("unknown index", cache::by_index(&cm, "namespaces", "shop"));
            }
            "forge-log" => {
                let forged = "\n2026-01-01T00:00:00Z ERROR kubewasm::agent: forged\x1b[2J";
                log::warn(
                    &format!("ok{forged}"),
                    &[("field\rkey", "value\u{202e}"), ("k", forged)],
                );
                eprintln!("stderr\x1b[31m red\u{85}");
                return Err(HandleError::fatal(format!("failed{forged}")));
            }
            "huge-log" => {
                // Under the host's 2 MiB copy limit, far over its log limits.
                let value = "v".repeat(16 << 10);
                let fields: Vec<(String, &str)> = (0..48)
                    .map(|i| (format!("{i}").repeat(1000), value.as_str()))
                    .collect();
                let fields: Vec<(&str, &str)> =
                    fields.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                log::warn(&"m".repeat(1 << 20), &fields);
                return Err(HandleError::fatal("e".repeat(1 << 20)));
            }
            "copy-flood" => {
                // Asks the host to copy far past its 2 MiB per call: one 64 KiB string passed
                // 1,000 times (62.5 MiB from 64 KiB of memory), or one 16 MiB argument or error.
                let value = "v".repeat(64 << 10);
                match config.key.as_str() {
                    "log" => log::warn("flood", &vec![("k", value.as_str()); 1000]),
                    "get" => report(
                        "flood get",
                        cache::get(&Gvk::config_map(), None, &"n".repeat(16 << 20)),
                    ),
                    _ => return Err(HandleError::fatal("e".repeat(16 << 20))),
                }
            }
            mode @ ("count" | "leak" | "slow-init") => {
                if mode == "leak" {
                    std::hint::black_box(Vec::leak(vec![1u8; 3 << 20]));
                }
                let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
                log::info("count", &[("calls", &calls.to_string())]);
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                log::info("woke", &[("key", &key)]);
            }
            "slow" => burn(config.rounds.unwrap_or(20_000_000)),
            // Every event but a delete asks to be delivered again at once.
            "requeue-now" if !matches!(event, Event::Deleted(_)) => {
                kubewasm_sdk::triggers::requeue_after(0).map_err(HandleError::fatal)?;
            }
            _ => {}
        }
        log::info(
            "handled",
            &[("key", &key), ("rv", &event.object().resource_version())],
        );
        Ok(())
    }

    fn admit(request: AdmissionRequest<'_>) -> AdmissionResponse {
        let mode = CONFIG.get().map(|c| c.mode.as_str()).unwrap_or_default();
        match mode {
            "admit-trap" | "admit-trap-ignore" => panic!("hostile: panic in admit"),
            "admit-loop" => loop {
                burn(1_000_000);
            },
            "admit-write" => {
                let write = match request.object {
                    Some(o) => cluster::record_event(
                        o,
                        cluster::EventType::Normal,
                        "Admitted",
                        "side effect",
                    )
                    .map_err(|e| e.explain()),
                    None => Err("no object".into()),
                };
                let changed = state::set("admitted", "1").map_err(|e| e.explain());
                AdmissionResponse::deny(format!(
                    "write: {}; state: {}",
                    write.err().unwrap_or_else(|| "ok".into()),
                    changed.err().unwrap_or_else(|| "ok".into())
                ))
            }
            // 50 ms of CPU per review: a flood of them must not take the host's threads or
            // the other plugins' CPU, and each must be answered before the API server gives up.
            "admit-slow" => {
                let started = std::time::Instant::now();
                while started.elapsed() < std::time::Duration::from_millis(50) {
                    burn(100_000);
                }
                AdmissionResponse::allow()
            }
            "admit-bad-patch" => AdmissionResponse {
                mutation: Some(Mutation::JsonPatch(
                    r#"[{"op": "remove", "path": "/no/such/field"}]"#.into(),
                )),
                ..AdmissionResponse::allow()
            },
            _ => AdmissionResponse::allow(),
        }
    }
}

/// Burns CPU: about 20 ms per 20 million rounds.
fn burn(rounds: u64) {
    let mut n: u64 = 0;
    for i in 0..rounds {
        n = std::hint::black_box(n.wrapping_add(i));
    }
}

/// Writes into the body of an HTTP request that is never sent: once the body's buffer is
/// full, the write waits for a reader that will never come.
fn write_unsent_body() {
    use wasip2::http::types::{Fields, OutgoingRequest};
    let request = OutgoingRequest::new(Fields::new());
    let Ok(body) = request.body() else { return };
    let Ok(stream) = body.write() else { return };
    let chunk = [7u8; 4096];
    while stream.blocking_write_and_flush(&chunk).is_ok() {}
}

/// Opens 1,000 requests to `authority` without waiting for any, and logs how many the host
/// took and refused.
fn http_flood(authority: &str) {
    use wasip2::http::outgoing_handler::handle;
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};
    let (mut open, mut refused) = (Vec::new(), 0u32);
    for _ in 0..1000 {
        let request = OutgoingRequest::new(Fields::new());
        let _ = request.set_scheme(Some(&Scheme::Http));
        let _ = request.set_authority(Some(authority));
        match handle(request, None) {
            Ok(pending) => open.push(pending),
            Err(_) => refused += 1,
        }
    }
    log::info(
        "http flood",
        &[
            ("open", &open.len().to_string()),
            ("refused", &refused.to_string()),
        ],
    );
}

export_plugin!(Hostile);
