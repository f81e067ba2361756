//! The cluster at a glance (`ax status`): leader, replicas, queues, shards, dead letters,
//! paused namespaces, etcd's size and Redis's warnings.
//!
//! Each part renders on its own from the status view, in a fixed order, so a part that has
//! nothing to say (no shards, no paused namespace) leaves no trace in the text.

use super::format::{millis, table};
use ax_control::api::{EtcdDbView, ReplicaState, ReplicaView, ShardsView, StatusView};

/// `ax status`.
pub fn status_text(s: &StatusView) -> String {
    let gone = s
        .replicas
        .iter()
        .filter(|r| r.state == ReplicaState::Gone)
        .count();
    let count = if gone > 0 {
        format!("{} ({gone} gone)", s.replicas.len())
    } else {
        s.replicas.len().to_string()
    };
    let mut out = format!("leader: {}\n\nreplicas: {count}\n", leader_text(s));
    out.push_str(&replicas_text(s));
    out.push_str(&format!("\nqueues: {}\n", s.queues.len()));
    out.push_str(&queues_text(s));
    if let Some(shards) = &s.shards {
        out.push_str(&shards_text(shards));
    }
    out.push_str(&format!("\ndead letters: {}\n", s.dlq_size));
    out.push_str(&paused_namespaces_text(s));
    if let Some(db) = s.etcd_db {
        out.push_str(&etcd_db_text(db));
    }
    for w in &s.redis_warnings {
        out.push_str(&format!("\nwarning: {w}\n"));
    }
    out
}

