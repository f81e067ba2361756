//! The randomized nemesis, as Jepsen runs one against etcd: three replicas of both roles (the
//! chart's default topology) under a steady load of one-shots written while they lead and of
//! periodic tasks, while a seeded schedule of faults lands on them for a bounded time:
//! partitions from etcd, from Redis or from both, slow links, SIGSTOP, SIGKILL and restart,
//! wall-clock steps, one or two at once. Then everything is healed and the whole history is
//! checked: every one-shot ran, no fire was made under two fencing tokens or as two
//! executions, no execution was delivered twice beyond what the faults on workers explain,
//! every one-shot's state says it succeeded, and every replica is alive and ready.
//!
//! Run by `scripts/nemesis.sh` (the target has `test = false`): `AX_NEMESIS_SECONDS` long
//! (default 90), with the seed `AX_NEMESIS_SEED` or a random one, printed for a replay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

#[path = "nemesis/faults.rs"]
mod faults;
#[path = "nemesis/history.rs"]
mod history;
#[path = "nemesis/load.rs"]
mod load;

use std::collections::BTreeMap;
use std::time::Duration;

use faults::Rig;
use harness::{now_ms, Cluster, SERIAL};
use load::{Load, NAMESPACE, PERIODIC};
use rand::rngs::StdRng;
use rand::SeedableRng;

/// The replicas, each behind its own rig.
const REPLICAS: [&str; 3] = ["r1", "r2", "r3"];

/// What one worker holds at most: the harness's concurrency (8) and the default prefetch
/// (16). A fault on a worker can have at most that many executions delivered again.
const HELD_BY_A_WORKER: usize = 8 + 16;

/// How long after the last one-shot was due it may still start: a fault healed at the end
/// of the run, a lease and an election, the redelivery of what a cut worker held.
const SETTLE: Duration = Duration::from_secs(60);

/// How long after the settle the one-shots' states may take to say they succeeded.
const STATE_BOUND: Duration = Duration::from_secs(20);

fn setting(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} is not a number: {v}"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nemesis() {
    let _serial = SERIAL.lock().await;
    let seconds = setting("AX_NEMESIS_SECONDS").unwrap_or(90);
    let seed = setting("AX_NEMESIS_SEED").unwrap_or_else(rand::random);
    println!("nemesis: seed {seed}, {seconds} s of faults (replay: scripts/nemesis.sh --seed {seed} --seconds {seconds})");

    let mut c = Cluster::new("nemesis").await;
    let mut rigs = Vec::new();
    for id in REPLICAS {
        let rig = Rig::new(&c, id).await;
        rig.start(&mut c).await;
        rigs.push(rig);
    }
    c.wait_for_leader(None, Duration::from_secs(15)).await;
    let load = Load::start(&c, seed).await;
    let mut rng = StdRng::seed_from_u64(seed);
    let run = faults::run(&mut c, &rigs, &mut rng, Duration::from_secs(seconds)).await;
    let healed_at = now_ms();
    let one_shots = load.stop().await;

    settle(&c, &one_shots).await;
    let runs = c.receiver.executions();
    let verdict = history::check(&one_shots, &PERIODIC, &runs);
    let periodic_after = runs
        .iter()
        .filter(|r| PERIODIC.contains(&r.task_id.as_str()) && r.arrived_at > healed_at)
        .count();
    let untrue = untrue_states(&c, &one_shots).await;
    let unready = unready(&mut c).await;

    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &run.faults {
        *by_kind.entry(f.kind.name()).or_default() += 1;
    }
    let on_workers = run.faults.iter().filter(|f| f.kind.hits_worker()).count();
    let bound = on_workers * HELD_BY_A_WORKER;
    let clock_ahead_ms = run
        .faults
        .iter()
        .filter_map(|f| match f.kind {
            faults::Kind::ClockStep(s) if s > 0 => Some(s * 1000),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    println!(
        "nemesis: seed {seed}, {seconds} s: {} faults {by_kind:?}, {} leader changes; {} one-shots, {} periodic runs, {} requests",
        run.faults.len(),
        run.leaders.len().saturating_sub(1),
        one_shots.len(),
        verdict.periodic_runs,
        verdict.requests,
    );
    println!(
        "nemesis: lost {}, fired under two tokens {}, fires doubled {}, delivered twice {} (bound {bound}), states untrue {}, replicas not ready {}; one-shot lateness p50 {} ms, p99 {} ms, max {} ms, early {} (at most {} ms)",
        verdict.lost.len(),
        verdict.two_tokens.len(),
        verdict.doubled.len(),
        verdict.redelivered,
        untrue.values().sum::<usize>(),
        unready.len(),
        verdict.late_ms.0,
        verdict.late_ms.1,
        verdict.late_ms.2,
        verdict.early,
        verdict.earliest_ms,
    );
    let mut wrong = verdict.violations(bound, clock_ahead_ms);
    if !untrue.is_empty() {
        wrong.push(format!("one-shot states not SUCCESS: {untrue:?}"));
    }
    if !unready.is_empty() {
        wrong.push(format!("replicas not running and ready: {unready:?}"));
    }
    if periodic_after == 0 {
        wrong.push("the periodic tasks did not run after the heal".to_owned());
    }
    assert!(wrong.is_empty(), "seed {seed}: {}", wrong.join("; "));
    drop(rigs);
    c.clean_up().await;
}

/// Waits until every one-shot ran (at most [`SETTLE`] after the last was due), then a
/// moment for repeats to show.
async fn settle(c: &Cluster, one_shots: &[load::OneShot]) {
    let last_due = one_shots.iter().map(|o| o.due).max().unwrap_or(0);
    let deadline = last_due + i64::try_from(SETTLE.as_millis()).unwrap();
    let wanted: std::collections::HashSet<&str> = one_shots.iter().map(|o| o.id.as_str()).collect();
    while now_ms() < deadline {
        let runs = c.receiver.executions();
        let ran: std::collections::HashSet<&str> =
            runs.iter().map(|r| r.task_id.as_str()).collect();
        if wanted.is_subset(&ran) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// The one-shots whose state does not say `SUCCESS` within [`STATE_BOUND`], counted by the
/// status they show.
async fn untrue_states(c: &Cluster, one_shots: &[load::OneShot]) -> BTreeMap<String, usize> {
    let since = tokio::time::Instant::now();
    loop {
        let states = c.states(NAMESPACE).await;
        let mut wrong = BTreeMap::new();
        for o in one_shots {
            let status = states
                .get(&o.id)
                .and_then(|s| s["status"].as_str())
                .unwrap_or("(none)");
            if status != "SUCCESS" {
                *wrong.entry(status.to_owned()).or_default() += 1;
            }
        }
        if wrong.is_empty() || since.elapsed() > STATE_BOUND {
            return wrong;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The replicas not running or not ready within 20 s.
async fn unready(c: &mut Cluster) -> Vec<&'static str> {
    let http = reqwest::Client::new();
    let mut unready = Vec::new();
    for id in REPLICAS {
        let replica = c.replica(id);
        if !replica.is_running() {
            unready.push(id);
            continue;
        }
        let url = format!("http://127.0.0.1:{}/readyz", replica.http_port);
        let since = tokio::time::Instant::now();
        loop {
            let ok = http
                .get(&url)
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                break;
            }
            if since.elapsed() > Duration::from_secs(20) {
                unready.push(id);
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    unready
}
