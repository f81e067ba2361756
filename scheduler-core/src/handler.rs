//! The handler contract both shells run: one trait, one context, so a handler written once
//! runs in the embedded kernel and on a cluster worker unchanged.
//!
//! A [`Handler`] gets a [`Context`] per attempt and returns a boxed future of
//! `Result<(), HandlerError>`; boxed, so handlers are trait objects in a table by name, and
//! runtime-free, so this crate stays without tokio. The context carries what both shells
//! know of an attempt (execution id, attempt number from 1, fire time, payload, deadline, a
//! [`Cancel`] signal) and reaches what only the shell can do through a [`Shell`]: its
//! runner's id, progress reports, and the shell's own extra parts ([`Context::extension`],
//! the cluster worker's message and HTTP client). A shell that cannot do something answers
//! in its own sensible way (the embedded kernel logs progress, as nobody polls it) rather
//! than the handler having to know where it runs. [`typed`] adapts an async function of a
//! [`Typed<T>`] (the payload decoded by serde) into a handler.

use std::any::Any;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::attempt::HandlerError;
use crate::execution_id::ExecutionId;
use crate::time::UtcMillis;

/// A boxed handler future.
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'a>>;

/// Runs attempts of one handler name, in the embedded kernel or on a cluster worker.
///
/// ```
/// use ax_scheduler_core::handler::{Context, Handler, HandlerFuture};
///
/// struct Hello;
///
/// impl Handler for Hello {
///     fn run(&self, ctx: Context) -> HandlerFuture<'_> {
///         Box::pin(async move {
///             println!("attempt {} of {}", ctx.attempt(), ctx.execution_id());
///             Ok(())
///         })
///     }
/// }
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt.
    fn run(&self, ctx: Context) -> HandlerFuture<'_>;

    /// How long the shell waits, once it cancelled [`Context::cancel`] (a timeout, a kill,
    /// a shutdown), for the attempt to end by itself before it drops the handler's future.
    /// Zero (the default) drops it at once; a handler with something outside the process to
    /// stop cleanly (a child process group) asks for the time that takes.
    fn stop_grace(&self, _ctx: &Context) -> Duration {
        Duration::ZERO
    }
}

/// A shared handler is one: the same value can serve an embedded kernel and a cluster
/// worker in one process.
impl<H: Handler + ?Sized> Handler for Arc<H> {
    fn run(&self, ctx: Context) -> HandlerFuture<'_> {
        (**self).run(ctx)
    }

    fn stop_grace(&self, ctx: &Context) -> Duration {
        (**self).stop_grace(ctx)
    }
}

/// What a builder takes as a handler: any [`Handler`] (an `Arc` of one to share it), or an
/// async function of a [`Typed<T>`] (made one with [`typed`]). `M` only tells the two apart.
pub trait IntoHandler<M>: Send + Sync + 'static {
    /// The handler.
    fn into_handler(self) -> Arc<dyn Handler>;
}

/// Marks a [`Handler`] given to [`IntoHandler`].
#[derive(Debug)]
pub enum AsHandler {}

impl<H: Handler> IntoHandler<AsHandler> for H {
    fn into_handler(self) -> Arc<dyn Handler> {
        Arc::new(self)
    }
}

impl<T, F, Fut> IntoHandler<fn(Typed<T>)> for F
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Typed<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    fn into_handler(self) -> Arc<dyn Handler> {
        Arc::new(typed(self))
    }
}

/// A future of a [`Shell`]'s answer.
pub type ShellFuture<'a> = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'a>>;

/// How far a long attempt is, as a handler reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// 0 to 100, if the handler knows.
    pub percent: Option<f64>,
    /// What it is doing.
    pub note: Option<String>,
}

/// What the shell running an attempt does for its handler beyond the attempt's data.
pub trait Shell: Send + Sync + 'static {
    /// Who runs the attempt: the cluster worker's id, or the embedded kernel's name.
    fn runner(&self) -> &str;

    /// Records a progress report of the attempt.
    fn progress(&self, progress: Progress) -> ShellFuture<'_>;

    /// The shell's own parts, for handlers that need them ([`Context::extension`]).
    fn as_any(&self) -> &dyn Any;

    /// Lets the attempt end after its handler returned ([`Context::defer`]). A shell that
    /// cannot refuses with a permanent failure (the default).
    fn defer(&self) -> DeferFuture<'_> {
        Box::pin(std::future::ready(Err(HandlerError::Permanent(
            "this runner cannot defer an attempt's end".into(),
        ))))
    }
}

/// A future of [`Shell::defer`]'s answer.
pub type DeferFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Deferred, HandlerError>> + Send + 'a>>;

