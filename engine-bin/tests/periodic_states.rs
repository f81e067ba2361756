//! Periodic tasks' states in etcd: how many key puts a fire costs in steady state, and
//! whether the states are true after the leader is killed while routine runs wait to be
//! written (`scheduler.routine_state_delay`, 10 s by default).
//!
//! `AX_TEST_PERIODIC_TASKS` sets how many `every: 1s` tasks run (default 300); the test prints
//! one `periodic states:` line with the puts per fire. `AX_TEST_PERIODIC_HANDLER=noop` runs
//! them with the built-in no-op handler instead of `http` calls to the test's receiver, so
//! that 10 000 fires a second fit on two cores (a release build): the count of puts is the
//! same, and the check of the states after the kill, which needs the receiver, is left out. Two scheduler replicas and a separate
//! worker: the process killed is the leader alone, so every execution's end still comes as
//! an event, and what is checked is that the successor applies the ends its predecessor read
//! and had not written.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::HashMap;
use std::time::Duration;

use harness::{http_task, Cluster, Roles, SERIAL};
use serde_json::json;

/// How long the load runs before the count starts, and how long it is counted.
const WARM_UP: Duration = Duration::from_secs(6);
const COUNTED: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn periodic_states_cost_a_tenth_of_a_put_a_fire_and_stay_true_through_a_kill() {
    let n: usize = std::env::var("AX_TEST_PERIODIC_TASKS")
        .ok()
        .map_or(300, |v| {
            v.parse().expect("AX_TEST_PERIODIC_TASKS is a count")
        });
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("periodic-states").await;
    c.env.push(("AX_WORKER_CONCURRENCY", "64".to_owned()));
    c.start_replica("s1", Roles::Scheduler).await;
    assert_eq!(c.wait_for_leader(None, Duration::from_secs(10)).await, "s1");
    c.start_replica("s2", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;
    let noop = std::env::var("AX_TEST_PERIODIC_HANDLER").is_ok_and(|h| h == "noop");
    let tasks: Vec<(String, String, serde_json::Value)> = (0..n)
        .map(|i| {
            let mut spec = if noop {
                json!({ "handler": "noop", "schedule": { "every": "1s" } })
            } else {
                http_task(&c, json!({ "every": "1s" }), "default")
            };
            spec["misfire"] = json!("skip");
            ("ps".to_owned(), format!("p{i:05}"), spec)
        })
        .collect();
    c.put_tasks(&tasks).await;
    tokio::time::sleep(WARM_UP).await;

    // Steady state: etcd's own count of key puts against the leader's count of fires.
    let puts_before = etcd_puts(&c).await;
    let fires_before = c
        .metric("s1", "scheduler_fires_total{queue=\"default\"}")
        .await
        .unwrap_or(0.0);
    tokio::time::sleep(COUNTED).await;
    let puts = etcd_puts(&c).await - puts_before;
    let fires = c
        .metric("s1", "scheduler_fires_total{queue=\"default\"}")
        .await
        .unwrap_or(0.0)
        - fires_before;
    let per_fire = puts / fires;
    println!(
        "periodic states: {n} tasks every 1s, {fires} fires and {puts} etcd key puts in \
         {COUNTED:?}: {per_fire:.3} puts a fire"
    );
    assert!(
        fires > 0.8 * n as f64 * COUNTED.as_secs_f64(),
        "the load ran: {fires} fires"
    );
    assert!(per_fire <= 0.15, "{per_fire:.3} etcd puts a fire");

    if noop {
        println!("periodic states: no receiver with the no-op handler; states not checked");
        c.clean_up().await;
        return;
    }
    // The leader dies with routine runs read and not yet written; the successor applies
    // their events again. Then the namespace is paused, so the counts stop moving, and the
    // last routine runs are written within the delay.
    c.replica("s1").kill();
    let new = c.wait_for_leader(Some("s1"), Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    c.ax_ok(&["namespace", "pause", "ps"]).await;
    // Executions in flight end, and their events are read.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut ran: HashMap<String, std::collections::HashSet<String>> = HashMap::new();
    for r in c.receiver.executions() {
        ran.entry(r.task_id).or_default().insert(r.execution_id);
    }
    let untrue = untrue_states(&c, &tasks, &ran, n).await;
    assert!(
        untrue.is_empty(),
        "states untrue after the kill: {untrue:?}"
    );
    println!("periodic states: {new} took over; every state true ({n} tasks)");
    c.clean_up().await;
}

/// The tasks whose state does not match what ran (success count) or is not SCHEDULED, after
/// up to 15 s for the last writes (the routine delay's 10 s and a flush).
async fn untrue_states(
    c: &Cluster,
    tasks: &[(String, String, serde_json::Value)],
    ran: &HashMap<String, std::collections::HashSet<String>>,
    n: usize,
) -> Vec<String> {
    let since = tokio::time::Instant::now();
    loop {
        let states = c.states("ps").await;
        let untrue: Vec<String> = tasks
            .iter()
            .filter_map(|(_, id, _)| {
                let Some(s) = states.get(id) else {
                    return Some(format!("{id}: no state"));
                };
                let successes = s["success_count"].as_u64().unwrap_or(0);
                let runs = ran.get(id).map_or(0, |r| r.len() as u64);
                // A namespace's pause parks its fires; the tasks show SCHEDULED.
                (successes != runs || s["status"] != "SCHEDULED")
                    .then(|| format!("{id}: {successes} successes, {runs} runs, {}", s["status"]))
            })
            .collect();
        if (untrue.is_empty() && states.len() >= n) || since.elapsed() > Duration::from_secs(15) {
            return untrue;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// etcd's count of key puts since it started (`etcd_mvcc_put_total`).
async fn etcd_puts(c: &Cluster) -> f64 {
    let text = reqwest::get(format!("{}/metrics", c.etcd_endpoint))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("etcd_mvcc_put_total ")?.trim().parse().ok())
        .expect("etcd reports etcd_mvcc_put_total")
}
