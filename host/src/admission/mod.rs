//! Admission webhooks served by plugins: an HTTPS server (rustls, the certificate read again
//! when its files change) with a path per plugin, `POST /admit/<plugin>`, taking
//! AdmissionReview v1 and answering with the plugin's verdict.
//!
//! Every replica serves (a review needs no leadership: it reads the cache and answers). A
//! plugin that cannot answer (a trap, its deadline, its memory cap, a mutation that does not
//! apply, no answer before the webhook's timeout) is answered for by its failure policy: Fail
//! refuses with a message naming the plugin, Ignore lets the request through with a warning.
//!
//! Reviews run on a fixed pool of `concurrency` threads below the host's priority, as event
//! delivery runs, so a flood of slow reviews takes no more CPU than that many threads at that
//! priority and never grows the process's threads. A review first waits, as a task and not a
//! thread, for one of its plugin's places (a plugin gets at most all but one of the pool's
//! threads, so one slow plugin cannot hold every thread); what is still waiting when its time
//! in the host is up (the webhook's timeout less a margin) gets the failure policy's answer,
//! so the API server never waits out its own deadline.

pub mod record;
pub mod review;
pub mod tls;
pub mod webhooks;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::plugins::PluginHost;
use crate::plugins::admit::{Admitter, Decision};
use crate::plugins::shadow::Comparison;
use review::{Answer, Review};

/// The path prefix of the webhooks: `/admit/<plugin>`.
pub const PATH: &str = "/admit/";

/// How long a client may take for its TLS handshake and request headers.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and with what certificate the webhooks are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// The address to listen on (port 0: any free one).
    pub address: SocketAddr,
    /// The certificate chain, PEM.
    pub cert_file: PathBuf,
    /// Its private key, PEM.
    pub key_file: PathBuf,
    /// Reviews running at once, all plugins together: the pool's threads.
    pub concurrency: usize,
    /// The folder each plugin's answered reviews are recorded into, as a test file.
    pub record_reviews: Option<PathBuf>,
}

/// Reviews running at once when the configuration does not say: one per core, at least two.
pub fn default_concurrency() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

/// A review handed to the pool.
struct Job {
    admitter: Arc<Admitter>,
    review: Review,
    until: Instant,
    reply: tokio::sync::oneshot::Sender<Answer>,
    /// The plugin's candidate, when one runs: it reviews the same request once the answer
    /// has gone, and the two decisions are compared.
    candidate: Option<(Arc<Admitter>, Arc<Comparison>)>,
    /// The plugin's place, given back when the review ends.
    _place: tokio::sync::OwnedSemaphorePermit,
}

/// The threads reviews run on, and the queue into them (which holds at most the places the
/// plugins give out, so it never fills).
pub struct Pool {
    jobs: std::sync::mpsc::SyncSender<Job>,
    /// Its threads.
    pub threads: usize,
}

impl Pool {
    /// Starts `threads` review threads below the host's priority, recording each review they
    /// answer to `record` when there is one.
    pub fn start(threads: usize, record: Option<record::ReviewRecorder>) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let (jobs, queue) = std::sync::mpsc::sync_channel::<Job>(threads * 64);
        let queue = Arc::new(std::sync::Mutex::new(queue));
        let record = record.map(Arc::new);
        for n in 0..threads {
            let queue = queue.clone();
            let record = record.clone();
            crate::priority::spawn_below_host(format!("admit-{n}"), move || {
                loop {
                    let next = queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .recv();
                    let Ok(job) = next else { return };
                    // Out of time while queued: the route has answered already.
                    if Instant::now() >= job.until || job.reply.is_closed() {
                        continue;
                    }
                    let compared = job.candidate.is_some();
                    let (answer, _, decided) =
                        decide_with(&job.admitter, &job.review, job.until, compared);
                    let _ = job.reply.send(answer);
                    if let (Some((candidate, comparison)), Some(decided)) =
                        (&job.candidate, decided)
                    {
                        let until = Instant::now() + budget(candidate.admission.timeout);
                        let (_, _, theirs) = decide_with(candidate, &job.review, until, true);
                        let event = format!("review {}", job.review.request.uid);
                        comparison.pair(event, decided, theirs.unwrap_or_default());
                    }
                    if let Some(record) = &record {
                        record.record(&job.admitter.name, &job.review);
                    }
                }
            })?;
        }
        Ok(Self { jobs, threads })
    }

    /// The places each plugin gets: all but one of the threads (one when there is one), at
    /// most four.
    pub fn places_per_plugin(&self) -> usize {
        self.threads.saturating_sub(1).clamp(1, 4)
    }
}

/// The time a review may take in the host: the webhook's timeout less a margin for the
/// network, so the API server gets the failure policy's answer rather than a timeout.
pub fn budget(timeout: Duration) -> Duration {
    timeout.saturating_sub((timeout / 5).min(Duration::from_secs(1)))
}

