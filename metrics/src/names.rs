//! The fixed names of ax's metrics and the values of their bounded labels.
//!
//! The names are a contract (the alert rules, the Helm chart's dashboard, docs/metrics.md),
//! so each is a constant here, spelled once for the service and the embedded kernel alike,
//! and a test of the service checks every one appears in its exposition. Labels are limited
//! to small, bounded sets (`queue`, `handler`, `outcome`, `backend`, `channel`): task ids
//! never become labels, since every distinct value is a new time series.

/// Fires the leader enqueued, one per execution a fire (or a run-now trigger) put in a
/// queue (leader only). Labels: `queue`.
pub const FIRES_TOTAL: &str = "scheduler_fires_total";
/// Attempts that ended, by outcome (one of [`ATTEMPT_OUTCOMES`], or `released`). Labels:
/// `queue`, `handler`, `outcome`.
pub const ATTEMPTS_TOTAL: &str = "scheduler_attempts_total";
/// Attempts that failed (a subset of the ended ones). Labels: `queue`, `handler`.
pub const ATTEMPTS_FAILED_TOTAL: &str = "scheduler_attempts_failed_total";
/// Failed attempts another attempt of the same execution follows. Labels: `queue`,
/// `handler`.
pub const ATTEMPTS_RETRIED_TOTAL: &str = "scheduler_attempts_retried_total";
/// Run time of an attempt, seconds. Labels: `queue`, `handler`, `outcome`.
pub const ATTEMPT_DURATION_SECONDS: &str = "scheduler_attempt_duration_seconds";
/// Executions whose attempt runs on this replica now.
pub const EXECUTIONS_RUNNING: &str = "scheduler_executions_running";
/// Executions in the dead-letter queue.
pub const DLQ_SIZE: &str = "scheduler_dlq_size";
/// Enqueue or start time minus due time, seconds. Labels: `queue`.
pub const SCHEDULE_LATENCY_SECONDS: &str = "scheduler_schedule_latency_seconds";
/// How long an execution waited because its concurrency key was at its limit. Labels:
/// `queue`.
pub const CONCURRENCY_WAIT_SECONDS: &str = "scheduler_concurrency_wait_seconds";
/// Executions waiting in a queue. Labels: `queue`.
pub const QUEUE_DEPTH: &str = "scheduler_queue_depth";
/// 1 while an operator has paused the queue (`ax queue pause`), else 0.
pub const QUEUE_PAUSED: &str = "scheduler_queue_paused";
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
/// Background loops that panicked: a worker pool's, started again, and the scheduler
/// leader's, started again or stepped down. Labels: `loop` (one of [`WORKER_LOOPS`] or
/// [`LEADER_LOOPS`]).
pub const LOOP_PANICS_TOTAL: &str = "scheduler_loop_panics_total";
/// The `loop` values of [`LOOP_PANICS_TOTAL`]: the worker pool's background loops.
pub const WORKER_LOOPS: &[&str] = &["heartbeat", "maintenance", "reconcile", "stop", "deadline"];
/// The `loop` values of [`LOOP_PANICS_TOTAL`]: the scheduler leader's loops (the same list
/// as `ax_scheduler::supervise::LOOPS`).
pub const LEADER_LOOPS: &[&str] = &[
    "role",
    "term",
    "state_flusher",
    "triggers",
    "paused_namespaces",
    "direct_writes",
    "clock_watch",
];
/// `/api/v1` requests refused before reaching a route. Labels: `reason` (one of
/// the service's refusal reasons: `missing`, `invalid`, `forbidden`, `closed`).
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
/// Attempts a worker gave up unsettled because it could not reach Redis for most of the
/// visibility timeout (the reaper gives them to another worker). Label: `queue`.
pub const ATTEMPTS_ABANDONED_TOTAL: &str = "scheduler_attempts_abandoned_total";
/// Terms (a leader's, a shard owner's) that gave their key up though they held it, so that a
/// replica able to act leads. Label: `reason` (one of [`STEP_DOWN_REASONS`]).
pub const LEADER_STEP_DOWNS_TOTAL: &str = "scheduler_leader_step_downs_total";
/// The `reason` values of [`LEADER_STEP_DOWNS_TOTAL`]: Redis did not answer for
/// `scheduler.redis_unreachable_limit`; the leader's clock was off etcd's by more than
/// `scheduler.max_clock_skew`.
pub const STEP_DOWN_REASONS: &[&str] = &["redis_unreachable", "clock_skew"];
/// Alerts handed to a channel. Labels: `channel` (a configured channel, or
/// [`ALERT_CHANNEL_ALL`]), `outcome`.
pub const ALERTS_TOTAL: &str = "scheduler_alerts_total";
/// Always 1; the label carries the version.
pub const BUILD_INFO: &str = "ax_build_info";

/// Deprecated name of [`FIRES_TOTAL`], exported as an alias until the next release.
pub const TASKS_SCHEDULED_TOTAL: &str = "scheduler_tasks_scheduled_total";
/// Deprecated name of [`ATTEMPTS_TOTAL`] (outcomes in [`DEPRECATED_OUTCOMES`]'s words),
/// exported as an alias until the next release.
pub const TASKS_EXECUTED_TOTAL: &str = "scheduler_tasks_executed_total";
/// Deprecated name of [`ATTEMPTS_FAILED_TOTAL`], exported as an alias until the next
/// release.
pub const TASKS_FAILED_TOTAL: &str = "scheduler_tasks_failed_total";
/// Deprecated name of [`ATTEMPTS_RETRIED_TOTAL`], exported as an alias until the next
/// release.
pub const TASKS_RETRIED_TOTAL: &str = "scheduler_tasks_retried_total";
/// Deprecated name of [`ATTEMPT_DURATION_SECONDS`] (outcomes in [`DEPRECATED_OUTCOMES`]'s
/// words), exported as an alias until the next release.
pub const EXECUTION_DURATION_SECONDS: &str = "scheduler_execution_duration_seconds";
/// Deprecated name of [`EXECUTIONS_RUNNING`], exported as an alias until the next release.
pub const ACTIVE_WORKERS: &str = "scheduler_active_workers";

