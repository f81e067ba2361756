//! Registration of the metric families, one group per part of the engine.
//!
//! [`super::Metrics`] keeps one flat field per family (callers name them directly); the
//! groups only keep each registration next to its relatives, so that the names, help texts
//! and labels of one part of the engine read together.

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

use super::{
    ACTIVE_WORKERS, ALERTS_TOTAL, API_AUTH_FAILURES_TOTAL, AUDIT_OVER_CAPACITY,
    BACKEND_ERRORS_TOTAL, BUILD_INFO, CONCURRENCY_WAIT_BUCKETS, CONCURRENCY_WAIT_SECONDS,
    DEADLINE_MISSES_TOTAL, DLQ_SIZE, ETCD_DB_BYTES, ETCD_DB_QUOTA_BYTES,
    EXECUTION_DURATION_BUCKETS, EXECUTION_DURATION_SECONDS, INVALID_SPECS, IS_LEADER,
    LEADER_CHANGES_TOTAL, OLDEST_QUEUED_AGE_SECONDS, QUEUE_DEPTH, QUEUE_PAUSED,
    REDIS_CONFIG_WARNINGS, SCHEDULE_LATENCY_BUCKETS, SCHEDULE_LATENCY_SECONDS, SHARDS,
    SHARDS_OWNED, STATE_REPAIRS_TOTAL, TASKS_EXECUTED_TOTAL, TASKS_FAILED_TOTAL,
    TASKS_RETRIED_TOTAL, TASKS_SCHEDULED_TOTAL, UNDECODABLE_STATES, UNSERVED_QUEUES,
    WORKER_CONCURRENCY_LIMIT,
};

/// The leader's firing: what it enqueued, how late, and who leads.
pub(super) struct SchedulerFamilies {
    pub(super) tasks_scheduled_total: IntCounterVec,
    pub(super) schedule_latency_seconds: HistogramVec,
    pub(super) is_leader: IntGauge,
    pub(super) leader_changes_total: IntCounter,
    pub(super) shards_owned: IntGauge,
    pub(super) shards: IntGauge,
    pub(super) invalid_specs: IntGauge,
    pub(super) undecodable_states: IntGauge,
    pub(super) unserved_queues: IntGauge,
    pub(super) deadline_misses_total: IntCounterVec,
    pub(super) state_repairs_total: IntCounterVec,
}

impl SchedulerFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(SchedulerFamilies {
            tasks_scheduled_total: counter_vec(
                registry,
                TASKS_SCHEDULED_TOTAL,
                "Fires enqueued by the leader.",
                &["queue"],
            )?,
            schedule_latency_seconds: histogram_vec(
                registry,
                SCHEDULE_LATENCY_SECONDS,
                "Enqueue or start time minus due time, in seconds.",
                &["queue"],
                SCHEDULE_LATENCY_BUCKETS,
            )?,
            is_leader: register(
                registry,
                IntGauge::new(IS_LEADER, "1 while this replica is the leader, else 0.")?,
            )?,
            leader_changes_total: register(
                registry,
                IntCounter::new(
                    LEADER_CHANGES_TOTAL,
                    "Times this replica gained or lost leadership.",
                )?,
            )?,
            shards_owned: register(
                registry,
                IntGauge::new(SHARDS_OWNED, "Shards this replica schedules.")?,
            )?,
            shards: register(
                registry,
                IntGauge::new(SHARDS, "Shards of the installation (scheduler.shards).")?,
            )?,
            invalid_specs: register(
                registry,
                IntGauge::new(
                    INVALID_SPECS,
                    "Registered task specs that failed validation.",
                )?,
            )?,
            undecodable_states: register(
                registry,
                IntGauge::new(
                    UNDECODABLE_STATES,
                    "Task state records the last takeover could not decode.",
                )?,
            )?,
            unserved_queues: register(
                registry,
                IntGauge::new(
                    UNSERVED_QUEUES,
                    "Queues where executions wait that no worker serves.",
                )?,
            )?,
            deadline_misses_total: counter_vec(
                registry,
                DEADLINE_MISSES_TOTAL,
                "Fires not followed by a successful execution within the task's \
                 expect_success_within, by reason.",
                &["reason"],
            )?,
            state_repairs_total: counter_vec(
                registry,
                STATE_REPAIRS_TOTAL,
                "Task states in doubt (executing long after their fire) the leader repaired, \
                 by how: from the execution history, or as lost.",
                &["how"],
            )?,
        })
    }
}

/// The executions a worker runs.
pub(super) struct WorkerFamilies {
    pub(super) tasks_executed_total: IntCounterVec,
    pub(super) tasks_failed_total: IntCounterVec,
    pub(super) tasks_retried_total: IntCounterVec,
    pub(super) execution_duration_seconds: HistogramVec,
    pub(super) concurrency_wait_seconds: HistogramVec,
    pub(super) active_workers: IntGauge,
    pub(super) worker_concurrency_limit: IntGauge,
}

