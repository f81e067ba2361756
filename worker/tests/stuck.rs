//! Handlers that never return and ignore their cancel token, against a real Redis: each
//! attempt must end `timed_out` at its timeout (plus the stop grace and the abort's wait),
//! and its slot must come back, so the pool keeps its concurrency. Both were handled
//! already: `run_handler` times the handler's task out, cancels its token and aborts it
//! after its stop grace (zero for a handler registered as a function), waiting at most 1 s
//! for the abort, and the attempt's slot is its, not the handler task's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_queue::Queue;
use ax_scheduler_core::AttemptOutcome;
use ax_worker::{ChannelReporter, ExecutionReport, HandlerRegistry, ReportEvent, WorkerPool};
use common::*;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

/// Slots of the pools here.
const N: usize = 3;

/// The stuck attempts' timeout.
const TIMEOUT: Duration = Duration::from_millis(300);

/// How many `together` executions run at once, and the most seen at once.
#[derive(Default)]
struct Together {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// A registry whose `together` handler waits (up to 5 s) until `N` of its executions run at
/// once, so they end only if the pool gives each a slot at the same time.
fn registry(together: &Arc<Together>) -> HandlerRegistry {
    let mut r = HandlerRegistry::new();
    let t = Arc::clone(together);
    r.register_fn("together", move |_ctx, _exec| {
        let t = Arc::clone(&t);
        async move {
            let running = t.now.fetch_add(1, Ordering::SeqCst) + 1;
            t.most.fetch_max(running, Ordering::SeqCst);
            let _ = eventually(Duration::from_secs(5), || {
                t.most.load(Ordering::SeqCst) >= N
            })
            .await;
            t.now.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    });
    r
}

async fn finished(rx: &mut UnboundedReceiver<ReportEvent>, n: usize) -> Vec<ExecutionReport> {
    let mut out = Vec::new();
    while out.len() < n {
        let ev = tokio::time::timeout(Duration::from_secs(15), rx.recv())
            .await
            .expect("a report in time")
            .expect("reporter channel open");
        if let ReportEvent::Finished(r) = ev {
            out.push(*r);
        }
    }
    out
}

/// Runs `N` attempts of `handler` (stuck) with a 300 ms timeout on a pool of `N` slots,
/// then `N` executions that need all `N` slots at once; returns the stuck attempts'
/// reports and the most `together` executions seen at once.
async fn stuck_then_together(
    add_stuck: impl FnOnce(&mut HandlerRegistry),
    together: &Arc<Together>,
) -> (Vec<ExecutionReport>, usize, Vec<ExecutionReport>) {
    let q: Queue = queue().await;
    let mut cfg = fast_config("w");
    cfg.concurrency = N;
    // All N slots from the start: what is measured is whether stuck handlers lose slots,
    // not the slow start's ramp (whose own task a thread blocked for good can starve).
    cfg.slow_start = false;
    let (reporter, mut rx) = ChannelReporter::new();
    let mut reg = registry(together);
    add_stuck(&mut reg);
    let pool = WorkerPool::new(q.clone(), cfg, reg, Arc::new(reporter)).unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let handle = tokio::spawn(async move { pool.run(c).await });
    let mut stuck = spec("stuck", "stuck");
    stuck.timeout = TIMEOUT;
    for i in 0..N {
        q.enqueue(&msg(&stuck, i as i64)).await.unwrap();
    }
    let stuck_reports = finished(&mut rx, N).await;
    let s = spec("together", "together");
    for i in 0..N {
        q.enqueue(&msg(&s, i as i64)).await.unwrap();
    }
    let after = finished(&mut rx, N).await;
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), handle).await;
    (stuck_reports, together.most.load(Ordering::SeqCst), after)
}

fn assert_timed_out(reports: &[ExecutionReport], within: Duration) {
    let took: Vec<Duration> = reports.iter().map(|r| r.duration).collect();
    println!("stuck attempts ended timed_out after {took:?}");
    for r in reports {
        assert_eq!(r.end.outcome, AttemptOutcome::TimedOut, "{r:?}");
        assert!(
            r.duration >= TIMEOUT && r.duration <= within,
            "ended after {:?}, not within {within:?}",
            r.duration
        );
    }
}

/// An `async` handler that sleeps forever and never looks at its cancel token: it yields,
/// so the abort after the timeout ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_ignores_cancellation_is_timed_out_and_its_slot_comes_back() {
    let stuck_forever = |reg: &mut HandlerRegistry| {
        reg.register_fn("stuck", |_ctx, _exec| async move {
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        });
    };
    let together = Arc::default();
    let (stuck, most, after) = stuck_then_together(stuck_forever, &together).await;
    // No stop grace for a handler registered as a function: timed out and dropped at once.
    assert_timed_out(&stuck, TIMEOUT + Duration::from_millis(500));
    assert_eq!(most, N, "the pool lost slots to the stuck handlers");
    assert!(after
        .iter()
        .all(|r| r.end.outcome == AttemptOutcome::Succeeded));
}

/// Lets the busy handlers of the test below end once it is over, so the runtime can shut
/// down (it waits for its threads).
static RELEASE: AtomicBool = AtomicBool::new(false);

/// A handler that blocks its thread in a busy loop, never yielding: the abort cannot end
/// it, so the attempt is settled `timed_out` once the abort has been waited for (1 s), and
/// its slot is free again while the thread stays taken. `N` of them on a runtime of `N + 2`
/// threads: the pool goes on on the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 5)]
async fn a_handler_that_blocks_its_thread_is_timed_out_and_its_slot_comes_back() {
    let busy = |reg: &mut HandlerRegistry| {
        reg.register_fn("stuck", |_ctx, _exec| async move {
            while !RELEASE.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            Ok(())
        });
    };
    let together = Arc::default();
    let (stuck, most, after) = stuck_then_together(busy, &together).await;
    RELEASE.store(true, Ordering::Relaxed);
    assert_timed_out(&stuck, TIMEOUT + Duration::from_millis(1500));
    assert_eq!(most, N, "the pool lost slots to the stuck handlers");
    assert!(after
        .iter()
        .all(|r| r.end.outcome == AttemptOutcome::Succeeded));
}
