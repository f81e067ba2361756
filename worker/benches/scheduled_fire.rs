//! Scheduled executions fired at a steady rate: N submitted while they fire (each batch of
//! 1000 due 2 s after it is sent, N/10 a second over 10 s), one worker pool with a no-op
//! handler (default settings but concurrency) promoting and running them, all in this
//! process on one private Redis. Reports executions a second, lateness (handler start minus
//! due) p50 / p99 / max, lost and doubled.
//!
//! Run: `cargo bench -p ax-worker --bench scheduled_fire` (100 000: 10 000 a second), or
//! `AX_BENCH_JOBS=N` for another size. Prints a Markdown row.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ax_queue::{new_execution_id, ExecutionMessage, Queue, QueueConfig, Submission};
use ax_scheduler_core::{ExecutionId, TaskOptions, UtcMillis};
use ax_worker::{HandlerRegistry, NoopReporter, WorkerConfig, WorkerPool};
use serde_json::json;
use tokio_util::sync::CancellationToken;

type Starts = Arc<Mutex<HashMap<ExecutionId, Vec<i64>>>>;

fn main() {
    let n: i64 = std::env::var("AX_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let concurrency: usize = std::env::var("AX_WORKER_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let redis = ax_testkit::RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let q = Queue::connect(
            &redis.url(),
            QueueConfig {
                prefix: "axschedfire".into(),
                ..QueueConfig::default()
            },
        )
        .await
        .unwrap();
        let starts: Starts = Arc::default();
        let mut reg = HandlerRegistry::new();
        let s = starts.clone();
        reg.register_fn("noop", move |_ctx, exec: ExecutionMessage| {
            let s = s.clone();
            async move {
                let at = UtcMillis::now().0 - exec.fire_at.0;
                s.lock().unwrap().entry(exec.execution_id).or_default().push(at);
                Ok(())
            }
        });
        let cfg = WorkerConfig {
            worker_id: "bench".into(),
            concurrency,
            ..WorkerConfig::default()
        };
        let pool = WorkerPool::new(q.clone(), cfg, reg, Arc::new(NoopReporter)).unwrap();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        let running = tokio::spawn(async move { pool.run(c).await });
        // N/10 a second for 10 s, each batch due 2 s after it is sent.
        let per_batch = 1000.min(n as usize);
        let batches = (n as usize).div_ceil(per_batch);
        let gap = Duration::from_secs_f64(10.0 / batches as f64);
        let t0 = Instant::now();
        for b in 0..batches {
            let sent_at = t0 + gap * b as u32;
            tokio::time::sleep_until(sent_at.into()).await;
            let base = UtcMillis::now().0 + 2_000;
            let now = UtcMillis::now();
            let msgs: Vec<_> = (0..per_batch)
                .map(|i| {
                    let due = base + (i as i64 * gap.as_millis() as i64) / per_batch as i64;
                    Submission {
                        namespace: "shop".into(),
                        name: "bench".into(),
                        handler: "noop".into(),
                        payload: json!({"i": i}),
                        queue: "default".into(),
                        due: UtcMillis(due),
                        options: TaskOptions::new(),
                        requested_by: None,
                    }
                    .message(new_execution_id(), now)
                })
                .collect();
            q.schedule_batch(&msgs).await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while starts.lock().unwrap().len() < n as usize && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let window = t0.elapsed().as_secs_f64() - 2.0;
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
        running.await.unwrap();
        let starts = starts.lock().unwrap();
        let doubled = starts.values().filter(|v| v.len() > 1).count();
        let lost = n as usize - starts.len();
        let mut late: Vec<i64> = starts.values().map(|v| v[0]).collect();
        late.sort();
        let p = |q: f64| late[((late.len() as f64 * q) as usize).min(late.len() - 1)];
        println!("| Jobs (rate) | Concurrency | Executed per second | Lateness p50 / p99 / max | Early | Lost | Twice |");
        println!("|---|---|---|---|---|---|---|");
        println!(
            "| {n} ({}/s) | {concurrency} | {:.0} | {} / {} / {} ms | {} | {lost} | {doubled} |",
            n / 10,
            starts.len() as f64 / window,
            p(0.5),
            p(0.99),
            late[late.len() - 1],
            late.iter().filter(|l| **l < 0).count(),
        );
    });
}
