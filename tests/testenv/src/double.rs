//! `ApiDouble`: an in-process stand-in for kube-apiserver, for faults the real one cannot be
//! made to produce on demand.
//!
//! It is a double, not a server: it serves one core resource type (ConfigMaps unless told
//! otherwise, cluster-wide) over plain HTTP/1.1 on loopback with the list and watch protocol (paginated lists with
//! continue tokens, watches from a resourceVersion with bookmarks and a server-side timeout,
//! streaming lists, 410 Gone after compaction), and lets a test script what a real server
//! only does by accident: refuse the next request with any status, cut a watch mid-stream,
//! slow every page down, send bookmarks only, refuse streaming lists. It records every
//! request so tests can assert on the parameters the client sent.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which request a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// A list (one page).
    List,
    /// A watch, streaming list included.
    Watch,
}

/// A scripted misbehaviour, used up by the first request it applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer the next request of this verb with an HTTP error and a Status body.
    Status {
        /// The request it applies to.
        verb: Verb,
        /// The HTTP status: 500, 429, 403...
        code: u16,
    },
    /// End the next watch abruptly (no end of stream) after it sent this many events.
    CutWatch {
        /// Events sent before the cut.
        after: usize,
    },
    /// Send this line, as it is, first on the next watch: what a broken or hostile server
    /// could send.
    Line(Arc<str>),
}

/// A request the double received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The request kind; `None` for discovery and anything else.
    pub verb: Option<Verb>,
    /// The path without the query.
    pub path: String,
    /// The query parameters.
    pub query: BTreeMap<String, String>,
}

impl Seen {
    /// A query parameter, or "" when absent.
    pub fn param(&self, name: &str) -> &str {
        self.query.get(name).map_or("", String::as_str)
    }
}

struct Logged {
    rv: u64,
    /// The event as a watch line (with its newline), rendered once.
    line: Arc<str>,
    /// The same line as a metadata watch sends it, rendered with it: rendering it as it is
    /// sent would hold a metadata watch to a fraction of a full watch's rate, and a client
    /// fed slowly wakes once per event instead of once per batch.
    partial: Arc<str>,
}

/// The core (`v1`) resource type a double serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// Its kind, such as `Pod`.
    pub kind: String,
    /// Its plural, such as `pods`.
    pub plural: String,
}

impl Served {
    /// v1 ConfigMaps.
    pub fn config_maps() -> Self {
        Self {
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        }
    }

    /// v1 Pods.
    pub fn pods() -> Self {
        Self {
            kind: "Pod".into(),
            plural: "pods".into(),
        }
    }
}

fn key_of(object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default()
    )
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

struct Snapshot {
    rv: u64,
    items: Vec<Value>,
}

struct State {
    served: Served,
    rv: u64,
    objects: BTreeMap<String, Value>,
    log: Vec<Logged>,
    compacted: u64,
    faults: VecDeque<Fault>,
    requests: Vec<Seen>,
    watch_list: bool,
    page_delay: Duration,
    bookmark_every: Option<Duration>,
    snapshots: HashMap<u64, Snapshot>,
    /// Bumped to cut every open watch.
    cuts: u64,
    /// While set, open watches send nothing new.
    held: bool,
    /// Set when the double is dropped: open watches end.
    closed: bool,
    /// Every request is dropped unanswered, as by a server that went away.
    down: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Held while a test changes things no request may see half done.
    gate: Mutex<()>,
    /// Signals any change (new event, bookmark version, cut).
    changed: watch::Sender<()>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running double; stops when dropped.
pub struct ApiDouble {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiDouble {
    fn drop(&mut self) {
        self.task.abort();
        // Open watches hold the state: end them so it is freed.
        let mut state = self.shared.state();
        state.closed = true;
        state.objects.clear();
        state.log.clear();
        state.snapshots.clear();
        drop(state);
        self.shared.changed.send_replace(());
    }
}

impl ApiDouble {
    /// Starts a double serving ConfigMaps on a free loopback port, with streaming lists
    /// supported.
    pub async fn start() -> anyhow::Result<Self> {
        Self::serving(Served::config_maps()).await
    }