/// The replicas' table, the leader marked; nothing when there is none. A replica's host, pid
/// and address say which process to look at (or kill); its state says whether it is heard
/// from.
fn replicas_text(s: &StatusView) -> String {
    if s.replicas.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = s
        .replicas
        .iter()
        .map(|r| {
            let leads = s.leader.as_deref() == Some(r.id.as_str());
            vec![
                r.id.clone(),
                r.roles.join(","),
                r.host.clone().unwrap_or_else(|| "-".to_owned()),
                r.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
                r.address.clone().unwrap_or_else(|| "-".to_owned()),
                replica_state_text(r),
                r.version.clone(),
                if leads { "leader" } else { "" }.to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "INSTANCE", "ROLES", "HOST", "PID", "ADDRESS", "STATE", "VERSION", "",
        ],
        &rows,
    )
}

/// `live`, `stale (no heartbeat for 6s)`, `gone since 2026-…`.
fn replica_state_text(r: &ReplicaView) -> String {
    match r.state {
        ReplicaState::Live => "live".to_owned(),
        ReplicaState::Stale => format!("stale (no heartbeat for {})", millis(r.heartbeat_age_ms)),
        ReplicaState::Gone => match r.gone_at {
            Some(at) => format!("gone since {at}"),
            None => "gone".to_owned(),
        },
    }
}

/// The leader line: who, and a warning when the leader is not heard from.
fn leader_text(s: &StatusView) -> String {
    let Some(leader) = &s.leader else {
        return match &s.shards {
            // Nobody holds the leader key by design: the shards below say who schedules.
            Some(_) => "none (sharded scheduling: see shards)".to_owned(),
            None => "none".to_owned(),
        };
    };
    match s.replicas.iter().find(|r| &r.id == leader) {
        Some(r) if r.state != ReplicaState::Live => format!(
            "{leader} ({}: another replica takes over when its lease expires)",
            replica_state_text(r)
        ),
        _ => leader.clone(),
    }
}

/// The queues' table; nothing when there is none.
fn queues_text(s: &StatusView) -> String {
    if s.queues.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = s
        .queues
        .iter()
        .map(|q| {
            vec![
                if q.partitions > 1 {
                    format!("{} ({} partitions)", q.name, q.partitions)
                } else {
                    q.name.clone()
                },
                q.depth.to_string(),
                millis(q.oldest_age_ms),
                q.dlq_size.to_string(),
                q.workers.len().to_string(),
                if q.paused { "paused" } else { "active" }.to_owned(),
            ]
        })
        .collect();
    table(
        &[
            "QUEUE",
            "DEPTH",
            "OLDEST",
            "DEAD LETTERS",
            "WORKERS",
            "STATE",
        ],
        &rows,
    )
}

/// The paused namespaces, when, by whom; nothing when none is paused.
fn paused_namespaces_text(s: &StatusView) -> String {
    if s.paused_namespaces.is_empty() {
        return String::new();
    }
    let mut out = format!("\npaused namespaces: {}\n", s.paused_namespaces.len());
    let rows: Vec<Vec<String>> = s
        .paused_namespaces
        .iter()
        .map(|p| {
            vec![
                p.namespace.clone(),
                p.paused_at.to_string(),
                p.paused_by.clone(),
            ]
        })
        .collect();
    out.push_str(&table(&["NAMESPACE", "PAUSED AT", "BY"], &rows));
    out
}

/// etcd's database size against its quota, with a warning from 80 % on.
fn etcd_db_text(db: EtcdDbView) -> String {
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    let share = if db.quota_bytes > 0 {
        db.bytes as f64 * 100.0 / db.quota_bytes as f64
    } else {
        0.0
    };
    let mut out = format!(
        "etcd database: {:.1} MiB of {:.0} MiB quota ({share:.1} %)\n",
        mib(db.bytes),
        mib(db.quota_bytes)
    );
    if share >= 80.0 {
        out.push_str("\nwarning: etcd's database is near its quota: check auto-compaction and defragment (docs/deploy.md)\n");
    }
    out
}

/// The shard map: shards per owner, and the shards nobody owns.
fn shards_text(shards: &ShardsView) -> String {
    let mut per_owner: std::collections::BTreeMap<&str, Vec<u32>> = Default::default();
    for o in &shards.owners {
        per_owner.entry(o.owner.as_str()).or_default().push(o.shard);
    }
    let mut out = format!(
        "\nshards: {} ({} owned)\n",
        shards.total,
        shards.owners.len()
    );
    let rows: Vec<Vec<String>> = per_owner
        .iter()
        .map(|(owner, list)| {
            let names: Vec<String> = list.iter().map(u32::to_string).collect();
            vec![(*owner).to_owned(), list.len().to_string(), names.join(",")]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&table(&["OWNER", "SHARDS", "WHICH"], &rows));
    }
    let owned: std::collections::BTreeSet<u32> = shards.owners.iter().map(|o| o.shard).collect();
    let unowned: Vec<String> = (0..shards.total)
        .filter(|s| !owned.contains(s))
        .map(|s| s.to_string())
        .collect();
    if !unowned.is_empty() {
        out.push_str(&format!(
            "warning: shards without an owner (their tasks do not fire): {}\n",
            unowned.join(",")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_control::api::QueueView;
    use ax_scheduler_core::UtcMillis;

    #[test]
    fn status_marks_the_leader() {
        let s = StatusView {
            leader_since: None,
            clock: None,
            leader: Some("ax-1".into()),
            replicas: vec![
                ReplicaView {
                    id: "ax-0".into(),
                    roles: vec!["worker".into()],
                    version: "0.1.0".into(),
                    started_at: None,
                    heartbeat_age_ms: None,
                    host: Some("node-a".into()),
                    pid: Some(4242),
                    address: Some("127.0.0.1:8080".into()),
                    state: ReplicaState::Live,
                    gone_at: None,
                },
                ReplicaView {
                    id: "ax-1".into(),
                    roles: vec!["scheduler".into(), "worker".into()],
                    version: "0.1.0".into(),
                    started_at: None,
                    heartbeat_age_ms: None,
                    host: None,
                    pid: None,
                    address: None,
                    state: ReplicaState::Live,
                    gone_at: None,
                },
            ],
            queues: vec![QueueView {
                name: "default".into(),
                depth: 3,
                oldest_age_ms: Some(1500),
                dlq_size: 2,
                paused: true,
                workers: vec!["py-1".into()],
                partitions: 1,
            }],
            dlq_size: 2,
            redis_warnings: Vec::new(),
            etcd_db: None,
            paused_namespaces: vec![],
            shards: None,
        };
        let text = status_text(&s);
        assert!(text.starts_with("leader: ax-1\n"), "{text}");
        assert!(
            text.lines().any(|l| l.starts_with("ax-0")
                && l.contains("node-a")
                && l.contains("4242")
                && l.contains("127.0.0.1:8080")
                && l.contains("live")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("ax-1") && l.ends_with("leader")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("ax-0") && !l.contains("leader")),
            "{text}"
        );
        assert!(text.contains("default  3      1s 500ms"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("default") && l.ends_with("paused")),
            "{text}"
        );
        assert!(text.ends_with("dead letters: 2\n"), "{text}");
        let warned = StatusView {
            redis_warnings: vec!["Redis has neither AOF nor RDB persistence".into()],
            ..s
        };
        assert!(status_text(&warned)
            .ends_with("\nwarning: Redis has neither AOF nor RDB persistence\n"));
        let full = StatusView {
            etcd_db: Some(ax_control::api::EtcdDbView {
                bytes: 1800 * 1024 * 1024,
                quota_bytes: 2048 * 1024 * 1024,
            }),
            ..warned
        };
        let text = status_text(&full);
        assert!(
            text.contains("etcd database: 1800.0 MiB of 2048 MiB quota (87.9 %)"),
            "{text}"
        );
        assert!(
            text.contains("warning: etcd's database is near its quota"),
            "{text}"
        );
    }

    #[test]
    fn status_shows_the_shard_map_and_unowned_shards() {
        let owner = |shard, owner: &str| ax_election::ShardOwnerRecord {
            shard,
            owner: owner.into(),
            token: 7,
        };
        let text = shards_text(&ax_control::api::ShardsView {
            total: 4,
            owners: vec![owner(0, "ax-1"), owner(1, "ax-0"), owner(3, "ax-1")],
        });
        assert!(text.contains("shards: 4 (3 owned)"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("ax-1") && l.ends_with("2       0,3")),
            "{text}"
        );
        assert!(
            text.contains("shards without an owner (their tasks do not fire): 2"),
            "{text}"
        );
    }

    #[test]
    fn a_silent_leader_is_flagged_and_a_dead_replica_shown_gone() {
        let replica = |id: &str, state, age, gone_at| ReplicaView {
            id: id.into(),
            roles: vec!["scheduler".into()],
            version: "0.1.0".into(),
            started_at: None,
            heartbeat_age_ms: age,
            host: Some("h".into()),
            pid: Some(1),
            address: None,
            state,
            gone_at,
        };
        let s = StatusView {
            leader_since: None,
            clock: None,
            leader: Some("ax-1".into()),
            replicas: vec![
                replica("ax-0", ReplicaState::Gone, None, Some(UtcMillis(0))),
                replica("ax-1", ReplicaState::Stale, Some(6000), None),
            ],
            queues: vec![],
            dlq_size: 0,
            redis_warnings: Vec::new(),
            etcd_db: None,
            paused_namespaces: vec![],
            shards: None,
        };
        let text = status_text(&s);
        assert!(
            text.starts_with(
                "leader: ax-1 (stale (no heartbeat for 6s): another replica takes over when its lease expires)\n"
            ),
            "{text}"
        );
        assert!(text.contains("replicas: 2 (1 gone)"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("ax-0") && l.contains("gone since 1970-01-01")),
            "{text}"
        );
    }
}
