//! One attempt, from its running slot to its end: the handler under its timeout with panics
//! caught, then the outcome settled and reported.
//!
//! Each message runs in its own task; the handler itself runs in a further spawned task so
//! a panic surfaces as a `JoinError` (recorded with its message) instead of unwinding
//! through the pool, and so a timeout can abort it. The attempt is a short sequence of
//! steps that each decide one thing (may it start, how did the handler end, is it awaiting,
//! how is its message settled), passing on a [`Verdict`], so no step knows the others'
//! details.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ax_queue::{Delivery, ExecutionMessage, Settled, StopOrder};
use ax_scheduler_core::redact::{redact_values, target_secret_values};
use ax_scheduler_core::{attempt, AttemptEnd, AttemptOutcome, UtcMillis};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::ack::{ack, Acks};
use super::awaiting::{conclude, open_completion, reported_outcome, Concluded};
use super::reconcile::mark_in_hand;
use super::settle::{dead_letter, end_record, fail, finish, give_back, Ending};
use super::stop::{stopped, unwatch};
use super::{Shared, Verdict};
use crate::handler::{
    Cancel, ClusterAttempt, Context, Handler, HandlerContext, HandlerError, OutputSlot,
};
use crate::long::LongJob;

/// Waits for a running slot (a prefetched message), then runs the delivery. A message still
/// waiting when the pool stops has not started: it goes back to the queue at once.
pub(super) async fn execute(
    sh: Arc<Shared>,
    d: Delivery,
    mut stop: watch::Receiver<Option<StopOrder>>,
    (place, running): (OwnedSemaphorePermit, Arc<Semaphore>),
    cancel: CancellationToken,
    hard_stop: CancellationToken,
    acks: Acks,
) {
    // A message killed while it waits for a slot ends at once, without one; one waiting
    // when Redis is lost never starts.
    let mut lost = sh.redis_lost.subscribe();
    let slot = tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        _ = until_lost(&mut lost) => {
            abandon(&sh, &d, false);
            return;
        }
        _ = stopped(&mut stop) => Some(None),
        slot = running.acquire_owned() => slot.ok().map(Some),
    };
    let Some(slot) = slot else {
        give_back(&sh, &d).await;
        unwatch(&sh, &d);
        mark_in_hand(&sh, &d, false);
        return;
    };
    let m = &d.message;
    let span = tracing::info_span!(
        "execution",
        task_id = %m.task_id,
        namespace = %m.namespace,
        execution_id = %m.execution_id,
        fire_at = %m.fire_at,
        attempt = m.attempt_number(),
        lateness_ms = tracing::field::Empty,
    );
    execute_in_span(&sh, &d, &hard_stop, &acks, slot, stop)
        .instrument(span)
        .await;
    unwatch(&sh, &d);
    mark_in_hand(&sh, &d, false);
    drop(place);
}

/// Runs one delivery. The concurrency permit bounds running handlers: it is given back as
/// soon as the handler is done, so settling (a Redis round trip, batched with others) does
/// not keep the next message waiting.
async fn execute_in_span(
    sh: &Shared,
    d: &Delivery,
    hard_stop: &CancellationToken,
    acks: &Acks,
    permit: Option<OwnedSemaphorePermit>,
    mut stop: watch::Receiver<Option<StopOrder>>,
) {
    let msg = &d.message;
    let worker = sh.cfg.worker_id.as_str();
    let started = report_start(sh, d).await;
    let ordered = *stop.borrow();
    if let Some(order) = ordered {
        drop(permit);
        stopped_before_start(sh, acks, d, started, order).await;
        return;
    }
    let Some(handler) = sh.registry.get(&msg.handler) else {
        unknown_handler(sh, d, started).await;
        return;
    };

    // An `http.async` attempt is opened before its request goes out (see `crate::awaiting`);
    // a completion that came before a crash ends it without sending the request again.
    let (completion, before) = open_completion(sh, d, started).await;
    // Any other attempt's handler may defer its end (`crate::long`); it is then concluded
    // as an accepted `http.async` attempt.
    let long = completion
        .is_none()
        .then(|| Arc::new(LongJob::new(sh.queue.clone(), d.queue.clone(), started)));
    let output = OutputSlot::default();
    let mut verdict = match before {
        Some(ended) => reported_outcome(&ended, &output),
        None => {
            let ctx = HandlerContext {
                worker_id: worker.to_string(),
                cancel: Cancel::new(),
                http: sh.http.clone(),
                output: output.clone(),
                completion: completion.clone(),
            };
            let ctx = ClusterAttempt::with_long(ctx, msg.clone(), started, long.clone());
            let lost = sh.redis_lost.subscribe();
            match run_handler(handler, ctx, msg, hard_stop, &mut stop, lost).await {
                Some(verdict) => verdict,
                None => {
                    drop(permit);
                    abandon(sh, d, true);
                    return;
                }
            }
        }
    };
    let completion = completion.or_else(|| long.and_then(|l| l.opened()));
    // The task's secrets (inline, and those the handler resolved) are redacted from what the
    // attempt records before anything else sees it: a server or a command may echo them.
    // Gathered only when there is something to redact: most attempts record neither an
    // error nor an output, and the fire path should not parse their URL again.
    verdict.error = verdict
        .error
        .map(|e| redact_values(&e, &attempt_secrets(msg, &output)));
    if let Some(c) = &completion {
        match conclude(sh, d, c, verdict, &output).await {
            Concluded::Awaiting => {
                drop(permit);
                sh.reporter.on_awaiting(msg, worker).await;
                return;
            }
            Concluded::NotTaken => return,
            Concluded::Ended(v) => verdict = v,
        }
    }
    drop(permit);
    let ending = Ending {
        d,
        worker,
        started,
        output: output
            .take()
            .map(|o| o.redacted(&attempt_secrets(msg, &output))),
    };
    settle_verdict(sh, &ending, acks, verdict).await;
}

