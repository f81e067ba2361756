//! Scheduled executions against a real Redis (or the test cluster): promoted once when due by
//! any number of racing promoters, never before; cancelled and moved in O(log n); the
//! idempotency key answers the first submission; pages soonest first across partitions, as a
//! model says; and a running promoter fires on time, woken by an earlier head.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ax_queue::{
    new_execution_id, ExecutionMessage, Promoter, PromoterConfig, Queue, QueueConfig,
    ScheduleOutcome, ScheduledRef, Submission,
};
use ax_scheduler_core::{ExecutionId, TaskOptions, UtcMillis};
use ax_testkit::unique_name;
use proptest::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const BLOCK: Duration = Duration::from_millis(100);

async fn queue(partitions: u32) -> Queue {
    let cfg = QueueConfig {
        prefix: unique_name("axsched"),
        partitions: BTreeMap::from([("orders".to_owned(), partitions)]),
        ..QueueConfig::default()
    };
    common::connect(cfg).await
}

fn submission(due: i64) -> Submission {
    Submission {
        namespace: "shop".into(),
        name: "close-unpaid-order".into(),
        handler: "orders.close".into(),
        payload: json!({"order": due}),
        queue: "orders".into(),
        due: UtcMillis(due),
        options: TaskOptions::new(),
        requested_by: None,
    }
}

/// An instant an hour ahead: nothing due then is promoted at submission.
fn hour_ahead() -> i64 {
    UtcMillis::now().0 + 3_600_000
}

fn message(due: i64) -> ExecutionMessage {
    submission(due).message(new_execution_id(), UtcMillis::now())
}

fn added(outcomes: &[ScheduleOutcome]) -> Vec<ScheduledRef> {
    outcomes
        .iter()
        .map(|o| match o {
            ScheduleOutcome::Added(r) => r.clone(),
            other => panic!("not added: {other:?}"),
        })
        .collect()
}

/// Every execution id waiting in `orders`'s queued sets, taken by a consumer.
async fn take_all(q: &Queue) -> Vec<ExecutionId> {
    let mut ids = Vec::new();
    for name in q.physical_queues("orders") {
        let mut c = q
            .consumer(&name, "w1", BLOCK, UtcMillis::now())
            .await
            .unwrap();
        loop {
            let batch = c.take(100).await.unwrap();
            if batch.is_empty() {
                break;
            }
            ids.extend(batch.iter().map(|d| d.message.execution_id));
        }
    }
    ids
}

async fn promote_all(q: &Queue, now: i64) -> usize {
    let mut total = 0;
    for name in q.physical_queues("orders") {
        loop {
            let (moved, _) = q
                .promote_scheduled(&name, UtcMillis(now), 50)
                .await
                .unwrap();
            total += moved;
            if moved < 50 {
                break;
            }
        }
    }
    total
}

#[tokio::test]
async fn due_executions_are_promoted_once_by_racing_promoters_and_never_early() {
    let q = queue(4).await;
    let t0 = hour_ahead();
    let msgs: Vec<ExecutionMessage> = (0..400).map(|i| message(t0 + 10_000 + i % 7)).collect();
    let refs = added(&q.schedule_batch(&msgs).await.unwrap());
    assert_eq!(q.scheduled_count("orders").await.unwrap(), 400);
    assert_eq!(promote_all(&q, t0 + 9_999).await, 0, "none is due yet");
    assert!(take_all(&q).await.is_empty());
    // Eight promoters race over every partition at once.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { promote_all(&q, t0 + 20_000).await })
        })
        .collect();
    let mut moved = 0;
    for r in racers {
        moved += r.await.unwrap();
    }
    assert_eq!(moved, 400, "each promoted by exactly one promoter");
    let taken = take_all(&q).await;
    let unique: BTreeSet<_> = taken.iter().copied().collect();
    assert_eq!(taken.len(), 400, "promoted once each");
    let wanted: BTreeSet<_> = refs.iter().map(|r| r.execution_id).collect();
    assert_eq!(unique, wanted);
    assert_eq!(q.scheduled_count("orders").await.unwrap(), 0);
    // The partitions share the load.
    let used: BTreeSet<_> = refs.iter().map(|r| r.queue.clone()).collect();
    assert!(used.len() >= 3, "{used:?}");
}

