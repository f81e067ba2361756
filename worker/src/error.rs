//! The worker pool's error type.
//!
//! Handler failures are not errors of the pool (they are outcomes, see `reporter.rs`); what is
//! left is configuration the pool cannot run with and queue errors it could not ride out. The
//! `http` handler's egress guard has an error of its own ([`crate::EgressError`]).

use ax_queue::QueueError;

/// Errors of the worker pool.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A setting cannot be used.
    #[error("invalid worker configuration: {0}")]
    InvalidConfig(String),
    /// Another live process works under this worker id: two processes under one id would
    /// take each other's messages for a dead worker's.
    #[error(
        "worker id `{worker_id}` is in use by a live process (its heartbeat on queue `{queue}` \
         advanced while this one waited): give each replica its own instance id"
    )]
    IdInUse {
        /// The worker id.
        worker_id: String,
        /// The queue whose heartbeat showed it.
        queue: String,
    },
    /// The HTTP client could not be built (its TLS set-up failed).
    #[error("cannot build the http handler's client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// A queue operation failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl WorkerError {
    /// Whether trying again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            WorkerError::InvalidConfig(_)
            | WorkerError::IdInUse { .. }
            | WorkerError::HttpClient(_) => false,
            WorkerError::Queue(e) => e.is_retryable(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = WorkerError> = std::result::Result<T, E>;
