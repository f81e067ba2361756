//! Sharded scheduling against a real Redis: each (queue, scheduling shard) has a fence of its
//! own, so one shard's owner is never refused for another shard's higher token; a message
//! keeps its shard through retries and requeues; each shard's events go to its own stream,
//! read, claimed and acknowledged apart; and the unsharded fence and stream (`None`) are
//! those of a one-leader install, untouched by the shards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ax_queue::{EventEntry, ExecutionEventRecord, ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::{EnqueueOutcome, EventPosition, ExecutionEvent, UtcMillis};
use ax_testkit::unique_name;

const BLOCK: Duration = Duration::from_millis(200);

async fn queue() -> Queue {
    let cfg = QueueConfig {
        prefix: unique_name("axsh"),
        ..QueueConfig::default()
    };
    common::connect(cfg).await
}

/// The fire of task `task` at `fire` on `queue`, enqueued by the owner of `shard` holding
/// `token`.
fn fire(task: &str, queue: &str, fire: i64, shard: Option<u32>, token: u64) -> ExecutionMessage {
    let spec = ax_testkit::spec(task, queue, "log");
    let mut m = ExecutionMessage::for_fire(&spec, UtcMillis(fire), UtcMillis::now(), token);
    m.shard = shard;
    m
}

#[tokio::test]
async fn enqueue_fences_are_per_queue_and_shard() {
    let q = queue().await;
    // Shard 1's owner holds a high token, shard 2's a low one: unrelated numbers.
    let one = q
        .advance_fence("default", Some(1), 100, "c1")
        .await
        .unwrap();
    assert_eq!((one.newest, one.is_ahead()), (100, false));
    let two = q.advance_fence("default", Some(2), 5, "c1").await.unwrap();
    assert_eq!(
        (two.newest, two.is_ahead(), two.is_foreign()),
        (5, false, false)
    );
    // Shard 2's owner enqueues under its own fence; a deposed owner of shard 2 is refused.
    assert_eq!(
        q.enqueue(&fire("a", "default", 1, Some(2), 5))
            .await
            .unwrap(),
        EnqueueOutcome::Enqueued
    );
    assert_eq!(
        q.enqueue(&fire("b", "default", 1, Some(2), 4))
            .await
            .unwrap(),
        EnqueueOutcome::Fenced { newest: 5 }
    );
    assert_eq!(
        q.enqueue(&fire("c", "default", 1, Some(1), 99))
            .await
            .unwrap(),
        EnqueueOutcome::Fenced { newest: 100 }
    );
    // One batch over several shards and queues: each message against its own fence.
    let batch = [
        fire("d", "default", 1, Some(1), 100),
        fire("e", "default", 1, Some(2), 4),
        fire("f", "default", 1, Some(2), 6),
        fire("g", "default", 1, None, 3),
        fire("h", "other", 1, Some(1), 7),
    ];
    assert_eq!(
        q.enqueue_batch(&batch).await.unwrap(),
        vec![
            EnqueueOutcome::Enqueued,
            // The newest its fence reached in the call (the next message of shard 2 raised it).
            EnqueueOutcome::Fenced { newest: 6 },
            EnqueueOutcome::Enqueued,
            EnqueueOutcome::Enqueued,
            EnqueueOutcome::Enqueued,
        ]
    );
    assert_eq!(q.fence("default", Some(1)).await.unwrap(), 100);
    assert_eq!(q.fence("default", Some(2)).await.unwrap(), 6);
    assert_eq!(q.fence("default", Some(3)).await.unwrap(), 0);
    assert_eq!(q.fence("other", Some(1)).await.unwrap(), 7);
    // The unsharded fence saw only the unsharded message, under its old name.
    assert_eq!(q.fence("default", None).await.unwrap(), 3);
    let mut conn = q.connection();
    let raw: Option<u64> = redis::cmd("GET")
        .arg(q.keys().fence("default", None))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(raw, Some(3));
    // A reseat of one shard's fence leaves the others alone.
    q.reseat_fence("default", Some(1), 10, "c2").await.unwrap();
    assert_eq!(q.fence("default", Some(1)).await.unwrap(), 10);
    assert!(q
        .advance_fence("default", Some(1), 50, "c1")
        .await
        .unwrap()
        .is_foreign());
    assert!(!q
        .advance_fence("default", Some(2), 6, "c1")
        .await
        .unwrap()
        .is_foreign());
    assert_eq!(q.fence("default", None).await.unwrap(), 3);
    assert_eq!(q.depth("default").await.unwrap(), 4);
}

