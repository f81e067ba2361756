//! The errors of reaching a cluster: [`ControlError`].
//!
//! An operation's own refusals are [`crate::api::ApiError`], the contract every front end
//! answers with; this enum is for what happens before any operation: a setting that cannot be
//! used, or a server that cannot be reached. Each message names the setting to look at.

/// Why a connection to the cluster, or a check against it, could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A setting cannot be used (a TLS file missing, an endpoint's scheme against its TLS
    /// setting): permanent until the configuration changes.
    #[error("{0}")]
    Config(String),
    /// etcd or Redis did not answer, or refused the connection: worth retrying.
    #[error("{0}")]
    Connect(String),
    /// The cluster answered and refused the call (over the HTTP API).
    #[error(transparent)]
    Api(#[from] crate::api::ApiError),
}

impl ControlError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ControlError::Config(_) => false,
            ControlError::Connect(_) => true,
            ControlError::Api(e) => e.is_retryable(),
        }
    }
}
