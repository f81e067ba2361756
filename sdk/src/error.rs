//! The SDK's error type.
//!
//! One enum for everything the SDK's calls can fail with, split as the rest of ax is into
//! what may succeed when tried again ([`Error::is_retryable`]) and what will not. The errors
//! of the crates underneath are kept as sources, so their words reach the caller unchanged.

use ax_queue::QueueError;
use ax_worker::WorkerError;

/// Errors of the SDK.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting cannot be used.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The worker could not start (a live process holds its id, a bad setting).
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Redis refused or did not answer.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// etcd or Redis could not be reached when the client connected.
    #[error("{0}")]
    Connect(String),
    /// The cluster refused the call: `ApiError::Invalid` lists every problem of a spec,
    /// `NotFound`, `Conflict` (a newer version was written meanwhile), `Unavailable`.
    #[error(transparent)]
    Api(#[from] ax_control::api::ApiError),
}

impl Error {
    /// Whether trying again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Config(_) => false,
            Error::Worker(e) => e.is_retryable(),
            Error::Queue(e) => e.is_retryable(),
            Error::Connect(_) => true,
            Error::Api(e) => e.is_retryable(),
        }
    }
}

impl From<ax_control::ControlError> for Error {
    fn from(e: ax_control::ControlError) -> Self {
        match e {
            ax_control::ControlError::Config(m) => Error::Config(m),
            ax_control::ControlError::Connect(m) => Error::Connect(m),
            ax_control::ControlError::Api(e) => Error::Api(e),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
