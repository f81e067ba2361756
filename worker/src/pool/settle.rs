//! Settling a message (ack, release, retry, dead letter) together with its attempt's end.
//!
//! An attempt that ends is settled with its end record ([`ax_queue::EndRecord`]: the
//! leader's event and the history entry), which the settle script appends to the queue's end
//! log in the same step, so a worker that dies after settling cannot lose the end: it is
//! either unsettled (redelivered) or in the log. The pool then hands the record to its relay
//! ([`super::relay`]), which writes it to the event stream and the history and clears it
//! from the log; the queue's sweep relays what a dead worker left. Every end, the pool's own
//! and those the deadline loop finds, goes through [`finish`], so the relay and the
//! reporter see them all the same way.
//!
//! Settling is retried through short Redis outages (`retrying.rs`), because an unsettled
//! message of a live worker would sit in its processing list until that worker stops.

use std::sync::atomic::Ordering;

use ax_queue::{Delivery, EndRecord, PendingEnd, RetrySettle, Settled};
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, AttemptOutput, UtcMillis};

use super::retrying::settle;
use super::Shared;
use crate::reporter::ExecutionReport;
use crate::retry::{decide, RetryDecision};

/// Gives an unfinished message back to the front of its queue.
pub(super) async fn give_back(sh: &Shared, d: &Delivery) {
    let q = &sh.queue;
    if settle(sh, "release", || q.release(d)).await == Some(true) {
        sh.counters.released.fetch_add(1, Ordering::Relaxed);
    }
}

/// An attempt of a delivery that is ending: what its report is made of besides its end.
pub(super) struct Ending<'a> {
    /// The delivery.
    pub(super) d: &'a Delivery,
    /// The worker the attempt counts as run by.
    pub(super) worker: &'a str,
    /// When it started.
    pub(super) started: UtcMillis,
    /// The start of the handler's answer, if it left one.
    pub(super) output: Option<AttemptOutput>,
}

impl Ending<'_> {
    /// The attempt's report, ended as `end` at `now`.
    pub(super) fn report(&self, end: AttemptEnd, now: UtcMillis) -> ExecutionReport {
        ExecutionReport {
            output: self.output.clone(),
            ..ExecutionReport::of(
                &self.d.message,
                &self.d.queue,
                self.worker.to_owned(),
                self.started,
                now,
                end,
            )
        }
    }
}

/// The record an end is settled with: the leader's event and, when this pool keeps the
/// history, the attempt's entry.
pub(super) fn end_record(sh: &Shared, report: &ExecutionReport) -> EndRecord {
    EndRecord {
        event: report.finished_event(),
        history: sh.cfg.record_history.then(|| report.history()),
    }
}

/// Dead-letters a message for good with the attempt's end (`DeadLettered`, or the failure
/// `end` given), counting it, and finishes the attempt.
pub(super) async fn dead_letter(
    sh: &Shared,
    ending: &Ending<'_>,
    reason: &str,
    end: AttemptEnd,
    now: UtcMillis,
) {
    let d = ending.d;
    let report = ending.report(end, now);
    let record = end_record(sh, &report);
    let q = &sh.queue;
    let settled = settle(sh, "dead_letter", || {
        q.dead_letter_recorded(d, reason, now, Some(&record))
    })
    .await;
    if settled.as_ref().is_some_and(Settled::was_taken) {
        sh.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }
    finish(sh, &report, record, settled).await;
}

/// Schedules a retry or dead-letters a failed attempt, and finishes it.
pub(super) async fn fail(
    sh: &Shared,
    ending: &Ending<'_>,
    outcome: AttemptOutcome,
    error: String,
    now: UtcMillis,
    retryable: bool,
) {
    let d = ending.d;
    let msg = &d.message;
    let decision = if retryable {
        decide(
            &msg.retry,
            msg.attempt,
            msg.first_attempt_at,
            now,
            &mut rand::rng(),
        )
    } else {
        RetryDecision::GiveUp {
            reason: "not retryable".into(),
        }
    };
    match decision {
        RetryDecision::RetryAt { due, wait } => {
            tracing::warn!(%error, retry_in = ?wait, "attempt failed; retry scheduled");
            let next = msg.next_attempt(&error, now);
            let retrying = ending.report(
                AttemptEnd {
                    outcome,
                    error: Some(error),
                    retry_at: Some(due),
                },
                now,
            );
            // An operator's kill found by the same script ends the execution instead.
            let killed = ending.report(
                AttemptEnd::new(
                    AttemptOutcome::Killed,
                    Some(ax_queue::StopOrder::Killed.reason().to_owned()),
                ),
                now,
            );
            let records = (end_record(sh, &retrying), end_record(sh, &killed));
            let q = &sh.queue;
            let settled = settle(sh, "retry_later", || {
                q.retry_later_recorded(d, &next, due, Some((&records.0, &records.1)))
            })
            .await;
            let (report, record, settled) = match settled {
                Some((RetrySettle::Killed, logged)) => {
                    tracing::warn!("killed by an operator; no retry");
                    (killed, records.1, Some(Settled::Done(logged)))
                }
                Some((RetrySettle::Scheduled, logged)) => {
                    sh.counters.retried.fetch_add(1, Ordering::Relaxed);
                    (retrying, records.0, Some(Settled::Done(logged)))
                }
                Some((RetrySettle::NotTaken, _)) => (retrying, records.0, Some(Settled::NotTaken)),
                None => (retrying, records.0, None),
            };
            finish(sh, &report, record, settled).await;
        }
        RetryDecision::GiveUp { reason } => {
            tracing::error!(%error, %reason, "attempt failed; dead-lettering");
            let end = AttemptEnd {
                outcome,
                error: Some(error.clone()),
                retry_at: None,
            };
            dead_letter(sh, ending, &format!("{error} ({reason})"), end, now).await;
        }
    }
}

/// After an end was settled (`settled`: how; `None` when settling failed): relays its
/// record, from the end log when the settle put it there, else written directly (the
/// message was no longer taken, or Redis could not be reached: best effort, as nothing else
/// will write it), and tells the reporter.
pub(super) async fn finish(
    sh: &Shared,
    report: &ExecutionReport,
    record: EndRecord,
    settled: Option<Settled>,
) {
    let logged = match settled {
        Some(Settled::Done(Some(id))) => Some((report.queue.clone(), id)),
        _ => None,
    };
    super::relay::relay(sh, PendingEnd { logged, record });
    sh.reporter.on_finished(report).await;
}

/// Reports an end that was settled elsewhere (an `http.async` attempt past its deadline),
/// its record in the end log already: relayed, and told to the reporter.
pub(super) async fn publish(sh: &Shared, ended: crate::awaiting::Ended) {
    super::relay::relay(sh, ended.end);
    sh.reporter.on_finished(&ended.report).await;
}
