//! How a replica plugs into the worker role ([`ax_worker`]): its settings from `[worker]`,
//! its handlers (the built-ins and `command`), and its metrics behind the publisher's seam.
//! The pool itself is put together by [`ax_worker::cluster_pool`], the same assembly the
//! Rust SDK's worker runs, so the replica's worker and a user's service cannot drift apart.

use std::sync::Arc;

use anyhow::Context;
use ax_queue::Queue;
use ax_scheduler_core::{AttemptEnd, Clock};
use ax_worker::{
    CommandHandler, HandlerRegistry, HttpHandler, WorkerConfig, WorkerError, WorkerMetrics,
    WorkerPool,
};
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::http::metrics::{Metrics, BACKEND_REDIS};

/// The replica's worker pool on the replica's `clock`, its id claimed, its reports written on
/// `tracker`. Fails when a live process works under the replica's instance id.
pub async fn worker_pool(
    config: &Config,
    queue: &Queue,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    tracker: &TaskTracker,
) -> anyhow::Result<WorkerPool> {
    ax_worker::cluster_pool(
        queue,
        pool_config(config, clock)?,
        handler_registry(&config.worker)?,
        metrics as Arc<dyn WorkerMetrics>,
        tracker,
    )
    .await
    .context("cannot start this replica's worker pool")
}

/// The pool's settings from `[worker]`, the instance id and the API's public URL.
fn pool_config(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<WorkerConfig> {
    // Validation refused bad entries before the process got here.
    let (http_allow_cidrs, http_allow_hosts) =
        config.worker.egress_allow().map_err(|problems| {
            let lines: Vec<String> = problems.iter().map(|(k, p)| format!("{k}: {p}")).collect();
            anyhow::anyhow!("invalid configuration: {}", lines.join("; "))
        })?;
    Ok(WorkerConfig {
        worker_id: config.instance.id.clone(),
        queues: config.worker.queues.clone(),
        concurrency: config.worker.effective_concurrency(),
        prefetch: config.worker.prefetch,
        slow_start: config.worker.slow_start,
        shutdown_grace: config.worker.shutdown_grace,
        visibility_timeout: config.worker.visibility_timeout,
        http_allow_cidrs,
        http_allow_hosts,
        completion_public_url: Some(config.http.public_url.clone())
            .filter(|u| !u.trim().is_empty()),
        clock,
        ..WorkerConfig::default()
    })
}

/// The handlers a worker replica serves: the built-ins and `command` with the replica's
/// commands (registered even with none, so a task naming a command gets the reason it cannot
/// run here rather than "unknown handler").
pub fn handler_registry(worker: &crate::config::Worker) -> Result<HandlerRegistry, WorkerError> {
    let mut registry = HandlerRegistry::with_builtins();
    registry.register("http", HttpHandler::new(worker.secret_source()));
    registry.register("command", CommandHandler::new(worker.commands_config())?);
    Ok(registry)
}

impl WorkerMetrics for Metrics {
    fn redis_error(&self) {
        self.backend_error(BACKEND_REDIS);
    }

    fn active_attempts(&self, delta: i64) {
        self.executions_running().add(delta);
    }

    fn start_lateness(&self, queue: &str, seconds: f64) {
        self.record_start_lateness(queue, seconds);
    }

    fn concurrency_wait(&self, queue: &str, seconds: f64) {
        self.record_concurrency_wait(queue, seconds);
    }

    fn attempt(&self, queue: &str, handler: &str, end: &AttemptEnd, seconds: f64) {
        self.record_attempt(queue, handler, end, seconds);
    }

    fn concurrency_limit(&self, limit: usize) {
        self.worker_concurrency_limit()
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
    }

    fn loop_panicked(&self, name: &str) {
        Metrics::loop_panicked(self, name);
    }

    fn attempt_abandoned(&self, queue: &str) {
        Metrics::attempt_abandoned(self, queue);
    }
}
