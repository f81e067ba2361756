//! The sections of `ax.toml` that say where the cluster is and how it is operated, with
//! their defaults: `[etcd]`, `[redis]`, `[election]`, `[audit]`, `[limits]` and a queue's
//! `[[worker.queue_limits]]`.
//!
//! Plain data that serde reads and writes: every struct denies unknown keys and takes its
//! missing keys from its [`Default`], so a partial section is complete once parsed. The
//! replica's configuration embeds these same types, so a client and a replica read one file
//! the same way.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// etcd's default database quota (`--quota-backend-bytes`).
pub const DEFAULT_ETCD_QUOTA_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// `[etcd]`: connection to the etcd cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Etcd {
    /// Client URLs (`http://host:2379`, `https://...`); default `["http://127.0.0.1:2379"]`.
    pub endpoints: Vec<String>,
    /// Key prefix under which ax keeps everything; default `/scheduler`.
    pub prefix: String,
    /// User name for etcd authentication; empty for none.
    pub username: String,
    /// Password for etcd authentication (secret).
    pub password: String,
    /// File holding `password` (a mounted Secret); empty for none.
    pub password_file: String,
    /// CA bundle; when set, connections use TLS.
    pub ca_file: String,
    /// Client certificate for mutual TLS (with `key_file`).
    pub cert_file: String,
    /// Client key for mutual TLS (with `cert_file`).
    pub key_file: String,
    /// Timeout of every etcd request; default 5 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub timeout: Duration,
    /// etcd's `--quota-backend-bytes`, for the database-size gauge, alert and `ax status`
    /// (etcd 3.6 and later report it themselves, and that wins); default 2 GiB, etcd's own
    /// default.
    pub quota_backend_bytes: u64,
}

/// `[redis]`: connection to Redis.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Redis {
    /// `redis://` or `rediss://` (TLS) URL; default `redis://127.0.0.1:6379/0`. Not used
    /// when `cluster_nodes` is set.
    pub url: String,
    /// `redis://` or `rediss://` URLs of some nodes of a Redis Cluster (one reachable node is
    /// enough to find the rest); when set, ax uses the cluster instead of `url`. Default
    /// empty.
    pub cluster_nodes: Vec<String>,
    /// Replicas that must have each enqueue and settle before it counts as done (`WAIT`);
    /// 0 (the default) does not wait.
    pub replica_acks: u32,
    /// Password (secret); when set it replaces any password in `url`.
    pub password: String,
    /// File holding `url` (it may carry a password); empty for none.
    pub url_file: String,
    /// File holding `password`; empty for none.
    pub password_file: String,
    /// CA bundle that signed the server's certificate (`rediss://` only); empty: the
    /// system's root certificates.
    pub ca_file: String,
    /// Client certificate for mutual TLS (with `key_file`; `rediss://` only).
    pub cert_file: String,
    /// Client key for mutual TLS (with `cert_file`).
    pub key_file: String,
    /// Prefix of every Redis key ax writes; default `ax`.
    pub key_prefix: String,
    /// Executions kept in each task's history (`ax task history`); default 100.
    pub history_cap: usize,
    /// How long a task's execution history is kept after its last execution; default 30 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub history_retention: Duration,
    /// How long the execution history across tasks (`ax history`) keeps an attempt;
    /// default 7 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub execution_history_retention: Duration,
    /// Most attempts the execution history across tasks keeps; default 200 000.
    pub execution_history_max_entries: usize,
    /// How long a dead-letter entry is kept; default 90 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub dlq_retention: Duration,
    /// Most dead-letter entries kept per queue (the oldest go first); default 10 000.
    pub dlq_max_entries: usize,
    /// Partitions per queue name (`{ hot = 4 }`), 1 to 256: such a queue is that many
    /// physical queues on different Redis Cluster slots. Every replica and the CLI must
    /// have the same. Default none.
    pub queue_partitions: BTreeMap<String, u32>,
}

/// `[election]`: leader election on an etcd lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Election {
    /// Lease TTL: how long a dead leader keeps leadership at most; default 10 s.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub lease_ttl: Duration,
}