/// What ends a deferred attempt: the shell's side of a [`Deferred`].
pub trait Finisher: Send + Sync + 'static {
    /// Records a progress report (and pushes the attempt's deadline a timeout further).
    fn progress(&self, progress: Progress) -> ShellFuture<'_>;
    /// Ends the attempt with `result`, as a handler's return would have.
    fn complete(&self, result: Result<(), HandlerError>) -> ShellFuture<'_>;
}

/// A deferred attempt's end, to report later from anywhere in the process (a spawned
/// task, a callback): progress while it runs, then its one [`Deferred::complete`].
#[derive(Clone)]
pub struct Deferred(Arc<dyn Finisher>);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred")
    }
}

impl Deferred {
    /// The handle of a shell's `finisher`.
    pub fn new(finisher: Arc<dyn Finisher>) -> Self {
        Deferred(finisher)
    }

    /// Reports how far the job is; it also pushes the attempt's deadline a full timeout
    /// further, so a job that keeps reporting does not time out.
    pub async fn progress(
        &self,
        percent: Option<f64>,
        note: impl Into<Option<String>>,
    ) -> Result<(), HandlerError> {
        let progress = Progress {
            percent,
            note: note.into(),
        };
        self.0.progress(progress).await
    }

    /// Ends the attempt: `Ok(())` succeeded, an error failed (retried by the task's policy
    /// when retryable). Only the first end of an attempt counts; one after it, or after its
    /// deadline, is refused with a permanent error.
    pub async fn complete(self, result: Result<(), HandlerError>) -> Result<(), HandlerError> {
        self.0.complete(result).await
    }
}

/// What a shell knows of an attempt, to make its [`Context`] with ([`Context::new`]).
#[derive(Clone, Debug)]
pub struct AttemptInfo {
    /// The execution: the same for all its attempts.
    pub execution_id: ExecutionId,
    /// The attempt, 1 for the first.
    pub attempt: u32,
    /// The schedule instant the execution stands for.
    pub fire_at: UtcMillis,
    /// When the attempt times out.
    pub deadline: UtcMillis,
    /// The task's namespace.
    pub namespace: Arc<str>,
    /// The task's (or job's) id.
    pub task_id: Arc<str>,
    /// Whether this attempt runs again one that was in flight when its process stopped.
    pub redelivered: bool,
    /// The payload (`null` when there is none).
    pub payload: serde_json::Value,
}

/// One attempt as its handler sees it. Cheap to clone (one shared allocation).
#[derive(Clone)]
pub struct Context(Arc<Inner>);

struct Inner {
    info: AttemptInfo,
    cancel: Cancel,
    shell: Arc<dyn Shell>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("execution_id", &self.0.info.execution_id)
            .field("attempt", &self.0.info.attempt)
            .field("runner", &self.runner())
            .finish_non_exhaustive()
    }
}

impl Context {
    /// The context of the attempt `info` describes, run by `shell`, told to stop by `cancel`.
    pub fn new(info: AttemptInfo, cancel: Cancel, shell: Arc<dyn Shell>) -> Self {
        Context(Arc::new(Inner {
            info,
            cancel,
            shell,
        }))
    }

    /// The execution's id: the same for every attempt of it, and the key to make a handler
    /// idempotent with (delivery is at least once).
    pub fn execution_id(&self) -> ExecutionId {
        self.0.info.execution_id
    }

    /// This attempt, 1 for the first, as ax counts attempts everywhere they are shown.
    pub fn attempt(&self) -> u32 {
        self.0.info.attempt
    }

    /// The schedule instant this execution stands for.
    pub fn fire_at(&self) -> UtcMillis {
        self.0.info.fire_at
    }

    /// When this attempt times out (its start plus the task's timeout).
    pub fn deadline(&self) -> UtcMillis {
        self.0.info.deadline
    }

    /// The task's namespace.
    pub fn namespace(&self) -> &str {
        &self.0.info.namespace
    }

    /// The task's id (a job's id in the embedded kernel).
    pub fn task_id(&self) -> &str {
        &self.0.info.task_id
    }

    /// Whether this attempt runs again one that was in flight when the process holding it
    /// stopped: a handler whose effect must happen once checks what it recorded under the
    /// execution id.
    pub fn redelivered(&self) -> bool {
        self.0.info.redelivered
    }

    /// The payload as JSON (`null` when there is none).
    pub fn payload(&self) -> &serde_json::Value {
        &self.0.info.payload
    }

