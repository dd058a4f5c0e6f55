//! A TCP proxy in front of a server that can hang: it forwards bytes both ways until frozen,
//! then holds them (connections stay open, nothing passes), which is what a partitioned
//! network or a stopped server looks like to one client while others still reach it. Taken
//! down, it closes every connection and every new one at once: a server that went away.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy; it stops when dropped.
pub struct FreezableProxy {
    addr: SocketAddr,
    frozen: Arc<AtomicBool>,
    down: Arc<watch::Sender<bool>>,
    accept: JoinHandle<()>,
}

impl FreezableProxy {
    /// Starts a proxy on a free loopback port forwarding to `target`.
    pub async fn start(target: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let frozen = Arc::new(AtomicBool::new(false));
        let down = Arc::new(watch::channel(false).0);
        let (held, gone) = (frozen.clone(), down.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *gone.borrow() {
                    continue;
                }
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(
                    client_read,
                    server_write,
                    held.clone(),
                    gone.subscribe(),
                ));
                tokio::spawn(pump(
                    server_read,
                    client_write,
                    held.clone(),
                    gone.subscribe(),
                ));
            }
        });
        Ok(Self {
            addr,
            frozen,
            down,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds every byte from now on (`true`), or lets them pass again.
    pub fn freeze(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
    }

    /// Closes every connection and refuses new ones (`true`), or forwards again.
    pub fn set_down(&self, down: bool) {
        self.down.send_replace(down);
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
    mut down: watch::Receiver<bool>,
) {
    let mut buf = vec![0; 16 << 10];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buf) => read,
            _ = down.wait_for(|d| *d) => return,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
