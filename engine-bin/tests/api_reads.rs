//! Reads of `/api/v1` at a registry of many tasks, over the real backend (etcd and Redis).
//!
//! The status (like the dead letters of every queue, and a kill or requeue by execution id)
//! needs the names of every queue the tasks use, which only a read of every spec gives. That
//! read is O(tasks); the test measures that only the first call pays it, however often the
//! console polls. `AX_TEST_READ_TASKS` sets the registry's size (default 20 000); the test
//! prints one `reads:` line with the cold call and the polled calls' p50 / p99 / max.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_harness;

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use etcd_client::{Client, DeleteOptions, Txn, TxnOp};
use serde_json::{json, Value};

use api_harness::api_with;

/// How many queues the registered tasks spread over.
const QUEUES: usize = 50;

/// How long the test polls at least, and how often: long enough to see the set go stale three
/// times at a 20 000-task read (kept for its 5 s minimum; a larger registry polls until the
/// queue added meanwhile must show), and more often than the console does
/// (every 5 s per open tab) but less often than a read takes at that size, so that a polled
/// call does not share the machine with the refresh behind the one before.
const POLL_FOR: Duration = Duration::from_secs(16);
const POLL_EVERY: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread")]
async fn at_many_tasks_only_the_first_status_waits_for_the_queue_names() {
    let n: usize = std::env::var("AX_TEST_READ_TASKS")
        .ok()
        .map_or(20_000, |v| {
            v.parse().expect("AX_TEST_READ_TASKS is a count")
        });
    let a = api_with("api-reads", |_| {}).await;
    let mut etcd = Client::connect([a.config.etcd.endpoints[0].as_str()], None)
        .await
        .unwrap();
    let prefix = a.config.etcd.prefix.clone();
    register(&mut etcd, &prefix, 0..n, |i| format!("q{}", i % QUEUES)).await;

    let asked = Instant::now();
    let body = status(&a).await;
    let cold = asked.elapsed();
    assert_eq!(
        queue_names(&body).len(),
        QUEUES + 1,
        "every queue and default"
    );

    // Another writer (a put straight into etcd, not through this backend) adds a queue.
    register(&mut etcd, &prefix, n..n + 1, |_| "late".to_owned()).await;
    let mut took = Vec::new();
    let mut late_seen = None;
    let start = Instant::now();
    let poll_for = POLL_FOR.max(cold * 12 + Duration::from_secs(6));
    while start.elapsed() < poll_for {
        let asked = Instant::now();
        let body = status(&a).await;
        took.push(asked.elapsed());
        if late_seen.is_none() && queue_names(&body).iter().any(|q| q == "late") {
            late_seen = Some(start.elapsed());
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    took.sort_unstable();
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
    println!(
        "reads: {n} tasks: cold status {} ms; {} polled: p50 {} ms, p99 {} ms, max {} ms; a \
         queue put elsewhere shown after {late_seen:?}",
        cold.as_millis(),
        took.len(),
        at(0.5).as_millis(),
        at(0.99).as_millis(),
        at(1.0).as_millis(),
    );
    // Before the set was refreshed behind the answers, the call that found it stale read
    // every spec itself: one such call every 5 s, each about as slow as the cold one. (At a
    // small registry the read is not what a call costs, so the bound is the calls' own p50.)
    let bound = (cold / 2).max(at(0.5) * 3);
    let slow = took.iter().filter(|t| **t >= bound).count();
    assert!(
        slow <= 1,
        "{slow} polled calls took {bound:?} or more (the cold call {cold:?}): {took:?}"
    );
    let late_seen = late_seen.expect("a queue another writer added never showed");
    assert!(
        late_seen <= Duration::from_secs(5) + cold * 12,
        "the new queue showed only after {late_seen:?}"
    );
    etcd.delete(prefix.as_str(), Some(DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
}

/// Writes tasks `ids` under `prefix`, 128 to a transaction, each on the queue `queue(i)`.
async fn register(
    etcd: &mut Client,
    prefix: &str,
    ids: std::ops::Range<usize>,
    queue: impl Fn(usize) -> String,
) {
    let ids: Vec<usize> = ids.collect();
    for chunk in ids.chunks(128) {
        let ops: Vec<TxnOp> = chunk
            .iter()
            .map(|i| {
                let spec = json!({
                    "handler": "log", "schedule": { "every": "1h" }, "queue": queue(*i),
                });
                TxnOp::put(format!("{prefix}/tasks/reads/t{i}"), spec.to_string(), None)
            })
            .collect();
        let resp = etcd.txn(Txn::new().and_then(ops)).await.unwrap();
        assert!(resp.succeeded());
    }
}

async fn status(a: &api_harness::Api) -> Value {
    let resp = a.send(Method::GET, "/api/v1/status", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 22)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn queue_names(status: &Value) -> Vec<String> {
    status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap().to_owned())
        .collect()
}
