//! A real OCI registry (CNCF distribution) on loopback, serving TLS with basic auth, and
//! cosign, both built from the Go module proxy by `scripts/test-tools.sh`.
//!
//! [`Registry::start`] runs the registry with a fresh CA and an htpasswd user; [`Registry::push`]
//! uploads content (blobs, then a manifest under a tag) the way `wkg oci push` lays out a
//! component; [`Cosign`] generates key pairs and signs artifacts in that registry.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use sha2::Digest as _;

use crate::pki::Pki;
use crate::process::Server;
use crate::{b64, free_port, tools_dir};

/// The CNCF wasm artifact's config and layer types.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF wasm artifact's layer type.
pub const WASM_LAYER: &str = "application/wasm";
/// The OCI image manifest type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The SHA-256 digest of `bytes`, as `sha256:<hex>`.
pub fn digest(bytes: &[u8]) -> String {
    let hex: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A running registry with TLS and one user.
pub struct Registry {
    server: Server,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// The CA that signed its certificate (PEM).
    pub ca_pem: String,
    /// The user allowed to push and pull.
    pub user: String,
    /// Its password.
    pub password: String,
    http: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on a free loopback port (filesystem storage in a temporary folder).
    pub async fn start() -> anyhow::Result<Self> {
        let tools = tools_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("kubewasm-registry-")
            .tempdir()?;
        let path = |name: &str| dir.path().join(name);
        let pki = Pki::new()?;
        let serving = pki.server()?;
        std::fs::write(path("ca.crt"), pki.ca_cert())?;
        std::fs::write(path("server.crt"), &serving.cert)?;
        std::fs::write(path("server.key"), &serving.key)?;
        let (user, password) = ("pusher".to_owned(), "s3cret-pass".to_owned());
        let line = Command::new(tools.join("registry"))
            .args(["htpasswd", &user, &password])
            .output()
            .context("registry htpasswd")?;
        if !line.status.success() {
            bail!(
                "registry htpasswd: {}",
                String::from_utf8_lossy(&line.stderr)
            );
        }
        std::fs::write(path("htpasswd"), &line.stdout)?;
        let port = free_port()?;
        let address = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1
log: {{level: info, accesslog: {{disabled: true}}}}
storage:
  filesystem: {{rootdirectory: {storage}}}
  delete: {{enabled: true}}
http:
  addr: {address}
  secret: kubewasm-test
  tls: {{certificate: {cert}, key: {key}}}
auth:
  htpasswd: {{realm: kubewasm-test, path: {htpasswd}}}
",
            storage = path("storage").display(),
            cert = path("server.crt").display(),
            key = path("server.key").display(),
            htpasswd = path("htpasswd").display(),
        );
        std::fs::write(path("config.yml"), config)?;
        let server = Server::start(
            "registry",
            &tools.join("registry"),
            &["serve".into(), path("config.yml").display().to_string()],
            &path("registry.log"),
        )?;
        let http = client(&pki.ca_cert())?;
        let mut registry = Self {
            server,
            address,
            ca_pem: pki.ca_cert(),
            user,
            password,
            http,
            dir,
        };
        let deadline = Instant::now() + crate::READY_TIMEOUT;
        loop {
            if !registry.server.is_running() {
                bail!("the registry exited:\n{}", registry.log_tail(20));
            }
            if let Ok((status, _)) = registry.request(Method::GET, "/v2/", None, &[]).await
                && status == StatusCode::OK
            {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "the registry was not ready in time:\n{}",
                    registry.log_tail(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(registry)
    }

    /// The folder of this registry's files (`ca.crt` among them).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A `.dockerconfigjson` with this registry's user, or with `password` instead.
    pub fn docker_config(&self, password: Option<&str>) -> String {
        let auth = b64(&format!(
            "{}:{}",
            self.user,
            password.unwrap_or(&self.password)
        ));
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.address)
    }

    /// Stops the registry (for tests of a registry that went away).
    pub fn stop(&mut self) {
        self.server.stop();
    }

    /// Writes what a client of this registry is given into `dir`: its CA as `ca.pem` and a
    /// pull secret as `regcred.json` (with `password`, or the right one).
    pub fn write_client_files(&self, dir: &Path, password: Option<&str>) -> std::io::Result<()> {
        std::fs::write(dir.join("ca.pem"), &self.ca_pem)?;
        std::fs::write(dir.join("regcred.json"), self.docker_config(password))
    }

    /// The last lines of the registry's log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.server.log_tail(lines)
    }

    /// Uploads `blob` to `repository`; returns its digest.
    pub async fn push_blob(&self, repository: &str, blob: &[u8]) -> anyhow::Result<String> {
        let digest = digest(blob);
        let (status, location) = self
            .request(
                Method::POST,
                &format!("/v2/{repository}/blobs/uploads/"),
                None,
                &[],
            )
            .await?;
        if status != StatusCode::ACCEPTED {
            bail!("starting an upload to {repository}: {status}");
        }
        let location = location.context("an upload without a Location")?;
        let separator = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{separator}digest={digest}");
        let (status, _) = self
            .request(Method::PUT, &put, Some("application/octet-stream"), blob)
            .await?;
        if status != StatusCode::CREATED {
            bail!("uploading a blob to {repository}: {status}");
        }
        Ok(digest)
    }

    /// Puts `manifest` (of `media_type`) under `tag` (or a digest); returns its digest.
    pub async fn push_manifest(
        &self,
        repository: &str,
        tag: &str,
        media_type: &str,
        manifest: &[u8],
    ) -> anyhow::Result<String> {
        let (status, _) = self
            .request(
                Method::PUT,
                &format!("/v2/{repository}/manifests/{tag}"),
                Some(media_type),
                manifest,
            )
            .await?;
        if status != StatusCode::CREATED {
            bail!("putting manifest {repository}:{tag}: {status}");
        }
        Ok(digest(manifest))
    }

    /// Pushes `wasm` as a CNCF wasm artifact (config `application/vnd.wasm.config.v0+json`,
    /// one `application/wasm` layer), tagged `tag`; returns the manifest digest.
    pub async fn push_component(
        &self,
        repository: &str,
        tag: &str,
        wasm: &[u8],
    ) -> anyhow::Result<String> {
        let config = br#"{"created":"2026-11-23T00:00:00Z","architecture":"wasm","os":"wasip2","layerDigests":[],"component":{"exports":[],"imports":[]}}"#;
        self.push_layers(repository, tag, WASM_CONFIG, config, &[(WASM_LAYER, wasm)])
            .await
    }

    /// Pushes an image manifest with config of `config_type` and the given layers.
    pub async fn push_layers(
        &self,
        repository: &str,
        tag: &str,
        config_type: &str,
        config: &[u8],
        layers: &[(&str, &[u8])],
    ) -> anyhow::Result<String> {
        let config_digest = self.push_blob(repository, config).await?;
        let mut descriptors = Vec::new();
        for (media_type, bytes) in layers {
            let digest = self.push_blob(repository, bytes).await?;
            descriptors.push(serde_json::json!({
                "mediaType": media_type, "digest": digest, "size": bytes.len(),
            }));
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config_type, "digest": config_digest, "size": config.len()},
            "layers": descriptors,
        });
        let bytes = serde_json::to_vec(&manifest)?;
        self.push_manifest(repository, tag, OCI_MANIFEST, &bytes)
            .await
    }

    /// One authenticated request; the status and any `Location`.
    async fn request(
        &self,
        method: Method,
        path_or_url: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> anyhow::Result<(StatusCode, Option<String>)> {
        let url = if path_or_url.starts_with("https://") {
            path_or_url.to_owned()
        } else {
            format!("https://{}{path_or_url}", self.address)
        };
        let mut request = Request::builder()
            .method(method)
            .uri(&url)
            .header(
                header::AUTHORIZATION,
                format!("Basic {}", b64(&format!("{}:{}", self.user, self.password))),
            )
            .header(header::CONTENT_LENGTH, body.len());
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let request = request.body(Full::new(Bytes::copy_from_slice(body)))?;
        let response = tokio::time::timeout(Duration::from_secs(30), self.http.request(request))
            .await
            .context("registry request timed out")??;
        let status = response.status();
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| {
                if l.starts_with('/') {
                    format!("https://{}{l}", self.address)
                } else {
                    l.to_owned()
                }
            });
        let _ = response.into_body().collect().await;
        Ok((status, location))
    }
}

