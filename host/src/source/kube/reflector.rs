//! The reflector: lists and watches one resource type the way client-go's Reflector does.
//!
//! - First sync: a streaming list (a watch with `sendInitialEvents`) when the server supports
//!   it, else a paginated list (500 per page). Both stream into the informer object by object.
//!   A replica's share lists by pages: only a list answer says whether the server filtered.
//! - Then a watch from the listed resourceVersion with bookmarks on and a server-side timeout
//!   drawn from [5, 10) minutes; a watch that ends is resumed from the last version seen
//!   (an object's or a bookmark's), without a relist. A watch silent for 90 s (no event, no
//!   bookmark: a healthy server bookmarks about every minute) is counted and resumed, and
//!   every request is bounded (10 s for a watch's answer, 70 s per list page), so a hung API
//!   server is noticed and retried instead of waited on.
//! - 410 Gone relists: first from the last version seen, then, if that is gone too, with a
//!   consistent read.
//! - Every failure waits on client-go's backoff (800 ms doubling to 30 s, jittered within the
//!   cap), reset once the server answered a list or a watch delivered something, and cut
//!   short when the API server's health probe sees it back (`reconnect.rs`); a relist after
//!   410 Gone that follows a healthy watch starts at once. 429, 503 and 504 answers are first
//!   retried inside kube's client (its default retry policy).
//!
//! kube-runtime's watcher does most of this, but not all: it always relists with the same
//! semantics as its first list (so never from the last version after a 410), its watch timeout
//! is fixed, a server that refuses a streaming list is retried forever instead of falling back
//! to list, and a watch request answered with HTTP 410 is retried without a relist. So the
//! state machine is ours; requests, TLS and auth are kube's.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject, ListParams, VersionMatch, WatchParams};
use kube::core::Request;
use kube::{Client, Resource};
use tokio::sync::mpsc::Sender;

use crate::gvk::Gvk;
use crate::object::{Keep, Transform};
use crate::shard::Share;
use crate::source::SourceEvent;
use crate::source::kube::lines::Lines;
use crate::source::kube::reconnect::{Backoff, Health};
use crate::source::kube::stats::{ReflectorStats, ShardFilter};
use crate::source::kube::wire::{self, Page, Status, WatchEvent};
use crate::text::{MAX_MESSAGE_BYTES, cut};

/// Most events handed to the informer in one batch.
const BATCH: usize = 128;

/// Objects per list page (client-go's default).
pub const PAGE_SIZE: u32 = 500;
/// The server-side watch timeout is drawn from [this, twice this) (client-go's range).
const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// A watch on which nothing arrives for this long is given up as dead and resumed: a
/// healthy API server sends a bookmark about every minute, so silence means it hangs.
pub const SILENCE: Duration = Duration::from_secs(90);
/// How long the API server may take to answer a watch request (its headers; the stream
/// follows): a frozen server otherwise holds a reconnect in its TLS handshake.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one list page may take (the API server's own request timeout is 60 s).
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(70);
/// A watch that ends sooner than this without delivering anything counts as a failure.
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// How the reflector gets a type's full state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMethod {
    /// A watch with `sendInitialEvents`: the objects, an end marker, then live events.
    Streaming,
    /// Paginated lists, then a separate watch.
    Paginated,
}

/// Which state a list must be at least as new as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListFrom {
    /// Not older than this version (client-go's relist from the last version seen).
    NotOlderThan(String),
    /// The newest state: a consistent read (first list, or the last version expired).
    Consistent,
}

/// What the reflector does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Get the full state.
    List(ListFrom),
    /// Follow live events after this version.
    Watch(String),
}

/// What happened during a request, as far as the state machine cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The full state was delivered; it is current as of this version.
    Synced(String),
    /// A live event or bookmark carried this version.
    Seen(String),
    /// The server refused a streaming list (400 or 422, or a clean end without the marker).
    StreamingRefused,
    /// The version asked for is too old (410 Gone).
    Expired,
}

/// The reflector's state: its phase and its list method. It changes only through
/// [`State::next`], a pure function, so every transition is testable without a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// What to do next.
    pub phase: Phase,
    /// How to list.
    pub method: ListMethod,
}

impl Default for State {
    /// A first list by streaming, from a consistent read.
    fn default() -> Self {
        Self {
            phase: Phase::List(ListFrom::Consistent),
            method: ListMethod::Streaming,
        }
    }
}

