//! A pull-only client of the OCI distribution API: manifests and blobs over HTTPS, basic and
//! bearer-token authentication, every answer bounded in size and time.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::oci::OciError;
use crate::oci::auth::{Challenge, Credentials};
use crate::oci::reference::{Digest, Reference};

/// The manifest types asked for: OCI and Docker manifests and indexes.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// Largest manifest read (containerd's bound).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Largest token answer read.
const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// Largest error body kept for a message.
const MAX_ERROR_BYTES: u64 = 4 << 10;
/// Redirects followed for one blob (registries hand blobs to object stores).
const MAX_REDIRECTS: usize = 5;

/// How to reach one registry.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// Credentials for the registry (from a pull secret); anonymous without.
    pub credentials: Option<Credentials>,
    /// PEM certificates trusted besides the system's roots (a private CA).
    pub extra_roots: Vec<u8>,
    /// Longest one request may take, its body included (manifests, tokens).
    pub request_timeout: Duration,
    /// Longest one blob download may take.
    pub blob_timeout: Duration,
}

impl ClientOptions {
    /// Anonymous, system roots, 30 s per request and 5 min per blob.
    pub fn new() -> Self {
        Self {
            credentials: None,
            extra_roots: Vec::new(),
            request_timeout: Duration::from_secs(30),
            blob_timeout: Duration::from_secs(300),
        }
    }
}

/// A manifest as the registry sent it.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Its bytes, exactly as sent (its digest is theirs).
    pub bytes: Vec<u8>,
    /// The SHA-256 of the bytes.
    pub digest: Digest,
    /// The `Content-Type` the registry gave.
    pub media_type: String,
}

/// A client of one registry, for one repository's pulls.
pub struct RegistryClient {
    http: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    options: ClientOptions,
    /// The `Authorization` value that worked last, reused until refused.
    authorization: Mutex<Option<HeaderValue>>,
}

impl RegistryClient {
    /// A client with the system's roots plus `options.extra_roots`.
    pub fn new(options: ClientOptions) -> Result<Self, OciError> {
        let https = connector(&options.extra_roots, true)?;
        Ok(Self {
            http: Client::builder(TokioExecutor::new()).build(https),
            options,
            authorization: Mutex::new(None),
        })
    }