fn client(
    ca_pem: &str,
) -> anyhow::Result<Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

/// cosign, run against a [`Registry`].
pub struct Cosign {
    program: PathBuf,
}

/// A cosign key pair in files.
pub struct KeyPair {
    /// The encrypted private key (`cosign.key`; its password is empty).
    pub private: PathBuf,
    /// The public key (`cosign.pub`).
    pub public: PathBuf,
}

impl Cosign {
    /// The cosign of [`tools_dir`].
    pub fn new() -> anyhow::Result<Self> {
        Ok(Self {
            program: tools_dir()?.join("cosign"),
        })
    }

    fn command(&self, dir: &Path) -> Command {
        let mut command = Command::new(&self.program);
        command
            .current_dir(dir)
            .env("COSIGN_PASSWORD", "")
            .env("HOME", dir)
            .env("DOCKER_CONFIG", dir.join("docker"))
            .env("SIGSTORE_NO_CACHE", "1")
            .env("TUF_ROOT", dir.join("tuf"));
        command
    }

    /// `cosign generate-key-pair` in `dir`.
    pub fn generate_key_pair(&self, dir: &Path) -> anyhow::Result<KeyPair> {
        std::fs::create_dir_all(dir)?;
        run(
            self.command(dir).arg("generate-key-pair"),
            "cosign generate-key-pair",
        )?;
        Ok(KeyPair {
            private: dir.join("cosign.key"),
            public: dir.join("cosign.pub"),
        })
    }

    /// Signs `repository@digest` in `registry` with `key` (no transparency log: offline).
    pub fn sign(
        &self,
        registry: &Registry,
        repository: &str,
        digest: &str,
        key: &KeyPair,
    ) -> anyhow::Result<()> {
        let dir = registry.dir().join("cosign-home");
        std::fs::create_dir_all(dir.join("docker"))?;
        std::fs::write(dir.join("docker/config.json"), registry.docker_config(None))?;
        let reference = format!("{}/{repository}@{digest}", registry.address);
        run(
            self.command(&dir)
                .env("SSL_CERT_FILE", registry.dir().join("ca.crt"))
                .args(["sign", "--yes", "--tlog-upload=false", "--key"])
                .arg(&key.private)
                .arg(&reference),
            "cosign sign",
        )
    }
}

fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = command
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
