//! Changes to task specs written to etcd without ax (`etcdctl put`, a script), recorded in
//! the audit log as `etcd (direct)`, a burst of them in a few records.
//!
//! The leader sees every change in its registry watch, ax's own and others alike. ax writes
//! its audit record right after its change, so a change is taken as ax's when a record of a
//! `task.*` action on the same task lies within [`WINDOW`] of when the leader saw it; the
//! check waits [`GRACE`] after the change for that record to land. What is left is recorded
//! as direct.
//!
//! Registering by script writes thousands of keys in seconds, so a check runs at most once
//! per [`CHECK_EVERY`], takes every change whose grace is over, and writes the direct ones
//! as one record per [`MAX_BATCH`] tasks: a burst costs one etcd write per thousand tasks, not
//! one per task. The check runs beside the intake (the term hands changes on with `try_send`
//! and never waits for it), so a slow etcd delays the records, not the fires. The decision
//! ([`DirectWrites`], [`direct_of`], [`batches`]) is pure over the observations, the records
//! and `now`; the task around it only reads and writes the log.
//!
//! Limits, documented: a direct write within [`WINDOW`] of an ax change to the same task is
//! taken as ax's; changes seen by a leader that loses its lease within [`GRACE`] are not
//! checked; and an ax process that dies between its change and its record leaves the change
//! recorded as direct.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::UtcMillis;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::audit::{AuditLog, Observed, RecordedChange, MAX_BATCH, MAX_BATCH_BYTES};
use crate::clock::Clock;

/// How long after a change its ax record is waited for.
pub(super) const GRACE: Duration = Duration::from_secs(5);
/// How far apart a change and its ax record may be.
pub(super) const WINDOW: Duration = Duration::from_secs(60);
/// How often the changes are checked at most: the changes of one second share records.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Observations kept at most: a burst of direct writes beyond it is recorded in part (with
/// a warning), never held without bound. A registration of this many tasks within
/// [`GRACE`] is checked whole; an observation is about a hundred bytes.
const MAX_PENDING: usize = 100_000;
/// Changes the term may hand on before the check takes them: a watch response carries
/// thousands of changes at once, and a full channel drops them unchecked.
pub(super) const INTAKE: usize = 16_384;
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

    /// Takes the changes whose grace is over at `now`, oldest first.
    pub(super) fn take_due(&mut self, now: UtcMillis) -> Vec<Observed> {
        let mut due = Vec::new();
        while self
            .pending
            .front()
            .is_some_and(|o| o.seen_at.add(GRACE) <= now)
        {
            due.extend(self.pending.pop_front());
        }
        due
    }

    /// Puts back changes a check could not decide, ahead of the newer ones, within the
    /// bound.
    pub(super) fn put_back(&mut self, due: Vec<Observed>) {
        for o in due.into_iter().rev() {
            self.pending.push_front(o);
        }
        while self.pending.len() > MAX_PENDING {
            self.pending.pop_front();
            self.dropped += 1;
        }
    }
}

/// The changes of `due` that no change ax recorded in `records` accounts for.
pub(super) fn direct_of(due: Vec<Observed>, records: &[RecordedChange]) -> Vec<Observed> {
    let window = i64::try_from(WINDOW.as_millis()).unwrap_or(i64::MAX);
    // By task, so a burst is checked in one pass over each side rather than every pair.
    let mut ours: HashMap<&str, Vec<UtcMillis>> = HashMap::new();
    for r in records {
        ours.entry(r.target.as_str()).or_default().push(r.at);
    }
    due.into_iter()
        .filter(|o| {
            !ours
                .get(o.target.as_str())
                .is_some_and(|ats| ats.iter().any(|at| (at.0 - o.seen_at.0).abs() <= window))
        })
        .collect()
}

/// `direct` as the records to write, oldest first within each: writes apart from deletes
/// (a record has one action), each of at most [`MAX_BATCH`] tasks and [`MAX_BATCH_BYTES`]
/// of their names.
pub(super) fn batches(direct: Vec<Observed>) -> Vec<Vec<Observed>> {
    let (deleted, written): (Vec<Observed>, Vec<Observed>) =
        direct.into_iter().partition(|o| o.deleted);
    let mut out = Vec::new();
    for kind in [written, deleted] {
        let mut batch: Vec<Observed> = Vec::new();
        let mut bytes = 0;
        for o in kind {
            let full = batch.len() == MAX_BATCH || bytes + o.target.len() > MAX_BATCH_BYTES;
            if full && !batch.is_empty() {
                out.push(std::mem::take(&mut batch));
                bytes = 0;
            }
            bytes += o.target.len();
            batch.push(o);
        }
        if !batch.is_empty() {
            out.push(batch);
        }
    }
    out
}