/// `[[worker.queue_limits]]`: the limits of one queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueLimit {
    /// The queue.
    pub queue: String,
    /// Most executions of the queue running at once, across all workers; 0 (the default):
    /// no limit.
    #[serde(default)]
    pub max_running: u32,
    /// Most executions taken from the queue per second, across all workers (a token bucket
    /// holding one second's worth, at least one); 0 (the default): no limit.
    #[serde(default)]
    pub rate: f64,
}

/// `[audit]`: the audit log of changes made through ax.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Audit {
    /// How long a record is kept; default 90 d.
    #[serde(with = "ax_scheduler_core::duration_serde")]
    pub retention: Duration,
    /// Most records kept (the oldest go first); default 100 000.
    pub max_records: usize,
    /// Most bytes the records may take in etcd, as bounded by their sizes' classes (see the
    /// audit store); default 128 MiB.
    pub max_bytes: u64,
}

/// `[limits]`: bounds on what API and CLI callers may send, each refused with a message
/// naming it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest `/api/v1` request body, bytes; default 1 MiB.
    pub max_request_bytes: usize,
    /// Most tasks one namespace may hold (checked when the API or CLI creates a task);
    /// default 100 000.
    pub max_tasks_per_namespace: u64,
    /// Run-now requests per task per minute through this replica's API; default 60.
    pub triggers_per_task_per_minute: u32,
    /// Operate actions (pause, resume, run now, backfill, kill, requeue) per caller and per
    /// target (a task, namespace, queue, execution, the dead letters) per
    /// minute through this replica's API; default 30.
    pub operate_actions_per_minute: u32,
    /// Reads (`GET` requests of `/api/v1`, dry runs) per caller per minute through this
    /// replica's API; default 1200.
    pub reads_per_minute: u32,
    /// Executions scheduled (`POST /api/v1/scheduled`) per caller per minute through this
    /// replica's API, with a minute's burst; default 600 000 (10 000 a second).
    pub scheduled_per_minute: u32,
    /// Most fires one backfill enqueues, forced or not; default 1000.
    pub max_backfill_fires: usize,
    /// Most task keys one listing request reads before it answers with what it found and
    /// a continue token; default 10 000.
    pub max_list_scan: usize,
}

impl Default for Etcd {
    fn default() -> Self {
        Etcd {
            endpoints: vec!["http://127.0.0.1:2379".to_owned()],
            prefix: "/scheduler".to_owned(),
            username: String::new(),
            password: String::new(),
            password_file: String::new(),
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            timeout: Duration::from_secs(5),
            quota_backend_bytes: DEFAULT_ETCD_QUOTA_BYTES,
        }
    }
}

impl Default for Redis {
    fn default() -> Self {
        Redis {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            cluster_nodes: Vec::new(),
            replica_acks: 0,
            password: String::new(),
            url_file: String::new(),
            password_file: String::new(),
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            key_prefix: "ax".to_owned(),
            history_cap: ax_queue::DEFAULT_HISTORY_CAP,
            history_retention: ax_queue::DEFAULT_HISTORY_RETENTION,
            execution_history_retention: ax_queue::DEFAULT_EXECUTION_HISTORY_RETENTION,
            execution_history_max_entries: ax_queue::DEFAULT_EXECUTION_HISTORY_MAX_ENTRIES,
            dlq_retention: ax_queue::DEFAULT_DLQ_RETENTION,
            dlq_max_entries: ax_queue::DEFAULT_DLQ_MAX_ENTRIES,
            queue_partitions: BTreeMap::new(),
        }
    }
}

impl Default for Election {
    fn default() -> Self {
        Election {
            lease_ttl: Duration::from_secs(10),
        }
    }
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            retention: Duration::from_secs(90 * 24 * 3600),
            max_records: 100_000,
            max_bytes: 128 * 1024 * 1024,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 1024 * 1024,
            max_tasks_per_namespace: 100_000,
            triggers_per_task_per_minute: 60,
            operate_actions_per_minute: 30,
            reads_per_minute: 1200,
            scheduled_per_minute: 600_000,
            max_backfill_fires: 1000,
            max_list_scan: 10_000,
        }
    }
}
