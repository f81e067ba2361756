//! The kernel's Prometheus metrics on paused time: the cluster's families, counting what the
//! cluster's workers count, on the registry the program passed in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::Duration;

use ax_embedded::{EmbeddedError, HandlerError, Job, Kernel, RetryPolicy};
use prometheus::proto::{MetricFamily, MetricType};
use prometheus::Registry;

/// The value of every series of `name`, by its labels joined as `k=v,k=v`.
fn series(registry: &Registry, name: &str) -> HashMap<String, f64> {
    let families: Vec<MetricFamily> = registry.gather();
    let family = families
        .iter()
        .find(|f| f.name() == name)
        .unwrap_or_else(|| panic!("{name} is not registered"));
    family
        .get_metric()
        .iter()
        .map(|m| {
            let labels: Vec<String> = m
                .get_label()
                .iter()
                .map(|l| format!("{}={}", l.name(), l.value()))
                .collect();
            let value = match family.get_field_type() {
                MetricType::COUNTER => m.get_counter().get_value(),
                MetricType::GAUGE => m.get_gauge().get_value(),
                _ => m.get_histogram().get_sample_count() as f64,
            };
            (labels.join(","), value)
        })
        .collect()
}

fn value(registry: &Registry, name: &str, labels: &str) -> f64 {
    series(registry, name).get(labels).copied().unwrap_or(0.0)
}

