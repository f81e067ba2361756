//! Shared helpers of the worker tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_queue::{ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::TaskSpec;
use ax_worker::WorkerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub fn spec(id: &str, handler: &str) -> TaskSpec {
    let mut s = ax_testkit::spec(id, "default", handler);
    s.timeout = Duration::from_secs(5);
    std::sync::Arc::make_mut(&mut s.retry).max_retries = 0;
    s
}

pub async fn queue_at(url: &str, prefix: &str) -> Queue {
    let cfg = QueueConfig {
        prefix: prefix.to_string(),
        ..QueueConfig::default()
    };
    Queue::connect(url, cfg).await.unwrap()
}

pub async fn queue() -> Queue {
    queue_at(&ax_testkit::redis_url(), &ax_testkit::unique_name("axw")).await
}

pub fn fast_config(worker_id: &str) -> WorkerConfig {
    WorkerConfig {
        worker_id: worker_id.to_string(),
        concurrency: 4,
        shutdown_grace: Duration::from_secs(5),
        heartbeat_interval: Duration::from_millis(200),
        heartbeat_ttl: Duration::from_millis(600),
        visibility_timeout: Duration::from_secs(1),
        block_timeout: Duration::from_millis(300),
        maintenance_interval: Duration::from_millis(50),
        reconcile_interval: Duration::from_millis(200),
        ..WorkerConfig::default()
    }
}

pub fn msg(spec: &TaskSpec, fire: i64) -> ExecutionMessage {
    ExecutionMessage::for_fire(
        spec,
        ax_scheduler_core::UtcMillis(fire),
        ax_scheduler_core::UtcMillis::now(),
        1,
    )
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, mut cond: F) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

/// A loopback HTTP server that keeps the raw requests and answers by path:
/// `/<code>` with that status (`/hang` never), `/to/<code>/<host>/<port>/<rest>` with a
/// redirect to `http://<host>:<port>/<rest>`, `/to/<code>/self/<rest>` with one to `/<rest>`,
/// `/loop` with one to itself.
pub struct Receiver {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    pub async fn on(ip: &str) -> Receiver {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let text = read_request(&mut sock).await;
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                    seen.lock().unwrap().push(text);
                    let resp = answer(&path).await;
                    let _ = sock.write_all(resp.as_bytes()).await;
                });
            }
        });
        Receiver { port, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads the head and the body (by Content-Length).
async fn read_request(sock: &mut tokio::net::TcpStream) -> String {
    let mut buf = vec![0u8; 65536];
    let mut len = 0;
    loop {
        let n = sock.read(&mut buf[len..]).await.unwrap_or(0);
        len += n;
        let text = String::from_utf8_lossy(&buf[..len]).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let cl = text
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if len >= end + 4 + cl {
                break;
            }
        }
        if n == 0 {
            break;
        }
    }
    String::from_utf8_lossy(&buf[..len]).to_string()
}

async fn answer(path: &str) -> String {
    let reply = |code: u16, location: Option<String>| {
        let location = location.map_or(String::new(), |l| format!("location: {l}\r\n"));
        format!("HTTP/1.1 {code} X\r\n{location}content-length: 0\r\nconnection: close\r\n\r\n")
    };
    if path == "/hang" {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    if path == "/loop" {
        return reply(302, Some("/loop".into()));
    }
    if let Some(rest) = path.strip_prefix("/to/") {
        let mut parts = rest.splitn(3, '/');
        let code = parts.next().unwrap().parse().unwrap();
        let location = match parts.next().unwrap() {
            "self" => format!("/{}", parts.next().unwrap_or("")),
            host => {
                let mut rest = parts.next().unwrap().splitn(2, '/');
                let port = rest.next().unwrap();
                format!("http://{host}:{port}/{}", rest.next().unwrap_or(""))
            }
        };
        return reply(code, Some(location));
    }
    reply(path.trim_start_matches('/').parse().unwrap_or(200), None)
}

/// A pool running on its own task, stopped with [`Running::stop`].
pub struct Running {
    pub cancel: tokio_util::sync::CancellationToken,
    pub handle: tokio::task::JoinHandle<ax_worker::PoolSummary>,
}

impl Running {
    /// Cancels the pool and waits (20 s at most) for its summary.
    pub async fn stop(self) -> ax_worker::PoolSummary {
        self.cancel.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.handle)
            .await
            .expect("pool stops")
            .unwrap()
    }
}

/// Runs a handler directly on the cluster's parts of an attempt, as the pool would.
#[allow(dead_code)]
pub trait RunWith {
    fn run_with(
        &self,
        ctx: ax_worker::HandlerContext,
        exec: &ExecutionMessage,
    ) -> ax_worker::HandlerFuture<'_>;
}

impl<H: ax_worker::Handler> RunWith for H {
    fn run_with(
        &self,
        ctx: ax_worker::HandlerContext,
        exec: &ExecutionMessage,
    ) -> ax_worker::HandlerFuture<'_> {
        let started = ax_scheduler_core::UtcMillis::now();
        self.run(ax_worker::ClusterAttempt::context(
            ctx,
            exec.clone(),
            started,
        ))
    }
}
