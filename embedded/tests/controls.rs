//! The control operations' contract, the SDK client's: each answers a `Result` whose `Ok`
//! says what it did, and `EmbeddedError::NotFound` with the id for a job the kernel does not
//! hold, on paused time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_embedded::{
    EmbeddedError, ExecutionId, HandlerError, Job, JobId, Kernel, Result, RetryPolicy, TaskStatus,
};

const HOUR: Duration = Duration::from_secs(3600);

/// Whether `answer` is `NotFound` naming `id`.
fn not_found<T>(answer: Result<T>, id: JobId) -> bool {
    matches!(answer, Err(EmbeddedError::NotFound(i)) if i == id)
}

/// Each of the six operations on `id` is `NotFound` naming it.
fn assert_all_not_found(kernel: &Kernel, id: JobId) {
    assert!(not_found(kernel.cancel(id), id), "cancel {id}");
    assert!(not_found(kernel.kill(id), id), "kill {id}");
    assert!(not_found(kernel.trigger(id), id), "trigger {id}");
    assert!(not_found(kernel.pause(id), id), "pause {id}");
    assert!(not_found(kernel.resume(id), id), "resume {id}");
    assert!(not_found(kernel.requeue(id), id), "requeue {id}");
}

/// A job that records each execution it runs, then fails for good (`fail`) or runs until
/// it is stopped.
fn recording(seen: &Arc<Mutex<Vec<ExecutionId>>>, fail: bool) -> Job {
    let seen = seen.clone();
    Job::new(move |ctx| {
        seen.lock().expect("seen").push(ctx.execution_id());
        async move {
            if fail {
                return Err(HandlerError::Permanent("no".into()));
            }
            ctx.cancel().cancelled().await;
            Ok(())
        }
    })
    .retry(RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    })
}

#[tokio::test(start_paused = true)]
async fn each_control_answers_what_it_did_or_not_found() {
    let kernel = Kernel::builder().build().expect("kernel");
    let never: JobId = serde_json::from_value(serde_json::json!(1_000_000)).expect("id");
    assert_all_not_found(&kernel, never);

    let seen = Arc::new(Mutex::new(Vec::new()));
    let id = kernel.every(HOUR, recording(&seen, false)).expect("every");
    assert_eq!(kernel.pause(id).expect("pause"), TaskStatus::Paused);
    assert_eq!(
        kernel.pause(id).expect("again"),
        TaskStatus::Paused,
        "idempotent"
    );
    assert_eq!(kernel.resume(id).expect("resume"), TaskStatus::Scheduled);
    assert_eq!(kernel.kill(id).expect("kill"), 0, "known, nothing running");
    assert!(not_found(kernel.requeue(id), id), "no dead letter");

    let run = kernel.trigger(id).expect("trigger");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        *seen.lock().expect("seen"),
        [run],
        "the handler's execution"
    );
    assert_eq!(kernel.kill(id).expect("kill"), 1, "the running attempt");
    assert_eq!(kernel.kill(id).expect("kill"), 0, "stopping already");
    tokio::time::sleep(Duration::from_millis(100)).await;
    kernel.cancel(id).expect("cancel");
    assert_all_not_found(&kernel, id);

    let failed = Arc::new(Mutex::new(Vec::new()));
    let dead = kernel
        .after(Duration::ZERO, recording(&failed, true))
        .expect("after");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(kernel.dead_letters().len(), 1);
    let again = kernel.requeue(dead).expect("requeue");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let failed = failed.lock().expect("failed").clone();
    assert_eq!(failed.len(), 2);
    assert_ne!(failed[0], again);
    assert_eq!(failed[1], again, "the requeued execution");
    kernel.shutdown(Duration::from_secs(1)).await;
}
