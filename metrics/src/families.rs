//! Registration of the metric families, one group per part of ax, each family's name, help
//! text, labels and buckets written once.
//!
//! The groups keep each registration next to its relatives, so that the names, help texts
//! and labels of one part read together. The service registers every group; the embedded
//! kernel registers the ones it has a meaning for ([`FireFamilies`], [`WorkerFamilies`],
//! [`dead_letter_family`], [`deadline_miss_family`]), on a registry its user passes in. docs/metrics.md describes
//! each family, and a test of the service holds each HELP text to its row there.

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

use crate::alias::register_alias;
use crate::names::{
    ACTIVE_WORKERS, ALERTS_TOTAL, API_AUTH_FAILURES_TOTAL, ATTEMPTS_ABANDONED_TOTAL,
    ATTEMPTS_FAILED_TOTAL, ATTEMPTS_RETRIED_TOTAL, ATTEMPTS_TOTAL, ATTEMPT_DURATION_SECONDS,
    AUDIT_OVER_CAPACITY, BACKEND_ERRORS_TOTAL, BUILD_INFO, CONCURRENCY_WAIT_BUCKETS,
    CONCURRENCY_WAIT_SECONDS, DEADLINE_MISSES_TOTAL, DLQ_SIZE, ETCD_DB_BYTES, ETCD_DB_QUOTA_BYTES,
    EXECUTIONS_RUNNING, EXECUTION_DURATION_BUCKETS, EXECUTION_DURATION_SECONDS, FIRES_TOTAL,
    INVALID_SPECS, IS_LEADER, LEADER_CHANGES_TOTAL, LEADER_STEP_DOWNS_TOTAL, LOOP_PANICS_TOTAL,
    NAMESPACES_PAUSED, OLDEST_QUEUED_AGE_SECONDS, QUEUE_DEPTH, QUEUE_PAUSED, REDIS_CONFIG_WARNINGS,
    SCHEDULE_LATENCY_BUCKETS, SCHEDULE_LATENCY_SECONDS, SHARDS, SHARDS_OWNED, STATE_REPAIRS_TOTAL,
    TASKS_EXECUTED_TOTAL, TASKS_FAILED_TOTAL, TASKS_PAUSED, TASKS_RETRIED_TOTAL,
    TASKS_SCHEDULED_TOTAL, TASKS_THROTTLED, UNDECODABLE_STATES, UNSERVED_QUEUES,
    WORKER_CONCURRENCY_LIMIT,
};

/// The fires: how many were dispatched, and how late each first started.
#[derive(Clone, Debug)]
pub struct FireFamilies {
    /// [`FIRES_TOTAL`] by `queue` (and its deprecated alias [`TASKS_SCHEDULED_TOTAL`]).
    pub fires_total: IntCounterVec,
    /// `scheduler_schedule_latency_seconds` by `queue`.
    pub schedule_latency_seconds: HistogramVec,
}

impl FireFamilies {
    /// Registers the group on `registry`, with its deprecated alias.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let fires_total = counter_vec(
            registry,
            FIRES_TOTAL,
            "Fires the leader enqueued (leader only: sum over replicas).",
            &["queue"],
        )?;
        register_alias(
            registry,
            &fires_total,
            TASKS_SCHEDULED_TOTAL,
            FIRES_TOTAL,
            &["queue"],
        )?;
        Ok(FireFamilies {
            fires_total,
            schedule_latency_seconds: histogram_vec(
                registry,
                SCHEDULE_LATENCY_SECONDS,
                "Start of a scheduled execution's first attempt minus its fire (origin schedule or parent).",
                &["queue"],
                SCHEDULE_LATENCY_BUCKETS,
            )?,
        })
    }
}

