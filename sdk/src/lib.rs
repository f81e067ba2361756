//! The Rust SDK of ax: serve named handlers from your own process against a cluster's
//! queues ([`Worker`]), and register, fire and control tasks from code ([`Client`], with the
//! default `client` feature).
//!
//! A [`Worker`] is the `ax` binary's worker role with your handlers in place of the
//! built-ins: the same pool, reporter, heartbeat, kills, concurrency keys, priorities,
//! prefetch, graceful shutdown and refusal of a second live process under one id (both start
//! at [`ax_worker::cluster_pool`]). The leader, the console, deadlines, dependencies and
//! alerts see its executions as they see a replica's. This crate only adds typed payloads and
//! a small surface over those pieces, so the crates it wraps stay free to change.
//!
//! ```no_run
//! use ax_sdk::{Config, HandlerError, Job, Worker};
//! use tokio_util::sync::CancellationToken;
//!
//! #[derive(serde::Deserialize)]
//! struct Email {
//!     to: String,
//! }
//!
//! async fn send(job: Job<Email>) -> Result<(), HandlerError> {
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
//! See `docs/rust-sdk.md` for what a handler's errors mean, and why a handler must be
//! idempotent (delivery is at least once).

#[cfg(feature = "client")]
pub mod client;
mod config;
mod error;
mod job;
mod worker;

pub use ax_queue::{QueueConfig, QueueLimits};
pub use ax_scheduler_core::{ExecutionId, HandlerError, UtcMillis};
pub use ax_worker::PoolSummary as Summary;
#[cfg(feature = "client")]
pub use client::Client;
pub use config::Config;
pub use error::{Error, Result};
pub use job::Job;
pub use worker::{Worker, WorkerBuilder};
