//! Prometheus metrics of one replica, under the fixed names the alert rules use.
//!
//! The names are a contract (alert-rules/, the Helm chart, docs): they are constants here and a
//! test checks every one appears in the exposition. Labels are limited to small, bounded sets
//! (`queue`, `handler`, `outcome`, `backend`, `channel`); task ids never become labels, since
//! every distinct value is a new time series.
//!
//! `queue` and `handler` values come from users' specs, so each is bounded: a replica exports
//! at most [`MAX_LABEL_VALUES`] distinct values of each (configured queues and built-in
//! handlers first) and counts the rest under [`OTHER_LABEL`], so a loop registering tasks
//! with generated queue names cannot create series without end.
//!
//! Counters are created at zero for every configured queue and built-in handler, so that
//! `rate()` sees the first increment and the names show up before anything happens. Gauges
//! of shared state (queue depth, dead letters) may be reported by every replica; the rules
//! combine them with `max`.
//!
//! On Linux the registry also carries the Prometheus client's process collector
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), whose names are the
//! client's and not constants here.

mod families;

use std::collections::HashSet;
use std::sync::{Arc, PoisonError, RwLock};

use ax_scheduler_core::{AttemptEnd, AttemptOutcome};
use families::{
    alerting_family, ProcessFamilies, QueueFamilies, SchedulerFamilies, WorkerFamilies,
};
use prometheus::{
    Encoder, GaugeVec, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
    TextEncoder,
};

