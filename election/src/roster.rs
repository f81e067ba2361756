//! The roster: `{prefix}/roster/{instance_id}`, every replica that registered and has not
//! stopped cleanly, live or not.
//!
//! A live record vanishes with its lease, so the records alone cannot tell a replica that
//! died from one that never was. The roster can: an entry without a live record is a replica
//! gone. [`sweep_roster`], run by every replica on a timer, stamps the instant it first saw
//! one gone and deletes entries gone for longer than [`ROSTER_KEEP`]. Each change is a
//! compare-and-swap on the entry's revision, so sweeps racing on several replicas (or a
//! replica registering again meanwhile) never undo each other. The roster's size is bounded
//! by the replicas started within [`ROSTER_KEEP`], and past [`ROSTER_MAX`] entries the
//! oldest gone ones go first.

use ax_scheduler_core::UtcMillis;
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::instances::{list_instances, RosterEntry};
use crate::keys::roster_prefix;

/// How long a gone replica stays on the roster.
pub const ROSTER_KEEP: std::time::Duration = std::time::Duration::from_secs(3600);

/// Most gone entries kept, whatever their age.
pub const ROSTER_MAX: usize = 256;

/// What one sweep changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Entries newly stamped gone.
    pub marked: usize,
    /// Entries forgotten.
    pub forgotten: usize,
}

/// A roster entry with its key's revision.
struct Stored {
    key: Vec<u8>,
    mod_revision: i64,
    entry: RosterEntry,
}

/// Every roster entry, in instance id order. Entries that do not decode are skipped: the
/// roster is informative, and one bad value must not hide the others.
pub async fn list_roster(
    client: &Client,
    config: &ElectionConfig,
) -> Result<Vec<RosterEntry>, ElectionError> {
    Ok(read(client, config)
        .await?
        .into_iter()
        .map(|s| s.entry)
        .collect())
}

async fn read(client: &Client, config: &ElectionConfig) -> Result<Vec<Stored>, ElectionError> {
    let mut kv = client.kv_client();
    let resp = timed(
        "roster list",
        config.request_timeout,
        kv.get(
            roster_prefix(&config.prefix),
            Some(GetOptions::new().with_prefix()),
        ),
    )
    .await?;
    Ok(resp
        .kvs()
        .iter()
        .filter_map(|kv| {
            Some(Stored {
                key: kv.key().to_vec(),
                mod_revision: kv.mod_revision(),
                entry: serde_json::from_slice(kv.value()).ok()?,
            })
        })
        .collect())
}

/// Stamps entries whose live record is gone with `now` and forgets those gone for longer
/// than [`ROSTER_KEEP`] (or beyond the [`ROSTER_MAX`] most recent).
pub async fn sweep_roster(
    client: &Client,
    config: &ElectionConfig,
    now: UtcMillis,
) -> Result<SweepReport, ElectionError> {
    let live: std::collections::HashSet<String> = list_instances(client, config)
        .await?
        .into_iter()
        .map(|r| r.instance_id)
        .collect();
    let stored = read(client, config).await?;
    let plan = plan_sweep(&stored, &live, now);
    let mut report = SweepReport::default();
    let mut kv = client.kv_client();
    for (i, action) in plan {
        let s = &stored[i];
        let guard = Compare::mod_revision(s.key.clone(), CompareOp::Equal, s.mod_revision);
        let op = match action {
            Action::Mark => {
                let entry = RosterEntry {
                    record: s.entry.record.clone(),
                    gone_at: Some(now),
                };
                // A record of strings and integers always serializes.
                TxnOp::put(
                    s.key.clone(),
                    serde_json::to_vec(&entry).unwrap_or_default(),
                    None,
                )
            }
            Action::Forget => TxnOp::delete(s.key.clone(), None),
        };
        let txn = Txn::new().when([guard]).and_then([op]);
        let resp = timed("roster sweep", config.request_timeout, kv.txn(txn)).await?;
        if resp.succeeded() {
            match action {
                Action::Mark => report.marked += 1,
                Action::Forget => report.forgotten += 1,
            }
        }
    }
    Ok(report)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Mark,
    Forget,
}

/// What to do with each entry, by index: pure, so the policy is tested without etcd.
fn plan_sweep(
    stored: &[Stored],
    live: &std::collections::HashSet<String>,
    now: UtcMillis,
) -> Vec<(usize, Action)> {
    let keep_ms = i64::try_from(ROSTER_KEEP.as_millis()).unwrap_or(i64::MAX);
    let mut gone: Vec<(usize, UtcMillis)> = Vec::new();
    let mut plan = Vec::new();
    for (i, s) in stored.iter().enumerate() {
        if live.contains(&s.entry.record.instance_id) {
            continue;
        }
        match s.entry.gone_at {
            None => plan.push((i, Action::Mark)),
            Some(at) if now.0.saturating_sub(at.0) > keep_ms => {
                plan.push((i, Action::Forget));
            }
            Some(at) => gone.push((i, at)),
        }
    }
    // Past the cap, the oldest gone go first.
    let marked = plan.iter().filter(|(_, a)| *a == Action::Mark).count();
    let excess = (gone.len() + marked).saturating_sub(ROSTER_MAX);
    gone.sort_by_key(|(_, at)| *at);
    plan.extend(gone.iter().take(excess).map(|(i, _)| (*i, Action::Forget)));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instances::InstanceRecord;

    fn stored(id: &str, gone_at: Option<i64>) -> Stored {
        Stored {
            key: id.as_bytes().to_vec(),
            mod_revision: 1,
            entry: RosterEntry {
                record: InstanceRecord {
                    instance_id: id.to_owned(),
                    roles: vec![],
                    handlers: vec![],
                    queues: vec![],
                    version: "0".into(),
                    address: None,
                    host: None,
                    pid: None,
                    started_at: UtcMillis(0),
                },
                gone_at: gone_at.map(UtcMillis),
            },
        }
    }

    #[test]
    fn live_kept_new_gone_marked_old_gone_forgotten() {
        let keep = i64::try_from(ROSTER_KEEP.as_millis()).unwrap();
        let now = UtcMillis(10 * keep);
        let s = vec![
            stored("live", None),
            stored("died", None),
            stored("recent", Some(10 * keep - 1000)),
            stored("old", Some(10 * keep - keep - 1)),
        ];
        let live = ["live".to_owned()].into_iter().collect();
        assert_eq!(
            plan_sweep(&s, &live, now),
            vec![(1, Action::Mark), (3, Action::Forget)]
        );
    }

    #[test]
    fn beyond_the_cap_the_oldest_gone_go_first() {
        let now = UtcMillis(1_000_000);
        let mut s: Vec<Stored> = (0..ROSTER_MAX as i64 + 2)
            .map(|i| stored(&format!("r{i}"), Some(1_000_000 - 1 - i)))
            .collect();
        s.push(stored("fresh", None));
        let plan = plan_sweep(&s, &Default::default(), now);
        // One newly marked plus ROSTER_MAX + 2 gone: the three oldest go.
        let forgotten: Vec<usize> = plan
            .iter()
            .filter(|(_, a)| *a == Action::Forget)
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(forgotten, vec![ROSTER_MAX + 1, ROSTER_MAX, ROSTER_MAX - 1]);
    }
}
