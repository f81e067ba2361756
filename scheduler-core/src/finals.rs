//! The finals ledger: one-shot final states written many to an etcd key, not each to its own.
//!
//! A one-shot (`at`, `delay`) that ended has nothing more to do; its final state is what
//! `ax task get`, the console and a new leader must see, and it must reach etcd within a
//! bounded time, since Redis forgets the fire mark after a day and only the state then keeps a
//! new leader from firing the task again. Written to the task's own state key it cost one etcd
//! put per execution. Here the finals of one flush are grouped by [`bucket`] (a stable hash of
//! the task key, [`BUCKETS`] of them) and each group is one *sheet*, a key that holds up to
//! [`SHEET_ENTRIES`] finals: one put for up to a thousand executions, and a reader of one task
//! reads one bucket, not the whole ledger.
//!
//! A flush writes its sheets before it acknowledges the events they hold, like any state, so
//! nothing waits longer than it did; fenced like state writes. Below [`BUCKETS`] finals a flush
//! a sheet may hold a single final, which costs what the state key did; above it (a few hundred
//! finals a second at the default flush interval) the cost per execution falls with the rate.
//!
//! A task's state is the newer (by etcd mod revision) of its own state key and its entry in a
//! sheet: a state key written after a sheet (the task fired again, its spec changed) wins, and
//! the entry it supersedes is dead. A deleted task's entries are removed with its state (the
//! sheets holding them rewritten), so a task created again under the same id starts afresh.
//! A bucket holding many sheets is compacted: its live entries rewritten into as few sheets
//! as they fill, the dead ones dropped, so space stays bounded by the live finals.

use crate::key::TaskKey;
use crate::placement::bucket_of;
use crate::state::TaskState;
use crate::status::TaskStatus;
use crate::task::Schedule;

/// How many buckets the ledger's sheets are spread over.
pub const BUCKETS: u32 = 64;

/// Most finals one sheet holds.
pub const SHEET_ENTRIES: usize = 1000;

/// Most bytes of finals one sheet holds (etcd refuses a request above 1.5 MiB by default).
pub const SHEET_BYTES: usize = 512 * 1024;

/// A bucket holding more sheets than this is compacted.
pub const COMPACT_SHEETS: usize = 16;

/// The bucket of a task's ledger entries.
pub fn bucket(key: &TaskKey) -> u32 {
    bucket_of_task(&key.namespace, &key.id)
}

/// The bucket of the ledger entries of the task `namespace`/`id`.
pub fn bucket_of_task(namespace: &str, id: &str) -> u32 {
    bucket_of(&[namespace.as_bytes(), b"/", id.as_bytes()], BUCKETS)
}

/// Whether a task of `schedule` whose state is `state` goes to the ledger: a one-shot that
/// ended and has nothing left that a later write would have to change in place.
pub fn is_final(schedule: &Schedule, state: &TaskState) -> bool {
    matches!(schedule, Schedule::At(_) | Schedule::Delay(_))
        && matches!(
            state.status,
            TaskStatus::Success | TaskStatus::Failed | TaskStatus::Killed
        )
        && state.next_fire_at.is_none()
        && state.held_fire_at.is_none()
        && state.runs.is_empty()
        && state.fanouts.is_empty()
}

/// Groups `finals` into sheets: by bucket, then at most [`SHEET_ENTRIES`] entries and about
/// [`SHEET_BYTES`] of `size` each (`bucket_of` gives an item's [`bucket`]). Returns `(bucket, entries)` per sheet.
pub fn sheets<T>(
    finals: impl IntoIterator<Item = T>,
    bucket_of: impl Fn(&T) -> u32,
    size: impl Fn(&T) -> usize,
) -> Vec<(u32, Vec<T>)> {
    let mut by_bucket: std::collections::BTreeMap<u32, Vec<T>> = Default::default();
    for f in finals {
        by_bucket.entry(bucket_of(&f)).or_default().push(f);
    }
    let mut out = Vec::new();
    for (b, entries) in by_bucket {
        let mut sheet = Vec::new();
        let mut bytes = 0;
        for e in entries {
            let n = size(&e);
            if !sheet.is_empty() && (sheet.len() >= SHEET_ENTRIES || bytes + n > SHEET_BYTES) {
                out.push((b, std::mem::take(&mut sheet)));
                bytes = 0;
            }
            bytes += n;
            sheet.push(e);
        }
        if !sheet.is_empty() {
            out.push((b, sheet));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheets_fill_by_bucket_and_stay_within_their_bounds() {
        let keys: Vec<TaskKey> = (0..5000)
            .map(|i| TaskKey::new("ns", format!("t{i}")))
            .collect();
        let sheets = sheets(keys.iter(), |k| bucket(k), |_| 100);
        assert_eq!(sheets.iter().map(|s| s.1.len()).sum::<usize>(), 5000);
        // 64 buckets of about 78: one sheet each.
        assert_eq!(sheets.len(), BUCKETS as usize);
        for (b, s) in &sheets {
            assert!(s.iter().all(|k| bucket(k) == *b));
        }
        let big = super::sheets(keys.iter().take(3000), |k| bucket(k), |_| 600 * 1024 / 100);
        assert!(
            big.iter().all(|(_, s)| s.len() <= 86),
            "bytes bound the sheet"
        );
        assert_eq!(
            bucket(&TaskKey::new("ns", "a")),
            bucket(&TaskKey::new("ns", "a"))
        );
    }
}
