//! The ready queue: fires that are due but not yet dispatched, served by priority with aging.
//!
//! When more fires are due than the dispatch limit lets through, the highest priority goes
//! first, but a strict priority order would starve low priorities under sustained load. Each
//! item's *effective* priority therefore grows by one level per `aging_interval` spent
//! waiting:
//!
//! ```text
//! effective = priority + floor((now - enqueued_at) / aging_interval)
//! ```
//!
//! uncapped, with ties going to the item pushed first. Items sit in one FIFO per priority
//! (0 lowest .. 9 highest). Within a FIFO the head is the oldest and so has the highest
//! effective priority of its bucket, so a pop compares only the ten heads: O(10), no heap,
//! no re-sorting as items age.
//!
//! # Aging bound
//!
//! Let item A of priority `p` be pushed at `t_A`, and item B of priority `q >= p` be pushed
//! after it at `t_B >= t_A + (q - p) * aging_interval`. Then A is popped before B. Proof: at
//! any pop time `now >= t_B`, `now - t_A >= (now - t_B) + (q - p) * I`, and since `q - p` is
//! an integer the floors keep it: `eff(A) >= p + floor((now - t_B) / I) + (q - p) = eff(B)`;
//! a tie goes to A, pushed first. In particular an item of priority `p` is never overtaken by
//! anything pushed more than `(9 - p) * aging_interval` after it (9 s for priority 0 with the
//! default 1 s), so its wait is bounded by the time needed to serve the items pushed before
//! that moment. The bound is tight at push time: B pushed 1 ms earlier than it allows and
//! popped at once goes first.
//!
//! Push times are clamped to be non-decreasing (a `now` earlier than the previous push counts
//! as the previous push's time), and a pop's `now` is taken no earlier than the latest push.
//! This keeps each FIFO ordered by age and the bound above intact even if the caller's clock
//! steps back.

use std::collections::VecDeque;
use std::time::Duration;

use crate::task::MAX_PRIORITY;
use crate::time::UtcMillis;

/// Number of priority levels (0 ..= [`MAX_PRIORITY`]).
const LEVELS: usize = MAX_PRIORITY as usize + 1;

/// Default [`ReadyConfig::aging_interval`]; the Redis queue orders its waiting messages with
/// the same step by default, so a priority means the same head start in both places.
pub const DEFAULT_AGING_INTERVAL: Duration = Duration::from_secs(1);

/// Settings of a [`ReadyQueue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyConfig {
    /// Waiting time that raises an item's effective priority by one level; whole
    /// milliseconds (finer parts are ignored). Zero disables aging (strict priority, FIFO
    /// within a priority). Default 1 s: a priority-0 fire waits at most 9 s of newer
    /// high-priority arrivals, while a short burst still goes out in priority order.
    pub aging_interval: Duration,
}

impl Default for ReadyConfig {
    fn default() -> Self {
        ReadyConfig {
            aging_interval: DEFAULT_AGING_INTERVAL,
        }
    }
}

/// An item taken from a [`ReadyQueue`], with what it was pushed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyItem<T> {
    /// The item.
    pub item: T,
    /// Its base priority (after clamping to 0..=9).
    pub priority: u8,
    /// When it was pushed (after the non-decreasing clamp); `now - enqueued_at` is its wait.
    pub enqueued_at: UtcMillis,
}

#[derive(Debug)]
struct Waiting<T> {
    item: T,
    enqueued_at: i64,
    seq: u64,
}

/// Priority queue with aging; see the [module notes](self) for the order and its bound.
#[derive(Debug)]
pub struct ReadyQueue<T> {
    aging_ms: u64,
    buckets: [VecDeque<Waiting<T>>; LEVELS],
    last_push: i64,
    next_seq: u64,
    len: usize,
}

impl<T> Default for ReadyQueue<T> {
    fn default() -> Self {
        Self::new(ReadyConfig::default())
    }
}

