//! The worker role of a cluster, put together in one place.
//!
//! A pool that serves a cluster's queues needs more than [`WorkerPool::new`]: its queues
//! named physically (a partitioned queue is served by each of its partitions), a
//! [`QueueReporter`] so the leader, the history and the console see its executions, and its
//! id claimed ([`WorkerPool::claim_id`]) so that a second live process under the same id is
//! refused and what a dead one left goes back to the queue. The `ax` binary's worker role and
//! the Rust SDK's worker both start here, so the two cannot drift apart.

use std::sync::Arc;

use ax_queue::Queue;
use tokio_util::task::TaskTracker;

use crate::error::Result;
use crate::pool::{WorkerConfig, WorkerPool};
use crate::publisher::{QueueReporter, WorkerMetrics};
use crate::registry::HandlerRegistry;

/// A pool serving `cfg.queues` (logical names, as a task names them) of the cluster behind
/// `queue` with `registry`'s handlers, reporting every execution through a [`QueueReporter`]
/// whose publisher runs on `tracker`, with its worker id claimed. Run it with
/// [`WorkerPool::run`]; once that returned and the pool is dropped, `tracker` ends when the
/// last reports are written.
///
/// Fails with [`crate::WorkerError::IdInUse`] when a live process works under the same id,
/// and with [`crate::WorkerError::InvalidConfig`] for settings the pool cannot run with.
pub async fn cluster_pool(
    queue: &Queue,
    mut cfg: WorkerConfig,
    registry: HandlerRegistry,
    metrics: Arc<dyn WorkerMetrics>,
    tracker: &TaskTracker,
) -> Result<WorkerPool> {
    cfg.queues = queue.physical_queues_of(&cfg.queues);
    let reporter = QueueReporter::new(queue.clone(), metrics, tracker);
    let pool = WorkerPool::new(queue.clone(), cfg, registry, Arc::new(reporter))?;
    let given_back = pool.claim_id().await?;
    if given_back > 0 {
        tracing::info!(
            worker = %pool.worker_id(),
            given_back,
            "took the worker id over: gave back what an earlier process left"
        );
    }
    Ok(pool)
}

/// Metrics that go nowhere: for a pool whose process exports none.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMetrics;

impl WorkerMetrics for NoMetrics {
    fn redis_error(&self) {}
    fn active_attempts(&self, _delta: i64) {}
    fn start_lateness(&self, _queue: &str, _seconds: f64) {}
    fn concurrency_wait(&self, _queue: &str, _seconds: f64) {}
    fn attempt(
        &self,
        _queue: &str,
        _handler: &str,
        _end: &ax_scheduler_core::AttemptEnd,
        _seconds: f64,
    ) {
    }
    fn concurrency_limit(&self, _limit: usize) {}
}
