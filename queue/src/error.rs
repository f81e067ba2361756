//! The queue's error type.
//!
//! Callers mostly need one decision: try again later (connection lost, timeout, Redis busy
//! loading) or give up (bad config, a message that cannot be decoded, an unexpected reply).
//! [`QueueError::is_retryable`] makes it; each variant carries the operation it came from so
//! a log line says what failed.

use std::time::Duration;

/// Errors of the Redis queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Redis answered with an error or the connection failed.
    #[error("Redis {op} failed: {source}")]
    Redis {
        /// The queue operation (`enqueue`, `ack`, ...).
        op: &'static str,
        /// The client error.
        #[source]
        source: redis::RedisError,
    },
    /// The operation did not finish within the configured timeout.
    #[error("Redis {op} timed out after {after:?}")]
    Timeout {
        /// The queue operation.
        op: &'static str,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// A message or entry could not be encoded or decoded as JSON.
    #[error("could not {action} {what} as JSON: {source}")]
    Json {
        /// `encode` or `decode`.
        action: &'static str,
        /// What it was (`execution message`, `dead-letter entry`, ...).
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// A script or command answered in a shape the queue does not expect.
    #[error("unexpected reply from Redis {op}: {detail}")]
    UnexpectedReply {
        /// The queue operation.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A configuration value or name cannot be used.
    #[error("invalid queue configuration: {0}")]
    InvalidConfig(String),
    /// A message decoded, but carries options no valid spec has (a retry interval of
    /// centuries, a priority above 9): it was written by something other than ax, or by a
    /// version with other bounds, and goes to the dead letters rather than to a handler.
    #[error("execution message out of bounds: {0}")]
    InvalidMessage(String),
}

impl QueueError {
    /// Whether trying the same operation again later can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            QueueError::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
                    || !matches!(source.retry_method(), redis::RetryMethod::NoRetry)
            }
            QueueError::Timeout { .. } => true,
            QueueError::Json { .. }
            | QueueError::UnexpectedReply { .. }
            | QueueError::InvalidConfig(_)
            | QueueError::InvalidMessage(_) => false,
        }
    }

    /// Whether Redis gave no answer at all (a timeout, a connection lost or refused), as
    /// against an answer that refuses (`OOM`, `READONLY`, `LOADING`): a partition looks like
    /// this, and a leader that sees it for long should let a replica that can reach Redis
    /// lead.
    pub fn is_unreachable(&self) -> bool {
        match self {
            QueueError::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
            }
            QueueError::Timeout { .. } => true,
            _ => false,
        }
    }

    pub(crate) fn redis(op: &'static str) -> impl FnOnce(redis::RedisError) -> QueueError {
        move |source| QueueError::Redis { op, source }
    }
}

/// Result alias of this crate.
pub type Result<T, E = QueueError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_and_timeouts_are_retryable_decoding_is_not() {
        let io = redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert!(QueueError::Redis {
            op: "ack",
            source: io
        }
        .is_retryable());
        assert!(QueueError::Timeout {
            op: "ack",
            after: Duration::from_secs(1)
        }
        .is_retryable());
        let bad = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(!QueueError::Json {
            action: "decode",
            what: "execution message",
            source: bad
        }
        .is_retryable());
        let script = redis::RedisError::from((redis::ErrorKind::ResponseError, "ERR bad"));
        assert!(!QueueError::Redis {
            op: "ack",
            source: script
        }
        .is_retryable());
    }
}