impl State {
    /// [`Self::next`] with [`Input::Seen`]`(rv)`, in place.
    pub fn seen(&mut self, rv: &str) {
        match &mut self.phase {
            Phase::Watch(current) => {
                current.clear();
                current.push_str(rv);
            }
            // Initial events carry each object's own version: see `next`.
            Phase::List(_) => {}
        }
    }

    /// The state after `input`.
    pub fn next(self, input: Input) -> Self {
        let Self { phase, method } = self;
        match (phase, input) {
            (_, Input::Synced(rv)) => Self {
                phase: Phase::Watch(rv),
                method,
            },
            (Phase::Watch(_), Input::Seen(rv)) => Self {
                phase: Phase::Watch(rv),
                method,
            },
            // Initial events carry each object's own version, in no order: a list that
            // fails half way starts over from where it started.
            (phase @ Phase::List(_), Input::Seen(_)) => Self { phase, method },
            (phase, Input::StreamingRefused) => Self {
                phase,
                method: ListMethod::Paginated,
            },
            // A watch's version is gone: relist from it, at least as new.
            (Phase::Watch(rv), Input::Expired) => Self {
                phase: Phase::List(ListFrom::NotOlderThan(rv)),
                method,
            },
            // A list's version is gone too: read the newest state.
            (Phase::List(_), Input::Expired) => Self {
                phase: Phase::List(ListFrom::Consistent),
                method,
            },
        }
    }

    /// True once the full state has been delivered (live events follow).
    pub fn synced(&self) -> bool {
        matches!(self.phase, Phase::Watch(_))
    }
}

/// Why a request stopped, when it did not simply end.
enum Stop {
    /// The informer is gone.
    Closed,
    /// The version asked for is too old: relist.
    Expired(String),
    /// Anything else: back off and retry the same phase.
    Failed(String),
}

/// The request that failed, for error messages.
#[derive(Clone, Copy)]
enum Verb {
    List,
    Watch,
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verb::List => "list",
            Verb::Watch => "watch",
        })
    }
}

/// Lists and watches one resource type, feeding an informer.
pub struct Reflector {
    client: Client,
    gvk: Arc<Gvk>,
    path: String,
    transform: Transform,
    tx: Sender<Vec<SourceEvent>>,
    stats: Arc<ReflectorStats>,
    state: State,
    /// Events decoded and not yet handed over: they go as one batch, so the informer is woken
    /// once per batch rather than once per event.
    pending: Vec<SourceEvent>,
    /// Whether the API server answers, shared by the source's reflectors.
    health: Arc<Health>,
    /// The server answered a list or a watch delivered since the last failure.
    answered: bool,
    /// The resource, for paths in a namespace.
    resource: ApiResource,
    /// The one namespace watched, if not all.
    namespace: Option<Arc<str>>,
    /// The label selector sent with every list and watch.
    selector: Option<String>,
    /// The replica's share, sent as a shard selector with every list and watch.
    shard: Option<Share>,
    /// That selector's text.
    shard_selector: Option<String>,
    /// Whether an object out of the share arrived (the server did not filter).
    unfiltered: bool,
}

impl Reflector {
    /// A reflector for `resource` (of type `gvk`) sending to `tx`.
    pub fn new(
        client: Client,
        gvk: Gvk,
        resource: &ApiResource,
        transform: Transform,
        tx: Sender<Vec<SourceEvent>>,
        stats: Arc<ReflectorStats>,
        health: Arc<Health>,
    ) -> Self {
        Self {
            client,
            gvk: Arc::new(gvk),
            path: DynamicObject::url_path(resource, None),
            transform,
            tx,
            stats,
            state: State::default(),
            pending: Vec::new(),
            health,
            answered: false,
            resource: resource.clone(),
            namespace: None,
            selector: None,
            shard: None,
            shard_selector: None,
            unfiltered: false,
        }
    }

    /// The same reflector sending `shard` (a `shardSelector`) with every list and watch: a
    /// server with `ShardedListAndWatch` sends only the replica's share, another everything
    /// (the informer drops the rest before the store). Which it was shows in the stats.
    pub fn sharded(mut self, shard: Option<Share>) -> Self {
        self.shard_selector = shard.as_ref().and_then(Share::selector);
        if self.shard_selector.is_some() {
            // Only a list answer says whether the server filtered (`metadata.shardInfo`); a
            // streaming list's events and bookmarks do not.
            self.state.method = ListMethod::Paginated;
        }
        self.shard = shard;
        self
    }

