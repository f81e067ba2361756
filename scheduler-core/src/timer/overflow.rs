//! The overflow min-heap for timers due beyond the wheel's top window.
//!
//! Far-future timers are few and rarely touched (a yearly cron, a retry scheduled days out),
//! so a plain `BinaryHeap` keyed by `(due, seq)` is enough and keeps the wheel small. Cancel
//! and reschedule use lazy deletion: the entry in the slab is freed or moved at once (O(1)),
//! and its heap item becomes a tombstone, recognised because the slab entry's `seq` no longer
//! matches (every insert and reschedule takes a fresh `seq`). Tombstones at the top are
//! dropped right away so the top is always live (an exact `next_due`), and the heap is rebuilt
//! without tombstones once they outnumber live items, which keeps memory bounded and the cost
//! amortised O(1) per cancel.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Tombstones tolerated before a rebuild is considered at all.
const MIN_TOMBSTONES_FOR_REBUILD: usize = 1024;

/// One heap item: the slab entry `idx` as it was when pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct HeapKey {
    pub(super) due: i64,
    pub(super) seq: u64,
    pub(super) idx: u32,
}

/// A min-heap of [`HeapKey`] with lazy deletion.
#[derive(Debug, Default)]
pub(super) struct Overflow {
    heap: BinaryHeap<Reverse<HeapKey>>,
    tombstones: usize,
}

impl Overflow {
    pub(super) fn push(&mut self, key: HeapKey) {
        self.heap.push(Reverse(key));
    }

    /// The earliest live item; `is_live` must hold for it (see [`Overflow::purge_top`]).
    pub(super) fn peek(&self) -> Option<HeapKey> {
        self.heap.peek().map(|r| r.0)
    }

    pub(super) fn pop(&mut self) -> Option<HeapKey> {
        self.heap.pop().map(|r| r.0)
    }

    /// Records that one item became a tombstone, then restores the invariants: a live top, and
    /// no more tombstones than live items (beyond a small floor).
    pub(super) fn bury(&mut self, is_live: impl Fn(&HeapKey) -> bool) {
        self.tombstones += 1;
        if self.tombstones >= MIN_TOMBSTONES_FOR_REBUILD && self.tombstones * 2 > self.heap.len() {
            self.heap.retain(|r| is_live(&r.0));
            self.tombstones = 0;
        } else {
            self.purge_top(is_live);
        }
    }

    /// Pops tombstones off the top.
    pub(super) fn purge_top(&mut self, is_live: impl Fn(&HeapKey) -> bool) {
        while let Some(Reverse(top)) = self.heap.peek() {
            if is_live(top) {
                break;
            }
            self.heap.pop();
            self.tombstones = self.tombstones.saturating_sub(1);
        }
    }

    /// Items in the heap, tombstones included.
    #[cfg(test)]
    pub(super) fn raw_len(&self) -> usize {
        self.heap.len()
    }
}
