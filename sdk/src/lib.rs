//! The Rust SDK of ax: serve named handlers from your own process against a cluster's
//! queues ([`Worker`]), and register, fire and control tasks from code ([`Client`]).
//!
//! A [`Worker`] is the `ax` binary's worker role with your handlers in place of the
//! built-ins: the same pool, reporter, heartbeat, kills, concurrency keys, priorities,
//! prefetch, graceful shutdown and refusal of a second live process under one id (both start
//! at [`ax_worker::cluster_pool`]). The leader, the console, deadlines, dependencies and
//! alerts see its executions as they see a replica's. This crate only adds typed payloads and
//! a small surface over those pieces, so the crates it wraps stay free to change.
//!
//! ```no_run
//! use ax_sdk::{Config, HandlerError, Typed, Worker};
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(serde::Deserialize)]
//! struct Email {
//!     to: String,
//! }
//!
//! async fn send(job: Typed<Email>) -> Result<(), HandlerError> {
//!     if job.payload.to.is_empty() {
//!         return Err(HandlerError::Permanent("no recipient".into()));
//!     }
//!     Ok(())
//! }
//!
//! # async fn serve() -> Result<(), ax_sdk::Error> {
//! let shutdown = CancellationToken::new();
//! let summary = Worker::builder(Config::redis("redis://127.0.0.1:6379"))
//!     .handler("email.send", send)
//!     .queues(["mail"])
//!     .concurrency(8)
//!     .run(shutdown)
//!     .await?;
//! println!("ran {} attempts", summary.taken);
//! # Ok(())
//! # }
//! ```
//!
//! A handler's error says whether trying again can help: a [`HandlerError::Retryable`]
//! attempt is retried by the task's retry policy, a [`HandlerError::Permanent`] one goes to
//! the dead-letter queue at once.
//!
//! ```
//! use ax_sdk::HandlerError;
//!
//! fn classify(status: u16) -> Result<(), HandlerError> {
//!     match status {
//!         200..=299 => Ok(()),
//!         429 | 500..=599 => Err(HandlerError::Retryable(format!("upstream said {status}"))),
//!         _ => Err(HandlerError::Permanent(format!("upstream refused: {status}"))),
//!     }
//! }
//! assert!(classify(503).unwrap_err().is_retryable());
//! assert!(!classify(404).unwrap_err().is_retryable());
//! ```
//!
//! Delivery is at least once: an execution whose worker died runs again under the same
//! [`Context::execution_id`], which is what a handler with effects makes itself idempotent with.
//! See `docs/rust-sdk.md`.

pub mod client;
mod config;
mod error;
mod filter;
mod job;
mod worker;

pub use ax_queue::{QueueConfig, QueueLimits};
pub use ax_scheduler_core::{
    ExecutionId, HandlerError, MisfirePolicy, OverlapPolicy, RetryPolicy, Schedule, TaskOptions,
    TaskSpec, UtcMillis,
};
pub use ax_worker::PoolSummary as Summary;
pub use client::{Client, ScheduleRequest, ScheduleResult, ScheduledPage, ScheduledView};
pub use config::Config;
pub use error::{Error, Result};
pub use filter::TaskFilter;
pub use job::{
    typed, typed_with, Cancel, Context, Handler, HandlerFuture, IntoHandler, Progress, Typed,
};
pub use worker::{Worker, WorkerBuilder};

/// The Rust blocks of docs/rust-sdk.md and of the README (whose embedded example takes
/// `ax-embedded`, a dev-dependency here), built (and run, but for `no_run` ones) as
/// doctests so the pages cannot drift from the API (`scheduler-core/tests/doc_blocks.rs`).
#[cfg(doctest)]
#[doc = include_str!("../../docs/rust-sdk.md")]
mod rust_sdk_md {}

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme_md {}