    /// Adds the shard selector to a request's query.
    fn ask_shard<B>(&self, request: &mut http::Request<B>) -> Result<(), Stop> {
        let Some(shard) = &self.shard_selector else {
            return Ok(());
        };
        let uri = request.uri().to_string();
        let encoded: String = form_urlencoded::byte_serialize(shard.as_bytes()).collect();
        let joiner = if uri.contains('?') { '&' } else { '?' };
        *request.uri_mut() = format!("{uri}{joiner}shardSelector={encoded}")
            .parse()
            .map_err(|e| Stop::Failed(format!("cannot add the shard selector: {e}")))?;
        Ok(())
    }

    /// The same reflector watching only `namespace` (if given), and only objects matching
    /// `selector` (if given), filtered by the server.
    pub fn within(mut self, namespace: Option<Arc<str>>, selector: Option<String>) -> Self {
        self.path = DynamicObject::url_path(&self.resource, namespace.as_deref());
        self.namespace = namespace;
        self.selector = selector;
        self
    }

    /// Asks the server for objects' metadata only (the media type of client-go's metadata
    /// informer), when that is all the transform keeps: a list's answer, or a watch's.
    fn ask_metadata_only<B>(&self, request: &mut http::Request<B>, list: bool) {
        if self.transform.keep != Keep::MetadataOnly {
            return;
        }
        let accept = match list {
            true => "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            false => "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        };
        request
            .headers_mut()
            .insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
    }

    /// The event that starts a list: of the namespace, when only one is watched.
    fn list_started(&self) -> SourceEvent {
        match &self.namespace {
            Some(ns) => SourceEvent::NamespaceListStarted(ns.clone()),
            None => SourceEvent::ListStarted,
        }
    }

    /// The event that ends a list.
    fn list_done(&self) -> SourceEvent {
        match &self.namespace {
            Some(ns) => SourceEvent::NamespaceListDone(ns.clone()),
            None => SourceEvent::ListDone,
        }
    }

    /// Notes the version a live event carried: what `on(Input::Seen(..))` does, in the
    /// watch's string rather than a new one per event.
    fn seen(&mut self, rv: &str) {
        self.answered = true;
        self.state.seen(rv);
    }

    /// Moves the state machine on.
    fn on(&mut self, input: Input) {
        if matches!(input, Input::Synced(_) | Input::Seen(_)) {
            self.answered = true;
        }
        self.state = std::mem::take(&mut self.state).next(input);
    }

    /// Runs until the receiving informer goes away.
    pub async fn run(mut self) {
        let mut backoff = Backoff::default();
        let mut expired_in_a_row = 0u32;
        loop {
            let step = match (self.state.phase.clone(), self.state.method) {
                (Phase::List(from), ListMethod::Streaming) => self.watch(Some(from), "").await,
                (Phase::List(from), ListMethod::Paginated) => self.list(from).await,
                (Phase::Watch(rv), _) => self.watch(None, &rv).await,
            };
            // Whatever the step ended with, what it decoded is handed over first.
            let step = self.flush().await.and(step);
            // A server that answered since the last failure starts the backoff over.
            if std::mem::take(&mut self.answered) {
                backoff.reset();
            }
            let (reason, delay) = match step {
                Ok(()) => continue,
                Err(Stop::Closed) => return,
                Err(Stop::Expired(reason)) => {
                    if self.state.synced() {
                        self.stats.note_relist();
                    }
                    self.on(Input::Expired);
                    self.answered = false;
                    // The server is fine: relist at once, unless relisting keeps expiring.
                    let delay = if expired_in_a_row == 0 {
                        Duration::ZERO
                    } else {
                        backoff.delay()
                    };
                    expired_in_a_row += 1;
                    (format!("{reason}; relisting"), delay)
                }
                Err(Stop::Failed(reason)) => {
                    expired_in_a_row = 0;
                    (reason, backoff.delay())
                }
            };
            self.stats.note_error(&reason);
            tracing::warn!(resource = %self.gvk, "{reason}; retrying in {delay:.1?}");
            if !delay.is_zero() {
                self.health.wait(delay).await;
            }
            if self.tx.is_closed() {
                return;
            }
        }
    }

