//! Admission webhooks served by plugins: an HTTPS server (rustls, the certificate read again
//! when its files change) with a path per plugin, `POST /admit/<plugin>`, taking
//! AdmissionReview v1 and answering with the plugin's verdict.
//!
//! Every replica serves (a review needs no leadership: it reads the cache and answers). A
//! plugin that cannot answer (a trap, its deadline, its memory cap, a mutation that does not
//! apply, no answer before the webhook's timeout) is answered for by its failure policy: Fail
//! refuses with a message naming the plugin, Ignore lets the request through with a warning.

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
    admitter.record(decision, started.elapsed(), failure.as_deref());
    (answer, decision)
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
    request: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let received = Instant::now();
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
    let review = match tokio::task::spawn_blocking(move || review::parse(&body)).await {
        Ok(Ok(review)) => review,
        Ok(Err(bad)) => return plain(StatusCode::BAD_REQUEST, format!("{bad}\n")),
        Err(e) => return plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    };
    let uid = review.request.uid.clone();
    let deciding = admitter.clone();
    let decided = tokio::task::spawn_blocking(move || decide(&deciding, &review, until).0);
    let answer = match tokio::time::timeout_at(until.into(), decided).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        // Still running at the budget's end (waiting for a place, or a call between its CPU
        // deadline and its wall cap): the failure policy answers now.
        Err(_) => {
            let failure = format!("no answer within {:?}", budget(admitter.admission.timeout));
            let (answer, decision) = failed(&admitter, &uid, &failure);
            admitter.record(decision, received.elapsed(), Some(&failure));
            answer
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(answer.to_body())));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Serves the webhooks on `listener` with `tls` until the task is dropped.
pub async fn serve(listener: TcpListener, tls: Arc<tls::Reloading>, host: Arc<PluginHost>) {
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
        let (acceptor, host) = (acceptor.clone(), host.clone());
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
                let host = host.clone();
                async move { Ok::<_, Infallible>(route(host, request).await) }
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
