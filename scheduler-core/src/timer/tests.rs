//! Unit and property tests of the timer wheel. The property tests replay random operation
//! sequences against a plain `BinaryHeap` model and demand identical output at every advance.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use proptest::prelude::*;

use super::*;

const T0: i64 = 1_700_000_000_000;

fn at(ms: i64) -> UtcMillis {
    UtcMillis(T0 + ms)
}

fn wheel() -> TimerWheel<u32> {
    TimerWheel::new(TimerConfig::default(), at(0))
}

fn tiny() -> TimerConfig {
    TimerConfig {
        tick: Duration::from_millis(3),
        slot_bits: 2,
        levels: 2,
    }
}

fn values(fired: Vec<(UtcMillis, u32)>) -> Vec<u32> {
    fired.into_iter().map(|(_, v)| v).collect()
}

#[test]
fn default_config_is_valid_and_reaches_46_hours() {
    let c = TimerConfig::default();
    assert_eq!(c.problem(), None);
    assert_eq!(c.slots_per_level(), 64);
    assert_eq!(c.horizon(), Duration::from_millis(10 * (1 << 24)));
}

#[test]
fn invalid_configs_are_named() {
    let mut c = TimerConfig {
        tick: Duration::from_micros(1500),
        ..TimerConfig::default()
    };
    assert!(c.problem().is_some());
    c = TimerConfig {
        slot_bits: 7,
        ..TimerConfig::default()
    };
    assert!(c.problem().is_some());
    c = TimerConfig {
        slot_bits: 6,
        levels: 11,
        ..TimerConfig::default()
    };
    assert!(c.problem().is_some());
    c.levels = 0;
    assert!(c.problem().is_some());
}

#[test]
#[should_panic(expected = "invalid TimerConfig")]
fn new_rejects_an_invalid_config() {
    let c = TimerConfig {
        tick: Duration::ZERO,
        ..TimerConfig::default()
    };
    let _ = TimerWheel::<u32>::new(c, at(0));
}

#[test]
fn never_fires_before_the_millisecond_due() {
    let mut w = wheel();
    w.insert(at(17), 1);
    // Tick 1 covers 10..20 ms: the entry shares the slot of `now` but is not due yet.
    assert!(w.advance(at(16)).is_empty());
    assert_eq!(w.next_due(), Some(at(17)));
    assert_eq!(w.advance(at(17)), vec![(at(17), 1)]);
    assert!(w.is_empty());
    assert_eq!(w.next_due(), None);
}

#[test]
fn fires_in_due_order_with_ties_in_insertion_order() {
    let mut w = wheel();
    w.insert(at(5_000), 1);
    w.insert(at(3), 2);
    w.insert(at(5_000), 3);
    w.insert(at(9), 4);
    w.insert(at(3), 5);
    assert_eq!(values(w.advance(at(10_000))), vec![2, 5, 4, 1, 3]);
}

#[test]
fn past_due_fires_at_the_next_advance_in_order() {
    let mut w = wheel();
    w.advance(at(60_000));
    w.insert(at(59_990), 1);
    w.insert(at(-5_000), 2);
    w.insert(at(60_005), 3);
    w.insert(at(60_001), 4);
    assert_eq!(w.next_due(), Some(at(-5_000)));
    assert_eq!(values(w.advance(at(60_001))), vec![2, 1, 4]);
    assert_eq!(values(w.advance(at(60_010))), vec![3]);
}

#[test]
fn cancel_returns_the_value_once_and_stale_handles_are_harmless() {
    let mut w = wheel();
    let a = w.insert(at(100), 1);
    let b = w.insert(at(100), 2);
    assert_eq!(w.cancel(a), Some(1));
    assert_eq!(w.cancel(a), None);
    assert!(!w.reschedule(a, at(5)));
    // The freed entry is reused; the old handle must not reach the new timer.
    let c = w.insert(at(200), 3);
    assert_eq!(w.cancel(a), None);
    assert_eq!(w.get(c), Some(&3));
    assert_eq!(w.get(a), None);
    assert_eq!(values(w.advance(at(1_000))), vec![2, 3]);
    assert_eq!(w.cancel(b), None, "a fired timer's handle is stale");
    assert_eq!(w.due(c), None);
}

