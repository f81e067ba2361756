//! Settling a message (release, retry, dead letter) and reporting an attempt's end.
//!
//! Settling is retried through short Redis outages ([`settle`]), because an unsettled
//! message of a live worker would sit in its processing list until that worker stops. Every
//! end, the pool's own and those the deadline loop finds, is told through [`publish`], so
//! the history and the reporter see them all the same way.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ax_queue::{Delivery, QueueError, RetrySettle};
use ax_scheduler_core::{AttemptEnd, ReconnectBackoff, UtcMillis};

use super::Shared;
use crate::reporter::ExecutionReport;
use crate::retry::{decide, RetryDecision};

/// Waits between failed Redis calls of the fetch and settle loops.
pub(super) fn error_backoff() -> ReconnectBackoff {
    ReconnectBackoff::new(Duration::from_millis(100), Duration::from_secs(5))
}

/// Runs a settling operation, retrying retryable errors for up to `settle_retry_for`.
/// `None` when it could not be done (logged).
pub(super) async fn settle<T, F, Fut>(sh: &Shared, op: &'static str, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, QueueError>>,
{
    let start = tokio::time::Instant::now();
    let mut backoff = error_backoff();
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) if e.is_retryable() && start.elapsed() < sh.cfg.settle_retry_for => {
                tracing::warn!(op, error = %e, "settling failed; retrying");
                let wait = backoff.next_delay(&mut rand::rng());
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                tracing::error!(op, error = %e, "settling failed; the message stays with this worker until it stops");
                return None;
            }
        }
    }
}

/// Gives an unfinished message back to the front of its queue.
pub(super) async fn give_back(sh: &Shared, d: &Delivery) {
    let q = &sh.queue;
    if settle(sh, "release", || q.release(d)).await == Some(true) {
        sh.counters.released.fetch_add(1, Ordering::Relaxed);
    }
}

/// Dead-letters a message for good, counting it.
pub(super) async fn dead_letter(sh: &Shared, d: &Delivery, reason: &str, now: UtcMillis) {
    let q = &sh.queue;
    if settle(sh, "dead_letter", || q.dead_letter(d, reason, now)).await == Some(true) {
        sh.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a failed attempt was settled.
pub(super) enum Failed {
    /// A retry is due then, or none follows (dead-lettered).
    RetryAt(Option<UtcMillis>),
    /// An operator killed the execution before its retry was scheduled: none is.
    Killed,
}

/// Schedules a retry or dead-letters.
pub(super) async fn fail(
    sh: &Shared,
    d: &Delivery,
    error: &str,
    now: UtcMillis,
    retryable: bool,
) -> Failed {
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
            let next = msg.next_attempt(error, now);
            let q = &sh.queue;
            if settle(sh, "retry_later", || q.retry_later(d, &next, due)).await
                == Some(RetrySettle::Killed)
            {
                tracing::warn!("killed by an operator; no retry");
                return Failed::Killed;
            }
            sh.counters.retried.fetch_add(1, Ordering::Relaxed);
            Failed::RetryAt(Some(due))
        }
        RetryDecision::GiveUp { reason } => {
            tracing::error!(%error, %reason, "attempt failed; dead-lettering");
            dead_letter(sh, d, &format!("{error} ({reason})"), now).await;
            Failed::RetryAt(None)
        }
    }
}

/// Reports the end of an attempt this pool ran.
pub(super) async fn finish(
    sh: &Shared,
    d: &Delivery,
    started: UtcMillis,
    end: AttemptEnd,
    output: Option<ax_scheduler_core::AttemptOutput>,
) {
    let msg = &d.message;
    let report = ExecutionReport {
        output,
        ..ExecutionReport::of(
            msg,
            &d.queue,
            sh.cfg.worker_id.clone(),
            started,
            sh.cfg.clock.now(),
            end,
        )
    };
    publish(sh, &report).await;
}

/// Records an attempt's end in the history (if this pool writes it) and tells the reporter.
pub(super) async fn publish(sh: &Shared, report: &ExecutionReport) {
    if sh.cfg.record_history {
        if let Err(e) = sh
            .queue
            .record_history(&report.namespace, &report.task_id, &report.history())
            .await
        {
            tracing::warn!(error = %e, "could not record execution history");
        }
    }
    sh.reporter.on_finished(report).await;
}
