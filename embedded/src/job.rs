//! Jobs: an async closure with the options the cluster's task spec carries.
//!
//! A job's options are the cluster's [`TaskOptions`] (priority, timeout, retry policy,
//! idempotency key, overlap and misfire policy, deadline) and a payload, with the cluster's
//! defaults, and they become a [`TaskSpec`] when the job is submitted: the kernel schedules
//! it with the cluster's dispatcher, so an option means exactly what it means in the cluster,
//! and is checked by the same bounds, at submit, where a bad one is an error for the caller,
//! never a job that cannot run.
//!
//! A job's body is a closure (it lives in memory only) or the name of a handler the kernel
//! was built with ([`Job::named`]): only a name and a payload can be written to a store and
//! found again by the next process.

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::handler::{
    AttemptInfo, Cancel, Context, DeferFuture, Deferred, Finisher, Handler, Progress, Shell,
    ShellFuture,
};
use ax_scheduler_core::options::{check_payload_size, payload_bytes};
use ax_scheduler_core::task::MAX_PAYLOAD_BYTES;
use ax_scheduler_core::{
    ExecutionId, HandlerError, MisfirePolicy, OverlapPolicy, RetryPolicy, TaskOptions, TaskSpec,
    UtcMillis,
};
use serde::Serialize;
use std::sync::{Mutex, PoisonError};
use tokio::sync::oneshot;

use crate::error::{EmbeddedError, Result};
use crate::job_id::EMBEDDED_RUNNER;

/// The future a job returns for one attempt.
pub type JobFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

/// A job's body, shared by all its attempts.
pub(crate) type JobFn = dyn Fn(AttemptCall) -> JobFuture + Send + Sync;

/// The namespace every job of a kernel lives in, as far as the dispatcher is concerned: a
/// job's task is `embedded/{id}`, which is how dependency edges name a parent.
pub(crate) const NAMESPACE: &str = "embedded";

/// What the engine starts one attempt with; the job's body sees it as the core's
/// [`Context`] (the same type a cluster handler gets), made by [`AttemptCall::context`].
#[derive(Clone, Debug)]
pub(crate) struct AttemptCall {
    /// The execution: one fire of the job, the same for all its attempts.
    pub(crate) execution: ExecutionId,
    /// The attempt, 1 for the first.
    pub(crate) attempt: u32,
    /// The instant the fire was due.
    pub(crate) fire_at: UtcMillis,
    /// When this attempt times out (its start plus the job's timeout).
    pub(crate) deadline: UtcMillis,
    /// Whether this attempt was in flight when the process that held it stopped
    /// ([`Context::redelivered`]).
    pub(crate) recovered: bool,
    /// Cancelled when the attempt times out, is killed, or the grace at shutdown is over.
    pub(crate) cancel: Cancel,
    pub(crate) spec: Arc<TaskSpec>,
}

impl AttemptCall {
    /// The attempt as the core's handler [`Context`], run by `shell`.
    fn context(&self, shell: Arc<dyn Shell>) -> Context {
        let info = AttemptInfo {
            execution_id: self.execution,
            attempt: self.attempt,
            fire_at: self.fire_at,
            deadline: self.deadline,
            namespace: Arc::clone(&self.spec.namespace),
            task_id: Arc::clone(&self.spec.id),
            redelivered: self.recovered,
            payload: self.spec.payload.clone(),
        };
        Context::new(info, self.cancel.clone(), shell)
    }
}

/// A job to submit: its body and options, which mean what the same fields of a cluster
/// task spec mean, with the same defaults.
pub struct Job {
    pub(crate) body: Body,
    pub(crate) options: JobOptions,
}

/// What runs a job.
#[derive(Clone)]
pub(crate) enum Body {
    /// A closure: in memory only.
    Closure(Arc<JobFn>),
    /// A handler registered under this name: may be persisted.
    Named(Arc<str>),
}

/// The handlers a kernel was built with, by name.
pub(crate) type Handlers = std::collections::HashMap<Arc<str>, Arc<JobFn>>;

/// A named handler as a job's body: each attempt gets the core's [`Context`], so the same
/// handler value runs on a cluster worker too. A handler that defers its end
/// ([`Context::defer`]) holds its worker until its [`Deferred`] completes, all within the
/// job's timeout: in-process there is no slot to hand back and no one else to end it.
pub(crate) fn shared_handler(handler: Arc<dyn Handler>) -> Arc<JobFn> {
    Arc::new(move |job: AttemptCall| {
        let handler = Arc::clone(&handler);
        Box::pin(async move {
            let shell = Arc::new(EmbeddedShell::default());
            let result = handler.run(job.context(shell.clone())).await;
            ended(&shell, result).await
        }) as JobFuture
    })
}