/// Answers `review` with `admitter`'s verdict, the failure policy's when it gives none:
/// the whole of a review's time in the host but for reading the body. Blocking: the plugin
/// runs on this thread.
pub fn decide(admitter: &Admitter, review: &Review, until: Instant) -> (Answer, Decision) {
    let (answer, decision, _) = decide_with(admitter, review, until, false);
    (answer, decision)
}

/// As [`decide`], and with `compared` what the plugin decided (before monitor mode allows
/// it), as two versions' decisions are compared: the decision, a denial's message, the patch.
fn decide_with(
    admitter: &Admitter,
    review: &Review,
    until: Instant,
    compared: bool,
) -> (Answer, Decision, Option<String>) {
    let started = Instant::now();
    let outcome = admitter
        .admit(&review.request, until)
        .and_then(|verdict| answer_of(admitter, review, verdict));
    let (answer, decision, failure) = match outcome {
        Ok((answer, decision)) => (answer, decision, None),
        Err(failure) => {
            let (answer, decision) = failed(admitter, &review.request.uid, &failure);
            (answer, decision, Some(failure))
        }
    };
    // The host names the plugin in its messages: not a difference between two versions.
    let decided = compared.then(|| match &answer.patch {
        Some(patch) => format!("{} patch {patch}", decision.as_str()),
        None if answer.allowed => decision.as_str().to_owned(),
        None => format!(
            "{}: {}",
            decision.as_str(),
            answer.message.replace(admitter.name.as_str(), "<plugin>")
        ),
    });
    let (answer, decision) = match &admitter.monitor {
        Some(log) => monitored(log, review, answer, decision),
        None => (answer, decision),
    };
    admitter.record(decision, started.elapsed(), failure.as_deref());
    (answer, decision, decided)
}

/// In monitor mode: `answer` (the plugin's `decision`) reported to `log`, and the review
/// allowed as it came, with no patch and no warning.
fn monitored(
    log: &crate::plugins::trial::TrialLog,
    review: &Review,
    answer: Answer,
    decision: Decision,
) -> (Answer, Decision) {
    let r = &review.request;
    log.review(crate::plugins::trial::ReviewReport {
        time: crate::clock::now().to_string(),
        uid: crate::text::cut(r.uid.clone(), 64),
        operation: r.operation.as_str().to_owned(),
        object: r.object_name(),
        rule: format!("{} {}", r.gvk, r.operation.as_str()),
        decision: decision.as_str().to_owned(),
        message: answer.message,
        patch: answer
            .patch
            .map(|p| crate::text::cut(p.to_string(), crate::plugins::trial::MAX_CHANGE_BYTES)),
    });
    let allowed = Answer {
        uid: answer.uid,
        allowed: true,
        ..Answer::default()
    };
    (allowed, Decision::Allowed)
}

/// The answer for a verdict, or why the verdict cannot be given.
fn answer_of(
    admitter: &Admitter,
    review: &Review,
    verdict: crate::wasm::admit::Verdict,
) -> Result<(Answer, Decision), String> {
    let mut answer = Answer {
        uid: review.request.uid.clone(),
        allowed: verdict.allowed,
        code: verdict.code,
        warnings: verdict.warnings,
        ..Answer::default()
    };
    if !verdict.allowed {
        answer.message = format!("{}: {}", admitter.name, verdict.message);
        return Ok((answer, Decision::Denied));
    }
    let Some(mutation) = verdict.mutation else {
        return Ok((answer, Decision::Allowed));
    };
    if !admitter.admission.mutating {
        return Err("a validating webhook answered with a mutation".into());
    }
    match review::patch_for(review, &mutation)? {
        Some(patch) => {
            answer.patch = Some(patch);
            Ok((answer, Decision::Patched))
        }
        None => Ok((answer, Decision::Allowed)),
    }
}

/// The failure policy's answer when `admitter` could not answer.
fn failed(admitter: &Admitter, uid: &str, failure: &str) -> (Answer, Decision) {
    let name = &admitter.name;
    tracing::warn!(plugin = %name, "admission review failed: {failure}");
    if admitter.admission.fail_open {
        let answer = Answer {
            uid: uid.to_owned(),
            allowed: true,
            warnings: vec![format!(
                "kubewasm plugin {name} could not review this request ({failure}); let through (failurePolicy Ignore)"
            )],
            ..Answer::default()
        };
        (answer, Decision::FailedOpen)
    } else {
        let answer = Answer {
            uid: uid.to_owned(),
            allowed: false,
            code: 500,
            message: format!("kubewasm plugin {name} could not review this request: {failure}"),
            ..Answer::default()
        };
        (answer, Decision::FailedClosed)
    }
}

fn plain(code: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = code;
    response
}

