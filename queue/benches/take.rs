//! The cost of a take: messages per second moved from the waiting structure into a worker's
//! processing list by `Consumer::take`, and Redis's own time per take call (`INFO
//! commandstats` of `EVALSHA` over the take phase alone), for a backlog of mixed priorities.
//! The backlog is enqueued first, so only takes run while the clock runs. Uses the Redis at
//! `AX_TEST_REDIS`, or starts a private one.
//!
//! The keyed rows give every message a concurrency key (one of 100 customers, `max` above what
//! a key ever holds here, so none waits): what the key's bookkeeping adds to a take. The ack
//! rows settle what was taken, `prefetch` at a time, which frees the keys' slots.
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

/// What one run measured.
struct Figures {
    taken_per_s: f64,
    take_calls: f64,
    take_us: f64,
    acked_per_s: f64,
    ack_us_per_msg: f64,
}

/// Enqueues `n` messages (priorities 0..=9 in turn, with a concurrency key when `keyed`),
/// takes them all `prefetch` at a time, then acks them as many at a time.
async fn run(url: &str, n: usize, prefetch: usize, keyed: bool) -> Figures {
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
            if keyed {
                s.concurrency = Some(ax_scheduler_core::Concurrency {
                    key: format!("customer-{}", i % 100),
                    max: 1_000_000,
                });
            }
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
    let mut held = Vec::with_capacity(n);
    while held.len() < n {
        let got = consumer.take(prefetch).await.unwrap();
        assert!(!got.is_empty(), "the backlog ran dry after {}", held.len());
        held.extend(got);
    }
    let elapsed = t0.elapsed();
    let (calls1, usec1) = evalsha_stats(&mut raw).await;
    let calls = calls1 - calls0;
    let t1 = Instant::now();
    for batch in held.chunks(prefetch) {
        q.ack_many(batch).await.unwrap();
    }
    let ack_elapsed = t1.elapsed();
    let (_, usec2) = evalsha_stats(&mut raw).await;
    Figures {
        taken_per_s: n as f64 / elapsed.as_secs_f64(),
        take_calls: calls,
        take_us: (usec1 - usec0) / calls.max(1.0),
        acked_per_s: n as f64 / ack_elapsed.as_secs_f64(),
        ack_us_per_msg: (usec2 - usec1) / n as f64,
    }
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
        "| Backlog | Prefetch | Concurrency key | Taken per second | Take calls | Redis µs per take call | Acked per second | Redis µs per ack (per message) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (n, prefetch) in [(20_000usize, 1usize), (100_000, 16)] {
        for keyed in [false, true] {
            let f = rt.block_on(run(&url, n, prefetch, keyed));
            println!(
                "| {n} | {prefetch} | {} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1} |",
                if keyed { "yes" } else { "no" },
                f.taken_per_s,
                f.take_calls,
                f.take_us,
                f.acked_per_s,
                f.ack_us_per_msg
            );
        }
    }
}
