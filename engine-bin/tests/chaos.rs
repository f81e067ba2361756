//! The chaos suite: real etcd, Redis and `ax serve` processes, one fault at a time, under a
//! workload whose executions a local receiver records. Run by `scripts/chaos.sh` (the tests
//! are not part of a plain `cargo test`: the target has `test = false`, and the script runs
//! it and prints their lines).
//!
//! The workload of every scenario: one-shot tasks due before, during and after the fault,
//! and a periodic task (`every: 1s`, misfire `skip`, overlap `allow`). After the fault each
//! scenario checks that every replica it did not kill still runs, every one-shot ran exactly
//! once (or, where the fault destroys queued work, that what was lost is what ax reported),
//! no execution id ran twice except where at-least-once delivery allows it (a worker killed
//! mid-execution), no periodic slot ran twice, the periodic task runs again, and the alert a
//! person would need was sent. Each prints one line, `chaos: NAME: ...`, with its figures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

#[path = "chaos/faults.rs"]
mod faults;

#[path = "chaos/repair.rs"]
mod repair;
#[path = "chaos/topology.rs"]
mod topology;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use harness::{
    counts, http_task, now_ms, rfc3339, wait_until, Cluster, Figures, Roles, Workload, SERIAL,
};
use serde_json::{json, Value};

/// The scenario's workload: `n` one-shots in namespace `chaos` on the default queue, due
/// evenly over `span` from `start`, and the periodic task.
async fn workload(c: &Cluster, n: usize, start: i64, span: Duration) -> Workload {
    Workload::start(c, "chaos", &["default"], n, start, span).await
}

fn report(name: &str, f: &Figures, extra: &str) {
    println!(
        "chaos: {name}: lost {}, duplicated {}, repeated executions {}, periodic slots twice {}; {extra}",
        f.lost, f.duplicated, f.repeated_ids, f.tick_slots_twice
    );
}

/// Three scheduler-only replicas and one worker, for scenarios that kill a leader: what they
/// measure is the hand-over of firing, not the redelivery of what a killed worker held
/// (that waits for the visibility timeout, and has its own scenario).
async fn three_schedulers_and_a_worker(c: &mut Cluster) -> String {
    for id in ["s1", "s2", "s3"] {
        c.start_replica(id, Roles::Scheduler).await;
    }
    c.start_replica("w1", Roles::Worker).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await
}

