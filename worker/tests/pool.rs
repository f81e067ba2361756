//! The worker pool against a real Redis: delivery under load, failures, retries, dead
//! letters, shutdown, a killed worker process and a restarted Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_queue::{ExecutionMessage, Queue};
use ax_scheduler_core::{AttemptOutcome, EnqueueOutcome, ExecutionId};
use ax_scheduler_core::{RetryPolicy, UtcMillis};
use ax_testkit::{redis_url, unique_name, RedisServer};
use ax_worker::{
    ChannelReporter, ExecutionReport, HandlerError, HandlerRegistry, NoopReporter, ReportEvent,
    WorkerConfig, WorkerPool,
};
use common::*;
use redis::AsyncCommands;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

type Seen = Arc<Mutex<HashMap<ExecutionId, u32>>>;

fn recording_registry(seen: &Seen) -> HandlerRegistry {
    let mut r = HandlerRegistry::with_builtins();
    let s = seen.clone();
    r.register_fn("record", move |_ctx, exec: ExecutionMessage| {
        let s = s.clone();
        async move {
            *s.lock().unwrap().entry(exec.execution_id).or_default() += 1;
            Ok(())
        }
    });
    r
}

/// A pool under `cfg` whose `record` handler counts executions in `seen`.
fn recording_pool(q: &Queue, cfg: WorkerConfig, seen: &Seen) -> WorkerPool {
    WorkerPool::new(
        q.clone(),
        cfg,
        recording_registry(seen),
        Arc::new(NoopReporter),
    )
    .unwrap()
}

/// Whether execution `id` ran within `limit`.
async fn ran_within(seen: &Seen, id: ExecutionId, limit: Duration) -> bool {
    eventually(limit, || seen.lock().unwrap().contains_key(&id)).await
}

fn start(pool: WorkerPool) -> Running {
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let handle = tokio::spawn(async move { pool.run(c).await });
    Running { cancel, handle }
}

async fn next_finished(rx: &mut UnboundedReceiver<ReportEvent>) -> ExecutionReport {
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(15), rx.recv())
            .await
            .expect("a report in time")
            .expect("reporter channel open");
        if let ReportEvent::Finished(r) = ev {
            return *r;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_messages_through_several_pools_none_lost_none_twice() {
    let q = queue().await;
    let seen: Seen = Arc::default();
    let mut pools = Vec::new();
    for i in 0..3 {
        let mut cfg = fast_config(&format!("w{i}"));
        cfg.concurrency = 16;
        cfg.record_history = false;
        let pool = recording_pool(&q, cfg, &seen);
        pools.push(start(pool));
    }
    let s = spec("bulk", "record");
    let total = 5000;
    let msgs: Vec<_> = (0..total).map(|i| msg(&s, i)).collect();
    for chunk in msgs.chunks(500) {
        let out = q.enqueue_batch(chunk).await.unwrap();
        assert!(out.iter().all(|o| *o == EnqueueOutcome::Enqueued));
    }
    let done = eventually(Duration::from_secs(60), || {
        seen.lock().unwrap().len() as i64 >= total
    })
    .await;
    let mut taken = 0;
    for p in pools {
        let summary = p.stop().await;
        assert!(summary.taken > 0, "every pool took work: {summary:?}");
        taken += summary.taken;
    }
    assert!(done, "only {} of {total} ran", seen.lock().unwrap().len());
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len() as i64, total);
        assert!(seen.values().all(|&n| n == 1), "some ran twice");
        assert!(msgs.iter().all(|m| seen.contains_key(&m.execution_id)));
    }
    assert_eq!(taken, total as u64);
    let stats = q
        .stats("default", ax_scheduler_core::UtcMillis::now())
        .await
        .unwrap();
    assert_eq!(
        (stats.ready, stats.unsettled, stats.delayed, stats.dead),
        (0, 0, 0, 0)
    );
}

/// (outcome, error, whether a retry follows) of a finished attempt.
fn ended(r: &ExecutionReport) -> (AttemptOutcome, Option<String>, bool) {
    (r.end.outcome, r.end.error.clone(), r.end.retry_at.is_some())
}

