//! Operator control against a real Redis: killing an execution wherever it is (running,
//! waiting for a retry, waiting to be taken, held by a dead worker) and pausing a queue.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_queue::{KillState, Queue, RetrySettle};
use ax_scheduler_core::{AttemptOutcome, EnqueueOutcome, UtcMillis};
use ax_worker::{
    ChannelReporter, ExecutionReport, HandlerError, HandlerRegistry, ReportEvent, WorkerPool,
};
use common::*;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

/// A pool whose `slow` handler sleeps 30 s (ignoring cancellation, as a careless handler
/// would) and whose `flaky` handler fails; `runs` counts handler starts.
fn start(q: &Queue, runs: &Arc<AtomicU32>) -> (Running, UnboundedReceiver<ReportEvent>) {
    let mut reg = HandlerRegistry::new();
    let r = runs.clone();
    reg.register_fn("slow", move |_ctx, _exec| {
        r.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(())
        }
    });
    let r = runs.clone();
    reg.register_fn("flaky", move |_ctx, _exec| {
        r.fetch_add(1, Ordering::SeqCst);
        async move { Err(HandlerError::Retryable("down".into())) }
    });
    let r = runs.clone();
    reg.register_fn("quick", move |_ctx, _exec| {
        r.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok(())
        }
    });
    let (reporter, rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let handle = tokio::spawn(async move { pool.run(c).await });
    (Running { cancel, handle }, rx)
}

async fn next_finished(rx: &mut UnboundedReceiver<ReportEvent>) -> ExecutionReport {
    loop {
        if let ReportEvent::Finished(r) = next_event(rx).await {
            return *r;
        }
    }
}

async fn next_started(rx: &mut UnboundedReceiver<ReportEvent>) {
    while !matches!(next_event(rx).await, ReportEvent::Started { .. }) {}
}

async fn next_event(rx: &mut UnboundedReceiver<ReportEvent>) -> ReportEvent {
    tokio::time::timeout(Duration::from_secs(15), rx.recv())
        .await
        .expect("a report in time")
        .expect("reporter channel open")
}

async fn settled_nowhere(q: &Queue) {
    let stats = q.stats("default", UtcMillis::now()).await.unwrap();
    assert_eq!(
        (stats.ready, stats.unsettled, stats.delayed, stats.dead),
        (0, 0, 0, 0),
        "the killed execution is nowhere: not waiting, not retrying, not dead-lettered"
    );
}

