//! The election crate's error type.
//!
//! Callers mostly need one decision: campaign again later ([`ElectionError::is_retryable`])
//! or give up (bad settings, undecodable records, cancellation).

use std::time::Duration;

use crate::validity::LossReason;

/// Errors of elections, locks and instance records.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// etcd answered with an error or the connection failed.
    #[error("etcd {op} failed: {source}")]
    Etcd {
        /// The operation, e.g. `lease grant`.
        op: &'static str,
        /// The client error.
        #[source]
        source: etcd_client::Error,
    },
    /// etcd did not answer within the request timeout.
    #[error("etcd {op} timed out after {after:?}")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The session asked to carry a new key is lost or in doubt; open a new session.
    #[error("session lost: {reason}")]
    SessionLost {
        /// Why the session ended.
        reason: LossReason,
    },
    /// The caller's cancellation token fired.
    #[error("cancelled")]
    Cancelled,
    /// The settings are unusable.
    #[error("invalid election config: {0}")]
    InvalidConfig(String),
    /// A record under the prefix is not the JSON this crate writes.
    #[error("record at {key} is not valid: {source}")]
    Decode {
        /// The key holding the record.
        key: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

impl ElectionError {
    /// Whether trying again later can succeed (connection trouble, timeouts).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ElectionError::Etcd { .. } | ElectionError::Timeout { .. }
        )
    }
}

/// Runs one etcd request under `after`, mapping both failure kinds.
pub(crate) async fn timed<T>(
    op: &'static str,
    after: Duration,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, ElectionError> {
    match tokio::time::timeout(after, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(ElectionError::Etcd { op, source }),
        Err(_) => Err(ElectionError::Timeout { op, after }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_split() {
        let t = ElectionError::Timeout {
            op: "get",
            after: Duration::from_secs(1),
        };
        assert!(t.is_retryable());
        assert!(!ElectionError::Cancelled.is_retryable());
        assert!(!ElectionError::InvalidConfig("x".into()).is_retryable());
    }
}
