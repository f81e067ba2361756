//! Partitions on loopback: a replica's link to Redis cut silently (no reset, no error: only
//! silence), through a cuttable link the test owns ([`Link`]), while a steady load of
//! one-shots and a periodic task runs and other replicas stand by.
//!
//! What must hold: a leader that cannot reach Redis gives its key up within
//! `scheduler.redis_unreachable_limit` and does not campaign again while cut, a healthy
//! replica leads, and after the heal nothing was lost or run twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::Duration;

use ax_testkit::link::Link;
use harness::{now_ms, Cluster, Roles, Workload, SERIAL};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_from_redis_gives_way_to_a_replica_that_can_reach_it() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("part-redis").await;
    let target = c.redis_url.trim_start_matches("redis://").to_owned();
    let link = Link::to(&target).await;

    // s1 reaches Redis only through the link, and leads; s2 and the worker reach it directly.
    c.env = vec![("AX_REDIS_URL", format!("redis://127.0.0.1:{}", link.port))];
    c.start_replica("s1", Roles::Scheduler).await;
    assert_eq!(c.wait_for_leader(None, Duration::from_secs(10)).await, "s1");
    c.env.clear();
    c.start_replica("s2", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;

    // Registered while s1 leads: 60 one-shots due over 20 s from 3 s on, and a task every
    // second.
    let first_due = now_ms() + 3000;
    let work = Workload::start(
        &c,
        "part",
        &["default"],
        60,
        first_due,
        Duration::from_secs(20),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(first_due + 3000 - now_ms()).unwrap_or(0),
    ))
    .await;

    let cut_at = now_ms();
    link.cut();
    let new = c.wait_for_leader(Some("s1"), Duration::from_secs(15)).await;
    let took_over = now_ms() - cut_at;
    assert_eq!(new, "s2");
    // The limit (5 s), a check's period and its timeout, then one election.
    assert!(took_over < 10_000, "s2 led {took_over} ms after the cut");
    // While cut, s1 does not campaign again: it cannot reach Redis.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_ne!(
            c.leader().await.as_deref(),
            Some("s1"),
            "s1 led again while cut"
        );
    }
    let heal_at = now_ms();
    link.heal();

    let figures = work.settle(&c, Duration::from_secs(20), heal_at).await;
    eprintln!("partition: s2 led {took_over} ms after s1 was cut from Redis; {figures:?}");
    figures.assert_clean("leader cut from Redis");
    let runs = c.receiver.executions();
    let worst = runs
        .iter()
        .filter(|r| r.task_id != "tick")
        .map(|r| r.arrived_at - r.fire_at)
        .max()
        .unwrap();
    eprintln!("partition: worst one-shot lateness {worst} ms");
    assert!(worst < 15_000, "a one-shot ran {worst} ms late");
    assert_eq!(
        c.metric(
            "s1",
            "scheduler_leader_step_downs_total{reason=\"redis_unreachable\"}"
        )
        .await,
        Some(1.0)
    );
    c.assert_running(&["s1", "s2", "w1"]);
    c.clean_up().await;
}
