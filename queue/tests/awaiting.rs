//! Executions waiting for a completion (`http.async`) against a real Redis: moving to awaiting frees
//! the worker, the completion and the deadline race and exactly one wins, a repeat finds the
//! end, a kill ends it for good, a completion that overtakes the 202 is kept for the worker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use ax_queue::{
    AwaitSettle, AwaitStart, AwaitingState, CompletionToken, Delivery, EndBy, EndResult,
    ExecutionMessage, KillState, Opened, Progress, ProgressResult, Queue, QueueConfig, ReportedEnd,
    ReportedStatus,
};
use ax_scheduler_core::UtcMillis;
use ax_testkit::unique_name;

async fn queue() -> Queue {
    let cfg = QueueConfig {
        prefix: unique_name("axa"),
        ..QueueConfig::default()
    };
    common::connect(cfg).await
}

/// One execution of an async http task, taken by worker `w`.
async fn taken(q: &Queue) -> Delivery {
    let mut s = ax_testkit::spec("long", "default", "http");
    s.timeout = Duration::from_secs(5);
    s.http = Some(ax_scheduler_core::task::HttpTarget {
        url: "http://127.0.0.1:9/".into(),
        headers: Default::default(),
        follow_redirects: false,
        await_completion: true,
    });
    let now = UtcMillis::now();
    // Each call a later fire: fires at or before a task's newest one are duplicates.
    static FIRE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    let fire = UtcMillis(FIRE.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    q.enqueue(&ExecutionMessage::for_fire(&s, fire, now, 0))
        .await
        .unwrap();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(200), now)
        .await
        .unwrap();
    c.take(1).await.unwrap().pop().unwrap()
}

fn end(status: ReportedStatus) -> ReportedEnd {
    ReportedEnd {
        status,
        message: None,
        output: None,
        retryable: true,
        at: UtcMillis::now(),
    }
}

/// `d` opened with a fresh token and moved to awaiting until `deadline`; returns the token.
async fn awaiting_until(q: &Queue, d: &Delivery, deadline: UtcMillis) -> CompletionToken {
    let token = CompletionToken::issue(&d.queue, d.message.attempt);
    assert_eq!(
        q.open_awaiting(d, &token, UtcMillis::now()).await.unwrap(),
        Opened::Opened
    );
    assert_eq!(
        q.start_awaiting(d, deadline).await.unwrap(),
        AwaitStart::Awaiting
    );
    token
}

async fn complete(q: &Queue, d: &Delivery, token: &CompletionToken) -> EndResult {
    q.end_awaiting(
        &d.message,
        d.message.attempt,
        EndBy::Completion(&token.hash()),
        "succeeded",
        &AwaitSettle::Done,
        &end(ReportedStatus::Succeeded),
        None,
        UtcMillis::now(),
    )
    .await
    .unwrap()
    .0
}

async fn time_out(q: &Queue, d: &Delivery, now: UtcMillis) -> EndResult {
    let next = d.message.next_attempt("no completion", now);
    q.end_awaiting(
        &d.message,
        d.message.attempt,
        EndBy::Deadline,
        "timed_out",
        &AwaitSettle::Retry { next, due: now },
        &end(ReportedStatus::Failed),
        None,
        now,
    )
    .await
    .unwrap()
    .0
}

