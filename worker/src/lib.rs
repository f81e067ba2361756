//! ax's worker pool: runs execution messages from the Redis queue.
//!
//! A [`WorkerPool`] serves some queues with bounded concurrency, finds each execution's
//! handler in a [`HandlerRegistry`] (built-ins `http`, `log`, `noop` and `command`, plus
//! user async closures), runs it under its timeout with panics caught, settles the message
//! (ack, a jittered retry in Redis's delayed set, or the dead-letter queue) and tells an
//! [`ExecutionReporter`] ([`QueueReporter`] in a cluster: events for the leader and history
//! through Redis). An `http.async` attempt whose receiver answers 202 is awaiting
//! instead and ended later by its completion or its deadline ([`awaiting`]).
//!
//! [`cluster_pool`] puts a pool together for a cluster's queues (reporter, partitions, the
//! claim of its id): the `ax` binary's worker role and the Rust SDK's worker both start there.

pub mod awaiting;
mod builtin;
mod cluster;
pub mod command;
pub mod egress;
mod error;
mod handler;
mod long;
mod pool;
mod publisher;
mod registry;
mod reporter;
pub mod retry;
pub mod secrets;
mod supervise;

pub use builtin::{
    classify_status, HttpHandler, LogHandler, NoopHandler, ATTEMPT_HEADER, COMPLETION_TOKEN_HEADER,
    COMPLETION_URL_HEADER, EXECUTION_ID_HEADER, MAX_REDIRECTS,
};
pub use cluster::{cluster_pool, NoMetrics};
pub use command::{CommandConfig, CommandHandler, CommandsConfig};
pub use egress::{EgressClient, EgressError, EgressPolicy, HostPattern};
pub use error::{Result, WorkerError};
pub use handler::{
    Cancel, ClusterAttempt, Context, Handler, HandlerContext, HandlerError, HandlerFuture,
    OutputSlot,
};
pub use long::LongJob;
pub use pool::{
    PoolSummary, WorkerConfig, WorkerPool, DEFAULT_CONCURRENCY, DEFAULT_PREFETCH,
    DEFAULT_SHUTDOWN_GRACE,
};
pub use publisher::{QueueReporter, WorkerMetrics};
pub use registry::HandlerRegistry;
pub use reporter::{
    ChannelReporter, ExecutionReport, ExecutionReporter, NoopReporter, ReportEvent, ReportFuture,
};
pub use secrets::{Placement, SecretRule, SecretSource};