    /// Queues `event` for the informer, handing the batch over once it is full.
    async fn send(&mut self, event: SourceEvent) -> Result<(), Stop> {
        if let (Some(share), false, SourceEvent::Listed(o) | SourceEvent::Applied(o)) =
            (&self.shard, self.unfiltered, &event)
            && self.shard_selector.is_some()
            && !share.admits(o)
        {
            self.unfiltered = true;
            self.stats.note_shard_filter(ShardFilter::Client);
        }
        self.pending.push(event);
        if self.pending.len() >= BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    /// Hands the queued events to the informer, waiting while its buffer is full.
    async fn flush(&mut self) -> Result<(), Stop> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.pending, Vec::with_capacity(BATCH));
        self.tx.send(batch).await.map_err(|_| Stop::Closed)
    }

    /// One paginated list, streamed into the informer page by page.
    async fn list(&mut self, from: ListFrom) -> Result<(), Stop> {
        let mut params = ListParams {
            limit: Some(PAGE_SIZE),
            label_selector: self.selector.clone(),
            ..ListParams::default()
        };
        if let ListFrom::NotOlderThan(rv) = from {
            params.resource_version = Some(rv);
            params.version_match = Some(VersionMatch::NotOlderThan);
        }
        self.send(self.list_started()).await?;
        loop {
            let mut request = Request::new(self.path.as_str())
                .list(&params)
                .map_err(|e| Stop::Failed(format!("cannot build list request: {e}")))?;
            self.ask_metadata_only(&mut request, true);
            self.ask_shard(&mut request)?;
            let text = tokio::time::timeout(PAGE_TIMEOUT, self.client.request_text(request))
                .await
                .map_err(|_| Stop::Failed(format!("list: no answer within {PAGE_TIMEOUT:?}")))?
                .map_err(|e| self.failure(Verb::List, &e))?;
            let page = Page::parse(&text, &self.gvk, &self.transform)
                .map_err(|e| Stop::Failed(format!("{} failed: malformed page: {e}", Verb::List)))?;
            drop(text);
            for decoded in page.objects {
                match decoded {
                    Ok(object) => self.send(SourceEvent::Listed(object)).await?,
                    Err(e) => {
                        tracing::error!(resource = %self.gvk, "skipping malformed object: {e}")
                    }
                }
            }
            self.flush().await?;
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => {
                    params.continue_token = Some(token);
                    params.resource_version = None;
                    params.version_match = None;
                }
                None => {
                    if self.shard_selector.is_some() {
                        self.stats
                            .note_shard_filter(match page.metadata.shard_info {
                                Some(_) => ShardFilter::Server,
                                None => ShardFilter::Client,
                            });
                    }
                    let rv = page.metadata.resource_version.filter(|v| !v.is_empty());
                    let Some(rv) = rv else {
                        return Err(Stop::Failed("list response has no resourceVersion".into()));
                    };
                    self.send(self.list_done()).await?;
                    self.on(Input::Synced(rv));
                    return Ok(());
                }
            }
        }
    }

    /// One watch request: with `list`, a streaming list from there followed by live events;
    /// without, live events after `rv`. Returns when the server ends it.
    async fn watch(&mut self, list: Option<ListFrom>, rv: &str) -> Result<(), Stop> {
        let timeout = watch_timeout();
        let mut initial = list.is_some();
        let params = WatchParams {
            timeout: Some(u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX)),
            bookmarks: true,
            send_initial_events: initial,
            label_selector: self.selector.clone(),
            ..WatchParams::default()
        };
        let from = match &list {
            Some(ListFrom::NotOlderThan(rv)) => rv.as_str(),
            Some(ListFrom::Consistent) => "",
            None => rv,
        };
        let mut request = Request::new(self.path.as_str())
            .watch(&params, from)
            .map_err(|e| Stop::Failed(format!("cannot build watch request: {e}")))?;
        // One gzip member per event is not decoded by the client's middleware (kube#1837).
        request.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
        self.ask_metadata_only(&mut request, false);
        self.ask_shard(&mut request)?;
        let started = Instant::now();
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, self.client.request_stream(request));
        let Ok(answer) = answer.await else {
            return Err(Stop::Failed(format!(
                "watch: no answer within {ANSWER_TIMEOUT:?}"
            )));
        };
        let body = match answer {
            Ok(body) => body,
            Err(e) if initial && refuses_streaming(&e) => {
                tracing::info!(resource = %self.gvk, "the API server does not serve streaming lists ({e}); using paginated lists");
                self.on(Input::StreamingRefused);
                return Ok(());
            }
            Err(e) => return Err(self.failure(Verb::Watch, &e)),
        };
        self.stats.note_watch();
        if initial {
            self.send(self.list_started()).await?;
        }
        let mut events = 0_u64;
        let mut lines = Lines::new(body);
        loop {
            if !self.pending.is_empty() && !lines.ready() {
                // Nothing more has arrived: hand over what was decoded before waiting.
                self.flush().await?;
            }
            let line = match tokio::time::timeout(SILENCE, lines.next()).await {
                Err(_) => {
                    self.stats.note_silence();
                    return Err(Stop::Failed(format!(
                        "watch silent for {SILENCE:?}: no event or bookmark; the API server may be hung"
                    )));
                }
                Ok(Ok(None)) => break,
                Ok(Err(e)) if initial => {
                    // A cut is not a refusal: list again by streaming, after a backoff.
                    return Err(Stop::Failed(format!("streaming list cut: {e}")));
                }
                Ok(Err(e)) => {
                    // A connection cut mid-stream: resume like an ended watch.
                    tracing::debug!(resource = %self.gvk, "watch stream cut: {e}");
                    break;
                }
                Ok(Ok(Some(Ok(line)))) => line,
                Ok(Ok(Some(Err(e)))) => {
                    self.skip(&e);
                    continue;
                }
            };
            events += 1;
            let event = match wire::watch_line(&self.gvk, line, &self.transform) {
                Ok(event) => event,
                Err(e) => {
                    self.skip(&e);
                    continue;
                }
            };
            self.stats.note_event();
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) if initial => {
                    self.send(SourceEvent::Listed(o)).await?;
                }
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    self.seen(o.resource_version());
                    self.send(SourceEvent::Applied(o)).await?;
                }
                WatchEvent::Deleted(o) => {
                    self.seen(o.resource_version());
                    self.send(SourceEvent::Deleted(o)).await?;
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => {
                    if initial && initial_events_end {
                        initial = false;
                        self.send(self.list_done()).await?;
                        self.on(Input::Synced(resource_version));
                    } else if !resource_version.is_empty() {
                        self.on(Input::Seen(resource_version));
                    }
                }
                WatchEvent::Error(status) if status.code == 410 => {
                    return Err(Stop::Expired(describe_status(Verb::Watch, &status)));
                }
                WatchEvent::Error(status) => {
                    return Err(Stop::Failed(self.explain(Verb::Watch, &status)));
                }
            }
        }
        if initial {
            // An older server ignores sendInitialEvents and never marks their end.
            tracing::info!(resource = %self.gvk, "the streaming list ended without its end marker; using paginated lists");
            self.on(Input::StreamingRefused);
            return Ok(());
        }
        if events == 0 && started.elapsed() < SHORT_WATCH {
            return Err(Stop::Failed("watch ended at once without events".into()));
        }
        Ok(())
    }

    /// Logs and counts a watch event that cannot be decoded, which is skipped.
    fn skip(&self, why: &dyn std::fmt::Display) {
        // The reason may quote the server's bytes (an unknown event type): kept to a bound.
        let reason = cut(format!("skipping watch event: {why}"), MAX_MESSAGE_BYTES);
        tracing::error!(resource = %self.gvk, "{reason}");
        self.stats.note_error(&reason);
    }

    /// Classifies a failed request: expired versions relist, the rest back off.
    fn failure(&self, verb: Verb, e: &kube::Error) -> Stop {
        match e {
            kube::Error::Api(s) if s.code == 410 => Stop::Expired(format!("{verb}: {}", s.message)),
            kube::Error::Api(s) => Stop::Failed(self.explain(
                verb,
                &Status {
                    code: s.code,
                    reason: s.reason.clone(),
                    message: s.message.clone(),
                },
            )),
            other => Stop::Failed(format!("{verb} failed: {other}")),
        }
    }

    /// A message for a failed request that says what to do about it.
    fn explain(&self, verb: Verb, status: &Status) -> String {
        let plural = self.path.rsplit('/').next().unwrap_or("");
        let what = match self.gvk.group.as_str() {
            "" => format!("{plural} (core group)"),
            group => format!("{plural}.{group}"),
        };
        match status.code {
            403 => format!(
                "forbidden: the host may not {verb} {what} {}; grant it get, list and watch on {what} (see `kubewasm rbac`): {}",
                match &self.namespace {
                    Some(ns) => format!("in namespace {ns}"),
                    None => "cluster-wide".to_owned(),
                },
                status.message
            ),
            401 => format!(
                "unauthorized: the API server rejected the host's credentials for {verb} {what}: {}",
                status.message
            ),
            _ => describe_status(verb, status),
        }
    }
}

