//! What a handler is given: one attempt of one execution, with its payload decoded.
//!
//! A handler sees the execution through [`Job`] only, not the queue's message type, so the
//! message can grow fields without breaking handlers; the payload is decoded once, before the
//! handler runs, and one that does not fit the handler's type fails the attempt permanently
//! (trying the same bytes again cannot help).

use std::future::Future;
use std::marker::PhantomData;

use ax_queue::ExecutionMessage;
use ax_scheduler_core::{ExecutionId, HandlerError, UtcMillis};
use ax_worker::{Handler, HandlerContext, HandlerFuture};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// One attempt of an execution, with its payload as a `T`.
#[derive(Debug)]
pub struct Job<T> {
    /// The task's payload (`null` decoded as `T` when the task has none).
    pub payload: T,
    execution_id: ExecutionId,
    attempt: u32,
    namespace: std::sync::Arc<str>,
    task_id: std::sync::Arc<str>,
    fire_at: UtcMillis,
    worker_id: String,
    cancel: CancellationToken,
}

impl<T> Job<T> {
    /// The execution's id: the same for every attempt of it, and the key to make a handler
    /// idempotent with (delivery is at least once).
    pub fn execution_id(&self) -> ExecutionId {
        self.execution_id
    }

    /// This attempt, 1 for the first: as ax counts attempts everywhere people and handlers
    /// read them (`ax task history`, `X-Ax-Attempt`, the embedded kernel's jobs).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The task's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The schedule instant this execution stands for.
    pub fn fire_at(&self) -> UtcMillis {
        self.fire_at
    }

    /// The id of the worker running it.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Cancelled when the attempt times out, is killed by an operator, or the worker's
    /// shutdown grace is over: a long handler should watch it and return. The attempt is
    /// dropped soon after.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the attempt was told to stop (see [`Job::cancel_token`]).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// Decodes the payload of `exec` as a `T`, or the permanent failure that says why not.
fn job_of<T: DeserializeOwned>(
    ctx: HandlerContext,
    exec: &ExecutionMessage,
) -> Result<Job<T>, HandlerError> {
    let payload = T::deserialize(&exec.payload)
        .map_err(|e| HandlerError::Permanent(format!("payload does not fit the handler: {e}")))?;
    Ok(Job {
        payload,
        execution_id: exec.execution_id,
        // The queue's message keeps the index from 0.
        attempt: exec.attempt.saturating_add(1),
        namespace: exec.namespace.clone(),
        task_id: exec.task_id.clone(),
        fire_at: exec.fire_at,
        worker_id: ctx.worker_id,
        cancel: ctx.cancel,
    })
}

/// A typed async function as the pool's [`Handler`].
pub(crate) struct Typed<F, T> {
    f: F,
    // `fn() -> T`: the handler makes `T`s, it holds none, so it is `Send + Sync` whatever `T`.
    payload: PhantomData<fn() -> T>,
}

impl<F, T> Typed<F, T> {
    pub(crate) fn new(f: F) -> Self {
        Typed {
            f,
            payload: PhantomData,
        }
    }
}

impl<F, Fut, T> Handler for Typed<F, T>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Job<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    fn run<'a>(&'a self, ctx: HandlerContext, exec: &'a ExecutionMessage) -> HandlerFuture<'a> {
        match job_of::<T>(ctx, exec) {
            Ok(job) => Box::pin((self.f)(job)),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}