async fn route(
    host: Arc<PluginHost>,
    pool: Arc<Pool>,
    request: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let received = Instant::now();
    // Read only while traces are exported: a review pays nothing for them otherwise.
    let traceparent = crate::traces::enabled()
        .then(|| {
            request
                .headers()
                .get("traceparent")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .flatten();
    let Some(plugin) = request.uri().path().strip_prefix(PATH).map(str::to_owned) else {
        return plain(
            StatusCode::NOT_FOUND,
            format!("webhooks are at {PATH}<plugin>\n"),
        );
    };
    if request.method() != Method::POST {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "an AdmissionReview is POSTed\n".into(),
        );
    }
    let Some(admitter) = host.admitter(&plugin) else {
        // Its failure policy is unknown here: the API server applies the configuration's.
        return plain(
            StatusCode::NOT_FOUND,
            format!("no loaded plugin {plugin:?} serves admission\n"),
        );
    };
    let body = match Limited::new(request.into_body(), review::MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "review body not read (at most {} bytes): {e}\n",
                    review::MAX_BODY_BYTES
                ),
            );
        }
    };
    let until = received + budget(admitter.admission.timeout);
    // Bounded by MAX_BODY_BYTES, and about 9 µs for a pod: read here, not on another thread.
    let review = match review::parse(&body) {
        Ok(review) => review,
        Err(bad) => return plain(StatusCode::BAD_REQUEST, format!("{bad}\n")),
    };
    let uid = review.request.uid.clone();
    let span = review_span(&plugin, traceparent.as_deref(), &review);
    let candidate = host.candidate_admitter(&plugin);
    let (answer, failure) = match queue(&admitter, candidate, &pool, review, until).await {
        Ok(answer) => (answer, None),
        Err(failure) => {
            let (answer, decision) = failed(&admitter, &uid, &failure);
            admitter.record(decision, received.elapsed(), Some(&failure));
            (answer, Some(failure))
        }
    };
    if let Some(mut span) = span {
        use opentelemetry::KeyValue;
        span.set(KeyValue::new("kubewasm.review.allowed", answer.allowed));
        span.set(KeyValue::new(
            "kubewasm.review.patched",
            answer.patch.is_some(),
        ));
        if !answer.allowed {
            span.set(KeyValue::new(
                "kubewasm.review.message",
                answer.message.clone(),
            ));
        }
        span.end(failure.as_deref());
    }
    let mut response = Response::new(Full::new(Bytes::from(answer.to_body())));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The span of one review by `plugin`, under the API server's span its `traceparent` names.
fn review_span(
    plugin: &str,
    traceparent: Option<&str>,
    review: &Review,
) -> Option<crate::traces::Span> {
    use opentelemetry::KeyValue;
    let r = &review.request;
    crate::traces::Span::start(
        "review",
        opentelemetry::trace::SpanKind::Server,
        traceparent,
        || {
            let mut attributes = vec![
                KeyValue::new("kubewasm.plugin", plugin.to_owned()),
                KeyValue::new("kubewasm.review.uid", r.uid.clone()),
                KeyValue::new("kubewasm.review.operation", r.operation.as_str()),
                KeyValue::new("k8s.resource", r.gvk.to_string()),
                KeyValue::new("k8s.object.name", r.name.clone()),
            ];
            if let Some(ns) = &r.namespace {
                attributes.push(KeyValue::new("k8s.namespace.name", ns.clone()));
            }
            attributes
        },
    )
}

/// `review`'s answer from `admitter` on `pool`, or why there is none by `until`: no place
/// free in time, too many waiting, or still running (a call between its CPU deadline and its
/// wall cap).
async fn queue(
    admitter: &Arc<Admitter>,
    candidate: Option<(Arc<Admitter>, Arc<Comparison>)>,
    pool: &Pool,
    review: Review,
    until: Instant,
) -> Result<Answer, String> {
    let late = || format!("no answer within {:?}", budget(admitter.admission.timeout));
    let place = admitter
        .place(pool.places_per_plugin(), until)
        .await
        .map_err(|why| format!("{} ({why})", late()))?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job = Job {
        admitter: admitter.clone(),
        review,
        until,
        reply,
        candidate,
        _place: place,
    };
    pool.jobs
        .try_send(job)
        .map_err(|_| "the review queue is full".to_owned())?;
    match tokio::time::timeout_at(until.into(), answer).await {
        Ok(Ok(answer)) => Ok(answer),
        // Dropped unanswered: its time was up when a thread took it.
        Ok(Err(_)) | Err(_) => Err(late()),
    }
}

/// Serves the webhooks on `listener` with `tls` until the task is dropped, running reviews
/// on `pool`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<tls::Reloading>,
    host: Arc<PluginHost>,
    pool: Arc<Pool>,
) {
    let config = match tls.server_config() {
        Ok(config) => Arc::new(config),
        Err(e) => {
            tracing::error!("admission webhooks not served: {e}");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("admission webhooks: cannot accept a connection: {e}");
                continue;
            }
        };
        let (acceptor, host, pool) = (acceptor.clone(), host.clone(), pool.clone());
        tokio::spawn(async move {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(e)) => {
                        tracing::debug!("admission webhooks: TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => return,
                };
            let service = hyper::service::service_fn(move |request| {
                let (host, pool) = (host.clone(), pool.clone());
                async move { Ok::<_, Infallible>(route(host, pool, request).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(io, service)
                .await
            {
                tracing::debug!("admission webhooks: connection ended: {e}");
            }
        });
    }
}
