//! The kernel's two kinds of task: the driver, which turns the engine's clock, and one task
//! per attempt, which runs a job's body.
//!
//! The driver sleeps until the engine's next wakeup (the earliest timer or retry) or until
//! something changed (a submit, a control), takes one [`Engine::step`] under the lock and
//! spawns the attempts it returns. A step does a bounded amount of work; one that left some
//! says so by a wakeup already passed, and the driver yields to the runtime before the next,
//! so the program's own calls into the kernel get the lock in between. While every worker
//! is busy the attempts' ends take those steps, and the driver looks again only after
//! [`BUSY_RECHECK`] or when woken, rather than take the lock from them back to back. An
//! attempt that ends takes the step itself, in the same lock as its end, and starts what its
//! freed worker can run next: a busy kernel goes from one attempt to the next without waking
//! the driver, which is woken only when the next wakeup moved before the one it sleeps until.
//!
//! An attempt of a persisted job first waits until the store holds it as running, so that a
//! restart finds whatever started in flight. An attempt polls the job's future inside
//! `catch_unwind`, so a panic becomes a failed attempt with the panic's message instead of
//! unwinding through the kernel (the worker pool gets the same from a task's join error), and
//! a timeout or a kill drops the future; the verdict goes back to the engine through the
//! core's mapping ([`ax_scheduler_core::attempt`]). The future runs in the attempt's own task
//! rather than in one more, and a task whose attempt ended runs the next attempt its freed
//! worker starts itself instead of spawning one: a busy kernel spawns about one task per
//! worker, not one per fire. Such a task gives the runtime back its thread when tokio's
//! cooperative budget is spent, so a chain of instant jobs does not starve the driver or the
//! program's other tasks.

use std::any::Any;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ax_scheduler_core::attempt::{self, Verdict};
use ax_scheduler_core::{AttemptOutcome, Clock, HandlerError};
use ax_tokio_clock::instant_at;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::engine::{Engine, Launch};

