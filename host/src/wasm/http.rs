//! Outbound HTTP (`wasi:http/outgoing-handler`) for notifications: only to the hosts the
//! operator lists for the plugin (`grants.http`), and a listed name only where it resolves
//! outward (`http_send.rs`); every request ended by the call's deadline (resolving,
//! connecting, waiting and reading the body alike), at most [`MAX_IN_FLIGHT`] at once per
//! instance and the plugin's `httpRequestsPerSecond`, request and response bodies capped,
//! requests counted. Anything else answers an error value (`HTTP-request-denied`,
//! `destination-IP-prohibited`, `connection-limit-reached`).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use crate::rate::Bucket;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// Largest request body a plugin may send.
pub const MAX_REQUEST_BYTES: u64 = 1 << 20;
/// Largest response body a plugin may read.
pub const MAX_RESPONSE_BYTES: u64 = 1 << 20;
/// Requests one instance may have open at once (sent, and their response not yet read).
pub const MAX_IN_FLIGHT: usize = 16;

/// Largest write into a request body (wasmtime's default is 1 MiB): what one unsent request
/// body may buffer in the host.
const BODY_CHUNK_BYTES: usize = 64 << 10;

/// One entry of `grants.http`: a host, and a port or the default ports (80, 443).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    /// The host name or IP address, lowercase.
    pub host: String,
    /// The port; `None`: 80 and 443.
    pub port: Option<u16>,
}

/// Text that is not `host` or `host:port` (its first 80 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not host or host:port (for example hooks.example.com or 127.0.0.1:8080)")]
pub struct NotAHost(pub String);

impl AllowedHost {
    /// Parses `host` or `host:port` (IPv6 in brackets).
    pub fn parse(text: &str) -> Result<Self, NotAHost> {
        let invalid = || NotAHost(text.chars().take(80).collect());
        let authority: http::uri::Authority = text.parse().map_err(|_| invalid())?;
        if authority.as_str().contains('@') || authority.host().is_empty() {
            return Err(invalid());
        }
        Ok(Self {
            host: authority.host().to_ascii_lowercase(),
            port: authority.port_u16(),
        })
    }

    fn allows(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host)
            && match self.port {
                Some(p) => p == port,
                None => port == 80 || port == 443,
            }
    }
}

impl std::fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => write!(f, "{} (ports 80, 443)", self.host),
        }
    }
}