#[tokio::test]
async fn a_panic_is_recorded_and_the_pool_keeps_running() {
    let q = queue().await;
    let seen: Seen = Arc::default();
    let mut reg = recording_registry(&seen);
    reg.register_fn("boom", |_ctx, _exec| async move {
        if true {
            panic!("kaboom at the handler");
        }
        Ok(())
    });
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let bad = msg(&spec("bad", "boom"), 1);
    q.enqueue(&bad).await.unwrap();
    let r = next_finished(&mut rx).await;
    assert_eq!(
        ended(&r),
        (
            AttemptOutcome::Panicked,
            Some(format!("handler panicked: {}", "kaboom at the handler")),
            false
        )
    );
    let good = msg(&spec("good", "record"), 1);
    q.enqueue(&good).await.unwrap();
    let r = next_finished(&mut rx).await;
    assert_eq!(r.end.outcome, AttemptOutcome::Succeeded);
    assert_eq!(r.execution_id, good.execution_id);
    let dead = q.dlq_list("default", 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0].reason.contains("kaboom at the handler"),
        "{}",
        dead[0].reason
    );
    let h = q.history("ns", "bad", 10).await.unwrap();
    assert_eq!(h[0].end.outcome, AttemptOutcome::Panicked);
    running.stop().await;
}

#[tokio::test]
async fn an_attempt_past_its_timeout_is_stopped() {
    let q = queue().await;
    let mut reg = HandlerRegistry::new();
    reg.register_fn("slow", |_ctx, _exec| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(())
    });
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let mut s = spec("slow", "slow");
    s.timeout = Duration::from_millis(200);
    q.enqueue(&msg(&s, 1)).await.unwrap();
    let r = next_finished(&mut rx).await;
    assert_eq!(r.end.outcome, AttemptOutcome::TimedOut);
    assert!(r.end.is_last());
    assert!(r.duration >= Duration::from_millis(200) && r.duration < Duration::from_secs(3));
    let dead = q.dlq_list("default", 0, 10).await.unwrap();
    assert!(
        dead[0].reason.starts_with("timed out after 200ms"),
        "{}",
        dead[0].reason
    );
    running.stop().await;
}

#[tokio::test]
async fn a_replaced_execution_is_stopped_and_the_newer_one_runs() {
    let q = queue().await;
    let mut reg = HandlerRegistry::new();
    reg.register_fn("slow", |ctx, _exec| async move {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(30)) => Ok(()),
            _ = ctx.cancel.cancelled() => Err(HandlerError::Retryable("cancelled".into())),
        }
    });
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let mut s = spec("rep", "slow");
    s.overlap = ax_scheduler_core::OverlapPolicy::Replace;
    s.timeout = Duration::from_secs(60);
    let first = msg(&s, 1);
    assert_eq!(q.enqueue(&first).await.unwrap(), EnqueueOutcome::Enqueued);
    // Give the first time to start, then the next fire replaces it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = msg(&s, 2);
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Enqueued);
    let r = next_finished(&mut rx).await;
    assert_eq!(r.execution_id, first.execution_id);
    assert_eq!(r.end.outcome, AttemptOutcome::Killed);
    assert!(r.duration < Duration::from_secs(5), "{:?}", r.duration);
    assert_eq!(
        q.active_holder("default", &s.namespace, &s.id)
            .await
            .unwrap(),
        Some(second.execution_id.to_string()),
        "the newer execution holds the task"
    );
    assert_eq!(
        q.dlq_size("default").await.unwrap(),
        0,
        "a replaced run is not a failure"
    );
    running.stop().await;
}