/// Fires the leader enqueued (leader only). Labels: `queue`.
pub const TASKS_SCHEDULED_TOTAL: &str = "scheduler_tasks_scheduled_total";
/// Attempts that ended, by outcome. Labels: `queue`, `handler`, `outcome`.
pub const TASKS_EXECUTED_TOTAL: &str = "scheduler_tasks_executed_total";
/// Executions that failed (a subset of the executed ones). Labels: `queue`, `handler`.
pub const TASKS_FAILED_TOTAL: &str = "scheduler_tasks_failed_total";
/// Retries scheduled after a failure. Labels: `queue`, `handler`.
pub const TASKS_RETRIED_TOTAL: &str = "scheduler_tasks_retried_total";
/// Executions in the dead-letter queue.
pub const DLQ_SIZE: &str = "scheduler_dlq_size";
/// Enqueue or start time minus due time, seconds. Labels: `queue`.
pub const SCHEDULE_LATENCY_SECONDS: &str = "scheduler_schedule_latency_seconds";
/// How long an execution waited because its concurrency key was at its limit. Labels:
/// `queue`.
pub const CONCURRENCY_WAIT_SECONDS: &str = "scheduler_concurrency_wait_seconds";
/// Execution run time, seconds. Labels: `queue`, `handler`, `outcome`.
pub const EXECUTION_DURATION_SECONDS: &str = "scheduler_execution_duration_seconds";
/// Executions waiting in a queue. Labels: `queue`.
pub const QUEUE_DEPTH: &str = "scheduler_queue_depth";
/// 1 while an operator has paused the queue (`ax queue pause`), else 0.
pub const QUEUE_PAUSED: &str = "scheduler_queue_paused";
/// Executions running on this replica.
pub const ACTIVE_WORKERS: &str = "scheduler_active_workers";
/// Attempts the worker pool's slow start lets run at once now (its concurrency once ramped).
pub const WORKER_CONCURRENCY_LIMIT: &str = "scheduler_worker_concurrency_limit";
/// 1 while this replica leads (or, with shards, owns at least one), else 0.
pub const IS_LEADER: &str = "scheduler_is_leader";
/// Shards this replica schedules (0 with one shard: see [`IS_LEADER`]).
pub const SHARDS_OWNED: &str = "scheduler_shards_owned";
/// Shards of the installation (`scheduler.shards`), so that rules can compare the owned
/// total with it.
pub const SHARDS: &str = "scheduler_shards";
/// Times this replica became leader.
pub const LEADER_CHANGES_TOTAL: &str = "scheduler_leader_changes_total";
/// Registered specs that failed validation.
pub const INVALID_SPECS: &str = "scheduler_invalid_specs";
/// Registered specs that are paused.
pub const TASKS_PAUSED: &str = "scheduler_tasks_paused";
/// Namespaces an operator paused.
pub const NAMESPACES_PAUSED: &str = "scheduler_namespaces_paused";
/// Tasks whose circuit breaker is open: one fire in ten is dispatched.
pub const TASKS_THROTTLED: &str = "scheduler_tasks_throttled";
/// Task state records the last takeover could not decode (passed over, rewritten at the
/// task's next state write).
pub const UNDECODABLE_STATES: &str = "scheduler_undecodable_states";
/// Redis settings that would lose ax's queue state (no persistence, an evicting
/// `maxmemory-policy`), as found at start; 0 when none.
pub const REDIS_CONFIG_WARNINGS: &str = "scheduler_redis_config_warnings";
/// Queues that tasks use where executions wait and no worker serves them (the leader's
/// count; 0 on other replicas).
pub const UNSERVED_QUEUES: &str = "scheduler_unserved_queues";
/// Size of etcd's database file, bytes (what its quota applies to).
pub const ETCD_DB_BYTES: &str = "scheduler_etcd_db_bytes";
/// etcd's database quota, bytes (reported by etcd 3.6+, else `etcd.quota_backend_bytes`).
pub const ETCD_DB_QUOTA_BYTES: &str = "scheduler_etcd_db_quota_bytes";
/// 1 while the audit log holds more records than `audit.max_records` (all younger than the
/// retention, so kept), as this replica's last audit write found; else 0.
pub const AUDIT_OVER_CAPACITY: &str = "scheduler_audit_over_capacity";
/// Age of the oldest waiting execution, seconds. Labels: `queue`.
pub const OLDEST_QUEUED_AGE_SECONDS: &str = "scheduler_oldest_queued_age_seconds";
/// Failed calls to a backend. Labels: `backend` (`etcd`, `redis`).
pub const BACKEND_ERRORS_TOTAL: &str = "scheduler_backend_errors_total";
/// `/api/v1` requests refused before reaching a route. Labels: `reason` (one of
/// [`crate::api::REFUSAL_REASONS`]).
pub const API_AUTH_FAILURES_TOTAL: &str = "scheduler_api_auth_failures_total";
/// Fires of tasks with `expect_success_within` not followed by a success in time. Labels:
/// `reason` (one of [`ax_scheduler_core::deadline::MissReason::ALL`]).
pub const DEADLINE_MISSES_TOTAL: &str = "scheduler_deadline_misses_total";
/// Task states in doubt the leader repaired. Label: `how` (`history`, `lost`).
pub const STATE_REPAIRS_TOTAL: &str = "scheduler_state_repairs_total";
/// `how` of a state repaired from the end found in the execution history.
pub const REPAIR_HISTORY: &str = "history";
/// `how` of a state repaired as lost: no end anywhere, no work left in its queue.
pub const REPAIR_LOST: &str = "lost";
/// Alerts handed to a channel. Labels: `channel`, `outcome`.
pub const ALERTS_TOTAL: &str = "scheduler_alerts_total";
/// Always 1; the label carries the version.
pub const BUILD_INFO: &str = "ax_build_info";

/// Every fixed metric name.
pub const ALL_NAMES: &[&str] = &[
    TASKS_SCHEDULED_TOTAL,
    TASKS_EXECUTED_TOTAL,
    TASKS_FAILED_TOTAL,
    TASKS_RETRIED_TOTAL,
    DLQ_SIZE,
    SCHEDULE_LATENCY_SECONDS,
    CONCURRENCY_WAIT_SECONDS,
    EXECUTION_DURATION_SECONDS,
    QUEUE_DEPTH,
    QUEUE_PAUSED,
    ACTIVE_WORKERS,
    WORKER_CONCURRENCY_LIMIT,
    IS_LEADER,
    LEADER_CHANGES_TOTAL,
    INVALID_SPECS,
    TASKS_PAUSED,
    NAMESPACES_PAUSED,
    TASKS_THROTTLED,
    OLDEST_QUEUED_AGE_SECONDS,
    UNSERVED_QUEUES,
    ETCD_DB_BYTES,
    ETCD_DB_QUOTA_BYTES,
    BACKEND_ERRORS_TOTAL,
    API_AUTH_FAILURES_TOTAL,
    DEADLINE_MISSES_TOTAL,
    STATE_REPAIRS_TOTAL,
    ALERTS_TOTAL,
    BUILD_INFO,
];

