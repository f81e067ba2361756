//! Inputs and the `BinaryHeap` baseline shared by the timer benches.

// Each bench binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One hour in milliseconds: due times are spread uniformly over it.
pub(crate) const HOUR_MS: i64 = 3_600_000;

/// The epoch-ms origin every structure starts from.
pub(crate) const ORIGIN: i64 = 1_700_000_000_000;

/// `n` due offsets (ms after `ORIGIN`), uniform over one hour, from a fixed-seed generator so
/// every implementation and every run sees the same input.
pub(crate) fn due_offsets(n: usize) -> Vec<i64> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            // xorshift64*: good enough spread for bench inputs, no dependency.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let r = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
            (r % HOUR_MS as u64) as i64
        })
        .collect()
}

/// A plain binary min-heap timer with lazy cancel: the id doubles as payload and insertion
/// stamp, cancel marks the id, and popping skips marked ids.
pub(crate) struct LazyHeap {
    heap: BinaryHeap<Reverse<(i64, u64)>>,
    cancelled: Vec<bool>,
}

impl LazyHeap {
    pub(crate) fn new() -> Self {
        LazyHeap {
            heap: BinaryHeap::new(),
            cancelled: Vec::new(),
        }
    }

    /// Inserts the next id, due at `due`, and returns the id.
    pub(crate) fn insert(&mut self, due: i64) -> u64 {
        let id = self.cancelled.len() as u64;
        self.cancelled.push(false);
        self.heap.push(Reverse((due, id)));
        id
    }

    pub(crate) fn cancel(&mut self, id: u64) -> bool {
        let slot = &mut self.cancelled[id as usize];
        let was = !*slot;
        *slot = true;
        was
    }

    /// Appends every live timer due at or before `now` to `out`, in due order.
    pub(crate) fn advance_into(&mut self, now: i64, out: &mut Vec<(i64, u64)>) {
        while let Some(&Reverse((due, id))) = self.heap.peek() {
            if due > now {
                break;
            }
            self.heap.pop();
            if !self.cancelled[id as usize] {
                out.push((due, id));
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}