impl<T> ReadyQueue<T> {
    /// An empty queue.
    pub fn new(config: ReadyConfig) -> Self {
        ReadyQueue {
            aging_ms: u64::try_from(config.aging_interval.as_millis()).unwrap_or(u64::MAX),
            buckets: std::array::from_fn(|_| VecDeque::new()),
            last_push: i64::MIN,
            next_seq: 0,
            len: 0,
        }
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no item is waiting.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item` with `priority` (0 lowest, 9 highest; higher values count as 9) at `now`.
    /// O(1) amortized.
    pub fn push(&mut self, item: T, priority: u8, now: UtcMillis) {
        let enqueued_at = now.0.max(self.last_push);
        self.last_push = enqueued_at;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.buckets[usize::from(priority.min(MAX_PRIORITY))].push_back(Waiting {
            item,
            enqueued_at,
            seq,
        });
        self.len += 1;
    }

    /// Removes the item with the highest effective priority at `now` (ties: pushed first).
    /// O(10).
    pub fn pop(&mut self, now: UtcMillis) -> Option<T> {
        self.pop_entry(now).map(|r| r.item)
    }

    /// Like [`pop`](Self::pop), also returning the item's priority and push time.
    pub fn pop_entry(&mut self, now: UtcMillis) -> Option<ReadyItem<T>> {
        let now = now.0.max(self.last_push);
        let mut best: Option<(u64, u64, usize)> = None;
        for (priority, bucket) in self.buckets.iter().enumerate() {
            let Some(head) = bucket.front() else {
                continue;
            };
            let eff = self.effective(priority, head.enqueued_at, now);
            let better = match best {
                None => true,
                Some((best_eff, best_seq, _)) => {
                    eff > best_eff || (eff == best_eff && head.seq < best_seq)
                }
            };
            if better {
                best = Some((eff, head.seq, priority));
            }
        }
        let (_, _, priority) = best?;
        let w = self.buckets[priority].pop_front()?;
        self.len -= 1;
        Some(ReadyItem {
            item: w.item,
            // `priority` indexes one of the ten buckets.
            priority: priority as u8,
            enqueued_at: UtcMillis(w.enqueued_at),
        })
    }

    /// Keeps only the items for which `keep` returns true (e.g. drops a deleted task's fires),
    /// preserving the order of the rest. O(n).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for bucket in &mut self.buckets {
            bucket.retain(|w| keep(&w.item));
        }
        self.len = self.buckets.iter().map(VecDeque::len).sum();
    }

    /// `priority + floor(age / aging_interval)`; just `priority` when aging is off.
    fn effective(&self, priority: usize, enqueued_at: i64, now: i64) -> u64 {
        let base = priority as u64;
        if self.aging_ms == 0 {
            return base;
        }
        let age = u64::try_from(now.saturating_sub(enqueued_at)).unwrap_or(0);
        base + age / self.aging_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: i64 = 1_000;

    fn at(ms: i64) -> UtcMillis {
        UtcMillis(1_700_000_000_000 + ms)
    }

    #[test]
    fn fresh_items_go_by_priority_then_fifo() {
        let mut q = ReadyQueue::default();
        q.push("low", 1, at(0));
        q.push("high-a", 8, at(0));
        q.push("mid", 5, at(0));
        q.push("high-b", 8, at(0));
        q.push("clamped", 200, at(0));
        assert_eq!(q.len(), 5);
        let order: Vec<_> = std::iter::from_fn(|| q.pop(at(10))).collect();
        assert_eq!(order, ["clamped", "high-a", "high-b", "mid", "low"]);
        assert!(q.is_empty());
        assert_eq!(q.pop(at(10)), None);
    }

    #[test]
    fn a_waiting_low_priority_item_overtakes_newer_high_priority_ones() {
        let mut q = ReadyQueue::default();
        q.push("old-0", 0, at(0));
        // Pushed exactly (9 - 0) * 1 s later: the bound says the old item goes first.
        q.push("new-9", 9, at(9 * S));
        assert_eq!(q.pop(at(9 * S)), Some("old-0"));

        // 1 ms inside the bound the newer item may win, and does when popped at once.
        let mut q = ReadyQueue::default();
        q.push("old-0", 0, at(0));
        q.push("new-9", 9, at(9 * S - 1));
        assert_eq!(q.pop(at(9 * S - 1)), Some("new-9"));

        // Same for a middle priority: 3 levels apart, 3 s.
        let mut q = ReadyQueue::default();
        q.push("old-4", 4, at(0));
        q.push("new-7", 7, at(3 * S));
        assert_eq!(q.pop(at(3 * S)), Some("old-4"));
    }

    #[test]
    fn pop_entry_reports_priority_and_clamped_push_time() {
        let mut q = ReadyQueue::default();
        q.push(1, 3, at(500));
        q.push(2, 3, at(100));
        let first = q.pop_entry(at(600)).unwrap();
        assert_eq!(
            (first.item, first.priority, first.enqueued_at),
            (1, 3, at(500))
        );
        let second = q.pop_entry(at(600)).unwrap();
        assert_eq!(
            second.enqueued_at,
            at(500),
            "a push back in time counts as the last one"
        );
    }

    #[test]
    fn zero_interval_means_strict_priority() {
        let mut q = ReadyQueue::new(ReadyConfig {
            aging_interval: Duration::ZERO,
        });
        q.push("old-0", 0, at(0));
        q.push("new-1", 1, at(1_000_000 * S));
        assert_eq!(q.pop(at(2_000_000 * S)), Some("new-1"));
    }

    #[test]
    fn retain_drops_items_and_keeps_order() {
        let mut q = ReadyQueue::default();
        for i in 0..6 {
            q.push(i, (i % 2) as u8, at(i64::from(i)));
        }
        q.retain(|i| *i != 3 && *i != 4);
        assert_eq!(q.len(), 4);
        let order: Vec<_> = std::iter::from_fn(|| q.pop(at(10))).collect();
        assert_eq!(order, [1, 5, 0, 2]);
    }

    #[test]
    fn sustained_high_priority_load_cannot_starve_priority_zero() {
        // One priority-9 arrival and one pop every 10 ms: every pop finds a 9 waiting, so
        // without aging the priority-0 item would wait forever.
        let mut q = ReadyQueue::default();
        q.push(u32::MAX, 0, at(0));
        let mut served_at = None;
        for step in 0..2_000u32 {
            let now = at(i64::from(step) * 10);
            q.push(step, 9, now);
            if q.pop(now) == Some(u32::MAX) {
                served_at = Some(now);
                break;
            }
        }
        let served_at = served_at.expect("priority 0 was starved");
        assert!(served_at <= at(9 * S), "served at {served_at:?}");
        assert!(
            served_at >= at(9 * S - 10),
            "aging came too early: {served_at:?}"
        );
    }

    /// A pushed item in the reference model.
    #[derive(Clone, Debug)]
    struct Model {
        id: usize,
        priority: u8,
        enqueued_at: i64,
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(u8, i64),
        Pop(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..12, -500i64..3_000).prop_map(|(p, dt)| Op::Push(p, dt)),
            2 => (0i64..3_000).prop_map(Op::Pop),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_linear_scan_model_and_keeps_the_aging_bound(
            interval_ms in prop_oneof![Just(0u64), 1u64..2_000],
            ops in prop::collection::vec(op(), 1..300),
        ) {
            let interval = i64::try_from(interval_ms).unwrap();
            let mut q = ReadyQueue::new(ReadyConfig {
                aging_interval: Duration::from_millis(interval_ms),
            });
            let mut model: Vec<Model> = Vec::new();
            let mut pushed: Vec<Model> = Vec::new();
            let mut popped: Vec<usize> = Vec::new();
            let mut now = 0i64;
            let mut last_push = i64::MIN;
            let pop = |model: &mut Vec<Model>, now: i64| -> Option<Model> {
                // Linear scan: highest effective priority, then lowest id (pushed first).
                let eff = |m: &Model| {
                    let age = (now - m.enqueued_at).max(0);
                    i64::from(m.priority) + if interval == 0 { 0 } else { age / interval }
                };
                let best = (0..model.len()).max_by(|&a, &b| {
                    eff(&model[a]).cmp(&eff(&model[b])).then(model[b].id.cmp(&model[a].id))
                })?;
                Some(model.remove(best))
            };
            let ops = ops.into_iter().chain(std::iter::repeat_n(Op::Pop(0), 300));
            for op in ops {
                match op {
                    Op::Push(p, dt) => {
                        now += dt;
                        q.push(pushed.len(), p, at(now));
                        last_push = last_push.max(now);
                        let m = Model { id: pushed.len(), priority: p.min(9), enqueued_at: last_push };
                        pushed.push(m.clone());
                        model.push(m);
                    }
                    Op::Pop(dt) => {
                        now += dt;
                        let got = q.pop_entry(at(now));
                        let now = now.max(last_push);
                        let want = pop(&mut model, now);
                        prop_assert_eq!(got.as_ref().map(|g| g.item), want.as_ref().map(|w| w.id));
                        if let (Some(g), Some(w)) = (got, want) {
                            prop_assert_eq!(g.priority, w.priority);
                            prop_assert_eq!(g.enqueued_at, at(w.enqueued_at));
                            popped.push(w.id);
                        }
                    }
                }
                prop_assert_eq!(q.len(), model.len());
            }
            prop_assert!(q.is_empty());
            // The bound: B popped before an older A of priority p <= q(B) means B was pushed
            // less than (q - p) * interval after A.
            if interval > 0 {
                for (i, &b) in popped.iter().enumerate() {
                    for &a in &popped[i + 1..] {
                        let (a, b) = (&pushed[a], &pushed[b]);
                        if b.id > a.id && b.priority >= a.priority {
                            let limit = a.enqueued_at + i64::from(b.priority - a.priority) * interval;
                            prop_assert!(
                                b.enqueued_at < limit,
                                "{:?} overtook {:?} although pushed at or after {}", b, a, limit
                            );
                        }
                    }
                }
            }
        }
    }
}
