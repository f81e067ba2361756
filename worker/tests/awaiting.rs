//! Long jobs that report back (`http.async`) through a real pool and Redis: a receiver's 202
//! frees the worker's slot, the completion ends the attempt once, and an attempt nobody
//! completes times out, is retried, and is dead-lettered at the end of its retries.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use ax_queue::{EndBy, EndResult, Queue, ReportedEnd, ReportedStatus, TokenClaim};
use ax_scheduler_core::{AttemptOutcome, TaskSpec, UtcMillis};
use ax_worker::awaiting::{end_waiting, WaitingEnd};
use ax_worker::{ChannelReporter, HandlerRegistry, ReportEvent, WorkerConfig, WorkerPool};
use common::*;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

fn async_spec(id: &str, port: u16, timeout: Duration, retries: u32) -> TaskSpec {
    let mut s = spec(id, "http");
    s.timeout = timeout;
    Arc::make_mut(&mut s.retry).max_retries = retries;
    Arc::make_mut(&mut s.retry).initial_interval = Duration::from_millis(10);
    s.http = Some(ax_scheduler_core::task::HttpTarget {
        url: format!("http://127.0.0.1:{port}/202"),
        headers: Default::default(),
        follow_redirects: false,
        await_completion: true,
    });
    s
}

fn config(id: &str) -> WorkerConfig {
    WorkerConfig {
        concurrency: 1,
        prefetch: 0,
        http_allow_cidrs: vec![ax_worker::egress::parse_allow_cidr("127.0.0.0/8").unwrap()],
        completion_public_url: Some("http://127.0.0.1:1".into()),
        ..fast_config(id)
    }
}

fn start(q: &Queue, cfg: WorkerConfig) -> (Running, UnboundedReceiver<ReportEvent>) {
    let (reporter, rx) = ChannelReporter::new();
    let pool = WorkerPool::new(
        q.clone(),
        cfg,
        HandlerRegistry::with_builtins(),
        Arc::new(reporter),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    let handle = tokio::spawn(async move { pool.run(c).await });
    (Running { cancel, handle }, rx)
}

/// The next finished report, or `None` within `limit`.
async fn finished_within(
    rx: &mut UnboundedReceiver<ReportEvent>,
    limit: Duration,
) -> Option<ax_worker::ExecutionReport> {
    let until = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(ReportEvent::Finished(r))) => return Some(*r),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

fn header(request: &str, name: &str) -> Option<String> {
    request.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

#[tokio::test]
async fn a_202_frees_the_slot_and_the_completion_ends_the_attempt_once() {
    let receiver = Receiver::on("127.0.0.1").await;
    let q = queue().await;
    let (running, mut rx) = start(&q, config("w"));
    let long = async_spec("long", receiver.port, Duration::from_secs(30), 0);
    let m = msg(&long, 1);
    q.enqueue(&m).await.unwrap();
    assert!(eventually(Duration::from_secs(10), || receiver.requests().len() == 1).await);
    let request = receiver.requests().remove(0);
    let token = header(&request, "x-ax-completion-token").expect("a token header");
    let url = header(&request, "x-ax-completion-url").unwrap();
    assert_eq!(
        url,
        format!(
            "http://127.0.0.1:1/api/v1/executions/{}/complete",
            m.execution_id
        )
    );
    assert!(request.contains(&format!("\"completion_token\":\"{token}\"")));
    // The one slot is free: another task runs while the long one waits.
    let quick = spec("quick", "log");
    q.enqueue(&msg(&quick, 2)).await.unwrap();
    let r = finished_within(&mut rx, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(&*r.task_id, "quick");
    assert_eq!(q.awaiting_len("default").await.unwrap(), 1);

    let claim = TokenClaim::parse(&token).unwrap();
    let rec = q
        .awaiting_record(&claim.queue, m.execution_id)
        .await
        .unwrap()
        .unwrap();
    assert!(rec.token_matches(claim.attempt, &token));
    let done = WaitingEnd::Reported(ReportedEnd {
        status: ReportedStatus::Succeeded,
        message: None,
        output: None,
        retryable: true,
        at: UtcMillis::now(),
    });
    let hash = ax_queue::token_hash(&token);
    let (result, report) = end_waiting(
        &q,
        &rec,
        claim.attempt,
        EndBy::Completion(&hash),
        done.clone(),
        UtcMillis::now(),
        true,
    )
    .await
    .unwrap();
    assert_eq!(result, EndResult::Ended);
    let ended = report.unwrap();
    assert_eq!(ended.report.end.outcome, AttemptOutcome::Succeeded);
    assert!(ended.report.awaited);
    assert_eq!(ended.report.worker_id, "w");
    // The script that ended it put its end in the queue's end log: a caller that dies now
    // leaves it to the sweeper. Relayed, it leaves the log.
    let (log, _) = ended.end.logged.clone().expect("the end is in the end log");
    assert_eq!(q.end_log_len(&log).await.unwrap(), 1);
    assert!(ended.end.record.history.is_some());
    q.relay_ends(&[ended.end]).await.unwrap();
    assert_eq!(q.end_log_len(&log).await.unwrap(), 0);
    // Repeated: no second end, nothing more in the log.
    let (again, none) = end_waiting(
        &q,
        &rec,
        claim.attempt,
        EndBy::Completion(&hash),
        done,
        UtcMillis::now(),
        true,
    )
    .await
    .unwrap();
    assert_eq!(again, EndResult::Done("succeeded".into()));
    assert!(none.is_none());
    assert_eq!(q.end_log_len(&log).await.unwrap(), 0);
    // The pool itself reports no end for the awaiting attempt.
    assert!(finished_within(&mut rx, Duration::from_millis(500))
        .await
        .is_none());
    running.stop().await;
}

#[tokio::test]
async fn an_attempt_nobody_completes_times_out_is_retried_and_dead_lettered() {
    let receiver = Receiver::on("127.0.0.1").await;
    let q = queue().await;
    let (running, mut rx) = start(&q, config("w"));
    let forgotten = async_spec("forgotten", receiver.port, Duration::from_millis(600), 1);
    q.enqueue(&msg(&forgotten, 1)).await.unwrap();
    let first = finished_within(&mut rx, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(first.end.outcome, AttemptOutcome::TimedOut);
    assert!(first.awaited);
    assert!(first.end.retry_at.is_some(), "{:?}", first.end);
    let second = finished_within(&mut rx, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        (second.attempt, second.end.outcome),
        (1, AttemptOutcome::TimedOut)
    );
    assert_eq!(second.end.retry_at, None);
    assert_eq!(q.dlq_list("default", 0, 10).await.unwrap().len(), 1);
    assert_eq!(receiver.requests().len(), 2);
    assert_eq!(q.awaiting_len("default").await.unwrap(), 0);
    running.stop().await;
}

#[tokio::test]
async fn an_async_task_without_a_public_url_fails_saying_what_to_set() {
    let receiver = Receiver::on("127.0.0.1").await;
    let q = queue().await;
    let cfg = WorkerConfig {
        completion_public_url: None,
        ..config("w")
    };
    let (running, mut rx) = start(&q, cfg);
    q.enqueue(&msg(
        &async_spec("long", receiver.port, Duration::from_secs(5), 3),
        1,
    ))
    .await
    .unwrap();
    let r = finished_within(&mut rx, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        (r.end.outcome, r.end.retry_at),
        (AttemptOutcome::Failed, None)
    );
    assert!(r.end.error.unwrap().contains("http.public_url"));
    assert!(receiver.requests().is_empty());
    running.stop().await;
}
