//! The ax scheduling kernel inside any Rust program: give a closure a future point in time to
//! run, with bounded concurrency, priorities, timeouts, retries, cancellation and dead
//! letters, and no middleware to operate.
//!
//! It is the cluster's kernel, not a second one: the [`Dispatcher`] of `ax-scheduler-core`
//! (timing wheel with its overflow heap, misfire policies, overlap, breaker, pauses) decides
//! what fires when, and the core's retry decision and handler-result mapping decide what an
//! attempt's end leads to, exactly as they do for `ax serve`. This crate is the shell around
//! them that the cluster spreads over etcd, Redis and its worker pool: a driver task that
//! sleeps until the next due instant, a queue of executions waiting for one of the workers
//! (priority with aging), and one tokio task per running attempt.
//!
//! [`Dispatcher`]: ax_scheduler_core::Dispatcher
//!
//! # Example: close an unpaid order 30 minutes later
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use ax_embedded::{Job, Kernel};
//!
//! // Paused time, so the doctest's 30 minutes pass at once.
//! #[tokio::main(flavor = "current_thread", start_paused = true)]
//! async fn main() -> Result<(), ax_embedded::EmbeddedError> {
//!     let kernel = Kernel::builder().workers(5).build()?;
//!     let paid = Arc::new(AtomicBool::new(false));
//!     let closed = Arc::new(AtomicBool::new(false));
//!
//!     let job = {
//!         let (paid, closed) = (paid.clone(), closed.clone());
//!         Job::new(move |_ctx| {
//!             let (paid, closed) = (paid.clone(), closed.clone());
//!             async move {
//!                 if !paid.load(Ordering::SeqCst) {
//!                     closed.store(true, Ordering::SeqCst);
//!                 }
//!                 Ok(())
//!             }
//!         })
//!         // Placing the same order twice schedules one close.
//!         .idempotency_key("close-order-42")
//!         .timeout(Duration::from_secs(5))
//!     };
//!     let id = kernel.after(Duration::from_secs(30 * 60), job)?;
//!
//!     tokio::time::sleep(Duration::from_secs(31 * 60)).await;
//!     assert!(closed.load(Ordering::SeqCst));
//!     // Done and forgotten: nothing is left to cancel.
//!     assert!(matches!(kernel.cancel(id), Err(ax_embedded::EmbeddedError::NotFound(_))));
//!     kernel.shutdown(Duration::from_secs(10)).await;
//!     Ok(())
//! }
//! ```
//!
//! # What a job gets
//!
//! - **When**: [`Kernel::at`], [`Kernel::after`], [`Kernel::every`], [`Kernel::cron`] (any
//!   IANA zone); each returns a [`JobId`].
//! - **Control**: [`Kernel::cancel`] before it starts, [`Kernel::kill`] while it runs (its
//!   [`Context::cancel`] token fires and the attempt is dropped), [`Kernel::trigger`],
//!   [`Kernel::pause`] / [`Kernel::resume`]. Each answers a [`Result`], as the SDK
//!   client's operations do, with [`EmbeddedError::NotFound`] for a job the kernel does
//!   not hold.
//! - **Options** ([`Job`]): priority, timeout, retry policy, overlap and misfire policy,
//!   idempotency key, payload, with the cluster's defaults and meaning.
//! - **Failures**: an error, a timeout or a panic is a failed attempt; the kernel lives on.
//!   Retries follow the job's policy; an execution that fails for good becomes a
//!   [`DeadLetter`] ([`Kernel::dead_letters`], [`Kernel::requeue`],
//!   [`Kernel::purge_dead_letters`]).
//! - **Shutdown**: [`Kernel::shutdown`] stops starting, drains within a grace, then cancels.
//! - **Tracing**: each attempt runs in an `execution` span with `task_id`, `execution_id`,
//!   `fire_at`, `attempt` and `lateness_ms`, the cluster's fields. The crate installs no
//!   subscriber.
//!
//! # Durable jobs
//!
//! Closures live in memory only. A job run by a named handler ([`Job::named`], registered
//! with [`KernelBuilder::handler`]) on a kernel with a store ([`KernelBuilder::store`], a
//! redb file) is persisted: [`Kernel::submit`] returns once it is on disk (group commit), and
//! a restart runs again what was in flight (at least once, with the same execution id and
//! [`Context::redelivered`] set), plans the missed fires by each job's misfire policy and
//! starts at half the workers while it catches up. See `docs/embedded.md` for the design
//! and its limits.

mod dead;
mod ended;
mod engine;
mod error;
mod job;
mod job_id;
mod kernel;
mod metrics;
mod parents;
mod run;
mod staging;
mod store;
mod table;

pub use ax_scheduler_core::handler;
pub use ax_scheduler_core::handler::{typed, typed_with, Context, Handler};
pub use ax_scheduler_core::{
    ExecutionId, HandlerError, MisfirePolicy, OverlapPolicy, RetryPolicy, TaskOptions, TaskStatus,
    UtcMillis,
};
pub use dead::DeadLetter;
pub use ended::{JobEnd, ENDS_KEPT_FOR, MAX_ENDS_KEPT};
pub use error::{EmbeddedError, Result};
pub use job::{Job, JobFuture};
pub use job_id::{JobId, EMBEDDED_RUNNER};
pub use kernel::{Kernel, KernelBuilder, ShutdownReport, When, DEFAULT_TICK, DEFAULT_WORKERS};
pub use parents::Parent;

#[cfg(test)]
mod tests;

/// The Rust blocks of docs/embedded.md, built (and run, but for `no_run` ones) as doctests
/// so the page cannot drift from the API (`scheduler-core/tests/doc_blocks.rs`).
#[cfg(doctest)]
#[doc = include_str!("../../docs/embedded.md")]
mod embedded_md {}