/// Ends an attempt whose stop order came before its handler started: killed, acked.
async fn stopped_before_start(
    sh: &Shared,
    acks: &Acks,
    d: &Delivery,
    started: UtcMillis,
    order: StopOrder,
) {
    tracing::warn!(reason = order.reason(), "stopped before it started");
    let end = AttemptEnd::new(AttemptOutcome::Killed, Some(order.reason().to_owned()));
    let ending = Ending {
        d,
        worker: sh.cfg.worker_id.as_str(),
        started,
        output: None,
    };
    ack_end(sh, acks, &ending, end).await;
}

/// Records that the attempt of `d` starts now (its lateness, its wait for a concurrency
/// slot, the start report) and answers when.
async fn report_start(sh: &Shared, d: &Delivery) -> UtcMillis {
    let msg = &d.message;
    let started = sh.cfg.clock.now();
    let lateness_ms = started.0 - msg.attempt_due().0;
    tracing::Span::current().record("lateness_ms", lateness_ms);
    if msg.attempt == 0 && msg.origin().is_scheduled() {
        sh.start_lateness_ms
            .fetch_max(lateness_ms.max(0), std::sync::atomic::Ordering::Relaxed);
    }
    if let Some(wait) = d.limited_wait {
        sh.reporter.on_concurrency_wait(&d.queue, wait);
    }
    sh.reporter
        .on_started(msg, sh.cfg.worker_id.as_str(), started)
        .await;
    started
}

/// What no record of an attempt of `msg` may show: its target's inline secrets and the
/// values its handler resolved.
fn attempt_secrets(msg: &ExecutionMessage, output: &OutputSlot) -> Vec<String> {
    let mut values = target_secret_values(msg.http.as_ref(), msg.command.as_ref());
    values.extend(output.hidden());
    values
}

/// Dead-letters an execution whose handler this worker does not serve.
async fn unknown_handler(sh: &Shared, d: &Delivery, started: UtcMillis) {
    let reason = format!(
        "unknown handler `{}`; this worker serves: [{}]",
        d.message.handler,
        sh.registry.names().join(", ")
    );
    tracing::error!(%reason, "dead-lettering execution");
    let ending = Ending {
        d,
        worker: &sh.cfg.worker_id,
        started,
        output: None,
    };
    let end = AttemptEnd::new(AttemptOutcome::DeadLettered, Some(reason.clone()));
    dead_letter(sh, &ending, &reason, end, sh.cfg.clock.now()).await;
}

