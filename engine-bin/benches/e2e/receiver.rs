//! The `http` mode's target: a loopback HTTP server that records when each task's call
//! arrives (`POST /hook/{namespace}/{id}`), answering at once with an empty 200.
//!
//! It runs on the bench's own runtime, so its CPU is the bench's, not counted against ax.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use tokio_util::sync::CancellationToken;

type Arrivals = Arc<Mutex<Vec<(String, i64)>>>;

/// A running receiver; stops when dropped.
pub(crate) struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    arrivals: Arrivals,
    stop: CancellationToken,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        let arrivals: Arrivals = Arc::default();
        let app = Router::new()
            .route("/hook/{namespace}/{id}", post(arrive))
            .with_state(arrivals.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { s.cancelled().await })
                .await
                .unwrap();
        });
        Receiver {
            base,
            arrivals,
            stop,
        }
    }

    /// Calls received so far.
    pub(crate) fn count(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }

    /// Every call: `namespace/id` and its arrival in microseconds since the epoch.
    pub(crate) fn arrivals(&self) -> Vec<(String, i64)> {
        self.arrivals.lock().unwrap().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn arrive(State(arrivals): State<Arrivals>, Path((namespace, id)): Path<(String, String)>) {
    let at = chrono::Utc::now().timestamp_micros();
    arrivals
        .lock()
        .unwrap()
        .push((format!("{namespace}/{id}"), at));
}
