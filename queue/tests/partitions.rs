//! Partitioned queues against a real Redis (or the test cluster): a batch spreads over the
//! partitions by task and by concurrency key; a task's dedupe marks and overlap marker stay
//! in its partition; fences, pause, stats, kills and dead letters named by the logical queue
//! cover every partition; consumers of the physical queues take everything; and a queue
//! without partitions is the one physical queue of its own name.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ax_queue::{
    partition_name, partition_of, Delivery, ExecutionMessage, KillState, Queue, QueueConfig,
};
use ax_scheduler_core::{Concurrency, EnqueueOutcome, OverlapPolicy, UtcMillis};
use ax_testkit::unique_name;

const BLOCK: Duration = Duration::from_millis(200);
const PARTS: u32 = 4;

async fn queue() -> Queue {
    let cfg = QueueConfig {
        prefix: unique_name("axpart"),
        partitions: BTreeMap::from([("hot".to_owned(), PARTS)]),
        ..QueueConfig::default()
    };
    common::connect(cfg).await
}

fn fire(task: &str, at: i64, token: u64) -> ExecutionMessage {
    let spec = ax_testkit::spec(task, "hot", "log");
    ExecutionMessage::for_fire(&spec, UtcMillis(at), UtcMillis::now(), token)
}

/// Takes everything from every partition of `hot`, by physical queue.
async fn drain(q: &Queue, worker: &str) -> BTreeMap<String, Vec<Delivery>> {
    let mut out = BTreeMap::new();
    for name in q.physical_queues("hot") {
        let mut c = q
            .consumer(&name, worker, BLOCK, UtcMillis::now())
            .await
            .unwrap();
        let mut got = Vec::new();
        loop {
            let batch = c.take(100).await.unwrap();
            if batch.is_empty() {
                break;
            }
            got.extend(batch);
        }
        out.insert(name, got);
    }
    out
}

#[tokio::test]
async fn physical_queues_name_the_partitions() {
    let q = queue().await;
    assert_eq!(
        q.physical_queues("hot"),
        (0..PARTS)
            .map(|p| partition_name("hot", p))
            .collect::<Vec<_>>()
    );
    assert_eq!(q.physical_queues("cold"), vec!["cold".to_owned()]);
    // A partition's name is its own physical queue.
    assert_eq!(q.physical_queues("hot#p2"), vec!["hot#p2".to_owned()]);
    // The logical name cannot be consumed: its messages wait in the partitions.
    assert!(q
        .consumer("hot", "w1", BLOCK, UtcMillis::now())
        .await
        .is_err());
}

#[tokio::test]
async fn a_batch_spreads_over_the_partitions_by_task_and_by_concurrency_key() {
    let q = queue().await;
    let mut batch: Vec<ExecutionMessage> = (0..40).map(|i| fire(&format!("t{i}"), 1, 1)).collect();
    // Ten tasks sharing one concurrency key: one partition, so one limit.
    for i in 0..10 {
        let mut m = fire(&format!("shared{i}"), 1, 1);
        m.concurrency = Some(Concurrency {
            key: "customer-7".into(),
            max: 10,
        });
        batch.push(m);
    }
    let out = q.enqueue_batch(&batch).await.unwrap();
    assert_eq!(out, vec![EnqueueOutcome::Enqueued; 50]);
    assert_eq!(q.depth("hot").await.unwrap(), 50);
    let per: Vec<u64> = q
        .partition_stats_of("hot", UtcMillis::now())
        .await
        .unwrap()
        .into_iter()
        .map(|(_, s)| s.ready)
        .collect();
    assert_eq!(per.len(), PARTS as usize);
    assert!(
        per.iter().all(|&n| n > 0),
        "a partition got nothing: {per:?}"
    );

    let taken = drain(&q, "w1").await;
    let mut shared_in = BTreeSet::new();
    let mut total = 0;
    for (physical, ds) in &taken {
        for d in ds {
            total += 1;
            // Stored under its physical name, which settling uses.
            assert_eq!(&*d.message.queue, physical.as_str());
            assert_eq!(d.queue, *physical);
            let expected = partition_name("hot", partition_of(&d.message, PARTS));
            assert_eq!(*physical, expected, "{}", d.message.task_id);
            if d.message.concurrency.is_some() {
                shared_in.insert(physical.clone());
            }
        }
        q.ack_many(ds).await.unwrap();
    }
    assert_eq!(total, 50);
    assert_eq!(
        shared_in.len(),
        1,
        "one concurrency key in several partitions"
    );
    let stats = q.stats("hot", UtcMillis::now()).await.unwrap();
    assert_eq!((stats.ready, stats.unsettled), (0, 0));
}

