//! End-to-end benchmark through the user's path: task keys written to etcd, fired by a real
//! `ax serve` process, run by its workers.
//!
//! It starts a private etcd and Redis, one `ax serve` replica with both roles (or, with
//! `AX_BENCH_REPLICAS=2`, a scheduler-only leader and a separate worker-only replica), waits
//! until the replica leads, then writes `AX_BENCH_TASKS` (default 100 000) one-shot `noop`
//! tasks in transactions of 128 puts from several concurrent writers. The dues lie uniformly
//! in the `AX_BENCH_SPREAD_SECS` (default 10) seconds that start `AX_BENCH_OFFSET_SECS`
//! (default 5) seconds after the first write, and nothing waits for registration to end: the
//! writes run on beside the arming and the firing, however long they take (100 000 tasks
//! took about 1.6 s on a 2-core machine; a slower etcd pushes them into the window). CPU is
//! counted from the first write, so the cost of registering (etcd's puts, the watch, the arming) is part of the
//! cost per job, and the `registered` line says when registration ended against the first due.
//!
//! `AX_BENCH_PLANNED=1` instead plans the registration to end before the first due (the
//! takeover, memory and preload modes always do): a calibration
//! writes a few thousand keys under a prefix no replica watches, the registration time of
//! the full set is extrapolated from it, and the planned end is that estimate with a margin
//! (`AX_BENCH_MARGIN_SECS` adds to it), and the dues lie in the spread after that end. Such a
//! run is only valid if the leader has armed every
//! task before the first due; the report says whether it did. A marker task, written after
//! the last batch and due at once, shows when the leader has consumed the watch up to the
//! last put: its `enqueued` log line is the "armed" instant (etcd delivers a watch in
//! revision order).
//!
//! Lateness comes from the replicas' own JSON log lines (`enqueued` by the leader,
//! `started` by the workers, each with `lateness_ms`), lost and duplicated executions from
//! counting `started` lines per task, peak memory from `VmHWM` in `/proc/PID/status`, and the
//! CPU time of every process (ax, etcd, Redis) over the firing window from `/proc/PID/stat`.
//!
//! Run with `cargo bench -p ax --bench e2e`; `AX_BENCH_TASKS=10000` for a quick check.
//! Other knobs: `AX_BENCH_WRITERS` (concurrent writers, default 4), `AX_BENCH_LOG` (the
//! replicas' `AX_LOG`; the default keeps the three execution lines), and any `AX_*` variable
//! of the engine's configuration set in the environment is passed on to the replicas;
//! `AX_BENCH_KEEP=1` keeps the replicas' logs and prints where they are;
//! `AX_BENCH_LATENESS_CSV=path` (http mode) writes every call's due and lateness.
//!
//! `AX_BENCH_TAKEOVER=1` adds a standby scheduler replica (so: leader, worker, standby) and
//! kills the leader once it has armed every task, before the first due: the report says how
//! long after the kill the standby led and had armed every task (its catalog is warm, its
//! takeover reads the states), and its memory is the leader's memory at N tasks. Give it
//! time before the dues (`AX_BENCH_MARGIN_SECS`, at least the lease TTL plus the arming).
//! etcd runs with a 8 GiB quota and auto-compaction, so a million tasks fit.
//!
//! `AX_BENCH_HTTP=1` runs the tasks with the `http` handler instead of `noop`: each posts to
//! a receiver in this process on loopback (`e2e/receiver.rs`), which records the arrival of
//! every call. Lateness is then arrival minus due, lost and twice are counted from the
//! arrivals, and workers run with concurrency 200 unless `AX_WORKER_CONCURRENCY` says
//! otherwise: a message holds its place in the pool until its settle returns, so at 50
//! places a round trip of a few milliseconds caps one replica near 8 000 calls a second. The report adds the CPU per fire of ax, etcd and Redis together, and Redis's
//! own time per command (`INFO commandstats`) per fire.
//!
//! `AX_BENCH_SCHEDULERS=N` runs sharded scheduling instead: N scheduler-only replicas and
//! `AX_BENCH_WORKERS` (default 1) worker-only ones, with the `AX_SHARDS` of the environment
//! (passed on like every `AX_*` variable). The run starts once every shard has an owner and
//! the shares are even (the owner keys, or the leader key with one shard); one marker per
//! shard shows when each owner has consumed the watch. Lateness, lost and twice count over
//! every replica's log, and the report adds CPU per process kind (the scheduler replicas
//! together, the workers together, etcd, Redis), also per 1 000 fires. Every mode measures
//! each process's idle CPU first (`AX_BENCH_IDLE_SECS`, default 5, once the replicas are ready
//! and before any task is registered) and gives the cost per 1 000 fires also without it.
//!
//! `AX_BENCH_PEER=bullmq` runs the same workload with BullMQ instead of ax (`e2e/peer.rs`
//! says how): delayed jobs with the same dues, a node worker with a no-op processor at
//! `AX_WORKER_CONCURRENCY` (default 50), a private Redis. Every run ends with a summary line
//! (executed/s, lateness p50 / p99, lost, twice, CPU per job by process) that
//! `AX_BENCH_SUMMARY=path` also appends to a file as JSON; `scripts/peer-bench.sh` runs ax and
//! BullMQ one after another and prints them side by side. A run that loses a job fails.
//!
//! `AX_BENCH_PRELOAD=1` registers the tasks before the replicas start, so each term arms
//! them from its takeover's listing instead of its watch. Tasks written to etcd while a term
//! runs, not through ax, are checked for the audit log and recorded there, one record per
//! second of the burst with up to 1 000 task ids each ("changed in etcd without ax"). The
//! report counts what registering cost etcd: the puts from its start to the first due, the
//! audit records, and the whole run's puts and transactions per task. The idle CPU is then
//! taken between the arming and the first due.
//!
//! `AX_BENCH_MEMORY=1` measures the leader's memory per registered task instead of firing:
//! a scheduler-only leader and a worker, N small periodic `http` tasks (a 60-byte loopback URL,
//! no headers, no payload, `every: 1h`, so none fires during the run), and the leader's
//! `VmRSS` before registration and once it has armed and written every task's state and its
//! memory has settled. With `AX_BENCH_SCHEDULERS=N` it measures every scheduler replica
//! instead: each holds the whole catalog and arms only the tasks of the shards it owns (all
//! of them for the leader with one shard, none for a standby), so the replicas' memory splits
//! into a cost per task held and a cost per task armed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/peer.rs"]
mod peer;
#[path = "e2e/receiver.rs"]
mod receiver;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_testkit::{free_port, EtcdServer, RedisServer};
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use etcd_client::{Client, DeleteOptions, GetOptions, Txn, TxnOp};

const PREFIX: &str = "/axbench";
const NAMESPACE: &str = "bench";
const MARKER_NAMESPACE: &str = "benchmarker";
const BATCH: usize = 128;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

fn rfc3339_ms(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .unwrap()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A small deterministic generator (xorshift64*), so every run has the same spread of dues.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// What a replica runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Both,
    Scheduler,
    Worker,
}

impl Kind {
    fn roles(self) -> &'static str {
        match self {
            Kind::Both => "scheduler,worker",
            Kind::Scheduler => "scheduler",
            Kind::Worker => "worker",
        }
    }

    fn schedules(self) -> bool {
        self != Kind::Worker
    }

    fn works(self) -> bool {
        self != Kind::Scheduler
    }
}

/// One `ax serve` process.
struct Replica {
    name: String,
    kind: Kind,
    child: Child,
    log: PathBuf,
    http: String,
}

