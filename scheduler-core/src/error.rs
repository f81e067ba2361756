//! The crate's error type.
//!
//! Everything here is pure logic over data the caller handed in, so no error is transient:
//! retrying the same call with the same input gives the same answer. `is_retryable` is
//! therefore `false` throughout; it exists so that callers treat every crate's errors alike.

use crate::status::TaskStatus;
use crate::validate::ValidationErrors;

/// Errors of the scheduling core.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// A task spec (or a part of one, such as its schedule) is invalid; every problem is listed.
    #[error("invalid task spec:\n{0}")]
    Invalid(#[from] ValidationErrors),
    /// A schedule that compiled cannot answer a question (e.g. an instant outside the
    /// representable range).
    #[error("schedule `{schedule}`: {reason}")]
    Schedule {
        /// The schedule as the user wrote it.
        schedule: String,
        /// What went wrong.
        reason: String,
    },
    /// A task state change that the state machine does not allow.
    #[error("task status cannot change from {from} to {to}")]
    IllegalTransition {
        /// Current status.
        from: TaskStatus,
        /// Requested status.
        to: TaskStatus,
    },
}

impl CoreError {
    /// Always `false`: the same input gives the same error (see the module note).
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// `error` and its causes, `: `-separated (what anyhow's `{:#}` shows): a message for people
/// from an error whose own text hides its cause, as an HTTP client's does.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot reach etcd")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("connection refused")]
    struct Inner;

    #[test]
    fn a_chain_shows_every_cause_in_order() {
        assert_eq!(
            error_chain(&Outer(Inner)),
            "cannot reach etcd: connection refused"
        );
        assert_eq!(error_chain(&Inner), "connection refused");
    }
}
