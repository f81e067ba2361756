//! A worker cut from Redis while it runs an execution: its link to Redis is cut silently
//! (no reset) through a loopback link the test owns, for longer than the visibility timeout.
//!
//! What must hold: the worker stops the handler (unsettled, reported) before the reaper
//! gives the message to another worker, so the two never run it at once; it is run once
//! more, by the other worker, and after the heal the cut worker takes work again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ax_queue::{ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::UtcMillis;
use ax_testkit::link::Link;
use ax_testkit::{redis_url, unique_name};
use ax_worker::{
    ExecutionReport, ExecutionReporter, HandlerRegistry, ReportFuture, WorkerConfig, WorkerPool,
};
use common::*;
use tokio_util::sync::CancellationToken;

/// What each worker's `slow` handler did: (worker, execution, started, stopped early).
type Runs = Arc<Mutex<Vec<(String, String, Instant, Option<Instant>)>>>;

/// Records when a `slow` handler's future ends before its 30 s: cancelled, or dropped.
struct StopMark(Runs, usize, bool);

impl Drop for StopMark {
    fn drop(&mut self) {
        if !self.2 {
            let mut runs = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            runs[self.1].3 = Some(Instant::now());
        }
    }
}

/// Counts the attempts a pool abandoned.
#[derive(Default)]
struct Abandons(AtomicUsize);

impl ExecutionReporter for Abandons {
    fn on_started<'a>(
        &'a self,
        _: &'a ExecutionMessage,
        _: &'a str,
        _: UtcMillis,
    ) -> ReportFuture<'a> {
        Box::pin(async {})
    }
    fn on_finished<'a>(&'a self, _: &'a ExecutionReport) -> ReportFuture<'a> {
        Box::pin(async {})
    }
    fn on_abandoned(&self, _: &ExecutionMessage, _: &str) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A pool whose `slow` handler runs 30 s unless cancelled, and whose `quick` handler
/// records and returns.
fn pool(q: &Queue, id: &str, runs: &Runs, reporter: Arc<Abandons>) -> WorkerPool {
    let mut r = HandlerRegistry::with_builtins();
    let (runs, me) = (runs.clone(), id.to_owned());
    r.register_fn("slow", move |ctx, exec: ExecutionMessage| {
        let (runs, me) = (runs.clone(), me.clone());
        async move {
            let i = {
                let mut runs = runs.lock().unwrap();
                runs.push((me, exec.execution_id.to_string(), Instant::now(), None));
                runs.len() - 1
            };
            let mut mark = StopMark(runs, i, false);
            tokio::select! {
                _ = ctx.cancel.cancelled() => {}
                _ = tokio::time::sleep(Duration::from_secs(30)) => mark.2 = true,
            }
            drop(mark);
            Ok(())
        }
    });
    let cfg = WorkerConfig {
        worker_id: id.to_owned(),
        concurrency: 2,
        shutdown_grace: Duration::from_secs(2),
        heartbeat_interval: Duration::from_millis(500),
        heartbeat_ttl: Duration::from_millis(1500),
        visibility_timeout: Duration::from_secs(6),
        block_timeout: Duration::from_millis(300),
        maintenance_interval: Duration::from_millis(100),
        reconcile_interval: Duration::from_millis(500),
        ..WorkerConfig::default()
    };
    WorkerPool::new(q.clone(), cfg, r, reporter).unwrap()
}

fn spawn(pool: WorkerPool) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let handle = tokio::spawn(async move {
        let _ = pool.run(c).await;
    });
    (cancel, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_cut_from_redis_stops_its_attempt_before_another_worker_runs_it() {
    let url = redis_url();
    let prefix = unique_name("axpart");
    let link = Link::to(url.trim_start_matches("redis://")).await;
    let config = QueueConfig {
        prefix: prefix.clone(),
        ..QueueConfig::default()
    };
    let direct = Queue::connect(&url, config.clone()).await.unwrap();
    let linked = Queue::connect(&format!("redis://127.0.0.1:{}", link.port), config)
        .await
        .unwrap();
    let runs: Runs = Arc::default();
    let cut_reports = Arc::new(Abandons::default());
    let (stop_a, a) = spawn(pool(&linked, "cut", &runs, cut_reports.clone()));

    let mut long = spec("long", "slow");
    long.timeout = Duration::from_secs(60);
    let slow = msg(&long, 1);
    direct.enqueue(&slow).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || runs.lock().unwrap().len() == 1).await,
        "the worker behind the link took it"
    );
    let (stop_b, b) = spawn(pool(&direct, "healthy", &runs, Arc::default()));

    let cut_at = Instant::now();
    link.cut();
    assert!(
        eventually(Duration::from_secs(20), || runs.lock().unwrap().len() == 2).await,
        "the healthy worker runs it after the visibility timeout"
    );
    let runs_now = runs.lock().unwrap().clone();
    let (first, second) = (&runs_now[0], &runs_now[1]);
    assert_eq!((first.0.as_str(), second.0.as_str()), ("cut", "healthy"));
    assert_eq!(first.1, second.1, "the same execution");
    let stopped = first.3.expect("the cut worker stopped its handler");
    assert!(
        stopped < second.2,
        "stopped {:?} after the cut, the other started it {:?} after: they overlapped",
        stopped - cut_at,
        second.2 - cut_at
    );
    assert_eq!(cut_reports.0.load(Ordering::SeqCst), 1, "reported once");
    eprintln!(
        "partition: the cut worker stopped its handler {:?} after the cut, the other started it {:?} after",
        stopped - cut_at,
        second.2 - cut_at
    );

    // Healed: nothing more of it runs (the cut worker's processing list is reconciled, its
    // message gone with the reaper), and the cut worker takes work again.
    link.heal();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        runs.lock()
            .unwrap()
            .iter()
            .filter(|r| r.1 == first.1)
            .count(),
        2,
        "run once by each, never at once"
    );
    // (Stopping the healthy worker gives its unfinished run back: it may run again.)
    stop_b.cancel();
    let _ = b.await;
    let after = msg(&spec("after", "slow"), 2);
    direct.enqueue(&after).await.unwrap();
    let id = after.execution_id.to_string();
    assert!(
        eventually(Duration::from_secs(10), || runs
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.0 == "cut" && r.1 == id))
        .await,
        "the healed worker took work again"
    );
    stop_a.cancel();
    let _ = a.await;
}