impl Replica {
    fn start(dir: &Path, name: &str, kind: Kind, etcd: &str, redis: &str) -> Replica {
        let log = dir.join(format!("{name}.log"));
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
        // The `noop` mode reads lateness from the `enqueued` and `started` lines (debug); the
        // `http` mode measures from the calls, at the engine's default level. The takeover
        // and memory modes wait for a term's `scheduling` line (info).
        match std::env::var("AX_BENCH_LOG") {
            Ok(filter) => {
                cmd.env("AX_LOG", filter);
            }
            Err(_) if !http_mode() => {
                cmd.env(
                    "AX_LOG",
                    "warn,ax_scheduler::term=info,ax_scheduler::term::fire=debug,ax_worker::publisher=debug",
                );
            }
            Err(_) => {}
        }
        if http_mode() && std::env::var_os("AX_WORKER_CONCURRENCY").is_none() {
            cmd.env("AX_WORKER_CONCURRENCY", "200");
        }
        cmd.arg("serve")
            .env("AX_ETCD_ENDPOINTS", etcd)
            .env("AX_ETCD_PREFIX", PREFIX)
            .env("AX_REDIS_URL", redis)
            .env("AX_REDIS_KEY_PREFIX", "axbench")
            .env("AX_INSTANCE_ID", name)
            .env("AX_ROLES", kind.roles())
            .env("AX_HTTP_LISTEN", format!("127.0.0.1:{port}"))
            // The receiver listens on loopback, which the http handler refuses by default.
            .env("AX_WORKER_HTTP_ALLOW_CIDRS", "127.0.0.0/8,::1/128")
            .env("AX_LOG_FORMAT", "json")
            .stdin(Stdio::null())
            .stdout(File::create(&log).unwrap())
            .stderr(File::create(dir.join(format!("{name}.err"))).unwrap());
        let child = cmd.spawn().expect("start ax serve");
        Replica {
            name: name.to_owned(),
            kind,
            child,
            log,
            http: format!("http://127.0.0.1:{port}"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn http_get(url: &str) -> Option<(u16, String)> {
    let response = reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Writes `(key, value)` pairs in transactions of [`BATCH`] puts from `writers` concurrent
/// writers; returns when all are acknowledged.
async fn write_all(client: &Client, pairs: Arc<Vec<(String, String)>>, writers: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..writers {
        let mut client = client.clone();
        let pairs = Arc::clone(&pairs);
        let next = Arc::clone(&next);
        handles.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(BATCH, Ordering::Relaxed);
                if start >= pairs.len() {
                    return;
                }
                let end = (start + BATCH).min(pairs.len());
                let ops: Vec<TxnOp> = pairs[start..end]
                    .iter()
                    .map(|(k, v)| TxnOp::put(k.as_str(), v.as_str(), None))
                    .collect();
                client.txn(Txn::new().and_then(ops)).await.expect("txn");
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

fn http_mode() -> bool {
    env_or("AX_BENCH_HTTP", 0) == 1
}

/// A one-shot `http` task calling the receiver (the http mode).
fn http_call_spec(at_ms: i64, base: &str, namespace: &str, id: &str) -> String {
    format!(
        r#"{{"handler":"http","schedule":{{"at":"{}"}},"http":{{"url":"{base}/hook/{namespace}/{id}"}}}}"#,
        rfc3339_ms(at_ms)
    )
}

/// A small periodic `http` task (the memory mode): nothing fires within the hour.
fn http_spec(i: usize) -> String {
    format!(
        r#"{{"handler":"http","schedule":{{"every":"1h"}},"http":{{"url":"http://127.0.0.1:9/v1/jobs/{i:07}/run?team=data&env=p1"}}}}"#
    )
}

fn spec(at_ms: i64) -> String {
    format!(
        r#"{{"handler":"noop","schedule":{{"at":"{}"}}}}"#,
        rfc3339_ms(at_ms)
    )
}

/// Reads the lines appended to a log file since the last call.
struct Tail {
    file: File,
    partial: Vec<u8>,
}

impl Tail {
    fn open(path: &Path) -> Tail {
        Tail {
            file: File::open(path).unwrap(),
            partial: Vec::new(),
        }
    }

    fn lines(&mut self) -> Vec<String> {
        // The file position stays where the last read ended.
        self.file.read_to_end(&mut self.partial).unwrap();
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(end + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        String::from_utf8_lossy(&done)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// `(utime + stime)` clock ticks of a process.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    get(11) + get(12)
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Redis's own time per command over the run (`INFO commandstats`), most first:
/// (command, calls, microseconds).
async fn redis_command_costs(url: &str) -> Vec<(String, u64, u64)> {
    let Ok(client) = redis::Client::open(url) else {
        return Vec::new();
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return Vec::new();
    };
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    let mut costs: Vec<(String, u64, u64)> = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), field("calls=")?, field("usec=")?))
        })
        .collect();
    costs.sort_by_key(|c| std::cmp::Reverse(c.2));
    costs
}

/// The execution history stream across tasks: (entries, bytes by `MEMORY USAGE ... SAMPLES
/// 0`, which counts every node rather than estimating from a sample).
async fn history_stream_size(url: &str) -> (u64, u64) {
    let Ok(client) = redis::Client::open(url) else {
        return (0, 0);
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return (0, 0);
    };
    let key = ax_queue::Keys::new("axbench").executions();
    let len: u64 = redis::cmd("XLEN")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap_or(0);
    let bytes: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut conn)
        .await
        .unwrap_or(None);
    (len, bytes.unwrap_or(0))
}

/// The process's `VmRSS` once settled: two readings 5 s apart within 1 % (at most 5 min).
async fn settled_rss(pid: u32) -> u64 {
    let mut last = status_kib(pid, "VmRSS:");
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = status_kib(pid, "VmRSS:");
        let settled = now.abs_diff(last) * 100 <= last;
        last = now;
        if settled {
            break;
        }
    }
    last
}

/// A counter or gauge of etcd's own metrics (`/metrics` on its client URL), summed over
/// its label sets.
async fn etcd_metric(endpoint: &str, name: &str) -> f64 {
    let Some((200, body)) = http_get(&format!("{endpoint}/metrics")).await else {
        return 0.0;
    };
    body.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What registering cost etcd: counts, deterministic where timings are not.
struct RegistrationWrites {
    /// Puts from the start of registration to the first due: the specs, the markers, the
    /// first states and the audit records written by then.
    puts: f64,
    /// Puts from the start of registration until the audit records stopped growing.
    run_puts: f64,
    /// Transactions over the same span.
    run_txns: f64,
    /// Audit records once they stopped growing, every one of them a record of direct writes.
    audit: i64,
    /// Seconds after the run's end the audit records went on growing.
    audit_settled_s: u64,
}

impl RegistrationWrites {
    fn print(&self, tasks: usize) {
        let n = tasks as f64;
        println!(
            "etcd writes for registration: {:.0} puts from its start to the first due ({:.3} per task); audit records of the direct writes {} ({:.4} per task, settled {} s after the run); the whole run {:.0} puts ({:.3} per task) in {:.0} transactions ({:.3} per task)",
            self.puts,
            self.puts / n,
            self.audit,
            self.audit as f64 / n,
            self.audit_settled_s,
            self.run_puts,
            self.run_puts / n,
            self.run_txns,
            self.run_txns / n,
        );
    }
}

/// How many audit records etcd holds once two counts 2 s apart agree (at most two minutes
/// on), and how many seconds that took: the records of a burst may still be being written
/// when the run ends.
async fn settled_audit_records(client: &Client) -> (i64, u64) {
    let count = || async {
        let opts = GetOptions::new().with_prefix().with_count_only();
        client
            .clone()
            .get(format!("{PREFIX}/audit/"), Some(opts))
            .await
            .map_or(0, |r| r.count())
    };
    let mut last = count().await;
    for waited in 1..=60 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = count().await;
        if now == last {
            return (now, (waited - 1) * 2);
        }
        last = now;
    }
    (last, 120)
}

/// The pid of the process whose command line contains `needle` (a server's port).
fn find_pid(program: &str, needle: &str) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(program) && cmdline.contains(needle) {
            return Some(pid);
        }
    }
    None
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(name: &str, values: &mut [i64]) -> String {
    values.sort_unstable();
    format!(
        "{name}: p50 {} ms, p90 {} ms, p99 {} ms, p99.9 {} ms, max {} ms (n = {})",
        percentile(values, 50.0),
        percentile(values, 90.0),
        percentile(values, 99.0),
        percentile(values, 99.9),
        values.last().copied().unwrap_or(0),
        values.len()
    )
}

/// One execution line of a replica's log.
struct Line {
    message: String,
    task: String,
    lateness_ms: i64,
    attempt: i64,
    at_us: i64,
}

fn parse_line(line: &str) -> Option<Line> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let message = v.get("message")?.as_str()?;
    if message != "started" && message != "enqueued" && message != "finished" {
        return None;
    }
    let at = DateTime::parse_from_rfc3339(v.get("timestamp")?.as_str()?).ok()?;
    Some(Line {
        message: message.to_owned(),
        task: v.get("task_id")?.as_str()?.to_owned(),
        lateness_ms: v.get("lateness_ms").and_then(|l| l.as_i64()).unwrap_or(0),
        attempt: v.get("attempt").and_then(|a| a.as_i64()).unwrap_or(0),
        at_us: at.timestamp_micros(),
    })
}

/// The replicas to start and what the run does.
struct Setup {
    tasks: usize,
    spread_ms: i64,
    /// The replicas in start order; the first scheduler is the one leader, if there is one.
    kinds: Vec<(String, Kind)>,
    /// Sharded scheduling (`AX_BENCH_SCHEDULERS`): wait for the owner keys, not a leader.
    sharded: bool,
    shards: u32,
    writers: usize,
    margin_ms: i64,
    memory: bool,
    /// Register the tasks before the replicas start (`AX_BENCH_PRELOAD`).
    preload: bool,
    /// Plan registration to end before the first due (`AX_BENCH_PLANNED`); otherwise the
    /// dues start `offset_ms` after the first write and registration runs into the window.
    planned: bool,
    offset_ms: i64,
}

fn main() {
    let tasks: usize = env_or("AX_BENCH_TASKS", 100_000);
    let spread_ms: i64 = env_or::<i64>("AX_BENCH_SPREAD_SECS", 10) * 1000;
    let replicas: usize = env_or("AX_BENCH_REPLICAS", 1);
    let schedulers: usize = env_or("AX_BENCH_SCHEDULERS", 0);
    let workers: usize = env_or("AX_BENCH_WORKERS", 1);
    let shards: u32 = env_or("AX_SHARDS", 1);
    let writers: usize = env_or("AX_BENCH_WRITERS", 4);
    let margin_ms: i64 = env_or::<i64>("AX_BENCH_MARGIN_SECS", 0) * 1000;
    let takeover = env_or("AX_BENCH_TAKEOVER", 0) == 1;
    let memory = env_or("AX_BENCH_MEMORY", 0) == 1;
    let offset_ms: i64 = env_or::<i64>("AX_BENCH_OFFSET_SECS", 5) * 1000;
    if let Ok(peer) = std::env::var("AX_BENCH_PEER") {
        assert_eq!(peer, "bullmq", "AX_BENCH_PEER knows only `bullmq`");
        peer::run_bullmq(tasks, spread_ms, offset_ms);
        return;
    }
    let preload = !memory && env_or("AX_BENCH_PRELOAD", 0) == 1;
    let named = |names: &[(&str, Kind)]| -> Vec<(String, Kind)> {
        names.iter().map(|(n, k)| ((*n).to_owned(), *k)).collect()
    };
    let kinds = if schedulers > 0 {
        let mut kinds: Vec<(String, Kind)> = (1..=schedulers)
            .map(|i| (format!("scheduler-{i}"), Kind::Scheduler))
            .collect();
        kinds.extend((1..=workers.max(1)).map(|i| (format!("worker-{i}"), Kind::Worker)));
        kinds
    } else if takeover {
        named(&[
            ("leader", Kind::Scheduler),
            ("worker", Kind::Worker),
            ("standby", Kind::Scheduler),
        ])
    } else if memory || replicas >= 2 {
        named(&[("leader", Kind::Scheduler), ("worker", Kind::Worker)])
    } else {
        named(&[("replica", Kind::Both)])
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(Setup {
        tasks,
        spread_ms,
        kinds,
        sharded: schedulers > 0,
        shards: shards.max(1),
        writers,
        margin_ms,
        memory,
        preload,
        planned: preload || memory || takeover || env_or("AX_BENCH_PLANNED", 0) == 1,
        offset_ms,
    }));
}

/// Who holds each shard: the owner keys, or the leader key with one shard.
async fn owners(client: &Client, shards: u32) -> HashMap<u32, String> {
    let mut client = client.clone();
    if shards <= 1 {
        let key = ax_scheduler_core::etcd_keys::leader(PREFIX);
        let Ok(resp) = client.get(key, None).await else {
            return HashMap::new();
        };
        return resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let v: serde_json::Value = serde_json::from_slice(kv.value()).ok()?;
                Some((0, v.get("instance_id")?.as_str()?.to_owned()))
            })
            .collect();
    }
    let mut found = HashMap::new();
    for shard in 0..shards {
        let key = ax_scheduler_core::etcd_keys::shard_owner(PREFIX, shard);
        if let Ok(resp) = client.get(key, None).await {
            if let Some(kv) = resp.kvs().first() {
                found.insert(shard, String::from_utf8_lossy(kv.value()).into_owned());
            }
        }
    }
    found
}

