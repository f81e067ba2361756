//! A named handler that defers its end: the kernel holds the attempt until the handler's
//! `Deferred` completes it, and fails it (retryably) when that is dropped without an end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_embedded::handler::{typed, Typed as Attempt};
use ax_embedded::{Job, Kernel, RetryPolicy, When};

type Log = Arc<Mutex<Vec<String>>>;

fn kernel(log: &Log) -> Kernel {
    let log = log.clone();
    Kernel::builder()
        .handler(
            "later",
            typed(move |job: Attempt<bool>| {
                let log = log.clone();
                async move {
                    let later = job.defer().await?;
                    let complete = job.payload;
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        later.progress(Some(50.0), "half".to_owned()).await.unwrap();
                        log.lock().unwrap().push("progress".into());
                        if complete {
                            later.complete(Ok(())).await.unwrap();
                            log.lock().unwrap().push("completed".into());
                        }
                        // Otherwise dropped here without an end.
                    });
                    Ok(())
                }
            }),
        )
        .build()
        .unwrap()
}

fn no_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_attempt_ends_when_completed_or_fails_when_dropped() {
    let log: Log = Arc::default();
    let k = kernel(&log);
    let job = Job::named("later").payload(&true).retry(no_retry());
    k.submit(When::After(Duration::ZERO), job).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(k.len(), 1, "held while its end is deferred");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(*log.lock().unwrap(), ["progress", "completed"]);
    assert!(k.is_empty(), "completed: done and forgotten");
    assert!(k.dead_letters().is_empty());

    let job = Job::named("later").payload(&false).retry(no_retry());
    k.submit(When::After(Duration::ZERO), job).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dead = k.dead_letters();
    assert_eq!(dead.len(), 1, "dropped without an end: failed");
    assert!(
        dead[0].error.contains("dropped without completing"),
        "{:?}",
        dead[0]
    );
    k.shutdown(Duration::from_secs(1)).await;
}
