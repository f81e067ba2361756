//! Long jobs of Rust handlers: an attempt that ends after its handler returned
//! ([`ax_scheduler_core::handler::Context::defer`]).
//!
//! It is the `http.async` contract without the HTTP: deferring opens the attempt's
//! awaiting record with a fresh completion token (as the pool does before an async request
//! goes out) and marks it accepted, so when the handler returns the pool moves it to
//! awaiting and frees its slot, exactly as for a receiver's `202`. The [`Deferred`] the
//! handler keeps then reports progress and the end through the same scripts the completion
//! API runs ([`crate::awaiting::end_waiting`]): the console and `GET /api/v1/executions/{id}`
//! show it waiting with its progress, its deadline moves with each report, and the first
//! end counts (a second, or one after the deadline, is refused).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ax_queue::{
    CompletionToken, Delivery, EndBy, EndResult, ExecutionMessage, Opened,
    Progress as QueueProgress, ProgressResult, Queue, ReportedEnd, ReportedStatus,
};
use ax_scheduler_core::handler::{Deferred, Finisher, Progress, ShellFuture};
use ax_scheduler_core::{HandlerError, UtcMillis};

use crate::awaiting::{end_waiting, Completion, WaitingEnd};

/// How often an end that found its attempt moving to awaiting reads it again.
const MOVED_ROUNDS: usize = 20;

/// What a pool gives an attempt so that its handler may defer its end.
/// Holds only the queue and the physical queue's name until the handler defers: most
/// attempts never do.
#[derive(Debug)]
pub struct LongJob {
    queue: Queue,
    name: String,
    started: UtcMillis,
    opened: Mutex<Option<Completion>>,
}

impl LongJob {
    /// For an attempt taken from the physical queue `name`, started at `started`.
    pub(crate) fn new(queue: Queue, name: String, started: UtcMillis) -> Self {
        LongJob {
            queue,
            name,
            started,
            opened: Mutex::new(None),
        }
    }

    /// The completion contract of a deferred attempt, for the pool to conclude it with.
    pub(crate) fn opened(&self) -> Option<Completion> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Completion>> {
        self.opened.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the attempt of `message`, run by `worker`, for a later end and hands out its
    /// [`Deferred`].
    pub(crate) async fn defer(
        &self,
        worker: &str,
        message: &ExecutionMessage,
    ) -> Result<Deferred, HandlerError> {
        // The opening reads the message's id, attempt and timeout only.
        let d = &Delivery {
            queue: self.name.clone(),
            worker_id: worker.to_owned(),
            raw: String::new(),
            message: message.clone(),
            limited_wait: None,
        };
        let token = CompletionToken::issue(&d.queue, d.message.attempt);
        let opened = self
            .queue
            .open_awaiting(d, &token, self.started)
            .await
            .map_err(|e| HandlerError::Retryable(format!("cannot defer the attempt: {e}")))?;
        if let Opened::Early(_) = opened {
            // A Deferred of an earlier delivery of this attempt ended it: the pool's
            // redelivery finds that end at its next try.
            return Err(HandlerError::Retryable(
                "this attempt was already ended by an earlier delivery".into(),
            ));
        }
        // No URL: the handler reports through its Deferred, not by calling the API.
        let completion = Completion::new(String::new(), token.clone());
        completion.accept();
        *self.lock() = Some(completion);
        Ok(Deferred::new(Arc::new(Finish {
            queue: self.queue.clone(),
            name: d.queue.clone(),
            id: d.message.execution_id,
            attempt: d.message.attempt,
            timeout: d.message.timeout(),
            hash: token.hash(),
        })))
    }
}

/// The end of one deferred attempt.
struct Finish {
    queue: Queue,
    name: String,
    id: ax_scheduler_core::ExecutionId,
    attempt: u32,
    timeout: Duration,
    hash: String,
}

fn refused(what: &str) -> HandlerError {
    HandlerError::Permanent(format!("the deferred attempt {what}"))
}

fn unreachable_redis(e: ax_queue::QueueError) -> HandlerError {
    HandlerError::Retryable(format!("cannot reach the queue: {e}"))
}

impl Finish {
    async fn end(&self, result: Result<(), HandlerError>) -> Result<(), HandlerError> {
        let now = self.queue.config().clock.now();
        let (status, message, retryable) = match result {
            Ok(()) => (ReportedStatus::Succeeded, None, false),
            Err(e) => (
                ReportedStatus::Failed,
                Some(e.to_string()),
                e.is_retryable(),
            ),
        };
        let reported = ReportedEnd {
            status,
            message: message.map(ax_scheduler_core::execution::shown_error),
            output: None,
            retryable,
            at: now,
        };
        for _ in 0..MOVED_ROUNDS {
            let Some(rec) = self
                .queue
                .awaiting_record(&self.name, self.id)
                .await
                .map_err(unreachable_redis)?
            else {
                return Err(refused("is gone (its record expired)"));
            };
            let by = EndBy::Completion(&self.hash);
            let end = WaitingEnd::Reported(reported.clone());
            let (result, ended) = end_waiting(&self.queue, &rec, self.attempt, by, end, now, true)
                .await
                .map_err(unreachable_redis)?;
            match result {
                EndResult::Ended => {
                    // The end is in the queue's end log: relayed here, or by its sweeper
                    // if this relay fails.
                    if let Some(ended) = ended {
                        if let Err(e) = self.queue.relay_ends(&[ended.end]).await {
                            tracing::warn!(execution_id = %self.id, error = %e, "ended; its end is relayed from the end log later");
                        }
                    }
                    return Ok(());
                }
                // Kept for the worker, which has not moved it to awaiting yet and settles it.
                EndResult::Early => return Ok(()),
                EndResult::Moved => tokio::time::sleep(Duration::from_millis(50)).await,
                EndResult::Done(end) | EndResult::Stale { end, .. } => {
                    return Err(refused(&format!("had ended `{end}`")))
                }
                EndResult::Forbidden | EndResult::Gone | EndResult::Alive => {
                    return Err(refused("is no longer this one's to end"))
                }
            }
        }
        Err(HandlerError::Retryable(
            "the attempt is still being moved to awaiting; complete again".into(),
        ))
    }
}

impl Finisher for Finish {
    fn progress(&self, progress: Progress) -> ShellFuture<'_> {
        Box::pin(async move {
            let now = self.queue.config().clock.now();
            let progress = QueueProgress {
                percent: progress.percent.map(|p| p.clamp(0.0, 100.0)),
                message: progress.note.map(ax_scheduler_core::execution::shown_error),
                at: now,
            };
            let deadline = now.add(self.timeout);
            let recorded = self
                .queue
                .progress_awaiting(
                    &self.name,
                    self.id,
                    self.attempt,
                    &self.hash,
                    deadline,
                    &progress,
                )
                .await
                .map_err(unreachable_redis)?;
            match recorded {
                ProgressResult::Recorded => Ok(()),
                ProgressResult::Done(end) | ProgressResult::Stale { end, .. } => {
                    Err(refused(&format!("had ended `{end}`")))
                }
                ProgressResult::Forbidden | ProgressResult::Gone => {
                    Err(refused("is no longer this one's to report on"))
                }
            }
        })
    }

    fn complete(&self, result: Result<(), HandlerError>) -> ShellFuture<'_> {
        Box::pin(self.end(result))
    }
}