/// Leadership and what the leader holds.
#[derive(Clone, Debug)]
pub struct SchedulerFamilies {
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
    /// [`UNSERVED_QUEUES`].
    pub unserved_queues: IntGauge,
    /// [`DEADLINE_MISSES_TOTAL`].
    pub deadline_misses_total: IntCounterVec,
    /// [`STATE_REPAIRS_TOTAL`].
    pub state_repairs_total: IntCounterVec,
    /// [`LEADER_STEP_DOWNS_TOTAL`].
    pub leader_step_downs_total: IntCounterVec,
}

impl SchedulerFamilies {
    /// Registers the group on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(SchedulerFamilies {
            is_leader: register(
                registry,
                IntGauge::new(IS_LEADER, "1 while this replica leads.")?,
            )?,
            leader_changes_total: register(
                registry,
                IntCounter::new(LEADER_CHANGES_TOTAL, "Times this replica became leader.")?,
            )?,
            shards_owned: register(
                registry,
                IntGauge::new(SHARDS_OWNED, "Shards this replica schedules.")?,
            )?,
            shards: register(
                registry,
                IntGauge::new(SHARDS, "`scheduler.shards` of this replica.")?,
            )?,
            invalid_specs: register(
                registry,
                IntGauge::new(INVALID_SPECS, "Registered specs that fail validation (leader only: take the max over replicas).")?,
            )?,
            tasks_paused: register(
                registry,
                IntGauge::new(
                    TASKS_PAUSED,
                    "Registered specs that are paused (leader only: take the max over replicas).",
                )?,
            )?,
            namespaces_paused: register(
                registry,
                IntGauge::new(
                    NAMESPACES_PAUSED,
                    "Namespaces an operator paused (leader only: take the max over replicas).",
                )?,
            )?,
            tasks_throttled: register(
                registry,
                IntGauge::new(
                    TASKS_THROTTLED,
                    "Tasks whose circuit breaker is open (leader only: sum over replicas).",
                )?,
            )?,
            undecodable_states: register(
                registry,
                IntGauge::new(
                    UNDECODABLE_STATES,
                    "State records the last takeover could not decode (leader only: take the max over replicas).",
                )?,
            )?,
            unserved_queues: register(
                registry,
                IntGauge::new(
                    UNSERVED_QUEUES,
                    "Queues tasks use where executions wait and no worker serves them (leader only: take the max over replicas).",
                )?,
            )?,
            deadline_misses_total: deadline_miss_family(registry)?,
            state_repairs_total: counter_vec(
                registry,
                STATE_REPAIRS_TOTAL,
                "Task states in doubt the leader repaired (leader only: sum over replicas).",
                &["how"],
            )?,
            leader_step_downs_total: counter_vec(
                registry,
                LEADER_STEP_DOWNS_TOTAL,
                "Terms that gave their key up though they held it, so that a replica able to act leads.",
                &["reason"],
            )?,
        })
    }
}

/// The executions a worker runs, attempt by attempt.
///
/// Each family's deprecated name ([`crate::DEPRECATED_ALIASES`]) is registered beside it as
/// a view of it: recording into a field here shows under both names.
#[derive(Clone, Debug)]
pub struct WorkerFamilies {
    /// [`ATTEMPTS_TOTAL`].
    pub attempts_total: IntCounterVec,
    /// [`ATTEMPTS_FAILED_TOTAL`].
    pub attempts_failed_total: IntCounterVec,
    /// [`ATTEMPTS_RETRIED_TOTAL`].
    pub attempts_retried_total: IntCounterVec,
    /// [`ATTEMPT_DURATION_SECONDS`].
    pub attempt_duration_seconds: HistogramVec,
    /// [`CONCURRENCY_WAIT_SECONDS`].
    pub concurrency_wait_seconds: HistogramVec,
    /// [`EXECUTIONS_RUNNING`].
    pub executions_running: IntGauge,
    /// [`WORKER_CONCURRENCY_LIMIT`].
    pub worker_concurrency_limit: IntGauge,
}

