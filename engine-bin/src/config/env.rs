//! The `AX_*` environment layer.
//!
//! The variables are listed once, in [`ENV_VARS`], which the docs and tests follow. An empty
//! variable counts as unset: deployment tools often render optional variables as empty
//! strings, and an empty value must not wipe out what the file says.

use std::collections::HashMap;

use super::{Config, ConfigError, ReplicaRole};

/// Every environment variable the configuration reads, with the key it sets.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("AX_ETCD_ENDPOINTS", "etcd.endpoints"),
    ("AX_ETCD_PREFIX", "etcd.prefix"),
    ("AX_ETCD_USERNAME", "etcd.username"),
    ("AX_ETCD_PASSWORD", "etcd.password"),
    ("AX_ETCD_PASSWORD_FILE", "etcd.password_file"),
    ("AX_ETCD_CA_FILE", "etcd.ca_file"),
    ("AX_ETCD_CERT_FILE", "etcd.cert_file"),
    ("AX_ETCD_KEY_FILE", "etcd.key_file"),
    ("AX_REDIS_URL", "redis.url"),
    ("AX_REDIS_URL_FILE", "redis.url_file"),
    ("AX_REDIS_CLUSTER_NODES", "redis.cluster_nodes"),
    ("AX_REDIS_REPLICA_ACKS", "redis.replica_acks"),
    ("AX_REDIS_PASSWORD", "redis.password"),
    ("AX_REDIS_PASSWORD_FILE", "redis.password_file"),
    ("AX_REDIS_CA_FILE", "redis.ca_file"),
    ("AX_REDIS_CERT_FILE", "redis.cert_file"),
    ("AX_REDIS_KEY_FILE", "redis.key_file"),
    ("AX_REDIS_KEY_PREFIX", "redis.key_prefix"),
    ("AX_REDIS_QUEUE_PARTITIONS", "redis.queue_partitions"),
    ("AX_INSTANCE_ID", "instance.id"),
    ("AX_ROLES", "instance.roles"),
    ("AX_LEASE_TTL", "election.lease_ttl"),
    ("AX_TICK", "scheduler.tick"),
    ("AX_CATCH_UP_WINDOW", "scheduler.catch_up_window"),
    ("AX_ENQUEUE_STALL_LIMIT", "scheduler.enqueue_stall_limit"),
    (
        "AX_REDIS_UNREACHABLE_LIMIT",
        "scheduler.redis_unreachable_limit",
    ),
    ("AX_FLUSH_INTERVAL", "scheduler.flush_interval"),
    ("AX_ROUTINE_STATE_DELAY", "scheduler.routine_state_delay"),
    ("AX_REPAIR_AFTER", "scheduler.repair_after"),
    ("AX_SHARDS", "scheduler.shards"),
    ("AX_PLACEMENT", "scheduler.placement"),
    ("AX_WORKER_CONCURRENCY", "worker.concurrency"),
    ("AX_WORKER_QUEUES", "worker.queues"),
    ("AX_WORKER_HTTP_ALLOW_CIDRS", "worker.http_allow_cidrs"),
    ("AX_WORKER_HTTP_ALLOW_HOSTS", "worker.http_allow_hosts"),
    ("AX_WORKER_SECRETS_DIR", "worker.secrets_dir"),
    ("AX_HTTP_LISTEN", "http.listen"),
    ("AX_HTTP_PUBLIC_URL", "http.public_url"),
    ("AX_API_TOKEN", "http.api_token"),
    ("AX_API_TOKEN_FILE", "http.api_token_file"),
    ("AX_FEISHU_WEBHOOK", "alerts.feishu_webhook"),
    ("AX_FEISHU_WEBHOOK_FILE", "alerts.feishu_webhook_file"),
    ("AX_FEISHU_SECRET", "alerts.feishu_secret"),
    ("AX_FEISHU_SECRET_FILE", "alerts.feishu_secret_file"),
    ("AX_ALERT_WEBHOOK_URL", "alerts.webhook_url"),
    ("AX_ALERT_WEBHOOK_URL_FILE", "alerts.webhook_url_file"),
];