async fn three_replicas(c: &mut Cluster) -> String {
    for id in ["r1", "r2", "r3"] {
        c.start_replica(id, Roles::Both).await;
    }
    c.wait_for_leader(None, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_twice() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-kill2").await;
    let first = three_schedulers_and_a_worker(&mut c).await;
    let w = workload(&c, 60, now_ms() + 1500, Duration::from_secs(12)).await;
    let mut failovers = Vec::new();
    let mut leader = first;
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let killed_at = now_ms();
        c.replica(&leader).kill();
        let next = c
            .wait_for_leader(Some(&leader), Duration::from_secs(10))
            .await;
        failovers.push(now_ms() - killed_at);
        leader = next;
    }
    let f = w.settle(&c, Duration::from_secs(15), now_ms()).await;
    report(
        "leader SIGKILL twice",
        &f,
        &format!(
            "failover {} ms and {} ms (lease TTL 2 s)",
            failovers[0], failovers[1]
        ),
    );
    f.assert_clean("leader SIGKILL twice");
    assert!(c.replica(&leader).is_running());
    assert!(
        failovers.iter().all(|ms| *ms <= 3000),
        "failover within TTL + 1 s: {failovers:?}"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigstop_past_the_ttl() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-stop").await;
    let leader = three_replicas(&mut c).await;
    let w = workload(&c, 40, now_ms() + 1500, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = c.replica(&leader).pid().unwrap();
    ax_testkit::signal(pid, "STOP");
    let stopped_at = now_ms();
    let next = c
        .wait_for_leader(Some(&leader), Duration::from_secs(10))
        .await;
    let failover = now_ms() - stopped_at;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ax_testkit::signal(pid, "CONT");
    let f = w.settle(&c, Duration::from_secs(15), now_ms()).await;
    report(
        "leader SIGSTOP past the TTL, then SIGCONT",
        &f,
        &format!(
            "{next} leads {failover} ms after the stop; the old leader resumed without acting"
        ),
    );
    f.assert_clean("leader SIGSTOP");
    c.assert_running(&["r1", "r2", "r3"]);
    assert_eq!(c.leader().await.as_deref(), Some(next.as_str()));
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_sigkill_mid_execution() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-worker").await;
    c.start_replica("s1", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.receiver.slow_task("slow", Duration::from_secs(8));
    c.put_task(
        "chaos",
        "slow",
        &http_task(&c, json!({ "at": rfc3339(now_ms() + 500) }), "default"),
    )
    .await;
    wait_until(Duration::from_secs(5), "the slow execution started", || {
        let n = c.receiver.executions_of("slow").len();
        async move { n == 1 }
    })
    .await;
    c.replica("w1").kill();
    let killed_at = now_ms();
    c.start_replica("w2", Roles::Worker).await;
    wait_until(Duration::from_secs(45), "redelivered to w2", || {
        let n = c.receiver.executions_of("slow").len();
        async move { n == 2 }
    })
    .await;
    let redelivery = now_ms() - killed_at;
    let runs = c.receiver.executions_of("slow");
    println!(
        "chaos: worker SIGKILL mid-execution: redelivered after {redelivery} ms (default visibility timeout 30 s), same execution id {}, attempt {}",
        runs[0].execution_id == runs[1].execution_id,
        runs[1].attempt
    );
    assert_eq!(
        runs[0].execution_id, runs[1].execution_id,
        "a receiver can drop the repeat"
    );
    assert!(redelivery <= 32_000, "redelivered after {redelivery} ms");
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_sigkill_and_restart() {
    let _serial = SERIAL.lock().await;
    let mut etcd = ax_testkit::EtcdServer::start();
    let mut c = Cluster::on("chaos-etcd-kill", etcd.endpoint(), ax_testkit::redis_url()).await;
    let leader = three_replicas(&mut c).await;
    let w = workload(&c, 40, now_ms() + 1500, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    etcd.kill();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let restarted = now_ms();
    etcd.restart();
    let again = c.wait_for_leader(None, Duration::from_secs(15)).await;
    let recovery = now_ms() - restarted;
    let f = w.settle(&c, Duration::from_secs(15), now_ms()).await;
    report(
        "etcd SIGKILL, restarted after 5 s",
        &f,
        &format!("leader before {leader}, after {again}, {recovery} ms after the restart"),
    );
    f.assert_clean("etcd SIGKILL");
    c.assert_running(&["r1", "r2", "r3"]);
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_sigstop() {
    let _serial = SERIAL.lock().await;
    let etcd = ax_testkit::EtcdServer::start();
    let mut c = Cluster::on("chaos-etcd-stop", etcd.endpoint(), ax_testkit::redis_url()).await;
    three_replicas(&mut c).await;
    let w = workload(&c, 40, now_ms() + 1500, Duration::from_secs(12)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = etcd.pid().unwrap();
    ax_testkit::signal(pid, "STOP");
    tokio::time::sleep(Duration::from_secs(10)).await;
    ax_testkit::signal(pid, "CONT");
    let resumed = now_ms();
    let f = w.settle(&c, Duration::from_secs(20), resumed).await;
    report(
        "etcd SIGSTOP 10 s",
        &f,
        "fires missed while no lease held ran after",
    );
    f.assert_clean("etcd SIGSTOP");
    c.assert_running(&["r1", "r2", "r3"]);
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sigkill_and_restart_with_aof() {
    let _serial = SERIAL.lock().await;
    let mut redis = ax_testkit::RedisServer::start_with_aof();
    let mut c = Cluster::on("chaos-redis-aof", ax_testkit::etcd_endpoint(), redis.url()).await;
    three_replicas(&mut c).await;
    let w = workload(&c, 40, now_ms() + 1500, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.restart();
    let restarted = now_ms();
    let f = w.settle(&c, Duration::from_secs(15), restarted).await;
    report("Redis SIGKILL with AOF, restarted after 3 s", &f, "");
    f.assert_clean("Redis SIGKILL with AOF");
    c.assert_running(&["r1", "r2", "r3"]);
    assert!(
        c.receiver.has_alert("backend_restarted"),
        "no backend_restarted alert"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sigkill_and_restart_without_persistence() {
    let _serial = SERIAL.lock().await;
    let mut redis = ax_testkit::RedisServer::start();
    let mut c = Cluster::on("chaos-redis-mem", ax_testkit::etcd_endpoint(), redis.url()).await;
    three_replicas(&mut c).await;
    // Everything queued when Redis dies is gone with it; one-shots due later still run.
    let w = workload(&c, 40, now_ms() + 6000, Duration::from_secs(8)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.restart();
    let restarted = now_ms();
    let f = w.settle(&c, Duration::from_secs(15), restarted).await;
    report(
        "Redis SIGKILL without persistence, restarted after 1 s",
        &f,
        "nothing was queued at the kill, so nothing was lost; ax warned at start (scheduler_redis_config_warnings)",
    );
    f.assert_clean("Redis SIGKILL without persistence");
    assert!(
        c.receiver.has_alert("backend_restarted"),
        "no backend_restarted alert"
    );
    assert_eq!(
        c.metric("r1", "scheduler_redis_config_warnings").await,
        Some(1.0)
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_in_a_ready_list() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-garbage").await;
    three_replicas(&mut c).await;
    let client = redis::Client::open(c.redis_url.clone()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let ready = format!("{{{}:q:default}}:ready", c.redis_prefix);
    for garbage in ["not json", "{}", r#"{"execution_id":"x"}"#] {
        let _: () = redis::cmd("LPUSH")
            .arg(&ready)
            .arg(garbage)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let w = workload(&c, 20, now_ms() + 1000, Duration::from_secs(5)).await;
    let f = w.settle(&c, Duration::from_secs(10), now_ms()).await;
    report(
        "garbage pushed into a ready list",
        &f,
        "the workers moved it to the dead-letter queue",
    );
    f.assert_clean("garbage in a ready list");
    c.assert_running(&["r1", "r2", "r3"]);
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_forbid_task() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-forbid").await;
    three_replicas(&mut c).await;
    c.receiver.slow_task("long", Duration::from_secs(5));
    let mut long = http_task(&c, json!({ "every": "1s" }), "default");
    long["overlap"] = json!("forbid");
    c.put_task("chaos", "long", &long).await;
    tokio::time::sleep(Duration::from_secs(16)).await;
    let runs = c.receiver.executions_of("long");
    let state = c.state("chaos", "long").await.unwrap();
    let fires = state["fire_count"].as_u64().unwrap();
    // Each run takes 5 s; one fire is held while it runs and goes as soon as it ends.
    println!(
        "chaos: long-running forbid task: {} runs and fire_count {fires} in 16 s of a 1 s schedule with 5 s runs",
        runs.len()
    );
    assert!((2..=4).contains(&runs.len()), "{} runs", runs.len());
    assert!(fires <= 17, "fire_count {fires}: held fires multiplied");
    let mut starts: Vec<i64> = runs.iter().map(|r| r.arrived_at).collect();
    starts.sort_unstable();
    for pair in starts.windows(2) {
        assert!(pair[1] - pair[0] >= 4_900, "runs overlapped: {starts:?}");
    }
    c.clean_up().await;
}

async fn redis_cmd(url: &str, args: &[&str]) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(&mut conn).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_turned_read_only_by_a_failover() {
    let _serial = SERIAL.lock().await;
    // ax talks to `a`; `b` replicates it. The fault: `b` is promoted and `a` demoted to its
    // replica (READONLY to every write ax sends) for 8 s, then `a` is made primary again.
    let a = ax_testkit::RedisServer::start();
    let b = ax_testkit::RedisServer::start();
    let a_port = a.url().rsplit(':').next().unwrap().to_owned();
    let b_port = b.url().rsplit(':').next().unwrap().to_owned();
    redis_cmd(&b.url(), &["REPLICAOF", "127.0.0.1", &a_port]).await;
    let mut c = Cluster::on("chaos-readonly", ax_testkit::etcd_endpoint(), a.url()).await;
    three_replicas(&mut c).await;
    let w = workload(&c, 40, now_ms() + 1500, Duration::from_secs(12)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis_cmd(&b.url(), &["REPLICAOF", "NO", "ONE"]).await;
    redis_cmd(&a.url(), &["REPLICAOF", "127.0.0.1", &b_port]).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    c.assert_running(&["r1", "r2", "r3"]);
    redis_cmd(&a.url(), &["REPLICAOF", "NO", "ONE"]).await;
    let f = w.settle(&c, Duration::from_secs(20), now_ms()).await;
    report(
        "Redis read-only for 8 s (REPLICAOF, as after a failover)",
        &f,
        "enqueues retried through READONLY",
    );
    f.assert_clean("Redis read-only");
    assert!(
        c.receiver.has_alert("backend_unavailable"),
        "no backend_unavailable alert"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_with_the_default_lease_ttl() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-ttl10").await;
    c.env.push(("AX_LEASE_TTL", "10s".to_owned()));
    let leader = three_schedulers_and_a_worker(&mut c).await;
    // Settle into the lease's keep-alive rhythm, then kill the leader.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w = workload(&c, 30, now_ms() + 1000, Duration::from_secs(15)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed_at = now_ms();
    c.replica(&leader).kill();
    let next = c
        .wait_for_leader(Some(&leader), Duration::from_secs(15))
        .await;
    let failover = now_ms() - killed_at;
    // The first fire of the new leader: the earliest execution after the takeover whose
    // due time came after the kill.
    let f = w.settle(&c, Duration::from_secs(15), now_ms()).await;
    let first_after = c
        .receiver
        .executions()
        .iter()
        .filter(|r| r.arrived_at > killed_at + failover)
        .map(|r| r.arrived_at - killed_at)
        .min()
        .unwrap_or(-1);
    report(
        "leader SIGKILL with lease TTL 10 s",
        &f,
        &format!("{next} leads {failover} ms after the kill; its first fire reached the receiver {first_after} ms after the kill"),
    );
    f.assert_clean("leader SIGKILL, TTL 10 s");
    assert!(
        failover <= 11_000,
        "failover {failover} ms, above TTL + 1 s"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_stopped_within_the_lease_does_not_delay_fires() {
    let _serial = SERIAL.lock().await;
    // etcd stops for 4 s, well inside the 10 s lease: the leader keeps leading, and fires
    // that Redis can take must not wait for the state writes etcd cannot take. Flushing
    // every 10 ms fills the flusher's queue within a second of the stop.
    let etcd = ax_testkit::EtcdServer::start();
    let mut c = Cluster::on("chaos-etcd-slow", etcd.endpoint(), ax_testkit::redis_url()).await;
    c.env.push(("AX_LEASE_TTL", "10s".to_owned()));
    c.env.push(("AX_FLUSH_INTERVAL", "10ms".to_owned()));
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    // State churn: 200 tasks firing every second keep a state change waiting at every flush.
    let churn: Vec<(String, String, Value)> = (0..200)
        .map(|i| {
            (
                "churn".to_owned(),
                format!("c{i:03}"),
                json!({ "handler": "noop", "schedule": { "every": "1s" }, "overlap": "allow" }),
            )
        })
        .collect();
    c.put_tasks(&churn).await;
    let start = now_ms() + 3000;
    let w = workload(&c, 20, start, Duration::from_secs(4)).await;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(start - 500 - now_ms()).unwrap_or(0),
    ))
    .await;
    let pid = etcd.pid().unwrap();
    ax_testkit::signal(pid, "STOP");
    tokio::time::sleep(Duration::from_secs(4)).await;
    ax_testkit::signal(pid, "CONT");
    let f = w.settle(&c, Duration::from_secs(10), now_ms()).await;
    let worst = c
        .receiver
        .executions()
        .iter()
        .filter(|r| r.task_id.starts_with('o'))
        .map(|r| r.arrived_at - r.fire_at)
        .max()
        .unwrap_or(0);
    report(
        "etcd stopped 4 s inside the lease",
        &f,
        &format!("worst lateness of the one-shots due meanwhile {worst} ms"),
    );
    f.assert_clean("etcd stopped inside the lease");
    assert!(
        worst < 1500,
        "fires waited for etcd: worst lateness {worst} ms"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_clock_steps_forward() {
    let _serial = SERIAL.lock().await;
    // The leader's wall clock jumps 10 minutes ahead (an NTP step, a VM resumed), its
    // monotonic clock not: every timer comes due at once. The fires missed follow each
    // task's misfire policy, as at a takeover, instead of all 600 slots running.
    let clock = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(clock.path(), "+0\n").unwrap();
    let mut c = Cluster::new("chaos-clock").await;
    c.env.push((
        "LD_PRELOAD",
        ax_testkit::libfaketime().display().to_string(),
    ));
    c.env.push((
        "FAKETIME_TIMESTAMP_FILE",
        clock.path().display().to_string(),
    ));
    c.env.push(("FAKETIME_NO_CACHE", "1".to_owned()));
    c.env.push(("DONT_FAKE_MONOTONIC", "1".to_owned()));
    // The leader's watch on its clock would give the key up (the step is far past
    // `max_clock_skew`), and this lone replica would stand by: what is tested here is how
    // a term treats the stall a forward step makes, so the check is made to tolerate it.
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[scheduler]\nmax_clock_skew = \"1h\"\n").unwrap();
    c.env
        .push(("AX_CONFIG", config.path().display().to_string()));
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    for (id, misfire) in [("skip", "skip"), ("once", "fire_once")] {
        let mut t = http_task(&c, json!({ "every": "1s" }), "default");
        t["misfire"] = json!(misfire);
        t["overlap"] = json!("allow");
        c.put_task("chaos", id, &t).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stepped_at = now_ms();
    std::fs::write(clock.path(), "+600\n").unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let runs = c.receiver.executions();
    // Slots inside the skipped ten minutes (by the stepped clock) that ran.
    let gap = |id: &str| {
        runs.iter()
            .filter(|r| r.task_id == id)
            .filter(|r| r.fire_at > stepped_at + 1_000 && r.fire_at < stepped_at + 599_000)
            .count()
    };
    let mut slots: HashMap<(&str, i64), usize> = HashMap::new();
    for r in &runs {
        *slots.entry((r.task_id.as_str(), r.fire_at)).or_default() += 1;
    }
    println!(
        "chaos: the leader's clock steps 10 min forward: skip ran {} of the 600 missed slots, fire_once {}; no slot twice: {}",
        gap("skip"),
        gap("once"),
        slots.values().all(|n| *n == 1)
    );
    assert!(c.replica("r1").is_running());
    assert_eq!(gap("skip"), 0, "skip ran missed slots");
    assert!(
        gap("once") <= 1,
        "fire_once ran {} missed slots",
        gap("once")
    );
    assert!(slots.values().all(|n| *n == 1), "a slot ran twice");
    let after = runs
        .iter()
        .filter(|r| r.task_id == "skip" && r.fire_at >= stepped_at + 599_000)
        .count();
    assert!(after > 0, "the schedule goes on from the new time");
    assert!(
        c.receiver.has_alert("misfire_skipped"),
        "no misfire_skipped alert"
    );
    c.clean_up().await;
}

/// The leader reads the workers' events and is killed before it writes what they changed (its
/// flush interval is a minute here, so it writes nothing it heard). Its successor must apply
/// them: every task's state then counts what really ran, not only what ran after the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_before_it_writes_what_it_heard() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-unwritten").await;
    c.env.push(("AX_FLUSH_INTERVAL", "60s".to_owned()));
    c.start_replica("s1", Roles::Scheduler).await;
    let leader = c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.env.clear();
    c.start_replica("s2", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;
    let w = workload(&c, 10, now_ms() + 1000, Duration::from_secs(3)).await;
    wait_until(Duration::from_secs(15), "every one-shot ran", || {
        let n = counts(&c.receiver.executions());
        let done = w.one_shots.iter().all(|id| n.contains_key(id))
            && n.get("tick").is_some_and(|k| *k >= 5);
        async move { done }
    })
    .await;
    // Long enough for the leader to read the last ends (every 100 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ticks_before = c.receiver.executions_of("tick").len();
    let killed_at = now_ms();
    c.replica(&leader).kill();
    let next = c
        .wait_for_leader(Some(&leader), Duration::from_secs(10))
        .await;
    let f = w.settle(&c, Duration::from_secs(10), now_ms()).await;
    f.assert_clean("leader SIGKILL before writing");
    // Every one-shot's state: ran once, succeeded.
    let mut wrong = Vec::new();
    wait_until(Duration::from_secs(10), "one-shot states written", || {
        let c = &c;
        let ids = w.one_shots.clone();
        async move {
            for id in &ids {
                match c.state("chaos", id).await {
                    Some(s) if s["status"] == "SUCCESS" => {}
                    _ => return false,
                }
            }
            true
        }
    })
    .await;
    for id in &w.one_shots {
        let s = c.state("chaos", id).await.unwrap();
        if s["success_count"] != 1 || s["failure_count"] != 0 {
            wrong.push(format!("{id}: {s}"));
        }
    }
    // The periodic task counts every execution: those the dead leader heard included. Its
    // routine runs are written together, so its state trails the receiver by at most
    // `scheduler.routine_state_delay` (10 s) and one flush.
    let (mut counted, mut ran_before_read, mut ran_after_read);
    let since = Instant::now();
    loop {
        ran_before_read = c.receiver.executions_of("tick").len();
        let tick = c.state("chaos", "tick").await.unwrap();
        ran_after_read = c.receiver.executions_of("tick").len();
        counted = usize::try_from(tick["success_count"].as_u64().unwrap()).unwrap();
        if counted + 1 >= ran_before_read || since.elapsed() > Duration::from_secs(12) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    report(
        "leader SIGKILL before it writes what it heard",
        &f,
        &format!(
            "{next} leads; the periodic task ran {ticks_before} times before the kill, its state counts {counted} of {ran_before_read}..{ran_after_read}; one-shot states wrong: {}",
            wrong.len()
        ),
    );
    assert!(wrong.is_empty(), "one-shot states: {wrong:?}");
    assert!(
        counted + 1 >= ran_before_read && counted <= ran_after_read,
        "the periodic task's state counts {counted} successes, it ran {ran_before_read}..{ran_after_read} times ({ticks_before} before the kill at {killed_at})"
    );
    c.clean_up().await;
}

/// A replica started onto tens of thousands of tasks lists them, campaigns and arms them all
/// (seconds of parsing and arming): it must keep answering its leases meanwhile. It used to
/// lose its registration lease while it parsed the listing and the leadership lease while it
/// armed, then campaign again, over and over, and fire nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_onto_many_tasks_keeps_its_leases() {
    const TASKS: usize = 50_000;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-many").await;
    let quiet = json!({"handler": "http", "schedule": {"every": "1h"},
        "http": {"url": c.receiver.exec_url()}});
    let tasks: Vec<(String, String, Value)> = (0..TASKS)
        .map(|i| ("bulk".to_owned(), format!("t{i:06}"), quiet.clone()))
        .collect();
    c.put_tasks(&tasks).await;
    let started = Instant::now();
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(60)).await;
    // A one-shot written once it leads: it fires only when the takeover is done.
    let due = now_ms() + 1000;
    c.put_task(
        "probe",
        "once",
        &http_task(&c, json!({"at": rfc3339(due)}), "default"),
    )
    .await;
    wait_until(Duration::from_secs(120), "the probe fired", || {
        let fired = !c.receiver.executions_of("once").is_empty();
        async move { fired }
    })
    .await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = c.replica("r1").log_text();
    let lost: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("lease hold lost") || l.contains("could not take over"))
        .collect();
    println!(
        "chaos: started onto {TASKS} tasks: led and fired after {:.1} s; leases lost {}",
        took.as_secs_f64(),
        lost.len()
    );
    assert!(lost.is_empty(), "leases lost while starting: {lost:#?}");
    assert_eq!(c.receiver.executions_of("once").len(), 1);
    c.assert_running(&["r1"]);
    c.clean_up().await;
}

/// Shards of the sharded scenarios: several per replica, so a loss or a join moves some.
const SHARDS: u32 = 16;

/// Three scheduler-only replicas sharing [`SHARDS`] shards and one worker; returns once
/// every shard has an owner.
async fn three_shard_owners_and_a_worker(c: &mut Cluster) {
    c.env.push(("AX_SHARDS", SHARDS.to_string()));
    for id in ["s1", "s2", "s3"] {
        c.start_replica(id, Roles::Scheduler).await;
    }
    c.start_replica("w1", Roles::Worker).await;
    c.wait_for_shards(SHARDS, &["s1", "s2", "s3"], Duration::from_secs(20))
        .await;
}

/// The replica owning the most shards, and how many it owns.
async fn busiest_owner(c: &Cluster) -> (String, usize) {
    let mut loads: HashMap<String, usize> = HashMap::new();
    for owner in c.shard_owners().await.into_values() {
        *loads.entry(owner).or_default() += 1;
    }
    loads.into_iter().max_by_key(|(_, n)| *n).unwrap()
}

/// Waits until no shard is owned by `gone` and every shard is owned; returns how long it
/// took from `since`.
async fn shards_moved_off(c: &Cluster, gone: &str, since: i64) -> i64 {
    wait_until(
        Duration::from_secs(15),
        "shards moved to live replicas",
        || async {
            let owners = c.shard_owners().await;
            owners.len() == SHARDS as usize && owners.values().all(|o| o != gone)
        },
    )
    .await;
    now_ms() - since
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_owner_sigkill() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-shard-kill").await;
    three_shard_owners_and_a_worker(&mut c).await;
    let w = workload(&c, 60, now_ms() + 1500, Duration::from_secs(12)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (victim, held) = busiest_owner(&c).await;
    let killed_at = now_ms();
    c.replica(&victim).kill();
    let moved = shards_moved_off(&c, &victim, killed_at).await;
    let f = w.settle(&c, Duration::from_secs(15), now_ms()).await;
    // A run-now request is taken by its task's shard owner, once.
    let before = c.receiver.executions_of("o007").len();
    c.ax_ok(&["task", "trigger", "chaos/o007"]).await;
    wait_until(Duration::from_secs(5), "the run-now ran", || {
        let ran = c.receiver.executions_of("o007").len() > before;
        async move { ran }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    report(
        "shard owner SIGKILL (16 shards, 3 schedulers)",
        &f,
        &format!("{victim} held {held} shards; all moved within {moved} ms (lease TTL 2 s); a run-now after it ran once"),
    );
    f.assert_clean("shard owner SIGKILL");
    assert_eq!(c.receiver.executions_of("o007").len(), before + 1);
    assert!(moved <= 3000, "shards move within TTL + 1 s: {moved} ms");
    let live: Vec<&str> = ["s1", "s2", "s3"]
        .into_iter()
        .filter(|id| *id != victim)
        .collect();
    c.assert_running(&live);
    // What operators see: the map in `ax status`, the shards each replica schedules.
    let status = c.ax_ok(&["status"]).await;
    assert!(status.contains("shards: 16 (16 owned)"), "{status}");
    // The killed owner owns no shard and is shown gone, not dropped from the list.
    assert!(
        status
            .lines()
            .any(|l| l.starts_with(&format!("{victim} ")) && l.contains("gone")),
        "{status}"
    );
    assert!(
        !status
            .lines()
            .skip_while(|l| !l.starts_with("OWNER"))
            .any(|l| l.starts_with(&format!("{victim} "))),
        "{status}"
    );
    let mut owned = 0.0;
    for id in &live {
        owned += c.metric(id, "scheduler_shards_owned").await.unwrap();
    }
    assert_eq!(
        owned,
        f64::from(SHARDS),
        "scheduler_shards_owned over the live replicas"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_owner_sigstop_past_the_ttl() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-shard-stop").await;
    three_shard_owners_and_a_worker(&mut c).await;
    let w = workload(&c, 40, now_ms() + 1500, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (victim, held) = busiest_owner(&c).await;
    let pid = c.replica(&victim).pid().unwrap();
    ax_testkit::signal(pid, "STOP");
    let stopped_at = now_ms();
    let moved = shards_moved_off(&c, &victim, stopped_at).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ax_testkit::signal(pid, "CONT");
    let f = w.settle(&c, Duration::from_secs(15), now_ms()).await;
    // The resumed replica joins again and gets its share back by handovers.
    let owners = c
        .wait_for_shards(SHARDS, &[], Duration::from_secs(20))
        .await;
    wait_until(
        Duration::from_secs(20),
        "the resumed replica owns shards again",
        || async { c.shard_owners().await.values().any(|o| *o == victim) },
    )
    .await;
    let g = w.settle(&c, Duration::from_secs(5), now_ms()).await;
    report(
        "shard owner SIGSTOP past the TTL, then SIGCONT",
        &g,
        &format!(
            "{victim} held {held} shards; moved within {moved} ms; resumed without acting, then owned shards again ({} owners)",
            owners.len()
        ),
    );
    f.assert_clean("shard owner SIGSTOP");
    g.assert_clean("shard owner SIGSTOP, after its return");
    assert!(moved <= 3000, "shards move within TTL + 1 s: {moved} ms");
    c.assert_running(&["s1", "s2", "s3"]);
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_joining_under_load_takes_its_share() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-shard-join").await;
    three_shard_owners_and_a_worker(&mut c).await;
    let w = workload(&c, 60, now_ms() + 1500, Duration::from_secs(12)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let started = now_ms();
    c.start_replica("s4", Roles::Scheduler).await;
    let share = (SHARDS / 4) as usize;
    wait_until(
        Duration::from_secs(20),
        "the new replica owns its share",
        || async {
            let owners = c.shard_owners().await;
            owners.len() == SHARDS as usize
                && owners.values().filter(|o| *o == "s4").count() >= share
        },
    )
    .await;
    let took = now_ms() - started;
    // And one leaves cleanly (SIGTERM) while firing goes on: its terms write what they hold
    // and release their keys, so the others take them without waiting for the lease.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stopping = now_ms();
    let status = c.replica("s1").terminate(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "s1 stopped cleanly: {status:?}"
    );
    let moved = shards_moved_off(&c, "s1", stopping).await;
    let f = w.settle(&c, Duration::from_secs(15), now_ms()).await;
    report(
        "a 4th replica joins under load, then one leaves with SIGTERM (16 shards)",
        &f,
        &format!(
            "it owned its {share} shards {took} ms after it started (handed over: stop, flush, release); the leaver's shards were owned again {moved} ms after its SIGTERM"
        ),
    );
    f.assert_clean("a replica joining and one leaving");
    assert!(
        moved <= 3000,
        "a clean leave moves its shards at once: {moved} ms"
    );
    c.assert_running(&["s2", "s3", "s4"]);
    c.clean_up().await;
}