#[test]
fn handles_come_out_with_their_timers_and_survive_as_numbers() {
    let mut w = wheel();
    let a = w.insert(at(30), 1);
    w.cancel(a);
    // Reuses a's entry under a new generation.
    let b = w.insert(at(20), 2);
    let c = w.insert(at(10_000_000), 3);
    assert_ne!(a.to_bits(), b.to_bits());
    assert_eq!(TimerHandle::from_bits(c.to_bits()), c);
    assert_eq!(w.get(TimerHandle::from_bits(b.to_bits())), Some(&2));
    assert_eq!(w.get(TimerHandle::from_bits(a.to_bits())), None);
    let mut out = Vec::new();
    w.advance_handles_into(at(20_000_000), &mut out);
    assert_eq!(out, vec![(at(20), b, 2), (at(10_000_000), c, 3)]);
}

#[test]
fn reschedule_moves_both_ways_and_counts_as_a_new_insertion() {
    let mut w = wheel();
    let a = w.insert(at(50), 1);
    let b = w.insert(at(7_200_000), 2);
    w.insert(at(50), 3);
    assert!(w.reschedule(b, at(20)));
    assert!(w.reschedule(a, at(50)));
    assert_eq!(w.due(a), Some(at(50)));
    assert_eq!(values(w.advance(at(60))), vec![2, 3, 1]);
    let c = w.insert(at(100), 4);
    assert!(w.reschedule(c, at(200 * 3_600_000)));
    assert!(w.advance(at(10_000_000)).is_empty());
    assert_eq!(w.len(), 1);
}

#[test]
fn a_jump_of_days_fires_everything_in_order_including_overflow() {
    let mut w = wheel();
    // Beyond the 46.6 h window these sit in the overflow heap.
    let dues = [
        90 * 86_400_000,
        3 * 86_400_000 + 1,
        46 * 3_600_000,
        3_600_000,
        12,
        3 * 86_400_000,
    ];
    for (i, d) in dues.iter().enumerate() {
        w.insert(at(*d), i as u32);
    }
    assert_eq!(w.overflow.raw_len(), 3);
    assert_eq!(w.next_due(), Some(at(12)));
    let fired = w.advance(at(100 * 86_400_000));
    let mut expect: Vec<(UtcMillis, u32)> = dues
        .iter()
        .enumerate()
        .map(|(i, d)| (at(*d), i as u32))
        .collect();
    expect.sort();
    assert_eq!(fired, expect);
    assert!(w.is_empty());
}

#[test]
fn next_due_is_exact_for_overflow_and_a_lower_bound_for_upper_levels() {
    let mut w = wheel();
    let far = w.insert(at(50 * 3_600_000 + 7), 1);
    assert_eq!(w.next_due(), Some(at(50 * 3_600_000 + 7)));
    w.insert(at(3_000_000 + 5), 2);
    let bound = w.next_due().unwrap();
    assert!(bound <= at(3_000_000 + 5));
    assert!(bound > at(0));
    assert_eq!(w.cancel(far), Some(1));
    // Driving by next_due reaches the timer without ever passing it.
    let mut wakeups = 0;
    loop {
        let t = w.next_due().unwrap();
        assert!(t <= at(3_000_000 + 5));
        wakeups += 1;
        if !w.advance(t).is_empty() {
            assert_eq!(t, at(3_000_000 + 5));
            break;
        }
    }
    assert!(wakeups <= 4, "one wakeup per level at most, got {wakeups}");
}

#[test]
fn cancelled_overflow_items_are_compacted() {
    let mut w = wheel();
    let handles: Vec<_> = (0..5_000)
        .map(|i| w.insert(at(100 * 86_400_000 + i), i as u32))
        .collect();
    for h in &handles[..4_000] {
        assert!(w.cancel(*h).is_some());
    }
    assert_eq!(w.len(), 1_000);
    assert!(w.overflow.raw_len() <= 2 * 1_000 + 1_024);
    assert_eq!(w.next_due(), Some(at(100 * 86_400_000 + 4_000)));
    let fired = w.advance(at(200 * 86_400_000));
    assert_eq!(fired.len(), 1_000);
    assert_eq!(fired[0].1, 4_000);
}

