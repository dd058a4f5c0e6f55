//! The reflector: lists and watches one resource type the way client-go's Reflector does.
//!
//! - First sync: a streaming list (a watch with `sendInitialEvents`) when the server supports
//!   it, else a paginated list (500 per page). Both stream into the informer object by object.
//! - Then a watch from the listed resourceVersion with bookmarks on and a server-side timeout
//!   drawn from [5, 10) minutes; a watch that ends is resumed from the last version seen
//!   (an object's or a bookmark's), without a relist.
//! - 410 Gone relists: first from the last version seen, then, if that is gone too, with a
//!   consistent read.
//! - Every failure waits on kube-runtime's default backoff (800 ms doubling to 30 s, with
//!   jitter, reset after 2 minutes without failures). 429, 503 and 504 answers are first
//!   retried inside kube's client (its default retry policy).
//!
//! kube-runtime's watcher does most of this, but not all: it always relists with the same
//! semantics as its first list (so never from the last version after a 410), its watch timeout
//! is fixed, a server that refuses a streaming list is retried forever instead of falling back
//! to list, and a watch request answered with HTTP 410 is retried without a relist. So the
//! state machine is ours; requests, TLS, auth and the backoff are kube's.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};
use kube::api::{ApiResource, DynamicObject, ListParams, VersionMatch, WatchParams};
use kube::core::Request;
use kube::runtime::watcher::DefaultBackoff;
use kube::{Client, Resource};
use tokio::sync::mpsc::UnboundedSender;

use crate::gvk::Gvk;
use crate::object::Transform;
use crate::source::SourceEvent;
use crate::source::kube::stats::ReflectorStats;
use crate::source::kube::wire::{self, Page, Status, WatchEvent};

/// Objects per list page (client-go's default).
pub const PAGE_SIZE: u32 = 500;
/// The server-side watch timeout is drawn from [this, twice this) (client-go's range).
const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// A watch is considered dead when nothing arrives for its timeout plus this.
const IDLE_MARGIN: Duration = Duration::from_secs(30);
/// A watch that ends sooner than this without delivering anything counts as a failure.
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// Why a step stopped.
enum Stop {
    /// The informer is gone.
    Closed,
    /// The version we hold is too old: relist.
    Expired(String),
    /// Anything else: back off and retry the same step.
    Failed(String),
}

/// How a watch request starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Streaming list: initial events, then the live watch.
    InitialEvents,
    /// Live events after `last_rv`.
    Resume,
}

/// Lists and watches one resource type, feeding an informer.
pub struct Reflector {
    client: Client,
    gvk: Gvk,
    path: String,
    transform: Transform,
    tx: UnboundedSender<SourceEvent>,
    stats: Arc<ReflectorStats>,
    /// The newest resourceVersion seen (list, object or bookmark).
    last_rv: Option<String>,
    /// `last_rv` turned out to be too old: the next list is a consistent read.
    rv_expired: bool,
    /// Whether to try streaming lists (cleared when the server refuses one).
    streaming: bool,
}

impl Reflector {
    /// A reflector for `resource` (of type `gvk`) sending to `tx`.
    pub fn new(
        client: Client,
        gvk: Gvk,
        resource: &ApiResource,
        transform: Transform,
        tx: UnboundedSender<SourceEvent>,
        stats: Arc<ReflectorStats>,
    ) -> Self {
        Self {
            client,
            gvk,
            path: DynamicObject::url_path(resource, None),
            transform,
            tx,
            stats,
            last_rv: None,
            rv_expired: false,
            streaming: true,
        }
    }

    /// Runs until the receiving informer goes away.
    pub async fn run(mut self) {
        let mut backoff = DefaultBackoff::default();
        let mut synced = false;
        loop {
            let step = match (synced, self.streaming) {
                (false, true) => self.watch(Mode::InitialEvents, &mut synced).await,
                (false, false) => self.list().await.map(|()| synced = true),
                (true, _) => self.watch(Mode::Resume, &mut synced).await,
            };
            let reason = match step {
                Ok(()) => continue,
                Err(Stop::Closed) => return,
                Err(Stop::Expired(reason)) => {
                    if synced {
                        self.stats.note_relist();
                    }
                    synced = false;
                    format!("{reason}; relisting")
                }
                Err(Stop::Failed(reason)) => reason,
            };
            let delay = backoff.next().unwrap_or(Duration::from_secs(30));
            self.stats.note_error(&reason);
            tracing::warn!(resource = %self.gvk, "{reason}; retrying in {delay:.1?}");
            tokio::time::sleep(delay).await;
            if self.tx.is_closed() {
                return;
            }
        }
    }

    fn send(&self, event: SourceEvent) -> Result<(), Stop> {
        self.tx.send(event).map_err(|_| Stop::Closed)
    }

    /// The version the next list or streaming list starts from: the last one seen unless it
    /// expired; `None` for a consistent read.
    fn list_from(&self) -> Option<String> {
        self.last_rv.clone().filter(|_| !self.rv_expired)
    }

