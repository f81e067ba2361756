//! The engine's timer: a hierarchical timing wheel for the near future with an overflow
//! min-heap for the far future, as one structure.
//!
//! Why a wheel: the leader holds every pending fire of every task (hundreds of thousands),
//! almost all of them inserted, rescheduled or cancelled far more often than a heap would like,
//! and fired in bulk as time passes. A wheel does insert, cancel and reschedule in O(1) and
//! fires a tick's worth of timers without comparing against the rest. The layout follows
//! tokio's driver wheel: levels of `2^slot_bits` slots, level `l` slots spanning
//! `2^(slot_bits*l)` ticks, an entry's level chosen by the highest bit in which its tick differs
//! from the current tick, and one `u64` occupancy bitmap per level so finding the next
//! non-empty slot is a `trailing_zeros`, which makes an hours-long jump in `now` cost
//! O(occupied slots), not O(ticks).
//!
//! Differences from tokio, and why:
//! - Millisecond precision on top of the tick: each entry keeps its exact due time, and the
//!   slot of the current tick is filtered by it, so a timer never fires before `now >= due`
//!   even though slots are 10 ms wide. What fires is exactly what is due at or before `now`.
//! - Output in due-time order (ties in insertion order): each drained slot is sorted on
//!   `(due, seq)`; slots are drained in tick order, so the whole batch is ordered.
//! - No fixed maximum delay: timers beyond the top level's window go to an overflow min-heap
//!   (`overflow`) and move into the wheel when the wheel's window reaches theirs.
//! - Storage is a slab (`slab`) of entries with generation-checked handles; a slot is a
//!   `Vec<u32>` of entry indices (swap-removal for O(1) cancel), not an intrusive list, so
//!   draining a slot is not a chain of dependent cache misses. All safe code.
//!
//! Nothing here reads a clock: the caller passes `now` to [`TimerWheel::advance`] and sleeps
//! until [`TimerWheel::next_due`].

mod overflow;
mod slab;

use std::time::Duration;

use crate::time::UtcMillis;
use overflow::{HeapKey, Overflow};
use slab::{Slab, LOC_HEAP};

/// A drained slot keeps its buffer up to this many indices (4 KiB) for its next turn.
const RETAINED_SLOT_CAPACITY: usize = 1024;

/// Largest supported `slot_bits`: a level's occupancy is one `u64`.
pub const MAX_SLOT_BITS: u32 = 6;

/// Largest supported `slot_bits * levels`, keeping tick arithmetic clear of `u64` overflow.
pub const MAX_WHEEL_BITS: u32 = 60;

/// Shape of a [`TimerWheel`].
///
/// The defaults, 10 ms ticks and 4 levels of 64 slots, give levels spanning 640 ms, 41 s,
/// 44 min and 46.6 h. Everything due within the current top window (up to 46.6 h ahead) lives
/// in the wheel, which covers delays, intervals, retries and daily crons; only rarer
/// far-future fires (weekly, monthly) go to the overflow heap. 64 slots per level keep each
/// level's occupancy in one machine word, and powers of two make slot arithmetic shifts and
/// masks. The wheel's fixed cost is `levels * 2^slot_bits` slot heads (2 KiB by default).
///
/// A classic two-level design (1000 slots of 10 ms plus 3600 of 1 s) keeps the same 10 ms tick,
/// but power-of-two levels replace decimal ones here so that empty slots are skipped with bit
/// operations rather than scanned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerConfig {
    /// Width of one level-0 slot. Whole milliseconds, at least 1 ms. Default 10 ms.
    pub tick: Duration,
    /// Slots per level as a power of two: `2^slot_bits`, `1..=6`. Default 6 (64 slots).
    pub slot_bits: u32,
    /// Number of levels, at least 1, with `slot_bits * levels <= 60`. Default 4.
    pub levels: u32,
}

impl Default for TimerConfig {
    fn default() -> Self {
        TimerConfig {
            tick: Duration::from_millis(10),
            slot_bits: 6,
            levels: 4,
        }
    }
}

impl TimerConfig {
    /// Slots per level.
    pub fn slots_per_level(&self) -> usize {
        1usize << self.slot_bits.min(MAX_SLOT_BITS)
    }