/// A closure as a job's body, on the same path as a named handler ([`shared_handler`]): the
/// closure is called at the attempt's start and its future is held inside the attempt's one
/// boxed future, not boxed again behind the [`Handler`] trait. A panic of the closure's own
/// call is raised again when the attempt's future is polled, where every panic of a job is
/// caught and made a failed attempt.
fn closure_body<F, Fut>(f: F) -> Arc<JobFn>
where
    F: Fn(Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    Arc::new(move |job: AttemptCall| {
        let shell = Arc::new(EmbeddedShell::default());
        let called = catch_unwind(AssertUnwindSafe(|| f(job.context(shell.clone()))));
        Box::pin(async move {
            let result = match called {
                Ok(run) => run.await,
                Err(payload) => resume_unwind(payload),
            };
            ended(&shell, result).await
        }) as JobFuture
    })
}

/// The attempt's result once its handler returned: a deferred end is waited for.
async fn ended(
    shell: &EmbeddedShell,
    result: Result<(), HandlerError>,
) -> Result<(), HandlerError> {
    let deferred = shell
        .deferred
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match (result, deferred) {
        (Ok(()), Some(end)) => end.await.unwrap_or_else(|_| {
            Err(HandlerError::Retryable(
                "the deferred attempt was dropped without completing".into(),
            ))
        }),
        (result, _) => result,
    }
}

/// What the kernel does for a handler beyond the attempt's data. Progress goes to the
/// log: an in-process job has nobody polling its state.
#[derive(Debug, Default)]
pub(crate) struct EmbeddedShell {
    /// The end of a deferred attempt, once the handler deferred it.
    deferred: Mutex<Option<oneshot::Receiver<Result<(), HandlerError>>>>,
}

fn log_progress(progress: &Progress) {
    tracing::info!(
        percent = progress.percent,
        note = progress.note.as_deref(),
        "progress"
    );
}

impl Shell for EmbeddedShell {
    fn runner(&self) -> &str {
        EMBEDDED_RUNNER
    }

    fn progress(&self, progress: Progress) -> ShellFuture<'_> {
        log_progress(&progress);
        Box::pin(std::future::ready(Ok(())))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn defer(&self) -> DeferFuture<'_> {
        let (tx, rx) = oneshot::channel();
        *self.deferred.lock().unwrap_or_else(PoisonError::into_inner) = Some(rx);
        let finish = EmbeddedFinish(Mutex::new(Some(tx)));
        Box::pin(std::future::ready(Ok(Deferred::new(Arc::new(finish)))))
    }
}

/// The end of a deferred attempt in the kernel: handed to the attempt's task.
struct EmbeddedFinish(Mutex<Option<oneshot::Sender<Result<(), HandlerError>>>>);

impl Finisher for EmbeddedFinish {
    fn progress(&self, progress: Progress) -> ShellFuture<'_> {
        log_progress(&progress);
        Box::pin(std::future::ready(Ok(())))
    }

    fn complete(&self, result: Result<(), HandlerError>) -> ShellFuture<'_> {
        let tx = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        let sent = match tx {
            Some(tx) => tx.send(result).map_err(|_| {
                HandlerError::Permanent("the deferred attempt had ended (its timeout)".into())
            }),
            None => Err(HandlerError::Permanent(
                "the deferred attempt was completed already".into(),
            )),
        };
        Box::pin(std::future::ready(sent))
    }
}

/// A job's options: the cluster's [`TaskOptions`] and the payload, with the cluster's
/// defaults.
#[derive(Clone, Debug, Default)]
pub(crate) struct JobOptions {
    pub(crate) task: TaskOptions,
    /// The payload, or why it did not serialize (reported at submit).
    pub(crate) payload: Option<Result<serde_json::Value, String>>,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// A job running `f` for each attempt. Return [`HandlerError::Retryable`] for a failure
    /// worth retrying by the job's policy, [`HandlerError::Permanent`] for one that goes to
    /// the dead letters at once; a panic is a failed attempt that may be retried.
    ///
    /// The closure gets the core's [`Context`], as a handler does on a cluster worker: the
    /// execution id, the attempt (1 for the first), `fire_at`, the deadline, whether it was
    /// [redelivered](Context::redelivered) after a restart, the payload
    /// ([`Context::payload_as`]) and the [cancel](Context::cancel) token.
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn(Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        Job {
            body: Body::Closure(closure_body(f)),
            options: JobOptions::default(),
        }
    }

