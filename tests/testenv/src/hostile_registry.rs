//! A hostile registry, as a double: an HTTPS server on loopback that answers every request
//! with one scripted misbehaviour (what a real registry will not do on demand), to show that
//! a client's memory and time do not depend on the registry's manners.
//!
//! Responses are written by hand, byte by byte, so that lengths, chunking and pacing are
//! exactly as scripted; one request per connection (`Connection: close`).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::pki::Pki;

/// What the double does with every request.
#[derive(Debug, Clone)]
pub enum Misbehaviour {
    /// Declares a body of this many bytes (and sends a few).
    DeclaredLength(u64),
    /// Streams chunks without end.
    EndlessChunks,
    /// Sends its headers, then one byte every `Duration`, without end.
    Drip(Duration),
    /// Accepts the connection and never answers (not even TLS).
    Silent,
    /// Redirects every request to itself.
    RedirectLoop,
    /// Asks for a bearer token at its own `/token`, which answers without end.
    EndlessToken,
    /// Answers 200 with this body, whatever was asked.
    Body(Vec<u8>),
}

/// The running double; it stops when dropped.
pub struct HostileRegistry {
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// The CA its certificate is signed by (PEM).
    pub ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostileRegistry {
    /// Serves `misbehaviour` on a free loopback port.
    pub async fn start(misbehaviour: Misbehaviour) -> anyhow::Result<Self> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let pki = Pki::new()?;
        let serving = pki.server()?;
        let certs = CertificateDer::pem_slice_iter(serving.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let own = address.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, misbehaviour, own) =
                    (acceptor.clone(), misbehaviour.clone(), own.clone());
                tokio::spawn(async move {
                    if let Misbehaviour::Silent = misbehaviour {
                        // Hold the connection open, say nothing.
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        drop(stream);
                        return;
                    }
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut request = vec![0u8; 8192];
                    let Ok(n) = tls.read(&mut request).await else {
                        return;
                    };
                    let path = String::from_utf8_lossy(&request[..n])
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or("/")
                        .to_owned();
                    let _ = answer(&mut tls, &misbehaviour, &path, &own).await;
                });
            }
        });
        Ok(Self {
            address,
            ca_pem: pki.ca_cert(),
            task,
        })
    }
}

async fn answer(
    out: &mut (impl AsyncWriteExt + Unpin),
    misbehaviour: &Misbehaviour,
    path: &str,
    own: &str,
) -> std::io::Result<()> {
    const JSON: &str = "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n";
    match misbehaviour {
        Misbehaviour::DeclaredLength(n) => {
            out.write_all(format!("HTTP/1.1 200 OK\r\n{JSON}Content-Length: {n}\r\n\r\n{{}}").as_bytes())
                .await
        }
        Misbehaviour::EndlessChunks => {
            out.write_all(format!("HTTP/1.1 200 OK\r\n{JSON}Transfer-Encoding: chunked\r\n\r\n").as_bytes())
                .await?;
            let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, " ".repeat(64 << 10));
            loop {
                out.write_all(chunk.as_bytes()).await?;
            }
        }
        Misbehaviour::Drip(every) => {
            out.write_all(format!("HTTP/1.1 200 OK\r\n{JSON}Content-Length: 1000000\r\n\r\n").as_bytes())
                .await?;
            loop {
                out.write_all(b" ").await?;
                out.flush().await?;
                tokio::time::sleep(*every).await;
            }
        }
        Misbehaviour::Silent => Ok(()),
        Misbehaviour::RedirectLoop => {
            out.write_all(
                format!("HTTP/1.1 307 Temporary Redirect\r\nConnection: close\r\nLocation: https://{own}{path}\r\nContent-Length: 0\r\n\r\n")
                    .as_bytes(),
            )
            .await
        }
        Misbehaviour::EndlessToken if path.starts_with("/token") => {
            out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                .await?;
            let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "a".repeat(64 << 10));
            out.write_all(b"7\r\n{\"token\r\n").await?;
            loop {
                out.write_all(chunk.as_bytes()).await?;
            }
        }
        Misbehaviour::EndlessToken => {
            out.write_all(
                format!("HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nWWW-Authenticate: Bearer realm=\"https://{own}/token\",service=\"hostile\"\r\nContent-Length: 0\r\n\r\n")
                    .as_bytes(),
            )
            .await
        }
        Misbehaviour::Body(body) => {
            out.write_all(format!("HTTP/1.1 200 OK\r\nConnection: close\r\n{JSON}Content-Length: {}\r\n\r\n", body.len()).as_bytes())
                .await?;
            out.write_all(body).await
        }
    }
}
