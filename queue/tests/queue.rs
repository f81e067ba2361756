//! The queue against a real Redis: enqueue rules, the settle paths, reaping, dead letters,
//! history, maintenance and reconnects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ax_queue::{
    Delivery, ExecutionMessage, HistoryEntry, Maintenance, MaintenanceConfig, MaintenanceState,
    Queue, QueueConfig,
};
use ax_scheduler_core::{
    AttemptEnd, AttemptOutcome, EnqueueOutcome, ExecutionEvent, OverlapPolicy, Schedule, TaskSpec,
    UtcMillis,
};
use ax_testkit::{unique_name, RedisServer};
use redis::AsyncCommands;

fn spec(id: &str, queue: &str) -> TaskSpec {
    ax_testkit::spec(id, queue, "log")
}

async fn queue() -> Queue {
    let cfg = QueueConfig {
        prefix: unique_name("axq"),
        ..QueueConfig::default()
    };
    common::connect(cfg).await
}

async fn raw_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

const BLOCK: Duration = Duration::from_millis(200);

/// Enqueues fires 0..n of task `t` on the default queue.
async fn enqueue_fires(q: &Queue, n: i64, now: UtcMillis) {
    let s = spec("t", "default");
    let msgs: Vec<_> = (0..n)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 0))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
}

/// Fires 0..n of task `t`, enqueued and taken by worker `w`.
async fn taken(q: &Queue, n: i64, now: UtcMillis) -> Vec<Delivery> {
    enqueue_fires(q, n, now).await;
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    c.take(usize::try_from(n).unwrap()).await.unwrap()
}

