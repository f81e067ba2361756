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
    #[cfg(feature = "client")]
    #[error(transparent)]
    Api(#[from] ax_engine::api::ApiError),
}

impl Error {
    /// Whether trying again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Config(_) => false,
            Error::Worker(e) => e.is_retryable(),
            Error::Queue(e) => e.is_retryable(),
            Error::Connect(_) => true,
            #[cfg(feature = "client")]
            Error::Api(e) => matches!(
                e,
                ax_engine::api::ApiError::Unavailable(_)
                    | ax_engine::api::ApiError::Conflict(_)
                    | ax_engine::api::ApiError::Limit { .. }
            ),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
