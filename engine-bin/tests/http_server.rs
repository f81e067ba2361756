//! The HTTP port's accept loop on a real socket: a client that sends its request headers too
//! slowly is cut off at `http.header_read_timeout`, one that sends its body too slowly at
//! `http.request_timeout`, one peer holds at most `http.max_connections_per_peer`, and
//! shutdown lets the server return.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ax::http::server::{serve, ConnectionLimits};
use axum::routing::{get, post};
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(1);

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: DEADLINE,
        request_timeout: DEADLINE * 2,
        write_timeout: DEADLINE,
        max_connections: 64,
        max_connections_per_peer: 8,
    }
}

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
    let server = tokio::spawn(serve(listener, app, limits(), stop.clone()));

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

#[tokio::test]
async fn a_slow_body_ends_at_the_request_deadline_and_one_peer_cannot_take_every_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/echo", post(|body: String| async move { body }));
    let server = tokio::spawn(serve(listener, app, limits(), stop.clone()));

    // A head that promises 100 000 bytes, then a byte every 100 ms: answered 408 and closed
    // at the request deadline, however long the body would take.
    let mut slow =
        b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\n\r\n".to_vec();
    slow.extend(std::iter::repeat_n(b'x', 100));
    let start = Instant::now();
    let closed = trickle_whole_head(addr, &slow).await;
    let request_deadline = limits().request_timeout;
    assert!(
        closed >= request_deadline - Duration::from_millis(200) && closed < request_deadline * 2,
        "closed after {closed:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));

    // Eight connections of one address are held; the ninth is closed at once, and another
    // request goes through once one of the eight is gone.
    let mut held = Vec::new();
    for _ in 0..limits().max_connections_per_peer {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut ninth = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_millis(500), ninth.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the ninth was not closed: {read:?}"
    );
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    drop(held);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server did not stop")
        .unwrap()
        .unwrap();
}

/// Sends the head of `bytes` (through the blank line) at once, then the rest a byte every
/// 100 ms; how long until the server answered `408` and closed.
async fn trickle_whole_head(addr: std::net::SocketAddr, bytes: &[u8]) -> Duration {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    s.write_all(&bytes[..head_end]).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    let mut pending = bytes[head_end..].iter();
    while start.elapsed() < Duration::from_secs(10) {
        if let Some(b) = pending.next() {
            let _ = s.write_all(&[*b]).await;
        }
        match tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    start.elapsed()
}
