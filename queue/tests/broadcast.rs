//! Messages addressed to one worker (a broadcast fire's pieces) against a real Redis: taken
//! by that worker before the shared queue and by no other, a retry back to the same worker,
//! and a gone worker's messages (reaped, stopped, or never there) ended as orphans, never
//! handed to another worker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ax_queue::{Delivery, ExecutionMessage, Queue, QueueConfig};
use ax_scheduler_core::fanout::Piece;
use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::{Dispatch, OverlapPolicy, TaskKey, TaskSpec, UtcMillis};
use ax_testkit::unique_name;

const BLOCK: Duration = Duration::from_millis(200);

async fn queue() -> Queue {
    let cfg = QueueConfig {
        prefix: unique_name("axbc"),
        ..QueueConfig::default()
    };
    common::connect(cfg).await
}

fn spec(id: &str) -> TaskSpec {
    ax_testkit::spec(id, "default", "log")
}

/// The pieces of `spec`'s fire at `fire`, one addressed to each of `workers`, as the leader
/// enqueues them.
fn pieces(spec: &TaskSpec, fire: i64, workers: &[&str], now: UtcMillis) -> Vec<ExecutionMessage> {
    let key = Arc::new(TaskKey::new(spec.namespace.clone(), spec.id.clone()));
    let fanout = ExecutionId::for_fire(&key, UtcMillis(fire));
    workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let d = Dispatch {
                key: Arc::clone(&key),
                spec: Arc::new(spec.clone()),
                fire_at: UtcMillis(fire),
                run_now: None,
                overlap: OverlapPolicy::Allow,
                run_id: None,
                starts_run: false,
                piece: Some(Piece {
                    index: u32::try_from(i).unwrap(),
                    total: u32::try_from(workers.len()).unwrap(),
                    fanout,
                    worker: Some((*w).to_owned()),
                }),
                broadcast: false,
            };
            ExecutionMessage::for_dispatch(&d, now, 1)
        })
        .collect()
}

fn targets(ds: &[Delivery]) -> Vec<Option<&str>> {
    ds.iter()
        .map(|d| d.message.lineage.target_worker.as_deref())
        .collect()
}

#[tokio::test]
async fn an_addressed_message_is_taken_by_its_worker_first_and_by_no_other() {
    let q = queue().await;
    let now = UtcMillis::now();
    let mut w1 = q.consumer("default", "w1", BLOCK, now).await.unwrap();
    let mut w2 = q.consumer("default", "w2", BLOCK, now).await.unwrap();
    let mut w3 = q.consumer("default", "w3", BLOCK, now).await.unwrap();
    let mut other = q.consumer("default", "w4", BLOCK, now).await.unwrap();
    // A plain fire waits first; the broadcast comes after it.
    q.enqueue(&ExecutionMessage::for_fire(
        &spec("plain"),
        UtcMillis(1),
        now,
        1,
    ))
    .await
    .unwrap();
    let sent = pieces(&spec("b"), 5, &["w1", "w2", "w3"], now);
    q.enqueue_batch(&sent).await.unwrap();
    // Sent again (a new leader): duplicates, not a second copy on any worker.
    let again = q.enqueue_batch(&sent).await.unwrap();
    assert!(again
        .iter()
        .all(|o| *o == ax_scheduler_core::EnqueueOutcome::Duplicate));
    // Paused, a worker takes nothing, its own messages included.
    assert!(q.pause_queue("default").await.unwrap());
    assert!(w2.take(10).await.unwrap().is_empty());
    assert!(q.resume_queue("default").await.unwrap());
    let got = w1.take(10).await.unwrap();
    assert_eq!(
        targets(&got),
        [Some("w1"), None],
        "its own before the shared queue"
    );
    assert_eq!(got[0].message.execution_id, sent[0].execution_id);
    assert!(other.take(10).await.unwrap().is_empty(), "not another's");
    let got = w2.take(10).await.unwrap();
    assert_eq!(targets(&got), [Some("w2")]);
    assert_eq!(got[0].message.execution_id, sent[1].execution_id);
    let got = w3.take(10).await.unwrap();
    assert_eq!(targets(&got), [Some("w3")]);
    assert!(w1.take(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_worker_waiting_for_work_wakes_for_a_message_addressed_to_it() {
    let q = queue().await;
    let now = UtcMillis::now();
    let mut w1 = q
        .consumer("default", "w1", Duration::from_secs(10), now)
        .await
        .unwrap();
    let q2 = q.clone();
    let push = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        q2.enqueue_batch(&pieces(&spec("b"), 5, &["w1"], now))
            .await
            .unwrap();
    });
    // Woken by its own token, not the block timeout (which would return nothing).
    let got = w1.take(4).await.unwrap();
    assert_eq!(targets(&got), [Some("w1")]);
    push.await.unwrap();
}

#[tokio::test]
async fn a_retry_goes_back_to_the_same_worker() {
    let q = queue().await;
    let now = UtcMillis::now();
    let mut w1 = q.consumer("default", "w1", BLOCK, now).await.unwrap();
    let mut w2 = q.consumer("default", "w2", BLOCK, now).await.unwrap();
    q.enqueue_batch(&pieces(&spec("b"), 5, &["w1", "w2"], now))
        .await
        .unwrap();
    let first = w1.take(1).await.unwrap().remove(0);
    let next = first.message.next_attempt("boom", now);
    q.retry_later(&first, &next, now).await.unwrap();
    assert_eq!(q.promote_due("default", now, 10).await.unwrap(), 1);
    let got = w2.take(10).await.unwrap();
    assert_eq!(targets(&got), [Some("w2")], "only its own piece");
    assert_eq!(
        q.depth("default").await.unwrap(),
        0,
        "not in the shared queue"
    );
    let retry = w1.take(10).await.unwrap();
    assert_eq!(targets(&retry), [Some("w1")]);
    assert_eq!(retry[0].message.attempt, 1);
    assert_eq!(retry[0].message.execution_id, first.message.execution_id);
    // Its worker gone when the next retry is due: an orphan, not another worker's work.
    let next = retry[0].message.next_attempt("boom", now);
    q.retry_later(&retry[0], &next, now).await.unwrap();
    assert!(q.deregister("default", "w1").await.unwrap());
    assert_eq!(q.promote_due("default", now, 10).await.unwrap(), 1);
    assert!(w2.take(10).await.unwrap().is_empty());
    let orphans = q.take_orphans("default", "w2", 10).await.unwrap();
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].message.attempt, 2);
}

