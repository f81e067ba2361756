//! The timer's entry storage: entries addressed by `u32` index, with a free list and
//! generation-checked handles.
//!
//! The entries live in fixed chunks of [`CHUNK`], not one `Vec`: a `Vec` grows by doubling,
//! so at 10 M pending timers it held room for 16.7 M (27 bytes a timer never used) and each
//! doubling copied every entry while the caller waited. A chunk is allocated whole when the
//! last one is full and never moves; an index is its chunk and its place in it.
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

/// log2 of [`CHUNK`].
const CHUNK_BITS: u32 = 12;

/// Entries a chunk holds.
pub(super) const CHUNK: usize = 1 << CHUNK_BITS;

/// Entries plus their free list.
#[derive(Debug)]
pub(super) struct Slab<T> {
    /// Every chunk but the last is full; each was allocated with room for exactly [`CHUNK`].
    chunks: Vec<Vec<Entry<T>>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    /// A slab expecting about `capacity` entries: its chunk list has room for their chunks,
    /// and the first chunk is allocated when `capacity` is not zero.
    pub(super) fn with_capacity(capacity: usize) -> Self {
        let mut chunks = Vec::with_capacity(capacity.div_ceil(CHUNK));
        if capacity > 0 {
            chunks.push(Vec::with_capacity(CHUNK));
        }
        Slab {
            chunks,
            free_head: NIL,
            len: 0,
        }
    }

    /// The entry at `idx`, if one was ever stored there.
    pub(super) fn get(&self, idx: u32) -> Option<&Entry<T>> {
        let (chunk, place) = place_of(idx);
        self.chunks.get(chunk)?.get(place)
    }

    /// Entries ever stored (live or vacant): the next new index.
    fn stored(&self) -> usize {
        match self.chunks.last() {
            Some(last) => (self.chunks.len() - 1) * CHUNK + last.len(),
            None => 0,
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
            self.free_head = self[idx].pos;
            let e = &mut self[idx];
            e.due = due;
            e.seq = seq;
            e.pos = 0;
            e.value = Some(value);
            return (idx, e.generation);
        }
        // Indices are u32 to keep entries small; NIL is reserved. Four billion pending timers
        // would need hundreds of GiB, so reaching this is a misuse rather than a load to handle.
        let idx = match u32::try_from(self.stored()) {
            Ok(i) if i != NIL => i,
            _ => panic!("timer wheel holds more than u32::MAX - 1 timers"),
        };
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let Some(chunk) = self.chunks.last_mut() else {
            unreachable!("a chunk with room was just ensured");
        };
        chunk.push(Entry {
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
        self.get(idx)
            .is_some_and(|e| e.generation == generation && e.loc != LOC_FREE)
    }

    /// Frees a live entry already taken out of its slot and returns its value.
    pub(super) fn free(&mut self, idx: u32) -> Option<T> {
        self.len -= 1;
        let free_head = std::mem::replace(&mut self.free_head, idx);
        let e = &mut self[idx];
        e.generation = e.generation.wrapping_add(1);
        e.loc = LOC_FREE;
        e.pos = free_head;
        e.value.take()
    }
}

impl<T> std::ops::Index<u32> for Slab<T> {
    type Output = Entry<T>;

    /// The entry at `idx`; an index the slab never handed out is a bug of the caller.
    fn index(&self, idx: u32) -> &Entry<T> {
        let (chunk, place) = place_of(idx);
        &self.chunks[chunk][place]
    }
}

impl<T> std::ops::IndexMut<u32> for Slab<T> {
    fn index_mut(&mut self, idx: u32) -> &mut Entry<T> {
        let (chunk, place) = place_of(idx);
        &mut self.chunks[chunk][place]
    }
}

/// The chunk an index is in, and its place there.
fn place_of(idx: u32) -> (usize, usize) {
    ((idx >> CHUNK_BITS) as usize, idx as usize & (CHUNK - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_reuses_slots_with_new_generation() {
        let mut s = Slab::with_capacity(0);
        let (a, ga) = s.alloc(1, 1, "a");
        let (b, _) = s.alloc(2, 2, "b");
        s[a].loc = 0;
        s[b].loc = 0;
        assert_eq!(s.free(a), Some("a"));
        assert!(!s.is_live(a, ga));
        let (c, gc) = s.alloc(3, 3, "c");
        assert_eq!(c, a);
        assert_ne!(gc, ga);
        s[c].loc = 0;
        assert!(s.is_live(c, gc));
        assert!(!s.is_live(99, 0));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn entries_past_a_chunk_keep_their_place_and_the_chunks_their_size() {
        let n = 3 * CHUNK + 5;
        let mut s = Slab::with_capacity(0);
        for i in 0..n {
            let (idx, _) = s.alloc(i as i64, i as u64, i);
            assert_eq!(idx as usize, i);
            s[idx].loc = 0;
        }
        let first = std::ptr::addr_of!(s[0]);
        for i in n..n + CHUNK {
            s.alloc(i as i64, i as u64, i);
        }
        assert_eq!(std::ptr::addr_of!(s[0]), first, "a full chunk never moves");
        assert!(s.chunks.iter().all(|c| c.capacity() == CHUNK));
        assert_eq!(s.chunks.len(), 5);
        for i in [0, CHUNK - 1, CHUNK, 2 * CHUNK + 7, n - 1] {
            assert_eq!(s[i as u32].due, i as i64);
            assert_eq!(s.get(i as u32).and_then(|e| e.value), Some(i));
        }
        assert!(s.get((n + CHUNK) as u32).is_none());
        assert_eq!(s.len(), n + CHUNK);
    }
}
