//! The bottom layer of the configuration: what ax does when a key is left out.
//!
//! Kept apart from the section structs so that the defaults read as one table, the one
//! `docs/configuration.md` shows (a test holds the two together).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Http, Instance, ReplicaRole, Scheduler, Worker};

impl Default for Instance {
    fn default() -> Self {
        Instance {
            id: String::new(),
            roles: vec![ReplicaRole::Scheduler, ReplicaRole::Worker],
        }
    }
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler {
            tick: ax_scheduler_core::timer::TimerConfig::default().tick,
            catch_up_window: ax_scheduler_core::misfire::DEFAULT_CATCH_UP_WINDOW,
            max_clock_skew: ax_scheduler::DEFAULT_MAX_CLOCK_SKEW,
            repair_after: ax_scheduler::DEFAULT_REPAIR_AFTER,
            events_interval: ax_scheduler::DEFAULT_EVENTS_INTERVAL,
            flush_interval: ax_scheduler::DEFAULT_FLUSH_INTERVAL,
            routine_state_delay: ax_scheduler_core::DEFAULT_ROUTINE_WRITE_DELAY,
            trigger_interval: ax_scheduler::DEFAULT_TRIGGER_INTERVAL,
            enqueue_stall_limit: ax_scheduler::DEFAULT_ENQUEUE_STALL_LIMIT,
            redis_unreachable_limit: ax_scheduler::DEFAULT_REDIS_UNREACHABLE_LIMIT,
            enqueue_rate_limit: 0,
            backlog_alert_threshold: ax_alerting::DEFAULT_QUEUE_BACKLOG_THRESHOLD,
            shards: 1,
            placement: ax_scheduler_core::placement::PlaceBy::Task,
        }
    }
}

impl Default for Worker {
    fn default() -> Self {
        Worker {
            concurrency: ax_worker::DEFAULT_CONCURRENCY,
            prefetch: ax_worker::DEFAULT_PREFETCH,
            slow_start: true,
            queues: vec![ax_scheduler_core::task::DEFAULT_QUEUE.to_owned()],
            shutdown_grace: ax_worker::DEFAULT_SHUTDOWN_GRACE,
            visibility_timeout: ax_queue::DEFAULT_VISIBILITY_TIMEOUT,
            http_allow_cidrs: Vec::new(),
            http_allow_hosts: Vec::new(),
            commands_allow_root: false,
            commands: BTreeMap::new(),
            queue_limits: Vec::new(),
            secrets_dir: String::new(),
            secret_destinations: BTreeMap::new(),
        }
    }
}

impl Default for Http {
    fn default() -> Self {
        Http {
            listen: "0.0.0.0:8080".to_owned(),
            api_token: String::new(),
            api_token_file: String::new(),
            tokens: Vec::new(),
            insecure_open_api: false,
            public_url: String::new(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_connections_per_peer: 256,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::config::{AlertLevel, Config, ReplicaRole};

    #[test]
    fn defaults_match_the_contract() {
        let c = Config::default();
        assert_eq!(c.etcd.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(c.etcd.prefix, "/scheduler");
        assert_eq!(c.etcd.timeout, Duration::from_secs(5));
        assert_eq!(c.redis.url, "redis://127.0.0.1:6379/0");
        assert_eq!(c.redis.key_prefix, "ax");
        assert_eq!(
            c.instance.roles,
            [ReplicaRole::Scheduler, ReplicaRole::Worker]
        );
        assert_eq!(c.election.lease_ttl, Duration::from_secs(10));
        assert_eq!(c.scheduler.tick, Duration::from_millis(10));
        assert_eq!(c.scheduler.catch_up_window, Duration::from_secs(600));
        assert_eq!(c.scheduler.max_clock_skew, Duration::from_secs(2));
        assert_eq!(c.scheduler.enqueue_rate_limit, 0);
        assert_eq!(c.scheduler.backlog_alert_threshold, 1000);
        assert_eq!(c.worker.concurrency, 64);
        assert_eq!(c.worker.queues, ["default"]);
        assert_eq!(c.worker.shutdown_grace, Duration::from_secs(30));
        assert_eq!(c.worker.visibility_timeout, Duration::from_secs(30));
        assert_eq!(c.scheduler.events_interval, Duration::from_millis(100));
        assert_eq!(c.scheduler.flush_interval, Duration::from_millis(500));
        assert_eq!(c.scheduler.trigger_interval, Duration::from_millis(250));
        assert_eq!(c.scheduler.enqueue_stall_limit, Duration::from_secs(30));
        assert_eq!(c.http.listen, "0.0.0.0:8080");
        assert_eq!(c.alerts.min_level, AlertLevel::Warn);
    }

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        // The full file in docs/configuration.md is what users copy: it must say exactly
        // what ax does when a key is left out.
        let doc = include_str!("../../../docs/configuration.md");
        let start = doc.find("```toml\n").expect("a toml block in the docs") + 8;
        let len = doc[start..].find("```").expect("the block ends");
        let text = &doc[start..start + len];
        assert_eq!(Config::from_toml_str(text).unwrap(), Config::default());
    }
}
