//! The timer's entry storage: one `Vec` of entries addressed by `u32` index, with a free list
//! and intrusive doubly linked lists.
//!
//! Every pending timer lives in exactly one entry; the wheel's slots are just `(head, tail)`
//! index pairs threaded through the entries' `prev`/`next` fields. Compared with a `Vec` per
//! slot or boxed list nodes this costs no allocation per timer, unlinks in O(1) from the middle
//! of a slot (cancel, reschedule), and keeps the per-timer overhead at a few machine words.
//! A freed entry bumps its generation, so a [`super::TimerHandle`] kept after its timer fired
//! or was cancelled can never reach the entry's next occupant.

/// "No entry": the end of a list or of the free list.
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
    pub(super) prev: u32,
    /// Next entry in the same slot list, or the next vacancy while on the free list.
    pub(super) next: u32,
    /// Bumped on every free so stale handles do not match.
    pub(super) generation: u32,
    /// Flat slot index (`level << slot_bits | slot`), [`LOC_HEAP`] or [`LOC_FREE`].
    pub(super) loc: u16,
    pub(super) value: Option<T>,
}

/// Head and tail of an intrusive list of entries.
#[derive(Clone, Copy, Debug)]
pub(super) struct List {
    pub(super) head: u32,
    pub(super) tail: u32,
}

impl List {
    pub(super) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    pub(super) fn is_empty(self) -> bool {
        self.head == NIL
    }
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

    /// Stores a new entry (unlinked, `loc` still to be set by the caller) and returns its index
    /// and generation.
    pub(super) fn alloc(&mut self, due: i64, seq: u64, value: T) -> (u32, u32) {
        self.len += 1;
        if self.free_head != NIL {
            let idx = self.free_head;
            let e = &mut self.entries[idx as usize];
            self.free_head = e.next;
            e.due = due;
            e.seq = seq;
            e.prev = NIL;
            e.next = NIL;
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
            prev: NIL,
            next: NIL,
            generation: 0,
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

    /// Frees a live, already unlinked entry and returns its value.
    pub(super) fn free(&mut self, idx: u32) -> Option<T> {
        self.len -= 1;
        let e = &mut self.entries[idx as usize];
        e.generation = e.generation.wrapping_add(1);
        e.loc = LOC_FREE;
        e.prev = NIL;
        e.next = self.free_head;
        self.free_head = idx;
        e.value.take()
    }

    /// Appends entry `idx` to `list`.
    pub(super) fn push_back(&mut self, list: &mut List, idx: u32, loc: u16) {
        let tail = list.tail;
        {
            let e = &mut self.entries[idx as usize];
            e.prev = tail;
            e.next = NIL;
            e.loc = loc;
        }
        if tail == NIL {
            list.head = idx;
        } else {
            self.entries[tail as usize].next = idx;
        }
        list.tail = idx;
    }

    /// Removes entry `idx` from `list`, which must hold it.
    pub(super) fn unlink(&mut self, list: &mut List, idx: u32) {
        let (prev, next) = {
            let e = &self.entries[idx as usize];
            (e.prev, e.next)
        };
        if prev == NIL {
            list.head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NIL {
            list.tail = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
        let e = &mut self.entries[idx as usize];
        e.prev = NIL;
        e.next = NIL;
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
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn lists_link_and_unlink_anywhere() {
        let mut s = Slab::with_capacity(0);
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..4).map(|i| s.alloc(i, i as u64, i).0).collect();
        for &i in &ids {
            s.push_back(&mut list, i, 7);
        }
        s.unlink(&mut list, ids[1]);
        s.unlink(&mut list, ids[3]);
        let mut seen = Vec::new();
        let mut i = list.head;
        while i != NIL {
            seen.push(i);
            i = s.entries[i as usize].next;
        }
        assert_eq!(seen, vec![ids[0], ids[2]]);
        assert_eq!(list.tail, ids[2]);
        s.unlink(&mut list, ids[0]);
        s.unlink(&mut list, ids[2]);
        assert!(list.is_empty());
        assert_eq!(list.tail, NIL);
    }
}