#[tokio::test]
async fn enqueue_is_idempotent_per_fire_and_fenced() {
    let q = queue().await;
    let s = spec("t1", "default");
    let now = ax_scheduler_core::UtcMillis::now();
    let a = ExecutionMessage::for_fire(&s, UtcMillis(1_000), now, 5);
    // A second scheduler firing the same instant builds its own message (another id).
    let b = ExecutionMessage::for_fire(&s, UtcMillis(1_000), now, 5);
    assert_eq!(q.enqueue(&a).await.unwrap(), EnqueueOutcome::Enqueued);
    assert_eq!(q.enqueue(&b).await.unwrap(), EnqueueOutcome::Duplicate);
    let c = ExecutionMessage::for_fire(&s, UtcMillis(2_000), now, 7);
    assert_eq!(q.enqueue(&c).await.unwrap(), EnqueueOutcome::Enqueued);
    // The deposed leader (token 5) is refused for a new fire; nothing is pushed.
    let deposed = ExecutionMessage::for_fire(&s, UtcMillis(3_000), now, 5);
    assert_eq!(
        q.enqueue(&deposed).await.unwrap(),
        EnqueueOutcome::Fenced { newest: 7 }
    );
    assert_eq!(q.depth("default").await.unwrap(), 2);
    // A new leader raises the fence on a queue before pushing to it.
    assert_eq!(
        q.advance_fence("other", None, 9, "c1")
            .await
            .unwrap()
            .newest,
        9
    );
    let lower = q.advance_fence("other", None, 3, "c1").await.unwrap();
    assert_eq!(
        (lower.newest, lower.is_ahead(), lower.is_foreign()),
        (9, true, false)
    );
    // Another etcd cluster's token is not comparable: the fence is left alone and said so.
    let foreign = q.advance_fence("other", None, 50, "c2").await.unwrap();
    assert_eq!((foreign.newest, foreign.is_foreign()), (9, true));
    assert_eq!(q.fence("other", None).await.unwrap(), 9);
    // The operator's repair: reseat it for the cluster that leads now.
    q.reseat_fence("other", None, 50, "c2").await.unwrap();
    let now_ours = q.advance_fence("other", None, 50, "c2").await.unwrap();
    assert_eq!(
        (now_ours.newest, now_ours.is_foreign(), now_ours.is_ahead()),
        (50, false, false)
    );
    let mut o = spec("t2", "other");
    o.queue = "other".into();
    let late = ExecutionMessage::for_fire(&o, UtcMillis(1), now, 8);
    assert_eq!(
        q.enqueue(&late).await.unwrap(),
        EnqueueOutcome::Fenced { newest: 50 }
    );
    // Run-now executions are distinct even at the same instant.
    let r1 = ExecutionMessage::run_now(&s, now, 7);
    let r2 = ExecutionMessage::run_now(&s, now, 7);
    assert_eq!(q.enqueue(&r1).await.unwrap(), EnqueueOutcome::Enqueued);
    assert_eq!(q.enqueue(&r2).await.unwrap(), EnqueueOutcome::Enqueued);
    let stats = q
        .stats("default", now.add(Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(
        (stats.ready, stats.unsettled, stats.delayed, stats.dead),
        (4, 4, 0, 0)
    );
    assert!(stats.oldest_age.unwrap() >= Duration::from_secs(2));
}

#[tokio::test]
async fn scheduled_fires_keep_one_dedupe_mark_per_task_not_a_key_per_fire() {
    let cfg = QueueConfig {
        prefix: unique_name("axq"),
        ..QueueConfig::default()
    };
    let prefix = cfg.prefix.clone();
    let q = common::connect(cfg).await;
    let now = ax_scheduler_core::UtcMillis::now();
    let tasks: Vec<TaskSpec> = (0..3).map(|i| spec(&format!("t{i}"), "default")).collect();
    // A day of a task firing every second, scaled down: 500 fires of each of 3 tasks.
    for t in &tasks {
        let fires: Vec<_> = (1..=500)
            .map(|i| ExecutionMessage::for_fire(t, UtcMillis(i * 1000), now, 1))
            .collect();
        let out = q.enqueue_batch(&fires).await.unwrap();
        assert!(out.iter().all(|o| *o == EnqueueOutcome::Enqueued));
    }
    // Each of those fires dispatched again (a second leader) is a duplicate, the newest and
    // the oldest alike; a newer one is not.
    for t in &tasks {
        for at in [1_000, 250_000, 500_000] {
            let again = ExecutionMessage::for_fire(t, UtcMillis(at), now, 1);
            assert_eq!(q.enqueue(&again).await.unwrap(), EnqueueOutcome::Duplicate);
        }
    }
    let next = ExecutionMessage::for_fire(&tasks[0], UtcMillis(501_000), now, 1);
    assert_eq!(q.enqueue(&next).await.unwrap(), EnqueueOutcome::Enqueued);
    // What dedupes them is one key per task, however many fires.
    let mut conn = q.connection();
    let keys: Vec<String> = conn
        .keys(format!("{{{prefix}:q:default}}:*"))
        .await
        .unwrap();
    let dedupe: Vec<&String> = keys
        .iter()
        .filter(|k| k.contains(":fired:") || k.contains(":dedupe:"))
        .collect();
    assert_eq!(dedupe.len(), 3, "{dedupe:?}");
    let ttl: i64 = conn
        .pttl(q.keys().fired("default", "ns", "t0"))
        .await
        .unwrap();
    assert!(ttl > 0, "the mark expires when its task stops firing");
}

#[tokio::test]
async fn an_idempotency_key_is_scoped_to_its_namespace_and_run_now_is_not_refused_by_it() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let mut a = spec("close-order", "default");
    a.idempotency_key = Some("order-1001".into());
    let mut b = a.clone();
    b.namespace = "tenant-b".into();
    let first = ExecutionMessage::for_fire(&a, UtcMillis(1_000), now, 1);
    assert_eq!(q.enqueue(&first).await.unwrap(), EnqueueOutcome::Enqueued);
    // The same business key again (another task id, same namespace): once.
    let mut a2 = a.clone();
    a2.id = "close-order-again".into();
    let repeat = ExecutionMessage::for_fire(&a2, UtcMillis(9_000), now, 1);
    assert_eq!(q.enqueue(&repeat).await.unwrap(), EnqueueOutcome::Duplicate);
    // Another tenant's identical key is its own.
    let other = ExecutionMessage::for_fire(&b, UtcMillis(1_000), now, 1);
    assert_eq!(q.enqueue(&other).await.unwrap(), EnqueueOutcome::Enqueued);
    // A run-now of the task runs.
    let run = ExecutionMessage::run_now(&a, now, 1);
    assert_eq!(q.enqueue(&run).await.unwrap(), EnqueueOutcome::Enqueued);
}

#[tokio::test]
async fn dedupe_key_expires_after_its_ttl() {
    let cfg = QueueConfig {
        prefix: unique_name("axq"),
        dedupe_ttl: Duration::from_millis(150),
        ..QueueConfig::default()
    };
    let q = common::connect(cfg).await;
    let s = spec("t", "default");
    let m = ExecutionMessage::for_fire(&s, UtcMillis(10), ax_scheduler_core::UtcMillis::now(), 1);
    assert_eq!(q.enqueue(&m).await.unwrap(), EnqueueOutcome::Enqueued);
    assert_eq!(q.enqueue(&m).await.unwrap(), EnqueueOutcome::Duplicate);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(q.enqueue(&m).await.unwrap(), EnqueueOutcome::Enqueued);
}

#[tokio::test]
async fn batch_enqueue_reports_each_outcome_in_order() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let s = spec("t", "default");
    let mut msgs: Vec<_> = (0..300)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 1))
        .collect();
    msgs.push(ExecutionMessage::for_fire(&s, UtcMillis(5), now, 1));
    msgs.push(ExecutionMessage::for_fire(&s, UtcMillis(999), now, 0));
    let out = q.enqueue_batch(&msgs).await.unwrap();
    assert!(out[..300].iter().all(|o| *o == EnqueueOutcome::Enqueued));
    assert_eq!(out[300], EnqueueOutcome::Duplicate);
    assert_eq!(out[301], EnqueueOutcome::Fenced { newest: 1 });
    assert_eq!(q.depth("default").await.unwrap(), 300);
    // Mixed queues in one batch: grouped per queue, outcomes still in input order.
    let mut other = spec("t", "other");
    other.queue = "other".into();
    let mixed = vec![
        ExecutionMessage::for_fire(&other, UtcMillis(1), now, 1),
        ExecutionMessage::for_fire(&s, UtcMillis(1), now, 1),
        ExecutionMessage::for_fire(&other, UtcMillis(2), now, 1),
    ];
    let out = q.enqueue_batch(&mixed).await.unwrap();
    assert_eq!(
        out,
        vec![
            EnqueueOutcome::Enqueued,
            EnqueueOutcome::Duplicate,
            EnqueueOutcome::Enqueued
        ]
    );
    assert_eq!(q.depth("other").await.unwrap(), 2);
}

#[tokio::test]
async fn batch_enqueue_reloads_flushed_scripts() {
    // A private server: flushing scripts on the shared one would disturb other tests.
    let server = RedisServer::start();
    let q = Queue::connect(&server.url(), QueueConfig::default())
        .await
        .unwrap();
    let now = ax_scheduler_core::UtcMillis::now();
    let s = spec("t", "default");
    let first = [ExecutionMessage::for_fire(&s, UtcMillis(1), now, 1)];
    q.enqueue_batch(&first).await.unwrap();
    let mut raw = raw_conn(&server.url()).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut raw)
        .await
        .unwrap();
    let more: Vec<_> = (1000..1010)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 1))
        .collect();
    let out = q.enqueue_batch(&more).await.unwrap();
    assert!(out.iter().all(|o| *o == EnqueueOutcome::Enqueued));
    assert_eq!(q.depth("default").await.unwrap(), 11);
}