impl WorkerFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(WorkerFamilies {
            tasks_executed_total: counter_vec(
                registry,
                TASKS_EXECUTED_TOTAL,
                "Executions finished, successful or not.",
                &["queue", "handler", "outcome"],
            )?,
            tasks_failed_total: counter_vec(
                registry,
                TASKS_FAILED_TOTAL,
                "Executions that failed (included in the executed total).",
                &["queue", "handler"],
            )?,
            tasks_retried_total: counter_vec(
                registry,
                TASKS_RETRIED_TOTAL,
                "Retries scheduled after a failed execution.",
                &["queue", "handler"],
            )?,
            execution_duration_seconds: histogram_vec(
                registry,
                EXECUTION_DURATION_SECONDS,
                "Execution run time, in seconds.",
                &["queue", "handler", "outcome"],
                EXECUTION_DURATION_BUCKETS,
            )?,
            concurrency_wait_seconds: histogram_vec(
                registry,
                CONCURRENCY_WAIT_SECONDS,
                "Time an execution waited for a slot of its concurrency key, in seconds.",
                &["queue"],
                CONCURRENCY_WAIT_BUCKETS,
            )?,
            active_workers: register(
                registry,
                IntGauge::new(ACTIVE_WORKERS, "Executions running on this replica.")?,
            )?,
            worker_concurrency_limit: register(
                registry,
                IntGauge::new(
                    WORKER_CONCURRENCY_LIMIT,
                    "Executions the worker pool's slow start lets run at once now.",
                )?,
            )?,
        })
    }
}

/// The shared queue state in Redis.
pub(super) struct QueueFamilies {
    pub(super) dlq_size: IntGauge,
    pub(super) queue_depth: IntGaugeVec,
    pub(super) queue_paused: IntGaugeVec,
    pub(super) oldest_queued_age_seconds: GaugeVec,
}

impl QueueFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(QueueFamilies {
            dlq_size: register(
                registry,
                IntGauge::new(DLQ_SIZE, "Executions in the dead-letter queue.")?,
            )?,
            queue_depth: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(QUEUE_DEPTH, "Executions waiting in the queue."),
                    &["queue"],
                )?,
            )?,
            queue_paused: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        QUEUE_PAUSED,
                        "1 while an operator has paused the queue, else 0.",
                    ),
                    &["queue"],
                )?,
            )?,
            oldest_queued_age_seconds: register(
                registry,
                GaugeVec::new(
                    Opts::new(
                        OLDEST_QUEUED_AGE_SECONDS,
                        "Age of the oldest waiting execution, in seconds.",
                    ),
                    &["queue"],
                )?,
            )?,
        })
    }
}

/// The replica itself and its backends.
pub(super) struct ProcessFamilies {
    pub(super) redis_config_warnings: IntGauge,
    pub(super) etcd_db_bytes: IntGauge,
    pub(super) etcd_db_quota_bytes: IntGauge,
    pub(super) audit_over_capacity: IntGauge,
    pub(super) backend_errors_total: IntCounterVec,
    pub(super) api_auth_failures_total: IntCounterVec,
    pub(super) build_info: IntGaugeVec,
}

impl ProcessFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(ProcessFamilies {
            redis_config_warnings: register(
                registry,
                IntGauge::new(
                    REDIS_CONFIG_WARNINGS,
                    "Redis settings that would lose ax's queue state, found at start.",
                )?,
            )?,
            etcd_db_bytes: register(
                registry,
                IntGauge::new(ETCD_DB_BYTES, "Size of etcd's database file, in bytes.")?,
            )?,
            etcd_db_quota_bytes: register(
                registry,
                IntGauge::new(ETCD_DB_QUOTA_BYTES, "etcd's database quota, in bytes.")?,
            )?,
            audit_over_capacity: register(
                registry,
                IntGauge::new(
                    AUDIT_OVER_CAPACITY,
                    "1 while the audit log holds more records than audit.max_records.",
                )?,
            )?,
            backend_errors_total: counter_vec(
                registry,
                BACKEND_ERRORS_TOTAL,
                "Failed calls to a backend.",
                &["backend"],
            )?,
            api_auth_failures_total: counter_vec(
                registry,
                API_AUTH_FAILURES_TOTAL,
                "API requests refused for a missing, wrong or insufficient token.",
                &["reason"],
            )?,
            build_info: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(BUILD_INFO, "Always 1; labelled with the ax version."),
                    &["version"],
                )?,
            )?,
        })
    }
}

/// The alerts handed to each channel.
pub(super) fn alerting_family(registry: &Registry) -> Result<IntCounterVec, prometheus::Error> {
    counter_vec(
        registry,
        ALERTS_TOTAL,
        "Alerts handed to a channel, by outcome.",
        &["channel", "outcome"],
    )
}

fn register<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    c: C,
) -> Result<C, prometheus::Error> {
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    register(registry, IntCounterVec::new(Opts::new(name, help), labels)?)
}

fn histogram_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> Result<HistogramVec, prometheus::Error> {
    register(
        registry,
        HistogramVec::new(
            HistogramOpts::new(name, help).buckets(buckets.to_vec()),
            labels,
        )?,
    )
}
