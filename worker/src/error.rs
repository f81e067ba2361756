//! The worker pool's error type.
//!
//! Handler failures are not errors of the pool (they are outcomes, see `reporter.rs`); what is
//! left is configuration the pool cannot run with and queue errors it could not ride out.

use ax_queue::QueueError;

/// Errors of the worker pool.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A setting cannot be used.
    #[error("invalid worker configuration: {0}")]
    InvalidConfig(String),
    /// A queue operation failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl WorkerError {
    /// Whether trying again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            WorkerError::InvalidConfig(_) => false,
            WorkerError::Queue(e) => e.is_retryable(),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = WorkerError> = std::result::Result<T, E>;
