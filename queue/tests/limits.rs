//! Concurrency keys and queue limits against a real Redis, held across consumers: a key's
//! `max`, its waiting executions run in order as slots free, a dead consumer's slot released
//! by the reaper, a queue's `max_running` and its `rate`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ax_queue::{Delivery, ExecutionMessage, Queue, QueueConfig, QueueLimits};
use ax_scheduler_core::{TaskSpec, UtcMillis};
use ax_testkit::unique_name;

const BLOCK: Duration = Duration::from_millis(200);

async fn queue(limits: Option<QueueLimits>) -> Queue {
    let mut cfg = QueueConfig {
        prefix: unique_name("axlim"),
        ..QueueConfig::default()
    };
    if let Some(l) = limits {
        cfg.limits = BTreeMap::from([("default".to_string(), l)]);
    }
    common::connect(cfg).await
}

/// A task limited per customer: at most `max` of one customer's executions at once.
fn limited(id: &str, max: u32) -> TaskSpec {
    let json = format!(
        r#"{{"handler":"log","schedule":{{"every":"60s"}},"overlap":"allow",
            "concurrency":{{"key":"customer-{{payload.customer}}","max":{max}}}}}"#
    );
    TaskSpec::from_json(json.as_bytes(), "ns", id).unwrap()
}

/// Fire `fire` of `spec` for `customer`.
fn fire(spec: &TaskSpec, customer: &str, fire: i64, now: UtcMillis) -> ExecutionMessage {
    let mut s = spec.clone();
    s.payload = serde_json::json!({ "customer": customer });
    ExecutionMessage::for_fire(&s, UtcMillis(fire), now, 1)
}

fn fires(ds: &[Delivery]) -> Vec<i64> {
    ds.iter().map(|d| d.message.fire_at.0).collect()
}

#[tokio::test]
async fn a_concurrency_key_holds_across_two_consumers_and_its_waiting_ones_run_in_order() {
    let q = queue(None).await;
    let now = UtcMillis::now();
    let a42 = limited("a", 2);
    let b7 = limited("b", 2);
    let mut msgs: Vec<_> = (1..=5).map(|i| fire(&a42, "42", i, now)).collect();
    msgs.push(fire(&b7, "7", 100, now));
    q.enqueue_batch(&msgs).await.unwrap();
    assert_eq!(msgs[0].concurrency.as_ref().unwrap().key, "customer-42");
    let mut a = q.consumer("default", "a", BLOCK, now).await.unwrap();
    let mut b = q.consumer("default", "b", BLOCK, now).await.unwrap();
    // Two of customer 42 and the other customer's one; the rest of 42 wait.
    let first = a.take(10).await.unwrap();
    assert_eq!(fires(&first), vec![1, 2, 100]);
    assert!(first.iter().all(|d| d.limited_wait.is_none()));
    assert!(b.take(10).await.unwrap().is_empty(), "a third of 42 ran");
    // Each settle frees a slot and the next waiting one runs, in order, on either consumer.
    let mut running = vec![first[0].clone(), first[1].clone()];
    let mut after = Vec::new();
    for i in 0..3 {
        let done = running.remove(0);
        if i == 1 {
            // A failure with a retry frees the slot too.
            let next = done.message.next_attempt("boom", now);
            q.retry_later(&done, &next, now.add(Duration::from_secs(3600)))
                .await
                .unwrap();
        } else {
            assert!(q.ack(&done).await.unwrap());
        }
        let c = if i == 1 { &mut a } else { &mut b };
        let got = c.take(10).await.unwrap();
        assert_eq!(got.len(), 1, "one slot freed, one runs");
        assert!(got[0].limited_wait.is_some(), "it waited gated");
        after.extend(fires(&got));
        running.extend(got);
        assert!(a.take(10).await.unwrap().is_empty());
    }
    assert_eq!(after, vec![3, 4, 5]);
}

