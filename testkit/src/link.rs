//! A TCP link on loopback that a test can cut silently: packets stop both ways with no
//! reset, as a network partition drops them, and flow again when healed.
//!
//! Each connection to the link's port is paired with one to the target; two pumps copy
//! bytes while the link is up. Cut, the pumps stop reading: the client's requests sit in the
//! kernel's buffers and no answer comes, so the client sees silence (its timeouts), never a
//! closed connection. Healed, the held bytes go through and the pumps go on.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A cuttable link to one address.
pub struct Link {
    /// The port clients connect to instead of the target's.
    pub port: u16,
    up: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Link {
    /// A link to `target` (`host:port`), up.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound (a test machine without loopback).
    pub async fn to(target: &str) -> Link {
        #[allow(clippy::expect_used)]
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the link");
        #[allow(clippy::expect_used)]
        let port = listener
            .local_addr()
            .expect("the link's bound address")
            .port();
        let (up, watched) = watch::channel(true);
        let target = target.to_owned();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(Ok(server)) =
                    tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&target)).await
                else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, watched.clone()));
                tokio::spawn(pump(sr, cw, watched.clone()));
            }
        });
        Link { port, up, accept }
    }

    /// Stops every byte both ways, silently.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Lets bytes through again, those held first.
    pub fn heal(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to` while the link is up; waits while it is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut up: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if up.wait_for(|up| *up).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Cut while this was read: hold it until healed.
        if up.wait_for(|up| *up).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