/// Returns once Redis is lost (never, if the pool is gone first).
async fn until_lost(lost: &mut watch::Receiver<bool>) {
    if lost.wait_for(|lost| *lost).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Leaves an attempt unsettled: Redis is lost, and the reaper gives its message to another
/// worker (`started`: its handler was stopped; else it never started). Logged per execution
/// and reported, so that a partition's duplicates are bounded and accounted for.
fn abandon(sh: &Shared, d: &Delivery, started: bool) {
    let m = &d.message;
    tracing::error!(
        task_id = %m.task_id,
        namespace = %m.namespace,
        execution_id = %m.execution_id,
        attempt = m.attempt_number(),
        started,
        "abandoned, unsettled: Redis is unreachable, and the reaper gives it to another worker"
    );
    sh.reporter.on_abandoned(m, &d.queue);
    unwatch(sh, d);
    mark_in_hand(sh, d, false);
}

/// Runs the handler in a task of its own until it ends, times out, is killed or the pool
/// stops for good; a handler stopped on the way gets its stop grace, then is aborted.
/// `None` when it was stopped because Redis is lost (`lost`): nothing is to be settled.
async fn run_handler(
    handler: Arc<dyn Handler>,
    ctx: Context,
    msg: &ExecutionMessage,
    hard_stop: &CancellationToken,
    stop: &mut watch::Receiver<Option<StopOrder>>,
    mut lost: watch::Receiver<bool>,
) -> Option<Verdict> {
    let ctx_cancel = ctx.cancel().clone();
    let stop_grace = handler.stop_grace(&ctx);
    let mut handle = tokio::spawn(async move { handler.run(ctx).await });
    let ended = tokio::select! {
        _ = until_lost(&mut lost) => {
            ctx_cancel.cancel();
            stop_handler(handle, stop_grace).await;
            return None;
        }
        r = tokio::time::timeout(msg.timeout(), &mut handle) => match r {
            Ok(joined) => joined_verdict(joined),
            Err(_) => Verdict::new(
                AttemptOutcome::TimedOut,
                Some(format!("timed out after {:?}", msg.timeout())),
                true,
            ),
        },
        _ = hard_stop.cancelled() => Verdict::new(AttemptOutcome::Released, None, false),
        order = stopped(stop) => Verdict::new(
            AttemptOutcome::Killed,
            Some(order.reason().to_owned()),
            false,
        ),
    };
    if matches!(
        ended.outcome,
        AttemptOutcome::TimedOut | AttemptOutcome::Released | AttemptOutcome::Killed
    ) {
        ctx_cancel.cancel();
        stop_handler(handle, stop_grace).await;
    }
    Some(ended)
}

/// The verdict of a handler task that ended by itself (see [`ax_scheduler_core::attempt`]).
fn joined_verdict(joined: Result<Result<(), HandlerError>, JoinError>) -> Verdict {
    match joined {
        Ok(result) => attempt::verdict(result),
        Err(e) => {
            let verdict = match e.try_into_panic() {
                Ok(payload) => attempt::panic_verdict(payload.as_ref()),
                Err(e) => Verdict::new(
                    AttemptOutcome::Panicked,
                    Some(format!("handler task ended abnormally: {e}")),
                    true,
                ),
            };
            tracing::error!(
                panic = verdict.error.as_deref().unwrap_or(""),
                "handler panicked"
            );
            verdict
        }
    }
}

/// Ends a handler whose token is cancelled. A handler that stops something outside (a
/// command's processes) gets its grace to do it; the others are dropped at once.
async fn stop_handler(mut handle: JoinHandle<Result<(), HandlerError>>, grace: Duration) {
    let stopped_in_grace =
        !grace.is_zero() && tokio::time::timeout(grace, &mut handle).await.is_ok();
    if !stopped_in_grace {
        handle.abort();
        // Wait for the abort so the handler is gone before its message is settled; a
        // handler that ignores cancellation and never yields cannot be waited for.
        let _ = tokio::time::timeout(Duration::from_secs(1), handle).await;
    }
}

/// Acks an attempt that ended as `end` now, with its end recorded in the same step, and
/// finishes it.
async fn ack_end(sh: &Shared, acks: &Acks, ending: &Ending<'_>, end: AttemptEnd) {
    let report = ending.report(end, sh.cfg.clock.now());
    let (settled, record) = ack(acks, ending.d, end_record(sh, &report)).await;
    if settled == Some(Settled::NotTaken) {
        tracing::warn!("ack found the message gone (the reaper gave it back)");
    }
    let record = record.unwrap_or_else(|| end_record(sh, &report));
    finish(sh, &report, record, settled).await;
}

/// Settles the message as the verdict says (ack, release, retry or dead letter) together
/// with the attempt's end, and finishes the attempt.
async fn settle_verdict(sh: &Shared, ending: &Ending<'_>, acks: &Acks, verdict: Verdict) {
    let Verdict {
        outcome,
        error,
        retryable,
    } = verdict;
    // Errors can echo anything (a URL with its credentials, a response body): masked and
    // capped once here, before they go into the message, the dead letter, the history, the
    // events and the alerts.
    let error = error.map(ax_scheduler_core::execution::shown_error);
    let now = sh.cfg.clock.now();
    match outcome {
        AttemptOutcome::Succeeded => {
            sh.counters.succeeded.fetch_add(1, Ordering::Relaxed);
            ack_end(sh, acks, ending, AttemptEnd::succeeded()).await;
        }
        AttemptOutcome::Released => {
            // Given back undone: it runs again, so there is no end to record.
            give_back(sh, ending.d).await;
            let report = ending.report(AttemptEnd::new(outcome, None), now);
            sh.reporter.on_finished(&report).await;
        }
        AttemptOutcome::Killed => {
            tracing::warn!(reason = error.as_deref().unwrap_or(""), "stopped");
            ack_end(sh, acks, ending, AttemptEnd::new(outcome, error)).await;
        }
        _ => {
            let error = error.unwrap_or_else(|| "failed".to_owned());
            fail(sh, ending, outcome, error, now, retryable).await;
        }
    }
}