impl WorkerFamilies {
    /// Registers the group on `registry`, with the deprecated aliases.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        const ATTEMPT: &[&str] = &["queue", "handler", "outcome"];
        const HANDLER: &[&str] = &["queue", "handler"];
        let attempts_total =
            counter_vec(registry, ATTEMPTS_TOTAL, "Attempts that ended.", ATTEMPT)?;
        let attempts_failed_total = counter_vec(
            registry,
            ATTEMPTS_FAILED_TOTAL,
            "Attempts that failed.",
            HANDLER,
        )?;
        let attempts_retried_total = counter_vec(
            registry,
            ATTEMPTS_RETRIED_TOTAL,
            "Failed attempts followed by a retry.",
            HANDLER,
        )?;
        let attempt_duration_seconds = histogram_vec(
            registry,
            ATTEMPT_DURATION_SECONDS,
            "Run time of an attempt.",
            ATTEMPT,
            EXECUTION_DURATION_BUCKETS,
        )?;
        let executions_running = register(
            registry,
            IntGauge::new(
                EXECUTIONS_RUNNING,
                "Executions whose attempt runs on this replica now.",
            )?,
        )?;
        register_alias(
            registry,
            &attempts_total,
            TASKS_EXECUTED_TOTAL,
            ATTEMPTS_TOTAL,
            ATTEMPT,
        )?;
        register_alias(
            registry,
            &attempts_failed_total,
            TASKS_FAILED_TOTAL,
            ATTEMPTS_FAILED_TOTAL,
            HANDLER,
        )?;
        register_alias(
            registry,
            &attempts_retried_total,
            TASKS_RETRIED_TOTAL,
            ATTEMPTS_RETRIED_TOTAL,
            HANDLER,
        )?;
        register_alias(
            registry,
            &attempt_duration_seconds,
            EXECUTION_DURATION_SECONDS,
            ATTEMPT_DURATION_SECONDS,
            ATTEMPT,
        )?;
        register_alias(
            registry,
            &executions_running,
            ACTIVE_WORKERS,
            EXECUTIONS_RUNNING,
            &[],
        )?;
        Ok(WorkerFamilies {
            attempts_total,
            attempts_failed_total,
            attempts_retried_total,
            attempt_duration_seconds,
            concurrency_wait_seconds: histogram_vec(
                registry,
                CONCURRENCY_WAIT_SECONDS,
                "Time an execution waited, gated, because its concurrency key had `max` executions running.",
                &["queue"],
                CONCURRENCY_WAIT_BUCKETS,
            )?,
            executions_running,
            worker_concurrency_limit: register(
                registry,
                IntGauge::new(
                    WORKER_CONCURRENCY_LIMIT,
                    "Executions the worker pool lets run at once now.",
                )?,
            )?,
        })
    }
}

/// The shared queue state in Redis.
#[derive(Clone, Debug)]
pub struct QueueFamilies {
    /// [`QUEUE_DEPTH`].
    pub queue_depth: IntGaugeVec,
    /// [`QUEUE_PAUSED`].
    pub queue_paused: IntGaugeVec,
    /// [`OLDEST_QUEUED_AGE_SECONDS`].
    pub oldest_queued_age_seconds: GaugeVec,
    /// [`ATTEMPTS_ABANDONED_TOTAL`].
    pub attempts_abandoned_total: IntCounterVec,
}

impl QueueFamilies {
    /// Registers the group on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(QueueFamilies {
            queue_depth: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(QUEUE_DEPTH, "Executions waiting in a configured queue."),
                    &["queue"],
                )?,
            )?,
            queue_paused: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(QUEUE_PAUSED, "1 while an operator has paused the queue."),
                    &["queue"],
                )?,
            )?,
            oldest_queued_age_seconds: register(
                registry,
                GaugeVec::new(
                    Opts::new(
                        OLDEST_QUEUED_AGE_SECONDS,
                        "Age of the oldest waiting execution.",
                    ),
                    &["queue"],
                )?,
            )?,
            attempts_abandoned_total: counter_vec(
                registry,
                ATTEMPTS_ABANDONED_TOTAL,
                "Attempts a worker gave up unsettled, Redis unreachable for most of the visibility timeout.",
                &["queue"],
            )?,
        })
    }
}

