//! The worker: your handlers, served against the cluster's queues by the worker crate's
//! pool.
//!
//! The builder only gathers names and numbers; everything that runs is the pool the `ax`
//! binary's worker role runs, put together by [`ax_worker::cluster_pool`], so a Rust service
//! gets the guarantees of a replica's worker and nothing of its own to get wrong. The
//! builder starts from an empty handler table: an SDK worker runs only what it registered,
//! so it should serve queues of its own (an execution whose handler it lacks is
//! dead-lettered, as on any worker).

use std::sync::Arc;
use std::time::Duration;

use ax_worker::{HandlerRegistry, NoMetrics, PoolSummary, WorkerConfig, WorkerMetrics};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::job::IntoHandler;

/// A worker process of the cluster, serving named handlers. Start one with
/// [`Worker::builder`].
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// A worker of the cluster `config` reaches, with no handlers yet, serving the `default`
    /// queue.
    pub fn builder(config: Config) -> WorkerBuilder {
        WorkerBuilder {
            config,
            registry: HandlerRegistry::new(),
            pool: WorkerConfig::default(),
            metrics: Arc::new(NoMetrics),
        }
    }
}

/// Settings of a [`Worker`], then [`WorkerBuilder::run`].
pub struct WorkerBuilder {
    config: Config,
    registry: HandlerRegistry,
    pool: WorkerConfig,
    metrics: Arc<dyn WorkerMetrics>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("handlers", &self.registry.names())
            .field("worker_id", &self.pool.worker_id)
            .field("queues", &self.pool.queues)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// Runs the executions of tasks whose `handler` is `name` with `handler`: an async
    /// function of a [`Typed<T>`](crate::Typed), its payload decoded as a `T` (a payload that
    /// does not decode fails the attempt permanently; take `serde_json::Value` for any
    /// JSON), or any [`Handler`](crate::Handler) (an `Arc` of one to register the same value
    /// in an embedded kernel too). A second handler under one name replaces the first.
    pub fn handler<M>(mut self, name: impl Into<String>, handler: impl IntoHandler<M>) -> Self {
        self.registry.register(name, handler.into_handler());
        self
    }

    /// The queues to serve, by the names tasks give (a partitioned queue is served on each of
    /// its partitions). Default `["default"]`.
    pub fn queues(mut self, queues: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.pool.queues = queues.into_iter().map(Into::into).collect();
        self
    }

    /// Attempts running at once. Default [`ax_worker::DEFAULT_CONCURRENCY`].
    pub fn concurrency(mut self, n: usize) -> Self {
        self.pool.concurrency = n;
        self
    }

    /// Messages taken ahead of a free slot (they are this worker's until it runs or gives
    /// them back). Default [`ax_worker::DEFAULT_PREFETCH`].
    pub fn prefetch(mut self, n: usize) -> Self {
        self.pool.prefetch = n;
        self
    }