#[tokio::test]
async fn a_message_keeps_its_shard_through_retries_and_requeues() {
    let q = queue().await;
    let now = UtcMillis::now();
    let m = fire("t", "default", 1, Some(4), 1);
    assert_eq!(q.enqueue(&m).await.unwrap(), EnqueueOutcome::Enqueued);
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let d = c.take(1).await.unwrap().remove(0);
    assert_eq!(d.message.shard, Some(4));
    // A retry: the next attempt waits in the delayed set and comes back.
    let next = d.message.next_attempt("boom", now);
    q.retry_later(&d, &next, now).await.unwrap();
    assert_eq!(q.promote_due("default", now, 10).await.unwrap(), 1);
    let d = c.take(1).await.unwrap().remove(0);
    assert_eq!((d.message.attempt, d.message.shard), (1, Some(4)));
    // Dead-lettered, then requeued by an operator: a fresh execution of the same shard.
    assert!(q.dead_letter(&d, "final", now).await.unwrap());
    let entry = q.dlq_list("default", 0, 1).await.unwrap().remove(0);
    assert_eq!(entry.message.as_ref().unwrap().shard, Some(4));
    let id = q
        .dlq_requeue("default", entry.id, now)
        .await
        .unwrap()
        .unwrap();
    let d = c.take(1).await.unwrap().remove(0);
    assert_eq!((d.message.execution_id, d.message.shard), (id, Some(4)));
}

fn event(task: &str, shard: Option<u32>) -> ExecutionEventRecord {
    ExecutionEventRecord {
        namespace: "ns".into(),
        task_id: task.into(),
        execution_id: ax_queue::new_execution_id(),
        fire_at: UtcMillis(5),
        attempt: 0,
        kind: ExecutionEvent::Started { at: UtcMillis(6) },
        shard,
    }
}

fn tasks(entries: &[EventEntry]) -> Vec<Arc<str>> {
    entries
        .iter()
        .filter_map(|e| e.record.as_ref().map(|r| r.task_id.clone()))
        .collect()
}

fn positions(entries: &[EventEntry]) -> Vec<EventPosition> {
    entries.iter().map(|e| e.position).collect()
}

async fn stream_len(q: &Queue, shard: Option<u32>) -> usize {
    let mut conn = q.connection();
    redis::cmd("XLEN")
        .arg(q.keys().events(shard))
        .query_async(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn each_shards_events_go_to_its_own_stream() {
    let q = queue().await;
    // One pipeline over three streams (three slots on a Redis Cluster).
    let reports = [
        (event("a", Some(3)), None),
        (event("b", None), None),
        (event("c", Some(4)), None),
        (event("d", Some(3)), None),
    ];
    q.report_many(&reports).await.unwrap();
    // Shard 3's two events share one entry (different tasks, one batch).
    assert_eq!(stream_len(&q, Some(3)).await, 1);
    assert_eq!(stream_len(&q, Some(4)).await, 1);
    assert_eq!(stream_len(&q, None).await, 1);
    // Each owner reads its shard's events only, in order, with their shard.
    let three = q.read_events(Some(3), 10).await.unwrap();
    assert_eq!(tasks(&three), ["a", "d"].map(Arc::from));
    assert!(three
        .iter()
        .all(|e| e.record.as_ref().unwrap().shard == Some(3)));
    let unsharded = q.read_events(None, 10).await.unwrap();
    assert_eq!(tasks(&unsharded), [Arc::from("b")]);
    assert_eq!(unsharded[0].record.as_ref().unwrap().shard, None);
    assert!(q.read_events(Some(5), 10).await.unwrap().is_empty());
    // Shard 3's owner dies before acknowledging; its successor claims shard 3's entries only.
    let (cursor, claimed) = q
        .claim_events(Some(3), Duration::ZERO, "0-0", 10)
        .await
        .unwrap();
    assert_eq!(cursor, "0-0");
    assert_eq!(positions(&claimed), positions(&three));
    // An acknowledgement counts in its shard's stream alone (positions are per stream: an
    // entry of another stream may have the same id).
    q.ack_events(Some(3), &positions(&three)).await.unwrap();
    assert_eq!(stream_len(&q, Some(3)).await, 0);
    assert_eq!(stream_len(&q, None).await, 1);
    let (_, still) = q
        .claim_events(None, Duration::ZERO, "0-0", 10)
        .await
        .unwrap();
    assert_eq!(positions(&still), positions(&unsharded));
    q.ack_events(None, &positions(&unsharded)).await.unwrap();
    assert_eq!(stream_len(&q, None).await, 0);
    let four = q.read_events(Some(4), 10).await.unwrap();
    assert_eq!(tasks(&four), [Arc::from("c")]);
}
