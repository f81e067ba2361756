//! Long jobs that report back (`http.async`): the worker's side of the completion contract,
//! and the one way a waiting attempt ends.
//!
//! Before the request of an async task is sent, the pool opens the attempt with a new
//! [`ax_queue::CompletionToken`] and hands the handler a [`Completion`]: the URL to call
//! and the token, which the `http` handler puts in its request. A receiver that answers
//! `202 Accepted` takes the job on ([`Completion::accept`]); the pool then moves the message
//! to awaiting (its slot and permit are freed at once) and forgets it. What follows is written by
//! whoever ends it, through [`end_waiting`]: the completion call on any replica's API, or
//! the deadline loop of any pool ([`expire_due`]) when neither a completion nor a progress
//! report came within the task's timeout. The retry decision is the worker's own
//! ([`crate::retry::decide`]), so a waiting attempt fails, retries and dead-letters as one
//! that ran in the worker, and its report (history, event for the leader) is the same
//! [`ExecutionReport`]. Its end record goes to the queue's end log in the same script that
//! ends it, as a worker's settle does: whoever ended it relays it ([`Ended::end`]), and if
//! that process dies first the sweeper of the queue's end log does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ax_queue::{
    AwaitSettle, AwaitingRecord, AwaitingState, CompletionToken, DlqEntry, EndBy, EndRecord,
    EndResult, PendingEnd, Queue, ReportedEnd, ReportedStatus,
};
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, UtcMillis};

use crate::reporter::ExecutionReport;
use crate::retry::{decide, RetryDecision};

/// Where `/api/v1` takes the completion of execution `id`, under the API's public base URL.
pub fn completion_url(public_url: &str, id: ax_scheduler_core::ExecutionId) -> String {
    format!(
        "{}/api/v1/executions/{id}/complete",
        public_url.trim_end_matches('/')
    )
}

/// The completion contract of one attempt, handed to its handler.
#[derive(Clone, Debug)]
pub struct Completion {
    url: String,
    token: CompletionToken,
    accepted: Arc<AtomicBool>,
}

impl Completion {
    /// The contract for an attempt: where to report, with which token.
    pub fn new(url: String, token: CompletionToken) -> Self {
        Completion {
            url,
            token,
            accepted: Arc::default(),
        }
    }

    /// The completion URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token, for the request to the receiver only (never log it).
    pub fn token(&self) -> &str {
        self.token.expose()
    }

    /// The receiver took the job on (it answered 202): the attempt waits for its
    /// completion.
    pub fn accept(&self) {
        self.accepted.store(true, Ordering::Release);
    }

    /// Whether the receiver took the job on.
    pub fn accepted(&self) -> bool {
        self.accepted.load(Ordering::Acquire)
    }
}

/// How a waiting attempt ends.
#[derive(Clone, Debug)]
pub enum WaitingEnd {
    /// The job reported it.
    Reported(ReportedEnd),
    /// Neither a completion nor a progress report came by the deadline.
    Deadline,
}

/// The attempt's end as the history shows it, and what is written with it, decided at
/// `now` by the task's retry policy for a message at `attempt`.
pub fn attempt_end(
    message: &ax_queue::ExecutionMessage,
    end: &WaitingEnd,
    now: UtcMillis,
) -> (AttemptEnd, AwaitSettle) {
    let (outcome, error, retryable) = match end {
        WaitingEnd::Reported(r) if r.status == ReportedStatus::Succeeded => {
            return (AttemptEnd::succeeded(), AwaitSettle::Done)
        }
        WaitingEnd::Reported(r) => (
            AttemptOutcome::Failed,
            r.message
                .clone()
                .unwrap_or_else(|| "the job reported a failure".into()),
            r.retryable,
        ),
        WaitingEnd::Deadline => (
            AttemptOutcome::TimedOut,
            format!(
                "no completion or progress report within the task's timeout ({:?})",
                message.timeout()
            ),
            true,
        ),
    };
    let error = ax_scheduler_core::execution::shown_error(error);
    let decision = if retryable {
        decide(
            &message.retry,
            message.attempt,
            message.first_attempt_at,
            now,
            &mut rand::rng(),
        )
    } else {
        RetryDecision::GiveUp {
            reason: "not retryable".into(),
        }
    };
    match decision {
        RetryDecision::RetryAt { due, .. } => (
            AttemptEnd {
                outcome,
                error: Some(error.clone()),
                retry_at: Some(due),
            },
            AwaitSettle::Retry {
                next: message.next_attempt(error, now),
                due,
            },
        ),
        RetryDecision::GiveUp { reason } => {
            let full = format!("{error} ({reason})");
            (
                AttemptEnd {
                    outcome,
                    error: Some(error),
                    retry_at: None,
                },
                AwaitSettle::DeadLetter(DlqEntry::from_message(message, full, now)),
            )
        }
    }
}

