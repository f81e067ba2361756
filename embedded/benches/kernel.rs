//! The embedded kernel side by side with what a Rust program would otherwise use: a
//! `tokio_util::time::DelayQueue` entry per job, one `tokio::spawn` + `sleep` per job, and
//! tokio-cron-scheduler 0.15.
//!
//! Measures, in one run: heap bytes per pending job (a counting global allocator,
//! `stats_alloc`, net bytes after N jobs were scheduled an hour ahead), fires per second with
//! N no-op jobs all due at the same instant (from that instant until the last one ran) and
//! their lateness, the latency of a submit and of a cancel in memory, and submits per second
//! into the durable store with 64, 256 and 1 024 submitters in flight (each waits for its
//! fsync, so 64 cap the rate near 64 per commit; a service placing orders has far more
//! requests in flight). The first two peers have no job semantics (no retry, timeout, cancel
//! by id, dead letter): they are the floor, not rivals. tokio-cron-scheduler is run with its
//! default 200-slot channels and with channels as large as the job count, on 20 000 jobs at
//! most (its adds are slow): heap per pending job, fires per second, jobs lost (its `add`
//! returns `Ok` for jobs its full channels drop) and the earliest fire against the due
//! instant. Run with `cargo bench -p ax-embedded --bench kernel`; `AX_BENCH_JOBS` sets N
//! (default 100 000), `AX_BENCH_ONLY=memory,fires,rate,latency,durable,cron` picks sections, `AX_BENCH_RATE` and
//! `AX_BENCH_RATE_SECS` the steady rate of the `rate` section and how long it lasts (default
//! 100 000 fires a second for 5 s), `AX_BENCH_THREADS` the runtime's worker threads (default
//! 2; with 1 the fire rate is the engine's own work alone, without contention for its lock).
//!
//! The `burst` section (not run by default, as it holds up to ten million jobs) takes bursts
//! of N no-op jobs spread evenly over 0.5 s, all submitted ahead (so they wait staged), on
//! the kernel's defaults, for each N of `AX_BENCH_BURST` (default
//! `100000,1000000,2000000,10000000`): fires per second from the first due instant until
//! the last job ran, how many ran within `AX_BENCH_BURST_WAIT` seconds (default 30) after
//! the last due instant, their lateness, early fires and heap bytes per pending job.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::alloc::System;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_embedded::{Job, Kernel, RetryPolicy, When};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tokio_util::time::DelayQueue;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const HOUR: Duration = Duration::from_secs(3600);

/// The number setting `name`, or `default` when it is unset or not a number.
fn setting<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn jobs() -> usize {
    setting("AX_BENCH_JOBS", 100_000)
}

fn net_bytes(region: &Region<'_, System>) -> f64 {
    let s = region.change();
    s.bytes_allocated as f64 - s.bytes_deallocated as f64
}

fn main() {
    let n = jobs();
    println!("{n} jobs");
    let only = std::env::var("AX_BENCH_ONLY").ok();
    let run = |section: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|s| s.trim() == section))
    };
    if run("memory") {
        memory(n);
    }
    if run("fires") {
        fires(n);
    }
    if run("rate") {
        rate();
    }
    if run("latency") {
        latency(n);
        latency_in_burst(n);
    }
    if only
        .as_deref()
        .is_some_and(|o| o.split(',').any(|s| s.trim() == "burst"))
    {
        let sizes = std::env::var("AX_BENCH_BURST")
            .unwrap_or_else(|_| "100000,1000000,2000000,10000000".to_owned());
        for size in sizes.split(',').filter_map(|s| s.trim().parse().ok()) {
            burst(size);
        }
    }
    if run("durable") {
        durable_sections(n);
    }
    if run("cron") {
        // Its adds go through its actors one by one: fewer jobs keep the section short.
        let m = 20_000.min(n);
        for (name, channel) in [
            ("defaults", None),
            ("big_chan", Some(m.next_power_of_two())),
        ] {
            cron_scheduler(m, name, channel);
        }
    }
}

