//! The cluster at a glance (`GET /status`): leader, replicas, queues, etcd and clock; and
//! a queue's pause state, as pausing or resuming it answers.
//!
//! Every figure is optional where a backend may fail to measure it, so one unreachable part
//! leaves a gap in the view instead of failing the whole call.

use ax_scheduler_core::UtcMillis;
use serde::{Deserialize, Serialize};

/// The cluster at a glance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    /// Instance id of the leader, if there is one.
    pub leader: Option<String>,
    /// When the leader's term started (it won the election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_since: Option<UtcMillis>,
    /// Registered replicas.
    pub replicas: Vec<ReplicaView>,
    /// Queues.
    pub queues: Vec<QueueView>,
    /// Dead-lettered executions.
    pub dlq_size: u64,
    /// Redis settings that would lose ax's queue state (no persistence, evicting memory
    /// policy), one sentence each; empty when none or unknown.
    #[serde(default)]
    pub redis_warnings: Vec<String>,
    /// etcd's database size against its quota, when etcd answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_db: Option<EtcdDbView>,
    /// Namespaces whose tasks do not fire, with who paused them and when.
    #[serde(default)]
    pub paused_namespaces: Vec<ax_registry::NamespacePause>,
    /// The answering host's clock against etcd's, when it could be measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockView>,
    /// The shard map, with sharded scheduling (`scheduler.shards` above 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsView>,
}

/// Who schedules which shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardsView {
    /// Shards of the installation.
    pub total: u32,
    /// Each owned shard's owner and fencing token, in shard order; a shard missing here
    /// has no owner (nothing of it fires).
    pub owners: Vec<ax_election::ShardOwnerRecord>,
}

/// One host's clock against etcd's (the check a replica makes before it campaigns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockView {
    /// How far the host's clock is ahead of etcd's (negative: behind), milliseconds.
    pub skew_ms: i64,
    /// `scheduler.max_clock_skew`: a replica this far off refuses to lead, milliseconds.
    pub max_skew_ms: u64,
}

impl ClockView {
    /// Whether the skew is beyond what a leader may have.
    pub fn too_far(&self) -> bool {
        self.skew_ms.unsigned_abs() > self.max_skew_ms
    }
}

/// etcd's database size against its quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdDbView {
    /// Size of the database file, bytes.
    pub bytes: u64,
    /// The quota, bytes (`--quota-backend-bytes`).
    pub quota_bytes: u64,
}

/// One replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaView {
    /// Instance id.
    pub id: String,
    /// Roles.
    pub roles: Vec<String>,
    /// ax version it runs.
    pub version: String,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<UtcMillis>,
    /// Time since it last renewed its registration in etcd (its heartbeat), milliseconds;
    /// absent when etcd could not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_ms: Option<u64>,
    /// Host it runs on (the pod name under Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its process id on that host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Address its HTTP API and console listen on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Whether it is heard from.
    #[serde(default)]
    pub state: ReplicaState,
    /// When it was first seen gone (state `gone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone_at: Option<UtcMillis>,
}

/// Whether a replica is heard from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaState {
    /// Its heartbeat is on time.
    #[default]
    Live,
    /// It missed a heartbeat: still registered, its lease not yet expired, but silent (killed,
    /// stopped, cut off). Its record goes when the lease expires.
    Stale,
    /// Its registration expired without the replica deregistering: it died or was cut off.
    /// Shown for an hour after it was first seen gone.
    Gone,
}

impl ReplicaState {
    /// The word shown in the CLI and the console.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaState::Live => "live",
            ReplicaState::Stale => "stale",
            ReplicaState::Gone => "gone",
        }
    }

    /// A registered replica's state from its heartbeat's age: stale once it missed a renewal
    /// (renewals come every third of the lease's TTL; etcd counts whole seconds).
    pub fn of_heartbeat(age: Option<std::time::Duration>, ttl: std::time::Duration) -> Self {
        let limit = ttl / 3 + std::time::Duration::from_millis(1500);
        match age {
            Some(age) if age > limit => ReplicaState::Stale,
            _ => ReplicaState::Live,
        }
    }
}

/// One queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    /// Queue name.
    pub name: String,
    /// Waiting executions.
    pub depth: u64,
    /// Age of the oldest waiting execution, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_age_ms: Option<u64>,
    /// Dead-lettered executions of this queue.
    #[serde(default)]
    pub dlq_size: u64,
    /// An operator paused it: workers take nothing from it.
    #[serde(default)]
    pub paused: bool,
    /// Ids of the workers serving it now (heartbeat alive), whatever their language.
    #[serde(default)]
    pub workers: Vec<String>,
    /// Physical queues it is spread over (`redis.queue_partitions`); the figures above are
    /// their sums. 1 (left out) when it has no partitions.
    #[serde(default = "one_partition", skip_serializing_if = "is_one_partition")]
    pub partitions: u32,
}

fn one_partition() -> u32 {
    1
}

fn is_one_partition(n: &u32) -> bool {
    *n == 1
}

/// A queue's pause state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    /// Queue name.
    pub name: String,
    /// Whether workers are held off it.
    pub paused: bool,
}

/// What a queue holds now (`GET /queues/{name}`): the first executions of each kind and the
/// totals, for an operator deciding whether to pause it or kill something.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueContents {
    /// Queue name.
    pub name: String,
    /// Whether workers are held off it.
    pub paused: bool,
    /// Executions waiting in all.
    pub waiting_total: u64,
    /// The first waiting executions, in the order workers take them.
    pub waiting: Vec<QueuedExecution>,
    /// Pending retries in all.
    pub retrying_total: u64,
    /// The first pending retries, soonest due first.
    pub retrying: Vec<QueuedExecution>,
    /// Executions workers run now.
    pub running: Vec<QueuedExecution>,
}

/// One execution in a queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedExecution {
    /// Execution id.
    pub execution_id: ax_scheduler_core::ExecutionId,
    /// The task.
    pub namespace: String,
    /// The task.
    pub task_id: String,
    /// The attempt, 1 for the first.
    pub attempt: u32,
    /// The fire it stands for.
    pub fire_at: UtcMillis,
    /// When this attempt was enqueued.
    pub enqueued_at: UtcMillis,
    /// Priority, 0 (lowest) to 9.
    pub priority: u8,
    /// When a pending retry is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<UtcMillis>,
    /// The worker running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}
