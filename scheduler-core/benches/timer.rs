//! Timer benches: the timing wheel against a lazy-cancel `BinaryHeap` and tokio-util's
//! `DelayQueue`, at 10 k, 100 k and 1 M timers due uniformly over one hour.
//!
//! Every implementation carries a `u64` payload and sees the same due times. Each measured
//! iteration builds its structure from empty (setup outside the timed part where noted), and
//! dropping it is never timed.
//! - `insert`: insert all timers.
//! - `cancel_half`: with all timers inserted (untimed), cancel every other one.
//! - `cycle_1s`: insert all, then advance through the hour in 1 s steps (3600 advances),
//!   collecting every fired timer.
//! - `cycle_tick` (wheel and heap only): the same in 10 ms steps, the engine's tick.
//!
//! `DelayQueue` runs in a current-thread runtime with paused time: each step is
//! `tokio::time::advance(1 s)` followed by `poll_expired` (outside the cooperative budget)
//! until it returns `Pending`, which is how tokio's own tests drive it. The timed region for it includes the runtime's timer driver
//! work, which is part of what a `DelayQueue` costs in real use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::poll_fn;
use std::hint::black_box;
use std::task::Poll;
use std::time::{Duration, Instant};

use ax_scheduler_core::timer::{TimerConfig, TimerHandle, TimerWheel};
use ax_scheduler_core::UtcMillis;
use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use support::{due_offsets, LazyHeap, HOUR_MS, ORIGIN};
use tokio_util::time::{delay_queue, DelayQueue};

const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

fn wheel_with(dues: &[i64]) -> (TimerWheel<u64>, Vec<TimerHandle>) {
    let mut w = TimerWheel::new(TimerConfig::default(), UtcMillis(ORIGIN));
    let handles = dues
        .iter()
        .enumerate()
        .map(|(i, d)| w.insert(UtcMillis(ORIGIN + d), i as u64))
        .collect();
    (w, handles)
}

fn heap_with(dues: &[i64]) -> LazyHeap {
    let mut h = LazyHeap::new();
    for d in dues {
        h.insert(*d);
    }
    h
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn dq_with(dues: &[i64]) -> (DelayQueue<u64>, Vec<delay_queue::Key>) {
    let start = tokio::time::Instant::now();
    let mut q = DelayQueue::new();
    let keys = dues
        .iter()
        .enumerate()
        .map(|(i, d)| q.insert_at(i as u64, start + Duration::from_millis(*d as u64)))
        .collect();
    (q, keys)
}

/// Drains everything `DelayQueue` has expired at the current (paused) instant. Run
/// unconstrained: otherwise tokio's cooperative budget makes `poll_expired` return `Pending`
/// after 128 items, and a step with more due timers would leave some for later steps.
async fn dq_drain(q: &mut DelayQueue<u64>, fired: &mut usize) {
    tokio::task::unconstrained(poll_fn(|cx| loop {
        match q.poll_expired(cx) {
            Poll::Ready(Some(e)) => {
                black_box(e.into_inner());
                *fired += 1;
            }
            Poll::Ready(None) | Poll::Pending => return Poll::Ready(()),
        }
    }))
    .await;
}

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
    n: usize,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(n as u64));
    g.sampling_mode(SamplingMode::Flat);
    if n >= 1_000_000 {
        g.sample_size(10);
    } else if n >= 100_000 {
        g.sample_size(20);
    }
    g
}

fn insert(c: &mut Criterion) {
    for n in SIZES {
        let dues = due_offsets(n);
        let mut g = configure(c, "insert", n);
        g.bench_with_input(BenchmarkId::new("wheel", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let built = wheel_with(dues);
                    total += t.elapsed();
                    black_box(&built);
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("binary_heap", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let built = heap_with(dues);
                    total += t.elapsed();
                    black_box(&built);
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("delay_queue", n), &dues, |b, dues| {
            let rt = runtime();
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let t = Instant::now();
                        let built = dq_with(dues);
                        total += t.elapsed();
                        black_box(&built);
                    }
                    total
                })
            });
        });
        g.finish();
    }
}