/// A task's shard, as the replicas compute it (`placement = "task"`).
fn shard_of(task: &str, shards: u32) -> u32 {
    let (namespace, id) = task.split_once('/').unwrap();
    ax_scheduler_core::placement::shard_of(&ax_scheduler_core::TaskKey::new(namespace, id), shards)
}

/// One marker task per shard (ids of the marker namespace found by trying): each shows when
/// its shard's owner has consumed the watch up to the last put.
fn marker_tasks(shards: u32) -> Vec<String> {
    let mut markers: Vec<Option<String>> = vec![None; shards as usize];
    let mut i = 0usize;
    while markers.iter().any(Option::is_none) {
        let task = format!("{MARKER_NAMESPACE}/m{i}");
        let slot = &mut markers[shard_of(&task, shards) as usize];
        if slot.is_none() {
            *slot = Some(task);
        }
        i += 1;
    }
    markers.into_iter().flatten().collect()
}

/// The memory mode with several scheduler replicas: each one's settled `VmRSS` over its own
/// baseline, beside the tasks it arms (those of the shards it owns). Every replica holds the
/// whole catalog, so `delta = tasks * held + armed * per_armed`; two replicas that arm
/// different shares solve it.
async fn sharded_memory(
    client: &Client,
    procs: &[Replica],
    baselines: &[u64],
    dues: &HashMap<String, i64>,
    shards: u32,
) {
    let tasks = dues.len();
    let owned = owners(client, shards).await;
    let mut armed: HashMap<&str, usize> = HashMap::new();
    for task in dues.keys() {
        if let Some(owner) = owned.get(&shard_of(task, shards)) {
            *armed.entry(owner.as_str()).or_default() += 1;
        }
    }
    let mut points = Vec::new();
    for (p, baseline) in procs.iter().zip(baselines) {
        if !p.kind.schedules() {
            continue;
        }
        let rss = settled_rss(p.pid()).await;
        let armed = armed.get(p.name.as_str()).copied().unwrap_or(0);
        let shards_owned = owned.values().filter(|o| **o == p.name).count();
        let delta = (rss.saturating_sub(*baseline) * 1024) as f64;
        println!(
            "memory {}: {shards_owned} of {shards} shards, {armed} of {tasks} tasks armed; VmRSS {:.1} MiB, {:.1} MiB before registration: {:.0} bytes per task held; VmHWM {:.1} MiB",
            p.name,
            rss as f64 / 1024.0,
            *baseline as f64 / 1024.0,
            delta / tasks as f64,
            status_kib(p.pid(), "VmHWM:") as f64 / 1024.0,
        );
        points.push((armed as f64, delta));
    }
    // The two replicas farthest apart in tasks armed give the line.
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let (Some(lo), Some(hi)) = (points.first(), points.last()) {
        if hi.0 - lo.0 >= tasks as f64 / 2.0 {
            let per_armed = (hi.1 - lo.1) / (hi.0 - lo.0);
            let held = (lo.1 - lo.0 * per_armed) / tasks as f64;
            println!(
                "memory: {held:.0} bytes per task held (catalog, every replica), {per_armed:.0} bytes more per task armed (its owner only)"
            );
        }
    }
}

