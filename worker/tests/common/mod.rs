//! Shared helpers of the worker tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use ax_queue::{ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::TaskSpec;
use ax_worker::WorkerConfig;

pub fn spec(id: &str, handler: &str) -> TaskSpec {
    let mut s = ax_testkit::spec(id, "default", handler);
    s.timeout = Duration::from_secs(5);
    std::sync::Arc::make_mut(&mut s.retry).max_retries = 0;
    s
}

pub async fn queue_at(url: &str, prefix: &str) -> Queue {
    let cfg = QueueConfig {
        prefix: prefix.to_string(),
        ..QueueConfig::default()
    };
    Queue::connect(url, cfg).await.unwrap()
}

pub async fn queue() -> Queue {
    queue_at(&ax_testkit::redis_url(), &ax_testkit::unique_name("axw")).await
}

pub fn fast_config(worker_id: &str) -> WorkerConfig {
    WorkerConfig {
        worker_id: worker_id.to_string(),
        concurrency: 4,
        shutdown_grace: Duration::from_secs(5),
        heartbeat_interval: Duration::from_millis(200),
        heartbeat_ttl: Duration::from_millis(600),
        visibility_timeout: Duration::from_secs(1),
        block_timeout: Duration::from_millis(300),
        maintenance_interval: Duration::from_millis(50),
        reconcile_interval: Duration::from_millis(200),
        ..WorkerConfig::default()
    }
}

pub fn msg(spec: &TaskSpec, fire: i64) -> ExecutionMessage {
    ExecutionMessage::for_fire(
        spec,
        ax_scheduler_core::UtcMillis(fire),
        ax_scheduler_core::UtcMillis::now(),
        1,
    )
}

/// Polls `cond` every 20 ms until it holds or `limit` passes.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, mut cond: F) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}
