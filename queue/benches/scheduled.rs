//! Scheduled executions at Redis scale: Redis memory per pending execution, submissions a
//! second from one client (batches of 1000, four in flight) with each batch's latency,
//! cancels' latency with the set full, and promotions a second, on a private Redis (its
//! `used_memory` is the set's alone). The payload is `{"order": N}`; "beyond the payload"
//! subtracts its JSON length.
//!
//! Run: `cargo bench -p ax-queue --bench scheduled` (1 000 000 pending), or
//! `AX_BENCH_SCHEDULED=10000000 cargo bench ...` for another size. Prints a Markdown row.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use ax_queue::{new_execution_id, Queue, QueueConfig, ScheduleOutcome, ScheduledRef, Submission};
use ax_scheduler_core::{TaskOptions, UtcMillis};
use futures::stream::{self, StreamExt};
use serde_json::json;

async fn used_memory(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 * p) as usize).min(v.len() - 1)]
}

fn submission(i: usize, due: UtcMillis) -> Submission {
    Submission {
        namespace: "shop".into(),
        name: "close-unpaid-order".into(),
        handler: "orders.close".into(),
        payload: json!({"order": i}),
        queue: "orders".into(),
        due,
        options: TaskOptions::new(),
        requested_by: Some("shop-api".into()),
    }
}

fn main() {
    let n: usize = std::env::var("AX_BENCH_SCHEDULED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let redis = ax_testkit::RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let q = Queue::connect(
            &redis.url(),
            QueueConfig {
                prefix: "axschedbench".into(),
                ..QueueConfig::default()
            },
        )
        .await
        .unwrap();
        let mut raw = redis::Client::open(redis.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let before = used_memory(&mut raw).await;
        // Due over a day from an hour ahead: nothing is promoted while submitting.
        let start = UtcMillis::now().0 + 3_600_000;
        let now = UtcMillis::now();
        // Made batch by batch as they are sent: 10 M messages at once would not fit.
        let batches = (0..n).step_by(1000).map(move |first| {
            (first..(first + 1000).min(n))
                .map(|i| {
                    let due = UtcMillis(start + (i as i64 * 86_400_000 / n as i64));
                    submission(i, due).message(new_execution_id(), now)
                })
                .collect::<Vec<_>>()
        });
        let payload_bytes: usize = (0..n).map(|i| json!({"order": i}).to_string().len()).sum();
        let t0 = Instant::now();
        let results: Vec<(Duration, Vec<ScheduledRef>)> = stream::iter(batches)
            .map(|batch| {
                let q = q.clone();
                async move {
                    let t = Instant::now();
                    let out = q.schedule_batch(&batch).await.unwrap();
                    let refs = out
                        .into_iter()
                        .map(|o| match o {
                            ScheduleOutcome::Added(r) => r,
                            other => panic!("{other:?}"),
                        })
                        .collect();
                    (t.elapsed(), refs)
                }
            })
            .buffer_unordered(4)
            .collect()
            .await;
        let submit_s = t0.elapsed().as_secs_f64();
        let mut batch_lat: Vec<Duration> = results.iter().map(|(d, _)| *d).collect();
        let refs: Vec<ScheduledRef> = results.into_iter().flat_map(|(_, r)| r).collect();
        let after = used_memory(&mut raw).await;
        let per_job = (after - before) as f64 / n as f64;
        let payload_avg = payload_bytes as f64 / n as f64;
        assert_eq!(q.scheduled_count("orders").await.unwrap(), n as u64);

        // Cancels, one at a time, spread over the set (the refs are kept for them).
        let mut cancel_lat = Vec::new();
        for r in refs.iter().step_by((n / 10_000).max(1)) {
            let t = Instant::now();
            assert!(q.cancel_scheduled(r).await.unwrap().is_some());
            cancel_lat.push(t.elapsed());
        }
        // Promotion of the first 100 000 due (as if their hour had come), batch by batch.
        let cut = UtcMillis(start + (100_000.min(n) as i64 * 86_400_000 / n as i64));
        let t1 = Instant::now();
        let mut promoted = 0;
        loop {
            let (moved, _) = q.promote_scheduled("orders", cut, 500).await.unwrap();
            promoted += moved;
            if moved < 500 {
                break;
            }
        }
        let promote_s = t1.elapsed().as_secs_f64();
        println!(
            "| Pending | Redis bytes per pending (beyond the payload) | Submitted per second | Batch of 1000 p50 / p99 | Cancel p50 / p99 | Promoted per second |"
        );
        println!("|---|---|---|---|---|---|");
        let p = |v: &mut Vec<Duration>, q: f64| percentile(v, q).as_secs_f64() * 1000.0;
        println!(
            "| {n} | {per_job:.0} ({:.0}) | {:.0} | {:.2} / {:.2} ms | {:.3} / {:.3} ms | {:.0} |",
            per_job - payload_avg,
            n as f64 / submit_s,
            p(&mut batch_lat, 0.5),
            p(&mut batch_lat, 0.99),
            p(&mut cancel_lat, 0.5),
            p(&mut cancel_lat, 0.99),
            promoted as f64 / promote_s,
        );
    });
}