    /// A job run by the handler registered as `handler` on the builder
    /// ([`KernelBuilder::handler`](crate::KernelBuilder::handler)), with the job's
    /// [`payload`](Self::payload) as its input. On a kernel with a store it is persisted:
    /// submit it with [`Kernel::submit`](crate::Kernel::submit), which returns once it is on
    /// disk.
    pub fn named(handler: &str) -> Self {
        Job {
            body: Body::Named(Arc::from(handler)),
            options: JobOptions::default(),
        }
    }

    /// 0 (lowest) ..= 9 (highest), default 5: when more is due than there are workers, higher
    /// priorities start first, and waiting raises a job's priority by one level a second
    /// (aging) so that none starves.
    pub fn priority(mut self, priority: u8) -> Self {
        self.options.task.priority = priority;
        self
    }

    /// Longest one attempt may run before it is stopped and counted as failed; default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.task.timeout = timeout;
        self
    }

    /// How failed attempts are retried; default 3 retries from 10 s, tripling, jittered.
    /// `RetryPolicy { max_retries: 0, ..Default::default() }` retries nothing.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.options.task.retry = retry;
        self
    }

    /// Submitting a job with a key the kernel still holds a job for returns that job's id
    /// and schedules nothing new.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.options.task.idempotency_key = Some(key.into());
        self
    }

    /// What a periodic fire does while the previous execution still runs; default
    /// [`OverlapPolicy::Forbid`] (it waits, merged with later ones, until that one ends).
    pub fn overlap(mut self, overlap: OverlapPolicy) -> Self {
        self.options.task.overlap = overlap;
        self
    }

    /// What happens to fires missed while the kernel could not fire them (a stalled
    /// process, a paused job); default [`MisfirePolicy::FireOnce`].
    pub fn misfire(mut self, misfire: MisfirePolicy) -> Self {
        self.options.task.misfire = misfire;
        self
    }

    /// Promises that every fire is followed by a successful attempt within `within` (the
    /// cluster's `expect_success_within`): a fire whose window passes without one (its
    /// attempts failing, still running, held behind a previous run, or never fired) is
    /// logged as an error with the reason and counted in
    /// `scheduler_deadline_misses_total{reason}`, once per missed fire. A success after
    /// the fire meets it, whichever attempt or fire it was.
    pub fn deadline(mut self, within: Duration) -> Self {
        self.options.task.expect_success_within = Some(within);
        self
    }

    /// Data the job reads with [`Context::payload_as`]; at most 32 KiB as JSON.
    pub fn payload(mut self, payload: &impl Serialize) -> Self {
        self.options.payload = Some(serde_json::to_value(payload).map_err(|e| e.to_string()));
        self
    }

    /// Every option at once, as a cluster task takes them: the setters above change one
    /// each. The payload is set apart ([`payload`](Self::payload)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ax_embedded::{Job, TaskOptions};
    ///
    /// let options = TaskOptions::new().priority(8).timeout(Duration::from_secs(5));
    /// let job = Job::new(|_| async { Ok(()) }).options(options);
    /// # drop(job);
    /// ```
    pub fn options(mut self, options: TaskOptions) -> Self {
        self.options.task = options;
        self
    }
}

impl JobOptions {
    /// The payload, if every option is in range: the bounds are the cluster's
    /// ([`TaskOptions::check`]), reported under the builder method's name.
    pub(crate) fn check(&self) -> Result<serde_json::Value> {
        if let Err(errors) = self.task.check() {
            let first = errors.iter().next().map_or("", |e| e.path.as_str());
            let field = match first.split('.').next().unwrap_or("") {
                "priority" => "priority",
                "timeout" => "timeout",
                "retry" => "retry",
                "idempotency_key" => "idempotency_key",
                "expect_success_within" => "deadline",
                _ => "options",
            };
            let reason = errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(EmbeddedError::invalid(field, reason));
        }
        let payload = match &self.payload {
            None => serde_json::Value::Null,
            Some(p) => p.clone().map_err(EmbeddedError::Payload)?,
        };
        let size = payload_bytes(&payload);
        if check_payload_size(size).is_some() {
            return Err(EmbeddedError::PayloadTooLarge {
                size,
                max: MAX_PAYLOAD_BYTES,
            });
        }
        Ok(payload)
    }
}