    /// One paginated list, streamed into the informer page by page.
    async fn list(&mut self) -> Result<(), Stop> {
        let from = self.list_from();
        let mut params = ListParams {
            limit: Some(PAGE_SIZE),
            ..ListParams::default()
        };
        if let Some(rv) = &from {
            params.resource_version = Some(rv.clone());
            params.version_match = Some(VersionMatch::NotOlderThan);
        }
        self.send(SourceEvent::ListStarted)?;
        loop {
            let request = Request::new(self.path.as_str())
                .list(&params)
                .map_err(|e| Stop::Failed(format!("cannot build list request: {e}")))?;
            let page: Page = self
                .client
                .request(request)
                .await
                .map_err(|e| self.failure("list", &e))?;
            for item in page.items {
                match wire::object(&self.gvk, item, &self.transform) {
                    Ok(object) => self.send(SourceEvent::Listed(object))?,
                    Err(e) => {
                        tracing::error!(resource = %self.gvk, "skipping malformed object: {e}")
                    }
                }
            }
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => {
                    params.continue_token = Some(token);
                    params.resource_version = None;
                    params.version_match = None;
                }
                None => {
                    let rv = page.metadata.resource_version.filter(|v| !v.is_empty());
                    let Some(rv) = rv else {
                        return Err(Stop::Failed("list response has no resourceVersion".into()));
                    };
                    self.last_rv = Some(rv);
                    self.rv_expired = false;
                    return self.send(SourceEvent::ListDone);
                }
            }
        }
    }

    /// One watch request: a streaming list followed by live events, or live events from the
    /// last version seen. Returns when the server ends it.
    async fn watch(&mut self, mode: Mode, synced: &mut bool) -> Result<(), Stop> {
        let timeout = watch_timeout();
        let params = WatchParams {
            timeout: Some(u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX)),
            bookmarks: true,
            send_initial_events: mode == Mode::InitialEvents,
            ..WatchParams::default()
        };
        let from = match mode {
            Mode::InitialEvents => self.list_from().unwrap_or_default(),
            Mode::Resume => self.last_rv.clone().unwrap_or_default(),
        };
        let mut request = Request::new(self.path.as_str())
            .watch(&params, &from)
            .map_err(|e| Stop::Failed(format!("cannot build watch request: {e}")))?;
        // One gzip member per event is not decoded by the client's middleware (kube#1837).
        request.headers_mut().insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
        let started = Instant::now();
        let body = match self.client.request_stream(request).await {
            Ok(body) => body,
            Err(e) if mode == Mode::InitialEvents && refuses_streaming(&e) => {
                tracing::info!(resource = %self.gvk, "the API server does not serve streaming lists ({e}); using paginated lists");
                self.streaming = false;
                return Ok(());
            }
            Err(e) => return Err(self.failure("watch", &e)),
        };
        self.stats.note_watch();
        if mode == Mode::InitialEvents {
            self.send(SourceEvent::ListStarted)?;
        }
        let mut initial = mode == Mode::InitialEvents;
        let mut events = 0_u64;
        let mut lines = Box::pin(body.lines());
        loop {
            let line = match tokio::time::timeout(timeout + IDLE_MARGIN, lines.next()).await {
                Err(_) => return Err(Stop::Failed("watch stalled: nothing received".into())),
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    // A connection cut mid-stream: resume like an ended watch.
                    tracing::debug!(resource = %self.gvk, "watch stream cut: {e}");
                    break;
                }
                Ok(Some(Ok(line))) if line.trim().is_empty() => continue,
                Ok(Some(Ok(line))) => line,
            };
            events += 1;
            let event = match wire::watch_line(&self.gvk, &line, &self.transform) {
                Ok(event) => event,
                Err(e) => {
                    tracing::error!(resource = %self.gvk, "skipping watch event: {e}");
                    continue;
                }
            };
            self.stats.note_event();
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) if initial => {
                    self.last_rv = Some(o.resource_version.clone());
                    self.send(SourceEvent::Listed(o))?;
                }
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    self.last_rv = Some(o.resource_version.clone());
                    self.send(SourceEvent::Applied(o))?;
                }
                WatchEvent::Deleted(o) => {
                    self.last_rv = Some(o.resource_version.clone());
                    self.send(SourceEvent::Deleted(o))?;
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => {
                    if !resource_version.is_empty() {
                        self.last_rv = Some(resource_version);
                    }
                    if initial && initial_events_end {
                        initial = false;
                        *synced = true;
                        self.rv_expired = false;
                        self.send(SourceEvent::ListDone)?;
                    }
                }
                WatchEvent::Error(status) if status.code == 410 => {
                    // Gone during a streaming list: its starting version is too old.
                    if initial {
                        self.rv_expired = true;
                    }
                    return Err(Stop::Expired(describe_status("watch", &status)));
                }
                WatchEvent::Error(status) => {
                    return Err(Stop::Failed(self.explain("watch", &status)));
                }
            }
        }
        if initial {
            // An older server ignores sendInitialEvents and never marks their end.
            tracing::info!(resource = %self.gvk, "the streaming list ended without its end marker; using paginated lists");
            self.streaming = false;
            return Ok(());
        }
        if events == 0 && started.elapsed() < SHORT_WATCH {
            return Err(Stop::Failed("watch ended at once without events".into()));
        }
        Ok(())
    }

    /// Classifies a failed request: expired versions relist, the rest back off.
    fn failure(&mut self, verb: &str, e: &kube::Error) -> Stop {
        match e {
            kube::Error::Api(s) if s.code == 410 => {
                // A list from our version (or its continuation) is gone: read consistently.
                if verb == "list" || self.last_rv.is_none() {
                    self.rv_expired = true;
                }
                Stop::Expired(format!("{verb}: {}", s.message))
            }
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
    fn explain(&self, verb: &str, status: &Status) -> String {
        let plural = self.path.rsplit('/').next().unwrap_or("");
        let what = match self.gvk.group.as_str() {
            "" => format!("{plural} (core group)"),
            group => format!("{plural}.{group}"),
        };
        match status.code {
            403 => format!(
                "forbidden: the host may not {verb} {what} cluster-wide; grant it get, list and watch on {what} (see `kubewasm rbac`): {}",
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

fn describe_status(verb: &str, status: &Status) -> String {
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
