//! The rules the cluster's sections of a configuration must satisfy (`[etcd]`, `[redis]`,
//! `[election]`, `[audit]`, `[limits]`): one definition, which a replica's configuration and
//! [`ClusterConfig::validate`](super::ClusterConfig::validate) (a client reading a replicas'
//! file) both apply. Each reports every broken rule through `err`, starting with its key.

use std::time::Duration;

use super::{Audit, Election, Etcd, Limits, Redis};

/// `[etcd]`.
pub fn check_etcd(etcd: &Etcd, err: &mut impl FnMut(&str, String)) {
    if etcd.endpoints.is_empty() {
        err("etcd.endpoints", "must list at least one endpoint".into());
    }
    for e in &etcd.endpoints {
        if e.trim().is_empty() {
            err("etcd.endpoints", "an endpoint is empty".into());
        } else if let Some((scheme, _)) = e.split_once("://") {
            if scheme != "http" && scheme != "https" {
                err(
                    "etcd.endpoints",
                    format!("`{e}`: scheme must be http:// or https://"),
                );
            }
        }
    }
    if !etcd.prefix.starts_with('/') || etcd.prefix.len() > 1 && etcd.prefix.ends_with('/') {
        err(
            "etcd.prefix",
            format!(
                "`{}` must start with `/` and not end with one (like `/scheduler`)",
                etcd.prefix
            ),
        );
    }
    if etcd.cert_file.is_empty() != etcd.key_file.is_empty() {
        err(
            "etcd.cert_file",
            "cert_file and key_file must be set together (client certificate and its key)".into(),
        );
    }
    if !etcd.cert_file.is_empty() && etcd.ca_file.is_empty() {
        // Without a CA there is no TLS to etcd, and the certificate would go unused.
        err(
            "etcd.cert_file",
            "a client certificate needs TLS, and TLS to etcd needs etcd.ca_file: set it too".into(),
        );
    }
    if !etcd.username.is_empty() && etcd.password.is_empty() {
        err("etcd.password", "must be set when etcd.username is".into());
    }
    positive(err, "etcd.timeout", etcd.timeout);
}

/// `[redis]`.
pub fn check_redis(redis: &Redis, err: &mut impl FnMut(&str, String)) {
    check_redis_urls(redis, err);
    if redis.key_prefix.trim().is_empty() {
        err("redis.key_prefix", "must not be empty".into());
    }
    if redis.execution_history_retention.as_millis() == 0 {
        err(
            "redis.execution_history_retention",
            "must be above 0".into(),
        );
    }
    if redis.execution_history_max_entries == 0 {
        err(
            "redis.execution_history_max_entries",
            "must be at least 1".into(),
        );
    }
    for (q, &n) in &redis.queue_partitions {
        if let Some(problem) = queue_name_problem(q) {
            err("redis.queue_partitions", problem);
        }
        if !(1..=ax_queue::MAX_PARTITIONS).contains(&n) {
            err(
                "redis.queue_partitions",
                format!(
                    "queue `{q}` has {n} partitions; 1 to {} are allowed",
                    ax_queue::MAX_PARTITIONS
                ),
            );
        }
    }
}

/// `[redis]`: the URLs in use and the TLS settings that depend on their scheme.
fn check_redis_urls(redis: &Redis, err: &mut impl FnMut(&str, String)) {
    let redis_key = if redis.cluster_nodes.is_empty() {
        "redis.url"
    } else {
        "redis.cluster_nodes"
    };
    for url in redis.urls() {
        match url.split_once("://") {
            Some(("redis" | "rediss", rest)) if !rest.is_empty() => {}
            _ => err(
                redis_key,
                format!(
                    "`{}` must start with redis:// or rediss:// (TLS) and name a host",
                    ax_scheduler_core::redact::mask_url_password(url)
                ),
            ),
        }
    }
    let tls = redis
        .urls()
        .iter()
        .filter(|u| u.starts_with("rediss://"))
        .count();
    if tls != 0 && tls != redis.cluster_nodes.len().max(1) {
        err(
            "redis.cluster_nodes",
            "mixes redis:// and rediss:// (TLS): every node of a cluster is reached alike".into(),
        );
    }
    if redis.cert_file.is_empty() != redis.key_file.is_empty() {
        err(
            "redis.cert_file",
            "cert_file and key_file must be set together (client certificate and its key)".into(),
        );
    }
    if tls == 0 {
        for (key, value) in [
            ("redis.ca_file", &redis.ca_file),
            ("redis.cert_file", &redis.cert_file),
        ] {
            if !value.is_empty() {
                err(
                    key,
                    format!(
                        "is set, so connections use TLS, but {redis_key} is not rediss://: \
                         use rediss://"
                    ),
                );
            }
        }
    }
}