/// A waiting attempt this call ended: its report, and its end record as the end log holds
/// it, which the caller relays ([`Queue::relay_ends`]).
#[derive(Clone, Debug)]
pub struct Ended {
    /// The attempt's report.
    pub report: ExecutionReport,
    /// Its end record and where it sits in the end log.
    pub end: PendingEnd,
}

/// Ends the waiting attempt `rec` describes as `end`, if `by` may (the token's hash for a
/// completion, a passed deadline, a kill): one script writes the end, the retry or dead
/// letter that follows and the end's record in the queue's end log (with the attempt's
/// history entry when `keep_history`). Returns what the queue said and, when this call
/// ended it, the attempt's report and record, which the caller relays.
pub async fn end_waiting(
    queue: &Queue,
    rec: &AwaitingRecord,
    attempt: u32,
    by: EndBy<'_>,
    end: WaitingEnd,
    now: UtcMillis,
    keep_history: bool,
) -> ax_queue::Result<(EndResult, Option<Ended>)> {
    let Some((_, message)) = &rec.message else {
        return end_pending(queue, rec, attempt, by, &end, now).await;
    };
    let (attempt_end, settle) = attempt_end(message, &end, now);
    let reported = match &end {
        WaitingEnd::Reported(r) => r.clone(),
        _ => ReportedEnd {
            status: ReportedStatus::Failed,
            message: attempt_end.error.clone(),
            output: None,
            retryable: false,
            at: now,
        },
    };
    let label = attempt_end.outcome.as_str();
    let report = ExecutionReport {
        output: reported.output.clone(),
        awaited: true,
        ..ExecutionReport::of(
            message,
            &message.queue,
            rec.worker.clone(),
            rec.started_at,
            now,
            attempt_end,
        )
    };
    let record = EndRecord {
        event: report.finished_event(),
        history: keep_history.then(|| report.history()),
    };
    let (result, logged) = queue
        .end_awaiting(
            message,
            attempt,
            by,
            label,
            &settle,
            &reported,
            Some(&record),
            now,
        )
        .await?;
    if result != EndResult::Ended {
        return Ok((result, None));
    }
    let end = PendingEnd {
        logged: logged.map(|id| (message.queue.to_string(), id)),
        record,
    };
    Ok((EndResult::Ended, Some(Ended { report, end })))
}

/// A completion of an attempt whose record has no message yet (its worker has not seen the
/// 202): kept for the worker, which settles it.
async fn end_pending(
    queue: &Queue,
    rec: &AwaitingRecord,
    attempt: u32,
    by: EndBy<'_>,
    end: &WaitingEnd,
    now: UtcMillis,
) -> ax_queue::Result<(EndResult, Option<Ended>)> {
    let (EndBy::Completion(hash), WaitingEnd::Reported(reported)) = (by, end) else {
        return Ok((EndResult::Gone, None));
    };
    let result = queue
        .end_awaiting_early(&rec.queue, rec.execution_id, attempt, hash, reported, now)
        .await?;
    Ok((result, None))
}

/// Most expired attempts one round of [`expire_due`] ends per queue.
const EXPIRE_BATCH: usize = 100;

