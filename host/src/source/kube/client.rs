//! The client the agent talks to the API server through: kube's own stack (TLS, timeouts,
//! retries on 429/503/504, authentication, extra headers), with each connection's read buffer
//! bounded.
//!
//! hyper grows a connection's read buffer while reads fill it, to about 408 KiB (504 KiB
//! allocated), and keeps it as long as the connection lives: a list page or a streaming list's
//! burst fills it, and every watch holds a connection of its own. Bounded to 64 KiB, the
//! buffer holds 120 KiB; a burst is read in more, smaller reads. Measured in the peers bench
//! (section 4, 10,000 metadata-only pods): 652 B held per pod before, 612 after; events per
//! client CPU-second on a 20,000-event burst about 5% lower, within one run's spread. A
//! response head must fit the buffer too: hyper refuses one that outgrows it (the API
//! server's are under a KiB).
//!
//! Left out of kube's stack: its tracing spans per request (the reflectors log what a request
//! was for) and `valid_until`, the expiry of an exec plugin's client certificate, which the
//! agent never read.

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// Largest read buffer of one connection (hyper's least is 8 KiB): a 4 KB pod's watch line
/// and its HTTP chunk header fit several times.
pub const READ_BUFFER: usize = 64 << 10;

/// A client for `config`'s cluster.
///
/// A configuration naming a proxy gets kube's own client, which says whether it can use it.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .http1_max_buf_size(READ_BUFFER)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// How long a test waits for an answer.
    const ANSWER: Duration = Duration::from_secs(10);

    /// A one-request HTTP server double: answers `body` after the header lines `extra` and
    /// returns the request's head.
    async fn answer_once(
        listener: TcpListener,
        extra: String,
        body: String,
    ) -> anyhow::Result<String> {
        let (mut socket, _) = listener.accept().await?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            socket.read_exact(&mut byte).await?;
            head.push(byte[0]);
        }
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(answer.as_bytes()).await?;
        Ok(String::from_utf8(head)?)
    }

    #[tokio::test]
    async fn requests_carry_the_configs_credentials_and_headers() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/base", listener.local_addr()?);
        // Larger than the read buffer: read in several reads.
        let names: Vec<String> = (0..10_000).map(|i| format!("pod-{i:05}")).collect();
        let body = serde_json::json!({"names": names}).to_string();
        assert!(body.len() > READ_BUFFER);
        let server = tokio::spawn(answer_once(listener, String::new(), body.clone()));
        let mut config = kube::Config::new(url.parse()?);
        config.auth_info.token = Some("sekret".to_owned().into());
        config.auth_info.impersonate = Some("alice".into());
        let client = client(config)?;
        let request = http::Request::get("/api/v1/pods").body(Vec::new())?;
        let text = tokio::time::timeout(ANSWER, client.request_text(request)).await??;
        assert_eq!(text, body, "the whole answer, across reads");
        let head = tokio::time::timeout(ANSWER, server).await???.to_lowercase();
        assert!(head.starts_with("get /base/api/v1/pods "), "{head}");
        assert!(head.contains("authorization: bearer sekret"), "{head}");
        assert!(head.contains("impersonate-user: alice"), "{head}");
        Ok(())
    }

    #[tokio::test]
    async fn a_response_head_larger_than_the_buffer_is_refused() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        // A broken or hostile server's endless head: the buffer does not grow to hold it. (A
        // head is refused once it has not fit the room read so far, which can be up to about
        // twice the bound; hyper's default took 256 KiB.)
        let extra = format!("x-padding: {}\r\n", "a".repeat(4 * READ_BUFFER));
        let _server = tokio::spawn(answer_once(listener, extra, "{}".into()));
        let client = client(kube::Config::new(url.parse()?))?;
        let request = http::Request::get("/api/v1/pods").body(Vec::new())?;
        let answer = tokio::time::timeout(ANSWER, client.request_text(request)).await?;
        // The cause is at the end of the error's chain.
        let error = answer
            .err()
            .map(|e| format!("{:#}", anyhow::Error::from(e)));
        assert!(
            error.as_deref().is_some_and(|e| e.contains("too large")),
            "{error:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_proxy_is_left_to_kube_which_names_what_it_lacks() -> anyhow::Result<()> {
        let mut config = kube::Config::new("https://127.0.0.1:1".parse()?);
        config.proxy_url = Some("socks5://127.0.0.1:2".parse()?);
        let error = client(config).err().map(|e| e.to_string());
        assert!(
            error.as_deref().is_some_and(|e| e.contains("socks5")),
            "{error:?}"
        );
        Ok(())
    }
}