    /// Span of the top level's window (`tick * 2^(slot_bits * levels)`): timers due within
    /// the current window are held by the wheel, later ones by the overflow heap.
    pub fn horizon(&self) -> Duration {
        let bits = (self.slot_bits * self.levels).min(MAX_WHEEL_BITS);
        let nanos = self.tick.as_nanos().saturating_mul(1u128 << bits);
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        // The remainder of a division by 10^9 fits in u32.
        Duration::new(secs, (nanos % 1_000_000_000) as u32)
    }

    /// Why this configuration cannot be used, or `None` when it can.
    pub fn problem(&self) -> Option<&'static str> {
        if self.tick < Duration::from_millis(1)
            || !self.tick.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Some("tick must be a whole number of milliseconds, at least 1 ms");
        }
        if !(1..=MAX_SLOT_BITS).contains(&self.slot_bits) {
            return Some("slot_bits must be between 1 and 6 (2 to 64 slots per level)");
        }
        if self.levels == 0 || self.slot_bits * self.levels > MAX_WHEEL_BITS {
            return Some("levels must be at least 1, with slot_bits * levels at most 60");
        }
        None
    }
}

/// Names one pending timer in the [`TimerWheel`] that returned it.
///
/// Handles are plain values: once their timer fired or was cancelled they go stale, and every
/// operation on a stale handle is a harmless no-op (the slab entry's generation moved on), even
/// when the entry has been reused by another timer. A handle must only be used with the wheel
/// that issued it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    index: u32,
    generation: u32,
}

impl TimerHandle {
    /// The handle as one number, for a caller that names its timers by it (an id it hands
    /// out); [`from_bits`](Self::from_bits) gives the handle back. The generation is the high
    /// half.
    pub fn to_bits(self) -> u64 {
        u64::from(self.generation) << 32 | u64::from(self.index)
    }

