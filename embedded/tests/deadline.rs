//! Deadlines (`Job::deadline`, the cluster's `expect_success_within`) on paused time: the
//! dispatcher judges them as it does a cluster task's, and the kernel reports each missed
//! fire once, with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use ax_embedded::{EmbeddedError, HandlerError, Job, Kernel, RetryPolicy};
use prometheus::Registry;

fn misses(registry: &Registry, reason: &str) -> f64 {
    let families = registry.gather();
    let family = families
        .iter()
        .find(|f| f.name() == "scheduler_deadline_misses_total")
        .expect("the family is registered");
    family
        .get_metric()
        .iter()
        .filter(|m| m.get_label().iter().any(|l| l.value() == reason))
        .map(|m| m.get_counter().get_value())
        .sum()
}

fn kernel(registry: &Registry) -> Kernel {
    Kernel::builder().metrics(registry).build().expect("kernel")
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[tokio::test(start_paused = true)]
async fn a_job_that_keeps_failing_misses_its_deadline_as_failing() {
    let registry = Registry::new();
    let kernel = kernel(&registry);
    let retry = RetryPolicy {
        max_retries: 0,
        ..RetryPolicy::default()
    };
    kernel
        .every(
            secs(60),
            Job::new(|_| async { Err(HandlerError::Retryable("down".into())) })
                .retry(retry)
                .deadline(secs(30)),
        )
        .expect("every");
    tokio::time::sleep(secs(100)).await;
    // The fire at 60 s failed and nothing succeeded by 90 s.
    assert_eq!(misses(&registry, "failing"), 1.0);
    tokio::time::sleep(secs(60)).await;
    assert_eq!(misses(&registry, "failing"), 2.0, "once per missed fire");
    kernel.shutdown(secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_success_in_time_meets_it_and_a_long_run_misses_it_as_running() {
    let registry = Registry::new();
    let kernel = kernel(&registry);
    kernel
        .after(secs(1), Job::new(|_| async { Ok(()) }).deadline(secs(5)))
        .expect("quick");
    kernel
        .after(
            secs(1),
            Job::new(|_| async {
                tokio::time::sleep(secs(30)).await;
                Ok(())
            })
            .timeout(secs(60))
            .deadline(secs(5)),
        )
        .expect("slow");
    tokio::time::sleep(secs(60)).await;
    assert_eq!(misses(&registry, "running"), 1.0);
    let all: f64 = ax_scheduler_core::deadline::MissReason::ALL
        .iter()
        .map(|r| misses(&registry, r))
        .sum();
    assert_eq!(all, 1.0, "the quick job met its deadline");
    kernel.shutdown(secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_zero_deadline_is_refused_at_the_call() {
    let kernel = Kernel::builder().build().expect("kernel");
    let err = kernel
        .after(
            secs(1),
            Job::new(|_| async { Ok(()) }).deadline(Duration::ZERO),
        )
        .expect_err("zero");
    assert!(
        matches!(
            err,
            EmbeddedError::Invalid {
                field: "deadline",
                ..
            }
        ),
        "{err}"
    );
    kernel.shutdown(secs(1)).await;
}
