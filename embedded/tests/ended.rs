//! How a job ended, asked after the kernel let it go: on paused time, each end the kernel
//! can tell apart, and the id it never knew.

use std::time::Duration;

use ax_embedded::{HandlerError, Job, JobEnd, Kernel, RetryPolicy, ENDS_KEPT_FOR};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn no_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    }
}

#[tokio::test(start_paused = true)]
async fn each_end_is_told_apart_until_it_is_forgotten() {
    let kernel = Kernel::builder().build().expect("kernel");
    let ok = kernel
        .after(secs(1), Job::new(|_| async { Ok(()) }))
        .expect("ok");
    let failing = kernel
        .after(
            secs(1),
            Job::new(|_| async { Err(HandlerError::Permanent("no".into())) }).retry(no_retry()),
        )
        .expect("failing");
    let long = kernel
        .after(
            secs(1),
            Job::new(|ctx| async move {
                ctx.cancel().cancelled().await;
                Ok(())
            })
            .timeout(secs(600)),
        )
        .expect("long");
    let cancelled = kernel
        .after(secs(60), Job::new(|_| async { Ok(()) }))
        .expect("cancelled");
    assert_eq!(kernel.ended(ok), None, "still to come");
    kernel.cancel(cancelled).expect("cancel");

    tokio::time::sleep(secs(2)).await;
    assert_eq!(kernel.kill(long).expect("kill"), 1, "running");
    tokio::time::sleep(secs(1)).await;

    assert_eq!(kernel.ended(ok), Some(JobEnd::Succeeded));
    assert_eq!(kernel.status(ok), None, "let go of");
    assert_eq!(kernel.ended(failing), Some(JobEnd::DeadLettered));
    assert_eq!(kernel.ended(long), Some(JobEnd::Killed));
    assert_eq!(kernel.ended(cancelled), Some(JobEnd::Cancelled));

    assert_eq!(kernel.purge_dead_letters(), 1);
    assert_eq!(kernel.ended(failing), Some(JobEnd::Failed));

    let unknown = {
        let probe = kernel
            .after(secs(1), Job::new(|_| async { Ok(()) }))
            .expect("probe");
        kernel.cancel(probe).expect("cancel");
        // An id the kernel has not handed out yet.
        serde_json::from_value(serde_json::json!(probe.get() + 1000)).expect("id")
    };
    assert_eq!(kernel.ended(unknown), None);

    tokio::time::sleep(ENDS_KEPT_FOR + secs(1)).await;
    assert_eq!(kernel.ended(ok), None, "remembered for a bounded time");
    kernel.shutdown(secs(1)).await;
}
