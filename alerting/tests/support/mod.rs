//! A local HTTP receiver that records requests and answers from a script.

#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    requests: Mutex<Vec<Recorded>>,
    script: Mutex<VecDeque<(u16, String)>>,
    arrived: Notify,
}

/// The Feishu success answer, also fine for plain webhooks.
pub const FEISHU_OK: &str = r#"{"code":0,"msg":"success","data":{}}"#;

/// Script status meaning "answer only after 30 s" (for timeouts).
pub const HANG: u16 = 0;

/// Records every POST; answers from the script, then `200 FEISHU_OK`.
pub struct Receiver {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    server: JoinHandle<()>,
}

async fn record(
    State(inner): State<Arc<Inner>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    inner.requests.lock().unwrap().push(Recorded {
        path: uri.path().to_owned(),
        headers,
        body,
    });
    inner.arrived.notify_waiters();
    let (status, answer) = inner
        .script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or((200, FEISHU_OK.to_owned()));
    if status == HANG {
        tokio::time::sleep(Duration::from_secs(30)).await;
        return (StatusCode::OK, FEISHU_OK.to_owned()).into_response();
    }
    let status = StatusCode::from_u16(status).unwrap();
    if status.is_redirection() {
        // A redirect's script text is where it points.
        return (status, [(axum::http::header::LOCATION, answer)], "").into_response();
    }
    (status, answer).into_response()
}

impl Receiver {
    pub async fn start() -> Self {
        Self::with_script(Vec::new()).await
    }

    /// Answers the first requests with `script` (status, body; for a 3xx the Location),
    /// later ones with 200 FEISHU_OK.
    pub async fn with_script(script: Vec<(u16, &str)>) -> Self {
        let inner = Arc::new(Inner {
            script: Mutex::new(script.into_iter().map(|(s, b)| (s, b.to_owned())).collect()),
            ..Inner::default()
        });
        let app = Router::new()
            .route("/{*path}", post(record))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            addr,
            inner,
            server,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// Waits (real time) until at least `n` requests arrived; panics after `limit`.
    pub async fn wait_for(&self, n: usize, limit: Duration) -> Vec<Recorded> {
        let wait = async {
            loop {
                let notified = self.inner.arrived.notified();
                let seen = self.requests();
                if seen.len() >= n {
                    return seen;
                }
                notified.await;
            }
        };
        match tokio::time::timeout(limit, wait).await {
            Ok(seen) => seen,
            Err(_) => panic!(
                "expected {n} requests within {limit:?}, got {}",
                self.requests().len()
            ),
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A local port with nothing listening (bound, then released).
pub fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/dead")
}