    /// Starts a double serving `served` on a free loopback port, with streaming lists
    /// supported.
    pub async fn serving(served: Served) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                served,
                rv: 1,
                objects: BTreeMap::new(),
                log: Vec::new(),
                compacted: 0,
                faults: VecDeque::new(),
                requests: Vec::new(),
                watch_list: true,
                page_delay: Duration::ZERO,
                bookmark_every: None,
                snapshots: HashMap::new(),
                cuts: 0,
                held: false,
                closed: false,
                down: false,
            }),
            gate: Mutex::new(()),
            changed: watch::channel(()).0,
        });
        let serving = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let shared = serving.clone();
                tokio::spawn(async move {
                    let _ = serve(conn, &shared).await;
                });
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// The base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A client for the double.
    pub fn client(&self) -> anyhow::Result<kube::Client> {
        let config = kube::Config::new(self.url().parse()?);
        Ok(kube::Client::try_from(config)?)
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state().rv
    }

    fn write(&self, kind: &'static str, namespace: &str, name: &str, data: Option<Value>) -> u64 {
        let object = {
            let state = self.shared.state();
            let rv = state.rv + 1;
            let key = format!("{namespace}/{name}");
            match data {
                Some(data) => {
                    let uid = state.objects.get(&key).map_or_else(
                        || format!("uid-{name}-{rv}"),
                        |o| o["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                    );
                    json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": namespace, "uid": uid,
                                     "resourceVersion": rv.to_string()},
                        "data": data,
                    })
                }
                None => {
                    let Some(mut object) = state.objects.get(&key).cloned() else {
                        return state.rv;
                    };
                    object["metadata"]["resourceVersion"] = json!(rv.to_string());
                    object
                }
            }
        };
        self.replay([(kind, &object)]);
        rv_of(&object)
    }

    /// Sets the current objects (no events), each carrying its resourceVersion; the
    /// double's version becomes the newest of them.
    pub fn load(&self, objects: impl IntoIterator<Item = Value>) {
        let mut state = self.shared.state();
        for object in objects {
            state.rv = state.rv.max(rv_of(&object));
            state.objects.insert(key_of(&object), object);
        }
    }

    /// Appends recorded events (`type` and `object` as a watch line carries them, resource
    /// versions increasing) and applies them to the current objects.
    pub fn replay<'a>(&self, events: impl IntoIterator<Item = (&'a str, &'a Value)>) {
        let mut state = self.shared.state();
        for (kind, object) in events {
            let rv = rv_of(object).max(state.rv + 1);
            state.rv = rv;
            if kind == "DELETED" {
                state.objects.remove(&key_of(object));
            } else {
                state.objects.insert(key_of(object), object.clone());
            }
            state.log.push(Logged {
                rv,
                line: line(kind, object),
                partial: line(kind, &partial(object)),
            });
        }
        drop(state);
        self.shared.changed.send_replace(());
    }

    /// Creates ConfigMap `namespace/name` with `data`; returns its resourceVersion.
    pub fn create(&self, namespace: &str, name: &str, data: Value) -> u64 {
        self.write("ADDED", namespace, name, Some(data))
    }

    /// Replaces the data of ConfigMap `namespace/name`; returns its resourceVersion.
    pub fn update(&self, namespace: &str, name: &str, data: Value) -> u64 {
        self.write("MODIFIED", namespace, name, Some(data))
    }

    /// Deletes ConfigMap `namespace/name`; returns the deletion's resourceVersion.
    pub fn delete(&self, namespace: &str, name: &str) -> u64 {
        self.write("DELETED", namespace, name, None)
    }

    /// Moves the resourceVersion on by `n` without any ConfigMap changing (other types'
    /// writes, as far as this type's watchers can tell).
    pub fn advance(&self, n: u64) {
        self.shared.state().rv += n;
        self.shared.changed.send_replace(());
    }

    /// Forgets history up to the current version: watches and exact lists from older
    /// versions, and older continue tokens, get 410 Gone.
    pub fn compact(&self) -> u64 {
        let mut state = self.shared.state();
        state.compacted = state.rv;
        let compacted = state.compacted;
        state.log.retain(|l| l.rv > compacted);
        compacted
    }

    /// Ends every open watch abruptly.
    pub fn cut_watches(&self) {
        self.shared.state().cuts += 1;
        self.shared.changed.send_replace(());
    }

    /// Runs `f` on the double in one step, with watches cut first: for changes a watcher must
    /// not see as events (say, a delete and a compaction while it is disconnected).
    pub fn while_disconnected(&self, f: impl FnOnce(&Self)) {
        let _gate = self
            .shared
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.shared.state().cuts += 1;
        f(self);
        self.shared.changed.send_replace(());
    }

    /// Holds back (true) or releases (false) new events on open watches: to queue a recorded
    /// stream first and time its delivery from the release.
    pub fn set_held(&self, held: bool) {
        self.shared.state().held = held;
        self.shared.changed.send_replace(());
    }

    /// Takes the double down (every open watch cut, every request dropped unanswered) or
    /// brings it back: an API server that went away and returned.
    pub fn set_down(&self, down: bool) {
        let mut state = self.shared.state();
        state.down = down;
        if down {
            state.cuts += 1;
        }
        drop(state);
        self.shared.changed.send_replace(());
    }

    /// Queues a fault.
    pub fn fault(&self, fault: Fault) {
        self.shared.state().faults.push_back(fault);
    }

    /// Whether streaming lists (`sendInitialEvents`) are served; refused with 422 otherwise.
    pub fn set_streaming_lists(&self, on: bool) {
        self.shared.state().watch_list = on;
    }

    /// Delay before every list page.
    pub fn set_page_delay(&self, delay: Duration) {
        self.shared.state().page_delay = delay;
    }

    /// Sends a bookmark at the current version this often on watches that asked for them.
    pub fn set_bookmarks(&self, every: Option<Duration>) {
        self.shared.state().bookmark_every = every;
        self.shared.changed.send_replace(());
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.shared.state().requests.clone()
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn status_body(code: u16, reason: &str, message: &str) -> String {
    status(code, reason, message).to_string()
}

async fn respond(conn: &mut TcpStream, code: u16, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body.as_bytes()).await?;
    conn.shutdown().await
}

fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        _ => "InternalError",
    }
}

fn parse_target(target: &str) -> (String, BTreeMap<String, String>) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect();
    (path.to_owned(), query)
}

fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn serve(mut conn: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut reader = BufReader::new(&mut conn);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).await?;
    // `Accept: application/json;as=PartialObjectMetadata...` asks for objects' metadata only,
    // as a real API server answers a metadata informer.
    let mut metadata_only = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await? == 0 || header.trim().is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if lower.starts_with("accept:") && lower.contains("as=partialobjectmetadata") {
            metadata_only = true;
        }
    }
    // Requests wait while a test changes things atomically.
    drop(shared.gate.lock().unwrap_or_else(PoisonError::into_inner));
    if shared.state().down {
        return Ok(());
    }
    let target = request_line.split_whitespace().nth(1).unwrap_or("/");
    let (path, query) = parse_target(target);
    let served = shared.state().served.clone();
    let collection = format!("/api/v1/{}", served.plural);
    let verb = match path.as_str() {
        p if p == collection && query.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            Some(Verb::Watch)
        }
        p if p == collection => Some(Verb::List),
        _ => None,
    };
    let seen = Seen {
        verb,
        path: path.clone(),
        query: query.clone(),
    };
    let fault = {
        let mut state = shared.state();
        state.requests.push(seen);
        let at = state.faults.iter().position(|f| match f {
            Fault::Status { verb: v, .. } => Some(*v) == verb,
            Fault::CutWatch { .. } | Fault::Line(_) => verb == Some(Verb::Watch),
        });
        at.and_then(|i| state.faults.remove(i))
    };
    if let Some(Fault::Status { code, .. }) = fault {
        let body = status_body(code, reason_of(code), "injected by the test double");
        return respond(&mut conn, code, &body).await;
    }
    match verb {
        None if path == "/readyz" => respond(&mut conn, 200, "ok").await,
        None if path == "/api/v1" => {
            let body = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                "resources": [{"name": served.plural, "singularName": served.kind.to_lowercase(),
                               "namespaced": true, "kind": served.kind,
                               "verbs": ["get", "list", "watch"]}]});
            respond(&mut conn, 200, &body.to_string()).await
        }
        None => {
            respond(
                &mut conn,
                404,
                &status_body(404, "NotFound", "no such path"),
            )
            .await
        }
        Some(Verb::List) => list(&mut conn, shared, &query, metadata_only).await,
        Some(Verb::Watch) => {
            let (cut_after, first) = match fault {
                Some(Fault::CutWatch { after }) => (Some(after), None),
                Some(Fault::Line(line)) => (None, Some(line)),
                _ => (None, None),
            };
            watch(conn, shared, &query, cut_after, first, metadata_only).await
        }
    }
}

