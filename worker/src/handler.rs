//! Handlers on a cluster worker: the scheduling core's [`Handler`] trait, which the
//! embedded kernel runs too, and the cluster's own parts of an attempt.
//!
//! A handler returns `Ok(())`, or a [`HandlerError`] that says whether trying again can help:
//! the pool retries [`HandlerError::Retryable`] by the task's retry policy and dead-letters
//! [`HandlerError::Permanent`] at once. The pool gives each attempt a core [`Context`] whose
//! shell is a [`ClusterAttempt`]: the queue's message and what only a worker has (its HTTP
//! client, the output slot, an `http.async` attempt's completion contract). Handlers that
//! need those (the built-in `http` and `command`) reach them with [`ClusterAttempt::of`]; a
//! handler that uses only the context runs in the embedded kernel unchanged.

use std::any::Any;
use std::sync::Arc;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::handler::{AttemptInfo, DeferFuture, Progress, Shell, ShellFuture};
use ax_scheduler_core::{AttemptOutput, UtcMillis};

pub use ax_scheduler_core::handler::{Cancel, Context, Handler, HandlerFuture};

/// Why a handler failed: the scheduling core's type, shared with the embedded kernel, so a
/// handler's verdict means the same wherever it runs.
pub use ax_scheduler_core::HandlerError;

/// The cluster's parts of an attempt, its [`Context`]'s shell: the message as the queue
/// delivered it, and the worker's abilities.
#[derive(Debug)]
pub struct ClusterAttempt {
    /// The worker's abilities for the attempt.
    pub ctx: HandlerContext,
    /// The execution message.
    pub message: ExecutionMessage,
    /// What lets the handler defer the attempt's end (`None`: it cannot here, as for an
    /// `http.async` attempt, whose receiver ends it).
    pub long: Option<Arc<crate::long::LongJob>>,
}

impl ClusterAttempt {
    /// The cluster's parts of the attempt `ctx`, or the permanent failure of a handler that
    /// needs a cluster worker and runs elsewhere.
    pub fn of(ctx: &Context) -> Result<&ClusterAttempt, HandlerError> {
        ctx.extension::<ClusterAttempt>().ok_or_else(|| {
            HandlerError::Permanent("this handler runs on a cluster worker only".into())
        })
    }

    /// The context of an attempt of `message` started at `started`, with `ctx`'s abilities.
    pub fn context(ctx: HandlerContext, message: ExecutionMessage, started: UtcMillis) -> Context {
        Self::with_long(ctx, message, started, None)
    }

    /// [`ClusterAttempt::context`], its handler able to defer the end through `long`.
    pub(crate) fn with_long(
        ctx: HandlerContext,
        message: ExecutionMessage,
        started: UtcMillis,
        long: Option<Arc<crate::long::LongJob>>,
    ) -> Context {
        let info = AttemptInfo {
            execution_id: message.execution_id,
            attempt: message.attempt_number(),
            fire_at: message.fire_at,
            deadline: started.add(message.timeout()),
            namespace: message.namespace.clone(),
            task_id: message.task_id.clone(),
            redelivered: message.redelivered,
            payload: message.payload.clone(),
        };
        let cancel = ctx.cancel.clone();
        let attempt = ClusterAttempt { ctx, message, long };
        Context::new(info, cancel, Arc::new(attempt))
    }
}

impl Shell for ClusterAttempt {
    fn runner(&self) -> &str {
        &self.ctx.worker_id
    }

    fn progress(&self, progress: Progress) -> ShellFuture<'_> {
        tracing::info!(
            percent = progress.percent,
            note = progress.note.as_deref(),
            "progress"
        );
        Box::pin(std::future::ready(Ok(())))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn defer(&self) -> DeferFuture<'_> {
        Box::pin(async move {
            match &self.long {
                Some(long) => long.defer(&self.ctx.worker_id, &self.message).await,
                None => Err(HandlerError::Permanent(
                    "this attempt's end cannot be deferred (an http.async attempt ends by its \
                     receiver's completion)"
                        .into(),
                )),
            }
        })
    }
}

/// What a handler gets beside the execution.
#[derive(Clone, Debug)]
pub struct HandlerContext {
    /// Id of the worker running it.
    pub worker_id: String,
    /// Cancelled when the attempt times out or the worker stops for good: long handlers should
    /// watch it and return.
    pub cancel: Cancel,
    /// Shared HTTP client (connection pooling across executions), held to the pool's egress
    /// policy (`WorkerConfig::http_allow_cidrs`, `http_allow_hosts`) and following no
    /// redirects.
    pub http: crate::egress::EgressClient,
    /// Where a handler leaves the start of its answer for the execution history (optional;
    /// the `http` handler leaves the response's status and first KiB).
    pub output: OutputSlot,
    /// For an attempt of an `http.async` task: where and with which token the job reports
    /// its end, and how the handler says the receiver took the job on (see
    /// [`crate::awaiting`]). `None` for every other attempt.
    pub completion: Option<crate::awaiting::Completion>,
}

/// A handler's answer, handed to the pool beside the handler's result: the [`Handler`]
/// trait returns `Result<(), HandlerError>`, and a slot in the context adds the output
/// without changing what every handler returns. Capped by [`AttemptOutput::new`]. It also
/// carries the secret values the handler resolved for the attempt, which the pool redacts
/// from the output and the error before recording them.
#[derive(Clone, Debug, Default)]
pub struct OutputSlot(Arc<std::sync::Mutex<Slot>>);

#[derive(Debug, Default)]
struct Slot {
    output: Option<AttemptOutput>,
    hidden: Vec<String>,
}

impl OutputSlot {
    /// Keeps `output` as the attempt's (the last one set wins).
    pub fn set(&self, output: AttemptOutput) {
        self.lock().output = Some(output);
    }

    /// Takes what was set, if anything.
    pub fn take(&self) -> Option<AttemptOutput> {
        self.lock().output.take()
    }

    /// Adds secret values that nothing recorded of the attempt may show.
    pub fn hide(&self, values: impl IntoIterator<Item = String>) {
        self.lock().hidden.extend(values);
    }

    /// The values given to [`OutputSlot::hide`].
    pub fn hidden(&self) -> Vec<String> {
        self.lock().hidden.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // A poisoned lock only means a handler panicked while setting it; the value is whole.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