fn cancel_half(c: &mut Criterion) {
    for n in SIZES {
        let dues = due_offsets(n);
        let mut g = configure(c, "cancel_half", n);
        g.throughput(Throughput::Elements(n as u64 / 2));
        g.bench_with_input(BenchmarkId::new("wheel", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (mut w, handles) = wheel_with(dues);
                    let t = Instant::now();
                    for h in handles.iter().step_by(2) {
                        black_box(w.cancel(*h));
                    }
                    total += t.elapsed();
                    assert_eq!(w.len(), dues.len() / 2);
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("binary_heap", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut h = heap_with(dues);
                    let t = Instant::now();
                    for id in (0..dues.len() as u64).step_by(2) {
                        black_box(h.cancel(id));
                    }
                    total += t.elapsed();
                    black_box(h.len());
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("delay_queue", n), &dues, |b, dues| {
            let rt = runtime();
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (mut q, keys) = dq_with(dues);
                        let t = Instant::now();
                        for k in keys.iter().step_by(2) {
                            black_box(q.remove(k));
                        }
                        total += t.elapsed();
                        assert_eq!(q.len(), dues.len() / 2);
                    }
                    total
                })
            });
        });
        g.finish();
    }
}

fn wheel_cycle(dues: &[i64], step_ms: i64) -> usize {
    let (mut w, _) = wheel_with(dues);
    let mut out = Vec::new();
    let mut fired = 0;
    let mut now = 0;
    while now < HOUR_MS {
        now += step_ms;
        w.advance_into(UtcMillis(ORIGIN + now), &mut out);
        fired += out.len();
        black_box(&out);
        out.clear();
    }
    fired
}

fn heap_cycle(dues: &[i64], step_ms: i64) -> usize {
    let mut h = heap_with(dues);
    let mut out = Vec::new();
    let mut fired = 0;
    let mut now = 0;
    while now < HOUR_MS {
        now += step_ms;
        h.advance_into(now, &mut out);
        fired += out.len();
        black_box(&out);
        out.clear();
    }
    fired
}

fn cycle(c: &mut Criterion) {
    for n in SIZES {
        let dues = due_offsets(n);
        let mut g = configure(c, "cycle_1s", n);
        g.bench_with_input(BenchmarkId::new("wheel", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let fired = wheel_cycle(dues, 1_000);
                    total += t.elapsed();
                    assert_eq!(fired, dues.len());
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("binary_heap", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let fired = heap_cycle(dues, 1_000);
                    total += t.elapsed();
                    assert_eq!(fired, dues.len());
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("delay_queue", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // A fresh paused runtime per iteration, so the clock starts at zero again.
                    let rt = runtime();
                    total += rt.block_on(async {
                        let t = Instant::now();
                        let (mut q, _keys) = dq_with(dues);
                        let mut fired = 0;
                        for _ in 0..HOUR_MS / 1_000 {
                            tokio::time::advance(Duration::from_secs(1)).await;
                            dq_drain(&mut q, &mut fired).await;
                        }
                        let elapsed = t.elapsed();
                        assert_eq!(fired, dues.len());
                        elapsed
                    });
                }
                total
            });
        });
        g.finish();

        let mut g = configure(c, "cycle_tick", n);
        g.bench_with_input(BenchmarkId::new("wheel", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let fired = wheel_cycle(dues, 10);
                    total += t.elapsed();
                    assert_eq!(fired, dues.len());
                }
                total
            });
        });
        g.bench_with_input(BenchmarkId::new("binary_heap", n), &dues, |b, dues| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let fired = heap_cycle(dues, 10);
                    total += t.elapsed();
                    assert_eq!(fired, dues.len());
                }
                total
            });
        });
        g.finish();
    }
}

criterion_group!(benches, insert, cancel_half, cycle);
criterion_main!(benches);