async fn list(
    conn: &mut TcpStream,
    shared: &Shared,
    query: &BTreeMap<String, String>,
    metadata_only: bool,
) -> std::io::Result<()> {
    let (code, body, delay) = list_page(shared, query, metadata_only);
    tokio::time::sleep(delay).await;
    respond(conn, code, &body).await
}

/// One list page: status, body and the delay to wait before answering.
fn list_page(
    shared: &Shared,
    query: &BTreeMap<String, String>,
    metadata_only: bool,
) -> (u16, String, Duration) {
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let mut state = shared.state();
    let delay = state.page_delay;
    let gone = |message: &str| (410, status_body(410, "Expired", message), Duration::ZERO);
    let (id, offset) = match query.get("continue") {
        Some(token) => {
            let (id, offset) = token.split_once('-').unwrap_or(("", ""));
            let (Ok(id), Ok(offset)) = (id.parse::<u64>(), offset.parse::<usize>()) else {
                let body = status_body(400, "BadRequest", "malformed continue token");
                return (400, body, Duration::ZERO);
            };
            (id, offset)
        }
        None => {
            let rv = query
                .get("resourceVersion")
                .and_then(|v| v.parse::<u64>().ok());
            let exact = query
                .get("resourceVersionMatch")
                .is_some_and(|m| m == "Exact");
            if exact && rv.is_some_and(|rv| rv < state.compacted) {
                return gone("too old resource version");
            }
            let id = state.rv * 1_000_000 + state.snapshots.len() as u64;
            let snapshot = Snapshot {
                rv: state.rv,
                items: state.objects.values().cloned().collect(),
            };
            state.snapshots.insert(id, snapshot);
            (id, 0)
        }
    };
    let compacted = state.compacted;
    let Some(snapshot) = state.snapshots.get(&id) else {
        return gone("unknown continue token");
    };
    if snapshot.rv < compacted {
        return gone(
            "The provided continue parameter is too old to display a consistent list result.",
        );
    }
    let end = offset.saturating_add(limit).min(snapshot.items.len());
    let items: Vec<Value> = snapshot.items[offset.min(end)..end]
        .iter()
        .map(|o| {
            if metadata_only {
                return partial(o);
            }
            let mut o = o.clone();
            if let Some(map) = o.as_object_mut() {
                map.remove("apiVersion");
                map.remove("kind");
            }
            o
        })
        .collect();
    let mut metadata = json!({"resourceVersion": snapshot.rv.to_string()});
    if end < snapshot.items.len() {
        metadata["continue"] = json!(format!("{id}-{end}"));
    } else {
        state.snapshots.remove(&id);
    }
    let reply = if metadata_only {
        json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
               "metadata": metadata, "items": items})
    } else {
        json!({"kind": format!("{}List", state.served.kind), "apiVersion": "v1",
               "metadata": metadata, "items": items})
    };
    (200, reply.to_string(), delay)
}

/// `object` as a metadata watch or list carries it: its metadata only.
fn partial(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
           "metadata": object.get("metadata").cloned().unwrap_or(Value::Null)})
}

/// Writes lines as one chunk.
async fn chunk(conn: &mut TcpStream, text: &str) -> std::io::Result<()> {
    conn.write_all(format!("{:x}\r\n{text}\r\n", text.len()).as_bytes())
        .await
}

/// A watch line as the API server writes it: `type` first, then `object` (serde_json's own
/// maps would sort the two keys the other way round).
fn line(kind: &str, object: &Value) -> Arc<str> {
    format!("{{\"type\":{},\"object\":{object}}}\n", json!(kind)).into()
}

fn bookmark(kind: &str, rv: u64, initial_events_end: bool) -> Arc<str> {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": kind, "apiVersion": "v1", "metadata": metadata}),
    )
}