    /// The manifest `target` (a tag or digest) of `reference`'s repository, at most
    /// [`MAX_MANIFEST_BYTES`]; when `target` is a digest, the bytes must have it.
    pub async fn manifest(
        &self,
        reference: &Reference,
        target: &str,
    ) -> Result<Manifest, OciError> {
        let url = url(reference, "manifests", target);
        let deadline = self.options.request_timeout;
        let (bytes, media_type) = within(deadline, &url, async {
            let response = self.get(reference, &url, Some(MANIFEST_TYPES)).await?;
            let media_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.split(';').next().unwrap_or(v).trim().to_owned())
                .unwrap_or_default();
            let bytes = read(response, MAX_MANIFEST_BYTES, &url, "manifest").await?;
            Ok((bytes, media_type))
        })
        .await?;
        let digest = Digest::of(&bytes);
        if target.starts_with("sha256:") && digest.as_str() != target {
            return Err(OciError::DigestMismatch {
                what: format!("manifest {url}"),
                expected: target.to_owned(),
                got: digest.to_string(),
            });
        }
        Ok(Manifest {
            bytes,
            digest,
            media_type,
        })
    }

    /// The blob `digest` of `reference`'s repository, of at most `max_bytes`, checked against
    /// its digest.
    pub async fn blob(
        &self,
        reference: &Reference,
        digest: &Digest,
        max_bytes: u64,
    ) -> Result<Vec<u8>, OciError> {
        let url = url(reference, "blobs", digest.as_str());
        // One deadline for the whole download: redirects, headers and body.
        let bytes = within(self.options.blob_timeout, &url, async {
            let mut response = self.get(reference, &url, None).await?;
            let mut location = url.clone();
            for _ in 0..MAX_REDIRECTS {
                if !response.status().is_redirection() {
                    break;
                }
                let next = redirect(&response, &location)?;
                // Credentials go to the registry only, never to the store it redirects to.
                let authorization = (next.authority() == location.authority())
                    .then(|| self.authorization())
                    .flatten();
                location = next;
                response = self.send(&location, None, authorization).await?;
            }
            if response.status().is_redirection() {
                return Err(OciError::Protocol(format!(
                    "{url}: more than {MAX_REDIRECTS} redirects"
                )));
            }
            let response = check_status(response, &location).await?;
            read(response, max_bytes, &location, "blob").await
        })
        .await?;
        let got = Digest::of(&bytes);
        if &got != digest {
            return Err(OciError::DigestMismatch {
                what: format!("blob {url}"),
                expected: digest.to_string(),
                got: got.to_string(),
            });
        }
        Ok(bytes)
    }

    /// GET `url`, answering the registry's authentication challenge once.
    async fn get(
        &self,
        reference: &Reference,
        url: &Uri,
        accept: Option<&str>,
    ) -> Result<http::Response<hyper::body::Incoming>, OciError> {
        let response = self.send(url, accept, self.authorization()).await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return check_status(response, url).await;
        }
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(Challenge::parse);
        let had = self.authorization().is_some();
        let value = match challenge {
            Some(Challenge::Basic) => match &self.options.credentials {
                Some(credentials) if !had => credentials.basic(),
                _ => return Err(self.unauthorized(url)),
            },
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope =
                    scope.unwrap_or_else(|| format!("repository:{}:pull", reference.repository));
                format!(
                    "Bearer {}",
                    self.token(&realm, service.as_deref(), &scope).await?
                )
            }
            None => {
                return Err(unauthorized(
                    url,
                    "the registry asks for an authentication scheme this client does not speak",
                ));
            }
        };
        let value = HeaderValue::from_str(&value).map_err(|_| {
            OciError::Protocol(format!("{url}: the token is not a valid header value"))
        })?;
        let response = self.send(url, accept, Some(value.clone())).await?;
        if response.status() == StatusCode::UNAUTHORIZED {
            *self.authorization_slot() = None;
            return Err(self.unauthorized(url));
        }
        *self.authorization_slot() = Some(value);
        check_status(response, url).await
    }

    /// A bearer token from `realm` for `scope`, with the credentials when there are some.
    async fn token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<String, OciError> {
        let mut query = format!("scope={}", encode(scope));
        if let Some(service) = service {
            query.push_str(&format!("&service={}", encode(service)));
        }
        let separator = if realm.contains('?') { '&' } else { '?' };
        let uri: Uri = format!("{realm}{separator}{query}").parse().map_err(|e| {
            OciError::Protocol(format!("the token realm {realm:?} is not a URL: {e}"))
        })?;
        let basic = match &self.options.credentials {
            Some(credentials) => {
                Some(HeaderValue::from_str(&credentials.basic()).map_err(|_| {
                    OciError::Setup(
                        "the pull secret's credentials are not a valid header value".into(),
                    )
                })?)
            }
            None => None,
        };
        within(self.options.request_timeout, &uri, async {
            let response = self.send(&uri, None, basic).await?;
            if response.status() == StatusCode::UNAUTHORIZED {
                return Err(unauthorized(
                    &uri,
                    "the token service refused the credentials",
                ));
            }
            let response = check_status(response, &uri).await?;
            let bytes = read(response, MAX_TOKEN_BYTES, &uri, "token").await?;
            #[derive(serde::Deserialize)]
            struct Token {
                token: Option<String>,
                access_token: Option<String>,
            }
            let token: Token = serde_json::from_slice(&bytes)
                .map_err(|e| OciError::Protocol(format!("{uri}: not a token answer: {e}")))?;
            token
                .token
                .or(token.access_token)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| OciError::Protocol(format!("{uri}: the answer holds no token")))
        })
        .await
    }

    fn authorization_slot(&self) -> std::sync::MutexGuard<'_, Option<HeaderValue>> {
        self.authorization
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn authorization(&self) -> Option<HeaderValue> {
        self.authorization_slot().clone()
    }

    /// The 401 for `url`: credentials missing, or refused.
    fn unauthorized(&self, url: &Uri) -> OciError {
        let why = if self.options.credentials.is_some() {
            "the registry refused the credentials of the pull secret"
        } else {
            "the registry wants credentials: give the plugin's source a pullSecret"
        };
        unauthorized(url, why)
    }

    /// One GET of `url`, with `authorization` when given.
    async fn send(
        &self,
        url: &Uri,
        accept: Option<&str>,
        authorization: Option<HeaderValue>,
    ) -> Result<http::Response<hyper::body::Incoming>, OciError> {
        let mut request = Request::builder()
            .method(Method::GET)
            .uri(url.clone())
            .header(
                header::USER_AGENT,
                concat!("kubewasm/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| OciError::Protocol(format!("{url}: {e}")))?;
        self.http
            .request(request)
            .await
            .map_err(|e| OciError::Connect {
                url: url.to_string(),
                error: chain(&e),
            })
    }
}

/// A TLS connector (rustls with ring) trusting the system's roots plus the PEM certificates
/// in `extra_roots`; plain HTTP too unless `https_only`.
pub fn connector(
    extra_roots: &[u8],
    https_only: bool,
) -> Result<HttpsConnector<HttpConnector>, OciError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable system certificates are skipped, as every TLS client does.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    let mut extra = 0;
    for cert in CertificateDer::pem_slice_iter(extra_roots) {
        let cert = cert.map_err(|e| OciError::Setup(format!("the CA file is not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| OciError::Setup(format!("the CA file holds a bad certificate: {e}")))?;
        extra += 1;
    }
    if !extra_roots.is_empty() && extra == 0 {
        return Err(OciError::Setup(
            "the CA file holds no PEM certificate".into(),
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| OciError::Setup(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    let builder = if https_only {
        builder.https_only()
    } else {
        builder.https_or_http()
    };
    Ok(builder.enable_http1().build())
}

/// `https://registry/v2/repository/{kind}/{target}`, Docker Hub's names made explicit.
fn url(reference: &Reference, kind: &str, target: &str) -> Uri {
    let (registry, repository) = match reference.registry.as_str() {
        "docker.io" | "index.docker.io" => (
            "registry-1.docker.io",
            if reference.repository.contains('/') {
                reference.repository.clone()
            } else {
                format!("library/{}", reference.repository)
            },
        ),
        registry => (registry, reference.repository.clone()),
    };
    // Every part was validated by `Reference::parse`: the URI is well formed.
    format!("https://{registry}/v2/{repository}/{kind}/{target}")
        .parse()
        .unwrap_or_else(|_| Uri::from_static("https://invalid.invalid/"))
}

fn unauthorized(url: &Uri, why: &str) -> OciError {
    OciError::Status {
        url: url.to_string(),
        status: StatusCode::UNAUTHORIZED.as_u16(),
        detail: why.to_owned(),
    }
}

/// The response when its status is a success (or a redirect); otherwise an error with the
/// registry's own error text.
async fn check_status(
    response: http::Response<hyper::body::Incoming>,
    url: &Uri,
) -> Result<http::Response<hyper::body::Incoming>, OciError> {
    let status = response.status();
    if status.is_success() || status.is_redirection() {
        return Ok(response);
    }
    let body = read(response, MAX_ERROR_BYTES, url, "error")
        .await
        .unwrap_or_default();
    let detail = registry_errors(&body).unwrap_or_else(|| match status {
        StatusCode::NOT_FOUND => "not found".to_owned(),
        StatusCode::FORBIDDEN => {
            "forbidden: the credentials may not pull this repository".to_owned()
        }
        _ => status.canonical_reason().unwrap_or("failed").to_owned(),
    });
    Err(OciError::Status {
        url: url.to_string(),
        status: status.as_u16(),
        detail,
    })
}

/// The `errors[].code: message` of a distribution error body.
fn registry_errors(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: Option<String>,
        message: Option<String>,
    }
    let errors: Errors = serde_json::from_slice(body).ok()?;
    let text: Vec<String> = errors
        .errors
        .iter()
        .take(4)
        .map(|e| {
            let code = e.code.as_deref().unwrap_or("ERROR");
            let message: String = e
                .message
                .as_deref()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            format!("{code}: {message}")
        })
        .collect();
    (!text.is_empty()).then(|| text.join("; "))
}

fn redirect(response: &http::Response<hyper::body::Incoming>, from: &Uri) -> Result<Uri, OciError> {
    let location = response
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| OciError::Protocol(format!("{from}: a redirect without a Location")))?;
    let uri: Uri = location
        .parse()
        .map_err(|e| OciError::Protocol(format!("{from}: redirect to {location:?}: {e}")))?;
    if uri.scheme().is_some() {
        return Ok(uri);
    }
    // A relative location: on the same host.
    let mut parts = from.clone().into_parts();
    parts.path_and_query = uri.path_and_query().cloned();
    Uri::from_parts(parts)
        .map_err(|e| OciError::Protocol(format!("{from}: redirect to {location:?}: {e}")))
}

/// The body, at most `max` bytes (a larger one is refused, not truncated).
async fn read(
    response: http::Response<hyper::body::Incoming>,
    max: u64,
    url: &Uri,
    what: &str,
) -> Result<Vec<u8>, OciError> {
    let declared = response
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || OciError::TooLarge {
        what: format!("{what} {url}"),
        limit: max,
    };
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let expected = declared.unwrap_or(0) as usize;
    read_body(response.into_body(), max, expected)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => too_large(),
            BodyError::Read(e) => OciError::Connect {
                url: url.to_string(),
                error: chain(&e),
            },
        })
}

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// It is longer than the bound.
    #[error("the answer is over its bound")]
    TooLarge,
    /// The connection failed.
    #[error(transparent)]
    Read(hyper::Error),
}

/// A response body, at most `max` bytes: reading stops at the first byte past the bound.
/// `expected` (a declared length, within the bound) sizes the buffer up front.
pub async fn read_body(
    mut body: hyper::body::Incoming,
    max: u64,
    expected: usize,
) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::with_capacity(expected);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(BodyError::Read)?.into_data() {
            if out.len() as u64 + data.len() as u64 > max {
                return Err(BodyError::TooLarge);
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

async fn within<T>(
    limit: Duration,
    url: &Uri,
    work: impl std::future::Future<Output = Result<T, OciError>>,
) -> Result<T, OciError> {
    tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
        Err(OciError::Timeout {
            url: url.to_string(),
            limit,
        })
    })
}

/// An error and its sources on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Percent-encodes a query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_distribution_api() {
        let r = Reference::parse("oci://127.0.0.1:5000/plugins/a:v1").expect("ref");
        assert_eq!(
            url(&r, "manifests", "v1").to_string(),
            "https://127.0.0.1:5000/v2/plugins/a/manifests/v1"
        );
        let hub = Reference::parse("oci://docker.io/busybox:1").expect("ref");
        assert_eq!(
            url(&hub, "manifests", "1").to_string(),
            "https://registry-1.docker.io/v2/library/busybox/manifests/1"
        );
        assert_eq!(encode("repository:a/b:pull"), "repository%3Aa%2Fb%3Apull");
    }

    #[test]
    fn registry_error_bodies_become_one_line() {
        let body =
            br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown","detail":{}}]}"#;
        assert_eq!(
            registry_errors(body).as_deref(),
            Some("MANIFEST_UNKNOWN: manifest unknown")
        );
        assert_eq!(registry_errors(b"<html>"), None);
    }
}
