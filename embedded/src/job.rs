//! Jobs: an async closure with the options the cluster's task spec carries.
//!
//! A job's options are the fields of a [`TaskSpec`] (priority, timeout, retry policy,
//! idempotency key, overlap and misfire policy, payload), with the cluster's defaults, and
//! they become one when the job is submitted: the kernel schedules it with the cluster's
//! dispatcher, so an option means exactly what it means in the cluster. Options are checked
//! at submit, where a bad one is an error for the caller, never a job that cannot run.
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
use ax_scheduler_core::task::{
    DEFAULT_PRIORITY, DEFAULT_TIMEOUT, MAX_IDEMPOTENCY_KEY_LEN, MAX_MULTIPLIER, MAX_PAYLOAD_BYTES,
    MAX_PRIORITY, MAX_RETRIES,
};
use ax_scheduler_core::{
    ExecutionId, HandlerError, MisfirePolicy, OverlapPolicy, RetryPolicy, TaskSpec, UtcMillis,
};
use serde::{Deserialize, Serialize};
use std::sync::{Mutex, PoisonError};
use tokio::sync::oneshot;

use crate::error::{EmbeddedError, Result};

/// The future a job returns for one attempt.
pub type JobFuture = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;

/// A job's body, shared by all its attempts.
pub(crate) type JobFn = dyn Fn(AttemptCall) -> JobFuture + Send + Sync;

/// The namespace every job of a kernel lives in, as far as the dispatcher is concerned: a
/// job's task is `embedded/{id}`, which is how dependency edges name a parent.
pub(crate) const NAMESPACE: &str = "embedded";

/// A job's identity within its kernel, returned by every submit: unique for the kernel's
/// life (and a persisted job's across restarts), not a count (a job staged in memory is
/// named by where it is held, see `docs/embedded.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub(crate) u64);

impl JobId {
    /// The id's number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The job whose attempt `ctx` is (the kernel names a job's task by its id), or `None`
    /// for an attempt the kernel does not run (a cluster worker's).
    pub fn of(ctx: &Context) -> Option<JobId> {
        if ctx.runner() != EMBEDDED_RUNNER {
            return None;
        }
        ctx.task_id().parse().ok().map(JobId)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

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

/// The runner of every attempt in the embedded kernel ([`Context::runner`]).
pub const EMBEDDED_RUNNER: &str = "embedded";

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

/// A job's options; the defaults are the cluster's task defaults.
#[derive(Clone, Debug)]
pub(crate) struct JobOptions {
    pub(crate) priority: u8,
    pub(crate) timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) overlap: OverlapPolicy,
    pub(crate) misfire: MisfirePolicy,
    /// Every fire is to be followed by a success within this (`expect_success_within`).
    pub(crate) deadline: Option<Duration>,
    /// The payload, or why it did not serialize (reported at submit).
    pub(crate) payload: Result<serde_json::Value, String>,
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
        self.options.priority = priority;
        self
    }

    /// Longest one attempt may run before it is stopped and counted as failed; default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = timeout;
        self
    }

    /// How failed attempts are retried; default 3 retries from 10 s, tripling, jittered.
    /// `RetryPolicy { max_retries: 0, ..Default::default() }` retries nothing.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.options.retry = retry;
        self
    }

    /// Submitting a job with a key the kernel still holds a job for returns that job's id
    /// and schedules nothing new.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.options.idempotency_key = Some(key.into());
        self
    }

    /// What a periodic fire does while the previous execution still runs; default
    /// [`OverlapPolicy::Forbid`] (it waits, merged with later ones, until that one ends).
    pub fn overlap(mut self, overlap: OverlapPolicy) -> Self {
        self.options.overlap = overlap;
        self
    }

    /// What happens to fires missed while the kernel could not fire them (a stalled
    /// process, a paused job); default [`MisfirePolicy::FireOnce`].
    pub fn misfire(mut self, misfire: MisfirePolicy) -> Self {
        self.options.misfire = misfire;
        self
    }

    /// Promises that every fire is followed by a successful attempt within `within` (the
    /// cluster's `expect_success_within`): a fire whose window passes without one (its
    /// attempts failing, still running, held behind a previous run, or never fired) is
    /// logged as an error with the reason and counted in
    /// `scheduler_deadline_misses_total{reason}`, once per missed fire. A success after
    /// the fire meets it, whichever attempt or fire it was.
    pub fn deadline(mut self, within: Duration) -> Self {
        self.options.deadline = Some(within);
        self
    }

    /// Data the job reads with [`Context::payload_as`]; at most 32 KiB as JSON.
    pub fn payload(mut self, payload: &impl Serialize) -> Self {
        self.options.payload = serde_json::to_value(payload).map_err(|e| e.to_string());
        self
    }
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            priority: DEFAULT_PRIORITY,
            timeout: DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            idempotency_key: None,
            overlap: OverlapPolicy::default(),
            misfire: MisfirePolicy::default(),
            deadline: None,
            payload: Ok(serde_json::Value::Null),
        }
    }
}

impl JobOptions {
    /// The payload, if every option is in range.
    pub(crate) fn check(&self) -> Result<serde_json::Value> {
        if self.priority > MAX_PRIORITY {
            return Err(EmbeddedError::invalid(
                "priority",
                format!("{} is above {MAX_PRIORITY}", self.priority),
            ));
        }
        if self.timeout < Duration::from_millis(1) {
            return Err(EmbeddedError::invalid("timeout", "must be at least 1ms"));
        }
        check_retry(&self.retry)?;
        if self.deadline.is_some_and(|d| d < Duration::from_millis(1)) {
            return Err(EmbeddedError::invalid("deadline", "must be at least 1ms"));
        }
        if let Some(key) = &self.idempotency_key {
            if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
                return Err(EmbeddedError::invalid(
                    "idempotency_key",
                    format!("must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes"),
                ));
            }
        }
        let payload = self.payload.clone().map_err(EmbeddedError::Payload)?;
        let size = serde_json::to_vec(&payload).map(|v| v.len()).unwrap_or(0);
        if size > MAX_PAYLOAD_BYTES {
            return Err(EmbeddedError::PayloadTooLarge {
                size,
                max: MAX_PAYLOAD_BYTES,
            });
        }
        Ok(payload)
    }
}

/// The bounds the cluster's spec validation holds a retry policy to.
fn check_retry(p: &RetryPolicy) -> Result<()> {
    let bad = |reason: String| Err(EmbeddedError::invalid("retry", reason));
    if p.max_retries > MAX_RETRIES {
        return bad(format!(
            "max_retries {} is above {MAX_RETRIES}",
            p.max_retries
        ));
    }
    if !(1.0..=MAX_MULTIPLIER).contains(&p.multiplier) {
        return bad(format!("multiplier must be in 1..={MAX_MULTIPLIER}"));
    }
    if !(0.0..=1.0).contains(&p.jitter) {
        return bad("jitter must be in 0..=1".to_owned());
    }
    if p.max_interval < p.initial_interval {
        return bad("max_interval is below initial_interval".to_owned());
    }
    Ok(())
}
