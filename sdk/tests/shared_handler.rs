//! One handler value, registered in an embedded kernel and in an SDK worker against a real
//! Redis, runs in both: the same payload decoding, attempt numbering, retry on a retryable
//! error and execution id across attempts, with the runner telling the two apart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_embedded::{Kernel, RetryPolicy, When};
use ax_queue::{ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::UtcMillis;
use ax_sdk::{typed, Config, ExecutionId, Handler, HandlerError, Typed, Worker};
use ax_testkit::{redis_url, unique_name};
use tokio_util::sync::CancellationToken;

#[derive(serde::Deserialize)]
struct Greeting {
    name: String,
}

/// What one attempt saw: (runner, name, attempt, execution).
type Seen = Arc<Mutex<Vec<(String, String, u32, ExecutionId)>>>;

/// Fails its first attempt (retryable), succeeds the second; notes every attempt.
fn greet(seen: &Seen) -> Arc<dyn Handler> {
    let seen = seen.clone();
    Arc::new(typed(move |job: Typed<Greeting>| {
        let seen = seen.clone();
        async move {
            job.progress(Some(50.0), "half way".to_owned()).await?;
            seen.lock().unwrap().push((
                job.runner().to_owned(),
                job.payload.name.clone(),
                job.attempt(),
                job.execution_id(),
            ));
            if job.attempt() == 1 {
                return Err(HandlerError::Retryable("first try".into()));
            }
            Ok(())
        }
    }))
}

fn of(seen: &Seen, runner: &str) -> Vec<(String, u32, ExecutionId)> {
    let all = seen.lock().unwrap();
    all.iter()
        .filter(|s| s.0 == runner)
        .map(|s| (s.1.clone(), s.2, s.3))
        .collect()
}

async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    for _ in 0..750 {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_handler_value_runs_embedded_and_on_the_cluster() {
    let seen: Seen = Arc::default();
    let handler = greet(&seen);

    // Embedded: a named job with a payload.
    let kernel = Kernel::builder()
        .handler("greet", Arc::clone(&handler))
        .build()
        .unwrap();
    let retry = RetryPolicy {
        max_retries: 2,
        initial_interval: Duration::from_millis(10),
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    let job = ax_embedded::Job::named("greet")
        .payload(&serde_json::json!({"name": "kernel"}))
        .retry(retry);
    kernel
        .submit(When::After(Duration::ZERO), job)
        .await
        .unwrap();

    // Cluster: the same value served by an SDK worker from the Redis queue.
    let prefix = unique_name("shared");
    let worker_id = unique_name("shared-worker");
    let queue_cfg = QueueConfig {
        prefix: prefix.clone(),
        ..QueueConfig::default()
    };
    let q = Queue::connect(&redis_url(), queue_cfg).await.unwrap();
    let shutdown = CancellationToken::new();
    let worker = Worker::builder(Config::redis(redis_url()).key_prefix(&prefix))
        .handler("greet", Arc::clone(&handler))
        .queues(["shared"])
        .worker_id(&worker_id)
        .slow_start(false)
        .run(shutdown.clone());
    let running = tokio::spawn(worker);
    let mut spec = ax_testkit::spec("greeting", "shared", "greet");
    let r = Arc::make_mut(&mut spec.retry);
    r.max_retries = 2;
    r.initial_interval = Duration::from_millis(50);
    r.jitter = 0.0;
    let mut msg = ExecutionMessage::for_fire(&spec, UtcMillis::now(), UtcMillis::now(), 1);
    msg.payload = serde_json::json!({"name": "cluster"});
    q.enqueue(&msg).await.unwrap();

    assert!(
        eventually(|| of(&seen, "embedded").len() == 2 && of(&seen, &worker_id).len() == 2).await,
        "two attempts in each: {:?}",
        seen.lock().unwrap()
    );
    for (runner, name) in [("embedded", "kernel"), (worker_id.as_str(), "cluster")] {
        let runs = of(&seen, runner);
        assert_eq!(
            runs.iter().map(|r| (r.0.as_str(), r.1)).collect::<Vec<_>>(),
            [(name, 1), (name, 2)],
            "{runner}: the payload decoded, attempts counted from 1"
        );
        assert_eq!(runs[0].2, runs[1].2, "{runner}: one execution id for both");
    }
    assert_eq!(of(&seen, &worker_id)[0].2, msg.execution_id);

    shutdown.cancel();
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.taken, summary.retried), (2, 1));
    kernel.shutdown(Duration::from_secs(5)).await;
}