    /// This process's worker id: unique among live processes (a second live one under it is
    /// refused), stable across restarts if what a dead process left should go back to the
    /// queue at once rather than after the visibility timeout. Default `worker-` and a
    /// random suffix.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.pool.worker_id = id.into();
        self
    }

    /// How long running attempts may go on once shutdown starts; what is still running then
    /// is stopped and goes back to the queue. Default [`ax_worker::DEFAULT_SHUTDOWN_GRACE`].
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.pool.shutdown_grace = grace;
        self
    }

    /// How long a silent worker's messages stay with it before a live worker gives them
    /// back to the queue. Default [`ax_queue::DEFAULT_VISIBILITY_TIMEOUT`].
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.pool.visibility_timeout = timeout;
        self
    }

    /// Whether the pool opens its slots gradually after start and after a backlog arrives
    /// (see [`ax_worker::WorkerConfig::slow_start`]). Default true.
    pub fn slow_start(mut self, on: bool) -> Self {
        self.pool.slow_start = on;
        self
    }

    /// Where the pool's metrics go (attempts, lateness, Redis errors). Default nowhere.
    pub fn metrics(mut self, metrics: Arc<dyn WorkerMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Connects, claims the worker id and serves until `shutdown` is cancelled; then stops
    /// taking, lets running attempts finish within the grace, gives back the rest, writes
    /// the last reports and deregisters. Fails at start when Redis cannot be reached, the
    /// settings cannot work, no handler was registered, or a live process holds the id.
    pub async fn run(self, shutdown: CancellationToken) -> Result<PoolSummary> {
        if self.registry.names().is_empty() {
            return Err(Error::Config("the worker has no handlers".into()));
        }
        let queue = self.config.connect_queue().await?;
        let (worker_id, handlers) = (self.pool.worker_id.clone(), self.registry.names());
        let queues = self.pool.queues.clone();
        warn_if_unused(&queue, &queues).await;
        let reports = TaskTracker::new();
        let pool =
            ax_worker::cluster_pool(&queue, self.pool, self.registry, self.metrics, &reports)
                .await?;
        // Published only once the id is this process's: a refused one announces nothing.
        let unannounce = CancellationToken::new();
        let record = self
            .config
            .announce(&worker_id, handlers, queues, unannounce.clone())
            .await?;
        let summary = pool.run(shutdown).await;
        unannounce.cancel();
        if let Some(record) = record {
            // It only logs; a failed removal leaves the record to expire with its lease.
            let _ = record.await;
        }
        // The publisher ends once the pool (which holds the reporter) is gone and every
        // report is written.
        drop(pool);
        reports.close();
        reports.wait().await;
        Ok(summary)
    }
}

/// Warns when none of `queues` shows a sign of use under this worker's key prefix (no live
/// worker, no fence a leader raised, nothing waiting or delayed): a worker whose
/// `key_prefix` or queue names differ from the cluster's takes nothing, and would say
/// nothing. A brand-new cluster that has fired nothing yet is warned about too, once.
async fn warn_if_unused(queue: &ax_queue::Queue, queues: &[String]) {
    match queues_in_use(queue, queues).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            key_prefix = %queue.config().prefix,
            queues = ?queues,
            "no sign of these queues under this key prefix (no live worker, no leader's \
             fence, nothing waiting): if the cluster's replicas use another redis.key_prefix \
             or other queue names, this worker will take nothing"
        ),
        Err(e) => tracing::debug!(error = %e, "could not look for the queues' use"),
    }
}

/// Queues looked at for a sign of use: enough to tell a wrong prefix (which shows none on
/// any), few enough that a worker of thousands of queues starts at once.
const QUEUES_LOOKED_AT: usize = 16;

/// Whether any of `queues` (the first [`QUEUES_LOOKED_AT`]) has a live worker, a leader's
/// fence, or messages waiting or delayed; a few reads of fixed keys per queue.
async fn queues_in_use(queue: &ax_queue::Queue, queues: &[String]) -> Result<bool> {
    for q in queues.iter().take(QUEUES_LOOKED_AT) {
        if !queue.live_workers(q).await?.is_empty()
            || queue.fence(q, None).await? > 0
            || queue.depth(q).await? > 0
            || queue.delayed_len(q).await? > 0
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_prefix_no_cluster_uses_shows_no_sign_of_its_queues() {
        let prefix = ax_testkit::unique_name("sdk-unused");
        let config = Config::redis(ax_testkit::redis_url()).key_prefix(prefix);
        let queue = config.connect_queue().await.unwrap();
        let queues = vec!["mail".to_owned()];
        assert!(!queues_in_use(&queue, &queues).await.unwrap());
        // A leader took the queue over: its fence is there.
        queue
            .advance_fence("mail", None, 7, "cluster-a")
            .await
            .unwrap();
        assert!(queues_in_use(&queue, &queues).await.unwrap());
    }
}
