//! The accept loop of the HTTP port: each connection served by hyper's HTTP/1 server with a
//! deadline for the request headers.
//!
//! `axum::serve` has no setting for how long a client may take to send a request's headers,
//! so a client that opens connections and trickles bytes into them (slowloris) would hold
//! each one for ever. Here every connection gets hyper's `header_read_timeout` (from the
//! moment the server waits for a request head, idle keep-alive included), after which hyper
//! closes it. Shutdown works as `axum::serve`'s graceful one: the listener stops accepting,
//! each open connection finishes the request in flight and closes, and [`serve`] returns
//! once all have.

use std::io;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long to wait after an accept error that is not about one connection (out of file
/// descriptors, say) before accepting again, so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `shutdown` fires, then lets the open connections finish
/// their requests and returns.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept an HTTP connection");
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                    () = shutdown.cancelled() => break,
                }
            }
        };
        let service = TowerToHyperService::new(app.clone());
        let stop = shutdown.clone();
        connections.spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
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

/// Whether `e` concerns only the connection being accepted (which the loop skips).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