#[test]
fn time_going_backwards_fires_nothing_new() {
    let mut w = wheel();
    w.advance(at(10_000));
    w.insert(at(9_000), 1);
    w.insert(at(10_500), 2);
    assert_eq!(values(w.advance(at(9_500))), vec![1]);
    assert!(w.advance(at(5_000)).is_empty());
    assert_eq!(values(w.advance(at(10_500))), vec![2]);
}

#[test]
fn dues_at_the_extremes_of_the_range_work() {
    let mut w = TimerWheel::new(TimerConfig::default(), UtcMillis(i64::MIN / 2));
    w.insert(UtcMillis(i64::MAX), 1);
    w.insert(UtcMillis(i64::MIN), 2);
    w.insert(UtcMillis(0), 3);
    assert_eq!(values(w.advance(UtcMillis(0))), vec![2, 3]);
    assert_eq!(w.next_due(), Some(UtcMillis(i64::MAX)));
    assert_eq!(values(w.advance(UtcMillis(i64::MAX))), vec![1]);
}

#[test]
fn advance_into_appends_and_reuses_the_buffer() {
    let mut w = wheel();
    let mut out = Vec::with_capacity(8);
    w.insert(at(1), 1);
    w.advance_into(at(1), &mut out);
    w.insert(at(2), 2);
    w.advance_into(at(2), &mut out);
    assert_eq!(out, vec![(at(1), 1), (at(2), 2)]);
}

#[test]
fn tiny_wheel_cascades_and_overflows_correctly() {
    // 3 ms ticks, 4 slots, 2 levels: a 48 ms window, so most of these cascade or overflow.
    let mut w = TimerWheel::new(tiny(), at(0));
    let dues = [47, 48, 49, 5, 200, 16, 1_000, 12, 13];
    for (i, d) in dues.iter().enumerate() {
        w.insert(at(*d), i as u32);
    }
    let mut fired = Vec::new();
    for now in (0..1_100).step_by(7) {
        for (due, v) in w.advance(at(now)) {
            assert!(due <= at(now) && due > at(now - 7));
            fired.push(v);
        }
    }
    assert_eq!(fired, vec![3, 7, 8, 5, 0, 1, 2, 4, 6]);
}

/// One step of a random run.
#[derive(Clone, Debug)]
enum Op {
    /// Insert due at `now + offset`.
    Insert(i64),
    /// Cancel the n-th handle ever issued (modulo their number).
    Cancel(usize),
    /// Reschedule the n-th handle to `now + offset`.
    Reschedule(usize, i64),
    /// Advance `now` by this many milliseconds (0 re-polls the same instant).
    Advance(i64),
}

fn offset() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => -50i64..50,
        3 => 0i64..2_000,
        2 => 0i64..200_000,
        1 => -100_000i64..0,
        1 => 0i64..20_000_000,
        1 => Just(0i64),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => offset().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<usize>(), offset()).prop_map(|(i, o)| Op::Reschedule(i, o)),
        4 => prop_oneof![
            4 => 0i64..15,
            3 => 0i64..1_000,
            2 => 0i64..100_000,
            1 => 0i64..30_000_000,
        ].prop_map(Op::Advance),
    ]
}

fn config() -> impl Strategy<Value = TimerConfig> {
    prop_oneof![
        Just(TimerConfig::default()),
        (1u64..12, 1u32..=3, 1u32..=3).prop_map(|(tick, slot_bits, levels)| TimerConfig {
            tick: Duration::from_millis(tick),
            slot_bits,
            levels,
        }),
        (1u64..20, 4u32..=6, 1u32..=4).prop_map(|(tick, slot_bits, levels)| TimerConfig {
            tick: Duration::from_millis(tick),
            slot_bits,
            levels,
        }),
    ]
}

/// The reference: a min-heap of `(due, seq, id)` with lazy deletion by sequence number.
#[derive(Default)]
struct Model {
    heap: BinaryHeap<Reverse<(i64, u64, u32)>>,
    /// Per id, the seq of its live heap item.
    live: Vec<Option<u64>>,
    seq: u64,
}