#[tokio::test]
async fn a_dead_consumers_slot_is_released_by_the_reaper() {
    let q = queue(None).await;
    let t0 = UtcMillis::now();
    let one = limited("a", 1);
    q.enqueue_batch(&[fire(&one, "42", 1, t0), fire(&one, "42", 2, t0)])
        .await
        .unwrap();
    let mut dead = q.consumer("default", "dead", BLOCK, t0).await.unwrap();
    q.heartbeat("default", "dead", Duration::from_millis(100), t0)
        .await
        .unwrap();
    assert_eq!(fires(&dead.take(10).await.unwrap()), vec![1]);
    let mut alive = q.consumer("default", "alive", BLOCK, t0).await.unwrap();
    assert!(alive.take(10).await.unwrap().is_empty(), "the slot is held");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let later = t0.add(Duration::from_secs(40));
    assert_eq!(
        q.reap("default", later, Duration::from_secs(30))
            .await
            .unwrap(),
        1
    );
    // The dead one's execution comes back first (its place), then the one that waited.
    let got = alive.take(10).await.unwrap();
    assert_eq!(fires(&got), vec![1]);
    assert!(q.ack(&got[0]).await.unwrap());
    assert_eq!(fires(&alive.take(10).await.unwrap()), vec![2]);
}

#[tokio::test]
async fn a_gated_execution_can_be_killed_while_it_waits() {
    let q = queue(None).await;
    let now = UtcMillis::now();
    let one = limited("a", 1);
    let msgs = [
        fire(&one, "42", 1, now),
        fire(&one, "42", 2, now),
        fire(&one, "42", 3, now),
    ];
    q.enqueue_batch(&msgs).await.unwrap();
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let running = c.take(10).await.unwrap();
    assert_eq!(fires(&running), vec![1]);
    let kill = q
        .kill_execution("default", msgs[1].execution_id)
        .await
        .unwrap();
    assert_eq!(kill.state, ax_queue::KillState::Waiting);
    // The slot goes to the next one waiting, and the killed one never runs.
    assert!(q.ack(&running[0]).await.unwrap());
    assert_eq!(fires(&c.take(10).await.unwrap()), vec![3]);
    assert!(c.take(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_queues_max_running_holds_across_consumers() {
    let q = queue(Some(QueueLimits {
        max_running: 2,
        rate: 0.0,
    }))
    .await;
    let now = UtcMillis::now();
    let s = ax_testkit::spec("t", "default", "log");
    let msgs: Vec<_> = (1..=5)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 1))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut a = q.consumer("default", "a", BLOCK, now).await.unwrap();
    let mut b = q
        .consumer("default", "b", Duration::from_secs(5), now)
        .await
        .unwrap();
    let held = a.take(5).await.unwrap();
    assert_eq!(fires(&held), vec![1, 2]);
    assert!(a.take(5).await.unwrap().is_empty());
    // b waits for a free slot and gets it as soon as one frees.
    let q2 = q.clone();
    let first = held[0].clone();
    let settle = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(q2.ack(&first).await.unwrap());
    });
    let t = Instant::now();
    assert_eq!(fires(&b.take(5).await.unwrap()), vec![3]);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    settle.await.unwrap();
}

#[tokio::test]
async fn a_queues_rate_holds_across_consumers() {
    let q = queue(Some(QueueLimits {
        max_running: 0,
        rate: 5.0,
    }))
    .await;
    let now = UtcMillis::now();
    let s = ax_testkit::spec("t", "default", "log");
    let msgs: Vec<_> = (1..=20)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 1))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut a = q.consumer("default", "a", BLOCK, now).await.unwrap();
    let mut b = q.consumer("default", "b", BLOCK, now).await.unwrap();
    let t = Instant::now();
    let mut taken = 0;
    while t.elapsed() < Duration::from_millis(1_000) {
        taken += a.take(20).await.unwrap().len();
        taken += b.take(20).await.unwrap().len();
    }
    // A burst of one second's worth (5), then 5 a second.
    assert!(
        (5..=11).contains(&taken),
        "{taken} taken in the first second"
    );
    while taken < 20 {
        taken += a.take(20).await.unwrap().len();
        assert!(t.elapsed() < Duration::from_secs(5), "{taken} after 5 s");
    }
    assert!(
        t.elapsed() >= Duration::from_millis(2_800),
        "{:?}",
        t.elapsed()
    );
}
