//! How a granted request reaches its host: the name resolved once and every address checked
//! before connecting (no loopback, link-local, unspecified or multicast address, none of this
//! machine's own), then a connection to an address that passed, TLS checked against the
//! name. Checking the name alone would let an allowed name that resolves inward (to
//! `127.0.0.1`, the cloud metadata address `169.254.169.254`, the pod's own IP) reach the
//! host's own endpoints. A grant that names an IP address (`127.0.0.1:8080`) reaches exactly
//! that address.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::{Arc, OnceLock};
use std::task::Poll;

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use wasmtime_wasi_http::{Error, WasiBody};

/// Where a request may connect, or why not.
pub async fn addresses(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        // The grant named this address itself.
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let own = own_addresses();
    let (allowed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
        resolved.into_iter().partition(|a| reachable(a.ip(), own));
    if allowed.is_empty() {
        let refused: Vec<String> = refused.iter().map(|a| a.ip().to_string()).collect();
        return Err(format!(
            "{host} resolves only to addresses a name may not reach ({}): loopback, link-local, unspecified, multicast or this host's own; grant the address itself to reach it",
            refused.join(", ")
        ));
    }
    Ok(allowed)
}

/// True for an address a granted name may resolve to.
pub fn reachable(ip: IpAddr, own: &[IpAddr]) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let inward = match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
        }
    };
    !inward && !own.contains(&ip)
}

/// This machine's own addresses (read once: a pod's addresses do not change).
fn own_addresses() -> &'static [IpAddr] {
    static OWN: OnceLock<Vec<IpAddr>> = OnceLock::new();
    OWN.get_or_init(interface_addresses)
}

#[cfg(unix)]
#[allow(unsafe_code)]
fn interface_addresses() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `getifaddrs` fills `list` with a linked list it allocated, which is walked
    // read-only (each `ifa_addr` checked for null and read as the family it says) and freed
    // once with `freeifaddrs`.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return found;
        }
        let mut at = list;
        while let Some(entry) = at.as_ref() {
            if let Some(addr) = entry.ifa_addr.as_ref() {
                match i32::from(addr.sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(entry.ifa_addr as *const libc::sockaddr_in);
                        found.push(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(entry.ifa_addr as *const libc::sockaddr_in6);
                        found.push(IpAddr::from(v6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            at = entry.ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found
}

#[cfg(not(unix))]
fn interface_addresses() -> Vec<IpAddr> {
    Vec::new()
}

/// The TLS settings of plugin requests: the system's roots.
fn tls() -> Arc<rustls::ClientConfig> {
    static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    TLS.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
            .unwrap_or_else(|_| {
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .expect("TLS 1.3 is supported by ring")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
            });
        Arc::new(config)
    })
    .clone()
}

/// A connection, plain or over TLS.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Stream for T {}

/// What sending a request gives: the response, and the connection's remaining I/O.
pub type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

/// Sends `request` to `host` at the first of `addresses` that accepts a connection, over TLS
/// checked against `host` when `tls`.
pub async fn send(
    mut request: http::Request<WasiBody>,
    addresses: Vec<SocketAddr>,
    host: String,
    tls_on: bool,
) -> Result<Sent, Error> {
    let mut last = Error::ConnectionRefused;
    let mut stream = None;
    for address in addresses {
        match tokio::net::TcpStream::connect(address).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Error::Connect(e),
        }
    }
    let stream = stream.ok_or(last)?;
    let io: Box<dyn Stream> = if tls_on {
        let name =
            rustls::pki_types::ServerName::try_from(host).map_err(Error::InvalidDnsNameError)?;
        let tls = tokio_rustls::TlsConnector::from(tls())
            .connect(name, stream)
            .await
            .map_err(Error::Tls)?;
        Box::new(tls)
    } else {
        Box::new(stream)
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    // The request line carries the path only (the scheme and authority address a proxy).
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    *request.uri_mut() = http::Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)?;
    let mut conn = Some(conn);
    let mut response = pin!(sender.send_request(request));
    // Wait for the response while driving the connection.
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(done) = response.as_mut().poll(cx) {
            return Poll::Ready(done.map_err(Error::from));
        }
        if let Some(c) = conn.as_mut()
            && let Poll::Ready(ended) = Pin::new(c).poll(cx)
        {
            conn = None;
            if let Err(e) = ended {
                return Poll::Ready(Err(Error::from(e)));
            }
        }
        Poll::Pending
    })
    .await?;
    let response = response.map(|body| body.map_err(Error::from).boxed_unsync());
    let rest: Box<dyn Future<Output = Result<(), Error>> + Send> = Box::new(async move {
        match conn {
            Some(conn) => conn.await.map_err(Error::from),
            None => Ok(()),
        }
    });
    Ok((response, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_may_not_resolve_inward() {
        let own: Vec<IpAddr> = vec!["10.1.2.3".parse().expect("ip")];
        for inward in [
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "10.1.2.3",
        ] {
            let ip: IpAddr = inward.parse().expect("ip");
            assert!(!reachable(ip, &own), "{inward}");
        }
        for outward in ["10.1.2.4", "192.168.1.1", "93.184.216.34", "2001:db8::1"] {
            let ip: IpAddr = outward.parse().expect("ip");
            assert!(reachable(ip, &own), "{outward}");
        }
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused_an_address_granted_is_not() {
        let refused = addresses("localhost", 8080).await.expect_err("loopback");
        assert!(refused.contains("resolves only to"), "{refused}");
        let granted = addresses("127.0.0.1", 8080).await.expect("named itself");
        assert_eq!(
            granted,
            ["127.0.0.1:8080".parse::<SocketAddr>().expect("addr")]
        );
    }

    #[test]
    fn this_machines_addresses_are_read() {
        assert!(
            own_addresses().iter().any(|ip| ip.is_loopback()),
            "{:?}",
            own_addresses()
        );
    }
}