#[tokio::test]
async fn take_is_fifo_and_ack_settles() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let s = spec("t", "default");
    let msgs: Vec<_> = (0..5)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 1))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut c = q.consumer("default", "w1", BLOCK, now).await.unwrap();
    let got = c.take(3).await.unwrap();
    let fires: Vec<i64> = got.iter().map(|d| d.message.fire_at.0).collect();
    assert_eq!(fires, vec![0, 1, 2]);
    let k = q.keys();
    let mut raw = q.connection();
    let held: u64 = raw.llen(k.processing("default", "w1")).await.unwrap();
    assert_eq!(held, 3);
    assert_eq!(q.ack_many(&got).await.unwrap(), vec![true; 3]);
    assert!(!q.ack(&got[0]).await.unwrap(), "a second ack finds nothing");
    let rest = c.take(10).await.unwrap();
    assert_eq!(rest.len(), 2);
    for d in &rest {
        assert!(q.ack(d).await.unwrap());
    }
    // Empty queue: the blocking take waits about the block timeout and returns nothing.
    let t0 = std::time::Instant::now();
    assert!(c.take(1).await.unwrap().is_empty());
    assert!(t0.elapsed() >= Duration::from_millis(150));
    let stats = q.stats("default", now).await.unwrap();
    assert_eq!((stats.ready, stats.unsettled), (0, 0));
    assert_eq!(stats.oldest_age, None);
}

#[tokio::test]
async fn blocking_take_wakes_on_push() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let mut c = q
        .consumer("default", "w1", Duration::from_secs(5), now)
        .await
        .unwrap();
    let q2 = q.clone();
    let push = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let m = ExecutionMessage::for_fire(&spec("t", "default"), UtcMillis(1), now, 0);
        q2.enqueue(&m).await.unwrap();
    });
    let t0 = std::time::Instant::now();
    let got = c.take(4).await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(t0.elapsed() < Duration::from_secs(2));
    push.await.unwrap();
}

#[tokio::test]
async fn high_priority_jumps_ahead() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let mut s = spec("t", "default");
    q.enqueue(&ExecutionMessage::for_fire(&s, UtcMillis(1), now, 0))
        .await
        .unwrap();
    s.priority = 9;
    q.enqueue(&ExecutionMessage::for_fire(&s, UtcMillis(2), now, 0))
        .await
        .unwrap();
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let got = c.take(2).await.unwrap();
    assert_eq!(got[0].message.fire_at, UtcMillis(2));
}

#[tokio::test]
async fn retry_waits_in_the_delayed_set_until_promoted() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let s = spec("t", "default");
    let m = ExecutionMessage::for_fire(&s, UtcMillis(1), now, 0);
    q.enqueue(&m).await.unwrap();
    let mut c = q.consumer("default", "w1", BLOCK, now).await.unwrap();
    let d = c.take(1).await.unwrap().remove(0);
    let next = d.message.next_attempt("boom", now);
    let due = now.add(Duration::from_secs(10));
    assert_eq!(
        q.retry_later(&d, &next, due).await.unwrap(),
        ax_queue::RetrySettle::Scheduled
    );
    assert_eq!(q.delayed_len("default").await.unwrap(), 1);
    let mut raw = q.connection();
    let scored: Vec<(String, i64)> = raw
        .zrange_withscores(q.keys().delayed("default"), 0, -1)
        .await
        .unwrap();
    assert_eq!(scored[0].1, due.0);
    assert_eq!(q.promote_due("default", now, 100).await.unwrap(), 0);
    assert_eq!(q.promote_due("default", due, 100).await.unwrap(), 1);
    let d2 = c.take(1).await.unwrap().remove(0);
    assert_eq!(d2.message.execution_id, m.execution_id);
    assert_eq!(d2.message.attempt, 1);
    assert_eq!(d2.message.previous_errors[0].error, "boom");
    assert_eq!(q.stats("default", now).await.unwrap().unsettled, 1);
    assert!(q.ack(&d2).await.unwrap());
    assert_eq!(q.stats("default", now).await.unwrap().unsettled, 0);
}

#[tokio::test]
async fn reaper_gives_back_only_dead_workers_messages() {
    let q = queue().await;
    let t0 = ax_scheduler_core::UtcMillis::now();
    enqueue_fires(&q, 4, t0).await;
    let mut dead = q.consumer("default", "dead", BLOCK, t0).await.unwrap();
    let mut alive = q.consumer("default", "alive", BLOCK, t0).await.unwrap();
    q.heartbeat("default", "dead", Duration::from_millis(100), t0)
        .await
        .unwrap();
    let held = dead.take(2).await.unwrap();
    assert_eq!(held.len(), 2);
    let _mine = alive.take(1).await.unwrap();
    let vis = Duration::from_secs(30);
    // Silent, but not yet for the visibility timeout.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        q.reap("default", t0.add(Duration::from_secs(5)), vis)
            .await
            .unwrap(),
        0
    );
    // The live worker keeps beating; the dead one does not.
    let later = t0.add(Duration::from_secs(40));
    q.heartbeat("default", "alive", Duration::from_secs(60), later)
        .await
        .unwrap();
    assert_eq!(q.reap("default", later, vis).await.unwrap(), 2);
    // Given back at the taking end, in their original order.
    let mut next = q.consumer("default", "w3", BLOCK, later).await.unwrap();
    let again = next.take(3).await.unwrap();
    let fires: Vec<i64> = again.iter().map(|d| d.message.fire_at.0).collect();
    assert_eq!(fires, vec![0, 1, 3]);
    // What the dead worker held is marked for the next handler; the rest is not.
    let marked: Vec<bool> = again.iter().map(|d| d.message.redelivered).collect();
    assert_eq!(marked, vec![true, true, false]);
    assert!(!held[0].message.redelivered);
    // The dead worker's late ack finds nothing: it no longer owns them.
    assert!(!q.ack(&held[0]).await.unwrap());
    // Given back a second time: marked once, still a message that decodes.
    q.heartbeat("default", "w3", Duration::from_millis(100), later)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let last = later.add(Duration::from_secs(40));
    q.heartbeat("default", "alive", Duration::from_secs(60), last)
        .await
        .unwrap();
    assert_eq!(q.reap("default", last, vis).await.unwrap(), 3);
    let mut fourth = q.consumer("default", "w4", BLOCK, last).await.unwrap();
    let twice = fourth.take(3).await.unwrap();
    assert_eq!(twice.len(), 3);
    assert!(twice.iter().all(|d| d.message.redelivered));
    assert_eq!(
        twice[0].raw.matches("redelivered").count(),
        1,
        "{}",
        twice[0].raw
    );
    // A retry is a fresh delivery.
    assert!(!twice[0].message.next_attempt("boom", last).redelivered);
}

