//! The bottom layer of the configuration: what ax does when a key is left out.
//!
//! Kept apart from the section structs so that the defaults read as one table, the one
//! `docs/configuration.md` shows (a test holds the two together).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Audit, Election, Etcd, Http, Instance, Limits, Redis, ReplicaRole, Scheduler, Worker};

/// etcd's default database quota (`--quota-backend-bytes`).
pub const DEFAULT_ETCD_QUOTA_BYTES: u64 = 2 * 1024 * 1024 * 1024;

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

impl Default for Instance {
    fn default() -> Self {
        Instance {
            id: String::new(),
            roles: vec![ReplicaRole::Scheduler, ReplicaRole::Worker],
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

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler {
            tick: ax_scheduler_core::timer::TimerConfig::default().tick,
            catch_up_window: ax_scheduler_core::misfire::DEFAULT_CATCH_UP_WINDOW,
            max_clock_skew: ax_scheduler::DEFAULT_MAX_CLOCK_SKEW,
            repair_after: ax_scheduler::DEFAULT_REPAIR_AFTER,
            events_interval: ax_scheduler::DEFAULT_EVENTS_INTERVAL,
            flush_interval: ax_scheduler::DEFAULT_FLUSH_INTERVAL,
            trigger_interval: ax_scheduler::DEFAULT_TRIGGER_INTERVAL,
            enqueue_stall_limit: ax_scheduler::DEFAULT_ENQUEUE_STALL_LIMIT,
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
        }
    }
}

impl Default for Audit {
    fn default() -> Self {
        Audit {
            retention: Duration::from_secs(90 * 24 * 3600),
            max_records: 100_000,
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
            max_backfill_fires: 1000,
            max_list_scan: 10_000,
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