impl Config {
    /// Applies the `AX_*` variables of [`ENV_VARS`] found in `env`; others are ignored.
    pub fn apply_env(&mut self, env: &HashMap<String, String>) -> Result<(), ConfigError> {
        for (var, _) in ENV_VARS {
            let Some(value) = env.get(*var).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
                continue;
            };
            self.set_from_env(var, value)
                .map_err(|message| ConfigError::Env {
                    var: (*var).to_owned(),
                    message,
                })?;
        }
        Ok(())
    }

    fn set_from_env(&mut self, var: &str, value: &str) -> Result<(), String> {
        let text = value.to_owned();
        match var {
            "AX_ETCD_ENDPOINTS" => self.etcd.endpoints = split_list(value),
            "AX_ETCD_PREFIX" => self.etcd.prefix = text,
            "AX_ETCD_USERNAME" => self.etcd.username = text,
            "AX_ETCD_PASSWORD" => self.etcd.password = text,
            "AX_ETCD_PASSWORD_FILE" => self.etcd.password_file = text,
            "AX_ETCD_CA_FILE" => self.etcd.ca_file = text,
            "AX_ETCD_CERT_FILE" => self.etcd.cert_file = text,
            "AX_ETCD_KEY_FILE" => self.etcd.key_file = text,
            "AX_REDIS_URL" => self.redis.url = text,
            "AX_REDIS_URL_FILE" => self.redis.url_file = text,
            "AX_REDIS_CLUSTER_NODES" => self.redis.cluster_nodes = split_list(value),
            "AX_REDIS_REPLICA_ACKS" => {
                self.redis.replica_acks = value
                    .parse()
                    .map_err(|_| format!("`{value}` is not a whole number of replicas"))?
            }
            "AX_REDIS_PASSWORD" => self.redis.password = text,
            "AX_REDIS_PASSWORD_FILE" => self.redis.password_file = text,
            "AX_REDIS_CA_FILE" => self.redis.ca_file = text,
            "AX_REDIS_CERT_FILE" => self.redis.cert_file = text,
            "AX_REDIS_KEY_FILE" => self.redis.key_file = text,
            "AX_REDIS_KEY_PREFIX" => self.redis.key_prefix = text,
            "AX_REDIS_QUEUE_PARTITIONS" => {
                self.redis.queue_partitions = split_list(value)
                    .iter()
                    .map(|pair| {
                        let (queue, n) = pair.split_once('=').ok_or_else(|| {
                            format!("`{pair}` is not QUEUE=PARTITIONS (e.g. `hot=4`)")
                        })?;
                        let n = n.trim().parse().map_err(|_| {
                            format!("`{pair}`: `{n}` is not a whole number of partitions")
                        })?;
                        Ok((queue.trim().to_owned(), n))
                    })
                    .collect::<Result<_, String>>()?
            }
            "AX_INSTANCE_ID" => self.instance.id = text,
            "AX_ROLES" => self.instance.roles = parse_roles(value)?,
            "AX_LEASE_TTL" => self.election.lease_ttl = parse_duration(value)?,
            "AX_TICK" => self.scheduler.tick = parse_duration(value)?,
            "AX_CATCH_UP_WINDOW" => self.scheduler.catch_up_window = parse_duration(value)?,
            "AX_ENQUEUE_STALL_LIMIT" => self.scheduler.enqueue_stall_limit = parse_duration(value)?,
            "AX_REDIS_UNREACHABLE_LIMIT" => {
                self.scheduler.redis_unreachable_limit = parse_duration(value)?;
            }
            "AX_FLUSH_INTERVAL" => self.scheduler.flush_interval = parse_duration(value)?,
            "AX_ROUTINE_STATE_DELAY" => {
                self.scheduler.routine_state_delay = parse_duration(value)?;
            }
            "AX_REPAIR_AFTER" => self.scheduler.repair_after = parse_duration(value)?,
            "AX_PLACEMENT" => {
                self.scheduler.placement = match value {
                    "task" => ax_scheduler_core::placement::PlaceBy::Task,
                    "namespace" => ax_scheduler_core::placement::PlaceBy::Namespace,
                    other => {
                        return Err(format!("`{other}` is not a placement: task or namespace"))
                    }
                }
            }
            "AX_SHARDS" => {
                self.scheduler.shards = value
                    .parse()
                    .map_err(|_| format!("`{value}` is not a whole number of shards"))?
            }
            "AX_WORKER_CONCURRENCY" => {
                self.worker.concurrency = value
                    .parse()
                    .map_err(|_| format!("`{value}` is not a whole number (0 means the default)"))?
            }
            "AX_WORKER_QUEUES" => self.worker.queues = split_list(value),
            "AX_WORKER_HTTP_ALLOW_CIDRS" => self.worker.http_allow_cidrs = split_list(value),
            "AX_WORKER_HTTP_ALLOW_HOSTS" => self.worker.http_allow_hosts = split_list(value),
            "AX_WORKER_SECRETS_DIR" => self.worker.secrets_dir = text,
            "AX_HTTP_LISTEN" => self.http.listen = text,
            "AX_HTTP_PUBLIC_URL" => self.http.public_url = text,
            "AX_API_TOKEN" => self.http.api_token = text,
            "AX_API_TOKEN_FILE" => self.http.api_token_file = text,
            "AX_FEISHU_WEBHOOK" => self.alerts.feishu_webhook = text,
            "AX_FEISHU_WEBHOOK_FILE" => self.alerts.feishu_webhook_file = text,
            "AX_FEISHU_SECRET" => self.alerts.feishu_secret = text,
            "AX_FEISHU_SECRET_FILE" => self.alerts.feishu_secret_file = text,
            "AX_ALERT_WEBHOOK_URL" => self.alerts.webhook_url = text,
            "AX_ALERT_WEBHOOK_URL_FILE" => self.alerts.webhook_url_file = text,
            // ENV_VARS and this match are kept in step by the test below.
            other => return Err(format!("`{other}` is not a configuration variable")),
        }
        Ok(())
    }
}