/// What the kernel's handle, its driver and its attempts share.
pub(crate) struct Shared {
    /// Fair now and then (parking_lot's eventual fairness): the attempts and the driver take
    /// it back to back through a burst, and a submit must still get its turn.
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
    /// The engine. A panic inside the engine's own code does not poison the lock: its maps
    /// each change in one step, so the state is whole and the kernel goes on.
    pub(crate) fn lock(&self) -> EngineGuard<'_> {
        EngineGuard(self.engine.lock())
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

/// How long the driver leaves a burst's steps to the attempts' ends while every worker is
/// busy: far below the dispatcher's stall threshold (seconds), so its timers still advance,
/// and long enough that its steps do not alternate with theirs on the lock.
const BUSY_RECHECK: Duration = Duration::from_millis(1);

/// The driver loop; ends when the kernel stops.
pub(crate) async fn drive(shared: Arc<Shared>) {
    let mut launches = Vec::new();
    loop {
        let (next, busy) = {
            let now = shared.clock.now();
            let mut engine = shared.lock();
            let next = engine.step(now, &mut launches);
            engine.driver_wakes_at = next;
            (next, engine.workers_busy())
        };
        spawn_attempts(&shared, launches.drain(..));
        // The step left work: a burst is worked off in bounded steps.
        let behind = next.is_some_and(|at| at <= shared.clock.now());
        if behind && !busy {
            // Let the lock's other users and the attempts just spawned run first, then step
            // again.
            if shared.stop.is_cancelled() {
                return;
            }
            tokio::task::yield_now().await;
            continue;
        }
        let sleep = async {
            match next {
                // Every worker is busy: their ends take the steps meanwhile.
                Some(_) if behind => tokio::time::sleep(BUSY_RECHECK).await,
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

/// One task per attempt. Boxed: an attempt that ends starts the next ones, and a future that
/// spawns its own kind needs a named type to be `Send`.
fn spawn_attempts(shared: &Arc<Shared>, launches: impl Iterator<Item = Launch>) {
    for launch in launches {
        let attempt: Pin<Box<dyn Future<Output = ()> + Send>> =
            Box::pin(run_attempt(Arc::clone(shared), launch));
        tokio::spawn(attempt);
    }
}

/// Runs one attempt and hands its verdict to the engine; then the first of the attempts that
/// end started, in this task, until none is left for it.
async fn run_attempt(shared: Arc<Shared>, launch: Launch) {
    let mut next = Some(launch);
    let mut launches = Vec::new();
    while let Some(launch) = next.take() {
        run_one(&shared, launch, &mut launches).await;
        let mut started = launches.drain(..);
        next = started.next();
        spawn_attempts(&shared, started);
        if next.is_some() {
            tokio::task::coop::consume_budget().await;
        }
    }
}

/// One attempt, its verdict handed to the engine; the attempts to start next are added to
/// `launches`.
async fn run_one(shared: &Arc<Shared>, launch: Launch, launches: &mut Vec<Launch>) {
    let Launch {
        attempt,
        key,
        run,
        ctx,
        timeout,
        on_disk,
        ..
    } = launch;
    if let Some(on_disk) = on_disk {
        if !matches!(on_disk.await, Ok(Ok(()))) {
            // The store failed (a full disk) or closed: run it still, as before there was a
            // store; only a restart before its end could miss that it ran.
            tracing::warn!(
                task_id = %key,
                execution_id = %attempt.execution,
                "the store did not confirm the attempt as running; it runs anyway"
            );
        }
    }
    let lateness_ms = shared.clock.now().0 - attempt.fire_at.0;
    let span = tracing::info_span!(
        "execution",
        task_id = %key,
        execution_id = %attempt.execution,
        fire_at = %attempt.fire_at,
        attempt = attempt.attempt.saturating_add(1),
        lateness_ms,
    );
    let verdict = run_body(shared, run(ctx.clone()), &ctx.cancel, timeout)
        .instrument(span)
        .await;
    let now = shared.clock.now();
    let wake_driver = {
        let mut engine = shared.lock();
        engine.finish(attempt, verdict, now);
        let next = engine.step(now, launches);
        match (next, engine.driver_wakes_at) {
            (Some(next), Some(planned)) => next < planned,
            (next, planned) => next.is_some() && planned.is_none(),
        }
    };
    shared.ended.notify_waiters();
    if wake_driver {
        shared.wake.notify_one();
    }
}

/// A job's future with its panics caught.
struct CatchPanic(crate::job::JobFuture);

impl Future for CatchPanic {
    type Output = Result<Result<(), HandlerError>, Box<dyn Any + Send>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = &mut self.get_mut().0;
        // A future that panicked is not polled again: it is dropped with the attempt.
        match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(result)) => Poll::Ready(Ok(result)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

/// The body under its timeout and kill switch: the attempt's cancel signal, which the kernel
/// gives to kill it (and a body that gives it itself asks to be stopped the same way).
async fn run_body(
    shared: &Shared,
    body: crate::job::JobFuture,
    cancel: &ax_scheduler_core::handler::Cancel,
    timeout: Duration,
) -> Verdict {
    // The body is polled before the kill switch, which is waited on only once the body is
    // pending: an instant job registers no waker with it.
    let (ended, stopped) = {
        let mut body = std::pin::pin!(tokio::time::timeout(timeout, CatchPanic(body)));
        let mut stop = std::pin::pin!(cancel.cancelled());
        let ended = std::future::poll_fn(|cx| match body.as_mut().poll(cx) {
            Poll::Ready(ended) => Poll::Ready(Some(ended)),
            Poll::Pending => stop.as_mut().poll(cx).map(|()| None),
        })
        .await;
        let stopped = cancel.is_cancelled();
        // A job still running is told, then dropped (at the block's end): one that ignores
        // its token cannot hold a worker.
        cancel.cancel();
        (ended, stopped)
    };
    // A kill first: a job that returns because its token fired was stopped, not done.
    let verdict = match ended.filter(|_| !stopped) {
        // Stopped by the shutdown, unfinished: with a store it runs again at the restart.
        None if shared.hard_stop.is_cancelled() => Verdict::new(
            AttemptOutcome::Released,
            Some("shut down".to_owned()),
            false,
        ),
        None => Verdict::new(AttemptOutcome::Killed, Some("killed".to_owned()), false),
        Some(Ok(Ok(result))) => attempt::verdict(result),
        Some(Ok(Err(payload))) => attempt::panic_verdict(payload.as_ref()),
        Some(Err(_)) => Verdict::new(
            AttemptOutcome::TimedOut,
            Some(format!("timed out after {timeout:?}")),
            true,
        ),
    };
    match &verdict.outcome {
        AttemptOutcome::Succeeded => tracing::debug!("attempt succeeded"),
        outcome => tracing::warn!(%outcome, error = verdict.error.as_deref(), "attempt ended"),
    }
    verdict
}