/// Each deprecated name and the name it is an alias of: the alias is the same series under
/// the old name (with the old `outcome` words), so the two never disagree.
pub const DEPRECATED_ALIASES: &[(&str, &str)] = &[
    (TASKS_SCHEDULED_TOTAL, FIRES_TOTAL),
    (TASKS_EXECUTED_TOTAL, ATTEMPTS_TOTAL),
    (TASKS_FAILED_TOTAL, ATTEMPTS_FAILED_TOTAL),
    (TASKS_RETRIED_TOTAL, ATTEMPTS_RETRIED_TOTAL),
    (EXECUTION_DURATION_SECONDS, ATTEMPT_DURATION_SECONDS),
    (ACTIVE_WORKERS, EXECUTIONS_RUNNING),
];

/// Every fixed metric name, the deprecated aliases included.
pub const ALL_NAMES: &[&str] = &[
    FIRES_TOTAL,
    ATTEMPTS_TOTAL,
    ATTEMPTS_FAILED_TOTAL,
    ATTEMPTS_RETRIED_TOTAL,
    ATTEMPT_DURATION_SECONDS,
    EXECUTIONS_RUNNING,
    DLQ_SIZE,
    SCHEDULE_LATENCY_SECONDS,
    CONCURRENCY_WAIT_SECONDS,
    QUEUE_DEPTH,
    QUEUE_PAUSED,
    WORKER_CONCURRENCY_LIMIT,
    IS_LEADER,
    SHARDS_OWNED,
    SHARDS,
    LEADER_CHANGES_TOTAL,
    INVALID_SPECS,
    TASKS_PAUSED,
    NAMESPACES_PAUSED,
    TASKS_THROTTLED,
    UNDECODABLE_STATES,
    REDIS_CONFIG_WARNINGS,
    OLDEST_QUEUED_AGE_SECONDS,
    UNSERVED_QUEUES,
    ETCD_DB_BYTES,
    ETCD_DB_QUOTA_BYTES,
    AUDIT_OVER_CAPACITY,
    BACKEND_ERRORS_TOTAL,
    LOOP_PANICS_TOTAL,
    API_AUTH_FAILURES_TOTAL,
    DEADLINE_MISSES_TOTAL,
    STATE_REPAIRS_TOTAL,
    LEADER_STEP_DOWNS_TOTAL,
    ATTEMPTS_ABANDONED_TOTAL,
    ALERTS_TOTAL,
    BUILD_INFO,
    TASKS_SCHEDULED_TOTAL,
    TASKS_EXECUTED_TOTAL,
    TASKS_FAILED_TOTAL,
    TASKS_RETRIED_TOTAL,
    EXECUTION_DURATION_SECONDS,
    ACTIVE_WORKERS,
];

/// `outcome` of an attempt that succeeded (the CLI's and the API's word too).
pub const OUTCOME_SUCCEEDED: &str = "succeeded";
/// `outcome` of an attempt that failed: an error returned, a panic, or a dead letter
/// without a run (the CLI's `retrying`, `failed`, `panicked`, `dead_lettered`).
pub const OUTCOME_FAILED: &str = "failed";
/// `outcome` of an attempt stopped at its timeout.
pub const OUTCOME_TIMED_OUT: &str = "timed_out";
/// `outcome` of an attempt stopped by a kill or by a newer execution (`replace`).
pub const OUTCOME_KILLED: &str = "killed";
/// Attempt outcomes, the values of the `outcome` label of [`ATTEMPTS_TOTAL`] and
/// [`ATTEMPT_DURATION_SECONDS`]: the words `ax history` and the API print.
pub const ATTEMPT_OUTCOMES: &[&str] = &[
    OUTCOME_SUCCEEDED,
    OUTCOME_FAILED,
    OUTCOME_TIMED_OUT,
    OUTCOME_KILLED,
];
/// Each `outcome` of [`ATTEMPT_OUTCOMES`] that the deprecated aliases
/// ([`TASKS_EXECUTED_TOTAL`], [`EXECUTION_DURATION_SECONDS`]) spell otherwise, and how.
pub const DEPRECATED_OUTCOMES: &[(&str, &str)] = &[
    (OUTCOME_SUCCEEDED, "success"),
    (OUTCOME_FAILED, "failure"),
    (OUTCOME_TIMED_OUT, "timeout"),
];

/// `outcome` of an alert delivered.
pub const ALERT_SENT: &str = "sent";
/// `outcome` of an alert whose delivery failed after retries.
pub const ALERT_FAILED: &str = "failed";
/// `outcome` of an alert suppressed as a duplicate or deferred by the rate limit.
pub const ALERT_SUPPRESSED: &str = "suppressed";
/// `channel` of the alerts suppressed before any channel ([`ALERT_SUPPRESSED`]).
pub const ALERT_CHANNEL_ALL: &str = "all";

/// `backend` label value for etcd.
pub const BACKEND_ETCD: &str = "etcd";
/// `backend` label value for Redis.
pub const BACKEND_REDIS: &str = "redis";

/// Most distinct values of the `queue` label, and of the `handler` label, a replica exports.
pub const MAX_LABEL_VALUES: usize = 100;
/// The `queue` or `handler` value counting every value past [`MAX_LABEL_VALUES`].
pub const OTHER_LABEL: &str = "other";

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