#[tokio::test]
async fn retries_wait_in_redis_within_the_jitter_bounds_then_dead_letter() {
    let q = queue().await;
    let calls = Arc::new(Mutex::new(Vec::<(u32, UtcMillis)>::new()));
    let mut reg = HandlerRegistry::new();
    let c = calls.clone();
    reg.register_fn("flaky", move |_ctx, exec: ExecutionMessage| {
        let c = c.clone();
        async move {
            c.lock()
                .unwrap()
                .push((exec.attempt, ax_scheduler_core::UtcMillis::now()));
            Err(HandlerError::Retryable(format!("fail #{}", exec.attempt)))
        }
    });
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let mut s = spec("flaky", "flaky");
    let policy = RetryPolicy {
        max_retries: 3,
        initial_interval: Duration::from_millis(100),
        max_interval: Duration::from_millis(400),
        multiplier: 2.0,
        jitter: 0.2,
        max_elapsed: Some(Duration::from_secs(30)),
    };
    s.retry = std::sync::Arc::new(policy.clone());
    let m = msg(&s, 1);
    q.enqueue(&m).await.unwrap();
    let mut raw = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for attempt in 0..3u32 {
        let r = next_finished(&mut rx).await;
        assert_eq!(r.attempt, attempt);
        assert_eq!(
            ended(&r),
            (
                AttemptOutcome::Failed,
                Some(format!("fail #{attempt}").to_string()),
                true
            )
        );
        let due = r.end.retry_at.unwrap();
        let wait = due.0 - r.finished_at.0;
        let base = ax_worker::retry::base_interval(&policy, attempt).as_millis() as f64;
        // The due time is computed a moment before the report's finish instant.
        assert!(
            (wait as f64) >= base * 0.8 - 5.0 && (wait as f64) <= base * 1.2 + 1.0,
            "attempt {attempt}: wait {wait} ms outside {base} ms +-20%"
        );
        if attempt == 0 {
            let scored: Vec<(String, i64)> = raw
                .zrange_withscores(q.keys().delayed("default"), 0, -1)
                .await
                .unwrap();
            assert_eq!(scored.len(), 1);
            assert_eq!(
                scored[0].1, due.0,
                "the retry waits in the delayed set at its due time"
            );
        }
    }
    let r = next_finished(&mut rx).await;
    assert_eq!(r.attempt, 3);
    assert_eq!(
        ended(&r),
        (AttemptOutcome::Failed, Some("fail #3".to_string()), false)
    );
    running.stop().await;
    // Each retry started no earlier than its due time (promotion from the delayed set).
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 4);
    for pair in calls.windows(2) {
        let gap = pair[1].1 .0 - pair[0].1 .0;
        let base = ax_worker::retry::base_interval(&policy, pair[0].0).as_millis() as i64;
        assert!(
            gap >= base * 8 / 10,
            "gap {gap} ms before retry {}",
            pair[1].0
        );
    }
    let dead = q.dlq_list("default", 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    let errors: Vec<(u32, &str)> = dead[0]
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(
        errors,
        vec![
            (0, "fail #0"),
            (1, "fail #1"),
            (2, "fail #2"),
            (3, "fail #3 (retries exhausted (3 of 3))")
        ]
    );
    assert_eq!(dead[0].id, m.execution_id);
}

#[tokio::test]
async fn permanent_errors_and_unknown_handlers_go_straight_to_the_dead_letter_queue() {
    let q = queue().await;
    let mut reg = HandlerRegistry::new();
    reg.register_fn("reject", |_ctx, _exec| async move {
        Err(HandlerError::Permanent("bad input".into()))
    });
    reg.register_fn("ok", |_ctx, _exec| async move { Ok(()) });
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let mut s = spec("rej", "reject");
    std::sync::Arc::make_mut(&mut s.retry).max_retries = 5;
    q.enqueue(&msg(&s, 1)).await.unwrap();
    let r = next_finished(&mut rx).await;
    assert_eq!(
        ended(&r),
        (AttemptOutcome::Failed, Some("bad input".to_string()), false)
    );
    q.enqueue(&msg(&spec("u", "nope"), 1)).await.unwrap();
    let r = next_finished(&mut rx).await;
    assert_eq!(
        ended(&r),
        (
            AttemptOutcome::DeadLettered,
            Some("unknown handler `nope`; this worker serves: [ok, reject]".to_string()),
            false
        )
    );
    assert_eq!(q.dlq_size("default").await.unwrap(), 2);
    running.stop().await;
    // The life cycle from here: requeue one as a new execution, purge the other.
    let dead = q.dlq_list("default", 0, 10).await.unwrap();
    assert_eq!(dead[0].errors.len(), 1);
    assert_eq!(dead[0].errors[0].attempt, 0);
    let new_id = q
        .dlq_requeue("default", dead[0].id, ax_scheduler_core::UtcMillis::now())
        .await
        .unwrap();
    assert!(new_id.is_some());
    assert_eq!(q.dlq_purge("default").await.unwrap(), 1);
    assert_eq!(q.depth("default").await.unwrap(), 1);
}

