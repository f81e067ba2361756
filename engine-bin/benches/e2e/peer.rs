//! The peer side of the bench (`AX_BENCH_PEER=bullmq`): the same workload run by BullMQ on the
//! same machine, and the one-line summary every run (ax or peer) can append to a file
//! (`AX_BENCH_SUMMARY=path`) so that `scripts/peer-bench.sh` prints the runs side by side.
//!
//! BullMQ is installed by the bench itself: the pinned `package.json` and `package-lock.json`
//! of `engine-bin/benches/peer/` and its script `bullmq.mjs` are copied into
//! `target/peer-bench/bullmq/`, and `npm ci` runs there whenever the lock file changed or
//! nothing is installed yet. Nothing is installed outside `target/`.
//!
//! A run starts a private Redis, a node worker process (`bullmq.mjs worker`: a BullMQ `Worker`
//! with a no-op processor at the concurrency of `AX_WORKER_CONCURRENCY`, default 50) and, once
//! the worker is connected, a node producer process (`bullmq.mjs produce`) that adds the N
//! delayed jobs, due over the spread starting the offset after it begins (the ax side's due
//! times: same generator, same offset and spread). The producer is a process of its own so
//! that its CPU is not counted against the worker, as the ax side's writer (this bench) is
//! not counted against ax. CPU comes from `/proc/PID/stat` of the worker and of Redis, from
//! just before the producer starts until the worker has started every job; lateness (start
//! minus due) and lost and duplicated jobs come from the worker's own summary. A run that
//! loses a job fails.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ax_testkit::RedisServer;

