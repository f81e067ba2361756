//! The engine's per-job tables, shaped for the fire path.
//!
//! The job table is keyed by [`JobId`]s the kernel hands out itself, one after the other:
//! nobody outside chooses them, so a multiplicative hash is enough and the default SipHash
//! (which guards tables whose keys an adversary picks) is a cost on every lookup of a fire
//! for nothing. A job's running attempts are almost always none or one: the first is kept
//! inline, so starting and ending an attempt allocates no table.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use ax_scheduler_core::handler::Cancel;
use ax_scheduler_core::ExecutionId;

use crate::job_id::JobId;

/// Hashes a kernel-made id: the id itself in the low bits, which pick the bucket, and a
/// multiplication by a constant of the golden ratio in the top 7, which the table compares
/// first within a group. Consecutive ids then sit in neighbouring buckets: jobs fire in
/// about the order they were submitted (a burst in submit order, delays of one length in
/// due order), so the fire path walks the table in order instead of missing the cache at
/// every lookup, and the top bits still tell apart the ids a group holds.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `JobId`; anything else still hashes every byte.
        for b in bytes {
            self.write_u64(u64::from(*b) ^ self.0.rotate_left(8));
        }
    }

    fn write_u64(&mut self, n: u64) {
        const TOP: u64 = 0xFE00_0000_0000_0000;
        let n = self.0 ^ n;
        self.0 = (n & !TOP) | (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) & TOP);
    }
}

/// The jobs a kernel knows, by id.
pub(crate) type JobTable<V> = HashMap<JobId, V, BuildHasherDefault<IdHasher>>;

/// The kill switches of a job's running attempts.
#[derive(Default)]
pub(crate) struct Running {
    first: Option<(ExecutionId, Cancel)>,
    more: Vec<(ExecutionId, Cancel)>,
}

impl Running {
    pub(crate) fn insert(&mut self, execution: ExecutionId, kill: Cancel) {
        if self.first.is_none() {
            self.first = Some((execution, kill));
        } else {
            self.more.push((execution, kill));
        }
    }

    pub(crate) fn remove(&mut self, execution: ExecutionId) {
        if self.first.as_ref().is_some_and(|(e, _)| *e == execution) {
            self.first = self.more.pop();
        } else if let Some(i) = self.more.iter().position(|(e, _)| *e == execution) {
            self.more.swap_remove(i);
        }
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    /// Stops every running attempt; how many were not stopping already.
    pub(crate) fn cancel_all(&self) -> usize {
        let mut stopped = 0;
        for (_, kill) in self.first.iter().chain(&self.more) {
            stopped += usize::from(!kill.is_cancelled());
            kill.cancel();
        }
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_attempts_are_tracked_with_the_first_inline() {
        let mut r = Running::default();
        let ids: Vec<ExecutionId> = (0..3)
            .map(|_| ExecutionId::from_uuid(uuid::Uuid::now_v7()))
            .collect();
        let kills: Vec<Cancel> = ids.iter().map(|_| Cancel::new()).collect();
        for (id, kill) in ids.iter().zip(&kills) {
            r.insert(*id, kill.clone());
        }
        assert_eq!(r.len(), 3);
        r.remove(ids[0]);
        r.remove(ids[0]);
        assert_eq!(r.len(), 2);
        assert_eq!(r.cancel_all(), 2);
        assert!(!kills[0].is_cancelled());
        assert!(kills[1].is_cancelled() && kills[2].is_cancelled());
        assert_eq!(r.cancel_all(), 0, "stopping already");
        r.remove(ids[2]);
        r.remove(ids[1]);
        assert_eq!(r.len(), 0);
    }

    fn hash(n: u64) -> u64 {
        let mut h = IdHasher::default();
        h.write_u64(n);
        h.finish()
    }

    #[test]
    fn consecutive_ids_hash_apart() {
        let tops: std::collections::HashSet<u64> = (0..1000).map(|n| hash(n) >> 57).collect();
        assert!(tops.len() > 100, "the top 7 bits vary: {}", tops.len());
    }

    #[test]
    fn consecutive_ids_take_neighbouring_buckets() {
        // A table of 2^20 buckets picks one by the low 20 bits.
        let mask = (1 << 20) - 1;
        for n in [0, 1, 41, 1 << 19, (1 << 20) - 2] {
            assert_eq!(hash(n + 1) & mask, (hash(n) + 1) & mask, "after id {n}");
        }
        let mut table = JobTable::default();
        for n in 0..10_000 {
            table.insert(JobId(n), n);
        }
        assert!((0..10_000).all(|n| table.get(&JobId(n)) == Some(&n)));
    }
}