/// A check under way: the changes it could not decide (the log was unreadable) come back.
type Check = Pin<Box<dyn Future<Output = Result<(), Vec<Observed>>> + Send>>;

/// Checks `due` against ax's records and records the direct ones.
async fn check(log: Arc<dyn AuditLog>, due: Vec<Observed>) -> Result<(), Vec<Observed>> {
    let Some(oldest) = due.iter().map(|o| o.seen_at).min() else {
        return Ok(());
    };
    let records = match log.ax_changes_since(oldest.sub(WINDOW), MAX_RECORDS).await {
        Ok(records) => records,
        Err(e) => {
            // Checked again at the next check; nothing is lost while etcd is away but time.
            tracing::warn!(error = %e, "cannot read the audit log to find direct etcd writes");
            return Err(due);
        }
    };
    for batch in batches(direct_of(due, &records)) {
        let Some(head) = batch.first() else { continue };
        let action = if head.deleted {
            "task.delete"
        } else {
            "task.put"
        };
        let first = &head.target;
        tracing::info!(tasks = batch.len(), first_task = %first, action, "task specs changed in etcd without ax");
        if let Err(e) = log.record_direct(&batch).await {
            tracing::warn!(error = %e, tasks = batch.len(), first_task = %first, "cannot record direct etcd writes in the audit log");
        }
    }
    Ok(())
}