async fn watch(
    mut conn: TcpStream,
    shared: &Shared,
    query: &BTreeMap<String, String>,
    cut_after: Option<usize>,
    first: Option<Arc<str>>,
    metadata_only: bool,
) -> std::io::Result<()> {
    let initial_events = query.get("sendInitialEvents").is_some_and(|v| v == "true");
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let timeout = Duration::from_secs(
        query
            .get("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .unwrap_or(1800),
    );
    let mut changed = shared.changed.subscribe();
    let Opened {
        mut lines,
        mut position,
        cuts,
    } = match open_watch(shared, query, initial_events, metadata_only) {
        Ok(opened) => opened,
        Err((code, body)) => return respond(&mut conn, code, &body).await,
    };
    conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").await?;
    if let Some(first) = first {
        // Not counted as an event: it is sent before them.
        chunk(&mut conn, &first).await?;
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut sent = 0_usize;
    let mut last_bookmark = tokio::time::Instant::now();
    let mut batch = String::new();
    loop {
        while !lines.is_empty() {
            // Up to 64 KiB of lines per chunk.
            while let Some(line) = lines.pop_front() {
                if cut_after.is_some_and(|n| sent >= n) {
                    if !batch.is_empty() {
                        chunk(&mut conn, &batch).await?;
                    }
                    return Ok(()); // dropped without the final chunk: a cut
                }
                batch.push_str(&line);
                sent += 1;
                if batch.len() >= 64 << 10 {
                    break;
                }
            }
            chunk(&mut conn, &batch).await?;
            batch.clear();
        }
        if position == u64::MAX {
            break;
        }
        let every = {
            let state = shared.state();
            if state.cuts != cuts || state.closed {
                return Ok(());
            }
            let from = position;
            let start = state.log.partition_point(|l| l.rv <= from);
            let end = if state.held { start } else { state.log.len() };
            for logged in &state.log[start..end] {
                lines.push_back(if metadata_only {
                    logged.partial.clone()
                } else {
                    logged.line.clone()
                });
                position = logged.rv;
            }
            let every = state.bookmark_every.filter(|_| bookmarks);
            if let Some(every) = every
                && !state.held
                && last_bookmark.elapsed() >= every
                && lines.is_empty()
            {
                lines.push_back(bookmark(&state.served.kind, state.rv, false));
                position = position.max(state.rv);
                last_bookmark = tokio::time::Instant::now();
            }
            every
        };
        if !lines.is_empty() {
            continue;
        }
        let tick = every.unwrap_or(Duration::from_secs(3600));
        tokio::select! {
            _ = changed.changed() => {}
            () = tokio::time::sleep(tick) => {}
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    conn.write_all(b"0\r\n\r\n").await?;
    conn.shutdown().await
}

/// How a watch starts.
struct Opened {
    /// Its first lines.
    lines: VecDeque<Arc<str>>,
    /// The version it continues from; `u64::MAX`: it ends after its first lines.
    position: u64,
    /// The cut generation it belongs to.
    cuts: u64,
}

/// How a watch starts, or the HTTP error refusing it.
fn open_watch(
    shared: &Shared,
    query: &BTreeMap<String, String>,
    initial_events: bool,
    metadata_only: bool,
) -> Result<Opened, (u16, String)> {
    let state = shared.state();
    if initial_events && !state.watch_list {
        let message =
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
        return Err((422, status_body(422, "Invalid", message)));
    }
    let mut lines = VecDeque::new();
    let from = query
        .get("resourceVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v > 0);
    let position = if initial_events {
        for object in state.objects.values() {
            lines.push_back(if metadata_only {
                line("ADDED", &partial(object))
            } else {
                line("ADDED", object)
            });
        }
        lines.push_back(bookmark(&state.served.kind, state.rv, true));
        state.rv
    } else {
        match from {
            Some(rv) if rv < state.compacted => {
                let message = format!("too old resource version: {rv} ({})", state.compacted);
                let gone = status(410, "Expired", &message);
                lines.push_back(line("ERROR", &gone));
                u64::MAX
            }
            Some(rv) => rv,
            None => state.rv,
        }
    };
    Ok(Opened {
        lines,
        position,
        cuts: state.cuts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_are_decoded() {
        let (path, query) = parse_target("/api/v1/configmaps?labelSelector=a%3Db&x=1+2&flag");
        assert_eq!(path, "/api/v1/configmaps");
        assert_eq!(query["labelSelector"], "a=b");
        assert_eq!(query["x"], "1 2");
        assert_eq!(query["flag"], "");
    }
}
