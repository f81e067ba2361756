//! Handlers: what runs an execution, found by the task's `handler` name.
//!
//! A handler returns `Ok(())`, or a [`HandlerError`] that says whether trying again can help:
//! the pool retries [`HandlerError::Retryable`] by the task's retry policy and dead-letters
//! [`HandlerError::Permanent`] at once. Handlers are trait objects (boxed futures) so user
//! code can register plain async closures next to the built-ins.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::AttemptOutput;
use tokio_util::sync::CancellationToken;

/// Why a handler failed: the scheduling core's type, shared with the embedded kernel, so a
/// handler's verdict means the same wherever it runs.
pub use ax_scheduler_core::HandlerError;

/// What a handler gets beside the execution.
#[derive(Clone, Debug)]
pub struct HandlerContext {
    /// Id of the worker running it.
    pub worker_id: String,
    /// Cancelled when the attempt times out or the worker stops for good: long handlers should
    /// watch it and return.
    pub cancel: CancellationToken,
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

/// A boxed handler future.
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'a>>;

/// Runs executions of one handler name.
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt.
    fn run<'a>(&'a self, ctx: HandlerContext, exec: &'a ExecutionMessage) -> HandlerFuture<'a>;

    /// How long the pool waits, once it cancelled [`HandlerContext::cancel`] (a timeout, a
    /// kill, shutdown), for the attempt to end by itself before it drops the handler's
    /// future. Zero (the default) drops it at once; a handler with something outside the
    /// process to stop cleanly (the `command` handler's process group) asks for the time
    /// that takes.
    fn stop_grace(&self, _exec: &ExecutionMessage) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}