#[tokio::test]
async fn dedupe_and_overlap_hold_per_task() {
    let q = queue().await;
    let fires: Vec<ExecutionMessage> = (0..20).map(|i| fire(&format!("d{i}"), 1_000, 1)).collect();
    assert_eq!(
        q.enqueue_batch(&fires).await.unwrap(),
        vec![EnqueueOutcome::Enqueued; 20]
    );
    // The same fires again (a new leader repeating them): each found in its partition.
    let again: Vec<ExecutionMessage> = (0..20).map(|i| fire(&format!("d{i}"), 1_000, 1)).collect();
    assert_eq!(
        q.enqueue_batch(&again).await.unwrap(),
        vec![EnqueueOutcome::Duplicate; 20]
    );

    let mut s = ax_testkit::spec("ov", "hot", "log");
    s.overlap = OverlapPolicy::Forbid;
    let now = UtcMillis::now();
    let first = ExecutionMessage::for_fire(&s, UtcMillis(1_000), now, 1);
    assert_eq!(q.enqueue(&first).await.unwrap(), EnqueueOutcome::Enqueued);
    let second = ExecutionMessage::for_fire(&s, UtcMillis(2_000), now, 1);
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Held);
    let home = partition_name("hot", partition_of(&first, PARTS));
    assert!(q.active_holder(&home, "ns", "ov").await.unwrap().is_some());
    // Once the first settles, the next fire goes.
    let taken = drain(&q, "w1").await;
    let ov: Vec<Delivery> = taken[&home]
        .iter()
        .filter(|d| &*d.message.task_id == "ov")
        .cloned()
        .collect();
    assert_eq!(ov.len(), 1);
    q.ack_many(&ov).await.unwrap();
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Enqueued);
}

#[tokio::test]
async fn fences_are_raised_on_every_partition() {
    let q = queue().await;
    let fence = q.advance_fence("hot", None, 10, "c1").await.unwrap();
    assert_eq!((fence.newest, fence.is_ahead()), (10, false));
    for p in q.physical_queues("hot") {
        assert_eq!(q.fence(&p, None).await.unwrap(), 10, "{p}");
        // Other shards' fences are apart, per partition too.
        assert_eq!(q.fence(&p, Some(1)).await.unwrap(), 0, "{p}");
    }
    // A deposed leader is refused whichever partition its fire goes to.
    let stale: Vec<ExecutionMessage> = (0..12).map(|i| fire(&format!("f{i}"), 1, 9)).collect();
    assert!(q
        .enqueue_batch(&stale)
        .await
        .unwrap()
        .iter()
        .all(|o| *o == EnqueueOutcome::Fenced { newest: 10 }));
    // One partition ahead (a stale token left there) is reported for the queue.
    q.reseat_fence(&partition_name("hot", 2), None, 50, "c1")
        .await
        .unwrap();
    assert_eq!(q.fence("hot", None).await.unwrap(), 50);
    let fence = q.advance_fence("hot", None, 11, "c1").await.unwrap();
    assert!(fence.is_ahead());
    // The operator's reseat sets them all.
    q.reseat_fence("hot", None, 11, "c1").await.unwrap();
    for p in q.physical_queues("hot") {
        assert_eq!(q.fence(&p, None).await.unwrap(), 11, "{p}");
    }
    let fresh: Vec<ExecutionMessage> = (0..12).map(|i| fire(&format!("f{i}"), 1, 11)).collect();
    assert_eq!(
        q.enqueue_batch(&fresh).await.unwrap(),
        vec![EnqueueOutcome::Enqueued; 12]
    );
}