/// Splits a comma separated list, dropping blanks (`"a, b,"` is `["a", "b"]`).
pub(crate) fn split_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Parses a comma separated list of roles.
pub(crate) fn parse_roles(value: &str) -> Result<Vec<ReplicaRole>, String> {
    let mut roles = Vec::new();
    for name in split_list(value) {
        let role: ReplicaRole = name.parse()?;
        if !roles.contains(&role) {
            roles.push(role);
        }
    }
    Ok(roles)
}

fn parse_duration(value: &str) -> Result<std::time::Duration, String> {
    ax_scheduler_core::duration_serde::parse(value)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_listed_variable_is_applied() {
        // A value every variable accepts, so that a variable listed in ENV_VARS but missing
        // from the match (or the reverse) fails here.
        for (var, key) in ENV_VARS {
            let value = match *var {
                "AX_ROLES" => "worker",
                "AX_LEASE_TTL"
                | "AX_TICK"
                | "AX_CATCH_UP_WINDOW"
                | "AX_ENQUEUE_STALL_LIMIT"
                | "AX_REDIS_UNREACHABLE_LIMIT"
                | "AX_FLUSH_INTERVAL"
                | "AX_ROUTINE_STATE_DELAY"
                | "AX_REPAIR_AFTER" => "7s",
                "AX_WORKER_CONCURRENCY" | "AX_REDIS_REPLICA_ACKS" | "AX_SHARDS" => "7",
                "AX_PLACEMENT" => "namespace",
                "AX_REDIS_QUEUE_PARTITIONS" => "x7=7",
                _ => "x7",
            };
            let mut c = Config::default();
            c.apply_env(&env(&[(var, value)]))
                .unwrap_or_else(|e| panic!("{var}: {e}"));
            assert_ne!(c, Config::default(), "{var} did not change {key}");
        }
    }

    #[test]
    fn values_are_parsed() {
        let mut c = Config::default();
        c.apply_env(&env(&[
            ("AX_ETCD_ENDPOINTS", "http://a:2379, http://b:2379,"),
            ("AX_ROLES", "worker,worker"),
            ("AX_LEASE_TTL", "15s"),
            ("AX_TICK", "5ms"),
            ("AX_WORKER_CONCURRENCY", "12"),
            ("AX_REDIS_CLUSTER_NODES", "redis://a:7000, redis://b:7001"),
            ("AX_WORKER_QUEUES", "default,slow"),
            ("AX_REDIS_QUEUE_PARTITIONS", "hot=4, warm = 2"),
            ("AX_WORKER_HTTP_ALLOW_CIDRS", "127.0.0.0/8, ::1/128"),
            (
                "AX_WORKER_HTTP_ALLOW_HOSTS",
                "localhost,*.svc.cluster.local",
            ),
            ("AX_TEST_REDIS", "ignored"),
        ]))
        .unwrap();
        assert_eq!(c.etcd.endpoints, ["http://a:2379", "http://b:2379"]);
        assert_eq!(c.instance.roles, [ReplicaRole::Worker]);
        assert_eq!(c.election.lease_ttl, Duration::from_secs(15));
        assert_eq!(c.scheduler.tick, Duration::from_millis(5));
        assert_eq!(c.worker.concurrency, 12);
        assert_eq!(c.redis.cluster_nodes, ["redis://a:7000", "redis://b:7001"]);
        assert_eq!(c.worker.queues, ["default", "slow"]);
        assert_eq!(
            c.redis.queue_partitions,
            std::collections::BTreeMap::from([("hot".to_owned(), 4), ("warm".to_owned(), 2)])
        );
        assert_eq!(c.worker.http_allow_cidrs, ["127.0.0.0/8", "::1/128"]);
        assert_eq!(
            c.worker.http_allow_hosts,
            ["localhost", "*.svc.cluster.local"]
        );
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let mut c = Config::default();
        c.etcd.password = "from-file".into();
        c.apply_env(&env(&[("AX_ETCD_PASSWORD", ""), ("AX_LEASE_TTL", "  ")]))
            .unwrap();
        assert_eq!(c.etcd.password, "from-file");
        assert_eq!(c.election.lease_ttl, Duration::from_secs(10));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, value, needle) in [
            ("AX_LEASE_TTL", "ten", "not a duration"),
            ("AX_ROLES", "scheduler,leader", "unknown role `leader`"),
            ("AX_WORKER_CONCURRENCY", "-1", "not a whole number"),
        ] {
            let err = Config::default()
                .apply_env(&env(&[(var, value)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(var) && err.contains(needle), "{err}");
        }
    }
}