/// Starts the replicas of `kinds` and waits until they schedule: every shard owned with even
/// shares (sharded), or the first replica leading; then until every replica is ready.
async fn start_replicas(
    kinds: &[(String, Kind)],
    dir: &Path,
    etcd_server: &EtcdServer,
    redis_server: &RedisServer,
    client: &Client,
    sharded: bool,
    shards: u32,
) -> Vec<Replica> {
    let procs: Vec<Replica> = kinds
        .iter()
        .map(|(name, kind)| {
            Replica::start(
                dir,
                name,
                *kind,
                &etcd_server.endpoint(),
                &redis_server.url(),
            )
        })
        .collect();
    let schedulers = procs.iter().filter(|p| p.kind.schedules()).count();
    if sharded {
        // Every shard owned, and the shares even: the map caps a replica at ⌈shards/n⌉, and a
        // joiner takes its share from the replicas that started first.
        let n = schedulers.min(shards as usize);
        let cap = (shards as usize).div_ceil(schedulers);
        wait_for("every shard owned", Duration::from_secs(120), async || {
            let owned = owners(client, shards).await;
            let mut per: HashMap<&str, usize> = HashMap::new();
            for owner in owned.values() {
                *per.entry(owner.as_str()).or_default() += 1;
            }
            owned.len() == shards as usize && per.len() == n && per.values().all(|c| *c <= cap)
        })
        .await;
    } else {
        let metrics_url = format!("{}/metrics", procs[0].http);
        wait_for("the leader", Duration::from_secs(60), async || {
            matches!(http_get(&metrics_url).await, Some((200, body)) if body.contains("\nscheduler_is_leader 1"))
        })
        .await;
    }
    for p in &procs {
        let url = format!("{}/readyz", p.http);
        wait_for("readiness", Duration::from_secs(120), async || {
            matches!(http_get(&url).await, Some((200, _)))
        })
        .await;
    }
    if sharded {
        let owned = owners(client, shards).await;
        let mut per: HashMap<&str, usize> = HashMap::new();
        for owner in owned.values() {
            *per.entry(owner.as_str()).or_default() += 1;
        }
        let mut per: Vec<_> = per.into_iter().collect();
        per.sort();
        println!("shard owners: {per:?}");
    }
    procs
}

/// The processes whose CPU time the report gives (the replicas, the bench, etcd, Redis),
/// with the kind each counts towards in the per-kind totals.
fn cpu_processes(
    procs: &[Replica],
    etcd_port: &str,
    redis_port: &str,
) -> (Vec<(String, u32)>, Vec<&'static str>) {
    let mut pids: Vec<(String, u32)> = procs.iter().map(|p| (p.name.clone(), p.pid())).collect();
    let mut kinds: Vec<&'static str> = procs
        .iter()
        .map(|p| match p.kind {
            Kind::Both => "replicas (both roles)",
            Kind::Scheduler => "schedulers",
            Kind::Worker => "workers",
        })
        .collect();
    pids.push(("bench".to_owned(), std::process::id()));
    kinds.push("bench");
    if let Some(pid) = find_pid("etcd", &format!(":{etcd_port}")) {
        pids.push(("etcd".to_owned(), pid));
        kinds.push("etcd");
    }
    if let Some(pid) = find_pid("redis-server", &format!(":{redis_port}")) {
        pids.push(("redis".to_owned(), pid));
        kinds.push("redis");
    }
    (pids, kinds)
}

/// Each process's CPU ticks over `span` while nothing fires, and the span in seconds.
async fn idle_cpu(pids: &[(String, u32)], span: Duration) -> (Vec<u64>, f64) {
    let before: Vec<u64> = pids.iter().map(|(_, p)| cpu_ticks(*p)).collect();
    let start = Instant::now();
    tokio::time::sleep(span).await;
    let ticks = pids
        .iter()
        .zip(&before)
        .map(|((_, p), before)| cpu_ticks(*p).saturating_sub(*before))
        .collect();
    (ticks, start.elapsed().as_secs_f64())
}

/// When `log` (JSON lines) first says `message`, in microseconds since the epoch.
fn first_line_at(log: &Path, message: &str) -> Option<i64> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        if v.get("message")?.as_str()? != message {
            return None;
        }
        let at = DateTime::parse_from_rfc3339(v.get("timestamp")?.as_str()?).ok()?;
        Some(at.timestamp_micros())
    })
}

/// `ms` (an instant minus the first due) in words.
fn against_first_due(ms: i64) -> String {
    if ms < 0 {
        format!("{} ms before the first due", -ms)
    } else {
        format!("{ms} ms after the first due")
    }
}

