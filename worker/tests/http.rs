//! The built-in `http` handler against a local HTTP server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_scheduler_core::task::HttpTarget;
use ax_worker::{Handler, HandlerContext, HandlerError, HttpHandler};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Answers each request with the status named by its path (`/200`, `/503`, `/hang`) and keeps
/// the raw requests.
async fn server(requests: Arc<Mutex<Vec<String>>>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let requests = requests.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut len = 0;
                // Read headers and the body (Content-Length).
                loop {
                    let n = sock.read(&mut buf[len..]).await.unwrap();
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
                        if len >= end + 4 + cl || n == 0 {
                            break;
                        }
                    }
                    if n == 0 {
                        break;
                    }
                }
                let text = String::from_utf8_lossy(&buf[..len]).to_string();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                requests.lock().unwrap().push(text);
                if path == "/hang" {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
                let code = path.trim_start_matches('/').parse::<u16>().unwrap_or(200);
                let resp =
                    format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    port
}

fn ctx() -> HandlerContext {
    HandlerContext {
        worker_id: "w".into(),
        cancel: CancellationToken::new(),
        http: reqwest::Client::new(),
    }
}

#[tokio::test]
async fn http_handler_posts_the_execution_and_classifies_answers() {
    let requests = Arc::new(Mutex::new(Vec::new()));
    let port = server(requests.clone()).await;
    let mut s = common::spec("h", "http");
    s.timeout = Duration::from_millis(500);
    let run = |path: &str| {
        let mut s = s.clone();
        s.http = Some(HttpTarget {
            url: format!("http://127.0.0.1:{port}{path}"),
            headers: [("x-ax-test".to_string(), "yes".to_string())].into(),
            follow_redirects: false,
        });
        common::msg(&s, 1)
    };
    let ok = run("/200");
    HttpHandler.run(ctx(), &ok).await.unwrap();
    let req = requests.lock().unwrap()[0].clone();
    assert!(req.starts_with("POST /200"), "{req}");
    assert!(req.to_ascii_lowercase().contains("x-ax-test: yes"));
    let lower = req.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("x-ax-execution-id: {}", ok.execution_id)),
        "a receiver can drop a repeat by the execution id: {req}"
    );
    assert!(lower.contains("x-ax-attempt: 0"), "{req}");
    assert!(
        req.contains(&ok.execution_id.to_string()),
        "the body is the execution"
    );
    assert!(matches!(
        HttpHandler.run(ctx(), &run("/503")).await,
        Err(HandlerError::Retryable(_))
    ));
    assert!(matches!(
        HttpHandler.run(ctx(), &run("/429")).await,
        Err(HandlerError::Retryable(_))
    ));
    assert!(matches!(
        HttpHandler.run(ctx(), &run("/404")).await,
        Err(HandlerError::Permanent(_))
    ));
    let t0 = std::time::Instant::now();
    assert!(matches!(
        HttpHandler.run(ctx(), &run("/hang")).await,
        Err(HandlerError::Retryable(_))
    ));
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "the task timeout bounds the request"
    );
    // Nothing listens on a fresh port: a network error, retryable.
    let mut dead = s.clone();
    dead.http = Some(HttpTarget {
        url: format!("http://127.0.0.1:{}/x", ax_testkit::free_port()),
        headers: Default::default(),
        follow_redirects: false,
    });
    assert!(matches!(
        HttpHandler.run(ctx(), &common::msg(&dead, 1)).await,
        Err(HandlerError::Retryable(_))
    ));
    let mut no_target = s.clone();
    no_target.http = None;
    let no_target = common::msg(&no_target, 1);
    assert!(matches!(
        HttpHandler.run(ctx(), &no_target).await,
        Err(HandlerError::Permanent(_))
    ));
}