/// `outcome` of an execution that succeeded.
pub const OUTCOME_SUCCESS: &str = "success";
/// `outcome` of an execution that failed (error returned).
pub const OUTCOME_FAILURE: &str = "failure";
/// `outcome` of an execution stopped at its timeout.
pub const OUTCOME_TIMEOUT: &str = "timeout";
/// Execution outcomes, the values of the `outcome` label of executions.
pub const EXECUTION_OUTCOMES: &[&str] = &[OUTCOME_SUCCESS, OUTCOME_FAILURE, OUTCOME_TIMEOUT];

/// `outcome` of an alert delivered.
pub const ALERT_SENT: &str = "sent";
/// `outcome` of an alert whose delivery failed after retries.
pub const ALERT_FAILED: &str = "failed";
/// `outcome` of an alert suppressed as a duplicate or deferred by the rate limit.
pub const ALERT_SUPPRESSED: &str = "suppressed";

/// `backend` label value for etcd.
pub const BACKEND_ETCD: &str = "etcd";
/// `backend` label value for Redis.
pub const BACKEND_REDIS: &str = "redis";

/// Most distinct values of the `queue` label, and of the `handler` label, a replica exports.
pub const MAX_LABEL_VALUES: usize = 100;
/// The `queue` or `handler` value counting every value past [`MAX_LABEL_VALUES`].
pub const OTHER_LABEL: &str = "other";

/// The values of one user-chosen label seen so far, at most [`MAX_LABEL_VALUES`].
#[derive(Debug, Default)]
struct BoundedLabel {
    seen: RwLock<HashSet<String>>,
}

impl BoundedLabel {
    /// `value` if it is one of the first [`MAX_LABEL_VALUES`] seen, else [`OTHER_LABEL`].
    fn get<'a>(&self, value: &'a str) -> &'a str {
        // Every execution asks, and all but the first hundred values only read: a shared
        // lock. A panic elsewhere while holding it leaves the set consistent (an insert is
        // the only change), so a poisoned lock is used as it is.
        if self
            .seen
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(value)
        {
            return value;
        }
        let mut seen = self.seen.write().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            value
        } else if seen.len() < MAX_LABEL_VALUES {
            seen.insert(value.to_owned());
            value
        } else {
            OTHER_LABEL
        }
    }
}

/// The `outcome` label of the execution metrics for an attempt's outcome.
pub fn metric_outcome(outcome: AttemptOutcome) -> &'static str {
    match outcome {
        AttemptOutcome::Succeeded => OUTCOME_SUCCESS,
        AttemptOutcome::TimedOut => OUTCOME_TIMEOUT,
        AttemptOutcome::Failed | AttemptOutcome::Panicked | AttemptOutcome::DeadLettered => {
            OUTCOME_FAILURE
        }
        AttemptOutcome::Killed | AttemptOutcome::Released => outcome.as_str(),
    }
}

/// Handlers built into ax, whose series exist from the start.
pub const BUILTIN_HANDLERS: &[&str] = &["http", "log"];

