//! What the role reports to the replica's metrics.
//!
//! A trait rather than a set of gauges: the role states facts (a backend call failed, a
//! fire was enqueued, this many specs are invalid) and the replica decides how they become
//! metric series, so this crate picks no metrics library and a program that embeds the role
//! without Prometheus passes [`NoMetrics`].

/// A backend whose calls the role counts when they fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// etcd: the registry, the election, state writes.
    Etcd,
    /// Redis: enqueues, fences, worker events.
    Redis,
}

impl Backend {
    /// Its name in metric labels and alerts.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Etcd => "etcd",
            Backend::Redis => "redis",
        }
    }
}

/// The facts the role reports. Called on the role's paths, so each call must be cheap and
/// must not block.
pub trait RoleMetrics: Send + Sync {
    /// A call to `backend` failed.
    fn backend_error(&self, backend: Backend);
    /// One execution of a task on `queue` was enqueued.
    fn scheduled(&self, queue: &str);
    /// This replica holds (or no longer holds) the leader key.
    fn set_leader(&self, leading: bool);
    /// This replica owns `owned` scheduling shards (sharded mode).
    fn set_shards_owned(&self, owned: usize);
    /// Task specs in the registry that are invalid.
    fn set_invalid_specs(&self, count: usize);
    /// Task specs in the registry that are paused (`"paused": true`).
    fn set_paused_tasks(&self, count: usize);
    /// Namespaces paused by an operator.
    fn set_paused_namespaces(&self, count: usize);
    /// Tasks whose circuit breaker is open (most fires skipped) changed by `delta` in one
    /// term: a delta, since a replica's shard terms each count their own tasks.
    fn throttled_tasks_changed(&self, delta: i64);
    /// Task state records that could not be decoded at the last takeover.
    fn set_undecodable_states(&self, count: usize);
    /// Queues where executions wait that no live worker serves.
    fn set_unserved_queues(&self, count: usize);
    /// `missed` fires whose deadline passed, for `reason`.
    fn deadline_misses(&self, reason: &str, missed: u64);
    /// `count` task states in doubt were repaired: `how` is `history` (the end was found in
    /// the execution history) or `lost` (no end anywhere and no work left in the queue).
    fn state_repairs(&self, how: &str, count: u64);
    /// The loop `name` (one of [`crate::supervise::LOOPS`]) panicked; it was started again,
    /// or its term stepped down. Provided as a no-op so that an implementation written
    /// before it still builds: a replica that counts loop panics overrides it.
    fn loop_panicked(&self, name: &str) {
        let _ = name;
    }
    /// A term gave its key up though it held it, for `reason` (`redis_unreachable`). A no-op
    /// by default, as [`RoleMetrics::loop_panicked`].
    fn stepped_down(&self, reason: &str) {
        let _ = reason;
    }
}

/// Reports nothing: for tests and programs without metrics.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMetrics;

impl RoleMetrics for NoMetrics {
    fn backend_error(&self, _: Backend) {}
    fn scheduled(&self, _: &str) {}
    fn set_leader(&self, _: bool) {}
    fn set_shards_owned(&self, _: usize) {}
    fn set_invalid_specs(&self, _: usize) {}
    fn set_paused_tasks(&self, _: usize) {}
    fn set_paused_namespaces(&self, _: usize) {}
    fn throttled_tasks_changed(&self, _: i64) {}
    fn set_undecodable_states(&self, _: usize) {}
    fn set_unserved_queues(&self, _: usize) {}
    fn deadline_misses(&self, _: &str, _: u64) {}
    fn state_repairs(&self, _: &str, _: u64) {}
}