#[tokio::test(start_paused = true)]
async fn the_kernel_counts_fires_attempts_retries_and_dead_letters() {
    let registry = Registry::new();
    let kernel = Kernel::builder()
        .metrics(&registry)
        .handler("greet", |_job: ax_embedded::handler::Typed<String>| async {
            Ok::<(), HandlerError>(())
        })
        .build()
        .expect("kernel");
    // Series exist at zero from the start, so `rate()` sees the first increment.
    let ok = "handler=closure,outcome=succeeded,queue=default";
    assert_eq!(
        series(&registry, "scheduler_attempts_total").get(ok),
        Some(&0.0)
    );

    for _ in 0..3 {
        kernel
            .after(Duration::from_secs(5), Job::new(|_| async { Ok(()) }))
            .expect("after");
    }
    kernel
        .after(
            Duration::from_secs(5),
            Job::named("greet").payload(&"ada".to_owned()),
        )
        .expect("named");
    let retry = RetryPolicy {
        max_retries: 1,
        initial_interval: Duration::from_secs(1),
        max_interval: Duration::from_secs(1),
        multiplier: 1.0,
        jitter: 0.0,
        max_elapsed: None,
    };
    kernel
        .after(
            Duration::from_secs(5),
            Job::new(|_| async { Err(HandlerError::Retryable("busy".into())) }).retry(retry),
        )
        .expect("failing");
    tokio::time::sleep(Duration::from_secs(60)).await;

    let q = "queue=default";
    assert_eq!(value(&registry, "scheduler_fires_total", q), 5.0);
    assert_eq!(value(&registry, "scheduler_attempts_total", ok), 3.0);
    let named = "handler=greet,outcome=succeeded,queue=default";
    assert_eq!(value(&registry, "scheduler_attempts_total", named), 1.0);
    let failed = "handler=closure,outcome=failed,queue=default";
    assert_eq!(value(&registry, "scheduler_attempts_total", failed), 2.0);
    let closure = "handler=closure,queue=default";
    assert_eq!(
        value(&registry, "scheduler_attempts_failed_total", closure),
        2.0
    );
    assert_eq!(
        value(&registry, "scheduler_attempts_retried_total", closure),
        1.0
    );
    // One lateness per fire's first start, none for the retry.
    assert_eq!(
        value(&registry, "scheduler_schedule_latency_seconds", q),
        5.0
    );
    assert_eq!(
        value(&registry, "scheduler_attempt_duration_seconds", ok),
        3.0
    );
    assert_eq!(value(&registry, "scheduler_dlq_size", ""), 1.0);
    assert_eq!(value(&registry, "scheduler_executions_running", ""), 0.0);
    assert_eq!(
        value(&registry, "scheduler_worker_concurrency_limit", ""),
        5.0
    );

    assert_eq!(kernel.purge_dead_letters(), 1);
    assert_eq!(value(&registry, "scheduler_dlq_size", ""), 0.0);
    kernel.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_running_attempt_shows_in_the_running_gauge() {
    let registry = Registry::new();
    let kernel = Kernel::builder()
        .metrics(&registry)
        .build()
        .expect("kernel");
    kernel
        .after(
            Duration::ZERO,
            Job::new(|_| async {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(())
            }),
        )
        .expect("after");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(value(&registry, "scheduler_executions_running", ""), 1.0);
    assert_eq!(value(&registry, "scheduler_active_workers", ""), 1.0);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(value(&registry, "scheduler_executions_running", ""), 0.0);
    let ok = "handler=closure,outcome=succeeded,queue=default";
    let durations = series(&registry, "scheduler_attempt_duration_seconds");
    assert_eq!(durations.get(ok), Some(&1.0));
    kernel.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_registry_that_holds_the_families_is_refused_at_build() {
    let registry = Registry::new();
    let first = Kernel::builder().metrics(&registry).build().expect("first");
    let err = Kernel::builder()
        .metrics(&registry)
        .build()
        .expect_err("a second kernel on the same registry");
    assert!(
        matches!(
            err,
            EmbeddedError::Invalid {
                field: "metrics",
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.is_retryable());
    first.shutdown(Duration::from_secs(1)).await;
}

/// Every family the kernel exports is one the cluster documents, under the same name.
#[tokio::test(start_paused = true)]
async fn every_family_is_a_documented_cluster_family() {
    let registry = Registry::new();
    let kernel = Kernel::builder()
        .metrics(&registry)
        .build()
        .expect("kernel");
    let doc = include_str!("../../docs/metrics.md");
    let families = registry.gather();
    assert!(families.len() >= 9, "{}", families.len());
    for family in &families {
        let row = format!("| `{}` |", family.name());
        assert!(
            doc.contains(&row),
            "{} has no row in docs/metrics.md",
            family.name()
        );
    }
    kernel.shutdown(Duration::from_secs(1)).await;
}

/// The names that say what they count, every one at 0 before anything happened; the
/// deprecated names beside them for one release, always equal to them (the old outcome
/// words aside), because they are the same series.
#[tokio::test(start_paused = true)]
async fn the_renamed_families_exist_from_the_start_and_their_aliases_follow_them() {
    let registry = Registry::new();
    let kernel = Kernel::builder()
        .metrics(&registry)
        .build()
        .expect("kernel");
    let q = "queue=default";
    let closure = "handler=closure,queue=default";
    for (name, labels) in [
        ("scheduler_fires_total", q.to_owned()),
        ("scheduler_attempts_failed_total", closure.to_owned()),
        ("scheduler_attempts_retried_total", closure.to_owned()),
        ("scheduler_executions_running", String::new()),
        (
            "scheduler_attempts_total",
            format!("handler=closure,outcome=succeeded,{q}"),
        ),
        (
            "scheduler_attempts_total",
            format!("handler=closure,outcome=failed,{q}"),
        ),
        (
            "scheduler_attempts_total",
            format!("handler=closure,outcome=timed_out,{q}"),
        ),
        (
            "scheduler_attempts_total",
            format!("handler=closure,outcome=killed,{q}"),
        ),
        (
            "scheduler_attempt_duration_seconds",
            format!("handler=closure,outcome=succeeded,{q}"),
        ),
    ] {
        assert_eq!(
            series(&registry, name).get(&labels),
            Some(&0.0),
            "{name}{{{labels}}} is not at 0 from the start"
        );
    }

    let retry = RetryPolicy {
        max_retries: 1,
        initial_interval: Duration::from_secs(1),
        max_interval: Duration::from_secs(1),
        multiplier: 1.0,
        jitter: 0.0,
        max_elapsed: None,
    };
    kernel
        .after(Duration::from_secs(1), Job::new(|_| async { Ok(()) }))
        .expect("after");
    kernel
        .after(
            Duration::from_secs(1),
            Job::new(|_| async { Err(HandlerError::Retryable("busy".into())) }).retry(retry),
        )
        .expect("failing");
    kernel
        .after(
            Duration::from_secs(1),
            Job::new(|_| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(())
            }),
        )
        .expect("running");
    tokio::time::sleep(Duration::from_secs(10)).await;

    let old_words = |labels: &str| {
        labels
            .replace("outcome=succeeded", "outcome=success")
            .replace("outcome=failed", "outcome=failure")
            .replace("outcome=timed_out", "outcome=timeout")
    };
    for (old, current) in [
        ("scheduler_tasks_scheduled_total", "scheduler_fires_total"),
        ("scheduler_tasks_executed_total", "scheduler_attempts_total"),
        (
            "scheduler_tasks_failed_total",
            "scheduler_attempts_failed_total",
        ),
        (
            "scheduler_tasks_retried_total",
            "scheduler_attempts_retried_total",
        ),
        (
            "scheduler_execution_duration_seconds",
            "scheduler_attempt_duration_seconds",
        ),
        ("scheduler_active_workers", "scheduler_executions_running"),
    ] {
        let expected: HashMap<String, f64> = series(&registry, current)
            .into_iter()
            .map(|(labels, v)| (old_words(&labels), v))
            .collect();
        assert_eq!(series(&registry, old), expected, "{old} is not {current}");
    }
    assert_eq!(value(&registry, "scheduler_fires_total", q), 3.0);
    assert_eq!(
        value(
            &registry,
            "scheduler_tasks_executed_total",
            &format!("handler=closure,outcome=failure,{q}")
        ),
        2.0
    );
    assert_eq!(value(&registry, "scheduler_executions_running", ""), 1.0);
    kernel.shutdown(Duration::from_secs(1)).await;
}