    /// The handle [`to_bits`](Self::to_bits) made this number of. Any number is a handle: one
    /// that no live timer has is stale, and operations on it are no-ops.
    pub fn from_bits(bits: u64) -> Self {
        TimerHandle {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

/// A hierarchical timing wheel with an overflow heap; see the [module notes](self).
///
/// Guarantees: [`advance`](Self::advance) returns exactly the pending timers with
/// `due <= now`, ordered by due time and, among equal due times, by insertion (a
/// [`reschedule`](Self::reschedule) counts as a new insertion). So a timer never fires early,
/// and it fires at the first `advance` whose `now` reaches its due time, without tick
/// rounding; a caller that wakes at [`next_due`](Self::next_due) or at least once per tick is
/// at most one tick late.
#[derive(Debug)]
pub struct TimerWheel<T> {
    origin: i64,
    tick_ms: u64,
    slot_bits: u32,
    levels: u32,
    slot_mask: u64,
    /// The current tick: every slot before it has been drained.
    elapsed: u64,
    next_seq: u64,
    slab: Slab<T>,
    /// `levels * 2^slot_bits` slots of entry indices, indexed `level << slot_bits | slot`.
    slots: Vec<Vec<u32>>,
    /// Per level, bit `s` set iff slot `s` is non-empty.
    occupied: Vec<u64>,
    overflow: Overflow,
    /// Reused per drained slot, so advancing allocates nothing once warmed up.
    scratch: Vec<(i64, u64, u32)>,
    /// The level-0 slot the current tick last fired from, or the next one an advance left
    /// non-empty, and its members' earliest due time, kept exact as members come and go
    /// (`None`: no slot tracked). At a high fire
    /// rate an engine advances and asks [`next_due`](Self::next_due) many times within one
    /// tick; without it each call read the due time of every member of the slot (a thousand
    /// at 100 000 timers a second), and a call in a millisecond whose timers all fired
    /// already does nothing now.
    slot_min: Option<SlotMin>,
}

/// See [`TimerWheel::slot_min`].
#[derive(Clone, Copy, Debug)]
struct SlotMin {
    loc: usize,
    due: i64,
}

/// The next slot that needs processing.
#[derive(Clone, Copy, Debug)]
struct Expiration {
    level: u32,
    slot: u64,
    /// The tick at which the slot starts.
    deadline: u64,
}

impl<T> TimerWheel<T> {
    /// An empty wheel whose tick 0 starts at `origin`.
    ///
    /// `origin` is usually the engine's start time; dues before it are simply past due.
    ///
    /// # Panics
    /// If `config` is invalid ([`TimerConfig::problem`] says why); configurations are
    /// programmer constants, so this is a bug, not a runtime condition.
    pub fn new(config: TimerConfig, origin: UtcMillis) -> Self {
        Self::with_capacity(config, origin, 0)
    }

    /// Like [`new`](Self::new), with room for `capacity` timers before the slab reallocates.
    ///
    /// # Panics
    /// If `config` is invalid, as for [`new`](Self::new).
    pub fn with_capacity(config: TimerConfig, origin: UtcMillis, capacity: usize) -> Self {
        if let Some(problem) = config.problem() {
            panic!("invalid TimerConfig {config:?}: {problem}");
        }
        let slots_per_level = config.slots_per_level();
        // `problem()` guarantees a whole, non-zero number of milliseconds that fits easily.
        let tick_ms = u64::try_from(config.tick.as_millis()).unwrap_or(u64::MAX);
        TimerWheel {
            origin: origin.0,
            tick_ms,
            slot_bits: config.slot_bits,
            levels: config.levels,
            slot_mask: (slots_per_level as u64) - 1,
            elapsed: 0,
            next_seq: 0,
            slab: Slab::with_capacity(capacity),
            slots: (0..slots_per_level * config.levels as usize)
                .map(|_| Vec::new())
                .collect(),
            occupied: vec![0; config.levels as usize],
            overflow: Overflow::default(),
            scratch: Vec::new(),
            slot_min: None,
        }
    }

    /// Pending timers.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.slab.len() == 0
    }

    /// Adds a timer due at `due` carrying `value`. O(1) (O(log n) when `due` lies beyond the
    /// wheel's window and goes to the overflow heap). A `due` in the past fires at the next
    /// [`advance`](Self::advance).
    pub fn insert(&mut self, due: UtcMillis, value: T) -> TimerHandle {
        let seq = self.take_seq();
        let (index, generation) = self.slab.alloc(due.0, seq, value);
        self.place(index);
        TimerHandle { index, generation }
    }

    /// Removes a pending timer and returns its value; `None` when the handle is stale (the
    /// timer already fired or was cancelled). O(1); an overflow entry is dropped lazily.
    pub fn cancel(&mut self, handle: TimerHandle) -> Option<T> {
        if !self.slab.is_live(handle.index, handle.generation) {
            return None;
        }
        let was_heap = self.detach(handle.index);
        let value = self.slab.free(handle.index);
        if was_heap {
            self.bury_heap_item();
        }
        value
    }

    /// Moves a pending timer to `new_due`, keeping its handle; `false` when the handle is
    /// stale. The timer then orders after timers inserted before this call with the same due
    /// time. O(1) amortized, like cancel followed by insert.
    pub fn reschedule(&mut self, handle: TimerHandle, new_due: UtcMillis) -> bool {
        if !self.slab.is_live(handle.index, handle.generation) {
            return false;
        }
        let was_heap = self.detach(handle.index);
        let seq = self.take_seq();
        let e = &mut self.slab[handle.index];
        e.due = new_due.0;
        e.seq = seq;
        self.place(handle.index);
        if was_heap {
            self.bury_heap_item();
        }
        true
    }

    /// The value of a pending timer; `None` when the handle is stale.
    pub fn get(&self, handle: TimerHandle) -> Option<&T> {
        if !self.slab.is_live(handle.index, handle.generation) {
            return None;
        }
        self.slab[handle.index].value.as_ref()
    }

    /// The due time of a pending timer; `None` when the handle is stale.
    pub fn due(&self, handle: TimerHandle) -> Option<UtcMillis> {
        if !self.slab.is_live(handle.index, handle.generation) {
            return None;
        }
        Some(UtcMillis(self.slab[handle.index].due))
    }

    /// When the engine should next call [`advance`](Self::advance): never later than the
    /// earliest pending due time. Exact when that timer is in the current level-0 window or the
    /// overflow heap; otherwise the start of the higher-level slot holding it (an advance there
    /// fires nothing but refines the answer). `None` when nothing is pending.
    ///
    /// Costs O(levels), plus a scan of one level-0 slot when that slot is not the one the
    /// current tick fires from.
    pub fn next_due(&self) -> Option<UtcMillis> {
        match self.next_expiration() {
            Some(exp) if exp.level == 0 => match self.slot_min {
                Some(m) if m.loc == exp.slot as usize => {
                    debug_assert_eq!(Some(m.due), self.earliest_in(m.loc), "slot_min is exact");
                    Some(UtcMillis(m.due))
                }
                _ => self.earliest_in(exp.slot as usize).map(UtcMillis),
            },
            Some(exp) => Some(UtcMillis(self.tick_start_ms(exp.deadline))),
            None => self.overflow.peek().map(|k| UtcMillis(k.due)),
        }
    }

    /// Removes and returns every timer due at or before `now`, in due-time order (ties in
    /// insertion order). Allocates the returned `Vec`; see [`advance_into`](Self::advance_into)
    /// to reuse one.
    pub fn advance(&mut self, now: UtcMillis) -> Vec<(UtcMillis, T)> {
        let mut out = Vec::new();
        self.advance_into(now, &mut out);
        out
    }

    /// Like [`advance`](Self::advance), appending to `out`.
    ///
    /// Cost: O(timers fired + timers cascaded + occupied slots passed), independent of how
    /// many empty ticks lie between calls. A `now` earlier than a previous one is allowed and
    /// fires only what is due by it.
    pub fn advance_into(&mut self, now: UtcMillis, out: &mut Vec<(UtcMillis, T)>) {
        self.advance_each(now, &mut |due, _, value| out.push((due, value)));
    }

    /// Like [`advance_into`](Self::advance_into), each timer with the handle it had, for a
    /// caller that names its timers by their handles.
    pub fn advance_handles_into(
        &mut self,
        now: UtcMillis,
        out: &mut Vec<(UtcMillis, TimerHandle, T)>,
    ) {
        self.advance_each(now, &mut |due, handle, value| {
            out.push((due, handle, value))
        });
    }

    fn advance_each(&mut self, now: UtcMillis, out: &mut impl FnMut(UtcMillis, TimerHandle, T)) {
        let now_tick = self.tick_of(now.0);
        loop {
            match self.next_expiration() {
                // The slot of `now_tick` itself is filtered by milliseconds below; any slot
                // before it, and a higher-level slot starting at it, is processed whole.
                Some(exp)
                    if exp.deadline < now_tick || (exp.deadline == now_tick && exp.level > 0) =>
                {
                    self.process(exp, out);
                }
                // The wheel's next slot is later, and the heap is later still.
                Some(_) => break,
                None => match self.overflow.peek() {
                    Some(top) if self.tick_of(top.due) <= now_tick => {
                        // The wheel is empty: jump to the heap's earliest tick and pull its
                        // window in.
                        self.elapsed = self.elapsed.max(self.tick_of(top.due));
                        self.refill();
                    }
                    _ => break,
                },
            }
        }
        if now_tick > self.elapsed {
            self.elapsed = now_tick;
            self.refill();
        }
        self.fire_current(now.0, out);
        self.track_next_slot();
    }

    /// Keeps `slot_min` on the level-0 slot the next advance and [`next_due`](Self::next_due)
    /// look at when it is not the current tick's (a cascade filled a later slot): otherwise
    /// each `next_due` until that slot's tick would read every member of it. A non-empty
    /// current slot is that slot already, so this scans a slot once, when it becomes next.
    fn track_next_slot(&mut self) {
        let Some(exp) = self.next_expiration() else {
            return;
        };
        let loc = exp.slot as usize;
        if exp.level == 0 && self.slot_min.is_none_or(|m| m.loc != loc) {
            self.slot_min = self.earliest_in(loc).map(|due| SlotMin { loc, due });
        }
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// The tick containing `due` (0 for anything before the origin).
    fn tick_of(&self, due: i64) -> u64 {
        if due <= self.origin {
            0
        } else {
            // The true difference lies in (0, 2^64), which the wrapping subtraction gives
            // exactly once read as u64.
            (due.wrapping_sub(self.origin) as u64) / self.tick_ms
        }
    }

    fn tick_start_ms(&self, tick: u64) -> i64 {
        let ms = i128::from(self.origin) + i128::from(tick) * i128::from(self.tick_ms);
        i64::try_from(ms).unwrap_or(i64::MAX)
    }

    fn wheel_bits(&self) -> u32 {
        self.slot_bits * self.levels
    }

    /// Files a live entry that is in no slot, relative to the current `elapsed`: a wheel slot
    /// if its tick is in the current top window, otherwise the overflow heap.
    fn place(&mut self, idx: u32) {
        let (due, seq) = {
            let e = &self.slab[idx];
            (e.due, e.seq)
        };
        let when = self.tick_of(due).max(self.elapsed);
        // The highest differing bit picks the level; `| slot_mask` makes it at least level 0.
        let masked = (self.elapsed ^ when) | self.slot_mask;
        let level = (63 - masked.leading_zeros()) / self.slot_bits;
        if level >= self.levels {
            self.slab[idx].loc = LOC_HEAP;
            self.overflow.push(HeapKey { due, seq, idx });
            return;
        }
        let slot = (when >> (level * self.slot_bits)) & self.slot_mask;
        let loc = (u64::from(level) << self.slot_bits | slot) as usize;
        let members = &mut self.slots[loc];
        let e = &mut self.slab[idx];
        // `loc` < levels * 64 <= 640, far from the LOC_* markers; a slot holds fewer than
        // u32::MAX entries because indices are u32.
        e.loc = loc as u16;
        e.pos = members.len() as u32;
        members.push(idx);
        self.occupied[level as usize] |= 1 << slot;
        if let Some(m) = &mut self.slot_min {
            if m.loc == loc {
                m.due = m.due.min(due);
            }
        }
    }

    /// Takes a live entry out of its wheel slot; returns `true` when it is in the overflow
    /// heap instead, where the caller must bury its item after updating the entry.
    fn detach(&mut self, idx: u32) -> bool {
        let loc = self.slab[idx].loc;
        if loc == LOC_HEAP {
            return true;
        }
        let loc = usize::from(loc);
        self.remove_at(loc, self.slab[idx].pos);
        let members = &mut self.slots[loc];
        if members.is_empty() {
            if members.capacity() > RETAINED_SLOT_CAPACITY {
                // Everything in a big slot was cancelled: do not hold its buffer until the
                // slot's turn comes.
                *members = Vec::new();
            }
            let level = loc >> self.slot_bits;
            let slot = loc as u64 & self.slot_mask;
            self.occupied[level] &= !(1 << slot);
        }
        false
    }

    fn bury_heap_item(&mut self) {
        let entries = &self.slab;
        self.overflow.bury(|k| heap_item_is_live(entries, k));
    }

    /// The earliest non-empty slot. Lower levels come first: a level's occupied slots all lie
    /// in the current window of the level above, which ends before the next slot up begins.
    fn next_expiration(&self) -> Option<Expiration> {
        for level in 0..self.levels {
            let occupied = self.occupied[level as usize];
            if occupied == 0 {
                continue;
            }
            let shift = level * self.slot_bits;
            let now_slot = (self.elapsed >> shift) & self.slot_mask;
            // Slots behind the current position are drained before `elapsed` passes them, so
            // the occupancy never wraps around.
            debug_assert_eq!(occupied & ((1u64 << now_slot) - 1), 0);
            let slot = now_slot + u64::from((occupied >> now_slot).trailing_zeros());
            let level_start = self.elapsed & !((1u64 << (shift + self.slot_bits)) - 1);
            return Some(Expiration {
                level,
                slot,
                deadline: level_start + (slot << shift),
            });
        }
        None
    }

    /// Processes a whole slot that `advance` has reached: a level-0 slot fires, a higher one
    /// cascades its entries into lower levels.
    fn process(&mut self, exp: Expiration, out: &mut impl FnMut(UtcMillis, TimerHandle, T)) {
        debug_assert!(exp.deadline >= self.elapsed);
        self.elapsed = exp.deadline;
        let loc = (u64::from(exp.level) << self.slot_bits | exp.slot) as usize;
        let mut members = std::mem::take(&mut self.slots[loc]);
        self.occupied[exp.level as usize] &= !(1 << exp.slot);
        if self.slot_min.is_some_and(|m| m.loc == loc) {
            self.slot_min = None;
        }
        if exp.level == 0 {
            for &i in &members {
                let e = &self.slab[i];
                self.scratch.push((e.due, e.seq, i));
            }
            self.emit(out);
        } else {
            // Entries only move to lower levels, so this slot stays empty meanwhile.
            for &i in &members {
                self.place(i);
            }
        }
        // Keep a small buffer for the slot's next turn; let a large one go rather than hold
        // memory for a burst that has passed.
        if members.capacity() <= RETAINED_SLOT_CAPACITY {
            members.clear();
            self.slots[loc] = members;
        }
    }

    /// Fires the entries of the current tick's slot that are due by `now_ms`; the rest wait.
    fn fire_current(&mut self, now_ms: i64, out: &mut impl FnMut(UtcMillis, TimerHandle, T)) {
        let slot = self.elapsed & self.slot_mask;
        if self.occupied[0] & (1 << slot) == 0 {
            return;
        }
        let loc = slot as usize;
        if self
            .slot_min
            .is_some_and(|m| m.loc == loc && now_ms < m.due)
        {
            debug_assert!(self.earliest_in(loc).is_some_and(|due| now_ms < due));
            // Nothing of the slot is due yet: no need to look at its members.
            return;
        }
        // Untracked while members leave, so that no removal rescans; set from this pass.
        self.slot_min = None;
        let mut earliest = i64::MAX;
        let mut pos = 0;
        while pos < self.slots[loc].len() {
            let i = self.slots[loc][pos];
            let e = &self.slab[i];
            if e.due <= now_ms {
                self.scratch.push((e.due, e.seq, i));
                // The last member moves into `pos`, which is examined next.
                self.remove_at(loc, pos as u32);
            } else {
                earliest = earliest.min(e.due);
                pos += 1;
            }
        }
        if self.slots[loc].is_empty() {
            self.occupied[0] &= !(1 << slot);
        } else {
            self.slot_min = Some(SlotMin { loc, due: earliest });
        }
        self.emit(out);
    }

    /// Removes the member at `pos` of slot `loc` by swap-removal, fixing the moved member's
    /// position. The occupancy bit is the caller's business.
    fn remove_at(&mut self, loc: usize, pos: u32) {
        let members = &mut self.slots[loc];
        let removed = members.swap_remove(pos as usize);
        if let Some(&moved) = members.get(pos as usize) {
            self.slab[moved].pos = pos;
        }
        if let Some(m) = self.slot_min {
            if m.loc == loc && self.slab[removed].due <= m.due {
                // The earliest member left: find the next one (a cancel of the very next
                // timer, rare against the advances it saves).
                self.slot_min = self.earliest_in(loc).map(|due| SlotMin { loc, due });
            }
        }
    }

    /// The earliest due time among the members of slot `loc`.
    fn earliest_in(&self, loc: usize) -> Option<i64> {
        self.slots[loc].iter().map(|&i| self.slab[i].due).min()
    }

    /// Frees the entries collected in `scratch` and appends them to `out` in `(due, seq)`
    /// order.
    fn emit(&mut self, out: &mut impl FnMut(UtcMillis, TimerHandle, T)) {
        if self.scratch.len() > 1 {
            // `seq` is unique, so the order is total and an unstable sort is deterministic.
            self.scratch.sort_unstable();
        }
        for &(due, _, idx) in &self.scratch {
            let generation = self.slab[idx].generation;
            if let Some(value) = self.slab.free(idx) {
                let handle = TimerHandle {
                    index: idx,
                    generation,
                };
                out(UtcMillis(due), handle, value);
            }
        }
        self.scratch.clear();
    }

    /// Moves the overflow items whose tick is in the current top window into the wheel.
    fn refill(&mut self) {
        let window = self.elapsed >> self.wheel_bits();
        while let Some(top) = self.overflow.peek() {
            if self.tick_of(top.due) >> self.wheel_bits() > window {
                break;
            }
            self.overflow.pop();
            self.place(top.idx);
            let entries = &self.slab;
            self.overflow.purge_top(|k| heap_item_is_live(entries, k));
        }
    }
}

/// An overflow item is live while its entry is still in the heap under the same insertion
/// stamp; a cancel frees the entry and a reschedule gives it a new stamp.
fn heap_item_is_live<T>(entries: &Slab<T>, key: &HeapKey) -> bool {
    entries
        .get(key.idx)
        .is_some_and(|e| e.loc == LOC_HEAP && e.seq == key.seq)
}

#[cfg(test)]
mod tests;