/// Estimates how long registering `tasks` keys takes from a few thousand written under a
/// prefix no replica watches, and returns the planned registration time: the estimate with a
/// margin for the watch and the arming to catch up (and for the replicas' start, preloaded).
async fn calibrate(
    client: &Client,
    tasks: usize,
    writers: usize,
    margin_ms: i64,
    preload: bool,
) -> i64 {
    let calib = tasks.clamp(1, 4096);
    let pairs: Vec<(String, String)> = (0..calib)
        .map(|i| {
            (
                format!("/axcalibrate/tasks/c/t{i:06}"),
                spec(now_ms() + 3_600_000),
            )
        })
        .collect();
    let t = Instant::now();
    write_all(client, Arc::new(pairs), writers).await;
    let calib_rate = calib as f64 / t.elapsed().as_secs_f64();
    client
        .clone()
        .delete("/axcalibrate/", Some(DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    let estimate_ms = (tasks as f64 / calib_rate * 1000.0) as i64;
    // The watch and the leader's arming run beside the writes and have to catch up after
    // them: a margin of half the estimate plus two seconds.
    let mut plan_ms = estimate_ms + estimate_ms / 2 + 2000 + margin_ms;
    if preload {
        // The replicas start after registration: allow for their start, the shares settling
        // and each term listing and arming its tasks.
        plan_ms += 8000 + (tasks / 10) as i64;
    }
    println!(
        "calibration: {calib} keys at {calib_rate:.0} keys/s; registration planned to end in {} ms",
        plan_ms
    );

    plan_ms
}

async fn run(setup: Setup) {
    let Setup {
        tasks,
        spread_ms,
        ref kinds,
        sharded,
        shards,
        writers,
        margin_ms,
        memory,
        preload,
        planned,
        offset_ms,
    } = setup;
    let replicas = kinds.len();
    let etcd_server = EtcdServer::start_with(&[
        "--quota-backend-bytes=8589934592",
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=1m",
    ]);
    let redis_server = RedisServer::start();
    let etcd_port = etcd_server
        .endpoint()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let redis_port = redis_server.url().rsplit(':').next().unwrap().to_owned();
    // Kept from the start with `AX_BENCH_KEEP`, so a run that fails leaves its logs too.
    let keep = std::env::var_os("AX_BENCH_KEEP").is_some();
    let tempdir = tempfile::tempdir().unwrap();
    let (dir, _cleanup) = if keep {
        let kept = tempdir.keep();
        println!("logs kept in {}", kept.display());
        (kept, None)
    } else {
        (tempdir.path().to_owned(), Some(tempdir))
    };
    let receiver = if http_mode() {
        Some(receiver::Receiver::start().await)
    } else {
        None
    };
    println!(
        "e2e: {tasks} one-shot {} tasks due over {} s, {} replica(s) ({}), {shards} shard(s), {writers} writers",
        if receiver.is_some() { "http" } else { "noop" },
        spread_ms / 1000,
        replicas,
        kinds
            .iter()
            .map(|(n, k)| format!("{n}: {}", k.roles()))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let client = Client::connect([etcd_server.endpoint()], None)
        .await
        .unwrap();
    let start = || {
        start_replicas(
            kinds,
            &dir,
            &etcd_server,
            &redis_server,
            &client,
            sharded,
            shards,
        )
    };
    // With the tasks preloaded, the replicas start once they are registered.
    let mut procs: Vec<Replica> = if preload { Vec::new() } else { start().await };
    let (mut pids, mut pid_kinds) = cpu_processes(&procs, &etcd_port, &redis_port);
    let idle_secs: u64 = if memory {
        0
    } else {
        env_or("AX_BENCH_IDLE_SECS", 5)
    };
    let (mut idle_ticks, mut idle_s) = if preload {
        (Vec::new(), 0.0)
    } else {
        idle_cpu(&pids, Duration::from_secs(idle_secs)).await
    };

    // Planned: the registration's end estimated from a calibration under a prefix no
    // replica watches. Otherwise the dues start the offset after the first write.
    let plan_ms = if planned {
        calibrate(&client, tasks, writers, margin_ms, preload).await
    } else {
        offset_ms
    };

    // Every replica's memory before registration (the memory mode's baseline).
    let baselines: Vec<u64> = procs
        .iter()
        .map(|p| status_kib(p.pid(), "VmRSS:"))
        .collect();
    let baseline_kib = baselines.first().copied().unwrap_or(0);
    let puts_at_register = etcd_metric(&etcd_server.endpoint(), "etcd_mvcc_put_total").await;
    let txns_at_register =
        etcd_metric(&etcd_server.endpoint(), "etcd_debugging_mvcc_txn_total").await;
    // Submission begins: registering during the window counts CPU from here.
    let cpu_at_register: Vec<u64> = pids.iter().map(|(_, p)| cpu_ticks(*p)).collect();
    let registration_begun = Instant::now();
    let register_start_ms = now_ms();
    let planned_end = register_start_ms + plan_ms;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut dues = HashMap::with_capacity(tasks);
    let pairs: Vec<(String, String)> = (0..tasks)
        .map(|i| {
            let due = planned_end + (rng.next_u64() % spread_ms as u64) as i64;
            let id = format!("t{i:06}");
            dues.insert(format!("{NAMESPACE}/{id}"), due);
            let value = match &receiver {
                _ if memory => http_spec(i),
                Some(r) => http_call_spec(due, &r.base, NAMESPACE, &id),
                None => spec(due),
            };
            (format!("{PREFIX}/tasks/{NAMESPACE}/{id}"), value)
        })
        .collect();
    let first_due = dues.values().copied().min().unwrap_or(planned_end);
    let t_register = Instant::now();
    let pairs = Arc::new(pairs);
    // Registering during the window: the writes run on while the bench watches the fires.
    let writes = (!planned).then(|| {
        let client = client.clone();
        let pairs = Arc::clone(&pairs);
        tokio::spawn(async move {
            write_all(&client, pairs, writers).await;
            (t_register.elapsed().as_millis() as i64, now_ms())
        })
    });
    let (mut register_ms, mut register_end_ms) = (0i64, 0i64);
    let (armed_ms, valid) = if !planned {
        (0, true)
    } else {
        write_all(&client, pairs, writers).await;
        register_ms = t_register.elapsed().as_millis() as i64;
        register_end_ms = now_ms();
        if preload {
            procs = start().await;
            (pids, pid_kinds) = cpu_processes(&procs, &etcd_port, &redis_port);
        }
        let leader = &procs[0];
        let marker_at = now_ms();
        // One transaction: every owner sees them at one revision, after the last batch.
        let markers = marker_tasks(shards);
        let ops: Vec<TxnOp> = markers
            .iter()
            .map(|m| {
                let (ns, id) = m.split_once('/').unwrap();
                let value = match &receiver {
                    Some(r) => http_call_spec(marker_at, &r.base, ns, id),
                    None => spec(marker_at),
                };
                TxnOp::put(format!("{PREFIX}/tasks/{m}"), value, None)
            })
            .collect();
        client.clone().txn(Txn::new().and_then(ops)).await.unwrap();

        // The markers' `enqueued` lines, from every scheduler replica's log: the owner of each
        // shard has consumed the watch up to the last put. Armed is the last of them.
        let mut tails: Vec<Tail> = procs
            .iter()
            .filter(|p| p.kind.schedules())
            .map(|p| Tail::open(&p.log))
            .collect();
        let mut marked: HashMap<String, i64> = HashMap::new();
        let armed_us = loop {
            // In the http mode the markers' calls (the replicas log at their default level,
            // where `enqueued` is not written).
            match &receiver {
                Some(r) => {
                    for (task, at) in r.arrivals() {
                        if markers.contains(&task) {
                            marked.entry(task).or_insert(at);
                        }
                    }
                }
                None => {
                    for tail in &mut tails {
                        for l in tail.lines() {
                            if !l.contains("\"enqueued\"") || !l.contains(MARKER_NAMESPACE) {
                                continue;
                            }
                            if let Some(p) = parse_line(&l) {
                                if markers.contains(&p.task) {
                                    marked.entry(p.task).or_insert(p.at_us);
                                }
                            }
                        }
                    }
                }
            }
            if marked.len() == markers.len() {
                break marked.values().copied().max().unwrap_or(0);
            }
            assert!(
                now_ms() < planned_end + spread_ms + 120_000,
                "{} of {} markers never enqueued",
                markers.len() - marked.len(),
                markers.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let armed_ms = armed_us / 1000;
        if preload {
            // What each process costs while nothing fires: every task armed, none due yet.
            let left = Duration::from_millis((first_due - now_ms() - 200).max(0) as u64);
            (idle_ticks, idle_s) = idle_cpu(&pids, left.min(Duration::from_secs(idle_secs))).await;
        }
        println!(
        "registered {tasks} keys in {register_ms} ms ({:.0} keys/s); armed {} ms after registration started ({} ms after it ended); first due {} ms after registration started",
        tasks as f64 / (register_ms as f64 / 1000.0),
        armed_ms - register_start_ms,
        armed_ms - register_end_ms,
        first_due - register_start_ms,
    );
        if memory {
            // Every task's state written, then settled: two readings 5 s apart within 1 %.
            let states = format!("{PREFIX}/state/{NAMESPACE}/");
            wait_for(
                "every state written",
                Duration::from_secs(600),
                async || {
                    let opts = GetOptions::new().with_prefix().with_count_only();
                    let resp = client
                        .clone()
                        .get(states.as_str(), Some(opts))
                        .await
                        .unwrap();
                    resp.count() as usize >= tasks
                },
            )
            .await;
            let endpoint = etcd_server.endpoint();
            let db_in_use = etcd_metric(&endpoint, "etcd_mvcc_db_total_size_in_use_in_bytes").await;
            let keys = etcd_metric(&endpoint, "etcd_debugging_mvcc_keys_total").await;
            // The audit records of the direct writes (see the header) share the database.
            let count = |prefix: String| {
                let mut client = client.clone();
                async move {
                    let opts = GetOptions::new().with_prefix().with_count_only();
                    client
                        .get(prefix, Some(opts))
                        .await
                        .map_or(0, |r| r.count())
                }
            };
            let value_len = |key: String| {
                let mut client = client.clone();
                async move {
                    client
                        .get(key, None)
                        .await
                        .ok()
                        .and_then(|r| r.kvs().first().map(|kv| kv.value().len()))
                        .unwrap_or(0)
                }
            };
            let audit = count(format!("{PREFIX}/audit/")).await;
            let spec_len = value_len(format!("{PREFIX}/tasks/{NAMESPACE}/t000000")).await;
            let state_len = value_len(format!("{PREFIX}/state/{NAMESPACE}/t000000")).await;
            println!(
            "memory: etcd database in use {:.1} MiB with {keys:.0} keys, {audit} of them audit records ({:.0} bytes per task, all of it counted); one spec {spec_len} bytes, one state {state_len} bytes",
            db_in_use / 1048576.0,
            db_in_use / tasks as f64
        );
            if sharded {
                sharded_memory(&client, &procs, &baselines, &dues, shards).await;
                return;
            }
            let rss = settled_rss(leader.pid()).await;
            println!(
            "memory: leader VmRSS {:.1} MiB with {tasks} tasks armed, {:.1} MiB before registration: {:.0} bytes per task; VmHWM {:.1} MiB",
            rss as f64 / 1024.0,
            baseline_kib as f64 / 1024.0,
            (rss.saturating_sub(baseline_kib) * 1024) as f64 / tasks as f64,
            status_kib(leader.pid(), "VmHWM:") as f64 / 1024.0,
        );
            // A leader that starts onto them: lists every task and loads every state.
            procs[0].child.kill().unwrap();
            procs[0].child.wait().unwrap();
            let fresh = Replica::start(
                &dir,
                "restarted",
                Kind::Scheduler,
                &etcd_server.endpoint(),
                &redis_server.url(),
            );
            let started = Instant::now();
            wait_for(
                "the restarted replica to arm",
                Duration::from_secs(600),
                async || first_line_at(&fresh.log, "scheduling").is_some(),
            )
            .await;
            let armed_s = started.elapsed().as_secs_f64();
            let lease_losses = std::fs::read_to_string(&fresh.log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("lease hold lost") || l.contains("could not take over"))
                .count();
            println!(
                "memory: the restarted replica lost a lease or a takeover {lease_losses} times"
            );
            let rss = settled_rss(fresh.pid()).await;
            println!(
            "memory: a replica started onto {tasks} tasks led and armed them in {armed_s:.1} s (lease TTL included); VmRSS {:.1} MiB ({:.0} bytes per task over the first leader's baseline), VmHWM {:.1} MiB",
            rss as f64 / 1024.0,
            (rss.saturating_sub(baseline_kib) * 1024) as f64 / tasks as f64,
            status_kib(fresh.pid(), "VmHWM:") as f64 / 1024.0,
        );
            procs.push(fresh);
            return;
        }
        if !sharded && replicas >= 3 {
            // Wait until the standby's catalog holds every task too (its memory is then the
            // leader's at N tasks), then kill the leader.
            let standby_metrics = format!("{}/metrics", procs[2].http);
            let killed_us = now_ms() * 1000;
            let killed = Instant::now();
            procs[0].child.kill().unwrap();
            procs[0].child.wait().unwrap();
            wait_for("the standby to lead", Duration::from_secs(120), async || {
            matches!(http_get(&standby_metrics).await, Some((200, body)) if body.contains("\nscheduler_is_leader 1"))
        })
        .await;
            let led_ms = killed.elapsed().as_millis();
            wait_for("the standby to arm", Duration::from_secs(300), async || {
                first_line_at(&procs[2].log, "scheduling").is_some()
            })
            .await;
            let armed_after = first_line_at(&procs[2].log, "scheduling").unwrap_or(0) - killed_us;
            println!(
            "takeover: the standby led {led_ms} ms after the leader was killed and had armed every task {} ms after the kill; VmRSS {:.1} MiB",
            armed_after / 1000,
            status_kib(procs[2].pid(), "VmRSS:") as f64 / 1024.0
        );
        }
        let valid = armed_ms < first_due;
        if !valid {
            println!(
            "WARNING: arming overlapped the firing window by {} ms; lateness includes arming (set AX_BENCH_MARGIN_SECS)",
            armed_ms - first_due
        );
        }
        (armed_ms, valid)
    };

    // CPU time over the firing window (planned), or from the first write (during the window).
    let (cpu_before, window_start, puts_before) = if planned {
        let wait_ms = (first_due - now_ms()).max(0) as u64;
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        let cpu_before: Vec<u64> = pids.iter().map(|(_, p)| cpu_ticks(*p)).collect();
        let window_start = Instant::now();
        let puts = etcd_metric(&etcd_server.endpoint(), "etcd_mvcc_put_total").await;
        (cpu_before, window_start, puts)
    } else {
        (cpu_at_register, registration_begun, puts_at_register)
    };

    // Wait for every start (or give up a minute after the last due), then a little longer so
    // that a duplicate would show.
    let mut tails: Vec<Tail> = procs
        .iter()
        .filter(|p| p.kind.works())
        .map(|r| Tail::open(&r.log))
        .collect();
    let mut started = 0usize;
    let last_due = planned_end + spread_ms;
    let mut cpu_after: Option<(Vec<u64>, f64)> = None;
    // CPU when the last execution started (or the call arrived): the work of every fire,
    // also when it ran past the window.
    let mut cpu_done: Option<Vec<u64>> = None;
    let mut done_s = 0.0f64;
    loop {
        for t in &mut tails {
            started += t
                .lines()
                .iter()
                .filter(|l| l.contains("\"started\"") && l.contains("\"bench/"))
                .count();
        }
        if let Some(r) = &receiver {
            // The calls are what counts: a start whose call never arrived is not done.
            started = r.count();
        }
        if cpu_after.is_none() && now_ms() >= last_due + 1000 {
            cpu_after = Some((
                pids.iter().map(|(_, p)| cpu_ticks(*p)).collect(),
                window_start.elapsed().as_secs_f64(),
            ));
        }
        if started >= tasks && cpu_done.is_none() {
            cpu_done = Some(pids.iter().map(|(_, p)| cpu_ticks(*p)).collect());
            done_s = window_start.elapsed().as_secs_f64();
        }
        if started >= tasks && cpu_after.is_some() {
            break;
        }
        if now_ms() > last_due + 60_000 {
            println!("WARNING: gave up waiting: {started} of {tasks} started");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(writes) = writes {
        (register_ms, register_end_ms) = writes.await.unwrap();
        println!(
            "registered {tasks} keys in {register_ms} ms ({:.0} keys/s) during the window: the last put {}",
            tasks as f64 / (register_ms as f64 / 1000.0),
            against_first_due(register_end_ms - first_due),
        );
    }
    // The states of the last fires are written at the next flush (500 ms by default).
    let puts = etcd_metric(&etcd_server.endpoint(), "etcd_mvcc_put_total").await - puts_before;
    let (audit, audit_settled_s) = settled_audit_records(&client).await;
    let registration = RegistrationWrites {
        puts: puts_before - puts_at_register,
        run_puts: etcd_metric(&etcd_server.endpoint(), "etcd_mvcc_put_total").await
            - puts_at_register,
        run_txns: etcd_metric(&etcd_server.endpoint(), "etcd_debugging_mvcc_txn_total").await
            - txns_at_register,
        audit,
        audit_settled_s,
    };
    let (cpu_after, window_s) = cpu_after.unwrap_or_else(|| {
        (
            pids.iter().map(|(_, p)| cpu_ticks(*p)).collect(),
            window_start.elapsed().as_secs_f64(),
        )
    });
    let memory: Vec<(String, u64, u64)> = procs
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                status_kib(p.pid(), "VmHWM:"),
                status_kib(p.pid(), "VmRSS:"),
            )
        })
        .collect();
    let log_paths: Vec<(String, PathBuf)> = procs
        .iter()
        .map(|p| (p.name.clone(), p.log.clone()))
        .collect();
    drop(procs);
    let redis_commands = redis_command_costs(&redis_server.url()).await;
    let history_size = history_stream_size(&redis_server.url()).await;

    // Analysis.
    let mut starts: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
    let mut enqueues: HashMap<String, i64> = HashMap::new();
    let mut enqueue_lateness = Vec::new();
    let mut retries = 0usize;
    let mut finished = 0usize;
    let mut log_lines = 0usize;
    for (_, path) in &log_paths {
        for line in BufReader::new(File::open(path).unwrap()).lines() {
            let line = line.unwrap();
            log_lines += 1;
            let Some(l) = parse_line(&line) else { continue };
            if !l.task.starts_with("bench/") {
                continue;
            }
            match l.message.as_str() {
                "enqueued" => {
                    enqueue_lateness.push(l.lateness_ms);
                    enqueues.insert(l.task, l.at_us);
                }
                "started" => {
                    if l.attempt > 0 {
                        retries += 1;
                    }
                    starts
                        .entry(l.task)
                        .or_default()
                        .push((l.lateness_ms, l.at_us));
                }
                _ => finished += 1,
            }
        }
    }
    let lost = dues.keys().filter(|k| !starts.contains_key(*k)).count();
    let duplicated = starts.values().filter(|s| s.len() > 1).count();
    let mut start_lateness: Vec<i64> = starts.values().map(|s| s[0].0).collect();
    // Lateness from the log timestamps (microseconds), independent of the engine's rounding.
    let mut start_lateness_us: Vec<i64> = starts
        .iter()
        .filter_map(|(k, s)| dues.get(k).map(|d| s[0].1 - d * 1000))
        .collect();
    let mut queue_wait: Vec<i64> = starts
        .iter()
        .filter_map(|(k, s)| enqueues.get(k).map(|e| (s[0].1 - e) / 1000))
        .collect();
    let first_start = starts.values().map(|s| s[0].1).min().unwrap_or(0);
    let last_start = starts.values().map(|s| s[0].1).max().unwrap_or(0);
    let mut per_second: HashMap<i64, usize> = HashMap::new();
    for s in starts.values() {
        *per_second.entry(s[0].1 / 1_000_000).or_default() += 1;
    }
    let peak_rate = per_second.values().copied().max().unwrap_or(0);
    let span_s = (last_start - first_start) as f64 / 1e6;

    println!();
    println!("## results");
    if planned {
        println!("tasks: {tasks}; replicas: {replicas}; valid (armed before first due): {valid}");
        println!(
            "register: {register_ms} ms ({:.0} keys/s); armed: {} ms after registration start",
            tasks as f64 / (register_ms as f64 / 1000.0),
            armed_ms - register_start_ms
        );
    } else {
        println!("tasks: {tasks}; replicas: {replicas}; registered during the window");
        println!(
            "register: {register_ms} ms ({:.0} keys/s), from {} ms before the first due; the last put {}",
            tasks as f64 / (register_ms as f64 / 1000.0),
            first_due - register_start_ms,
            against_first_due(register_end_ms - first_due)
        );
    }
    // The side-by-side summary's figures: executed/s, lateness p50 and p99 (ms), lost, twice.
    let mut outcome = (0.0f64, 0i64, 0i64, lost, duplicated);
    // The log lines these read are written in the `noop` mode only.
    if receiver.is_none() {
        println!("{}", summary("start lateness", &mut start_lateness));
        start_lateness_us.iter_mut().for_each(|v| *v /= 1000);
        println!(
            "{}",
            summary("start lateness (log timestamps)", &mut start_lateness_us)
        );
        outcome = (
            if span_s > 0.0 {
                starts.len() as f64 / span_s
            } else {
                0.0
            },
            percentile(&start_lateness_us, 50.0),
            percentile(&start_lateness_us, 99.0),
            lost,
            duplicated,
        );
        println!(
            "{}",
            summary("enqueue lateness (schedulers)", &mut enqueue_lateness)
        );
        println!(
            "{}",
            summary("queue wait (started - enqueued)", &mut queue_wait)
        );
        println!(
            "executions: {} started, {finished} finished, {retries} retries; lost {lost}; duplicated {duplicated}",
            starts.values().map(Vec::len).sum::<usize>()
        );
        println!(
            "throughput: {:.0} executions/s from first to last start ({span_s:.2} s), peak {peak_rate} in one second",
            if span_s > 0.0 { starts.len() as f64 / span_s } else { 0.0 }
        );
    }
    for (name, hwm, rss) in &memory {
        println!(
            "memory {name}: VmHWM {:.1} MiB, VmRSS at end {:.1} MiB",
            *hwm as f64 / 1024.0,
            *rss as f64 / 1024.0
        );
    }
    let hz = 100.0;
    for (i, (name, _)) in pids.iter().enumerate() {
        let ticks = cpu_after[i].saturating_sub(cpu_before[i]);
        println!(
            "cpu {name}: {:.0}% of one core over the firing window ({window_s:.1} s)",
            ticks as f64 / hz / window_s * 100.0
        );
    }
    // Per kind: over the window, and per 1 000 fires up to the later of the window's end
    // and the last start (every fire's work, also when it ran past the window).
    let done = cpu_done.as_ref().unwrap_or(&cpu_after);
    let mut seen_kinds: Vec<&str> = Vec::new();
    for kind in &pid_kinds {
        if !seen_kinds.contains(kind) {
            seen_kinds.push(kind);
        }
    }
    for kind in seen_kinds {
        let (mut window, mut all, mut count) = (0u64, 0u64, 0usize);
        for (i, k) in pid_kinds.iter().enumerate() {
            if *k == kind {
                window += cpu_after[i].saturating_sub(cpu_before[i]);
                all += cpu_after[i].max(done[i]).saturating_sub(cpu_before[i]);
                count += 1;
            }
        }
        let idle: u64 = (0..pids.len())
            .filter(|i| pid_kinds[*i] == kind)
            .map(|i| idle_ticks[i])
            .sum();
        // The idle rate over the same span, taken off: what the fires themselves cost.
        let all_s = all as f64 / hz;
        let idle_rate = idle as f64 / hz / idle_s.max(0.001);
        let span_s = window_s.max(done_s);
        let marginal = (all_s - idle_rate * span_s).max(0.0);
        println!(
            "cpu by kind, {kind} ({count}): {:.0}% of one core over the window, {:.1}% idle; {:.1} CPU-ms per 1 000 fires ({:.1} without the idle rate)",
            window as f64 / hz / window_s * 100.0,
            idle_rate * 100.0,
            all_s * 1000.0 / tasks as f64 * 1000.0,
            marginal * 1000.0 / tasks as f64 * 1000.0
        );
    }
    println!(
        "etcd writes from the first due to 3 s after the last start: {puts:.0} puts ({:.2} per fire; the window also takes the last registered tasks' first states)",
        puts / tasks as f64
    );
    registration.print(tasks);
    println!("log lines: {log_lines}");
    if let Some(r) = &receiver {
        let mut arrivals: HashMap<String, Vec<i64>> = HashMap::new();
        for (task, at) in r.arrivals() {
            arrivals.entry(task).or_default().push(at);
        }
        let lost = dues.keys().filter(|k| !arrivals.contains_key(*k)).count();
        let twice = arrivals.values().filter(|a| a.len() > 1).count();
        // Each measured call's due (ms) and lateness (ms, from its first arrival).
        let calls: Vec<(i64, i64)> = arrivals
            .iter()
            .filter_map(|(k, a)| dues.get(k).map(|d| (*d, (a[0] - d * 1000) / 1000)))
            .collect();
        let mut late_ms: Vec<i64> = calls.iter().map(|(_, late)| *late).collect();
        // The rate over the measured tasks' calls only: the marker task is due when the
        // registration ends, seconds before the first of them.
        let measured = || {
            arrivals
                .iter()
                .filter(|(k, _)| dues.contains_key(*k))
                .map(|(_, a)| a[0])
        };
        let first = measured().min().unwrap_or(0);
        let last = measured().max().unwrap_or(0);
        let span_s = (last - first) as f64 / 1e6;
        println!();
        println!("## http calls");
        println!("{}", summary("call lateness (arrival - due)", &mut late_ms));
        // Whether the tail is steady queueing or a few stalls: lateness by the second of the
        // due time, from the first measured due.
        let mut by_second: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let first_due = dues.values().min().copied().unwrap_or(0);
        for (due, late) in &calls {
            by_second
                .entry((due - first_due) / 1000)
                .or_default()
                .push(*late);
        }
        if let Ok(path) = std::env::var("AX_BENCH_LATENESS_CSV") {
            let mut csv = String::from("due_ms,lateness_ms,due_unix_ms\n");
            for (due, late) in &calls {
                let _ = writeln!(csv, "{},{late},{due}", due - first_due);
            }
            std::fs::write(path, csv).unwrap();
        }
        for (second, late) in &mut by_second {
            late.sort_unstable();
            println!(
                "  due in second {second:>3}: p50 {} ms, p99 {} ms, max {} ms (n = {})",
                percentile(late, 50.0),
                percentile(late, 99.0),
                late.last().copied().unwrap_or(0),
                late.len()
            );
        }
        let rate = if span_s > 0.0 {
            measured().count() as f64 / span_s
        } else {
            0.0
        };
        println!(
            "calls: {} of {tasks} arrived; lost {lost}; twice {twice}; {rate:.0} calls/s from first to last",
            arrivals.len(),
        );
        outcome = (
            rate,
            percentile(&late_ms, 50.0),
            percentile(&late_ms, 99.0),
            lost,
            twice,
        );
        let done = cpu_done.as_ref().unwrap_or(&cpu_after);
        let mut ours = 0u64;
        for (i, (name, _)) in pids.iter().enumerate() {
            if name != "bench" {
                ours += done[i].saturating_sub(cpu_before[i]);
            }
        }
        println!(
            "cpu per fire (ax + etcd + Redis from the {} to the last call): {:.0} µs",
            if planned { "first due" } else { "first write" },
            ours as f64 / hz * 1e6 / tasks as f64
        );
        let (entries, bytes) = history_size;
        println!(
            "execution history stream: {entries} entries, {bytes} bytes ({:.0} bytes per entry)",
            bytes as f64 / entries.max(1) as f64
        );
        println!("Redis time per fire by command (INFO commandstats, whole run):");
        let all_calls: u64 = redis_commands.iter().map(|(_, calls, _)| calls).sum();
        println!(
            "  every command: {:.2} calls per fire (a script call and each command it runs count one each)",
            all_calls as f64 / tasks as f64
        );
        let mut by_calls: Vec<_> = redis_commands.iter().collect();
        by_calls.sort_by_key(|c| std::cmp::Reverse(c.1));
        let busiest: Vec<String> = by_calls
            .iter()
            .take(24)
            .map(|(command, calls, _)| format!("{command} {:.2}", *calls as f64 / tasks as f64))
            .collect();
        println!("  calls per fire by command: {}", busiest.join(", "));
        for (command, calls, usec) in redis_commands.iter().take(16) {
            println!(
                "  {command}: {:.1} µs per fire ({:.2} calls per fire)",
                *usec as f64 / tasks as f64,
                *calls as f64 / tasks as f64
            );
        }
    }

    // The side-by-side summary: CPU per job by process from the start of the measure (the
    // first write, or the first due when planned) to the last start.
    let done = cpu_done.as_ref().unwrap_or(&cpu_after);
    let cpu_us: Vec<(String, f64)> = pids
        .iter()
        .enumerate()
        .filter(|(_, (name, _))| name != "bench")
        .map(|(i, (name, _))| {
            let name = if name == "replica" {
                "ax"
            } else {
                name.as_str()
            };
            let ticks = done[i].saturating_sub(cpu_before[i]);
            (name.to_owned(), ticks as f64 / hz * 1e6 / tasks as f64)
        })
        .collect();
    let (executed_per_s, p50_ms, p99_ms, lost, twice) = outcome;
    let default_concurrency = if receiver.is_some() { 200 } else { 64 };
    peer::Summary {
        side: if planned { "ax (planned)" } else { "ax" }.to_owned(),
        handler: if receiver.is_some() { "http" } else { "noop" }.to_owned(),
        concurrency: env_or("AX_WORKER_CONCURRENCY", default_concurrency),
        jobs: tasks,
        executed_per_s,
        p50_ms,
        p99_ms,
        lost,
        twice,
        cpu_us,
    }
    .record();
    assert!(lost == 0, "ax lost {lost} of {tasks} tasks");
}