#[tokio::test]
async fn a_cancelled_execution_never_runs_and_a_moved_one_runs_at_its_new_instant() {
    let q = queue(1).await;
    let t0 = hour_ahead();
    let refs = added(
        &q.schedule_batch(&[
            message(t0 + 1_000),
            message(t0 + 1_000),
            message(t0 + 1_000),
        ])
        .await
        .unwrap(),
    );
    let cancelled = q.cancel_scheduled(&refs[0]).await.unwrap();
    assert_eq!(
        cancelled.map(|m| m.execution_id),
        Some(refs[0].execution_id)
    );
    assert_eq!(q.cancel_scheduled(&refs[0]).await.unwrap(), None, "once");
    assert!(q.reschedule(&refs[1], UtcMillis(t0 + 5_000)).await.unwrap());
    assert!(!q.reschedule(&refs[0], UtcMillis(t0 + 5_000)).await.unwrap());
    let moved = q.scheduled(&refs[1]).await.unwrap().unwrap();
    assert_eq!(
        (moved.due, moved.message.fire_at),
        (UtcMillis(t0 + 5_000), UtcMillis(t0 + 5_000))
    );

    assert_eq!(promote_all(&q, t0 + 2_000).await, 1);
    assert_eq!(take_all(&q).await, vec![refs[2].execution_id]);
    assert_eq!(promote_all(&q, t0 + 5_000).await, 1);
    assert_eq!(take_all(&q).await, vec![refs[1].execution_id]);
    // Promoted: no longer scheduled, so neither cancelled nor moved.
    assert_eq!(q.cancel_scheduled(&refs[1]).await.unwrap(), None);
    assert!(q.scheduled(&refs[1]).await.unwrap().is_none());
}

#[tokio::test]
async fn an_idempotency_key_answers_the_first_submission_within_its_namespace() {
    let q = queue(4).await;
    let keyed = |ns: &str| {
        let mut s = submission(hour_ahead());
        s.namespace = ns.into();
        s.options = TaskOptions::new().idempotency_key("order-42");
        s.message(new_execution_id(), UtcMillis::now())
    };
    let first = q.schedule_batch(&[keyed("shop")]).await.unwrap();
    let ScheduleOutcome::Added(original) = &first[0] else {
        panic!("{first:?}")
    };
    // Again later, and twice within one batch: each answers the original.
    let again = q
        .schedule_batch(&[keyed("shop"), keyed("other"), keyed("shop")])
        .await
        .unwrap();
    assert_eq!(again[0], ScheduleOutcome::Duplicate(original.clone()));
    assert!(matches!(again[1], ScheduleOutcome::Added(_)), "{again:?}");
    assert_eq!(again[2], ScheduleOutcome::Duplicate(original.clone()));
    assert_eq!(q.scheduled_count("orders").await.unwrap(), 2);
}

#[tokio::test]
async fn a_submission_due_already_is_queued_at_once() {
    let q = queue(4).await;
    let refs = added(
        &q.schedule_batch(&[message(UtcMillis::now().0 - 5)])
            .await
            .unwrap(),
    );
    assert_eq!(take_all(&q).await, vec![refs[0].execution_id]);
    assert_eq!(q.scheduled_count("orders").await.unwrap(), 0);
}

