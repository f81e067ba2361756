//! Changes to task specs written to etcd without ax (`etcdctl put`, a script), recorded in
//! the audit log as `etcd (direct)`.
//!
//! The leader sees every change in its registry watch, ax's own and others alike. ax writes
//! its audit record right after its change, so a change is taken as ax's when a record of a
//! `task.*` action on the same task lies within [`WINDOW`] of when the leader saw it; the
//! check waits [`GRACE`] after the change for that record to land. What is left is recorded
//! as direct. The decision ([`DirectWrites`]) is a pure step over the observations, the
//! records and `now`; the task around it only reads and writes the log.
//!
//! Limits, documented: a direct write within [`WINDOW`] of an ax change to the same task is
//! taken as ax's; changes seen by a leader that loses its lease within [`GRACE`] are not
//! checked; and an ax process that dies between its change and its record leaves the change
//! recorded as direct.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::UtcMillis;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::audit::{AuditLog, Observed, RecordedChange};
use crate::clock::Clock;

/// How long after a change its ax record is waited for.
pub(super) const GRACE: Duration = Duration::from_secs(5);
/// How far apart a change and its ax record may be.
pub(super) const WINDOW: Duration = Duration::from_secs(60);
/// Observations kept at most: a burst of direct writes beyond it is recorded in part (with
/// a warning), never held without bound.
const MAX_PENDING: usize = 10_000;
/// Records read per check at most.
const MAX_RECORDS: usize = 5000;

/// The changes waiting for their check.
#[derive(Debug, Default)]
pub(super) struct DirectWrites {
    pending: VecDeque<Observed>,
    dropped: u64,
}

impl DirectWrites {
    /// Adds a change; the oldest is dropped when [`MAX_PENDING`] are waiting.
    pub(super) fn observe(&mut self, change: Observed) {
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
            self.dropped += 1;
        }
        self.pending.push_back(change);
    }

    /// Changes dropped unchecked so far.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// When the oldest waiting change is due for its check.
    pub(super) fn next_due(&self) -> Option<UtcMillis> {
        self.pending.front().map(|o| o.seen_at.add(GRACE))
    }

    /// The instant from which records must be read to check what is due at `now`.
    pub(super) fn records_since(&self) -> Option<UtcMillis> {
        self.pending.front().map(|o| o.seen_at.sub(WINDOW))
    }

    /// Takes the changes due at `now` and returns those no change ax recorded in `records`
    /// accounts for.
    pub(super) fn take_due(&mut self, now: UtcMillis, records: &[RecordedChange]) -> Vec<Observed> {
        let mut direct = Vec::new();
        while let Some(o) = self.pending.front() {
            if o.seen_at.add(GRACE) > now {
                break;
            }
            let window = i64::try_from(WINDOW.as_millis()).unwrap_or(i64::MAX);
            let ours = records
                .iter()
                .any(|r| r.target == o.target && (r.at.0 - o.seen_at.0).abs() <= window);
            if let Some(o) = self.pending.pop_front().filter(|_| !ours) {
                direct.push(o);
            }
        }
        direct
    }
}

/// Checks the changes `changes` delivers until `cancel`, recording the direct ones.
pub(super) async fn run(
    log: Arc<dyn AuditLog>,
    clock: Arc<dyn Clock>,
    mut changes: mpsc::Receiver<Observed>,
    cancel: CancellationToken,
) {
    let mut state = DirectWrites::default();
    let mut reported_drops = 0;
    loop {
        let wait = state.next_due().map_or(Duration::from_secs(3600), |due| {
            Duration::from_millis(u64::try_from(due.0 - clock.now().0).unwrap_or(0))
        });
        tokio::select! {
            _ = cancel.cancelled() => return,
            change = changes.recv() => match change {
                Some(change) => state.observe(change),
                None => return,
            },
            _ = tokio::time::sleep(wait) => {
                let Some(since) = state.records_since() else { continue };
                let records = match log.ax_changes_since(since, MAX_RECORDS).await {
                    Ok(records) => records,
                    Err(e) => {
                        // Checked again at the next due change or after a pause; nothing is
                        // lost while etcd is away but time.
                        tracing::warn!(error = %e, "cannot read the audit log to find direct etcd writes");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                for change in state.take_due(clock.now(), &records) {
                    let action = if change.deleted { "task.delete" } else { "task.put" };
                    tracing::info!(target_task = %change.target, action, "task spec changed in etcd without ax");
                    if let Err(e) = log.record_direct(&change).await {
                        tracing::warn!(error = %e, target_task = %change.target, "cannot record a direct etcd write in the audit log");
                    }
                }
                if state.dropped() > reported_drops {
                    tracing::warn!(dropped = state.dropped() - reported_drops, "too many spec changes at once: some were not checked for the audit log");
                    reported_drops = state.dropped();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(at: i64, target: &str) -> RecordedChange {
        RecordedChange {
            at: UtcMillis(at),
            target: target.into(),
        }
    }

    fn seen(target: &str, at: i64, deleted: bool) -> Observed {
        Observed {
            target: target.into(),
            deleted,
            seen_at: UtcMillis(at),
        }
    }

    #[test]
    fn a_change_without_an_ax_record_nearby_is_direct_once_its_grace_is_over() {
        let mut d = DirectWrites::default();
        d.observe(seen("ns/a", 100_000, false));
        d.observe(seen("ns/b", 100_500, true));
        d.observe(seen("ns/c", 101_000, false));
        assert_eq!(d.next_due(), Some(UtcMillis(105_000)));
        assert_eq!(d.records_since(), Some(UtcMillis(40_000)));
        let records = [ours(100_020, "ns/a"), ours(30_000, "ns/c")];
        // Before its grace nothing is decided.
        assert!(d.take_due(UtcMillis(104_999), &records).is_empty());
        let direct = d.take_due(UtcMillis(105_500), &records);
        // a has its record; b has none; c's is too far away and is still waiting.
        assert_eq!(direct, [seen("ns/b", 100_500, true)]);
        assert_eq!(d.next_due(), Some(UtcMillis(106_000)));
        let direct = d.take_due(UtcMillis(106_000), &records);
        assert_eq!(direct.len(), 1);
        assert_eq!(
            (direct[0].target.as_str(), direct[0].seen_at),
            ("ns/c", UtcMillis(101_000))
        );
        assert_eq!(d.next_due(), None);
    }

    #[test]
    fn pending_changes_are_bounded() {
        let mut d = DirectWrites::default();
        for i in 0..MAX_PENDING + 3 {
            d.observe(seen("ns/a", i64::try_from(i).unwrap(), false));
        }
        assert_eq!(d.dropped(), 3);
        assert_eq!(d.next_due(), Some(UtcMillis(3).add(GRACE)));
    }
}
