//! What every runner of executions records, the service's workers and the embedded kernel
//! alike: fires dispatched, how late each first started, and each attempt's end.
//!
//! One recorder so the two faces of ax count the same things the same way (an attempt
//! stopped by `replace` or a kill ended but did not fail; a failure followed by another
//! attempt is also retried), and one pair of bounded label sets, so a loop of generated
//! queue or handler names cannot grow the series of either without end.

use std::sync::Arc;

use ax_scheduler_core::AttemptEnd;
use prometheus::Registry;

use crate::families::{FireFamilies, WorkerFamilies};
use crate::label::{metric_outcome, BoundedLabel};
use crate::names::ATTEMPT_OUTCOMES;

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
    /// assert!(registry.gather().iter().any(|f| f.name() == ax_metrics::FIRES_TOTAL));
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

    /// Creates the zero series of `queue` and of each of `handlers` in it, every outcome of
    /// [`ATTEMPT_OUTCOMES`], so that `rate()` sees the first increment and the names show up
    /// before anything happens.
    pub fn touch(&self, queue: &str, handlers: &[&str]) {
        let queue = self.queue_label(queue);
        self.fires.fires_total.with_label_values(&[queue]);
        self.fires
            .schedule_latency_seconds
            .with_label_values(&[queue]);
        self.worker
            .concurrency_wait_seconds
            .with_label_values(&[queue]);
        for handler in handlers {
            let handler = self.handler_label(handler);
            let w = &self.worker;
            w.attempts_failed_total.with_label_values(&[queue, handler]);
            w.attempts_retried_total
                .with_label_values(&[queue, handler]);
            for outcome in ATTEMPT_OUTCOMES {
                w.attempts_total
                    .with_label_values(&[queue, handler, outcome]);
                w.attempt_duration_seconds
                    .with_label_values(&[queue, handler, outcome]);
            }
        }
    }

    /// Records one ended attempt (not one given back unfinished): ended by outcome,
    /// failed when it failed (a run stopped by `replace` or a kill did not), retried when
    /// another attempt follows, and its duration.
    pub fn record_attempt(&self, queue: &str, handler: &str, end: &AttemptEnd, seconds: f64) {
        let queue = self.queue_label(queue);
        let handler = self.handler_label(handler);
        let outcome = metric_outcome(end.outcome);
        let w = &self.worker;
        w.attempts_total
            .with_label_values(&[queue, handler, outcome])
            .inc();
        if end.outcome.is_failure() {
            w.attempts_failed_total
                .with_label_values(&[queue, handler])
                .inc();
            if !end.is_last() {
                w.attempts_retried_total
                    .with_label_values(&[queue, handler])
                    .inc();
            }
        }
        w.attempt_duration_seconds
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
            .fires_total
            .with_label_values(&[self.queue_label(queue)])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use ax_scheduler_core::AttemptOutcome;

    use super::*;
    use crate::label::{deprecated_outcome, metric_outcome};
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
            [OUTCOME_SUCCEEDED, OUTCOME_FAILED, OUTCOME_TIMED_OUT]
                .iter()
                .map(|o| {
                    m.worker
                        .attempts_total
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
            .attempts_failed_total
            .with_label_values(&["default", "http"]);
        let retries = m
            .worker
            .attempts_retried_total
            .with_label_values(&["default", "http"]);
        assert_eq!((failed.get(), retries.get()), (2, 1));
    }

    #[test]
    fn metric_labels_keep_the_documented_values() {
        // The words `ax history` prints for the same attempts.
        for (outcome, label) in [
            (AttemptOutcome::Succeeded, OUTCOME_SUCCEEDED),
            (AttemptOutcome::Failed, OUTCOME_FAILED),
            (AttemptOutcome::TimedOut, OUTCOME_TIMED_OUT),
            (AttemptOutcome::Killed, OUTCOME_KILLED),
        ] {
            assert_eq!(metric_outcome(outcome), label);
            assert_eq!(outcome.as_str(), label);
        }
        assert_eq!(metric_outcome(AttemptOutcome::Panicked), OUTCOME_FAILED);
        assert_eq!(metric_outcome(AttemptOutcome::DeadLettered), OUTCOME_FAILED);
        // The deprecated aliases keep the words of the release before.
        assert_eq!(deprecated_outcome(OUTCOME_SUCCEEDED), "success");
        assert_eq!(deprecated_outcome(OUTCOME_FAILED), "failure");
        assert_eq!(deprecated_outcome(OUTCOME_TIMED_OUT), "timeout");
        assert_eq!(deprecated_outcome(OUTCOME_KILLED), "killed");
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
            FIRES_TOTAL,
            TASKS_SCHEDULED_TOTAL,
            ATTEMPTS_TOTAL,
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
            .find(|f| f.name() == FIRES_TOTAL)
            .unwrap()
            .get_metric()
            .iter()
            .map(|mt| mt.get_counter().get_value() as u64)
            .sum();
        assert_eq!(total, 1_000);
    }

    /// The sample lines of the family `name` in `text`, without the name, in order (a
    /// histogram's `_bucket`, `_sum` and `_count` lines keep their suffix).
    fn samples(text: &str, name: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter(|rest| {
                ["{", " ", "_bucket{", "_sum", "_count"]
                    .iter()
                    .any(|p| rest.starts_with(p))
            })
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_new_names_exist_at_zero_before_anything_happens() {
        let (registry, m) = metrics();
        m.touch("default", &["http"]);
        let text = gather_text(&registry);
        for outcome in ATTEMPT_OUTCOMES {
            let series = format!(
                "{ATTEMPTS_TOTAL}{{handler=\"http\",outcome=\"{outcome}\",queue=\"default\"}} 0\n"
            );
            assert!(text.contains(&series), "{series} missing from:\n{text}");
        }
        for series in [
            format!("{FIRES_TOTAL}{{queue=\"default\"}} 0\n"),
            format!("{ATTEMPTS_FAILED_TOTAL}{{handler=\"http\",queue=\"default\"}} 0\n"),
            format!("{ATTEMPTS_RETRIED_TOTAL}{{handler=\"http\",queue=\"default\"}} 0\n"),
            format!("{ATTEMPT_DURATION_SECONDS}_count{{handler=\"http\",outcome=\"succeeded\",queue=\"default\"}} 0\n"),
            format!("{EXECUTIONS_RUNNING} 0\n"),
            // The deprecated names, with the old words, until the next release.
            format!("{TASKS_EXECUTED_TOTAL}{{handler=\"http\",outcome=\"success\",queue=\"default\"}} 0\n"),
            format!("{ACTIVE_WORKERS} 0\n"),
        ] {
            assert!(text.contains(&series), "{series} missing from:\n{text}");
        }
        for (old, current) in DEPRECATED_ALIASES {
            assert!(text.contains(&format!("# TYPE {old} ")), "{old} missing");
            assert!(
                text.contains(&format!(
                    "# HELP {old} Deprecated: `{current}` under its old name"
                )),
                "{old}'s HELP does not name {current}"
            );
        }
    }

    #[test]
    fn each_alias_shows_its_current_series_with_the_old_outcome_words() {
        let (registry, m) = metrics();
        m.touch("default", &["http"]);
        m.record_scheduled("default");
        m.record_scheduled("other-queue");
        m.record_attempt("default", "http", &AttemptEnd::succeeded(), 0.2);
        let mut retried = AttemptEnd::new(AttemptOutcome::Failed, Some("503".into()));
        retried.retry_at = Some(ax_scheduler_core::UtcMillis(1));
        m.record_attempt("default", "http", &retried, 0.3);
        m.record_attempt(
            "default",
            "log",
            &AttemptEnd::new(AttemptOutcome::TimedOut, Some("timeout".into())),
            30.0,
        );
        m.record_attempt(
            "default",
            "http",
            &AttemptEnd::new(AttemptOutcome::Killed, Some("killed".into())),
            1.0,
        );
        m.worker.executions_running.add(3);
        m.worker.executions_running.sub(1);
        let text = gather_text(&registry);
        for (old, current) in DEPRECATED_ALIASES {
            let renamed: Vec<String> = samples(&text, current)
                .into_iter()
                .map(|line| {
                    DEPRECATED_OUTCOMES
                        .iter()
                        .fold(line, |line, (now, before)| {
                            line.replace(
                                &format!("outcome=\"{now}\""),
                                &format!("outcome=\"{before}\""),
                            )
                        })
                })
                .collect();
            assert!(!renamed.is_empty(), "{current} has no series");
            assert_eq!(samples(&text, old), renamed, "{old} is not {current}");
        }
        for series in [
            "scheduler_tasks_executed_total{handler=\"http\",outcome=\"success\",queue=\"default\"} 1\n",
            "scheduler_tasks_executed_total{handler=\"http\",outcome=\"failure\",queue=\"default\"} 1\n",
            "scheduler_tasks_executed_total{handler=\"log\",outcome=\"timeout\",queue=\"default\"} 1\n",
            "scheduler_tasks_executed_total{handler=\"http\",outcome=\"killed\",queue=\"default\"} 1\n",
            "scheduler_attempts_total{handler=\"http\",outcome=\"succeeded\",queue=\"default\"} 1\n",
            "scheduler_attempts_total{handler=\"log\",outcome=\"timed_out\",queue=\"default\"} 1\n",
            "scheduler_tasks_scheduled_total{queue=\"other-queue\"} 1\n",
            "scheduler_tasks_retried_total{handler=\"http\",queue=\"default\"} 1\n",
            "scheduler_active_workers 2\n",
            "scheduler_executions_running 2\n",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
        for line in text.lines().filter(|l| l.starts_with("scheduler_attempt")) {
            assert!(
                !["\"success\"", "\"failure\"", "\"timeout\""]
                    .iter()
                    .any(|w| line.contains(w)),
                "an old outcome word on a current series: {line}"
            );
        }
    }

    fn gather_text(registry: &Registry) -> String {
        let mut buf = Vec::new();
        prometheus::Encoder::encode(
            &prometheus::TextEncoder::new(),
            &registry.gather(),
            &mut buf,
        )
        .unwrap();
        String::from_utf8(buf).unwrap()
    }
}