#[tokio::test]
async fn a_batch_past_its_bound_is_refused_whole() {
    let q = queue(1).await;
    let msgs: Vec<_> = (0..=ax_queue::SCHEDULE_BATCH_MAX as i64)
        .map(|i| message(hour_ahead() + i))
        .collect();
    assert!(q.schedule_batch(&msgs).await.is_err());
    assert_eq!(q.scheduled_count("orders").await.unwrap(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Pages read one after another list every scheduled execution once, soonest first (ties
    /// by id), whatever the page size and however the dues collide, as a sorted list says.
    #[test]
    fn pages_list_everything_soonest_first(
        dues in prop::collection::vec(0i64..40, 1..120),
        page in 1usize..25,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let q = queue(3).await;
            let t0 = hour_ahead();
            let msgs: Vec<_> = dues.iter().map(|d| message(t0 + *d)).collect();
            let refs = added(&q.schedule_batch(&msgs).await.unwrap());
            let mut model: Vec<(i64, String)> = refs
                .iter()
                .zip(&dues)
                .map(|(r, d)| (t0 + *d, r.execution_id.to_string()))
                .collect();
            model.sort();
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let entries = q.scheduled_page("orders", after, page).await.unwrap();
                assert!(entries.len() <= page);
                let Some(last) = entries.last() else { break };
                after = Some((last.due, last.reference.execution_id));
                seen.extend(entries.iter().map(|e| (e.due.0, e.reference.execution_id.to_string())));
            }
            assert_eq!(seen, model);
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_promoter_fires_on_time_and_an_earlier_head_wakes_it() {
    let q = queue(1).await;
    let cancel = CancellationToken::new();
    let promoter = Promoter::new(
        q.clone(),
        "orders",
        PromoterConfig {
            max_wait: Duration::from_secs(30),
            ..PromoterConfig::default()
        },
    )
    .unwrap();
    let running = tokio::spawn(promoter.run(cancel.clone()));
    let mut consumer = q
        .consumer("orders", "w1", Duration::from_secs(5), UtcMillis::now())
        .await
        .unwrap();
    // The promoter waits for a head 20 s away (its cap is 30 s); then one due in 300 ms
    // comes: the wake token must cut the wait short.
    let far = message(UtcMillis::now().0 + 20_000);
    q.schedule_batch(&[far]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut lateness = Vec::new();
    for _ in 0..5 {
        let due = UtcMillis::now().0 + 300;
        let started = Instant::now();
        q.schedule_batch(&[message(due)]).await.unwrap();
        let got = loop {
            if let Some(d) = consumer.take(1).await.unwrap().pop() {
                break d;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "not promoted");
            consumer.wait_for_work().await.unwrap();
        };
        assert_eq!(got.message.fire_at, UtcMillis(due));
        let late = UtcMillis::now().0 - due;
        assert!(late >= 0, "taken {late} ms before it was due");
        lateness.push(late);
    }
    cancel.cancel();
    running.await.unwrap();
    lateness.sort();
    eprintln!("scheduled: lateness of 5 promotions, ms: {lateness:?}");
    assert!(lateness[4] < 50, "late by {lateness:?} ms");
}

#[tokio::test]
async fn a_promoted_message_is_the_submitted_one_to_the_payloads_last_digit() {
    let q = queue(1).await;
    let t0 = hour_ahead();
    let mut s = submission(t0);
    s.payload = json!({"big": 9_007_199_254_740_993_u64, "neg": -12345678901234_i64,
        "float": 0.1, "text": "ordre n°7 \"payé\" \\ ✓", "nested": [1, {"a": null}], "empty": {}});
    s.options = TaskOptions::new().priority(8).idempotency_key("k-1");
    let sent = s.message(new_execution_id(), UtcMillis::now());
    let refs = added(&q.schedule_batch(std::slice::from_ref(&sent)).await.unwrap());
    let waiting = q.scheduled(&refs[0]).await.unwrap().unwrap();
    assert_eq!(waiting.message.payload, sent.payload);
    assert_eq!(promote_all(&q, t0 + 5).await, 1);
    let mut c = q
        .consumer("orders", "w1", BLOCK, UtcMillis::now())
        .await
        .unwrap();
    let got = c.take(1).await.unwrap().pop().unwrap().message;
    let mut want = sent.clone();
    // Enqueued when promoted; everything else as submitted.
    want.enqueued_at = got.enqueued_at;
    want.first_attempt_at = got.first_attempt_at;
    assert_eq!(got, want);
    assert!(
        got.enqueued_at.0 >= t0 + 5 - 1,
        "enqueued at the promotion's instant"
    );
}

#[tokio::test]
async fn garbage_in_the_scheduled_set_is_dead_lettered_not_run_or_lost_silently() {
    let q = queue(1).await;
    let t0 = hour_ahead();
    let mut conn = q.connection();
    let k = q.keys();
    let id = new_execution_id().to_string();
    redis::pipe()
        .zadd(k.scheduled("orders"), &id, t0)
        .hset(k.scheduled_jobs("orders"), &id, "not json at all")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    assert_eq!(promote_all(&q, t0).await, 1);
    let mut c = q
        .consumer("orders", "w1", BLOCK, UtcMillis::now())
        .await
        .unwrap();
    assert!(c.take(1).await.unwrap().is_empty(), "nothing runs");
    let dead = q.dlq_list("orders", 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
}