#[tokio::test]
async fn an_awaiting_execution_frees_its_worker_and_ends_once_by_its_completion() {
    let q = queue().await;
    let d = taken(&q).await;
    let token = awaiting_until(&q, &d, UtcMillis::now().add(Duration::from_secs(60))).await;
    assert!(q
        .processing_entries("default", "w")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(q.awaiting_len("default").await.unwrap(), 1);
    let rec = q
        .awaiting_record("default", d.message.execution_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.state, AwaitingState::Waiting);
    assert!(rec.token_matches(0, token.expose()));
    assert_eq!(rec.message.unwrap().1, d.message);

    // A forged token is refused; the right one ends it, and a repeat finds it ended.
    let forged = CompletionToken::issue("default", 0);
    assert_eq!(complete(&q, &d, &forged).await, EndResult::Forbidden);
    assert_eq!(complete(&q, &d, &token).await, EndResult::Ended);
    assert_eq!(
        complete(&q, &d, &token).await,
        EndResult::Done("succeeded".into())
    );
    assert_eq!(q.awaiting_len("default").await.unwrap(), 0);
    // The deadline that passes afterwards finds nothing to do.
    let late = UtcMillis::now().add(Duration::from_secs(120));
    assert_eq!(
        time_out(&q, &d, late).await,
        EndResult::Done("succeeded".into())
    );
    assert_eq!(q.delayed_len("default").await.unwrap(), 0);
}

#[tokio::test]
async fn a_completion_racing_the_deadline_has_exactly_one_winner() {
    let q = queue().await;
    // Another connection, as another replica's reaper would have: the two calls really race.
    let other = common::connect(q.config().clone()).await;
    for _ in 0..40 {
        let d = taken(&q).await;
        let due = UtcMillis::now();
        let token = awaiting_until(&q, &d, due).await;
        let later = due.add(Duration::from_millis(1));
        let (a, b) = tokio::join!(complete(&q, &d, &token), time_out(&other, &d, later));

        let winners = [&a, &b].iter().filter(|r| ***r == EndResult::Ended).count();
        assert_eq!(winners, 1, "{a:?} {b:?}");
        // The loser learns the winner's end.
        match (a, b) {
            (EndResult::Ended, EndResult::Done(e)) => assert_eq!(e, "succeeded"),
            (EndResult::Done(e), EndResult::Ended) => {
                assert_eq!(e, "timed_out");
                // The retry was scheduled with the deadline's win, once.
                assert_eq!(q.delayed_len("default").await.unwrap(), 1);
                q.promote_due("default", UtcMillis::now(), 10)
                    .await
                    .unwrap();
                let mut c = q
                    .consumer("default", "w", Duration::from_millis(200), UtcMillis::now())
                    .await
                    .unwrap();
                let retry = c.take(10).await.unwrap();
                assert_eq!(retry.len(), 1);
                assert_eq!(retry[0].message.attempt, 1);
                q.ack(&retry[0]).await.unwrap();
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn progress_moves_the_deadline_and_a_late_attempt_is_told_it_is_stale() {
    let q = queue().await;
    let d = taken(&q).await;
    let start = UtcMillis::now();
    let token = awaiting_until(&q, &d, start).await;
    let progress = Progress {
        percent: Some(40.0),
        message: Some("copying".into()),
        at: start,
    };
    let moved = start.add(Duration::from_secs(60));
    assert_eq!(
        q.progress_awaiting(
            "default",
            d.message.execution_id,
            0,
            &token.hash(),
            moved,
            &progress
        )
        .await
        .unwrap(),
        ProgressResult::Recorded
    );
    // The old deadline no longer ends it.
    assert_eq!(
        time_out(&q, &d, start.add(Duration::from_secs(1))).await,
        EndResult::Alive
    );
    assert!(q
        .due_awaiting("default", start.add(Duration::from_secs(1)), 10)
        .await
        .unwrap()
        .is_empty());
    let rec = q
        .awaiting_record("default", d.message.execution_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.progress.unwrap().message.as_deref(), Some("copying"));
    // The new one does, and retries it; the retry opens attempt 1 with its own token.
    let after = moved.add(Duration::from_millis(1));
    assert_eq!(
        q.due_awaiting("default", after, 10).await.unwrap(),
        vec![d.message.execution_id]
    );
    assert_eq!(time_out(&q, &d, after).await, EndResult::Ended);
    q.promote_due("default", after, 10).await.unwrap();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(200), UtcMillis::now())
        .await
        .unwrap();
    let retry = c.take(1).await.unwrap().pop().unwrap();
    let t1 = CompletionToken::issue("default", 1);
    q.open_awaiting(&retry, &t1, UtcMillis::now())
        .await
        .unwrap();
    // Attempt 0's job calling now hears that its attempt timed out and 1 is current.
    assert_eq!(
        complete(&q, &d, &token).await,
        EndResult::Stale {
            current: 1,
            end: "timed_out".into()
        }
    );
}

#[tokio::test]
async fn a_killed_execution_refuses_its_completion() {
    let q = queue().await;
    let d = taken(&q).await;
    let token = awaiting_until(&q, &d, UtcMillis::now().add(Duration::from_secs(60))).await;
    let kill = q
        .kill_execution("default", d.message.execution_id)
        .await
        .unwrap();
    assert_eq!(kill.state, KillState::AwaitingCompletion);
    assert!(kill.state.removed());
    assert_eq!(
        complete(&q, &d, &token).await,
        EndResult::Done("killed".into())
    );
    assert_eq!(q.awaiting_len("default").await.unwrap(), 0);
    assert_eq!(
        q.kill_execution("default", d.message.execution_id)
            .await
            .unwrap()
            .state,
        KillState::Gone
    );
}

#[tokio::test]
async fn a_completion_that_overtakes_the_202_is_settled_by_the_worker_and_never_resent() {
    let q = queue().await;
    let d = taken(&q).await;
    let token = CompletionToken::issue("default", 0);
    q.open_awaiting(&d, &token, UtcMillis::now()).await.unwrap();
    assert_eq!(complete(&q, &d, &token).await, EndResult::Early);
    // Repeated before the worker saw its 202: the same end, once.
    assert_eq!(
        complete(&q, &d, &token).await,
        EndResult::Done("succeeded".into())
    );
    let AwaitStart::Early(e) = q
        .start_awaiting(&d, UtcMillis::now().add(Duration::from_secs(60)))
        .await
        .unwrap()
    else {
        panic!("the early completion was not handed to the worker")
    };
    assert_eq!(e.status, ReportedStatus::Succeeded);
    // The message is still the worker's to settle; a worker that takes it back after a
    // crash learns the end instead of sending the request again.
    assert_eq!(q.processing_entries("default", "w").await.unwrap().len(), 1);
    let again = CompletionToken::issue("default", 0);
    assert!(matches!(
        q.open_awaiting(&d, &again, UtcMillis::now()).await.unwrap(),
        Opened::Early(_)
    ));
}

#[tokio::test]
async fn a_kill_while_the_request_is_sent_stops_the_move_to_awaiting() {
    let q = queue().await;
    let d = taken(&q).await;
    let token = CompletionToken::issue("default", 0);
    q.open_awaiting(&d, &token, UtcMillis::now()).await.unwrap();
    let kill = q
        .kill_execution("default", d.message.execution_id)
        .await
        .unwrap();
    assert_eq!(kill.state, KillState::Running);
    assert_eq!(
        q.start_awaiting(&d, UtcMillis::now().add(Duration::from_secs(60)))
            .await
            .unwrap(),
        AwaitStart::Killed
    );
    assert_eq!(
        complete(&q, &d, &token).await,
        EndResult::Done("killed".into())
    );
}

/// An awaiting execution lets go of its concurrency slot, as an ack does: the next execution
/// of the same key, waiting for the slot, is taken at once.
#[tokio::test]
async fn awaiting_frees_the_execution_s_concurrency_slot() {
    let q = queue().await;
    let json = r#"{"handler":"http","schedule":{"every":"60s"},"overlap":"allow",
        "http":{"url":"http://127.0.0.1:9/","async":true},
        "concurrency":{"key":"customer-1","max":1}}"#;
    let s = ax_scheduler_core::TaskSpec::from_json(json.as_bytes(), "default", "limited").unwrap();
    let now = UtcMillis::now();
    let msgs: Vec<ExecutionMessage> = (1..=2)
        .map(|i| ExecutionMessage::for_fire(&s, UtcMillis(i), now, 0))
        .collect();
    q.enqueue_batch(&msgs).await.unwrap();
    let mut c = q
        .consumer("default", "w", Duration::from_millis(200), now)
        .await
        .unwrap();
    let first = c.take(10).await.unwrap();
    assert_eq!(first.len(), 1, "max 1: the second waits for the slot");
    let token = awaiting_until(&q, &first[0], UtcMillis(now.0 + 60_000)).await;
    let second = c.take(10).await.unwrap();
    assert_eq!(second.len(), 1, "awaiting freed the slot");
    assert_eq!(second[0].message.fire_at, UtcMillis(2));
    assert_eq!(complete(&q, &first[0], &token).await, EndResult::Ended);
}
