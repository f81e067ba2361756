//! A TCP link on loopback that a test can cut silently: packets stop both ways with no
//! reset, as a network partition drops them, and flow again when healed.
//!
//! Each connection to the link's port is paired with one to the target; two pumps copy
//! bytes while the link is up. Cut, the pumps stop reading: the client's requests sit in the
//! kernel's buffers and no answer comes, so the client sees silence (its timeouts), never a
//! closed connection. Healed, the held bytes go through and the pumps go on. A delay makes
//! it a slow link instead: each chunk waits that long before it is passed on.

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
    delay: watch::Sender<Duration>,
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
        let (delay, delays) = watch::channel(Duration::ZERO);
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
                tokio::spawn(pump(cr, sw, watched.clone(), delays.clone()));
                tokio::spawn(pump(sr, cw, watched.clone(), delays.clone()));
            }
        });
        Link {
            port,
            up,
            delay,
            accept,
        }
    }

    /// Stops every byte both ways, silently.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Lets bytes through again, those held first.
    pub fn heal(&self) {
        self.up.send_replace(true);
    }

    /// Makes every chunk wait `delay` each way (zero: a fast link again).
    pub fn slow(&self, delay: Duration) {
        self.delay.send_replace(delay);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to` while the link is up, each chunk the link's delay after it was
/// read (a latency: chunks read meanwhile are not held behind it); waits while it is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut up: watch::Receiver<bool>,
    delay: watch::Receiver<Duration>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let mut writer_up = up.clone();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            // Cut while this was on its way: hold it until healed.
            if writer_up.wait_for(|up| *up).await.is_err() {
                return;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if up.wait_for(|up| *up).await.is_err() {
            break;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let due = tokio::time::Instant::now() + *delay.borrow();
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An echo server on loopback; its address.
    async fn echo() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, within: Duration) -> Option<Duration> {
        let started = tokio::time::Instant::now();
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        tokio::time::timeout(within, s.read_exact(&mut buf))
            .await
            .ok()
            .map(|_| started.elapsed())
    }

    #[tokio::test]
    async fn a_cut_link_is_silent_a_slow_one_late_and_a_healed_one_passes_all() {
        let link = Link::to(&echo().await).await;
        let mut s = TcpStream::connect(("127.0.0.1", link.port)).await.unwrap();
        assert!(round_trip(&mut s, Duration::from_secs(1)).await.is_some());
        link.slow(Duration::from_millis(50));
        for _ in 0..5 {
            let rtt = round_trip(&mut s, Duration::from_secs(1)).await.unwrap();
            assert!(rtt >= Duration::from_millis(100), "{rtt:?}");
            assert!(rtt < Duration::from_millis(400), "{rtt:?}");
        }
        link.slow(Duration::ZERO);
        link.cut();
        assert_eq!(round_trip(&mut s, Duration::from_millis(300)).await, None);
        link.heal();
        let mut rest = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(1), s.read_exact(&mut rest))
            .await
            .unwrap()
            .unwrap();
        assert!(round_trip(&mut s, Duration::from_secs(1)).await.is_some());
    }
}