#[tokio::test]
async fn release_puts_unfinished_work_first_and_deregister_cleans_up() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    enqueue_fires(&q, 3, now).await;
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    q.heartbeat("default", "w", Duration::from_secs(5), now)
        .await
        .unwrap();
    let d = c.take(1).await.unwrap().remove(0);
    assert!(
        !q.deregister("default", "w").await.unwrap(),
        "still holds a message"
    );
    assert!(q.release(&d).await.unwrap());
    assert!(q.deregister("default", "w").await.unwrap());
    let mut raw = q.connection();
    let hb: bool = raw
        .exists(q.keys().heartbeat("default", "w"))
        .await
        .unwrap();
    assert!(!hb);
    let again = c.take(1).await.unwrap().remove(0);
    assert_eq!(again.message.execution_id, d.message.execution_id);
}

#[tokio::test]
async fn the_dead_letter_queue_keeps_its_retention_and_its_cap() {
    let cfg = QueueConfig {
        prefix: unique_name("axq"),
        dlq_max_entries: 30,
        dlq_retention: Duration::from_secs(3600),
        ..QueueConfig::default()
    };
    let q = common::connect(cfg).await;
    let t0 = ax_scheduler_core::UtcMillis::now();
    let ds = taken(&q, 50, t0).await;
    // Ten dead-lettered two hours ago, forty now.
    for (i, d) in ds.iter().enumerate() {
        let at = if i < 10 { t0.0 - 2 * 3600 * 1000 } else { t0.0 };
        assert!(q.dead_letter(d, "boom", UtcMillis(at)).await.unwrap());
    }
    assert_eq!(q.dlq_size("default").await.unwrap(), 50);
    // The maintenance round: the ten past the retention go, then the oldest beyond the cap.
    let removed = q.trim_dlq("default", t0).await.unwrap();
    assert_eq!(removed, 20);
    assert_eq!(q.dlq_size("default").await.unwrap(), 30);
    let mut conn = q.connection();
    let entries: usize = conn.hlen(q.keys().dlq_entries("default")).await.unwrap();
    assert_eq!(entries, 30, "entries and their index go together");
    assert_eq!(q.trim_dlq("default", t0).await.unwrap(), 0);
}

