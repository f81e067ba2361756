//! How a replica plugs into the worker role ([`ax_worker`]): its metrics behind the
//! publisher's seam.

use ax_scheduler_core::AttemptEnd;
use ax_worker::WorkerMetrics;

use crate::metrics::{Metrics, BACKEND_REDIS};

impl WorkerMetrics for Metrics {
    fn redis_error(&self) {
        self.backend_error(BACKEND_REDIS);
    }

    fn active_attempts(&self, delta: i64) {
        self.active_workers.add(delta);
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
        self.worker_concurrency_limit
            .set(i64::try_from(limit).unwrap_or(i64::MAX));
    }
}