fn durable_sections(n: usize) {
    // Each submitter waits for its batch's fsync (about 1 ms here) before its next submit, so
    // 64 submitters cap the rate near 64 per commit whatever the store can do. A service
    // placing orders has many more requests in flight: 256 and 1 024 submitters show what
    // the store itself sustains (by Little's law the mean latency is then in-flight / rate).
    durable(20_000.min(n), 64);
    durable(50_000.min(5 * n), 256);
    durable(100_000.min(5 * n), 1024);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(setting("AX_BENCH_THREADS", 2))
        .enable_all()
        .build()
        .unwrap()
}

fn noop() -> Job {
    Job::new(|_| async { Ok(()) })
}

/// Each measure on a runtime of its own, dropped before the next one starts, so that one
/// measure's frees do not land in the next one's count.
fn memory(n: usize) {
    let rt = runtime();
    rt.block_on(async {
        let kernel = Kernel::builder().build().unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let region = Region::new(GLOBAL);
        for _ in 0..n {
            kernel.after(HOUR, noop()).unwrap();
        }
        // Lets the driver take the dispatcher's first writes, as it does at once in use.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let bytes = net_bytes(&region);
        println!(
            "memory  kernel        {:>6.0} B per pending job",
            bytes / n as f64
        );
        kernel.shutdown(Duration::ZERO).await;
    });
    drop(rt);
    let rt = runtime();
    rt.block_on(async {
        let region = Region::new(GLOBAL);
        let mut q = DelayQueue::new();
        for i in 0..n {
            q.insert(i as u64, HOUR);
        }
        let bytes = net_bytes(&region);
        println!(
            "memory  delay_queue   {:>6.0} B per pending job",
            bytes / n as f64
        );
        drop(black_box(q));
    });
    drop(rt);
    let rt = runtime();
    rt.block_on(async {
        let region = Region::new(GLOBAL);
        let handles: Vec<_> = (0..n)
            .map(|_| tokio::spawn(async { tokio::time::sleep(HOUR).await }))
            .collect();
        let bytes = net_bytes(&region);
        println!(
            "memory  spawn_sleep   {:>6.0} B per pending job (with its JoinHandle, 8 B)",
            bytes / n as f64
        );
        for h in handles {
            h.abort();
        }
    });
}

/// Lateness buckets of 1 ms, the last one for everything later (a second, or what
/// [`with_range`](Self::with_range) says), and a count of the fires that came before their
/// instant.
struct Lateness {
    buckets: Vec<AtomicU64>,
    early: AtomicU64,
}

impl Lateness {
    fn new() -> Arc<Self> {
        Arc::new(Self::with_range(1000))
    }
    fn with_range(ms: usize) -> Self {
        Lateness {
            buckets: (0..=ms).map(|_| AtomicU64::new(0)).collect(),
            early: AtomicU64::new(0),
        }
    }
    fn record(&self, ms: i64) {
        if ms < 0 {
            self.early.fetch_add(1, Ordering::Relaxed);
        }
        let last = self.buckets.len() - 1;
        let i = usize::try_from(ms.max(0)).unwrap_or(last).min(last);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }
    /// The lateness in ms that `p` of the fires were within (the last bucket: that or more).
    fn quantile(&self, p: f64) -> usize {
        let total: u64 = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum();
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen as f64 >= total as f64 * p {
                return i;
            }
        }
        self.buckets.len() - 1
    }
    fn p99(&self) -> usize {
        self.quantile(0.99)
    }
    fn summary(&self) -> String {
        format!(
            "lateness p50 {} / p99 {} / max {} ms, {} early",
            self.quantile(0.5),
            self.quantile(0.99),
            self.quantile(1.0),
            self.early.load(Ordering::Relaxed)
        )
    }
}