/// `[election]`.
pub fn check_election(election: &Election, err: &mut impl FnMut(&str, String)) {
    if election.lease_ttl < Duration::from_secs(2) {
        err(
            "election.lease_ttl",
            format!(
                "{} is too short: etcd leases count whole seconds and the leader renews at a third of the TTL; use at least 2s",
                show(election.lease_ttl)
            ),
        );
    }
}

/// `[audit]`.
pub fn check_audit(audit: &Audit, err: &mut impl FnMut(&str, String)) {
    positive(err, "audit.retention", audit.retention);
    if audit.max_records == 0 {
        err("audit.max_records", "must be at least 1".into());
    }
    let record = crate::audit::MAX_RECORD_BYTES as u64;
    if audit.max_bytes < record {
        err(
            "audit.max_bytes",
            format!("must hold at least one record of the largest size ({record} bytes)"),
        );
    }
}

/// `[limits]`.
pub fn check_limits(limits: &Limits, err: &mut impl FnMut(&str, String)) {
    if limits.max_request_bytes < 1024 {
        err(
            "limits.max_request_bytes",
            format!("{} is below 1024 bytes", limits.max_request_bytes),
        );
    }
    if limits.max_tasks_per_namespace == 0 {
        err(
            "limits.max_tasks_per_namespace",
            "must be at least 1".into(),
        );
    }
    if limits.triggers_per_task_per_minute == 0 {
        err(
            "limits.triggers_per_task_per_minute",
            "must be at least 1".into(),
        );
    }
    if limits.max_list_scan == 0 {
        err("limits.max_list_scan", "must be at least 1".into());
    }
    if limits.reads_per_minute == 0 {
        err("limits.reads_per_minute", "must be at least 1".into());
    }
    if limits.scheduled_per_minute < crate::api::SCHEDULE_REQUEST_MAX as u32 {
        err(
            "limits.scheduled_per_minute",
            format!(
                "must be at least {} (one full schedule request)",
                crate::api::SCHEDULE_REQUEST_MAX
            ),
        );
    }
    if limits.operate_actions_per_minute == 0 {
        err(
            "limits.operate_actions_per_minute",
            "must be at least 1".into(),
        );
    }
    if !(1..=crate::api::BACKFILL_HARD_MAX).contains(&limits.max_backfill_fires) {
        err(
            "limits.max_backfill_fires",
            format!(
                "{} is outside 1 to {}",
                limits.max_backfill_fires,
                crate::api::BACKFILL_HARD_MAX
            ),
        );
    }
}

/// Reports `key` when `d` is zero.
pub fn positive(err: &mut impl FnMut(&str, String), key: &str, d: Duration) {
    if d.is_zero() {
        err(key, "must be longer than 0".into());
    }
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// What is wrong with a queue name in the configuration, if anything. The partition
/// separator is refused: `hot#p3` names a partition of `hot` (see `redis.queue_partitions`).
pub fn queue_name_problem(q: &str) -> Option<String> {
    if !is_key_segment(q) || !ax_queue::keys::validate_name(q) {
        Some(format!(
            "queue `{q}` is not a queue name (non-empty, no `/`, braces or spaces)"
        ))
    } else if q.contains(ax_queue::PARTITION_SEPARATOR) {
        Some(format!(
            "queue `{q}` contains `{sep}`, which separates a queue from its partition's number; \
             name the queue (a worker of it serves every partition)",
            sep = ax_queue::PARTITION_SEPARATOR
        ))
    } else {
        None
    }
}

/// A text usable as one segment of a key: not blank, no `/`, no surrounding spaces.
fn is_key_segment(s: &str) -> bool {
    !s.trim().is_empty() && !s.contains('/') && s.trim() == s
}
