//! The cost of a take: messages per second moved from the waiting structure into a worker's
//! processing list by `Consumer::take`, and Redis's own time per take call (`INFO
//! commandstats` of `EVALSHA` over the take phase alone), for a backlog of mixed priorities.
//! The backlog is enqueued first, so only takes run while the clock runs. Uses the Redis at
//! `AX_TEST_REDIS`, or starts a private one.
//!
//! Run: `cargo bench -p ax-queue --bench take` (prints a Markdown table).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use ax_queue::{ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::UtcMillis;

/// `EVALSHA` calls and microseconds Redis spent in them, from `INFO commandstats`.
async fn evalsha_stats(conn: &mut redis::aio::MultiplexedConnection) -> (f64, f64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    for line in info.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_evalsha:") {
            let field = |name: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(name))
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            return (field("calls="), field("usec="));
        }
    }
    (0.0, 0.0)
}

/// Enqueues `n` messages (priorities 0..=9 in turn), then takes them all `prefetch` at a
/// time; returns (messages per second, take calls, Redis µs per take call).
async fn run(url: &str, n: usize, prefetch: usize) -> (f64, f64, f64) {
    let prefix = format!("axtakebench-{}-{}", std::process::id(), UtcMillis::now().0);
    let q = Queue::connect(
        url,
        QueueConfig {
            prefix,
            ..QueueConfig::default()
        },
    )
    .await
    .unwrap();
    let now = UtcMillis::now();
    let msgs: Vec<_> = (0..n)
        .map(|i| {
            let mut s = ax_testkit::spec(&format!("t{}", i % 100), "default", "noop");
            s.priority = (i % 10) as u8;
            ExecutionMessage::for_fire(&s, UtcMillis(i as i64), now, 1)
        })
        .collect();
    for chunk in msgs.chunks(500) {
        q.enqueue_batch(chunk).await.unwrap();
    }
    let mut consumer = q
        .consumer("default", "bench", Duration::from_millis(100), now)
        .await
        .unwrap();
    let mut raw = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let (calls0, usec0) = evalsha_stats(&mut raw).await;
    let t0 = Instant::now();
    let mut taken = 0;
    while taken < n {
        let got = consumer.take(prefetch).await.unwrap();
        assert!(!got.is_empty(), "the backlog ran dry after {taken}");
        taken += got.len();
    }
    let elapsed = t0.elapsed();
    let (calls1, usec1) = evalsha_stats(&mut raw).await;
    let calls = calls1 - calls0;
    (
        n as f64 / elapsed.as_secs_f64(),
        calls,
        (usec1 - usec0) / calls.max(1.0),
    )
}

fn main() {
    let private;
    let url = match std::env::var("AX_TEST_REDIS") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            private = ax_testkit::RedisServer::start();
            private.url()
        }
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    println!(
        "| Backlog | Prefetch | Messages taken per second | Take calls | Redis µs per take call |"
    );
    println!("|---|---|---|---|---|");
    for (n, prefetch) in [(20_000usize, 1usize), (100_000, 16)] {
        let (rate, calls, usec) = rt.block_on(run(&url, n, prefetch));
        println!("| {n} | {prefetch} | {rate:.0} | {calls:.0} | {usec:.1} |");
    }
}