fn describe_status(verb: Verb, status: &Status) -> String {
    format!(
        "{verb} failed with {} {}: {}",
        status.code, status.reason, status.message
    )
}

/// True when a streaming-list request was refused as unsupported (the WatchList feature off).
fn refuses_streaming(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if matches!(s.code, 400 | 422))
}

/// A watch timeout drawn uniformly from [5, 10) minutes, so watches of many clients do not
/// all end at once.
fn watch_timeout() -> Duration {
    let random = RandomState::new().hash_one(Instant::now());
    let spread = MIN_WATCH_TIMEOUT.as_secs();
    MIN_WATCH_TIMEOUT + Duration::from_secs(random % spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watching(rv: &str) -> State {
        State {
            phase: Phase::Watch(rv.into()),
            method: ListMethod::Streaming,
        }
    }

    #[test]
    fn seen_in_place_is_the_same_move_as_next() {
        let listing = State {
            phase: Phase::List(ListFrom::NotOlderThan("3".into())),
            method: ListMethod::Paginated,
        };
        for state in [watching("41"), State::default(), listing] {
            let mut in_place = state.clone();
            in_place.seen("42");
            assert_eq!(in_place, state.next(Input::Seen("42".into())));
        }
    }

    #[test]
    fn first_sync_streams_from_a_consistent_read_then_watches_from_its_version() {
        let start = State::default();
        assert_eq!(start.phase, Phase::List(ListFrom::Consistent));
        assert_eq!(start.method, ListMethod::Streaming);
        assert!(!start.synced());
        let listing = start.next(Input::Seen("7".into()));
        assert_eq!(
            listing.phase,
            Phase::List(ListFrom::Consistent),
            "initial events do not move where a list starts"
        );
        let synced = listing.next(Input::Synced("42".into()));
        assert_eq!(synced, watching("42"));
        assert!(synced.synced());
        assert_eq!(synced.next(Input::Seen("43".into())), watching("43"));
    }

    #[test]
    fn expiry_relists_from_the_last_version_then_consistently() {
        let relist = watching("43").next(Input::Expired);
        assert_eq!(
            relist.phase,
            Phase::List(ListFrom::NotOlderThan("43".into()))
        );
        let consistent = relist.next(Input::Expired);
        assert_eq!(consistent.phase, Phase::List(ListFrom::Consistent));
        assert_eq!(
            consistent.clone().next(Input::Expired),
            consistent,
            "a consistent read that expires stays one"
        );
        assert_eq!(consistent.next(Input::Synced("50".into())), watching("50"));
    }

    #[test]
    fn only_a_refusal_turns_streaming_lists_off_for_good() {
        let refused = State::default().next(Input::StreamingRefused);
        assert_eq!(refused.method, ListMethod::Paginated);
        assert_eq!(refused.phase, Phase::List(ListFrom::Consistent));
        let after = refused
            .next(Input::Synced("9".into()))
            .next(Input::Expired)
            .next(Input::Synced("12".into()));
        assert_eq!(
            after.method,
            ListMethod::Paginated,
            "a relist after 410 keeps paginating"
        );
        let kept = State::default()
            .next(Input::Expired)
            .next(Input::Seen("3".into()));
        assert_eq!(
            kept.method,
            ListMethod::Streaming,
            "failures and expiry leave the method alone"
        );
    }

    #[test]
    fn watch_timeouts_spread_over_five_to_ten_minutes() {
        let drawn: std::collections::BTreeSet<u64> =
            (0..200).map(|_| watch_timeout().as_secs()).collect();
        assert!(drawn.iter().all(|s| (300..600).contains(s)), "{drawn:?}");
        assert!(
            drawn.len() > 50,
            "spread out: {} distinct values",
            drawn.len()
        );
    }
}
