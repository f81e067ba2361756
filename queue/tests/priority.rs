//! The order of waiting messages against a real Redis: priority first, FIFO within a
//! priority, aging so a low priority is never starved (the bound of `order.lua`), the same
//! across consumers, and kept by everything that gives a message back (reaper, release,
//! dead-letter requeue) and by the move of an earlier version's ready list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use ax_queue::{Delivery, ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::UtcMillis;
use ax_testkit::unique_name;
use redis::AsyncCommands;

const BLOCK: Duration = Duration::from_millis(200);

async fn queue_with_aging(aging: Duration) -> Queue {
    let cfg = QueueConfig {
        prefix: unique_name("axprio"),
        priority_aging: aging,
        ..QueueConfig::default()
    };
    common::connect(cfg).await
}

/// Fire `fire` of a task of priority `priority` (one task per priority, so fires of one
/// task stay in time order for the dedupe mark).
fn msg(priority: u8, fire: i64, now: UtcMillis) -> ExecutionMessage {
    let mut s = ax_testkit::spec(&format!("p{priority}"), "default", "log");
    s.priority = priority;
    ExecutionMessage::for_fire(&s, UtcMillis(fire), now, 1)
}

fn ids(ds: &[Delivery]) -> Vec<(u8, i64)> {
    ds.iter()
        .map(|d| (d.message.priority, d.message.fire_at.0))
        .collect()
}