/// Schedule latency buckets, 1 ms to 60 s.
pub const SCHEDULE_LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Concurrency wait buckets, 10 ms to 1 h: a limited execution waits for others to finish.
pub const CONCURRENCY_WAIT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Execution duration buckets, 5 ms to 10 min.
pub const EXECUTION_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// The metrics of one replica and the registry that exposes them.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    queue_labels: Arc<BoundedLabel>,
    handler_labels: Arc<BoundedLabel>,
    /// [`TASKS_SCHEDULED_TOTAL`] by `queue`.
    pub tasks_scheduled_total: IntCounterVec,
    /// [`TASKS_EXECUTED_TOTAL`] by `queue`, `handler`, `outcome`.
    pub tasks_executed_total: IntCounterVec,
    /// [`TASKS_FAILED_TOTAL`] by `queue`, `handler`.
    pub tasks_failed_total: IntCounterVec,
    /// [`TASKS_RETRIED_TOTAL`] by `queue`, `handler`.
    pub tasks_retried_total: IntCounterVec,
    /// [`DLQ_SIZE`].
    pub dlq_size: IntGauge,
    /// [`SCHEDULE_LATENCY_SECONDS`] by `queue`.
    pub schedule_latency_seconds: HistogramVec,
    /// [`EXECUTION_DURATION_SECONDS`] by `queue`, `handler`, `outcome`.
    pub execution_duration_seconds: HistogramVec,
    /// [`CONCURRENCY_WAIT_SECONDS`] by `queue`.
    pub concurrency_wait_seconds: HistogramVec,
    /// [`QUEUE_DEPTH`] by `queue`.
    pub queue_depth: IntGaugeVec,
    /// [`QUEUE_PAUSED`] by `queue`.
    pub queue_paused: IntGaugeVec,
    /// [`ACTIVE_WORKERS`].
    pub active_workers: IntGauge,
    /// [`WORKER_CONCURRENCY_LIMIT`].
    pub worker_concurrency_limit: IntGauge,
    /// [`IS_LEADER`].
    pub is_leader: IntGauge,
    /// [`LEADER_CHANGES_TOTAL`].
    pub leader_changes_total: IntCounter,
    /// [`SHARDS_OWNED`].
    pub shards_owned: IntGauge,
    /// [`SHARDS`].
    pub shards: IntGauge,
    /// [`INVALID_SPECS`].
    pub invalid_specs: IntGauge,
    /// [`TASKS_PAUSED`].
    pub tasks_paused: IntGauge,
    /// [`NAMESPACES_PAUSED`].
    pub namespaces_paused: IntGauge,
    /// [`TASKS_THROTTLED`].
    pub tasks_throttled: IntGauge,
    /// [`UNDECODABLE_STATES`].
    pub undecodable_states: IntGauge,
    /// [`REDIS_CONFIG_WARNINGS`].
    pub redis_config_warnings: IntGauge,
    /// [`UNSERVED_QUEUES`].
    pub unserved_queues: IntGauge,
    /// [`ETCD_DB_BYTES`].
    pub etcd_db_bytes: IntGauge,
    /// [`ETCD_DB_QUOTA_BYTES`].
    pub etcd_db_quota_bytes: IntGauge,
    /// [`AUDIT_OVER_CAPACITY`].
    pub audit_over_capacity: IntGauge,
    /// [`OLDEST_QUEUED_AGE_SECONDS`] by `queue`.
    pub oldest_queued_age_seconds: GaugeVec,
    /// [`BACKEND_ERRORS_TOTAL`] by `backend`.
    pub backend_errors_total: IntCounterVec,
    /// [`API_AUTH_FAILURES_TOTAL`] by `reason`.
    pub api_auth_failures_total: IntCounterVec,
    /// [`DEADLINE_MISSES_TOTAL`] by `reason`.
    pub deadline_misses_total: IntCounterVec,
    /// [`STATE_REPAIRS_TOTAL`] by `how`.
    pub state_repairs_total: IntCounterVec,
    /// [`ALERTS_TOTAL`] by `channel`, `outcome`.
    pub alerts_total: IntCounterVec,
    /// [`BUILD_INFO`] by `version`.
    pub build_info: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers every metric, with series at zero for each of `queues`, the
    /// built-in handlers and the alert `channels` (such as `feishu`, `webhook`).
    pub fn new(queues: &[String], channels: &[&str]) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let s = SchedulerFamilies::register(&registry)?;
        let w = WorkerFamilies::register(&registry)?;
        let q = QueueFamilies::register(&registry)?;
        let p = ProcessFamilies::register(&registry)?;
        let alerts_total = alerting_family(&registry)?;
        let m = Metrics {
            tasks_scheduled_total: s.tasks_scheduled_total,
            tasks_executed_total: w.tasks_executed_total,
            tasks_failed_total: w.tasks_failed_total,
            tasks_retried_total: w.tasks_retried_total,
            dlq_size: q.dlq_size,
            schedule_latency_seconds: s.schedule_latency_seconds,
            concurrency_wait_seconds: w.concurrency_wait_seconds,
            execution_duration_seconds: w.execution_duration_seconds,
            queue_depth: q.queue_depth,
            queue_paused: q.queue_paused,
            active_workers: w.active_workers,
            worker_concurrency_limit: w.worker_concurrency_limit,
            is_leader: s.is_leader,
            shards_owned: s.shards_owned,
            shards: s.shards,
            leader_changes_total: s.leader_changes_total,
            invalid_specs: s.invalid_specs,
            tasks_paused: s.tasks_paused,
            namespaces_paused: s.namespaces_paused,
            tasks_throttled: s.tasks_throttled,
            undecodable_states: s.undecodable_states,
            redis_config_warnings: p.redis_config_warnings,
            etcd_db_bytes: p.etcd_db_bytes,
            etcd_db_quota_bytes: p.etcd_db_quota_bytes,
            audit_over_capacity: p.audit_over_capacity,
            unserved_queues: s.unserved_queues,
            oldest_queued_age_seconds: q.oldest_queued_age_seconds,
            backend_errors_total: p.backend_errors_total,
            api_auth_failures_total: p.api_auth_failures_total,
            deadline_misses_total: s.deadline_misses_total,
            state_repairs_total: s.state_repairs_total,
            alerts_total,
            build_info: p.build_info,
            registry,
            queue_labels: Arc::default(),
            handler_labels: Arc::default(),
        };
        m.seed(queues, channels)?;
        Ok(m)
    }

    /// Sets what is known from the start: the build info, the process collector, and the
    /// series at zero of every bounded label value known now.
    fn seed(&self, queues: &[String], channels: &[&str]) -> Result<(), prometheus::Error> {
        self.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        // CPU and memory per replica, for the dashboard and capacity planning: the kubelet's
        // container metrics are not always scraped, and these need no extra exporter.
        #[cfg(target_os = "linux")]
        self.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        for backend in [BACKEND_ETCD, BACKEND_REDIS] {
            self.backend_errors_total.with_label_values(&[backend]);
        }
        for reason in crate::api::REFUSAL_REASONS {
            self.api_auth_failures_total.with_label_values(&[*reason]);
        }
        for reason in ax_scheduler_core::deadline::MissReason::ALL {
            self.deadline_misses_total.with_label_values(&[reason]);
        }
        for how in [REPAIR_HISTORY, REPAIR_LOST] {
            self.state_repairs_total.with_label_values(&[how]);
        }
        for queue in queues {
            self.touch_queue(queue);
        }
        for channel in channels {
            for outcome in [ALERT_SENT, ALERT_FAILED, ALERT_SUPPRESSED] {
                self.alerts_total.with_label_values(&[*channel, outcome]);
            }
        }
        Ok(())
    }

    /// The `queue` label value for `queue` (see [`MAX_LABEL_VALUES`]). A partition's
    /// physical name (`hot#p3`) counts as its queue's, so a partitioned queue has one series
    /// as the gauges (summed over its partitions) do.
    pub fn queue_label<'a>(&self, queue: &'a str) -> &'a str {
        let logical = ax_queue::split_partition(queue).map_or(queue, |(logical, _)| logical);
        self.queue_labels.get(logical)
    }

    /// The `handler` label value for `handler` (see [`MAX_LABEL_VALUES`]).
    pub fn handler_label<'a>(&self, handler: &'a str) -> &'a str {
        self.handler_labels.get(handler)
    }

    /// Creates the zero series of `queue` (done for configured queues by [`Metrics::new`]).
    pub fn touch_queue(&self, queue: &str) {
        let queue = self.queue_label(queue);
        self.tasks_scheduled_total.with_label_values(&[queue]);
        self.schedule_latency_seconds.with_label_values(&[queue]);
        self.concurrency_wait_seconds.with_label_values(&[queue]);
        self.queue_depth.with_label_values(&[queue]);
        self.queue_paused.with_label_values(&[queue]);
        self.oldest_queued_age_seconds.with_label_values(&[queue]);
        for handler in BUILTIN_HANDLERS {
            let handler = self.handler_label(handler);
            self.tasks_failed_total.with_label_values(&[queue, handler]);
            self.tasks_retried_total
                .with_label_values(&[queue, handler]);
            for outcome in EXECUTION_OUTCOMES {
                self.tasks_executed_total
                    .with_label_values(&[queue, handler, outcome]);
                self.execution_duration_seconds
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
        self.tasks_executed_total
            .with_label_values(&[queue, handler, outcome])
            .inc();
        if end.outcome.is_failure() {
            self.tasks_failed_total
                .with_label_values(&[queue, handler])
                .inc();
            if !end.is_last() {
                self.tasks_retried_total
                    .with_label_values(&[queue, handler])
                    .inc();
            }
        }
        self.execution_duration_seconds
            .with_label_values(&[queue, handler, outcome])
            .observe(seconds);
    }

    /// Records the lateness of a fire's first start, in `queue`.
    pub fn record_start_lateness(&self, queue: &str, seconds: f64) {
        self.schedule_latency_seconds
            .with_label_values(&[self.queue_label(queue)])
            .observe(seconds);
    }

    /// Records how long an execution of `queue` waited for a slot of its concurrency key.
    pub fn record_concurrency_wait(&self, queue: &str, seconds: f64) {
        self.concurrency_wait_seconds
            .with_label_values(&[self.queue_label(queue)])
            .observe(seconds);
    }

    /// Counts a fire enqueued to `queue`.
    pub fn record_scheduled(&self, queue: &str) {
        self.tasks_scheduled_total
            .with_label_values(&[self.queue_label(queue)])
            .inc();
    }

    /// Records a leadership change and sets [`IS_LEADER`].
    pub fn set_leader(&self, leading: bool) {
        // Only gains count: a handover is one change, as the flapping alert assumes.
        if leading && self.is_leader.get() != 1 {
            self.leader_changes_total.inc();
        }
        self.is_leader.set(i64::from(leading));
    }

    /// Sets how many shards this replica schedules, and [`IS_LEADER`] to whether it
    /// schedules any. Not a leadership change: shards move at every join and leave, which
    /// the flapping alert must not count.
    pub fn set_shards_owned(&self, owned: usize) {
        self.shards_owned
            .set(i64::try_from(owned).unwrap_or(i64::MAX));
        self.is_leader.set(i64::from(owned > 0));
    }

    /// Counts a failed call to `backend` ([`BACKEND_ETCD`], [`BACKEND_REDIS`]).
    pub fn backend_error(&self, backend: &str) {
        self.backend_errors_total
            .with_label_values(&[backend])
            .inc();
    }

    /// Counts `missed` fires whose deadline passed, for `reason`.
    pub fn record_deadline_misses(&self, reason: &str, missed: u64) {
        self.deadline_misses_total
            .with_label_values(&[reason])
            .inc_by(missed);
    }

    /// The registry, for callers that add metrics of their own.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Everything registered, in the Prometheus text format.
    pub fn gather_text(&self) -> Result<String, prometheus::Error> {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buf)?;
        String::from_utf8(buf).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Metrics {
        Metrics::new(&["default".to_owned()], &["webhook"]).unwrap()
    }

    #[test]
    fn every_fixed_name_is_exposed_from_the_start() {
        let text = metrics().gather_text().unwrap();
        for name in ALL_NAMES {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing from:\n{text}"
            );
        }
        assert!(
            text.contains("scheduler_queue_depth{queue=\"default\"} 0"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "ax_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_metrics_are_exposed_on_linux() {
        let text = metrics().gather_text().unwrap();
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
        }
    }

    /// docs/metrics.md is what users read: each family has its row there, of its type, and
    /// its HELP text is the start of the row's description (which may go on with details),
    /// so the two can never say different things.
    #[test]
    fn help_texts_and_types_are_the_documented_ones() {
        let doc = include_str!("../../docs/metrics.md");
        let rows: std::collections::HashMap<&str, (&str, String)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l
                    .strip_prefix("| `")?
                    .trim_end_matches('|')
                    .split('|')
                    .map(str::trim)
                    .collect();
                let name = cells.first()?.strip_suffix('`')?;
                Some((name, (*cells.get(1)?, plain(cells.last()?))))
            })
            .collect();
        let text = metrics().gather_text().unwrap();
        let mut checked = 0;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("# HELP ") else {
                continue;
            };
            let (name, help) = rest.split_once(' ').unwrap();
            if !name.starts_with("scheduler_") && !name.starts_with("ax_") {
                continue;
            }
            let (kind, described) = rows
                .get(name)
                .unwrap_or_else(|| panic!("{name} has no row in docs/metrics.md"));
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "{name} is not a {kind} as documented"
            );
            let said = plain(help.trim_end_matches('.').trim_end_matches(')'));
            assert!(
                described.starts_with(&said),
                "{name}: HELP says `{help}`, docs/metrics.md says `{described}`"
            );
            checked += 1;
        }
        assert!(checked >= 25, "{checked} families checked");
    }

    /// Lower case at the start, markdown links as their text, HELP escapes undone.
    fn plain(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s.replace("\\\\", "\\");
        while let Some(open) = rest.find('[') {
            let Some(mid) = rest[open..].find("](").map(|i| open + i) else {
                break;
            };
            let Some(close) = rest[mid..].find(')').map(|i| mid + i) else {
                break;
            };
            out.push_str(&rest[..open]);
            out.push_str(&rest[open + 1..mid]);
            rest = rest[close + 1..].to_owned();
        }
        out.push_str(&rest);
        let mut chars = out.chars();
        chars.next().map_or_else(String::new, |c| {
            c.to_lowercase().collect::<String>() + chars.as_str()
        })
    }

    #[test]
    fn a_partition_counts_as_its_queue() {
        let m = metrics();
        assert_eq!(m.queue_label("hot#p3"), "hot");
        assert_eq!(m.queue_label("default"), "default");
        m.record_attempt("default#p1", "http", &AttemptEnd::succeeded(), 0.2);
        assert_eq!(
            m.tasks_executed_total
                .with_label_values(&["default", "http", "success"])
                .get(),
            1
        );
    }

    #[test]
    fn histogram_buckets_span_the_documented_ranges() {
        let text = metrics().gather_text().unwrap();
        for needle in [
            "scheduler_schedule_latency_seconds_bucket{queue=\"default\",le=\"0.001\"}",
            "scheduler_schedule_latency_seconds_bucket{queue=\"default\",le=\"60\"}",
            "scheduler_concurrency_wait_seconds_bucket{queue=\"default\",le=\"0.01\"}",
            "scheduler_concurrency_wait_seconds_bucket{queue=\"default\",le=\"3600\"}",
            "scheduler_execution_duration_seconds_bucket{handler=\"http\",outcome=\"success\",queue=\"default\",le=\"0.005\"}",
            "scheduler_execution_duration_seconds_bucket{handler=\"http\",outcome=\"success\",queue=\"default\",le=\"600\"}",
        ] {
            assert!(text.contains(needle), "{needle} missing");
        }
    }

    #[test]
    fn an_attempt_is_counted_once_in_each_counter_it_belongs_to() {
        let m = metrics();
        let executed = |q: &str| {
            EXECUTION_OUTCOMES
                .iter()
                .map(|o| {
                    m.tasks_executed_total
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
        let failed = m.tasks_failed_total.with_label_values(&["default", "http"]);
        let retries = m
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
        let m = metrics();
        // A loop registering tasks on generated queues and handlers.
        for i in 0..1_000 {
            let q = format!("q-{i}");
            m.record_scheduled(&q);
            m.record_start_lateness(&q, 0.01);
            m.record_attempt(&q, &format!("h-{i}"), &AttemptEnd::succeeded(), 0.1);
        }
        let families = m.registry.gather();
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

    #[test]
    fn leader_changes_count_gains_only() {
        let m = metrics();
        m.set_leader(false);
        assert_eq!(m.leader_changes_total.get(), 0);
        m.set_leader(true);
        m.set_leader(true);
        m.set_leader(false);
        assert_eq!((m.leader_changes_total.get(), m.is_leader.get()), (1, 0));
        m.set_leader(true);
        assert_eq!(m.leader_changes_total.get(), 2);
    }

    #[test]
    fn metrics_are_per_instance() {
        // Two instances (as in tests running servers side by side) do not collide.
        let a = metrics();
        let b = metrics();
        a.dlq_size.set(3);
        assert_eq!(b.dlq_size.get(), 0);
    }
}