#[tokio::test]
async fn a_dead_worker_s_addressed_messages_become_orphans_never_another_s_work() {
    let q = queue().await;
    let t0 = UtcMillis::now();
    let mut dead = q.consumer("default", "dead", BLOCK, t0).await.unwrap();
    let mut alive = q.consumer("default", "alive", BLOCK, t0).await.unwrap();
    q.enqueue_batch(&pieces(&spec("b"), 5, &["alive", "dead"], t0))
        .await
        .unwrap();
    // The dead one holds its piece of the first fire; its piece of the second waits.
    let held = dead.take(1).await.unwrap();
    assert_eq!(targets(&held), [Some("dead")]);
    let second = pieces(&spec("b"), 6, &["alive", "dead"], t0);
    q.enqueue_batch(&second).await.unwrap();
    let later = t0.add(Duration::from_secs(40));
    q.heartbeat("default", "alive", Duration::from_secs(60), later)
        .await
        .unwrap();
    assert_eq!(
        q.reap("default", later, Duration::from_secs(30))
            .await
            .unwrap(),
        2
    );
    // The live worker gets its own two, nothing of the dead one's.
    let mine = alive.take(10).await.unwrap();
    assert_eq!(targets(&mine), [Some("alive"), Some("alive")]);
    assert!(alive.take(10).await.unwrap().is_empty());
    // A fire addressed to the reaped worker after is an orphan too.
    assert!(!q.ack(&held[0]).await.unwrap(), "no longer held by it");
    q.enqueue_batch(&pieces(&spec("b"), 7, &["alive", "dead"], later)[1..])
        .await
        .unwrap();
    // The orphans go to whoever ends them, held as that worker's until it settles each.
    let orphans = q.take_orphans("default", "alive", 10).await.unwrap();
    assert_eq!(orphans.len(), 3);
    assert!(orphans
        .iter()
        .all(|d| d.message.lineage.target_worker.as_deref() == Some("dead")));
    let ids: Vec<_> = orphans.iter().map(|d| d.message.execution_id).collect();
    assert!(ids.contains(&held[0].message.execution_id));
    assert!(ids.contains(&second[1].execution_id));
    assert_eq!(
        q.processing_entries("default", "alive")
            .await
            .unwrap()
            .len(),
        2 + 3
    );
    for d in &orphans {
        assert!(q
            .dead_letter(d, "worker dead is gone", later)
            .await
            .unwrap());
    }
    assert!(q
        .take_orphans("default", "alive", 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(q.dlq_size("default").await.unwrap(), 3);
}

#[tokio::test]
async fn a_stopping_worker_s_addressed_messages_become_orphans_and_a_restart_keeps_its_own() {
    let q = queue().await;
    let now = UtcMillis::now();
    let mut w = q.consumer("default", "w", BLOCK, now).await.unwrap();
    q.heartbeat("default", "w", Duration::from_secs(60), now)
        .await
        .unwrap();
    q.enqueue_batch(&pieces(&spec("b"), 5, &["w"], now))
        .await
        .unwrap();
    q.enqueue_batch(&pieces(&spec("b"), 6, &["w"], now))
        .await
        .unwrap();
    // A restart under the same id: what it held addressed to itself is its own again.
    let held = w.take(1).await.unwrap();
    assert_eq!(q.recover_worker("default", "w").await.unwrap(), 1);
    let again = w.take(10).await.unwrap();
    assert_eq!(again.len(), 2);
    assert_eq!(again[0].message.execution_id, held[0].message.execution_id);
    // Released on a stop, it goes back to its own list, not to the shared queue...
    for d in &again {
        assert!(q.release(d).await.unwrap());
    }
    assert_eq!(q.depth("default").await.unwrap(), 0);
    // ...and the clean stop leaves both to be ended failed.
    assert!(q.deregister("default", "w").await.unwrap());
    let orphans = q.take_orphans("default", "other", 10).await.unwrap();
    assert_eq!(orphans.len(), 2);
    // Enqueued to a worker that is not registered: an orphan at once.
    q.enqueue_batch(&pieces(&spec("b"), 7, &["w"], now))
        .await
        .unwrap();
    assert_eq!(
        q.take_orphans("default", "other", 10).await.unwrap().len(),
        1
    );
}

#[tokio::test]
async fn a_kill_removes_an_addressed_message_where_it_waits() {
    let q = queue().await;
    let now = UtcMillis::now();
    let mut w1 = q.consumer("default", "w1", BLOCK, now).await.unwrap();
    let _w2 = q.consumer("default", "w2", BLOCK, now).await.unwrap();
    let sent = pieces(&spec("b"), 5, &["w1", "w2", "gone"], now);
    q.enqueue_batch(&sent).await.unwrap();
    let running = w1.take(1).await.unwrap();
    let s = spec("b");
    let kills = q.kill_task("default", &s.namespace, "b").await.unwrap();
    let mut states: Vec<_> = kills.iter().map(|k| (k.execution_id, k.state)).collect();
    states.sort_by_key(|(id, _)| *id);
    let mut want = vec![
        (sent[0].execution_id, ax_queue::KillState::Running),
        (sent[1].execution_id, ax_queue::KillState::Waiting),
        (sent[2].execution_id, ax_queue::KillState::Waiting),
    ];
    want.sort_by_key(|(id, _)| *id);
    assert_eq!(states, want, "the one on w2's list and the orphan removed");
    assert_eq!(running.len(), 1);
    assert!(q
        .take_orphans("default", "w1", 10)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_stopping_worker_is_alive_but_no_longer_live_for_a_broadcast() {
    let q = queue().await;
    let now = UtcMillis::now();
    let ttl = Duration::from_secs(60);
    for w in ["a", "b"] {
        q.consumer("default", w, BLOCK, now).await.unwrap();
        q.heartbeat("default", w, ttl, now).await.unwrap();
    }
    assert_eq!(q.live_workers("default").await.unwrap(), ["a", "b"]);
    q.heartbeat_stopping("default", "b", ttl, now)
        .await
        .unwrap();
    assert_eq!(q.live_workers("default").await.unwrap(), ["a"]);
    // Still alive to the reaper, however old its registration.
    let later = now.add(Duration::from_secs(40));
    assert_eq!(
        q.reap("default", later, Duration::from_secs(30))
            .await
            .unwrap(),
        0
    );
    assert!(q.last_heartbeat("default", "b").await.unwrap().is_some());
}

#[tokio::test]
async fn the_first_leader_to_address_a_fire_fixes_its_workers() {
    let q = queue().await;
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let first = q
        .fix_fanout_workers("default", ExecutionId::from_u128(1), &names(&["a", "c"]))
        .await
        .unwrap();
    assert_eq!(first, names(&["a", "c"]));
    // A successor that lost the fire's progress and lists other workers: the first list.
    let again = q
        .fix_fanout_workers(
            "default",
            ExecutionId::from_u128(1),
            &names(&["a", "b", "c"]),
        )
        .await
        .unwrap();
    assert_eq!(again, names(&["a", "c"]));
    // Another fire is addressed on its own.
    let other = q
        .fix_fanout_workers("default", ExecutionId::from_u128(2), &names(&["b"]))
        .await
        .unwrap();
    assert_eq!(other, names(&["b"]));
}