/// Ends the attempts of `queue` whose deadline passed by `now` (timed out: retried or
/// dead-lettered as the task says). Any number of pools may run this at once: each attempt
/// is ended by one of them. Returns the attempts this call ended, to relay (their records,
/// with history entries when `keep_history`, are in the end log already).
pub async fn expire_due(
    queue: &Queue,
    name: &str,
    now: UtcMillis,
    keep_history: bool,
) -> ax_queue::Result<Vec<Ended>> {
    let mut reports = Vec::new();
    for id in queue.due_awaiting(name, now, EXPIRE_BATCH).await? {
        let rec = match queue.awaiting_record(name, id).await? {
            Some(rec) if rec.state == AwaitingState::Waiting => rec,
            // Its record expired, or it ended meanwhile (its end took it out of the set).
            Some(_) => continue,
            None => {
                queue.forget_awaiting(name, id).await?;
                continue;
            }
        };
        let attempt = rec.attempt;
        if let (_, Some(report)) = end_waiting(
            queue,
            &rec,
            attempt,
            EndBy::Deadline,
            WaitingEnd::Deadline,
            now,
            keep_history,
        )
        .await?
        {
            reports.push(report);
        }
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn message(max_retries: u32) -> ax_queue::ExecutionMessage {
        let mut spec = ax_testkit::spec("t", "default", "http");
        spec.timeout = Duration::from_secs(60);
        Arc::make_mut(&mut spec.retry).max_retries = max_retries;
        ax_queue::ExecutionMessage::for_fire(&spec, UtcMillis(1), UtcMillis(1), 0)
    }

    fn failed(retryable: bool) -> WaitingEnd {
        WaitingEnd::Reported(ReportedEnd {
            status: ReportedStatus::Failed,
            message: Some("disk full".into()),
            output: None,
            retryable,
            at: UtcMillis(2),
        })
    }

    #[test]
    fn a_waiting_attempt_ends_as_the_retry_policy_says() {
        let now = UtcMillis(10_000);
        let (end, settle) = attempt_end(&message(2), &WaitingEnd::Deadline, now);
        assert_eq!(end.outcome, AttemptOutcome::TimedOut);
        assert!(end.retry_at.is_some());
        let AwaitSettle::Retry { next, .. } = settle else {
            panic!("no retry")
        };
        assert_eq!(next.attempt, 1);
        assert!(next.previous_errors[0].error.contains("no completion"));

        let (end, settle) = attempt_end(&message(2), &failed(true), now);
        assert_eq!(
            (end.outcome, end.error.as_deref()),
            (AttemptOutcome::Failed, Some("disk full"))
        );
        assert!(matches!(settle, AwaitSettle::Retry { .. }));
        // A failure the job says is final, or one without retries left, is dead-lettered.
        for (m, e) in [(message(2), failed(false)), (message(0), failed(true))] {
            let (end, settle) = attempt_end(&m, &e, now);
            assert_eq!(end.retry_at, None);
            assert!(matches!(settle, AwaitSettle::DeadLetter(_)));
        }
        let ok = WaitingEnd::Reported(ReportedEnd {
            status: ReportedStatus::Succeeded,
            message: None,
            output: None,
            retryable: true,
            at: now,
        });
        let (end, settle) = attempt_end(&message(0), &ok, now);
        assert_eq!(end.outcome, AttemptOutcome::Succeeded);
        assert!(matches!(settle, AwaitSettle::Done));
    }

    #[test]
    fn the_completion_url_is_under_the_public_api() {
        let id = ax_scheduler_core::ExecutionId::from_u128(0);
        assert_eq!(
            completion_url("https://ax.example.com/", id),
            format!("https://ax.example.com/api/v1/executions/{id}/complete")
        );
        let c = Completion::new("u".into(), CompletionToken::issue("default", 0));
        assert!(!c.accepted());
        c.accept();
        assert!(c.accepted());
        assert!(!format!("{c:?}").contains(&c.token()[8..40]));
    }
}
