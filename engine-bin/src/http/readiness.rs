//! What `/readyz` reports: whether this replica can do its work.
//!
//! Shared by the loops that learn the facts (the etcd and Redis connections, the worker
//! pool) and the HTTP handler that reports them. Plain atomics: the loops set a flag on every
//! state change and the probe reads them, so neither ever waits on the other. Everything
//! starts not ready; a replica is ready once each backend it needs has answered.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

/// The readiness flags of one replica.
#[derive(Debug, Default)]
pub struct Readiness {
    etcd: AtomicBool,
    redis: AtomicBool,
    worker_pool: AtomicBool,
    needs_worker_pool: bool,
}

/// A snapshot of [`Readiness`], as `/readyz` returns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReadinessReport {
    /// Whether everything needed is ready.
    pub ready: bool,
    /// What is not ready: `etcd`, `redis`, `worker_pool`.
    pub not_ready: Vec<&'static str>,
}

impl Readiness {
    /// All flags false. `needs_worker_pool`: whether this replica has the worker role, so
    /// that readiness also waits for its pool.
    pub fn new(needs_worker_pool: bool) -> Readiness {
        Readiness {
            needs_worker_pool,
            ..Readiness::default()
        }
    }

    /// Records whether etcd answered the last call.
    pub fn set_etcd(&self, up: bool) {
        self.etcd.store(up, Ordering::Relaxed);
    }

    /// Records whether Redis answered the last call.
    pub fn set_redis(&self, up: bool) {
        self.redis.store(up, Ordering::Relaxed);
    }

    /// Records whether the worker pool is running.
    pub fn set_worker_pool(&self, running: bool) {
        self.worker_pool.store(running, Ordering::Relaxed);
    }

    /// The current state.
    pub fn report(&self) -> ReadinessReport {
        let mut not_ready = Vec::new();
        if !self.etcd.load(Ordering::Relaxed) {
            not_ready.push("etcd");
        }
        if !self.redis.load(Ordering::Relaxed) {
            not_ready.push("redis");
        }
        if self.needs_worker_pool && !self.worker_pool.load(Ordering::Relaxed) {
            not_ready.push("worker_pool");
        }
        ReadinessReport {
            ready: not_ready.is_empty(),
            not_ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_when_every_needed_part_is() {
        let r = Readiness::new(true);
        assert_eq!(r.report().not_ready, ["etcd", "redis", "worker_pool"]);
        r.set_etcd(true);
        r.set_redis(true);
        assert_eq!(r.report().not_ready, ["worker_pool"]);
        r.set_worker_pool(true);
        assert!(r.report().ready);
        r.set_redis(false);
        assert_eq!(r.report().not_ready, ["redis"]);
    }

    #[test]
    fn a_scheduler_only_replica_has_no_pool_to_wait_for() {
        let r = Readiness::new(false);
        r.set_etcd(true);
        r.set_redis(true);
        assert!(r.report().ready);
    }
}