#[tokio::test]
async fn a_running_execution_is_killed_within_a_second_and_not_retried() {
    let q = queue().await;
    let runs = Arc::new(AtomicU32::new(0));
    let (running, mut rx) = start(&q, &runs);
    let mut s = spec("long", "slow");
    s.timeout = Duration::from_secs(60);
    std::sync::Arc::make_mut(&mut s.retry).max_retries = 3;
    s.overlap = ax_scheduler_core::OverlapPolicy::Forbid;
    let m = msg(&s, 1);
    assert_eq!(q.enqueue(&m).await.unwrap(), EnqueueOutcome::Enqueued);
    next_started(&mut rx).await;

    let at = Instant::now();
    let kill = q.kill_execution("default", m.execution_id).await.unwrap();
    assert_eq!(kill.state, KillState::Running);
    let r = next_finished(&mut rx).await;
    assert!(at.elapsed() < Duration::from_secs(1), "{:?}", at.elapsed());
    assert_eq!(r.execution_id, m.execution_id);
    assert_eq!(r.end.outcome, AttemptOutcome::Killed);
    assert_eq!(r.end.error.as_deref(), Some("killed by an operator"));
    assert!(r.end.retry_at.is_none() && !r.end.outcome.is_failure());

    // Killing again is harmless and says so.
    let again = q.kill_execution("default", m.execution_id).await.unwrap();
    assert_eq!(again.state, KillState::AlreadyKilled);
    tokio::time::sleep(Duration::from_millis(500)).await;
    settled_nowhere(&q).await;
    assert_eq!(
        q.active_holder("default", &s.namespace, &s.id)
            .await
            .unwrap(),
        None,
        "the task's next fire is not held"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let h = q.history(&s.namespace, &s.id, 10).await.unwrap();
    assert_eq!(h[0].end.outcome, AttemptOutcome::Killed);
    running.stop().await;
}

#[tokio::test]
async fn a_pending_retry_is_cancelled_and_never_runs() {
    let q = queue().await;
    let runs = Arc::new(AtomicU32::new(0));
    let (running, mut rx) = start(&q, &runs);
    let mut s = spec("flaky", "flaky");
    {
        let retry = std::sync::Arc::make_mut(&mut s.retry);
        retry.max_retries = 3;
        retry.initial_interval = Duration::from_millis(1500);
        retry.jitter = 0.0;
    }
    let m = msg(&s, 1);
    q.enqueue(&m).await.unwrap();
    let first = next_finished(&mut rx).await;
    assert!(first.end.retry_at.is_some(), "{:?}", first.end);
    assert_eq!(q.delayed_len("default").await.unwrap(), 1);

    let kill = q.kill_execution("default", m.execution_id).await.unwrap();
    assert_eq!(kill.state, KillState::RetryPending);
    assert_eq!(kill.message.unwrap().attempt, 1, "the waiting retry");
    // Past the retry's due time: it never ran.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    settled_nowhere(&q).await;
    running.stop().await;
}

#[tokio::test]
async fn a_waiting_execution_is_removed_and_its_task_marker_cleared() {
    let q = queue().await;
    let mut s = spec("waits", "slow");
    s.overlap = ax_scheduler_core::OverlapPolicy::Forbid;
    let m = msg(&s, 1);
    q.enqueue(&m).await.unwrap();
    let kill = q.kill_execution("default", m.execution_id).await.unwrap();
    assert_eq!(kill.state, KillState::Waiting);
    assert_eq!(q.depth("default").await.unwrap(), 0);
    assert_eq!(
        q.active_holder("default", &s.namespace, &s.id)
            .await
            .unwrap(),
        None
    );
    // A new fire of a `forbid` task is not held by the killed one.
    assert_eq!(
        q.enqueue(&msg(&s, 2)).await.unwrap(),
        EnqueueOutcome::Enqueued
    );
    // An unknown execution is gone, and leaves nothing behind.
    let unknown = q
        .kill_execution(
            "default",
            ax_scheduler_core::ExecutionId::from(uuid::Uuid::new_v4()),
        )
        .await
        .unwrap();
    assert_eq!(unknown.state, KillState::Gone);
}

#[tokio::test]
async fn a_killed_message_given_back_by_the_reaper_never_starts() {
    let q = queue().await;
    let s = spec("back", "slow");
    let m = msg(&s, 1);
    q.enqueue(&m).await.unwrap();
    // A worker that is about to die holds it when the kill comes.
    let mut dying = q
        .consumer(
            "default",
            "dying",
            Duration::from_millis(100),
            UtcMillis::now(),
        )
        .await
        .unwrap();
    let held = dying.take(1).await.unwrap().remove(0);
    let kill = q.kill_execution("default", m.execution_id).await.unwrap();
    assert_eq!(kill.state, KillState::Running);
    // Its messages come back (what the reaper does once its heartbeat is gone).
    assert!(q.release(&held).await.unwrap());

    let runs = Arc::new(AtomicU32::new(0));
    let (running, mut rx) = start(&q, &runs);
    let r = next_finished(&mut rx).await;
    assert_eq!(r.end.outcome, AttemptOutcome::Killed);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler never started");
    settled_nowhere(&q).await;
    running.stop().await;
}

#[tokio::test]
async fn a_retry_settled_after_the_kill_is_not_scheduled() {
    let q = queue().await;
    let mut s = spec("late", "flaky");
    std::sync::Arc::make_mut(&mut s.retry).max_retries = 3;
    let m = msg(&s, 1);
    q.enqueue(&m).await.unwrap();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(100), UtcMillis::now())
        .await
        .unwrap();
    let d = c.take(1).await.unwrap().remove(0);
    let kill = q.kill_execution("default", m.execution_id).await.unwrap();
    assert_eq!(kill.state, KillState::Running);
    let next = m.next_attempt("down", UtcMillis::now());
    let settled = q.retry_later(&d, &next, UtcMillis::now()).await.unwrap();
    assert_eq!(settled, RetrySettle::Killed);
    settled_nowhere(&q).await;
}

#[tokio::test]
async fn a_paused_queue_is_not_taken_from_until_resumed_and_running_work_finishes() {
    let q = queue().await;
    let runs = Arc::new(AtomicU32::new(0));
    let (running, mut rx) = start(&q, &runs);
    let s = spec("p", "quick");
    let first = msg(&s, 1);
    q.enqueue(&first).await.unwrap();
    next_started(&mut rx).await;
    assert!(q.pause_queue("default").await.unwrap());
    assert!(!q.pause_queue("default").await.unwrap(), "paused already");
    assert!(q.is_paused("default").await.unwrap());
    let second = msg(&s, 2);
    q.enqueue(&second).await.unwrap();

    let r = next_finished(&mut rx).await;
    assert_eq!(
        (r.execution_id, r.end.outcome),
        (first.execution_id, AttemptOutcome::Succeeded),
        "what ran when the pause came finishes"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "nothing taken while paused");
    let stats = q.stats("default", UtcMillis::now()).await.unwrap();
    assert!(stats.paused);
    assert_eq!(stats.ready, 1);

    assert!(q.resume_queue("default").await.unwrap());
    let r = next_finished(&mut rx).await;
    assert_eq!(
        (r.execution_id, r.end.outcome),
        (second.execution_id, AttemptOutcome::Succeeded)
    );
    assert!(!q.is_paused("default").await.unwrap());
    running.stop().await;
}