    /// The payload as a `T`; one that does not fit is a permanent failure (the same bytes
    /// will not fit next time either).
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        T::deserialize(&self.0.info.payload)
            .map_err(|e| HandlerError::Permanent(format!("payload does not fit the handler: {e}")))
    }

    /// Fired when the attempt times out, is killed or its shell stops for good: a long
    /// handler watches it and returns. The attempt's future is dropped soon after.
    pub fn cancel(&self) -> &Cancel {
        &self.0.cancel
    }

    /// Whether the attempt was told to stop (see [`Context::cancel`]).
    pub fn is_cancelled(&self) -> bool {
        self.0.cancel.is_cancelled()
    }

    /// Who runs the attempt: the cluster worker's id, or `embedded`.
    pub fn runner(&self) -> &str {
        self.0.shell.runner()
    }

    /// Reports how far the attempt is (`percent` 0 to 100, and a note). On a cluster the
    /// console and `GET /api/v1/executions/{id}` show the last one; the embedded kernel
    /// logs it.
    pub async fn progress(
        &self,
        percent: Option<f64>,
        note: impl Into<Option<String>>,
    ) -> Result<(), HandlerError> {
        let progress = Progress {
            percent,
            note: note.into(),
        };
        self.0.shell.progress(progress).await
    }

    /// Says the attempt goes on after the handler returns: the handler returns `Ok(())` at
    /// once and the returned [`Deferred`] reports progress and ends the attempt later. On a
    /// cluster the worker's slot is freed meanwhile and the attempt waits (shown `waiting`,
    /// with its progress) until the completion or its deadline, a task timeout after the
    /// last progress report; the embedded kernel holds the attempt's worker until then.
    pub async fn defer(&self) -> Result<Deferred, HandlerError> {
        self.0.shell.defer().await
    }

    /// The shell's part of type `T`, if the shell running the attempt has one (the cluster
    /// worker's message and HTTP client, for its built-in handlers).
    pub fn extension<T: Any>(&self) -> Option<&T> {
        self.0.shell.as_any().downcast_ref::<T>()
    }
}

/// One attempt with its payload decoded as a `T`: what a [`typed`] handler gets. Derefs to
/// its [`Context`].
#[derive(Debug)]
pub struct Typed<T> {
    /// The payload.
    pub payload: T,
    ctx: Context,
}

impl<T> Typed<T> {
    /// The attempt's context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

impl<T> Deref for Typed<T> {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.ctx
    }
}

/// A handler from an async function of a [`Typed<T>`]: the payload is decoded before it
/// runs, and one that does not decode fails the attempt permanently (take
/// `serde_json::Value` for any JSON).
///
/// ```
/// use ax_scheduler_core::handler::{typed, Handler, Typed};
/// use ax_scheduler_core::HandlerError;
///
/// #[derive(serde::Deserialize)]
/// struct Email {
///     to: String,
/// }
///
/// fn email() -> impl Handler {
///     typed(|job: Typed<Email>| async move {
///         if job.payload.to.is_empty() {
///             return Err(HandlerError::Permanent("no recipient".into()));
///         }
///         Ok(())
///     })
/// }
/// # let _ = email();
/// ```
pub fn typed<T, F, Fut>(f: F) -> TypedHandler<F, T>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Typed<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    TypedHandler {
        f,
        payload: PhantomData,
    }
}

/// The handler [`typed`] makes.
pub struct TypedHandler<F, T> {
    f: F,
    // `fn() -> T`: the handler makes `T`s, it holds none, so it is `Send + Sync` whatever `T`.
    payload: PhantomData<fn() -> T>,
}

impl<F, T> std::fmt::Debug for TypedHandler<F, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TypedHandler")
    }
}

impl<F, Fut, T> Handler for TypedHandler<F, T>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Typed<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    fn run(&self, ctx: Context) -> HandlerFuture<'_> {
        match ctx.payload_as::<T>() {
            Ok(payload) => Box::pin((self.f)(Typed { payload, ctx })),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// A handler from an async function of shared state and a [`Typed<T>`]: the state is
/// cloned for each attempt and handed to the function by value, so the function captures
/// nothing and clones nothing itself (with `typed`, a closure holding an `Arc` must clone it
/// once to move into each attempt's future and once more outside). An `Arc` is the usual
/// state; its clone is one counter increment.
///
/// ```
/// use std::sync::Arc;
/// use ax_scheduler_core::handler::{typed_with, Handler, Typed};
///
/// struct Db;
/// impl Db {
///     async fn close_order(&self, _id: u64) -> Result<(), std::io::Error> { Ok(()) }
/// }
///
/// fn close_unpaid(db: Arc<Db>) -> impl Handler {
///     typed_with(db, |db: Arc<Db>, job: Typed<u64>| async move {
///         Ok(db.close_order(job.payload).await?)
///     })
/// }
/// # let _ = close_unpaid(Arc::new(Db));
/// ```
pub fn typed_with<S, T, F, Fut>(state: S, f: F) -> TypedWith<S, F, T>
where
    S: Clone + Send + Sync + 'static,
    T: DeserializeOwned + Send + 'static,
    F: Fn(S, Typed<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    TypedWith {
        state,
        f,
        payload: PhantomData,
    }
}

/// The handler [`typed_with`] makes.
pub struct TypedWith<S, F, T> {
    state: S,
    f: F,
    payload: PhantomData<fn() -> T>,
}

impl<S, F, T> std::fmt::Debug for TypedWith<S, F, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TypedWith")
    }
}

