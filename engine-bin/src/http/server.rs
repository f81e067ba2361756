//! The accept loop of the HTTP port: each connection served by hyper's HTTP/1 server, with
//! a bound on every way a client can hold the replica.
//!
//! `axum::serve` has no setting for how long a client may take, so a client that opens
//! connections and trickles bytes into them (slowloris) would hold each one for ever. Here:
//! - the request head must arrive within `header_read_timeout` (hyper's, from the moment
//!   the server waits for a head, idle keep-alive included);
//! - the whole request, body read and answer included, within `request_timeout` (a layer
//!   around the router answers `408`), so a body sent a byte every few seconds ends there;
//! - each write within `write_timeout` (the stream's writes time out: a client that stops
//!   reading its answer loses the connection);
//! - at most `max_connections` open at once, and `max_connections_per_peer` from one peer
//!   address: one more is closed as it is accepted, so a flood of slow connections from one
//!   address cannot take the rest.
//!
//! Shutdown works as `axum::serve`'s graceful one: the listener stops accepting, each open
//! connection finishes the request in flight and closes, and [`serve`] returns once all
//! have.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_io_timeout::TimeoutStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use ax_control::api::{ApiError, LimitKind};

/// How long to wait after an accept error that is not about one connection (out of file
/// descriptors, say) before accepting again, so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The bounds on what connections may hold (`[http]` of the configuration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Time to send a request's head.
    pub header_read_timeout: Duration,
    /// Time from a request's head to its answer, body included.
    pub request_timeout: Duration,
    /// Time one write may wait for the client to read.
    pub write_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one peer address.
    pub max_connections_per_peer: usize,
}

impl From<&crate::config::Http> for ConnectionLimits {
    fn from(http: &crate::config::Http) -> Self {
        ConnectionLimits {
            header_read_timeout: http.header_read_timeout,
            request_timeout: http.request_timeout,
            write_timeout: http.write_timeout,
            max_connections: http.max_connections,
            max_connections_per_peer: http.max_connections_per_peer,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` fires, then lets the open connections finish
/// their requests and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let app = with_request_deadline(app, limits.request_timeout);
    let connections = TaskTracker::new();
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let peers = Peers::default();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept an HTTP connection");
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                    () = shutdown.cancelled() => break,
                }
            }
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            tracing::debug!(%peer, max = limits.max_connections, "HTTP connections at their limit; closed");
            continue;
        };
        let Some(slot) = peers.take(peer.ip(), limits.max_connections_per_peer) else {
            tracing::debug!(%peer, max = limits.max_connections_per_peer, "HTTP connections of one peer at their limit; closed");
            continue;
        };
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(Some(limits.write_timeout));
        let service = TowerToHyperService::new(app.clone());
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _held = (permit, slot);
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let conn = builder.serve_connection(TokioIo::new(Box::pin(stream)), service);
            tokio::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                // A client that hangs up or is too slow is its own business, not an error of
                // the replica.
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// `app` with every request bounded by `limit`, from its head to its answer (the body is
/// read inside the route, so a slow body counts).
fn with_request_deadline(app: Router, limit: Duration) -> Router {
    app.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| deadline(req, next, limit),
    ))
}

async fn deadline(req: Request, next: Next, limit: Duration) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!(
                "the request took longer than {} from its head to its answer \
                 (http.request_timeout); send the body at once",
                humantime::format_duration(limit)
            );
            let mut response = ApiError::Limit {
                kind: LimitKind::Time,
                message,
                retry_after_s: None,
            }
            .into_response();
            response.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            response
        }
    }
}

/// Open connections per peer address.
#[derive(Clone, Default)]
struct Peers(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection of a peer, given back when dropped.
struct PeerSlot {
    peers: Peers,
    ip: IpAddr,
}

impl Peers {
    /// A slot for one more connection of `ip`, if it has fewer than `max`.
    fn take(&self, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut open = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Whether `e` concerns only the connection being accepted (which the loop skips).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_holds_at_most_its_share_and_gets_it_back() {
        let peers = Peers::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = peers.take(a, 2).unwrap();
        let _second = peers.take(a, 2).unwrap();
        assert!(peers.take(a, 2).is_none(), "a third from the same address");
        assert!(
            peers.take(b, 2).is_some(),
            "another address is not held back"
        );
        drop(first);
        assert!(
            peers.take(a, 2).is_some(),
            "a slot comes back when its connection ends"
        );
    }
}
