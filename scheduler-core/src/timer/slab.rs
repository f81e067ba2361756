//! The timer's entry storage: one `Vec` of entries addressed by `u32` index, with a free list
//! and generation-checked handles.
//!
//! Every pending timer lives in exactly one entry; a wheel slot is a `Vec<u32>` of entry
//! indices, and each entry records its slot and its position in that `Vec`, so it can be
//! removed from the middle of a slot in O(1) by `swap_remove` (order inside a slot does not
//! matter: a drained slot is sorted anyway). Index vectors rather than intrusive linked lists
//! because draining and cascading a slot then reads its members with independent loads the CPU
//! can overlap, instead of a chain of dependent cache misses; that was 97 % of the time of a
//! 1 M-timer run with linked lists. A freed entry bumps its generation, so a
//! [`super::TimerHandle`] kept after its timer fired or was cancelled can never reach the
//! entry's next occupant.

/// "No entry": the end of the free list.
pub(super) const NIL: u32 = u32::MAX;

/// `loc` of a vacant entry (on the free list).
pub(super) const LOC_FREE: u16 = u16::MAX;

/// `loc` of an entry held by the overflow heap.
pub(super) const LOC_HEAP: u16 = u16::MAX - 1;

/// One timer, or a vacancy on the free list.
#[derive(Debug)]
pub(super) struct Entry<T> {
    /// Due instant, milliseconds since the Unix epoch.
    pub(super) due: i64,
    /// Insertion stamp: orders equal due times, and identifies the live overflow-heap item.
    pub(super) seq: u64,
    /// Bumped on every free so stale handles do not match.
    pub(super) generation: u32,
    /// Position in the slot's index `Vec`; the next vacancy while on the free list.
    pub(super) pos: u32,
    /// Flat slot index (`level << slot_bits | slot`), [`LOC_HEAP`] or [`LOC_FREE`].
    pub(super) loc: u16,
    pub(super) value: Option<T>,
}

/// Entries plus their free list.
#[derive(Debug)]
pub(super) struct Slab<T> {
    pub(super) entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            len: 0,
        }
    }

    /// Live entries.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Stores a new entry (not yet filed, `loc` still to be set by the caller) and returns its
    /// index and generation.
    pub(super) fn alloc(&mut self, due: i64, seq: u64, value: T) -> (u32, u32) {
        self.len += 1;
        if self.free_head != NIL {
            let idx = self.free_head;
            let e = &mut self.entries[idx as usize];
            self.free_head = e.pos;
            e.due = due;
            e.seq = seq;
            e.pos = 0;
            e.value = Some(value);
            return (idx, e.generation);
        }
        // Indices are u32 to keep entries small; NIL is reserved. Four billion pending timers
        // would need hundreds of GiB, so reaching this is a misuse rather than a load to handle.
        let idx = match u32::try_from(self.entries.len()) {
            Ok(i) if i != NIL => i,
            _ => panic!("timer wheel holds more than u32::MAX - 1 timers"),
        };
        self.entries.push(Entry {
            due,
            seq,
            generation: 0,
            pos: 0,
            loc: LOC_FREE,
            value: Some(value),
        });
        (idx, 0)
    }

    /// Whether `(idx, generation)` names a live entry.
    pub(super) fn is_live(&self, idx: u32, generation: u32) -> bool {
        self.entries
            .get(idx as usize)
            .is_some_and(|e| e.generation == generation && e.loc != LOC_FREE)
    }

    /// Frees a live entry already taken out of its slot and returns its value.
    pub(super) fn free(&mut self, idx: u32) -> Option<T> {
        self.len -= 1;
        let e = &mut self.entries[idx as usize];
        e.generation = e.generation.wrapping_add(1);
        e.loc = LOC_FREE;
        e.pos = self.free_head;
        self.free_head = idx;
        e.value.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_reuses_slots_with_new_generation() {
        let mut s = Slab::with_capacity(0);
        let (a, ga) = s.alloc(1, 1, "a");
        let (b, _) = s.alloc(2, 2, "b");
        s.entries[a as usize].loc = 0;
        s.entries[b as usize].loc = 0;
        assert_eq!(s.free(a), Some("a"));
        assert!(!s.is_live(a, ga));
        let (c, gc) = s.alloc(3, 3, "c");
        assert_eq!(c, a);
        assert_ne!(gc, ga);
        s.entries[c as usize].loc = 0;
        assert!(s.is_live(c, gc));
        assert!(!s.is_live(99, 0));
        assert_eq!(s.len(), 2);
    }
}
