//! The end log against a real Redis: a settle that ends an attempt records its end in the
//! same script, so a worker that dies before relaying it loses nothing; the relay and the
//! sweep move it on to the leader's events and the history exactly once per record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ax_queue::{
    Delivery, EndRecord, ExecutionMessage, Maintenance, MaintenanceConfig, Queue, QueueConfig,
    RetrySettle, Settled,
};
use ax_scheduler_core::{AttemptOutcome, ExecutionEvent, UtcMillis};
use ax_testkit::unique_name;

async fn queue() -> Queue {
    common::connect(QueueConfig {
        prefix: unique_name("axe"),
        ..QueueConfig::default()
    })
    .await
}

/// Fires 0..n of task `t`, enqueued and taken by worker `w`.
async fn taken(q: &Queue, n: i64) -> Vec<Delivery> {
    let now = UtcMillis::now();
    let s = ax_testkit::spec("t", "default", "log");
    let msgs: Vec<_> = (0..n)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 0))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(200), now)
        .await
        .unwrap();
    c.take(usize::try_from(n).unwrap()).await.unwrap()
}

/// The ends the leader would read, as (execution id, outcome label).
async fn events(q: &Queue) -> Vec<(ax_scheduler_core::ExecutionId, String)> {
    q.read_events(None, 100)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| e.record)
        .filter_map(|r| match r.kind {
            ExecutionEvent::Finished { end, .. } => Some((r.execution_id, end.label().to_owned())),
            ExecutionEvent::Started { .. } => None,
        })
        .collect()
}

#[tokio::test]
async fn a_settled_end_survives_its_worker_and_is_relayed_once_by_the_sweep() {
    let q = queue().await;
    let ds = taken(&q, 3).await;
    let records: Vec<EndRecord> = ds
        .iter()
        .map(|d| common::end_record(d, AttemptOutcome::Succeeded))
        .collect();
    let items: Vec<_> = ds.iter().zip(&records).map(|(d, r)| (d, Some(r))).collect();
    let settled = q.ack_recorded(&items).await.unwrap();
    assert!(settled.iter().all(|s| matches!(s, Settled::Done(Some(_)))));
    // The worker dies here, before relaying: nothing reached the leader or the history yet,
    // and the ends wait in the log.
    let ns = ds[0].message.namespace.to_string();
    assert!(events(&q).await.is_empty());
    assert!(q.history(&ns, "t", 10).await.unwrap().is_empty());
    assert_eq!(q.end_log_len("default").await.unwrap(), 3);
    // Acking again finds nothing held and records nothing more.
    let again = q.ack_recorded(&items).await.unwrap();
    assert!(again.iter().all(|s| *s == Settled::NotTaken));
    assert_eq!(q.end_log_len("default").await.unwrap(), 3);

    // Another worker's maintenance relays them once they are old enough.
    let mut m = Maintenance::new(
        q.clone(),
        MaintenanceConfig {
            sweeper: "w2".into(),
            relay_after: Duration::ZERO,
            ..MaintenanceConfig::default()
        },
    );
    let mut relayed = 0;
    for _ in 0..4 {
        relayed += m.step(UtcMillis::now()).await.ends_relayed;
    }
    assert_eq!(relayed, 3);
    assert_eq!(q.end_log_len("default").await.unwrap(), 0);
    let seen = events(&q).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    for d in &ds {
        assert!(seen.contains(&(d.message.execution_id, "succeeded".to_owned())));
    }
    assert_eq!(q.history(&ns, "t", 10).await.unwrap().len(), 3);
    // Nothing is relayed twice.
    for _ in 0..4 {
        assert_eq!(m.step(UtcMillis::now()).await.ends_relayed, 0);
    }
}

#[tokio::test]
async fn the_relay_writes_and_clears_and_a_young_record_is_left_to_its_worker() {
    let q = queue().await;
    let ds = taken(&q, 1).await;
    let r = common::end_record(&ds[0], AttemptOutcome::Succeeded);
    let settled = q.ack_recorded(&[(&ds[0], Some(&r))]).await.unwrap();
    let Settled::Done(Some(id)) = settled[0].clone() else {
        panic!("not recorded: {settled:?}");
    };
    // A sweep does not take a record younger than the relay age: its worker relays it.
    assert!(q
        .sweep_ends("default", "w2", Duration::from_secs(60), 10)
        .await
        .unwrap()
        .is_empty());
    q.relay_ends(&[ax_queue::PendingEnd {
        logged: Some(("default".into(), id)),
        record: r,
    }])
    .await
    .unwrap();
    assert_eq!(q.end_log_len("default").await.unwrap(), 0);
    assert_eq!(events(&q).await.len(), 1);
}