/// What became of one plugin's HTTP requests, by the granted host they went to (its entry
/// in `grants.http`) and outcome: a response's status class (`2xx` to `5xx`), `error` (no
/// response: refused late, timed out, failed), `refused` (its rate or open requests), or
/// `denied` under `(not granted)`. Bounded by the plugin's grants times the outcomes.
#[derive(Debug, Default)]
pub struct HttpTally(Mutex<BTreeMap<(String, &'static str), u64>>);

/// The host a request to a host the plugin may not reach is counted under.
pub const NOT_GRANTED: &str = "(not granted)";

impl HttpTally {
    /// Counts one request to `host` that ended in `outcome`.
    pub fn add(&self, host: &str, outcome: &'static str) {
        let mut counts = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *counts.entry((host.to_owned(), outcome)).or_default() += 1;
    }

    /// The counts by host, then outcome.
    pub fn snapshot(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        let counts = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut by_host: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for ((host, outcome), n) in counts.iter() {
            by_host
                .entry(host.clone())
                .or_default()
                .insert((*outcome).to_owned(), *n);
        }
        by_host
    }
}

/// The status class of a response.
fn status_class(status: http::StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// One request's entry in its plugin's [`HttpTally`]: `error` unless answered.
struct Pending {
    tally: Arc<HttpTally>,
    host: String,
    answered: bool,
}

impl Pending {
    /// Counts the response's status class.
    fn answered(mut self, class: &'static str) {
        self.tally.add(&self.host, class);
        self.answered = true;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.answered {
            self.tally.add(&self.host, "error");
        }
    }
}

/// The `wasi:http` hooks of one instance.
pub struct HttpHooks {
    plugin: String,
    /// The hosts the plugin may reach.
    pub allowed: Arc<Vec<AllowedHost>>,
    /// When the current call must end.
    pub deadline: Instant,
    /// Requests sent since the counters were last taken.
    pub sent: u64,
    /// Requests refused since the counters were last taken.
    pub denied: u64,
    /// Requests refused after they were handed over (a name resolving inward).
    refused_late: Arc<AtomicU64>,
    /// Requests open now.
    in_flight: Arc<AtomicUsize>,
    /// The plugin's request rate, shared by its instances.
    rate: Arc<Mutex<Bucket>>,
    /// What became of its requests, shared by its instances and versions.
    tally: Arc<HttpTally>,
}

impl HttpHooks {
    /// Hooks allowing `allowed` for plugin `plugin`, at the plugin's `rate`, counting what
    /// became of each request in `tally`.
    pub fn new(
        plugin: &str,
        allowed: Arc<Vec<AllowedHost>>,
        rate: Arc<Mutex<Bucket>>,
        tally: Arc<HttpTally>,
    ) -> Self {
        Self {
            tally,
            plugin: plugin.to_owned(),
            allowed,
            deadline: Instant::now(),
            sent: 0,
            denied: 0,
            refused_late: Arc::default(),
            in_flight: Arc::default(),
            rate,
        }
    }

    /// Requests refused since the counters were last taken, late refusals included.
    pub fn take_denied(&mut self) -> u64 {
        std::mem::take(&mut self.denied) + self.refused_late.swap(0, Ordering::Relaxed)
    }
}

type Sent = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

fn refuse(error: Error) -> Sent {
    Box::new(async move { Err(error) })
}

impl WasiHttpHooks for HttpHooks {
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK_BYTES
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sent {
        let uri = request.uri();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let host = uri.host().unwrap_or("");
        let Some(grant) = self.allowed.iter().find(|a| a.allows(host, port)) else {
            self.denied += 1;
            self.tally.add(NOT_GRANTED, "denied");
            tracing::warn!(plugin = %self.plugin, host = %crate::text::cut(host.to_owned(), 256), port, "HTTP request denied: the host is not in this plugin's grants.http (in dry-run mode: its grants.httpSafe)");
            return refuse(Error::HttpRequestDenied);
        };
        let grant = grant.to_string();
        let now = Instant::now();
        if self.deadline.saturating_duration_since(now).is_zero() {
            self.tally.add(&grant, "error");
            return refuse(Error::ConnectionTimeout);
        }
        if self.in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
            self.denied += 1;
            self.tally.add(&grant, "refused");
            return refuse(Error::ConnectionLimitReached);
        }
        let within_rate = self
            .rate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .try_take(now);
        if !within_rate {
            self.denied += 1;
            self.tally.add(&grant, "refused");
            return refuse(Error::ConnectionLimitReached);
        }
        self.sent += 1;
        let held = InFlight::hold(&self.in_flight);
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let (host, tls) = (host.to_owned(), uri.scheme_str() == Some("https"));
        let (plugin, refused_late) = (self.plugin.clone(), self.refused_late.clone());
        // Counted as `error` unless a response comes: a call stopped at its deadline drops
        // this future unfinished.
        let outcome = Pending {
            tally: self.tally.clone(),
            host: grant,
            answered: false,
        };
        let request = request.map(|body| {
            Bounded::new(
                body,
                MAX_REQUEST_BYTES,
                None,
                Error::HttpRequestBodySize(Some(MAX_REQUEST_BYTES)),
            )
            .boxed_unsync()
        });
        Box::new(async move {
            let sent = tokio::time::timeout_at(deadline, async {
                let addresses = super::http_send::addresses(&host, port).await.map_err(|why| {
                    refused_late.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(plugin = %plugin, "HTTP request refused: {}", crate::text::cut(why, 512));
                    Error::DestinationIpProhibited
                })?;
                super::http_send::send(request, addresses, host, tls).await
            })
            .await
            .map_err(|_| Error::ConnectionTimeout)
            .and_then(|sent| sent);
            let (response, io) = sent?;
            outcome.answered(status_class(response.status()));
            let response = response.map(|body| {
                let mut bounded = Bounded::new(
                    body,
                    MAX_RESPONSE_BYTES,
                    Some(deadline),
                    Error::HttpResponseBodySize(Some(MAX_RESPONSE_BYTES)),
                );
                // Open until its body is read or dropped.
                bounded.held = Some(held);
                bounded.boxed_unsync()
            });
            Ok((response, io))
        })
    }
}

/// One open request of an instance, counted while it lives.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn hold(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A body cut off past `max` bytes, or (when given) at `deadline`.
struct Bounded<B> {
    inner: B,
    left: u64,
    over: Option<Error>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The request this body answers, counted open until the body goes.
    held: Option<InFlight>,
}

impl<B> Bounded<B> {
    fn new(inner: B, max: u64, deadline: Option<tokio::time::Instant>, over: Error) -> Self {
        Self {
            inner,
            left: max,
            over: Some(over),
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
            held: None,
        }
    }
}

impl<B: Body<Data = Bytes, Error = Error> + Unpin> Body for Bounded<B> {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if let Some(deadline) = self.deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
            if len > self.left {
                self.left = 0;
                let over = self
                    .over
                    .take()
                    .unwrap_or(Error::HttpResponseBodySize(None));
                return Poll::Ready(Some(Err(over)));
            }
            self.left -= len;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_hosts_match_host_and_port() {
        let local = AllowedHost::parse("127.0.0.1:8080").expect("parses");
        assert!(local.allows("127.0.0.1", 8080));
        assert!(!local.allows("127.0.0.1", 8081));
        let named = AllowedHost::parse("Hooks.Example.com").expect("parses");
        assert!(named.allows("hooks.example.com", 443));
        assert!(named.allows("HOOKS.example.com", 80));
        assert!(!named.allows("hooks.example.com", 8443));
        assert!(!named.allows("evil.hooks.example.com", 443));
        for bad in ["", "user@host", "http://x/y", "a b"] {
            assert!(AllowedHost::parse(bad).is_err(), "{bad:?}");
        }
    }
}