impl Model {
    fn push(&mut self, id: u32, due: i64) {
        self.seq += 1;
        self.live[id as usize] = Some(self.seq);
        self.heap.push(Reverse((due, self.seq, id)));
    }

    fn pop_due(&mut self, now: i64) -> Vec<(UtcMillis, u32)> {
        let mut out = Vec::new();
        while let Some(&Reverse((due, seq, id))) = self.heap.peek() {
            if self.live[id as usize] != Some(seq) {
                self.heap.pop();
                continue;
            }
            if due > now {
                break;
            }
            self.heap.pop();
            self.live[id as usize] = None;
            out.push((UtcMillis(due), id));
        }
        out
    }

    fn min_due(&self) -> Option<i64> {
        self.heap
            .iter()
            .filter(|Reverse((_, seq, id))| self.live[*id as usize] == Some(*seq))
            .map(|Reverse((due, _, _))| *due)
            .min()
    }

    fn len(&self) -> usize {
        self.live.iter().filter(|s| s.is_some()).count()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn matches_a_binary_heap_model(
        cfg in config(),
        start in -5_000i64..5_000,
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let mut w = TimerWheel::new(cfg, at(0));
        let mut m = Model::default();
        let mut handles = Vec::new();
        let mut now = T0 + start;
        for op in ops {
            match op {
                Op::Insert(off) => {
                    let id = u32::try_from(handles.len()).unwrap();
                    handles.push(w.insert(UtcMillis(now + off), id));
                    m.live.push(None);
                    m.push(id, now + off);
                }
                Op::Cancel(i) if !handles.is_empty() => {
                    let id = i % handles.len();
                    let expect = m.live[id].map(|_| u32::try_from(id).unwrap());
                    m.live[id] = None;
                    prop_assert_eq!(w.cancel(handles[id]), expect);
                }
                Op::Reschedule(i, off) if !handles.is_empty() => {
                    let id = i % handles.len();
                    let was_live = m.live[id].is_some();
                    if was_live {
                        m.push(u32::try_from(id).unwrap(), now + off);
                    }
                    prop_assert_eq!(w.reschedule(handles[id], UtcMillis(now + off)), was_live);
                }
                Op::Cancel(_) | Op::Reschedule(..) => {}
                Op::Advance(d) => {
                    now += d;
                    let fired = w.advance(UtcMillis(now));
                    let expect = m.pop_due(now);
                    for (due, _) in &fired {
                        prop_assert!(due.0 <= now, "fired early: due {} now {}", due.0, now);
                    }
                    prop_assert_eq!(&fired, &expect);
                    // Nothing pending is due any more, so the wheel asks to be woken later,
                    // never after the true earliest due time.
                    if let Some(next) = w.next_due() {
                        prop_assert!(next.0 > now);
                        prop_assert!(next.0 <= m.min_due().unwrap());
                    } else {
                        prop_assert_eq!(m.min_due(), None);
                    }
                }
            }
            prop_assert_eq!(w.len(), m.len());
        }
        let fired = w.advance(UtcMillis(i64::MAX));
        prop_assert_eq!(fired, m.pop_due(i64::MAX));
        prop_assert!(w.is_empty());
    }

    #[test]
    fn driven_by_next_due_every_timer_fires_exactly_on_time(
        cfg in config(),
        dues in prop::collection::vec(0i64..50_000_000, 1..200),
    ) {
        let mut w = TimerWheel::new(cfg.clone(), at(0));
        for (i, d) in dues.iter().enumerate() {
            w.insert(at(*d), i);
        }
        let mut fired = 0;
        let mut wakeups = 0;
        while let Some(t) = w.next_due() {
            wakeups += 1;
            for (due, _) in w.advance(t) {
                prop_assert_eq!(due, t, "woken at {:?} for a timer due {:?}", t, due);
                fired += 1;
            }
        }
        prop_assert_eq!(fired, dues.len());
        // Each distinct due time costs one wakeup plus at most one per cascade level.
        prop_assert!(wakeups <= dues.len() * (cfg.levels as usize + 1));
    }
}