/// `scheduler_deadline_misses_total`: fires of tasks with `expect_success_within` not
/// followed by a success in time, by `reason`.
pub fn deadline_miss_family(registry: &Registry) -> Result<IntCounterVec, prometheus::Error> {
    counter_vec(
        registry,
        DEADLINE_MISSES_TOTAL,
        "Fires of tasks with `expect_success_within` not followed by a success in time (leader only: sum over replicas).",
        &["reason"],
    )
}

/// `scheduler_dlq_size`: the executions dead-lettered.
pub fn dead_letter_family(registry: &Registry) -> Result<IntGauge, prometheus::Error> {
    register(
        registry,
        IntGauge::new(DLQ_SIZE, "Executions in the dead-letter queues.")?,
    )
}

/// The replica itself and its backends.
#[derive(Clone, Debug)]
pub struct ProcessFamilies {
    /// [`REDIS_CONFIG_WARNINGS`].
    pub redis_config_warnings: IntGauge,
    /// [`ETCD_DB_BYTES`].
    pub etcd_db_bytes: IntGauge,
    /// [`ETCD_DB_QUOTA_BYTES`].
    pub etcd_db_quota_bytes: IntGauge,
    /// [`AUDIT_OVER_CAPACITY`].
    pub audit_over_capacity: IntGauge,
    /// [`BACKEND_ERRORS_TOTAL`].
    pub backend_errors_total: IntCounterVec,
    /// [`API_AUTH_FAILURES_TOTAL`].
    pub api_auth_failures_total: IntCounterVec,
    /// [`LOOP_PANICS_TOTAL`].
    pub loop_panics_total: IntCounterVec,
    /// [`BUILD_INFO`].
    pub build_info: IntGaugeVec,
}

impl ProcessFamilies {
    /// Registers the group on `registry`.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        Ok(ProcessFamilies {
            redis_config_warnings: register(
                registry,
                IntGauge::new(
                    REDIS_CONFIG_WARNINGS,
                    "Redis settings that lose queue state.",
                )?,
            )?,
            etcd_db_bytes: register(
                registry,
                IntGauge::new(ETCD_DB_BYTES, "Size of etcd's database file, what its quota applies to.")?,
            )?,
            etcd_db_quota_bytes: register(
                registry,
                IntGauge::new(ETCD_DB_QUOTA_BYTES, "etcd's database quota.")?,
            )?,
            audit_over_capacity: register(
                registry,
                IntGauge::new(
                    AUDIT_OVER_CAPACITY,
                    "1 while the audit log holds more records than `audit.max_records` or more bytes than `audit.max_bytes` (by size class), as this replica's last audit write counted.",
                )?,
            )?,
            backend_errors_total: counter_vec(
                registry,
                BACKEND_ERRORS_TOTAL,
                "Failed backend calls.",
                &["backend"],
            )?,
            api_auth_failures_total: counter_vec(
                registry,
                API_AUTH_FAILURES_TOTAL,
                "`/api/v1` requests refused.",
                &["reason"],
            )?,
            loop_panics_total: counter_vec(
                registry,
                LOOP_PANICS_TOTAL,
                "Background loops that panicked (a worker pool's, the scheduler leader's).",
                &["loop"],
            )?,
            build_info: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(BUILD_INFO, "Always 1."),
                    &["version"],
                )?,
            )?,
        })
    }
}

/// `scheduler_alerts_total`: the alerts handed to each channel (see [`ALERTS_TOTAL`]).
pub fn alerting_family(registry: &Registry) -> Result<IntCounterVec, prometheus::Error> {
    counter_vec(
        registry,
        ALERTS_TOTAL,
        "Alerts handed to a channel.",
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
