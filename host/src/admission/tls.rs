//! The webhook server's certificate: read from PEM files and read again when they change
//! (cert-manager renews a Secret that the kubelet updates in the mounted folder), without a
//! restart. A renewal that does not parse keeps the previous certificate serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often the files' modification times are looked at, at most.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why a certificate and key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no PEM of the kind expected.
    #[error("{path}: {problem}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The server configuration could not be built.
    #[error("TLS: {0}")]
    Config(String),
}

fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let file_error = |path: &Path, problem: String| TlsError::File {
        path: path.to_owned(),
        problem,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_error(cert, "no CERTIFICATE in it".into()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e.to_string()))?;
    let signing = any_supported_type(&private)
        .map_err(|e| file_error(key, format!("not a usable private key: {e}")))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// What was read last, and when the files were last looked at.
struct Current {
    key: Arc<CertifiedKey>,
    stamps: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

/// A certificate resolver that follows its files.
pub struct Reloading {
    cert: PathBuf,
    key: PathBuf,
    current: Mutex<Current>,
}

impl std::fmt::Debug for Reloading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Reloading {
    /// Reads `cert` (a PEM chain) and `key` (a PEM private key) once; an error now is an
    /// error to start with.
    pub fn new(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let loaded = load(cert, key)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current: Mutex::new(Current {
                key: loaded,
                stamps: (modified(cert), modified(key)),
                checked: Instant::now(),
            }),
        })
    }

    /// The certificate to serve now, read again if the files changed since.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.checked.elapsed() >= CHECK_EVERY {
            current.checked = Instant::now();
            let stamps = (modified(&self.cert), modified(&self.key));
            if stamps != current.stamps {
                match load(&self.cert, &self.key) {
                    Ok(key) => {
                        tracing::info!(cert = %self.cert.display(), "webhook certificate read again");
                        current.key = key;
                        current.stamps = stamps;
                    }
                    // A half-written renewal: keep serving the previous one, try again later.
                    Err(e) => tracing::warn!("{e}: still serving the previous certificate"),
                }
            }
        }
        current.key.clone()
    }

    /// A TLS server configuration (HTTP/1.1) serving this certificate.
    pub fn server_config(self: Arc<Self>) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}
