//! What every runner of executions records, the service's workers and the embedded kernel
//! alike: fires dispatched, how late each first started, and each attempt's end.
//!
//! One recorder so the two faces of ax count the same things the same way (an attempt
//! stopped by `replace` or a kill is executed but not failed; a failure followed by another
//! attempt is also retried), and one pair of bounded label sets, so a loop of generated
//! queue or handler names cannot grow the series of either without end.

use std::sync::Arc;

use ax_scheduler_core::AttemptEnd;
use prometheus::Registry;

use crate::families::{FireFamilies, WorkerFamilies};
use crate::label::{metric_outcome, BoundedLabel};
use crate::names::EXECUTION_OUTCOMES;

/// The fire and execution families with their bounded `queue` and `handler` labels.
#[derive(Clone, Debug)]
pub struct ExecutionMetrics {
    /// Fires dispatched and their lateness.
    pub fires: FireFamilies,
    /// Attempts, their ends and durations, and the pool's gauges.
    pub worker: WorkerFamilies,
    queue_labels: Arc<BoundedLabel>,
    handler_labels: Arc<BoundedLabel>,
}

impl ExecutionMetrics {
    /// Registers the families on `registry`.
    ///
    /// ```
    /// let registry = prometheus::Registry::new();
    /// let m = ax_metrics::ExecutionMetrics::register(&registry).unwrap();
    /// m.record_scheduled("default");
    /// assert!(registry.gather().iter().any(|f| f.name() == ax_metrics::TASKS_SCHEDULED_TOTAL));
    /// ```
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(ExecutionMetrics {
            fires: FireFamilies::register(registry)?,
            worker: WorkerFamilies::register(registry)?,
            queue_labels: Arc::default(),
            handler_labels: Arc::default(),
        })
    }

    /// The `queue` label value for `queue` (see [`crate::MAX_LABEL_VALUES`]).
    pub fn queue_label<'a>(&self, queue: &'a str) -> &'a str {
        self.queue_labels.get(queue)
    }

    /// The `handler` label value for `handler` (see [`crate::MAX_LABEL_VALUES`]).
    pub fn handler_label<'a>(&self, handler: &'a str) -> &'a str {
        self.handler_labels.get(handler)
    }

    /// Creates the zero series of `queue` and of each of `handlers` in it, so that `rate()`
    /// sees the first increment and the names show up before anything happens.
    pub fn touch(&self, queue: &str, handlers: &[&str]) {
        let queue = self.queue_label(queue);
        self.fires.tasks_scheduled_total.with_label_values(&[queue]);
        self.fires
            .schedule_latency_seconds
            .with_label_values(&[queue]);
        self.worker
            .concurrency_wait_seconds
            .with_label_values(&[queue]);
        for handler in handlers {
            let handler = self.handler_label(handler);
            let w = &self.worker;
            w.tasks_failed_total.with_label_values(&[queue, handler]);
            w.tasks_retried_total.with_label_values(&[queue, handler]);
            for outcome in EXECUTION_OUTCOMES {
                w.tasks_executed_total
                    .with_label_values(&[queue, handler, outcome]);
                w.execution_duration_seconds
                    .with_label_values(&[queue, handler, outcome]);
            }
        }
    }

    /// Records one ended attempt (not one given back unfinished): executed by outcome,
    /// failed when it failed (a run stopped by `replace` or a kill did not), retried when
    /// another attempt follows, and its duration.
    pub fn record_attempt(&self, queue: &str, handler: &str, end: &AttemptEnd, seconds: f64) {
        let queue = self.queue_label(queue);
        let handler = self.handler_label(handler);
        let outcome = metric_outcome(end.outcome);
        let w = &self.worker;
        w.tasks_executed_total
            .with_label_values(&[queue, handler, outcome])
            .inc();
        if end.outcome.is_failure() {
            w.tasks_failed_total
                .with_label_values(&[queue, handler])
                .inc();
            if !end.is_last() {
                w.tasks_retried_total
                    .with_label_values(&[queue, handler])
                    .inc();
            }
        }
        w.execution_duration_seconds
            .with_label_values(&[queue, handler, outcome])
            .observe(seconds);
    }

    /// Records the lateness of a fire's first start, in `queue`.
    pub fn record_start_lateness(&self, queue: &str, seconds: f64) {
        self.fires
            .schedule_latency_seconds
            .with_label_values(&[self.queue_label(queue)])
            .observe(seconds);
    }

    /// Records how long an execution of `queue` waited for a slot of its concurrency key.
    pub fn record_concurrency_wait(&self, queue: &str, seconds: f64) {
        self.worker
            .concurrency_wait_seconds
            .with_label_values(&[self.queue_label(queue)])
            .observe(seconds);
    }

    /// Counts a fire dispatched to `queue`.
    pub fn record_scheduled(&self, queue: &str) {
        self.fires
            .tasks_scheduled_total
            .with_label_values(&[self.queue_label(queue)])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use ax_scheduler_core::AttemptOutcome;

    use super::*;
    use crate::label::metric_outcome;
    use crate::names::*;

    fn metrics() -> (Registry, ExecutionMetrics) {
        let registry = Registry::new();
        let m = ExecutionMetrics::register(&registry).unwrap();
        (registry, m)
    }

    #[test]
    fn an_attempt_is_counted_once_in_each_counter_it_belongs_to() {
        let (_registry, m) = metrics();
        let executed = |q: &str| {
            EXECUTION_OUTCOMES
                .iter()
                .map(|o| {
                    m.worker
                        .tasks_executed_total
                        .with_label_values(&[q, "http", o])
                        .get()
                })
                .sum::<u64>()
        };
        m.record_attempt("default", "http", &AttemptEnd::succeeded(), 0.2);
        let mut retried = AttemptEnd::new(AttemptOutcome::Failed, Some("503".into()));
        retried.retry_at = Some(ax_scheduler_core::UtcMillis(1));
        m.record_attempt("default", "http", &retried, 0.3);
        m.record_attempt(
            "default",
            "http",
            &AttemptEnd::new(AttemptOutcome::TimedOut, Some("timeout".into())),
            30.0,
        );
        // A run stopped because a newer one replaced it did not fail.
        m.record_attempt(
            "default",
            "http",
            &AttemptEnd::new(AttemptOutcome::Killed, Some("replaced".into())),
            1.0,
        );
        assert_eq!(executed("default"), 3);
        let failed = m
            .worker
            .tasks_failed_total
            .with_label_values(&["default", "http"]);
        let retries = m
            .worker
            .tasks_retried_total
            .with_label_values(&["default", "http"]);
        assert_eq!((failed.get(), retries.get()), (2, 1));
    }

    #[test]
    fn metric_labels_keep_the_documented_values() {
        assert_eq!(metric_outcome(AttemptOutcome::Succeeded), OUTCOME_SUCCESS);
        assert_eq!(metric_outcome(AttemptOutcome::TimedOut), OUTCOME_TIMEOUT);
        assert_eq!(metric_outcome(AttemptOutcome::Panicked), OUTCOME_FAILURE);
        assert_eq!(metric_outcome(AttemptOutcome::Killed), "killed");
    }

    #[test]
    fn user_chosen_label_values_are_bounded() {
        let (registry, m) = metrics();
        // A loop registering tasks on generated queues and handlers.
        for i in 0..1_000 {
            let q = format!("q-{i}");
            m.record_scheduled(&q);
            m.record_start_lateness(&q, 0.01);
            m.record_attempt(&q, &format!("h-{i}"), &AttemptEnd::succeeded(), 0.1);
        }
        let families = registry.gather();
        for name in [
            TASKS_SCHEDULED_TOTAL,
            TASKS_EXECUTED_TOTAL,
            SCHEDULE_LATENCY_SECONDS,
        ] {
            let family = families.iter().find(|f| f.name() == name).unwrap();
            let queues: HashSet<&str> = family
                .get_metric()
                .iter()
                .flat_map(|mt| mt.get_label())
                .filter(|l| l.name() == "queue")
                .map(|l| l.value())
                .collect();
            assert!(
                queues.len() <= MAX_LABEL_VALUES + 1,
                "{name}: {}",
                queues.len()
            );
            assert!(queues.contains(OTHER_LABEL), "{name}");
        }
        // Nothing is lost: what went over the bound is counted under `other`.
        let total: u64 = families
            .iter()
            .find(|f| f.name() == TASKS_SCHEDULED_TOTAL)
            .unwrap()
            .get_metric()
            .iter()
            .map(|mt| mt.get_counter().get_value() as u64)
            .sum();
        assert_eq!(total, 1_000);
    }
}