#[tokio::test]
async fn shutdown_finishes_short_work_and_gives_back_the_rest() {
    let q = queue().await;
    let mut reg = HandlerRegistry::new();
    reg.register_fn("sleep", |_ctx, exec: ExecutionMessage| async move {
        let ms = exec.payload["ms"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(())
    });
    let (reporter, mut rx) = ChannelReporter::new();
    let mut cfg = fast_config("w");
    cfg.shutdown_grace = Duration::from_millis(500);
    let pool = WorkerPool::new(q.clone(), cfg, reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let mut short = spec("short", "sleep");
    short.payload = serde_json::json!({"ms": 200});
    let mut long = spec("long", "sleep");
    long.payload = serde_json::json!({"ms": 20_000});
    long.timeout = Duration::from_secs(60);
    let long_msg = msg(&long, 1);
    q.enqueue(&msg(&short, 1)).await.unwrap();
    q.enqueue(&long_msg).await.unwrap();
    // Both started.
    let mut started = 0;
    while started < 2 {
        if let Some(ReportEvent::Started { .. }) = rx.recv().await {
            started += 1;
        }
    }
    let t0 = std::time::Instant::now();
    let summary = running.stop().await;
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "stopped within grace + block timeout"
    );
    assert_eq!(summary.succeeded, 1);
    assert_eq!(summary.released, 1);
    let mut outcomes = [next_finished(&mut rx).await, next_finished(&mut rx).await];
    outcomes.sort_by_key(|r| r.task_id.clone());
    assert_eq!(outcomes[0].end.outcome, AttemptOutcome::Released);
    assert_eq!(outcomes[1].end.outcome, AttemptOutcome::Succeeded);
    // The unfinished one is back at the front of the queue, untouched; the worker is gone.
    let stats = q
        .stats("default", ax_scheduler_core::UtcMillis::now())
        .await
        .unwrap();
    assert_eq!((stats.ready, stats.unsettled), (1, 1));
    let mut c = q
        .consumer(
            "default",
            "next",
            Duration::from_millis(100),
            ax_scheduler_core::UtcMillis::now(),
        )
        .await
        .unwrap();
    let back = c.take(1).await.unwrap();
    assert_eq!(back[0].message.execution_id, long_msg.execution_id);
    assert_eq!(back[0].message.attempt, 0);
    let mut raw = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let workers: Vec<String> = raw
        .zrange(q.keys().workers("default"), 0, -1)
        .await
        .unwrap();
    assert_eq!(workers, vec!["next".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_waiting_through_a_redis_restart_carry_on() {
    let mut server = RedisServer::start();
    let prefix = unique_name("axw");
    let q = queue_at(&server.url(), &prefix).await;
    let seen: Seen = Arc::default();
    let pool = recording_pool(&q, fast_config("w"), &seen);
    let running = start(pool);
    let s = spec("r", "record");
    let before = msg(&s, 1);
    q.enqueue(&before).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || seen
            .lock()
            .unwrap()
            .contains_key(&before.execution_id))
        .await
    );
    server.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart();
    let after = msg(&s, 2);
    let mut pushed = false;
    for _ in 0..50 {
        if q.enqueue(&after).await.is_ok() {
            pushed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pushed);
    assert!(
        eventually(Duration::from_secs(15), || seen
            .lock()
            .unwrap()
            .contains_key(&after.execution_id))
        .await,
        "the pool reconnected and ran the message enqueued after the restart"
    );
    running.stop().await;
}

const CHILD_ENV: &str = "AX_WORKER_TEST_CHILD";

/// The worker process the SIGKILL test starts (it re-runs this test binary with this test
/// selected). It serves until killed, with a handler that never finishes.
#[tokio::test]
#[ignore = "child process of a_killed_worker_process_message_is_redelivered"]
async fn child_worker_process() {
    let spec_env = std::env::var(CHILD_ENV).expect("started by the SIGKILL test");
    let (url, prefix) = spec_env.split_once('|').unwrap();
    let q = queue_at(url, prefix).await;
    let mut reg = HandlerRegistry::new();
    reg.register_fn("record", |_ctx, _exec| async move {
        std::future::pending::<()>().await;
        Ok(())
    });
    let config = if std::env::var_os(CHILD_DEFAULTS_ENV).is_some() {
        WorkerConfig {
            worker_id: "child".into(),
            ..WorkerConfig::default()
        }
    } else {
        fast_config("child")
    };
    let pool = WorkerPool::new(q, config, reg, Arc::new(NoopReporter)).unwrap();
    pool.run(CancellationToken::new()).await;
}

/// Set for a child that runs with the default timing (heartbeat, visibility timeout).
const CHILD_DEFAULTS_ENV: &str = "AX_WORKER_TEST_CHILD_DEFAULTS";

/// Starts a child worker process that takes `queue`'s message and hangs in its handler, waits
/// until it holds the message, and SIGKILLs it.
async fn kill_a_worker_holding_the_message(q: &Queue, prefix: &str, defaults: bool) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "child_worker_process",
        "--nocapture",
    ])
    .env(CHILD_ENV, format!("{}|{}", redis_url(), prefix))
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    if defaults {
        cmd.env(CHILD_DEFAULTS_ENV, "1");
    }
    let mut child = cmd.spawn().unwrap();
    let mut raw = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let processing = q.keys().processing("default", "child");
    let mut held = false;
    for _ in 0..300 {
        let n: u64 = raw.llen(&processing).await.unwrap();
        if n == 1 {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(held, "the child took the message");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_process_message_is_redelivered() {
    let prefix = unique_name("axw");
    let q = queue_at(&redis_url(), &prefix).await;
    let m = msg(&spec("k", "record"), 1);
    q.enqueue(&m).await.unwrap();
    kill_a_worker_holding_the_message(&q, &prefix, false).await;
    let mut raw = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let processing = q.keys().processing("default", "child");
    let seen: Seen = Arc::default();
    // What the rescuer's handler is told about the attempt it runs again.
    let told: Arc<Mutex<Vec<(ExecutionId, u32, bool)>>> = Arc::default();
    let mut registry = recording_registry(&seen);
    let (s, t) = (seen.clone(), told.clone());
    registry.register(
        "record",
        ax_scheduler_core::handler::typed(
            move |job: ax_scheduler_core::handler::Typed<serde_json::Value>| {
                let (s, t) = (s.clone(), t.clone());
                async move {
                    t.lock()
                        .unwrap()
                        .push((job.execution_id(), job.attempt(), job.redelivered()));
                    *s.lock().unwrap().entry(job.execution_id()).or_default() += 1;
                    Ok(())
                }
            },
        ),
    );
    let t0 = std::time::Instant::now();
    let pool = WorkerPool::new(
        q.clone(),
        fast_config("rescuer"),
        registry,
        Arc::new(NoopReporter),
    )
    .unwrap();
    let running = start(pool);
    assert!(
        ran_within(&seen, m.execution_id, Duration::from_secs(15)).await,
        "the reaper gave the dead worker's message back"
    );
    // Not before the child's heartbeat lapsed and the visibility timeout passed.
    assert!(t0.elapsed() >= Duration::from_millis(300));
    running.stop().await;
    let n: u64 = raw.llen(&processing).await.unwrap();
    assert_eq!(n, 0);
    assert_eq!(seen.lock().unwrap()[&m.execution_id], 1);
    // The same execution and attempt, and the handler knows it may have run before.
    assert_eq!(
        told.lock().unwrap().as_slice(),
        &[(m.execution_id, 1, true)],
        "the handler's view of the redelivered attempt"
    );
}

#[tokio::test]
async fn a_deposed_leaders_fires_never_reach_a_worker() {
    let q = queue().await;
    let seen: Seen = Arc::default();
    let pool = recording_pool(&q, fast_config("w"), &seen);
    let running = start(pool);
    let s = spec("f", "record");
    q.advance_fence("default", None, 10, "test-cluster")
        .await
        .unwrap();
    let old = ExecutionMessage::for_fire(&s, UtcMillis(1), ax_scheduler_core::UtcMillis::now(), 9);
    assert_eq!(
        q.enqueue(&old).await.unwrap(),
        EnqueueOutcome::Fenced { newest: 10 }
    );
    let new = ExecutionMessage::for_fire(&s, UtcMillis(1), ax_scheduler_core::UtcMillis::now(), 10);
    assert_eq!(q.enqueue(&new).await.unwrap(), EnqueueOutcome::Enqueued);
    assert!(
        eventually(Duration::from_secs(5), || seen
            .lock()
            .unwrap()
            .contains_key(&new.execution_id))
        .await
    );
    running.stop().await;
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_pools_egress_settings_reach_the_http_handler() {
    let receiver = Receiver::on("127.0.0.1").await;
    let q = queue().await;
    let mut s = spec("hook", "http");
    // Retries left: a refusal must still not be retried.
    std::sync::Arc::make_mut(&mut s.retry).max_retries = 3;
    s.http = Some(ax_scheduler_core::task::HttpTarget {
        url: format!("http://127.0.0.1:{}/200", receiver.port),
        headers: Default::default(),
        follow_redirects: false,
        await_completion: false,
    });
    let run_one = |cfg: WorkerConfig, fire: i64| {
        let (q, s) = (q.clone(), s.clone());
        async move {
            let (reporter, mut rx) = ChannelReporter::new();
            let registry = HandlerRegistry::with_builtins();
            let pool = WorkerPool::new(q.clone(), cfg, registry, Arc::new(reporter)).unwrap();
            let running = start(pool);
            q.enqueue(&msg(&s, fire)).await.unwrap();
            let r = next_finished(&mut rx).await;
            running.stop().await;
            ended(&r)
        }
    };
    // The defaults: loopback refused, dead-lettered at once, nothing sent.
    let (outcome, error, retry) = run_one(fast_config("w1"), 1).await;
    assert_eq!(
        (outcome, retry),
        (AttemptOutcome::Failed, false),
        "{error:?}"
    );
    let error = error.unwrap();
    assert!(
        error.contains("127.0.0.1 is loopback (127.0.0.0/8)"),
        "{error}"
    );
    assert_eq!(q.dlq_list("default", 0, 10).await.unwrap().len(), 1);
    assert!(receiver.requests().is_empty());
    // Opened by the pool's settings.
    let cfg = WorkerConfig {
        http_allow_cidrs: vec![ax_worker::egress::parse_allow_cidr("127.0.0.0/8").unwrap()],
        ..fast_config("w2")
    };
    let (outcome, error, _) = run_one(cfg, 2).await;
    assert_eq!(outcome, AttemptOutcome::Succeeded, "{error:?}");
    assert_eq!(receiver.requests().len(), 1);
}

#[tokio::test]
async fn invalid_configuration_is_refused() {
    let q: Queue = queue().await;
    let mut cfg = fast_config("w");
    cfg.concurrency = 0;
    assert!(WorkerPool::new(
        q.clone(),
        cfg,
        HandlerRegistry::new(),
        Arc::new(NoopReporter)
    )
    .is_err());
    let cfg = fast_config("bad{id}");
    let err = WorkerPool::new(q, cfg, HandlerRegistry::new(), Arc::new(NoopReporter)).unwrap_err();
    assert!(!err.is_retryable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_default_settings_a_dead_workers_execution_moves_on_within_30_seconds() {
    let prefix = unique_name("axw");
    let q = queue_at(&redis_url(), &prefix).await;
    let m = msg(&spec("k30", "record"), 1);
    q.enqueue(&m).await.unwrap();
    kill_a_worker_holding_the_message(&q, &prefix, true).await;
    let killed_at = std::time::Instant::now();
    let seen: Seen = Arc::default();
    let rescuer = WorkerConfig {
        worker_id: "rescuer".into(),
        ..WorkerConfig::default()
    };
    let pool = recording_pool(&q, rescuer, &seen);
    let running = start(pool);
    assert!(
        ran_within(&seen, m.execution_id, Duration::from_secs(40)).await,
        "the reaper gave the dead worker's message back"
    );
    let took = killed_at.elapsed();
    running.stop().await;
    eprintln!("redelivered {} ms after the SIGKILL", took.as_millis());
    // The last beat came at most a heartbeat interval before the kill.
    assert!(
        took <= ax_queue::DEFAULT_VISIBILITY_TIMEOUT + Duration::from_secs(2),
        "redelivered {took:?} after the kill"
    );
    assert!(
        took >= ax_queue::DEFAULT_VISIBILITY_TIMEOUT - Duration::from_secs(2),
        "redelivered {took:?} after the kill: before the worker had been silent long enough"
    );
    assert_eq!(seen.lock().unwrap()[&m.execution_id], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_process_under_one_worker_id_is_refused() {
    let prefix = unique_name("axw");
    let q = queue_at(&redis_url(), &prefix).await;
    let seen: Seen = Arc::default();
    let first = recording_pool(&q, fast_config("dup"), &seen);
    assert_eq!(
        first.claim_id().await.unwrap(),
        0,
        "a fresh id is free at once"
    );
    let running = start(first);
    let mut beating = false;
    for _ in 0..30 {
        if q.last_heartbeat("default", "dup").await.unwrap().is_some() {
            beating = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(beating, "the first pool heartbeats");
    let second = recording_pool(&q, fast_config("dup"), &seen);
    let refused = second.claim_id().await;
    assert!(
        matches!(refused, Err(ax_worker::WorkerError::IdInUse { .. })),
        "{refused:?}"
    );
    running.stop().await;
    // Stopped cleanly, the id is free again.
    assert_eq!(second.claim_id().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_left_in_a_live_workers_processing_list_is_given_back() {
    // A take whose reply was lost after Redis moved the message: it sits in the worker's
    // processing list, and the worker does not know it holds it.
    let prefix = unique_name("axw");
    let q = queue_at(&redis_url(), &prefix).await;
    let seen: Seen = Arc::default();
    let pool = recording_pool(&q, fast_config("live"), &seen);
    let running = start(pool);
    let m = msg(&spec("lost-reply", "record"), 1);
    let mut raw = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = raw
        .lpush(q.keys().processing("default", "live"), m.to_json().unwrap())
        .await
        .unwrap();
    let _: () = raw
        .lpush(q.keys().processing("default", "live"), "garbage")
        .await
        .unwrap();
    assert!(
        ran_within(&seen, m.execution_id, Duration::from_secs(5)).await,
        "the stuck message was given back and ran"
    );
    running.stop().await;
    assert_eq!(seen.lock().unwrap()[&m.execution_id], 1);
    assert_eq!(
        q.dlq_size("default").await.unwrap(),
        1,
        "the garbage went to the DLQ"
    );
    let left: u64 = raw
        .llen(q.keys().processing("default", "live"))
        .await
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn prefetched_messages_wait_for_a_slot_in_order_and_go_back_on_shutdown() {
    let q = queue().await;
    // The handler runs once the test lets it through; it records the order of completion.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let done: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut reg = HandlerRegistry::new();
    let (g, d) = (gate.clone(), done.clone());
    reg.register_fn("gated", move |_ctx, exec: ExecutionMessage| {
        let (g, d) = (g.clone(), d.clone());
        async move {
            g.acquire().await.unwrap().forget();
            d.lock().unwrap().push(exec.task_id.to_string());
            Ok(())
        }
    });
    let (reporter, mut rx) = ChannelReporter::new();
    let mut cfg = fast_config("w");
    cfg.concurrency = 1;
    cfg.prefetch = 2;
    cfg.shutdown_grace = Duration::from_millis(300);
    let pool = WorkerPool::new(q.clone(), cfg, reg, Arc::new(reporter)).unwrap();
    for i in 0..5 {
        let mut s = spec(&format!("m{i}"), "gated");
        s.timeout = Duration::from_secs(60);
        q.enqueue(&msg(&s, 1)).await.unwrap();
    }
    let running = start(pool);

    // One runs and two wait in the pool, taken ahead of a free slot.
    assert!(matches!(rx.recv().await, Some(ReportEvent::Started { .. })));
    let s = ready_becomes(&q, 2).await;
    assert_eq!(
        (s.ready, s.unsettled),
        (2, 5),
        "1 running + 2 prefetched taken"
    );

    // Two finish: the prefetched ones run in the order they were queued, and the pool takes
    // the rest ahead again.
    gate.add_permits(2);
    assert!(eventually(Duration::from_secs(5), || done.lock().unwrap().len() == 2).await);
    assert_eq!(*done.lock().unwrap(), ["m0", "m1"]);
    let s = ready_becomes(&q, 0).await;
    assert_eq!(
        (s.ready, s.unsettled),
        (0, 3),
        "m2 running, m3 and m4 prefetched"
    );

    // On shutdown the running one gets its grace, the waiting ones go back at once: nothing
    // is lost, nothing ran twice.
    let summary = running.stop().await;
    assert_eq!(summary.succeeded, 2);
    assert_eq!(summary.released, 3);
    let s = q.stats("default", UtcMillis::now()).await.unwrap();
    assert_eq!((s.ready, s.unsettled), (3, 3));
    assert_eq!(done.lock().unwrap().len(), 2);
}

/// The queue's stats once `ready` messages wait in it (or after 5 s).
async fn ready_becomes(q: &Queue, ready: u64) -> ax_queue::QueueStats {
    let mut s = q.stats("default", UtcMillis::now()).await.unwrap();
    for _ in 0..250 {
        if s.ready == ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        s = q.stats("default", UtcMillis::now()).await.unwrap();
    }
    s
}

/// A message of a scheduling shard keeps it through the pool's retry, and every attempt's
/// end event names it (the event goes to that shard's stream, read by its owner).
#[tokio::test]
async fn every_attempts_end_event_names_the_messages_shard() {
    let q = queue().await;
    let mut reg = HandlerRegistry::new();
    reg.register_fn("once", |_ctx, exec: ExecutionMessage| async move {
        if exec.attempt == 0 {
            return Err(HandlerError::Retryable("first".into()));
        }
        Ok(())
    });
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let mut s = spec("sharded", "once");
    s.retry = Arc::new(RetryPolicy {
        max_retries: 1,
        initial_interval: Duration::from_millis(50),
        max_interval: Duration::from_millis(50),
        multiplier: 1.0,
        jitter: 0.0,
        max_elapsed: None,
    });
    let mut m = msg(&s, 1);
    m.shard = Some(3);
    q.enqueue(&m).await.unwrap();
    for attempt in 0..2u32 {
        let r = next_finished(&mut rx).await;
        assert_eq!((r.attempt, r.shard), (attempt, Some(3)));
        assert_eq!(r.finished_event().shard, Some(3));
    }
    // An unsharded message's event names none (the stream of a one-leader install).
    q.enqueue(&msg(&s, 2)).await.unwrap();
    let r = next_finished(&mut rx).await;
    assert_eq!((r.attempt, r.finished_event().shard), (0, None));
    running.stop().await;
}

/// A pool serving the partitions of a queue, with fewer places than partitions: the fetch
/// loops of the idle partitions hold no place while they wait, so the busy partition's
/// messages run at once instead of after the idle ones' block timeouts.
#[tokio::test]
async fn idle_partitions_hold_no_place_from_a_busy_one() {
    let cfg = ax_queue::QueueConfig {
        prefix: unique_name("axwp"),
        partitions: std::collections::BTreeMap::from([("hot".to_owned(), 4)]),
        ..ax_queue::QueueConfig::default()
    };
    let q = Queue::connect(&redis_url(), cfg).await.unwrap();
    let seen: Seen = Arc::default();
    let mut wc = fast_config("w");
    wc.queues = q.physical_queues("hot");
    wc.concurrency = 1;
    wc.prefetch = 0;
    // Long enough that a place held through one idle wait shows.
    wc.block_timeout = Duration::from_secs(20);
    let running = start(recording_pool(&q, wc, &seen));
    // Every fetch loop has found its partition empty and waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut s = spec("busy", "record");
    s.queue = "hot".into();
    let fires: Vec<ExecutionMessage> = (1..=3).map(|i| msg(&s, i)).collect();
    q.enqueue_batch(&fires).await.unwrap();
    for m in &fires {
        assert!(
            ran_within(&seen, m.execution_id, Duration::from_secs(10)).await,
            "a fire waited behind the idle partitions"
        );
    }
    running.stop().await;
}

#[tokio::test]
async fn the_tasks_secrets_are_redacted_from_what_an_attempt_records() {
    let q = queue().await;
    let mut reg = HandlerRegistry::new();
    // A handler that echoes what a careless server would: the task's credentials and a
    // value it resolved, in its answer and in its error.
    reg.register_fn(
        "echo",
        |ctx: ax_worker::HandlerContext, exec: ExecutionMessage| async move {
            let http = exec.http.clone().unwrap();
            ctx.output.hide(["resolved-value".to_owned()]);
            let echoed = format!(
                "auth={} url={} env={} resolved=resolved-value",
                http.headers["X.Api.Key"],
                http.url,
                exec.command
                    .as_ref()
                    .map_or("", |c| c.env["TOKEN"].as_str()),
            );
            ctx.output.set(ax_scheduler_core::AttemptOutput::new(
                Some(500),
                echoed.as_bytes(),
                false,
            ));
            Err(HandlerError::Permanent(format!("server said: {echoed}")))
        },
    );
    let (reporter, mut rx) = ChannelReporter::new();
    let pool = WorkerPool::new(q.clone(), fast_config("w"), reg, Arc::new(reporter)).unwrap();
    let running = start(pool);
    let mut s = spec("leaky", "echo");
    s.http = Some(ax_scheduler_core::task::HttpTarget {
        url: "https://hooks.slack.com/services/T0/B0/path-token?k=query-token".into(),
        headers: [("X.Api.Key".to_owned(), "header-token".to_owned())].into(),
        follow_redirects: false,
        await_completion: false,
    });
    s.command = Some(ax_scheduler_core::task::CommandCall {
        name: "c".into(),
        args: Vec::new(),
        env: [("TOKEN".to_owned(), "env-token".to_owned())].into(),
    });
    q.enqueue(&msg(&s, 1)).await.unwrap();
    let r = next_finished(&mut rx).await;
    let error = r.end.error.clone().unwrap();
    let body = r.output.clone().unwrap().body;
    for shown in [&error, &body] {
        for secret in [
            "header-token",
            "path-token",
            "query-token",
            "env-token",
            "resolved-value",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("auth=*** "), "{shown}");
    }
    let h = q.history("ns", "leaky", 10).await.unwrap();
    let stored = serde_json::to_string(&h).unwrap();
    assert!(
        !stored.contains("header-token") && !stored.contains("resolved-value"),
        "{stored}"
    );
    running.stop().await;
}
