//! Bytes per pending timer at 1 M timers (due uniformly over one hour, `u64` payload) for the
//! timing wheel, a lazy-cancel `BinaryHeap` and tokio-util's `DelayQueue`.
//!
//! A counting global allocator (`stats_alloc`, so this file holds no unsafe code) measures the
//! net bytes held after building each structure from empty; the payload's own 8 bytes are then
//! subtracted. Growth by doubling leaves spare capacity, which counts: it is memory the process
//! holds. Run with `cargo bench -p ax-scheduler-core --bench timer_memory`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::alloc::System;
use std::hint::black_box;
use std::time::Duration;

use ax_scheduler_core::timer::{TimerConfig, TimerWheel};
use ax_scheduler_core::UtcMillis;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use support::{due_offsets, LazyHeap, ORIGIN};
use tokio_util::time::DelayQueue;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const N: usize = 1_000_000;
const PAYLOAD: f64 = 8.0;

/// Net bytes allocated by `build` and still held by what it returns.
fn held_by<R>(build: impl FnOnce() -> R) -> (R, f64) {
    let region = Region::new(GLOBAL);
    let built = build();
    let s = region.change();
    // `realloc` is already counted in `bytes_allocated` / `bytes_deallocated`.
    let net = s.bytes_allocated as f64 - s.bytes_deallocated as f64;
    (built, net)
}

fn report(name: &str, bytes: f64) {
    let per = bytes / N as f64;
    println!(
        "{name:<18} {:>8.1} MiB  {per:>6.1} B/timer  {:>6.1} B/timer beyond the payload",
        bytes / (1024.0 * 1024.0),
        per - PAYLOAD
    );
}

fn main() {
    let dues = due_offsets(N);
    println!("pending timers: {N}, payload: u64");

    let (w, bytes) = held_by(|| {
        let mut w = TimerWheel::new(TimerConfig::default(), UtcMillis(ORIGIN));
        for (i, d) in dues.iter().enumerate() {
            w.insert(UtcMillis(ORIGIN + d), i as u64);
        }
        w
    });
    assert_eq!(w.len(), N);
    report("wheel", bytes);
    drop(black_box(w));

    let (w, bytes) = held_by(|| {
        let mut w =
            TimerWheel::with_capacity(TimerConfig::default(), UtcMillis(ORIGIN), dues.len());
        for (i, d) in dues.iter().enumerate() {
            w.insert(UtcMillis(ORIGIN + d), i as u64);
        }
        w
    });
    report("wheel (pre-sized)", bytes);
    drop(black_box(w));

    let (h, bytes) = held_by(|| {
        let mut h = LazyHeap::new();
        for d in &dues {
            h.insert(*d);
        }
        h
    });
    assert_eq!(h.len(), N);
    report("binary_heap", bytes);
    drop(black_box(h));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let start = tokio::time::Instant::now();
        let (q, bytes) = held_by(|| {
            let mut q = DelayQueue::new();
            for (i, d) in dues.iter().enumerate() {
                q.insert_at(i as u64, start + Duration::from_millis(*d as u64));
            }
            q
        });
        assert_eq!(q.len(), N);
        report("delay_queue", bytes);
        drop(black_box(q));
    });
}
