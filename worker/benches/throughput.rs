//! Messages per second through enqueue -> worker (no-op handler) -> ack, at concurrency 1 and
//! 50, beside `redis-benchmark` LPUSH and RPOP on the same server in the same run (the
//! ceiling of this path). Uses the Redis at `AX_TEST_REDIS`, or starts a private one.
//!
//! Run: `cargo bench -p ax-worker --bench throughput` (prints a Markdown table).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_queue::{ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::{TaskSpec, UtcMillis};
use ax_worker::{HandlerRegistry, NoopReporter, WorkerConfig, WorkerPool};
use tokio_util::sync::CancellationToken;

fn spec() -> TaskSpec {
    let mut s = ax_testkit::spec("bench", "default", "noop");
    s.timeout = Duration::from_secs(30);
    s
}

/// Enqueues `n` messages (pipelined batches) while a pool with `concurrency` runs them;
/// returns messages per second from the first enqueue to the last ack.
async fn run_path(url: &str, concurrency: usize, n: u64, history: bool) -> f64 {
    let prefix = format!(
        "axbench-{}-{concurrency}-{}",
        std::process::id(),
        ax_scheduler_core::UtcMillis::now().0
    );
    let q = Queue::connect(
        url,
        QueueConfig {
            prefix,
            ..QueueConfig::default()
        },
    )
    .await
    .unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let notify = Arc::new(tokio::sync::Notify::new());
    let mut reg = HandlerRegistry::new();
    let (d, nt) = (done.clone(), notify.clone());
    reg.register_fn("noop", move |_ctx, _exec| {
        let (d, nt) = (d.clone(), nt.clone());
        async move {
            if d.fetch_add(1, Ordering::Relaxed) + 1 == n {
                nt.notify_one();
            }
            Ok(())
        }
    });
    let cfg = WorkerConfig {
        worker_id: format!("bench-{concurrency}"),
        concurrency,
        record_history: history,
        ..WorkerConfig::default()
    };
    let pool = WorkerPool::new(q.clone(), cfg, reg, Arc::new(NoopReporter)).unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let running = tokio::spawn(async move { pool.run(c).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = spec();
    let now = ax_scheduler_core::UtcMillis::now();
    let msgs: Vec<_> = (0..n as i64)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 1))
        .collect();
    let t0 = Instant::now();
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            for chunk in msgs.chunks(500) {
                q.enqueue_batch(chunk).await.unwrap();
            }
        })
    };
    notify.notified().await;
    let elapsed = t0.elapsed();
    producer.await.unwrap();
    cancel.cancel();
    let summary = running.await.unwrap();
    assert_eq!(summary.succeeded, n);
    let stats = q
        .stats("default", ax_scheduler_core::UtcMillis::now())
        .await
        .unwrap();
    assert_eq!(stats.unsettled, 0);
    n as f64 / elapsed.as_secs_f64()
}

fn redis_benchmark(port: &str) -> BTreeMap<String, f64> {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-t",
            "lpush,rpop",
            "-n",
            "100000",
            "-q",
        ])
        .output()
        .expect("redis-benchmark is installed (redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    let mut rates = BTreeMap::new();
    for line in text.lines() {
        if let Some((name, rest)) = line.split_once(':') {
            if let Some(rate) = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
            {
                if rest.contains("requests per second") {
                    rates.insert(name.trim().to_string(), rate);
                }
            }
        }
    }
    rates
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
    let port = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let ceiling = redis_benchmark(&port);
    let mut rows = Vec::new();
    for (concurrency, n, history) in [
        (1usize, 5_000u64, false),
        (50, 50_000, false),
        (50, 50_000, true),
    ] {
        let rate = rt.block_on(run_path(&url, concurrency, n, history));
        rows.push((concurrency, n, history, rate));
    }
    let lpush = ceiling.get("LPUSH").copied().unwrap_or(f64::NAN);
    let rpop = ceiling.get("RPOP").copied().unwrap_or(f64::NAN);
    let cap = lpush.min(rpop);
    println!("| Path | Messages | Rate (msg/s) | Share of ceiling |");
    println!("|---|---|---|---|");
    println!("| redis-benchmark LPUSH (50 clients, -n 100000) | 100000 | {lpush:.0} | |");
    println!("| redis-benchmark RPOP (50 clients, -n 100000) | 100000 | {rpop:.0} | |");
    for (c, n, history, rate) in rows {
        println!(
            "| enqueue -> worker -> ack, concurrency {c}{} | {n} | {rate:.0} | {:.0}% |",
            if history { ", history recorded" } else { "" },
            100.0 * rate / cap
        );
    }
    println!("\n({cores} cores, Redis at {url})");
}