#[tokio::test]
async fn a_tasks_history_expires_after_the_retention_and_is_deleted_on_demand() {
    let cfg = QueueConfig {
        prefix: unique_name("axq"),
        history_retention: Duration::from_secs(600),
        ..QueueConfig::default()
    };
    let q = common::connect(cfg).await;
    let entry = HistoryEntry {
        unstarted: false,
        execution_id: ax_queue::new_execution_id(),
        fire_at: UtcMillis(5),
        started_at: UtcMillis(6),
        finished_at: UtcMillis(9),
        lateness_ms: 1,
        duration_ms: 3,
        end: AttemptEnd::succeeded(),
        worker: "w".into(),
        attempt: 0,
        queue: String::new(),
        enqueued_at: None,
        first_enqueued_at: None,
        output: None,
        lineage: Default::default(),
    };
    q.record_history("ns", "a", &entry).await.unwrap();
    q.record_history("ns", "b", &entry).await.unwrap();
    let mut conn = q.connection();
    let ttl: i64 = conn.pttl(q.keys().history("ns", "a")).await.unwrap();
    assert!(ttl > 590_000 && ttl <= 600_000, "{ttl}");
    q.delete_histories(&[("ns", "a")]).await.unwrap();
    assert!(q.history("ns", "a", 10).await.unwrap().is_empty());
    assert_eq!(q.history("ns", "b", 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn dead_letter_life_cycle() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    enqueue_fires(&q, 5, now).await;
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let ds = c.take(5).await.unwrap();
    for (i, d) in ds.iter().enumerate() {
        // Two failed attempts before the last one.
        let failed = d
            .message
            .next_attempt("first", now)
            .next_attempt("second", now.add(Duration::from_secs(1)));
        let d = Delivery {
            message: failed,
            ..d.clone()
        };
        let at = now.add(Duration::from_secs(10 + i as u64));
        assert!(q.dead_letter(&d, "final", at).await.unwrap());
    }
    assert_eq!(q.dlq_size("default").await.unwrap(), 5);
    assert_eq!(q.stats("default", now).await.unwrap().unsettled, 0);
    let page = q.dlq_list("default", 1, 2).await.unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0].message.as_ref().unwrap().fire_at, UtcMillis(1));
    let errors: Vec<&str> = page[0].errors.iter().map(|e| e.error.as_str()).collect();
    assert_eq!(errors, vec!["first", "second", "final"]);
    assert_eq!(page[0].errors[2].attempt, 2);
    assert_eq!(
        page[0].message.as_ref().unwrap().payload,
        serde_json::json!({"n": "t"})
    );
    // Requeue one: a new execution at attempt 0; twice is a no-op.
    let new_id = q
        .dlq_requeue("default", page[0].id, now)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(new_id, page[0].id);
    assert_eq!(
        q.dlq_requeue("default", page[0].id, now).await.unwrap(),
        None
    );
    let back = c.take(1).await.unwrap().remove(0);
    assert_eq!(back.message.execution_id, new_id);
    assert_eq!(back.message.attempt, 0);
    assert!(back.message.previous_errors.is_empty());
    // Requeue all, then purge what comes back dead.
    assert_eq!(q.dlq_requeue_all("default", now).await.unwrap(), 4);
    assert_eq!(q.dlq_size("default").await.unwrap(), 0);
    let again = c.take(10).await.unwrap();
    assert_eq!(again.len(), 4);
    for d in &again {
        q.dead_letter(d, "again", now).await.unwrap();
    }
    assert_eq!(q.dlq_purge("default").await.unwrap(), 4);
    assert_eq!(q.dlq_size("default").await.unwrap(), 0);
    assert!(q.dlq_list("default", 0, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn undecodable_message_goes_to_the_dead_letter_queue() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let mut raw = q.connection();
    let _: () = raw
        .zadd(q.keys().queued("default"), "not json", 1)
        .await
        .unwrap();
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    assert!(c.take(1).await.unwrap().is_empty());
    let dead = q.dlq_list("default", 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].raw.as_deref(), Some("not json"));
    assert_eq!(
        q.dlq_requeue("default", dead[0].id, now).await.unwrap(),
        None
    );
}

#[tokio::test]
async fn history_is_capped_newest_first() {
    let cfg = QueueConfig {
        prefix: unique_name("axq"),
        history_cap: 5,
        ..QueueConfig::default()
    };
    let q = common::connect(cfg).await;
    for i in 0..8u32 {
        let e = HistoryEntry {
            unstarted: false,
            execution_id: ax_queue::new_execution_id(),
            fire_at: UtcMillis(i64::from(i)),
            started_at: UtcMillis(10),
            finished_at: UtcMillis(20),
            lateness_ms: 10,
            duration_ms: 10,
            end: AttemptEnd::succeeded(),
            worker: "w".into(),
            attempt: i,
            queue: String::new(),
            enqueued_at: None,
            first_enqueued_at: None,
            output: None,
            lineage: Default::default(),
        };
        q.record_history("ns", "t", &e).await.unwrap();
    }
    let h = q.history("ns", "t", 100).await.unwrap();
    let attempts: Vec<u32> = h.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, vec![7, 6, 5, 4, 3]);
    assert_eq!(q.history("ns", "t", 2).await.unwrap().len(), 2);
    assert!(q.history("ns", "other", 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn maintenance_steps_promote_then_reap() {
    let q = queue().await;
    let t0 = ax_scheduler_core::UtcMillis::now();
    let s = spec("t", "default");
    let m = ExecutionMessage::for_fire(&s, UtcMillis(1), t0, 0);
    q.enqueue(&m).await.unwrap();
    let mut c = q.consumer("default", "w", BLOCK, t0).await.unwrap();
    let d = c.take(1).await.unwrap().remove(0);
    q.retry_later(
        &d,
        &d.message.next_attempt("x", t0),
        t0.add(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let m2 = ExecutionMessage::for_fire(&s, UtcMillis(2), t0, 0);
    q.enqueue(&m2).await.unwrap();
    let _held = c.take(1).await.unwrap();
    let cfg = MaintenanceConfig {
        queues: vec!["default".into()],
        visibility_timeout: Duration::from_secs(5),
        ..MaintenanceConfig::default()
    };
    let mut mt = Maintenance::new(q.clone(), cfg.clone());
    assert_eq!(mt.state(), MaintenanceState::Promote);
    let r = mt.step(t0.add(Duration::from_secs(2))).await;
    assert_eq!((r.promoted, r.wait), (1, Duration::ZERO));
    assert_eq!(mt.state(), MaintenanceState::Reap);
    let r = mt.step(t0.add(Duration::from_secs(10))).await;
    assert_eq!(r.reaped, 1);
    assert_eq!(r.wait, cfg.interval);
    assert_eq!(mt.state(), MaintenanceState::Promote);
    assert_eq!(q.depth("default").await.unwrap(), 2);
}

/// One maintenance round (promote, then reap and perhaps trim) at `at`: the entries trimmed.
async fn round(mt: &mut Maintenance, at: UtcMillis) -> usize {
    mt.step(at).await;
    mt.step(at).await.dlq_trimmed
}

#[tokio::test]
async fn maintenance_trims_the_dead_letters_every_few_seconds_not_every_round() {
    let cfg = QueueConfig {
        prefix: unique_name("axq"),
        dlq_max_entries: 1,
        ..QueueConfig::default()
    };
    let q = common::connect(cfg).await;
    let t0 = ax_scheduler_core::UtcMillis::now();
    let ds = taken(&q, 4, t0).await;
    for d in &ds[..3] {
        assert!(q.dead_letter(d, "boom", t0).await.unwrap());
    }
    let mut mt = Maintenance::new(q.clone(), MaintenanceConfig::default());
    assert_eq!(round(&mut mt, t0).await, 2, "the first round trims");
    assert!(q.dead_letter(&ds[3], "boom", t0).await.unwrap());
    assert_eq!(round(&mut mt, t0.add(Duration::from_secs(1))).await, 0);
    assert_eq!(q.dlq_size("default").await.unwrap(), 2);
    assert_eq!(round(&mut mt, t0.add(Duration::from_secs(6))).await, 1);
    assert_eq!(q.dlq_size("default").await.unwrap(), 1);
}

#[tokio::test]
async fn maintenance_backs_off_while_redis_is_down() {
    let mut server = RedisServer::start();
    let cfg = QueueConfig {
        command_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(300),
        reconnect_retries: 1,
        ..QueueConfig::default()
    };
    let q = Queue::connect(&server.url(), cfg).await.unwrap();
    let mut mt = Maintenance::new(q.clone(), MaintenanceConfig::default());
    server.kill();
    let r = mt.step(ax_scheduler_core::UtcMillis::now()).await;
    assert!(matches!(
        mt.state(),
        MaintenanceState::Backoff { failures: 1 }
    ));
    assert!(r.wait > Duration::ZERO);
    let _ = mt.step(ax_scheduler_core::UtcMillis::now()).await;
    let _ = mt.step(ax_scheduler_core::UtcMillis::now()).await;
    assert!(matches!(
        mt.state(),
        MaintenanceState::Backoff { failures: 2 }
    ));
    server.restart();
    let mut ok = false;
    for _ in 0..20 {
        mt.step(ax_scheduler_core::UtcMillis::now()).await;
        if mt.state() == MaintenanceState::Reap {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "maintenance recovers after Redis comes back");
}

#[tokio::test]
async fn blocked_consumer_survives_a_redis_restart() {
    let mut server = RedisServer::start();
    let cfg = QueueConfig {
        command_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_millis(500),
        ..QueueConfig::default()
    };
    let q = Queue::connect(&server.url(), cfg).await.unwrap();
    let now = ax_scheduler_core::UtcMillis::now();
    let mut c = q
        .consumer("default", "w", Duration::from_secs(2), now)
        .await
        .unwrap();
    let taker = tokio::spawn(async move {
        let mut errors = 0;
        loop {
            match c.take(1).await {
                Ok(v) if !v.is_empty() => return (v, errors),
                Ok(_) => {}
                Err(e) => {
                    assert!(e.is_retryable(), "{e}");
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    let m = ExecutionMessage::for_fire(&spec("t", "default"), UtcMillis(1), now, 0);
    let mut pushed = false;
    for _ in 0..50 {
        if q.enqueue(&m).await.is_ok() {
            pushed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pushed, "the enqueue side reconnects");
    let (got, errors) = tokio::time::timeout(Duration::from_secs(15), taker)
        .await
        .expect("the consumer reconnects and takes the message")
        .unwrap();
    assert_eq!(got[0].message.execution_id, m.execution_id);
    assert!(errors >= 1, "the restart was seen as an error");
}

#[tokio::test]
async fn forbid_holds_a_fire_while_the_previous_execution_is_active() {
    let q = queue().await;
    let mut s = spec("ov", "default");
    s.overlap = OverlapPolicy::Forbid;
    let now = ax_scheduler_core::UtcMillis::now();
    let first = ExecutionMessage::for_fire(&s, UtcMillis(1_000), now, 1);
    assert_eq!(first.overlap, OverlapPolicy::Forbid);
    assert_eq!(q.enqueue(&first).await.unwrap(), EnqueueOutcome::Enqueued);
    // The next fire finds the first one active (queued, then running): held, nothing pushed.
    let second = ExecutionMessage::for_fire(&s, UtcMillis(2_000), now, 1);
    assert_eq!(
        q.enqueue_batch(std::slice::from_ref(&second))
            .await
            .unwrap(),
        vec![EnqueueOutcome::Held]
    );
    // A run-now is not held by the policy.
    let manual = ExecutionMessage::run_now(&s, now, 1);
    assert_eq!(q.enqueue(&manual).await.unwrap(), EnqueueOutcome::Enqueued);
    assert_eq!(q.depth("default").await.unwrap(), 2);

    let mut c = q.consumer("default", "w1", BLOCK, now).await.unwrap();
    let taken = c.take(10).await.unwrap();
    assert_eq!(taken.len(), 2);
    // Settling the run-now leaves the marker of the scheduled execution in place.
    let run_now: Vec<Delivery> = taken
        .iter()
        .filter(|d| d.message.run_now)
        .cloned()
        .collect();
    q.ack_many(&run_now).await.unwrap();
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Held);
    // Its final settle clears it: the held fire now goes through, once.
    let scheduled = taken.iter().find(|d| !d.message.run_now).unwrap();
    assert!(q.ack(scheduled).await.unwrap());
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Enqueued);
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Duplicate);
    // A dead-lettered execution clears it too.
    let taken = c.take(10).await.unwrap();
    assert!(q
        .dead_letter(&taken[0], "permanent", ax_scheduler_core::UtcMillis::now())
        .await
        .unwrap());
    let third = ExecutionMessage::for_fire(&s, UtcMillis(3_000), now, 1);
    assert_eq!(q.enqueue(&third).await.unwrap(), EnqueueOutcome::Enqueued);
}

#[tokio::test]
async fn one_shot_and_allow_fires_never_hold() {
    let q = queue().await;
    let mut s = spec("os", "default");
    s.overlap = OverlapPolicy::Forbid;
    s.schedule = Schedule::At(UtcMillis(1_000));
    let now = ax_scheduler_core::UtcMillis::now();
    let m = ExecutionMessage::for_fire(&s, UtcMillis(1_000), now, 1);
    assert_eq!(
        m.overlap,
        OverlapPolicy::Allow,
        "overlap applies to periodic tasks"
    );
    let mut a = spec("al", "default");
    a.overlap = OverlapPolicy::Allow;
    let out = q
        .enqueue_batch(&[
            m,
            ExecutionMessage::for_fire(&a, UtcMillis(1_000), now, 1),
            ExecutionMessage::for_fire(&a, UtcMillis(2_000), now, 1),
        ])
        .await
        .unwrap();
    assert_eq!(out, vec![EnqueueOutcome::Enqueued; 3]);
}

fn records(entries: &[ax_queue::EventEntry]) -> Vec<ax_queue::ExecutionEventRecord> {
    entries.iter().filter_map(|e| e.record.clone()).collect()
}

fn positions(entries: &[ax_queue::EventEntry]) -> Vec<ax_scheduler_core::EventPosition> {
    entries.iter().map(|e| e.position).collect()
}

#[tokio::test]
async fn events_read_and_not_acknowledged_are_claimed_by_the_next_reader() {
    use ax_queue::ExecutionEventRecord;
    let q = queue().await;
    let event = |task: &str| ExecutionEventRecord {
        namespace: "ns".into(),
        task_id: task.into(),
        execution_id: ax_queue::new_execution_id(),
        fire_at: UtcMillis(5),
        attempt: 0,
        kind: ExecutionEvent::Started { at: UtcMillis(6) },
        shard: None,
    };
    // Events of a version that kept them in a list (pushed on the left) move into the
    // stream, oldest first, at its end (a stream only grows at its end).
    let mut conn = q.connection();
    for task in ["old-1", "old-2"] {
        let _: () = conn
            .lpush(
                q.keys().legacy_events(None),
                serde_json::to_string(&event(task)).unwrap(),
            )
            .await
            .unwrap();
    }
    let _: () = conn
        .lpush(q.keys().legacy_events(None), "not json")
        .await
        .unwrap();
    q.report_many(&[(event("a"), None), (event("b"), None), (event("c"), None)])
        .await
        .unwrap();
    // A leader reads them all and writes the effects of the first three only.
    let read = q.read_events(None, 100).await.unwrap();
    let tasks: Vec<Option<std::sync::Arc<str>>> = read
        .iter()
        .map(|e| e.record.as_ref().map(|r| r.task_id.clone()))
        .collect();
    assert_eq!(
        tasks,
        [
            Some("a"),
            Some("b"),
            Some("c"),
            Some("old-1"),
            Some("old-2"),
            None
        ]
        .map(|t| t.map(std::sync::Arc::from))
    );
    let exists: bool = conn.exists(q.keys().legacy_events(None)).await.unwrap();
    assert!(!exists, "the former list is gone once moved");
    q.ack_events(None, &positions(&read[..3])).await.unwrap();
    // It dies. New events are not what a successor reads first: it claims the pending ones.
    q.report(&event("d"), None).await.unwrap();
    let (cursor, claimed) = q
        .claim_events(None, Duration::ZERO, "0-0", 2)
        .await
        .unwrap();
    assert_eq!(positions(&claimed), positions(&read[3..5]));
    assert_ne!(cursor, "0-0");
    let (cursor, rest) = q
        .claim_events(None, Duration::ZERO, &cursor, 2)
        .await
        .unwrap();
    assert_eq!(positions(&rest), positions(&read[5..]));
    assert_eq!(cursor, "0-0", "the pending entries are all claimed");
    // Entries pending for less than the idle time stay with their reader.
    assert!(q
        .claim_events(None, Duration::from_secs(60), "0-0", 10)
        .await
        .unwrap()
        .1
        .is_empty());
    let new = q.read_events(None, 100).await.unwrap();
    let new_tasks: Vec<std::sync::Arc<str>> =
        records(&new).into_iter().map(|r| r.task_id).collect();
    assert_eq!(new_tasks, [std::sync::Arc::from("d")]);
    // Acknowledged entries are deleted: nothing is left to claim or read.
    q.ack_events(None, &positions(&read[3..])).await.unwrap();
    q.ack_events(None, &positions(&new)).await.unwrap();
    let len: usize = redis::cmd("XLEN")
        .arg(q.keys().events(None))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 0);
    assert!(q
        .claim_events(None, Duration::ZERO, "0-0", 10)
        .await
        .unwrap()
        .1
        .is_empty());
}

#[tokio::test]
async fn execution_events_reach_the_reader_in_order_with_history() {
    use ax_queue::ExecutionEventRecord;
    let q = queue().await;
    let id = ax_queue::new_execution_id();
    let event = |attempt: u32, kind: ExecutionEvent| ExecutionEventRecord {
        namespace: "ns".into(),
        task_id: "ev".into(),
        execution_id: id,
        fire_at: UtcMillis(5),
        attempt,
        kind,
        shard: None,
    };
    let failed = AttemptEnd::new(AttemptOutcome::Failed, Some("boom".into()));
    let started = event(0, ExecutionEvent::Started { at: UtcMillis(6) });
    let finished = event(
        0,
        ExecutionEvent::Finished {
            at: UtcMillis(9),
            end: failed.clone(),
        },
    );
    let entry = HistoryEntry {
        unstarted: false,
        execution_id: id,
        fire_at: UtcMillis(5),
        started_at: UtcMillis(6),
        finished_at: UtcMillis(9),
        lateness_ms: 1,
        duration_ms: 3,
        end: failed,
        worker: "w".into(),
        attempt: 0,
        queue: String::new(),
        enqueued_at: None,
        first_enqueued_at: None,
        output: None,
        lineage: Default::default(),
    };
    q.report(&started, None).await.unwrap();
    q.report(&finished, Some(&entry)).await.unwrap();
    let got = q.read_events(None, 10).await.unwrap();
    assert_eq!(records(&got), vec![started.clone(), finished.clone()]);
    assert!(got[0].position < got[1].position);
    assert!(q.read_events(None, 10).await.unwrap().is_empty());
    q.ack_events(None, &positions(&got)).await.unwrap();
    assert_eq!(
        q.history("ns", "ev", 10).await.unwrap(),
        vec![entry.clone()]
    );

    // A batch keeps its order and writes each history entry.
    let batch = vec![
        (started.clone(), None),
        (finished.clone(), Some(entry.clone())),
        (started.clone(), None),
    ];
    q.report_many(&batch).await.unwrap();
    q.report_many(&[]).await.unwrap();
    let got = q.read_events(None, 10).await.unwrap();
    assert_eq!(records(&got), vec![started.clone(), finished, started]);
    // One task's events never share an entry: a leader that recorded the first one's
    // position still applies the next.
    assert!(got.windows(2).all(|w| w[0].position < w[1].position));
    assert_eq!(
        q.history("ns", "ev", 10).await.unwrap(),
        vec![entry.clone(), entry]
    );
}

#[tokio::test]
async fn a_restarted_worker_recovers_what_its_id_held() {
    let q = queue().await;
    let s = spec("rw", "default");
    let now = ax_scheduler_core::UtcMillis::now();
    for t in [1_000, 2_000] {
        q.enqueue(&ExecutionMessage::for_fire(&s, UtcMillis(t), now, 1))
            .await
            .unwrap();
    }
    let mut c = q.consumer("default", "pod-0", BLOCK, now).await.unwrap();
    assert_eq!(c.take(10).await.unwrap().len(), 2);
    q.heartbeat("default", "pod-0", Duration::from_secs(60), now)
        .await
        .unwrap();
    // The process dies; a new one starts under the same id while the old heartbeat lives.
    assert_eq!(q.depth("default").await.unwrap(), 0);
    assert_eq!(q.recover_worker("default", "pod-0").await.unwrap(), 2);
    assert_eq!(q.depth("default").await.unwrap(), 2);
    assert_eq!(q.recover_worker("default", "pod-0").await.unwrap(), 0);
}

#[tokio::test]
async fn requeue_all_ends_when_entries_fail_again_while_it_runs() {
    let q = queue().await;
    let now = ax_scheduler_core::UtcMillis::now();
    let s = spec("bounce", "default");
    let msgs: Vec<_> = (0..50)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 0))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    for d in c.take(50).await.unwrap() {
        assert!(q.dead_letter(&d, "permanent", now).await.unwrap());
    }
    assert_eq!(q.dlq_size("default").await.unwrap(), 50);
    // A worker that fails every execution for good at once, as a broken handler would.
    let stop = tokio_util::sync::CancellationToken::new();
    let bouncer = {
        let (q, stop) = (q.clone(), stop.clone());
        tokio::spawn(async move {
            let mut c = q
                .consumer("default", "bouncer", Duration::from_millis(50), now)
                .await
                .unwrap();
            while !stop.is_cancelled() {
                for d in c.take(100).await.unwrap() {
                    let at = ax_scheduler_core::UtcMillis::now();
                    q.dead_letter(&d, "permanent again", at).await.unwrap();
                }
            }
        })
    };
    let requeued = tokio::time::timeout(Duration::from_secs(20), q.dlq_requeue_all("default", now))
        .await
        .expect("requeue-all must end even while entries come back")
        .unwrap();
    stop.cancel();
    bouncer.await.unwrap();
    assert_eq!(requeued, 50, "each entry present at the start, once");
}

#[tokio::test]
async fn the_run_id_is_stable_and_on_a_cluster_names_every_primary() {
    let q = queue().await;
    let id = q.run_id().await.unwrap();
    assert!(!id.is_empty());
    assert_eq!(q.run_id().await.unwrap(), id);
    if ax_testkit::redis_cluster_nodes().is_some() {
        // The cluster suite's cluster: 3 primaries, each `address=run_id`.
        let parts: Vec<&str> = id.split(',').collect();
        assert_eq!(parts.len(), 3, "{id}");
        assert!(
            parts.iter().all(|p| p
                .split_once('=')
                .is_some_and(|(a, r)| !a.is_empty() && !r.is_empty())),
            "{id}"
        );
    } else {
        assert!(!id.contains('='), "{id}");
    }
    // CONFIG is allowed on the test servers: the settings are known.
    let info = q.server_info().await.unwrap();
    assert!(
        info.persistent.is_some() && info.maxmemory_policy.is_some(),
        "{info:?}"
    );
}

#[tokio::test]
async fn stop_orders_name_the_killed_execution_among_many_of_a_queue() {
    let q = queue().await;
    let now = UtcMillis::now();
    let msgs: Vec<_> = (0..4)
        .map(|i| {
            ExecutionMessage::for_fire(&spec(&format!("t{i}"), "default"), UtcMillis(1), now, 1)
        })
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let taken = c.take(4).await.unwrap();
    assert_eq!(taken.len(), 4);
    let probes: Vec<_> = taken
        .iter()
        .map(|d| ax_queue::StopProbe::of(&d.message))
        .collect();
    // None killed: one question per queue answers all.
    assert_eq!(q.stop_orders(&probes).await.unwrap(), vec![None; 4]);
    let killed = taken[2].message.execution_id;
    q.kill_execution("default", killed).await.unwrap();
    let orders = q.stop_orders(&probes).await.unwrap();
    let expected: Vec<_> = taken
        .iter()
        .map(|d| (d.message.execution_id == killed).then_some(ax_queue::StopOrder::Killed))
        .collect();
    assert_eq!(orders, expected);
}

#[tokio::test]
async fn a_settled_execution_clears_its_forbid_marker_and_leaves_others_alone() {
    let q = queue().await;
    let now = UtcMillis::now();
    let mut s = spec("f", "default");
    s.overlap = OverlapPolicy::Forbid;
    // Text the ack's search meets before the message's own mode: it must not be taken for it.
    s.payload = serde_json::json!({"overlap": "allow"});
    let first = ExecutionMessage::for_fire(&s, UtcMillis(1_000), now, 1);
    assert!(first.to_json().unwrap().contains(r#"{"overlap":"allow"}"#));
    assert_eq!(q.enqueue(&first).await.unwrap(), EnqueueOutcome::Enqueued);
    // Held while the first is active.
    let second = ExecutionMessage::for_fire(&s, UtcMillis(2_000), now, 1);
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Held);
    let mut c = q.consumer("default", "w", BLOCK, now).await.unwrap();
    let taken = c.take(1).await.unwrap();
    assert!(q.ack(&taken[0]).await.unwrap());
    // Its settle cleared the marker: the held fire goes in now.
    assert_eq!(q.enqueue(&second).await.unwrap(), EnqueueOutcome::Enqueued);
}

/// A clock stopped at one instant.
#[derive(Debug)]
struct Stopped(UtcMillis);

impl ax_scheduler_core::Clock for Stopped {
    fn now(&self) -> UtcMillis {
        self.0
    }
}

#[tokio::test]
async fn the_queue_reads_the_wall_clock_it_is_given() {
    let at = UtcMillis(1_000_000_000_000);
    let q = common::connect(QueueConfig {
        prefix: unique_name("axq"),
        clock: std::sync::Arc::new(Stopped(at)),
        ..QueueConfig::default()
    })
    .await;
    assert!(q.pause_queue("default").await.unwrap());
    let mut conn = q.connection();
    let since: i64 = conn.get(q.keys().paused("default")).await.unwrap();
    assert_eq!(
        since, at.0,
        "the pause is dated by the queue's clock, not the host's"
    );
}

#[tokio::test]
async fn an_empty_event_entry_is_read_once_and_acknowledged() {
    let q = queue().await;
    let mut conn = q.connection();
    let _: String = redis::cmd("XADD")
        .arg(q.keys().events(None))
        .arg("*")
        .arg("e")
        .arg("[]")
        .query_async(&mut conn)
        .await
        .unwrap();
    let read = q.read_events(None, 10).await.unwrap();
    assert_eq!(read.len(), 1, "one entry to acknowledge, with no event");
    assert!(read[0].record.is_none());
    q.ack_events(None, &[read[0].position]).await.unwrap();
    let (_, left) = q
        .claim_events(None, Duration::ZERO, "0-0", 10)
        .await
        .unwrap();
    assert!(left.is_empty(), "nothing left pending: {left:?}");
}