/// Checks the changes `changes` delivers until `cancel`, recording the direct ones.
pub(super) async fn run(
    log: Arc<dyn AuditLog>,
    clock: Arc<dyn Clock>,
    changes: &mut mpsc::Receiver<Observed>,
    cancel: CancellationToken,
) {
    let mut state = DirectWrites::default();
    let mut reported_drops = 0;
    let mut checking: Option<Check> = None;
    let mut last_check: Option<UtcMillis> = None;
    loop {
        let wake = state
            .next_due()
            .map(|due| last_check.map_or(due, |at| due.max(at.add(CHECK_EVERY))));
        let wait = wake.map_or(Duration::from_secs(3600), |at| at.since(clock.now()));
        tokio::select! {
            () = cancel.cancelled() => return,
            change = changes.recv() => match change {
                Some(change) => state.observe(change),
                None => return,
            },
            result = async {
                match checking.as_mut() {
                    Some(check) => check.await,
                    None => std::future::pending().await,
                }
            } => {
                checking = None;
                if let Err(undecided) = result {
                    state.put_back(undecided);
                }
            }
            () = tokio::time::sleep(wait), if checking.is_none() && wake.is_some() => {
                let now = clock.now();
                let due = state.take_due(now);
                if !due.is_empty() {
                    last_check = Some(now);
                    checking = Some(Box::pin(check(Arc::clone(&log), due)));
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;
    use crate::audit::{AuditFuture, AuditLog};
    use crate::clock::TokioClock;

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
        let records = [ours(100_020, "ns/a"), ours(30_000, "ns/c")];
        // Before its grace nothing is decided.
        assert!(d.take_due(UtcMillis(104_999)).is_empty());
        let due = d.take_due(UtcMillis(105_500));
        assert_eq!(due.len(), 2);
        // a has its record; b has none; c's is too far away and is still waiting.
        assert_eq!(direct_of(due, &records), [seen("ns/b", 100_500, true)]);
        assert_eq!(d.next_due(), Some(UtcMillis(106_000)));
        let direct = direct_of(d.take_due(UtcMillis(106_000)), &records);
        assert_eq!(direct, [seen("ns/c", 101_000, false)]);
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
        // Changes put back after a failed check keep their place and the bound.
        let due = d.take_due(UtcMillis(4).add(GRACE));
        assert_eq!(due.len(), 2);
        d.observe(seen("ns/b", 1_000_000, false));
        d.put_back(due);
        assert_eq!(d.dropped(), 4);
        assert_eq!(d.next_due(), Some(UtcMillis(4).add(GRACE)));
    }

    #[test]
    fn batches_hold_one_action_and_a_bounded_number_of_tasks_and_bytes() {
        let mut direct: Vec<Observed> = (0..2_100)
            .map(|i| seen(&format!("ns/t-{i}"), i, i % 700 == 0))
            .collect();
        let long = "x".repeat(MAX_BATCH_BYTES / 3);
        direct.extend((0..4).map(|i| seen(&format!("ns/{long}{i}"), 3_000 + i, false)));
        let out = batches(direct);
        let sizes: Vec<(bool, usize)> = out.iter().map(|b| (b[0].deleted, b.len())).collect();
        // 2 097 short writes in thousands, the last 97 with two of the long names (a third
        // would pass the bytes' bound), the other two long ones, the deletes apart.
        assert_eq!(
            sizes,
            [
                (false, 1000),
                (false, 1000),
                (false, 99),
                (false, 2),
                (true, 3)
            ]
        );
        assert!(out
            .iter()
            .all(|b| b.iter().all(|o| o.deleted == b[0].deleted)));
    }

    /// An audit log in memory: ax's own records are `ours`; the first `failing_reads`
    /// reads fail.
    #[derive(Default)]
    struct MemoryLog {
        ours: Vec<RecordedChange>,
        failing_reads: AtomicUsize,
        reads: Mutex<Vec<tokio::time::Instant>>,
        written: Mutex<Vec<(tokio::time::Instant, Vec<Observed>)>>,
    }

    impl AuditLog for MemoryLog {
        fn ax_changes_since(&self, _: UtcMillis, _: usize) -> AuditFuture<'_, Vec<RecordedChange>> {
            self.reads.lock().unwrap().push(tokio::time::Instant::now());
            let fail = self
                .failing_reads
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            let ours = self.ours.clone();
            Box::pin(async move {
                if fail {
                    return Err("etcd is away".into());
                }
                Ok(ours)
            })
        }

        fn record_direct(&self, changes: &[Observed]) -> AuditFuture<'_, ()> {
            let batch = changes.to_vec();
            Box::pin(async move {
                // A write takes a while: changes keep arriving meanwhile.
                tokio::time::sleep(Duration::from_millis(200)).await;
                let mut written = self.written.lock().unwrap();
                written.push((tokio::time::Instant::now(), batch));
                Ok(())
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_direct_writes_is_recorded_in_a_few_records_at_most_once_a_second() {
        let start = UtcMillis(1_000_000);
        let clock = Arc::new(TokioClock::starting_at(start));
        let log = Arc::new(MemoryLog {
            // t-7 was put through ax; its record accounts for it.
            ours: vec![ours(start.0 + 100, "ns/t-7")],
            // The first read fails: those changes are checked again, not lost.
            failing_reads: AtomicUsize::new(1),
            ..MemoryLog::default()
        });
        let (tx, rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let checker = tokio::spawn({
            let (log, clock, cancel) = (
                Arc::clone(&log) as Arc<dyn AuditLog>,
                Arc::clone(&clock) as Arc<dyn Clock>,
                cancel.clone(),
            );
            async move {
                let mut rx = rx;
                run(log, clock, &mut rx, cancel).await;
            }
        });
        // 3 000 tasks written over 9 s, one every 3 ms, and one deleted at the end.
        let mut expected = std::collections::BTreeSet::new();
        for i in 0..3_000 {
            let target = format!("ns/t-{i}");
            if i != 7 {
                expected.insert((target.clone(), false));
            }
            tx.send(Observed {
                target,
                deleted: false,
                seen_at: clock.now(),
            })
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        tx.send(seen("ns/gone", clock.now().0, true)).await.unwrap();
        expected.insert(("ns/gone".to_owned(), true));
        tokio::time::sleep(GRACE + Duration::from_secs(5)).await;
        cancel.cancel();
        checker.await.unwrap();

        let written = log.written.lock().unwrap();
        let mut got = std::collections::BTreeSet::new();
        for (_, batch) in written.iter() {
            assert!(!batch.is_empty() && batch.len() <= MAX_BATCH);
            assert!(batch.iter().all(|o| o.deleted == batch[0].deleted));
            for o in batch {
                assert!(
                    got.insert((o.target.clone(), o.deleted)),
                    "{} twice",
                    o.target
                );
            }
        }
        assert_eq!(got, expected, "every direct change recorded once, t-7 not");
        // About one record per second of the burst (nine seconds, and the delete), not one
        // per task.
        assert!(
            (9..=12).contains(&written.len()),
            "{} records",
            written.len()
        );
        // One read per check, the failed one retried, and the checks a second apart.
        let reads = log.reads.lock().unwrap();
        assert!((10..=13).contains(&reads.len()), "{} reads", reads.len());
        // (To the clock's whole millisecond: the reading is truncated.)
        let apart = CHECK_EVERY - Duration::from_millis(2);
        assert!(reads.windows(2).all(|w| w[1] - w[0] >= apart), "{reads:?}");
    }
}
