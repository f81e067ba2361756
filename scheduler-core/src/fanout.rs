//! Fan-out: one fire of a task with `fanout: {"shards": N}` runs as N executions; with
//! `fanout: {"broadcast": true}`, as one execution on each live worker of its queue.
//!
//! Each piece is an execution of its own (its own retries, its own history), told its
//! `piece_index` and `piece_total`. The fire they share has an id, the **fan-out id**: the
//! run-now's or the dependency step's execution id, or, for a scheduled fire, an id derived
//! from the task and the fire instant ([`ExecutionId::for_fire`]). Piece `i`'s execution id
//! is the fan-out id with its last 16 bits replaced by `i` ([`ExecutionId::piece`]): the
//! same on every leader, so pieces sent again after a failover are duplicates to the queue,
//! and a piece's end maps back to its fan-out and
//! index without a table.
//!
//! The fire's progress (which pieces ended, and how) is kept in the task's state, written
//! with the ends, so a new leader finishes the count (and sends the pieces not yet ended
//! again: those already queued are refused as duplicates). The fire ends once every piece
//! has: it succeeded when all did; that single outcome is what the task's state, its
//! dependency chain and its deadline see.
//!
//! A broadcast fire is a fanned-out fire whose piece count is the number of live workers the
//! leader found when it sent the fire: piece `i` is addressed to the `i`-th of them, sorted.
//! The list is kept in the progress with the count, so a new leader sends the pieces not
//! ended to the same workers, never to a fresh listing. The dispatcher leaves a broadcast
//! fire unaddressed until the shell has listed the workers
//! ([`crate::Dispatcher::address_broadcast`]): the listing is I/O, the rest is decided here.

use serde::{Deserialize, Serialize};

use crate::execution_id::ExecutionId;
use crate::time::UtcMillis;

/// One piece of a fanned-out fire, carried by its dispatch and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// 0-based.
    pub index: u32,
    /// How many pieces the fire has.
    pub total: u32,
    /// The fire's fan-out id.
    pub fanout: ExecutionId,
    /// For a broadcast fire: the worker this piece runs on, and nowhere else.
    pub worker: Option<String>,
}

impl Piece {
    /// This piece's execution id.
    pub fn execution_id(&self) -> ExecutionId {
        self.fanout.piece(self.index)
    }
}

/// A fanned-out fire whose pieces have not all ended (in the task's state).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanoutProgress {
    /// The fan-out id.
    pub id: ExecutionId,
    /// The fire's due instant.
    pub fire_at: UtcMillis,
    /// Pieces in all.
    pub total: u32,
    /// The dependency run the fire is a step of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<ExecutionId>,
    /// Bit `i` set: piece `i` succeeded.
    #[serde(default)]
    pub succeeded: Vec<u64>,
    /// Bit `i` set: piece `i` failed for good (or was killed).
    #[serde(default)]
    pub failed: Vec<u64>,
    /// For a broadcast fire: the worker of each piece, in piece order (`total` of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<String>,
}

impl FanoutProgress {
    /// A fire whose `total` pieces have just been sent.
    pub fn new(id: ExecutionId, fire_at: UtcMillis, total: u32, run: Option<ExecutionId>) -> Self {
        FanoutProgress {
            id,
            fire_at,
            total,
            run,
            succeeded: Vec::new(),
            failed: Vec::new(),
            workers: Vec::new(),
        }
    }

    /// A broadcast fire just sent to `workers`, one piece each, in this order.
    pub fn broadcast(
        id: ExecutionId,
        fire_at: UtcMillis,
        workers: Vec<String>,
        run: Option<ExecutionId>,
    ) -> Self {
        let total = u32::try_from(workers.len()).unwrap_or(u32::MAX);
        FanoutProgress {
            workers,
            ..Self::new(id, fire_at, total, run)
        }
    }

    fn has(bits: &[u64], i: u32) -> bool {
        let (word, bit) = ((i / 64) as usize, i % 64);
        bits.get(word).is_some_and(|w| w & (1 << bit) != 0)
    }

    fn set(bits: &mut Vec<u64>, i: u32) {
        let (word, bit) = ((i / 64) as usize, i % 64);
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        bits[word] |= 1 << bit;
    }

    /// Whether piece `i` has ended.
    pub fn ended(&self, i: u32) -> bool {
        Self::has(&self.succeeded, i) || Self::has(&self.failed, i)
    }

    /// Records piece `i`'s end; false when it was recorded already.
    pub fn record(&mut self, i: u32, succeeded: bool) -> bool {
        if i >= self.total || self.ended(i) {
            return false;
        }
        if succeeded {
            Self::set(&mut self.succeeded, i);
        } else {
            Self::set(&mut self.failed, i);
        }
        true
    }

    fn count(bits: &[u64]) -> u32 {
        bits.iter().map(|w| w.count_ones()).sum()
    }

    /// Pieces that failed.
    pub fn failures(&self) -> u32 {
        Self::count(&self.failed)
    }

    /// Whether every piece has ended.
    pub fn complete(&self) -> bool {
        Self::count(&self.succeeded) + self.failures() >= self.total
    }

    /// The pieces not ended yet.
    pub fn open(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.total).filter(|i| !self.ended(*i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::TaskKey;

    #[test]
    fn piece_ids_map_back_to_their_fanout_and_index() {
        let key = TaskKey::new("ns", "t");
        let f = ExecutionId::for_fire(&key, UtcMillis(1_000));
        assert_eq!(f, ExecutionId::for_fire(&key, UtcMillis(1_000)));
        assert_ne!(f, ExecutionId::for_fire(&key, UtcMillis(2_000)));
        let ids: Vec<ExecutionId> = (0..5).map(|i| f.piece(i)).collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(f.piece_index(*id, 5), Some(i as u32));
            assert_eq!(f.piece_index(*id, 2).is_some(), i < 2);
            assert_eq!(
                ExecutionId::for_fire(&key, UtcMillis(2_000)).piece_index(*id, 5),
                None
            );
        }
        let unique: std::collections::HashSet<&ExecutionId> = ids.iter().collect();
        assert_eq!(unique.len(), 5);
    }

    #[test]
    fn progress_counts_each_piece_once() {
        let mut p = FanoutProgress::new(ExecutionId::from_u128(1), UtcMillis(0), 130, None);
        for i in 0..130 {
            assert!(p.record(i, i != 70));
            assert!(!p.record(i, true), "once");
            assert_eq!(p.complete(), i == 129);
        }
        assert_eq!(p.failures(), 1);
        assert_eq!(p.open().count(), 0);
        assert!(!p.record(200, true));
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<FanoutProgress>(&json).unwrap(), p);
    }
}
