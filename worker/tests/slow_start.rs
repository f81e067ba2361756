//! The pool's slow start against a real Redis: with its default settings a pool starts at
//! half its concurrency and opens the rest over the next seconds, so a backlog waiting at
//! its start does not reach the handlers' targets all at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_queue::ExecutionMessage;
use ax_worker::{HandlerRegistry, NoopReporter, WorkerConfig, WorkerPool};
use common::*;
use tokio_util::sync::CancellationToken;

/// Handlers `hold` that run 300 ms each and tell `seen` how many run at once as they start.
fn holding(seen: impl Fn(usize) + Send + Sync + 'static) -> HandlerRegistry {
    let running = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(seen);
    let mut registry = HandlerRegistry::with_builtins();
    registry.register_fn("hold", move |_ctx, _m: ExecutionMessage| {
        let (running, seen) = (running.clone(), seen.clone());
        async move {
            seen(running.fetch_add(1, Ordering::SeqCst) + 1);
            tokio::time::sleep(Duration::from_millis(300)).await;
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    });
    registry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_at_start_meets_half_the_concurrency_then_all_of_it() {
    let q = queue().await;
    // The most that ever ran at once, per second since the start.
    let peaks: Arc<std::sync::Mutex<Vec<usize>>> = Arc::default();
    let started = std::time::Instant::now();
    let registry = holding({
        let peaks = peaks.clone();
        move |now| {
            let second = usize::try_from(started.elapsed().as_secs()).unwrap();
            let mut p = peaks.lock().unwrap();
            if p.len() <= second {
                p.resize(second + 1, 0);
            }
            p[second] = p[second].max(now);
        }
    });
    // A backlog of 400 executions waits before the pool starts.
    let s = spec("backlog", "hold");
    let msgs: Vec<_> = (0..400).map(|i| msg(&s, i)).collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let cfg = WorkerConfig {
        concurrency: 20,
        ..fast_config("slow")
    };
    assert!(cfg.slow_start, "on by default");
    let pool = WorkerPool::new(q.clone(), cfg, registry, Arc::new(NoopReporter)).unwrap();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { pool.run(cancel).await }
    });
    tokio::time::sleep(Duration::from_secs(8)).await;
    cancel.cancel();
    run.await.unwrap();
    let peaks = peaks.lock().unwrap().clone();
    // Half at first (one step may already have opened two more), all of it once ramped.
    assert!(peaks[0] <= 12, "first second: {peaks:?}");
    assert!(peaks[0] >= 10, "first second: {peaks:?}");
    assert_eq!(peaks.iter().max().copied(), Some(20), "ramped: {peaks:?}");
    let ramped = peaks.iter().position(|p| *p == 20).unwrap();
    assert!(
        (4..=7).contains(&ramped),
        "full after {ramped} s: {peaks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_slow_start_the_pool_runs_at_full_concurrency_at_once() {
    let q = queue().await;
    let peak = Arc::new(AtomicUsize::new(0));
    let registry = holding({
        let peak = peak.clone();
        move |now| {
            peak.fetch_max(now, Ordering::SeqCst);
        }
    });
    let s = spec("backlog", "hold");
    let msgs: Vec<_> = (0..60).map(|i| msg(&s, i)).collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let cfg = WorkerConfig {
        concurrency: 20,
        slow_start: false,
        ..fast_config("full")
    };
    let pool = WorkerPool::new(q.clone(), cfg, registry, Arc::new(NoopReporter)).unwrap();
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { pool.run(cancel).await }
    });
    tokio::time::sleep(Duration::from_millis(900)).await;
    cancel.cancel();
    run.await.unwrap();
    assert_eq!(peak.load(Ordering::SeqCst), 20);
}