#[tokio::test]
async fn one_sweeper_at_a_time() {
    let q = queue().await;
    let ds = taken(&q, 1).await;
    let r = common::end_record(&ds[0], AttemptOutcome::Succeeded);
    q.ack_recorded(&[(&ds[0], Some(&r))]).await.unwrap();
    let first = q
        .sweep_ends("default", "w1", Duration::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    // w1 holds the sweep: w2 gets nothing while w1's claim lives, w1 gets it again.
    assert!(q
        .sweep_ends("default", "w2", Duration::ZERO, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        q.sweep_ends("default", "w1", Duration::ZERO, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_retry_and_a_dead_letter_record_the_end_that_applies() {
    let q = queue().await;
    let ds = taken(&q, 3).await;
    let due = UtcMillis::now().add(Duration::from_secs(60));
    // Scheduled: the retrying end is recorded.
    let retrying = common::end_record(&ds[0], AttemptOutcome::Failed);
    let killed = common::end_record(&ds[0], AttemptOutcome::Killed);
    let next = ds[0].message.next_attempt("boom", UtcMillis::now());
    let (how, logged) = q
        .retry_later_recorded(&ds[0], &next, due, Some((&retrying, &killed)))
        .await
        .unwrap();
    assert_eq!(how, RetrySettle::Scheduled);
    assert!(logged.is_some());
    // Killed meanwhile: the killed end is recorded instead, and no retry scheduled.
    q.kill_execution("default", ds[1].message.execution_id)
        .await
        .unwrap();
    let retrying = common::end_record(&ds[1], AttemptOutcome::Failed);
    let killed = common::end_record(&ds[1], AttemptOutcome::Killed);
    let next = ds[1].message.next_attempt("boom", UtcMillis::now());
    let (how, logged) = q
        .retry_later_recorded(&ds[1], &next, due, Some((&retrying, &killed)))
        .await
        .unwrap();
    assert_eq!(how, RetrySettle::Killed);
    assert!(logged.is_some());
    // Dead-lettered with its end.
    let dead = common::end_record(&ds[2], AttemptOutcome::DeadLettered);
    let settled = q
        .dead_letter_recorded(&ds[2], "gone", UtcMillis::now(), Some(&dead))
        .await
        .unwrap();
    assert!(matches!(settled, Settled::Done(Some(_))));

    let ends = q
        .sweep_ends("default", "w2", Duration::ZERO, 10)
        .await
        .unwrap();
    let outcomes: Vec<(ax_scheduler_core::ExecutionId, AttemptOutcome)> = ends
        .iter()
        .map(|e| match &e.record.event.kind {
            ExecutionEvent::Finished { end, .. } => (e.record.event.execution_id, end.outcome),
            ExecutionEvent::Started { .. } => panic!("a start in the end log"),
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (ds[0].message.execution_id, AttemptOutcome::Failed),
            (ds[1].message.execution_id, AttemptOutcome::Killed),
            (ds[2].message.execution_id, AttemptOutcome::DeadLettered),
        ]
    );
}

#[tokio::test]
async fn a_queue_tells_which_tasks_still_have_work_in_it() {
    let q = queue().await;
    let now = UtcMillis::now();
    let spec = |id: &str| ax_testkit::spec(id, "default", "log");
    // waiting: queued; running: held by a worker; retrying: in the delayed set; ending: its
    // end record not relayed; done: settled and relayed; never: nothing at all.
    for id in ["waiting", "running", "retrying", "ending", "done"] {
        let m = ExecutionMessage::for_fire(&spec(id), UtcMillis(1), now, 0);
        q.enqueue_batch(&[m]).await.unwrap();
    }
    let mut c = q
        .consumer("default", "w", Duration::from_millis(200), now)
        .await
        .unwrap();
    let taken = c.take(5).await.unwrap();
    let by = |id: &str| taken.iter().find(|d| &*d.message.task_id == id).unwrap();
    // Give `waiting` back to the queue: it waits again.
    assert!(q.release(by("waiting")).await.unwrap());
    let r = by("retrying");
    let next = r.message.next_attempt("boom", now);
    q.retry_later(r, &next, now.add(Duration::from_secs(60)))
        .await
        .unwrap();
    let e = by("ending");
    q.ack_recorded(&[(e, Some(&common::end_record(e, AttemptOutcome::Succeeded)))])
        .await
        .unwrap();
    assert!(q.ack(by("done")).await.unwrap());
    let ns = taken[0].message.namespace.to_string();
    let asked: Vec<(&str, &str)> = ["waiting", "running", "retrying", "ending", "done", "never"]
        .into_iter()
        .map(|id| (ns.as_str(), id))
        .collect();
    let live = q.tasks_with_work("default", &asked).await.unwrap();
    let mut live: Vec<&str> = live.iter().map(|(_, id)| id.as_str()).collect();
    live.sort_unstable();
    assert_eq!(live, ["ending", "retrying", "running", "waiting"]);
}

#[tokio::test]
async fn a_kill_that_removes_an_execution_records_its_end_in_the_same_step() {
    let q = queue().await;
    let now = UtcMillis::now();
    let s = ax_testkit::spec("t", "default", "log");
    let msgs: Vec<_> = (0..2)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 0))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let recorder = |m: &ExecutionMessage, _: Option<&ax_queue::AwaitingRecord>| {
        common::message_end_record(m, "-", "default", AttemptOutcome::Killed)
    };
    let kill = q
        .kill_execution_recorded("default", msgs[0].execution_id, Some(&recorder))
        .await
        .unwrap();
    assert_eq!(kill.state, ax_queue::KillState::Waiting);
    let end = kill.end.expect("the kill recorded the end");
    assert!(end.logged.is_some(), "in the end log");
    // The caller died before relaying: the sweep finds the end, and relays it once.
    let swept = q
        .sweep_ends("default", "w2", Duration::ZERO, 10)
        .await
        .unwrap();
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0].record, end.record);
    q.relay_ends(&swept).await.unwrap();
    assert_eq!(
        events(&q).await,
        vec![(msgs[0].execution_id, "killed".to_owned())]
    );
    assert_eq!(q.end_log_len("default").await.unwrap(), 0);
    // A kill that removes nothing records nothing.
    let again = q
        .kill_execution_recorded("default", msgs[0].execution_id, Some(&recorder))
        .await
        .unwrap();
    assert_eq!(again.state, ax_queue::KillState::AlreadyKilled);
    assert!(again.end.is_none());
    assert_eq!(q.end_log_len("default").await.unwrap(), 0);
}
