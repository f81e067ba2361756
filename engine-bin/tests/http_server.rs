//! The HTTP port's accept loop on a real socket: a client that sends its request headers too
//! slowly is cut off at `http.header_read_timeout`, and shutdown lets the server return.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ax::http::server::serve;
use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(1);

/// Sends `bytes` one at a time every 100 ms, then nothing, and reads meanwhile; how long
/// until the server closed the connection (`None`: still open after 5 s).
async fn trickle(addr: std::net::SocketAddr, bytes: &[u8]) -> Option<Duration> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    let mut pending = bytes.iter();
    while start.elapsed() < Duration::from_secs(5) {
        if let Some(b) = pending.next() {
            if s.write_all(&[*b]).await.is_err() {
                return Some(start.elapsed());
            }
        }
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            // An error answer (408) before the close is fine; keep reading until it closes.
            Ok(Ok(_)) | Err(_) => {}
        }
    }
    None
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off_at_the_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let app = Router::new().route("/healthz", get(|| async { "ok" }));
    let server = tokio::spawn(serve(listener, app, DEADLINE, stop.clone()));

    // A whole request is answered as ever.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Headers that never end, a byte every 100 ms: closed at the deadline, not later.
    let slow = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    // A connection that sends nothing at all.
    for bytes in [&slow[..], b""] {
        let closed = trickle(addr, bytes)
            .await
            .expect("the server kept the connection");
        assert!(
            closed >= DEADLINE - Duration::from_millis(100) && closed < DEADLINE * 3,
            "closed after {closed:?}"
        );
    }

    // Shutdown: the server stops accepting and returns.
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server did not stop")
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err());
}
