//! Awaiting: the part of an attempt that belongs to `http.async` (see [`crate::awaiting`]).
//!
//! Such an attempt is opened in Redis with a fresh completion token before its request goes
//! out ([`open_completion`]), so a completion that came before a crash ends the attempt
//! without sending the request again. When the receiver accepts it (202), the attempt
//! moves to awaiting with a deadline a full timeout away ([`conclude`]) and the pool lets go of it; its
//! completion or its deadline ends it later. Every other end closes the opened attempt and
//! goes on as any attempt's. Kept apart so the execution reads the same for every handler:
//! it calls in here once before its handler runs and once after.

use ax_queue::{AwaitStart, Delivery, ReportedEnd, ReportedStatus, StopOrder};
use ax_scheduler_core::{AttemptOutcome, UtcMillis};

use super::retrying::settle;
use super::{Shared, Verdict};
use crate::awaiting::Completion;
use crate::handler::OutputSlot;

/// What a pool does before an attempt of an `http.async` task: opens it with a new token
/// and returns its completion contract, or the end the attempt has already (a completion
/// that came before a crash; or no public URL to offer, a permanent failure).
pub(super) async fn open_completion(
    sh: &Shared,
    d: &Delivery,
    started: UtcMillis,
) -> (Option<Completion>, Option<ReportedEnd>) {
    let msg = &d.message;
    if !msg.http.as_ref().is_some_and(|h| h.await_completion) {
        return (None, None);
    }
    let Some(base) = &sh.cfg.completion_public_url else {
        return (
            None,
            Some(failure(
                "the task waits for a completion (http.async), but this replica has no \
                 public URL for the job to call back (set `http.public_url` in ax.toml)",
                false,
                sh.cfg.clock.now(),
            )),
        );
    };
    let token = ax_queue::CompletionToken::issue(&d.queue, msg.attempt);
    let q = &sh.queue;
    match settle(sh, "open_awaiting", || q.open_awaiting(d, &token, started)).await {
        Some(ax_queue::Opened::Opened) => {
            let url = crate::awaiting::completion_url(base, msg.execution_id);
            (Some(Completion::new(url, token)), None)
        }
        Some(ax_queue::Opened::Early(ended)) => (None, Some(ended)),
        None => (
            None,
            Some(failure(
                "cannot record the attempt's completion token in Redis",
                true,
                sh.cfg.clock.now(),
            )),
        ),
    }
}

fn failure(message: &str, retryable: bool, at: UtcMillis) -> ReportedEnd {
    ReportedEnd {
        status: ReportedStatus::Failed,
        message: Some(message.to_owned()),
        output: None,
        retryable,
        at,
    }
}

/// A reported end as the pool's verdict, its output kept as the attempt's.
pub(super) fn reported_outcome(ended: &ReportedEnd, output: &OutputSlot) -> Verdict {
    if let Some(o) = &ended.output {
        output.set(o.clone());
    }
    match ended.status {
        ReportedStatus::Succeeded => Verdict::succeeded(),
        ReportedStatus::Failed => Verdict::new(
            AttemptOutcome::Failed,
            Some(
                ended
                    .message
                    .clone()
                    .unwrap_or_else(|| "the job reported a failure".into()),
            ),
            ended.retryable,
        ),
    }
}

/// The end recorded for an opened attempt that ended at its worker.
fn closed_label(outcome: AttemptOutcome) -> &'static str {
    match outcome {
        // Succeeded without a 202: the receiver answered at once.
        AttemptOutcome::Succeeded => "answered",
        other => other.as_str(),
    }
}

/// What the pool does next with an opened attempt whose handler is done.
pub(super) enum Concluded {
    /// Awaiting its completion: the pool is done with the attempt.
    Awaiting,
    /// The message was gone: nothing to settle or report.
    NotTaken,
    /// The attempt ends at the pool: settled and reported as any other.
    Ended(Verdict),
}

/// What comes of an opened attempt once its handler is done with `verdict`: awaiting when
/// the receiver accepted it, else closed and ending as the verdict says.
pub(super) async fn conclude(
    sh: &Shared,
    d: &Delivery,
    completion: &Completion,
    verdict: Verdict,
    output: &OutputSlot,
) -> Concluded {
    if verdict.outcome == AttemptOutcome::Succeeded && completion.accepted() {
        let concluded = start_awaiting(sh, d, output).await;
        if matches!(concluded, Concluded::NotTaken) {
            tracing::warn!(
                "accepted, but the message was no longer taken (the reaper gave it back)"
            );
        }
        concluded
    } else {
        let q = &sh.queue;
        settle(sh, "close_awaiting", || {
            q.close_awaiting(d, closed_label(verdict.outcome))
        })
        .await;
        Concluded::Ended(verdict)
    }
}

/// Moves an accepted attempt to awaiting its completion until a full timeout from now.
async fn start_awaiting(sh: &Shared, d: &Delivery, output: &OutputSlot) -> Concluded {
    let deadline = sh.cfg.clock.now().add(d.message.timeout());
    let q = &sh.queue;
    match settle(sh, "start_awaiting", || q.start_awaiting(d, deadline)).await {
        Some(AwaitStart::Awaiting) => Concluded::Awaiting,
        Some(AwaitStart::NotTaken) => Concluded::NotTaken,
        // The job's completion overtook its 202: the attempt ends here with it.
        Some(AwaitStart::Early(ended)) => Concluded::Ended(reported_outcome(&ended, output)),
        Some(AwaitStart::Killed) => Concluded::Ended(Verdict::new(
            AttemptOutcome::Killed,
            Some(StopOrder::Killed.reason().to_owned()),
            false,
        )),
        Some(AwaitStart::Gone) | None => Concluded::Ended(Verdict::new(
            AttemptOutcome::Failed,
            Some("accepted, but the attempt could not start awaiting its completion".into()),
            true,
        )),
    }
}