impl<S, F, Fut, T> Handler for TypedWith<S, F, T>
where
    S: Clone + Send + Sync + 'static,
    T: DeserializeOwned + Send + 'static,
    F: Fn(S, Typed<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    fn run(&self, ctx: Context) -> HandlerFuture<'_> {
        match ctx.payload_as::<T>() {
            Ok(payload) => Box::pin((self.f)(self.state.clone(), Typed { payload, ctx })),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// A stop signal without a runtime: [`Cancel::cancel`] once, and every
/// [`Cancel::cancelled`] future ends.
#[derive(Clone, Default)]
pub struct Cancel(Arc<CancelInner>);

#[derive(Default)]
struct CancelInner {
    cancelled: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Cancel").field(&self.is_cancelled()).finish()
    }
}

impl Cancel {
    /// A signal not yet given.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives the signal (again is a no-op).
    pub fn cancel(&self) {
        if !self.0.cancelled.swap(true, Ordering::AcqRel) {
            let wakers = std::mem::take(&mut *self.wakers());
            wakers.into_iter().for_each(Waker::wake);
        }
    }

    /// Whether the signal was given.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// Ends once the signal is given.
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |cx| {
            if self.is_cancelled() {
                return Poll::Ready(());
            }
            let mut wakers = self.wakers();
            // Checked again under the lock `cancel` takes: a signal given between the two
            // checks has either seen this waker or is seen here.
            if self.is_cancelled() {
                return Poll::Ready(());
            }
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
            Poll::Pending
        })
    }

    fn wakers(&self) -> std::sync::MutexGuard<'_, Vec<Waker>> {
        // Poisoned only by a panic while pushing a waker: the list is whole.
        self.0.wakers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Quiet;

    impl Shell for Quiet {
        fn runner(&self) -> &str {
            "test"
        }
        fn progress(&self, _progress: Progress) -> ShellFuture<'_> {
            Box::pin(std::future::ready(Ok(())))
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn ctx(payload: serde_json::Value) -> Context {
        let info = AttemptInfo {
            execution_id: ExecutionId::from_u128(7),
            attempt: 1,
            fire_at: UtcMillis(1),
            deadline: UtcMillis(2),
            namespace: Arc::from("ns"),
            task_id: Arc::from("t"),
            redelivered: false,
            payload,
        };
        Context::new(info, Cancel::new(), Arc::new(Quiet))
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn typed_handlers_decode_or_fail_permanently() {
        let h = typed(|job: Typed<u32>| async move {
            assert_eq!(job.runner(), "test");
            if job.payload == 3 {
                Ok(())
            } else {
                Err(HandlerError::Retryable("not 3".into()))
            }
        });
        assert_eq!(block_on(h.run(ctx(3.into()))), Ok(()));
        assert!(block_on(h.run(ctx(4.into())))
            .expect_err("4")
            .is_retryable());
        let bad = block_on(h.run(ctx("x".into()))).expect_err("a string is no u32");
        assert!(!bad.is_retryable());
        assert!(ctx(1.into()).extension::<Quiet>().is_some());
        assert!(ctx(1.into()).extension::<String>().is_none());
    }

    #[test]
    fn a_handler_with_state_gets_it_by_value_for_each_attempt() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let h = typed_with(Arc::clone(&seen), |seen, job: Typed<u32>| async move {
            seen.lock().expect("seen").push(job.payload);
            Ok(())
        });
        for n in [1, 2, 3] {
            assert_eq!(block_on(h.run(ctx(n.into()))), Ok(()));
        }
        assert_eq!(*seen.lock().expect("seen"), [1, 2, 3]);
        assert!(!block_on(h.run(ctx("x".into())))
            .expect_err("no u32")
            .is_retryable());
    }

    #[test]
    fn cancel_wakes_every_waiter_once_given() {
        let c = Cancel::new();
        let waiter = c.clone();
        block_on(async move {
            let wait = tokio::spawn(async move { waiter.cancelled().await });
            tokio::task::yield_now().await;
            assert!(!c.is_cancelled());
            c.cancel();
            c.cancel();
            wait.await.expect("joined");
            // Given before anyone waits: ends at once.
            c.cancelled().await;
        });
    }
}
