//! The SDK's worker against a real Redis: typed handlers run each execution once, a
//! retryable failure is retried by the task's policy and a permanent one dead-lettered, the
//! history shows every attempt, and a second live process under one id is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_queue::{ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::{AttemptOutcome, TaskSpec, UtcMillis};
use ax_sdk::{Config, Error, HandlerError, Typed, Worker};
use ax_testkit::{redis_url, unique_name};
use tokio_util::sync::CancellationToken;

#[derive(serde::Deserialize)]
struct Payload {
    n: String,
}

fn spec(id: &str, queue: &str, handler: &str, retries: u32) -> TaskSpec {
    let mut s = ax_testkit::spec(id, queue, handler);
    let retry = Arc::make_mut(&mut s.retry);
    retry.max_retries = retries;
    retry.initial_interval = Duration::from_millis(50);
    retry.jitter = 0.0;
    s
}

fn msg(spec: &TaskSpec) -> ExecutionMessage {
    ExecutionMessage::for_fire(spec, UtcMillis::now(), UtcMillis::now(), 1)
}

async fn queue(prefix: &str) -> Queue {
    let cfg = QueueConfig {
        prefix: prefix.to_owned(),
        ..QueueConfig::default()
    };
    Queue::connect(&redis_url(), cfg).await.unwrap()
}

/// Polls `cond` every 20 ms until it holds or 15 s pass.
async fn eventually<F: FnMut() -> bool>(mut cond: F) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_handlers_run_once_retry_by_policy_and_dead_letter_permanent_errors() {
    let prefix = unique_name("sdk");
    let q = queue(&prefix).await;
    let calls = Arc::new(AtomicU32::new(0));
    let flaky = Arc::new(AtomicU32::new(0));
    let (c, f) = (calls.clone(), flaky.clone());
    let shutdown = CancellationToken::new();
    let worker = Worker::builder(Config::redis(redis_url()).key_prefix(&prefix))
        .handler("echo", move |job: Typed<Payload>| {
            let c = c.clone();
            async move {
                assert_eq!(job.payload.n, "once");
                assert_eq!(job.task_id(), "once");
                c.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .handler("flaky", move |job: Typed<serde_json::Value>| {
            let f = f.clone();
            async move {
                f.fetch_add(1, Ordering::SeqCst);
                match job.attempt() {
                    1 => Err(HandlerError::Retryable("not yet".into())),
                    _ => Ok(()),
                }
            }
        })
        .handler("refuse", |_job: Typed<serde_json::Value>| async {
            Err(HandlerError::Permanent("never".into()))
        })
        .queues(["sdk"])
        .concurrency(4)
        .slow_start(false)
        .run(shutdown.clone());
    let running = tokio::spawn(worker);

    let once = spec("once", "sdk", "echo", 3);
    let retried = spec("retried", "sdk", "flaky", 3);
    let refused = spec("refused", "sdk", "refuse", 3);
    let wrong = spec("wrong", "sdk", "echo", 3);
    let mut wrong_msg = msg(&wrong);
    wrong_msg.payload = serde_json::json!({"n": 7});
    for m in [msg(&once), msg(&retried), msg(&refused), wrong_msg] {
        q.enqueue(&m).await.unwrap();
    }
    assert!(eventually(|| flaky.load(Ordering::SeqCst) == 2).await);
    let done = async {
        for _ in 0..500 {
            let stats = q.stats("sdk", UtcMillis::now()).await.unwrap();
            if (stats.ready, stats.unsettled, stats.delayed, stats.dead) == (0, 0, 0, 2) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    assert!(done.await, "two acked, two dead letters, nothing left");
    shutdown.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1, "ran once");
    assert_eq!(summary.taken, 5);
    assert_eq!(summary.retried, 1);
    assert_eq!(summary.dead_lettered, 2);

    // The reports went out through the same reporter as a replica's: history per task.
    let history = q.history("ns", "retried", 10).await.unwrap();
    let outcomes: Vec<_> = history.iter().map(|h| h.end.outcome).collect();
    assert_eq!(
        outcomes,
        [AttemptOutcome::Succeeded, AttemptOutcome::Failed],
        "newest first"
    );
    assert!(history.iter().all(|h| h.worker.starts_with("worker-")));
    let wrong = q.history("ns", "wrong", 10).await.unwrap();
    assert!(
        wrong[0]
            .end
            .error
            .as_deref()
            .unwrap_or("")
            .contains("payload"),
        "{wrong:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_process_under_one_id_is_refused() {
    let prefix = unique_name("sdk");
    let config = Config::redis(redis_url()).key_prefix(&prefix);
    let builder = |config: Config| {
        Worker::builder(config)
            .handler("noop", |_job: Typed<serde_json::Value>| async { Ok(()) })
            .queues(["solo"])
            .worker_id("sdk-solo")
    };
    let first_stop = CancellationToken::new();
    let first = tokio::spawn(builder(config.clone()).run(first_stop.clone()));
    let q = queue(&prefix).await;
    let registered = async {
        for _ in 0..250 {
            if q.last_heartbeat("solo", "sdk-solo")
                .await
                .unwrap()
                .is_some()
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    assert!(registered.await);
    let second = builder(config).run(CancellationToken::new()).await;
    assert!(
        matches!(
            second,
            Err(Error::Worker(ax_worker::WorkerError::IdInUse { .. }))
        ),
        "{second:?}"
    );
    first_stop.cancel();
    first.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_worker_without_handlers_is_refused_before_it_connects() {
    let err = Worker::builder(Config::redis("redis://127.0.0.1:1"))
        .run(CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(_)) && !err.is_retryable(),
        "{err}"
    );
}