#[tokio::test]
async fn pause_stats_kills_and_dead_letters_cover_every_partition() {
    let q = queue().await;
    let batch: Vec<ExecutionMessage> = (0..24).map(|i| fire(&format!("p{i}"), 1, 1)).collect();
    q.enqueue_batch(&batch).await.unwrap();

    assert!(q.pause_queue("hot").await.unwrap());
    assert!(!q.pause_queue("hot").await.unwrap(), "paused already");
    for p in q.physical_queues("hot") {
        assert!(q.is_paused(&p).await.unwrap(), "{p}");
    }
    let stats = q.stats("hot", UtcMillis::now()).await.unwrap();
    assert!(stats.paused);
    assert_eq!((stats.ready, stats.unsettled), (24, 24));
    assert!(drain(&q, "w1").await.values().all(Vec::is_empty));
    assert!(q.resume_queue("hot").await.unwrap());
    assert!(!q.is_paused("hot").await.unwrap());

    // A kill by the logical name finds the execution in its partition.
    let victim = &batch[5];
    let kill = q.kill_execution("hot", victim.execution_id).await.unwrap();
    assert_eq!(kill.state, KillState::Waiting);
    let kills = q.kill_task("hot", "ns", "p6").await.unwrap();
    assert_eq!(kills.len(), 1);
    assert_eq!(kills[0].state, KillState::Waiting);

    // Dead letters from several partitions, listed, found, requeued and purged by name.
    let taken = drain(&q, "w1").await;
    let mut dead = 0;
    let mut partitions_with_dead = 0;
    for ds in taken.values() {
        if !ds.is_empty() {
            partitions_with_dead += 1;
        }
        for d in ds {
            assert!(q.dead_letter(d, "boom", UtcMillis::now()).await.unwrap());
            dead += 1;
        }
    }
    assert_eq!(dead, 22);
    assert!(partitions_with_dead > 1);
    assert_eq!(q.dlq_size("hot").await.unwrap(), 22);
    assert_eq!(q.stats("hot", UtcMillis::now()).await.unwrap().dead, 22);
    let page = q.dlq_list("hot", 0, 100).await.unwrap();
    assert_eq!(page.len(), 22);
    assert!(page
        .windows(2)
        .all(|w| w[0].dead_lettered_at <= w[1].dead_lettered_at));
    let second_page = q.dlq_list("hot", 20, 10).await.unwrap();
    assert_eq!(second_page.len(), 2);
    assert_eq!(second_page[0].id, page[20].id);
    let entry = &page[3];
    assert_eq!(
        q.dlq_get("hot", entry.id).await.unwrap().map(|e| e.id),
        Some(entry.id)
    );
    let again = q
        .dlq_requeue("hot", entry.id, UtcMillis::now())
        .await
        .unwrap()
        .expect("requeued");
    // Back in the partition it came from.
    let taken = drain(&q, "w1").await;
    let back: Vec<&Delivery> = taken.values().flatten().collect();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].message.execution_id, again);
    assert_eq!(back[0].queue, entry.queue);
    q.ack(back[0]).await.unwrap();
    assert_eq!(
        q.dlq_requeue_all("hot", UtcMillis::now()).await.unwrap(),
        21
    );
    let taken = drain(&q, "w1").await;
    for ds in taken.values() {
        for d in ds {
            q.dead_letter(d, "boom again", UtcMillis::now())
                .await
                .unwrap();
        }
    }
    assert_eq!(q.dlq_purge("hot").await.unwrap(), 21);
    assert_eq!(q.dlq_size("hot").await.unwrap(), 0);
}

#[tokio::test]
async fn workers_of_every_partition_are_live_workers_of_the_queue() {
    let q = queue().await;
    let now = UtcMillis::now();
    for p in q.physical_queues("hot") {
        q.heartbeat(&p, "w1", Duration::from_secs(30), now)
            .await
            .unwrap();
    }
    q.heartbeat(
        &partition_name("hot", 1),
        "w2",
        Duration::from_secs(30),
        now,
    )
    .await
    .unwrap();
    let mut live = q.live_workers("hot").await.unwrap();
    live.sort();
    assert_eq!(live, vec!["w1".to_owned(), "w2".to_owned()]);
    let stats = q.stats("hot", now).await.unwrap();
    assert!(stats.last_worker_beat.is_some());
}