use super::{cpu_ticks, now_ms};

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`, 100 on Linux).
const HZ: f64 = 100.0;

/// One run's figures, as the side-by-side table shows them.
pub(crate) struct Summary {
    pub(crate) side: String,
    pub(crate) handler: String,
    pub(crate) concurrency: usize,
    pub(crate) jobs: usize,
    /// Started jobs per second from the first start to the last.
    pub(crate) executed_per_s: f64,
    pub(crate) p50_ms: i64,
    pub(crate) p99_ms: i64,
    pub(crate) lost: usize,
    pub(crate) twice: usize,
    /// CPU µs per job by process, from the start of submission to the last start.
    pub(crate) cpu_us: Vec<(String, f64)>,
}

impl Summary {
    /// Prints the summary and appends it as one JSON line to `AX_BENCH_SUMMARY` when set.
    pub(crate) fn record(&self) {
        let total: f64 = self.cpu_us.iter().map(|(_, us)| us).sum();
        let split: Vec<String> = self
            .cpu_us
            .iter()
            .map(|(name, us)| format!("{name} {us:.0}"))
            .collect();
        println!();
        println!(
            "## summary: {} {} c={}: {:.0} executed/s, lateness p50 {} ms p99 {} ms, lost {}, twice {}, CPU per job {total:.0} µs ({})",
            self.side,
            self.handler,
            self.concurrency,
            self.executed_per_s,
            self.p50_ms,
            self.p99_ms,
            self.lost,
            self.twice,
            split.join(" + ")
        );
        let Ok(path) = std::env::var("AX_BENCH_SUMMARY") else {
            return;
        };
        let cpu: serde_json::Map<String, serde_json::Value> = self
            .cpu_us
            .iter()
            .map(|(name, us)| (name.clone(), serde_json::json!((us * 10.0).round() / 10.0)))
            .collect();
        let line = serde_json::json!({
            "side": self.side,
            "handler": self.handler,
            "concurrency": self.concurrency,
            "jobs": self.jobs,
            "executed_per_s": self.executed_per_s.round(),
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "lost": self.lost,
            "twice": self.twice,
            "cpu_us_per_job": (total * 10.0).round() / 10.0,
            "cpu_us_by_process": cpu,
        });
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("open AX_BENCH_SUMMARY");
        writeln!(file, "{line}").expect("write AX_BENCH_SUMMARY");
    }
}

/// `target/` of the workspace (`CARGO_TARGET_DIR` when set).
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace")
            .join("target"),
    }
}

/// Copies the pinned package and the script into `target/peer-bench/bullmq/` and installs the
/// packages with `npm ci` unless the same lock file is installed there already.
fn install() -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peer");
    let dir = target_dir().join("peer-bench/bullmq");
    std::fs::create_dir_all(&dir).expect("create the BullMQ folder under target/");
    let lock = std::fs::read(src.join("package-lock.json")).expect("read package-lock.json");
    let installed = std::fs::read(dir.join("package-lock.json")).ok();
    let fresh = installed.as_deref() == Some(lock.as_slice())
        && dir.join("node_modules/bullmq/package.json").exists();
    for file in ["package.json", "package-lock.json", "bullmq.mjs"] {
        std::fs::copy(src.join(file), dir.join(file)).expect("copy the BullMQ side");
    }
    if !fresh {
        println!("installing BullMQ with npm ci in {}", dir.display());
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
            .current_dir(&dir)
            .status()
            .expect("run npm (node and npm come with scripts/setup.sh)");
        assert!(status.success(), "npm ci failed: {status}");
    }
    dir
}

/// Waits for a JSON line whose `event` is `event` from `lines`, up to `timeout`.
fn wait_event(
    lines: &mpsc::Receiver<String>,
    event: &str,
    timeout: Duration,
) -> Option<serde_json::Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let line = lines.recv_timeout(left).ok()?;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v.get("event").and_then(|e| e.as_str()) == Some(event) {
            return Some(v);
        }
    }
}

/// Runs the BullMQ side: `tasks` delayed jobs due over `spread_ms` from `offset_ms` after the
/// producer begins, and records its summary.
pub(crate) fn run_bullmq(tasks: usize, spread_ms: i64, offset_ms: i64) {
    let concurrency: usize = super::env_or("AX_WORKER_CONCURRENCY", 50);
    let dir = install();
    let version = std::fs::read_to_string(dir.join("node_modules/bullmq/package.json"))
        .ok()
        .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
        .and_then(|p| Some(p.get("version")?.as_str()?.to_owned()))
        .unwrap_or_default();
    let redis = RedisServer::start();
    let redis_pid = redis.pid().expect("Redis runs");
    println!(
        "peer: BullMQ {version}, {tasks} delayed jobs due over {} s from {} s after submission begins, worker concurrency {concurrency}",
        spread_ms / 1000,
        offset_ms / 1000
    );
    let script = dir.join("bullmq.mjs");
    let queue = "axpeer";
    let deadline = now_ms() + 60_000 + offset_ms + spread_ms + tasks as i64 / 100;
    let mut worker = Command::new("node")
        .arg(&script)
        .arg("worker")
        .args(["--redis", &redis.url(), "--queue", queue])
        .args(["--jobs", &tasks.to_string()])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--deadline", &deadline.to_string()])
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the node worker");
    let worker_pid = worker.id();
    let (tx, lines) = mpsc::channel();
    let stdout = worker.stdout.take().expect("the worker's stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    wait_event(&lines, "ready", Duration::from_secs(60)).expect("the node worker never got ready");

    let before = [cpu_ticks(worker_pid), cpu_ticks(redis_pid)];
    let submitted = Instant::now();
    let producer = Command::new("node")
        .arg(&script)
        .arg("produce")
        .args(["--redis", &redis.url(), "--queue", queue])
        .args(["--jobs", &tasks.to_string()])
        .args(["--offset", &offset_ms.to_string()])
        .args(["--spread", &spread_ms.to_string()])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the node producer");
    let producer_out = std::thread::spawn(move || producer.wait_with_output());

    let wait = Duration::from_millis((deadline - now_ms()).max(0) as u64);
    let done = wait_event(&lines, "done", wait).is_some();
    let after = [cpu_ticks(worker_pid), cpu_ticks(redis_pid)];
    let done_s = submitted.elapsed().as_secs_f64();
    if !done {
        println!("WARNING: gave up waiting for every job to start");
    }
    // A few seconds more, so that a duplicate would show; then the worker's summary.
    std::thread::sleep(Duration::from_secs(3));
    drop(worker.stdin.take());
    let summary =
        wait_event(&lines, "summary", Duration::from_secs(60)).expect("the node worker's summary");
    let _ = worker.wait();
    let produced = producer_out
        .join()
        .expect("the producer's thread")
        .expect("the node producer");
    let registered = String::from_utf8_lossy(&produced.stdout).into_owned();
    println!("producer: {}", registered.trim());
    println!("worker: {summary}");

    let per_job = |i: usize| after[i].saturating_sub(before[i]) as f64 / HZ * 1e6 / tasks as f64;
    for (i, name) in ["node worker", "redis"].iter().enumerate() {
        println!(
            "cpu {name}: {:.0}% of one core from submission to the last start ({done_s:.1} s)",
            after[i].saturating_sub(before[i]) as f64 / HZ / done_s * 100.0
        );
    }
    let int = |key: &str| summary.get(key).and_then(|v| v.as_i64()).unwrap_or(0);
    let record = Summary {
        side: format!("BullMQ {version}"),
        handler: "no-op".to_owned(),
        concurrency,
        jobs: tasks,
        executed_per_s: summary
            .get("executed_per_s")
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0),
        p50_ms: int("p50_ms"),
        p99_ms: int("p99_ms"),
        lost: int("lost").max(0) as usize,
        twice: int("duplicates").max(0) as usize,
        cpu_us: vec![
            ("node worker".to_owned(), per_job(0)),
            ("redis".to_owned(), per_job(1)),
        ],
    };
    record.record();
    assert!(
        record.lost == 0,
        "BullMQ lost {} of {tasks} jobs",
        record.lost
    );
}