async fn take_all(q: &Queue, worker: &str, now: UtcMillis) -> Vec<Delivery> {
    let mut c = q.consumer("default", worker, BLOCK, now).await.unwrap();
    let mut out = Vec::new();
    loop {
        let got = c.take(100).await.unwrap();
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

#[tokio::test]
async fn two_consumers_take_in_priority_order_fifo_within_a_priority() {
    let q = queue_with_aging(Duration::from_secs(3600)).await;
    let now = UtcMillis::now();
    // One batch: every message gets its own instant of the queue's clock, in this order.
    let pattern = [3u8, 7, 0, 9, 5, 7, 3, 9, 0, 5, 7, 9, 3, 5, 0, 6, 6, 8, 1, 8];
    let msgs: Vec<_> = pattern
        .iter()
        .enumerate()
        .map(|(i, &p)| msg(p, i as i64, now))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut a = q.consumer("default", "a", BLOCK, now).await.unwrap();
    let mut b = q.consumer("default", "b", BLOCK, now).await.unwrap();
    let mut taken = Vec::new();
    while taken.len() < msgs.len() {
        taken.extend(a.take(2).await.unwrap());
        taken.extend(b.take(3).await.unwrap());
    }
    let mut want: Vec<(u8, i64)> = msgs.iter().map(|m| (m.priority, m.fire_at.0)).collect();
    // Highest priority first; within one, the order of enqueue (the fire instants here).
    want.sort_by_key(|&(p, fire)| (std::cmp::Reverse(p), fire));
    assert_eq!(ids(&taken), want);
}

#[tokio::test]
async fn the_aging_bound_holds_on_both_sides() {
    // Step 100 ms: a priority-9 message overtakes a priority-0 one only when enqueued
    // within 9 x 100 ms after it.
    let q = queue_with_aging(Duration::from_millis(100)).await;
    let now = UtcMillis::now();
    q.enqueue(&msg(0, 1, now)).await.unwrap();
    q.enqueue(&msg(9, 1, now)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    q.enqueue(&msg(9, 2, now)).await.unwrap();
    q.enqueue(&msg(5, 1, now)).await.unwrap();
    let taken = take_all(&q, "w", now).await;
    assert_eq!(ids(&taken), vec![(9, 1), (0, 1), (9, 2), (5, 1)]);
}

#[tokio::test]
async fn a_low_priority_message_is_taken_within_the_bound_under_a_stream_of_high_ones() {
    let step = Duration::from_millis(50);
    let bound = step * 9;
    let q = queue_with_aging(step).await;
    let now = UtcMillis::now();
    q.enqueue(&msg(0, 0, now)).await.unwrap();
    let low_enqueued = Instant::now();
    // A stream of priority-9 messages, one every 5 ms, each recorded with when its enqueue
    // call started; the consumer takes one every 10 ms, so the backlog only grows.
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            let mut sent = Vec::new();
            for fire in 1..=400i64 {
                sent.push((fire, low_enqueued.elapsed()));
                q.enqueue(&msg(9, fire, now)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            sent
        })
    };
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let mut before_low = Vec::new();
    let waited = loop {
        let got = c.take(1).await.unwrap();
        if let Some(d) = got.first() {
            if d.message.priority == 0 {
                break low_enqueued.elapsed();
            }
            before_low.push(d.message.fire_at.0);
        }
        assert!(
            low_enqueued.elapsed() < Duration::from_secs(5),
            "the priority-0 message starved behind {} others",
            before_low.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let sent = producer.await.unwrap();
    // Nothing enqueued more than the bound after it went first...
    for fire in &before_low {
        let (_, at) = sent.iter().find(|(f, _)| f == fire).unwrap();
        assert!(
            *at <= bound,
            "fire {fire} enqueued {at:?} after, went first"
        );
    }
    // ...and everything enqueued within the bound did, as strict priority would have it.
    assert!(before_low.len() >= 30, "{before_low:?}");
    // Its wait: the bound plus the time to drain what went before it (10 ms a take, and
    // room for a busy machine).
    assert!(
        waited < bound + Duration::from_millis(50) * (before_low.len() as u32 + 10),
        "{waited:?}"
    );
}

#[tokio::test]
async fn the_reaper_gives_messages_back_at_their_place() {
    let q = queue_with_aging(Duration::from_secs(3600)).await;
    let t0 = UtcMillis::now();
    q.enqueue_batch(&[msg(9, 1, t0), msg(1, 1, t0)])
        .await
        .unwrap();
    let mut dead = q.consumer("default", "dead", BLOCK, t0).await.unwrap();
    q.heartbeat("default", "dead", Duration::from_millis(100), t0)
        .await
        .unwrap();
    assert_eq!(ids(&dead.take(2).await.unwrap()), vec![(9, 1), (1, 1)]);
    q.enqueue_batch(&[msg(9, 2, t0), msg(1, 2, t0)])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let later = t0.add(Duration::from_secs(40));
    assert_eq!(
        q.reap("default", later, Duration::from_secs(30))
            .await
            .unwrap(),
        2
    );
    let taken = take_all(&q, "w", later).await;
    assert_eq!(ids(&taken), vec![(9, 1), (9, 2), (1, 1), (1, 2)]);
}

#[tokio::test]
async fn a_released_message_keeps_its_priority() {
    let q = queue_with_aging(Duration::from_secs(3600)).await;
    let now = UtcMillis::now();
    q.enqueue_batch(&[msg(2, 1, now), msg(7, 1, now)])
        .await
        .unwrap();
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let low = c.take(2).await.unwrap().pop().unwrap();
    assert_eq!(low.message.priority, 2);
    q.enqueue_batch(&[msg(7, 2, now), msg(2, 2, now)])
        .await
        .unwrap();
    assert!(q.release(&low).await.unwrap());
    let taken = take_all(&q, "w2", now).await;
    assert_eq!(ids(&taken), vec![(7, 2), (2, 1), (2, 2)]);
}

#[tokio::test]
async fn a_dead_letter_requeue_keeps_its_priority() {
    let q = queue_with_aging(Duration::from_secs(3600)).await;
    let now = UtcMillis::now();
    q.enqueue(&msg(8, 1, now)).await.unwrap();
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let d = c.take(1).await.unwrap().remove(0);
    assert!(q.dead_letter(&d, "boom", now).await.unwrap());
    q.enqueue_batch(&[msg(3, 1, now), msg(8, 2, now)])
        .await
        .unwrap();
    let entry = q.dlq_list("default", 0, 10).await.unwrap().remove(0);
    assert!(q
        .dlq_requeue("default", entry.id, now)
        .await
        .unwrap()
        .is_some());
    // A requeue is a new execution: after the waiting ones of its priority, before lower.
    let taken = take_all(&q, "w2", now).await;
    assert_eq!(ids(&taken), vec![(8, 2), (8, 1), (3, 1)]);
}

#[tokio::test]
async fn an_earlier_versions_ready_list_is_moved_in_order_and_nothing_is_lost() {
    let q = queue_with_aging(Duration::from_secs(3600)).await;
    let now = UtcMillis::now();
    let mut raw = q.connection();
    // 1 200 messages as the earlier version left them (LPUSHed: the oldest on the right),
    // more than one take moves at once, with an older enqueue time than anything new.
    let old = UtcMillis(now.0 - 60_000);
    let legacy = q.keys().legacy_ready("default");
    for i in 0..1_200i64 {
        let p = if i % 3 == 0 { 6 } else { 4 };
        let m = msg(p, i, old);
        let _: () = raw.lpush(&legacy, m.to_json().unwrap()).await.unwrap();
    }
    let _: () = raw.lpush(&legacy, "not json").await.unwrap();
    q.enqueue_batch(&[msg(6, 10_000, now), msg(4, 10_000, now)])
        .await
        .unwrap();
    assert_eq!(q.stats("default", now).await.unwrap().ready, 1_203);
    let taken = take_all(&q, "w", now).await;
    assert_eq!(taken.len(), 1_202, "all but the undecodable one");
    let got = ids(&taken);
    let mut want = got.clone();
    want.sort_by_key(|&(p, fire)| (std::cmp::Reverse(p), fire));
    assert_eq!(got, want);
    assert_eq!(q.dlq_size("default").await.unwrap(), 1);
    let left: bool = raw.exists(&legacy).await.unwrap();
    assert!(!left);
    assert_eq!(q.stats("default", now).await.unwrap().ready, 0);
}

#[tokio::test]
async fn a_waiting_consumer_wakes_for_a_message_given_back() {
    let q = queue_with_aging(Duration::from_secs(3600)).await;
    let now = UtcMillis::now();
    q.enqueue(&msg(5, 1, now)).await.unwrap();
    let mut holder = q.consumer("default", "h", BLOCK, now).await.unwrap();
    let d = holder.take(1).await.unwrap().remove(0);
    let mut waiting = q
        .consumer("default", "w", Duration::from_secs(5), now)
        .await
        .unwrap();
    let q2 = q.clone();
    let give_back = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(q2.release(&d).await.unwrap());
    });
    let t0 = Instant::now();
    let got = waiting.take(1).await.unwrap();
    assert_eq!(ids(&got), vec![(5, 1)]);
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    give_back.await.unwrap();
}
