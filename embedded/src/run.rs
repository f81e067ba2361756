//! The kernel's two kinds of task: the driver, which turns the engine's clock, and one task
//! per attempt, which runs a job's body.
//!
//! The driver sleeps until the engine's next wakeup (the earliest timer or retry) or until
//! something changed (a submit, an attempt's end), takes one [`Engine::step`] under the lock
//! and spawns the attempts it returns. An attempt runs the job's future in a task of its own,
//! as the cluster's worker does, so a panic arrives as a join error instead of unwinding
//! through the kernel and a timeout or a kill can drop it; its verdict goes back to the engine
//! through the core's mapping ([`ax_scheduler_core::attempt`]).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ax_scheduler_core::attempt::{self, Verdict};
use ax_scheduler_core::{AttemptOutcome, Clock, HandlerError};
use tokio::sync::Notify;
use tokio::task::JoinError;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::instant_at;
use crate::engine::{Engine, Launch};

/// What the kernel's handle, its driver and its attempts share.
pub(crate) struct Shared {
    pub(crate) engine: Mutex<Engine>,
    /// The named handlers, by name.
    pub(crate) handlers: crate::job::Handlers,
    pub(crate) clock: Arc<dyn Clock>,
    /// Wakes the driver: something changed that may start an attempt or move the next
    /// wakeup earlier.
    pub(crate) wake: Notify,
    /// Signalled at each attempt's end, for a shutdown waiting for them.
    pub(crate) ended: Notify,
    /// Stops the driver (the end of a shutdown).
    pub(crate) stop: CancellationToken,
    /// Set for the second phase of a shutdown: a kill then says so.
    pub(crate) hard_stop: CancellationToken,
}

impl Shared {
    /// The engine. A poisoned lock means a panic inside the engine's own code, whose maps
    /// each change in one step: the state is whole, so the kernel goes on.
    pub(crate) fn lock(&self) -> EngineGuard<'_> {
        EngineGuard(self.engine.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The locked engine. Letting it go sends the store changes made under it, so they reach
/// the writer in the order they were made whoever made them.
pub(crate) struct EngineGuard<'a>(MutexGuard<'a, Engine>);

impl Deref for EngineGuard<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.0
    }
}

impl DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.0
    }
}

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        // Nobody waits for these: a submit that does takes its answer before the drop.
        self.0.flush();
    }
}

/// The driver loop; ends when the kernel stops.
pub(crate) async fn drive(shared: Arc<Shared>) {
    loop {
        let (launches, next) = {
            let now = shared.clock.now();
            shared.lock().step(now)
        };
        for launch in launches {
            tokio::spawn(run_attempt(Arc::clone(&shared), launch));
        }
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(instant_at(&*shared.clock, at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = shared.wake.notified() => {}
            _ = sleep => {}
        }
    }
}

/// Runs one attempt and hands its verdict to the engine.
async fn run_attempt(shared: Arc<Shared>, launch: Launch) {
    let Launch {
        attempt,
        key,
        run,
        ctx,
        kill,
        timeout,
    } = launch;
    let lateness_ms = shared.clock.now().0 - attempt.fire_at.0;
    let span = tracing::info_span!(
        "execution",
        task_id = %key,
        execution_id = %attempt.execution,
        fire_at = %attempt.fire_at,
        attempt = attempt.attempt,
        lateness_ms,
    );
    let verdict = run_body(&shared, run(ctx.clone()), &ctx.cancel, &kill, timeout)
        .instrument(span)
        .await;
    let now = shared.clock.now();
    shared.lock().finish(attempt, verdict, now);
    shared.ended.notify_waiters();
    shared.wake.notify_one();
}

/// The body under its timeout and kill switch, in a task of its own.
async fn run_body(
    shared: &Shared,
    body: crate::job::JobFuture,
    ctx_cancel: &CancellationToken,
    kill: &CancellationToken,
    timeout: Duration,
) -> Verdict {
    let mut handle = tokio::spawn(body);
    let verdict = tokio::select! {
        // A kill first: a job that returns because its token fired was stopped, not done.
        biased;
        _ = kill.cancelled() => if shared.hard_stop.is_cancelled() {
            // Stopped by the shutdown, unfinished: with a store it runs again at the restart.
            (AttemptOutcome::Released, Some("shut down".to_owned()), false)
        } else {
            (AttemptOutcome::Killed, Some("killed".to_owned()), false)
        },
        joined = tokio::time::timeout(timeout, &mut handle) => match joined {
            Ok(joined) => joined_verdict(joined),
            Err(_) => (
                AttemptOutcome::TimedOut,
                Some(format!("timed out after {timeout:?}")),
                true,
            ),
        },
    };
    if !handle.is_finished() {
        // The job is told, then dropped: a job that ignores its token cannot hold a worker.
        ctx_cancel.cancel();
        handle.abort();
    }
    match &verdict.0 {
        AttemptOutcome::Succeeded => tracing::debug!("attempt succeeded"),
        outcome => tracing::warn!(%outcome, error = verdict.1.as_deref(), "attempt ended"),
    }
    verdict
}

fn joined_verdict(joined: Result<Result<(), HandlerError>, JoinError>) -> Verdict {
    match joined {
        Ok(result) => attempt::verdict(result),
        Err(e) => match e.try_into_panic() {
            Ok(payload) => attempt::panic_verdict(payload.as_ref()),
            Err(e) => (
                AttemptOutcome::Panicked,
                Some(format!("job task ended abnormally: {e}")),
                true,
            ),
        },
    }
}