/// Fires at a steady rate rather than in one burst: `AX_BENCH_RATE` jobs a second
/// (default 100 000) due one after another over `AX_BENCH_RATE_SECS` seconds (default 5),
/// all submitted ahead (so they wait staged, as orders due later do), on the default 5
/// workers. The target is a lateness p99 within one tick (10 ms) at 100 000 a
/// second. The peers take the same instants.
fn rate() {
    let per_sec: u64 = setting("AX_BENCH_RATE", 100_000);
    let n = per_sec * setting("AX_BENCH_RATE_SECS", 5);
    // Job i is due `offset(i)` ms after the first one.
    let offset = move |i: u64| i * 1000 / per_sec;
    rate_kernel(n, per_sec, offset);
    rate_spawn_sleep(n, per_sec, offset);
    rate_delay_queue(n, per_sec, offset);
}

fn rate_kernel(n: u64, per_sec: u64, offset: impl Fn(u64) -> u64) {
    let rt = runtime();
    rt.block_on(async {
        let kernel = Kernel::builder().build().unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let lateness = Lateness::new();
        let lead = Duration::from_millis(1500 + n / 300);
        let first = kernel.now().add(lead);
        for i in 0..n {
            let (d, l, k) = (done.clone(), lateness.clone(), kernel.clone());
            let job = Job::new(move |ctx| {
                let (d, l, k) = (d.clone(), l.clone(), k.clone());
                async move {
                    l.record(k.now().0 - ctx.fire_at().0);
                    d.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            });
            let due = first.add(Duration::from_millis(offset(i)));
            kernel.at(due, job).unwrap();
        }
        assert!(
            kernel.now().add(Duration::from_secs(1)) < first,
            "submitting took longer than the lead time"
        );
        let cpu = cpu_seconds();
        wait_until(&kernel, first).await;
        while done.load(Ordering::Relaxed) < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let cpu = cpu_seconds() - cpu;
        println!(
            "rate    kernel        {per_sec} /s: {}, all {} ran, CPU {:.2} us per fire",
            lateness.summary(),
            done.load(Ordering::Relaxed),
            cpu * 1e6 / n as f64
        );
        kernel.shutdown(Duration::ZERO).await;
    });
}

/// Lateness in ms of a fire meant for `due`, on tokio's clock.
fn late_ms(due: tokio::time::Instant) -> i64 {
    let now = tokio::time::Instant::now();
    if now >= due {
        (now - due).as_millis() as i64
    } else {
        -((due - now).as_millis() as i64) - 1
    }
}

fn rate_spawn_sleep(n: u64, per_sec: u64, offset: impl Fn(u64) -> u64) {
    let rt = runtime();
    rt.block_on(async {
        let done = Arc::new(AtomicU64::new(0));
        let lateness = Lateness::new();
        let first = tokio::time::Instant::now() + Duration::from_millis(1500 + n / 300);
        for i in 0..n {
            let (d, l) = (done.clone(), lateness.clone());
            let due = first + Duration::from_millis(offset(i));
            tokio::spawn(async move {
                tokio::time::sleep_until(due).await;
                l.record(late_ms(due));
                d.fetch_add(1, Ordering::Relaxed);
            });
        }
        let cpu = cpu_seconds();
        tokio::time::sleep_until(first).await;
        while done.load(Ordering::Relaxed) < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let cpu = cpu_seconds() - cpu;
        println!(
            "rate    spawn_sleep   {per_sec} /s: {}, CPU {:.2} us per fire",
            lateness.summary(),
            cpu * 1e6 / n as f64
        );
    });
}

fn rate_delay_queue(n: u64, per_sec: u64, offset: impl Fn(u64) -> u64) {
    let rt = runtime();
    rt.block_on(async {
        let lateness = Lateness::new();
        let first = tokio::time::Instant::now() + Duration::from_millis(1500 + n / 300);
        let mut q = DelayQueue::new();
        for i in 0..n {
            let due = first + Duration::from_millis(offset(i));
            q.insert_at(due, due);
        }
        let cpu = cpu_seconds();
        for _ in 0..n {
            let expired = std::future::poll_fn(|cx| q.poll_expired(cx)).await.unwrap();
            lateness.record(late_ms(expired.into_inner()));
        }
        let cpu = cpu_seconds() - cpu;
        println!(
            "rate    delay_queue   {per_sec} /s: {} (expiries, no job run), CPU {:.2} us per \
             fire",
            lateness.summary(),
            cpu * 1e6 / n as f64
        );
    });
}

/// What every job of a burst shares: one `Arc` in each closure, so that the heap per
/// pending job is the kernel's and an 8-byte closure.
struct BurstShared {
    kernel: Kernel,
    done: AtomicU64,
    lateness: Lateness,
    /// The instant the last job ran, in ns from `origin`.
    last: AtomicU64,
    origin: Instant,
}

/// `n` no-op jobs due evenly over 0.5 s, all submitted ahead, on the kernel's defaults:
/// fires per second from the first due instant until the last one ran (or until the wait
/// ran out), their lateness, none early, none lost, heap per pending job.
fn burst(n: usize) {
    let spread_ms: u64 = 500;
    let wait = Duration::from_secs(setting("AX_BENCH_BURST_WAIT", 30));
    let rt = runtime();
    rt.block_on(async {
        let kernel = Kernel::builder().build().unwrap();
        // Submitting takes about a microsecond a job: twice that, and two seconds, ahead.
        let lead = Duration::from_millis(2000 + n as u64 / 500);
        let (first, origin) = (kernel.now().add(lead), Instant::now());
        let shared = Arc::new(BurstShared {
            kernel: kernel.clone(),
            done: AtomicU64::new(0),
            lateness: Lateness::with_range(60_000),
            last: AtomicU64::new(0),
            origin,
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let region = Region::new(GLOBAL);
        let t = Instant::now();
        for i in 0..n as u64 {
            let s = shared.clone();
            let job = Job::new(move |ctx| {
                let s = s.clone();
                async move {
                    s.lateness.record(s.kernel.now().0 - ctx.fire_at().0);
                    s.done.fetch_add(1, Ordering::Relaxed);
                    let at = s.origin.elapsed().as_nanos() as u64;
                    s.last.fetch_max(at, Ordering::Relaxed);
                    Ok(())
                }
            });
            let due = first.add(Duration::from_millis(i * spread_ms / n as u64));
            kernel.at(due, job).unwrap();
        }
        let submit_secs = t.elapsed().as_secs_f64();
        let bytes = net_bytes(&region) / n as f64;
        assert!(
            kernel.now() < first,
            "submitting took longer than the lead time"
        );
        let cpu = cpu_seconds();
        let deadline = first.add(Duration::from_millis(spread_ms)).add(wait);
        wait_until(&kernel, first).await;
        while shared.done.load(Ordering::Relaxed) < n as u64 && kernel.now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let cpu = cpu_seconds() - cpu;
        let ran = shared.done.load(Ordering::Relaxed);
        let span = if ran == n as u64 {
            Duration::from_nanos(shared.last.load(Ordering::Relaxed)).saturating_sub(lead)
        } else {
            deadline.since(first)
        };
        println!(
            "burst   kernel {n:>9} due in 0.5 s: {:>9.0} fires/s, {ran} ran{}, {}, CPU {:.2} us \
             per fire, {bytes:.0} B per pending job, submits {:.2} us each",
            ran as f64 / span.as_secs_f64().max(1e-9),
            if ran == n as u64 {
                " (none lost)"
            } else {
                " (LOST OR LATE)"
            },
            shared.lateness.summary(),
            cpu * 1e6 / ran.max(1) as f64,
            submit_secs * 1e6 / n as f64,
        );
        kernel.shutdown(Duration::ZERO).await;
    });
}

fn fires(n: usize) {
    for workers in [5, 512] {
        fires_kernel(n, workers);
    }
    fires_delay_queue_and_spawn(n);
}

/// N no-op jobs due at one instant, on `workers` workers: from that instant until the last
/// one ran.
fn fires_kernel(n: usize, workers: usize) {
    let rt = runtime();
    rt.block_on(async {
        let kernel = Kernel::builder().workers(workers).build().unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let lateness = Lateness::new();
        // Far enough ahead that every job is submitted before it is due (checked below).
        let lead = Duration::from_millis(1000 + n as u64 / 50);
        let (due, origin) = (kernel.now().add(lead), Instant::now());
        // The instant the last job ran, in ns from `origin`: the rate is measured from the
        // due instant to it, not from when this task wakes (the burst can delay that).
        let last = Arc::new(AtomicU64::new(0));
        for _ in 0..n {
            let (d, l, k, t) = (done.clone(), lateness.clone(), kernel.clone(), last.clone());
            let job = Job::new(move |ctx| {
                let (d, l, k, t) = (d.clone(), l.clone(), k.clone(), t.clone());
                async move {
                    l.record(k.now().0 - ctx.fire_at().0);
                    d.fetch_add(1, Ordering::Relaxed);
                    t.fetch_max(origin.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    Ok(())
                }
            })
            .retry(RetryPolicy {
                max_retries: 0,
                ..RetryPolicy::default()
            });
            kernel.at(due, job).unwrap();
        }
        assert!(
            kernel.now() < due,
            "submitting took longer than the lead time"
        );
        assert_eq!(done.load(Ordering::Relaxed), 0);
        let cpu = cpu_seconds();
        wait_until(&kernel, due).await;
        while done.load(Ordering::Relaxed) < n as u64 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let cpu = cpu_seconds() - cpu;
        let ran = Duration::from_nanos(last.load(Ordering::Relaxed));
        let secs = ran.saturating_sub(lead).as_secs_f64().max(1e-9);
        println!(
            "fires   kernel/{workers:<4}   {:>9.0} fires/s, lateness p99 {} ms, all {} ran, \
             CPU {:.2} us per fire",
            n as f64 / secs,
            lateness.p99(),
            done.load(Ordering::Relaxed),
            cpu * 1e6 / n as f64
        );
        kernel.shutdown(Duration::ZERO).await;
    });
}

fn fires_delay_queue_and_spawn(n: usize) {
    let rt = runtime();
    rt.block_on(async {
        let mut q = DelayQueue::new();
        let delay = Duration::from_millis(200);
        for i in 0..n {
            q.insert(i as u64, delay);
        }
        let mut fired = 0;
        let mut first = None;
        while fired < n {
            std::future::poll_fn(|cx| q.poll_expired(cx)).await;
            first.get_or_insert_with(Instant::now);
            fired += 1;
        }
        let secs = first.map_or(0.0, |f| f.elapsed().as_secs_f64()).max(1e-9);
        println!(
            "fires   delay_queue   {:>9.0} fires/s (expiries, no job run)",
            n as f64 / secs
        );
    });
    rt.block_on(async {
        let done = Arc::new(AtomicU64::new(0));
        let due = tokio::time::Instant::now() + Duration::from_millis(500 + n as u64 / 200);
        for _ in 0..n {
            let d = done.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(due).await;
                d.fetch_add(1, Ordering::Relaxed);
            });
        }
        tokio::time::sleep_until(due).await;
        let start = Instant::now();
        while done.load(Ordering::Relaxed) < n as u64 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let secs = start.elapsed().as_secs_f64();
        println!("fires   spawn_sleep   {:>9.0} fires/s", n as f64 / secs);
    });
}

/// The process's CPU time so far (user and system, all threads; Linux, 10 ms steps), or 0
/// where `/proc` is not there: how much of the machine a measure took, whatever else runs.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields 14 and 15 (utime, stime), counted after the command name's closing parenthesis.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// Sleeps until the kernel's clock reads `due`.
async fn wait_until(kernel: &Kernel, due: ax_embedded::UtcMillis) {
    tokio::time::sleep(due.since(kernel.now())).await;
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn latency(n: usize) {
    let rt = runtime();
    rt.block_on(async {
        let kernel = Kernel::builder().build().unwrap();
        let mut submits = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let job = noop();
            let t = Instant::now();
            let id = kernel.after(HOUR, job).unwrap();
            submits.push(t.elapsed().as_nanos() as u64);
            ids.push(id);
        }
        let mut cancels = Vec::with_capacity(n);
        for id in ids {
            let t = Instant::now();
            kernel.cancel(id).unwrap();
            cancels.push(t.elapsed().as_nanos() as u64);
        }
        submits.sort_unstable();
        cancels.sort_unstable();
        println!(
            "latency kernel submit p50 {} ns p99 {} ns; cancel p50 {} ns p99 {} ns",
            percentile(&submits, 0.5),
            percentile(&submits, 0.99),
            percentile(&cancels, 0.5),
            percentile(&cancels, 0.99)
        );
        kernel.shutdown(Duration::ZERO).await;
    });
}

/// Submit latency while a burst runs: N jobs due at one instant as in `fires`, and beside
/// them a task that submits one job every 200 µs from a second before the burst's instant
/// (when the burst's jobs become dispatcher tasks) until the burst has run. An application
/// keeps submitting while the kernel works through a burst, and each submit takes the
/// kernel's lock, so this is how long the kernel holds it at a time.
fn latency_in_burst(n: usize) {
    let rt = runtime();
    rt.block_on(async {
        let kernel = Kernel::builder().build().unwrap();
        let done = Arc::new(AtomicU64::new(0));
        let lead = Duration::from_millis(1500 + n as u64 / 300);
        let due = kernel.now().add(lead);
        for _ in 0..n {
            let d = done.clone();
            let job = Job::new(move |_| {
                let d = d.clone();
                async move {
                    d.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            });
            kernel.at(due, job).unwrap();
        }
        wait_until(&kernel, ax_embedded::UtcMillis(due.0 - 1100)).await;
        let submitter = {
            let (kernel, done) = (kernel.clone(), done.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut tick = tokio::time::interval(Duration::from_micros(200));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                while done.load(Ordering::Relaxed) < n as u64 {
                    tick.tick().await;
                    let t = Instant::now();
                    kernel.after(HOUR, noop()).unwrap();
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                lat
            })
        };
        let mut lat = submitter.await.unwrap();
        lat.sort_unstable();
        println!(
            "latency kernel submit during a burst of {n}: p50 {} ns p99 {} ns max {} us \
             ({} submits)",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            lat.last().copied().unwrap_or(0) / 1000,
            lat.len()
        );
        kernel.shutdown(Duration::ZERO).await;
    });
}

/// `n` named-handler submits into a fresh store from `inflight` submitters at once.
fn durable(n: usize, inflight: u64) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let kernel = Kernel::builder()
            .store(dir.path().join("bench.redb"))
            .handler(
                "noop",
                ax_embedded::typed(|_job: ax_embedded::handler::Typed<u64>| async { Ok(()) }),
            )
            .build()
            .unwrap();
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        let per = n / inflight as usize;
        for t in 0..inflight {
            let kernel = kernel.clone();
            tasks.spawn(async move {
                let mut lat = Vec::with_capacity(per);
                for i in 0..per as u64 {
                    let job = Job::named("noop").payload(&(t * 1_000_000 + i));
                    let s = Instant::now();
                    kernel.submit(When::After(HOUR), job).await.unwrap();
                    lat.push(s.elapsed().as_micros() as u64);
                }
                lat
            });
        }
        let mut lat = Vec::with_capacity(n);
        while let Some(l) = tasks.join_next().await {
            lat.extend(l.unwrap());
        }
        let secs = start.elapsed().as_secs_f64();
        lat.sort_unstable();
        println!(
            "durable kernel {:>7.0} submits/s ({inflight:>4} in flight), latency p50 {} us p99 {} us",
            lat.len() as f64 / secs,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        kernel.shutdown(Duration::ZERO).await;
    });
}

/// A tokio-cron-scheduler with its default 200-slot channels, or with channels of `channel`
/// slots (they are preallocated, so made before the count starts).
async fn cron_sched(channel: Option<usize>) -> tokio_cron_scheduler::JobScheduler {
    let sched = match channel {
        None => tokio_cron_scheduler::JobScheduler::new().await,
        Some(c) => tokio_cron_scheduler::JobScheduler::new_with_channel_size(c).await,
    };
    let sched = sched.unwrap();
    sched.start().await.unwrap();
    sched
}

/// tokio-cron-scheduler 0.15, the crate Rust users name for closures at a time: heap per
/// one-shot job an hour ahead; then `m` one-shot jobs due at one instant, counting the fires
/// (its `add` returns `Ok` for jobs its full channels dropped), the earliest one against
/// the due instant, and fires per second from the first fire to the last.
fn cron_scheduler(m: usize, name: &str, channel: Option<usize>) {
    let rt = runtime();
    rt.block_on(async {
        let mut sched = cron_sched(channel).await;
        let region = Region::new(GLOBAL);
        for _ in 0..m {
            let job = tokio_cron_scheduler::Job::new_one_shot(HOUR, |_, _| {}).unwrap();
            sched.add(job).await.unwrap();
        }
        // Its actors take the jobs after `add` returned.
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!(
            "memory  cron/{name}   {:>6.0} B per pending job",
            net_bytes(&region) / m as f64
        );
        sched.shutdown().await.unwrap();
    });
    drop(rt);
    let rt = runtime();
    rt.block_on(async {
        let mut sched = cron_sched(channel).await;
        let fired = Arc::new(AtomicU64::new(0));
        let due = Instant::now() + Duration::from_millis(3000 + m as u64 / 10);
        // Signed µs of each fire against `due`: the earliest and the latest.
        let first = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
        let last = Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN));
        let mut refused = 0;
        for _ in 0..m {
            let (f, a, b) = (fired.clone(), first.clone(), last.clone());
            let job = tokio_cron_scheduler::Job::new_one_shot_at_instant(due, move |_, _| {
                let now = Instant::now();
                let us = if now >= due {
                    now.duration_since(due).as_micros() as i64
                } else {
                    -(due.duration_since(now).as_micros() as i64)
                };
                a.fetch_min(us, Ordering::Relaxed);
                b.fetch_max(us, Ordering::Relaxed);
                f.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            refused += usize::from(sched.add(job).await.is_err());
        }
        assert!(
            Instant::now() < due,
            "adding took longer than the lead time"
        );
        // Fires come on its one-second grid, up to a second either side: wait until none
        // came for two seconds after the due instant.
        tokio::time::sleep_until((due + Duration::from_secs(1)).into()).await;
        let mut seen = fired.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = fired.load(Ordering::Relaxed);
            if now == seen || now == m as u64 {
                break;
            }
            seen = now;
        }
        let count = fired.load(Ordering::Relaxed);
        let (a, b) = (first.load(Ordering::Relaxed), last.load(Ordering::Relaxed));
        let span = ((b - a).max(1) as f64) / 1e6;
        println!(
            "fires   cron/{name}   {:>9.0} fires/s, {} of {m} lost ({refused} refused by add), \
             earliest {:+.0} ms, latest {:+.0} ms against the due instant",
            count as f64 / span,
            m as u64 - count,
            a as f64 / 1000.0,
            b as f64 / 1000.0
        );
        sched.shutdown().await.unwrap();
    });
}
