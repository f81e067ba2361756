//! The crate's one error type.
//!
//! Everything a caller can get wrong is refused at the call that got it wrong (a cron
//! expression, a time zone, a duration, an oversized payload), so a job that was accepted
//! is one the kernel can run. The retryable/permanent split tells a caller whether the same
//! call may succeed later: bad input never does, nor does a kernel shutting down; a store
//! write that failed may.
//!
//! A control operation (`cancel`, `kill`, `trigger`, `pause`, `resume`, `requeue`) on a job
//! the kernel does not hold is [`EmbeddedError::NotFound`], as the SDK client's same
//! operation on a task it cannot find is its `NotFound`: an unknown job is told apart from
//! a known one with nothing to do (a `kill` of a job with no attempt running is `Ok(0)`).

use ax_scheduler_core::ValidationErrors;

use crate::job_id::JobId;

/// Errors of the embedded kernel.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The schedule does not compile: a cron expression or time zone that is not one, an
    /// interval below the minimum. Every problem is listed.
    #[error("invalid schedule:\n{0}")]
    InvalidSchedule(ValidationErrors),
    /// A job option or kernel setting out of its range (a zero timeout, a priority above 9,
    /// a retry policy that cannot hold, zero workers).
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The option, as the builder method names it.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The payload serializes to more than the limit (the cluster's, so a job moves between
    /// the two unchanged).
    #[error("payload of {size} bytes is over the {max}-byte limit")]
    PayloadTooLarge {
        /// Its size as compact JSON.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The payload does not serialize to JSON.
    #[error("payload does not serialize: {0}")]
    Payload(String),
    /// The kernel was built outside a tokio runtime: it has nowhere to run its driver.
    #[error("no tokio runtime: build the kernel from inside one")]
    NoRuntime,
    /// The store's file cannot be used: not a store, another program's, corrupt, or a write
    /// that failed (a full disk). A submit that fails so was not kept.
    #[error("store {}: {reason}", path.display())]
    Store {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        reason: String,
        /// Whether the same call may succeed later (a write that failed, not a bad file).
        retryable: bool,
    },
    /// A named job whose handler the kernel was not built with.
    #[error("no handler `{0}` is registered")]
    UnknownHandler(String),
    /// The kernel is shutting down and takes no new jobs.
    #[error("the kernel is shutting down")]
    ShuttingDown,
    /// A control operation on a job the kernel does not hold: never submitted here, or
    /// left already ([`Kernel::ended`](crate::Kernel::ended) says how it ended). A `cancel`
    /// answers it too when nothing of the job is left to run (its only work an attempt
    /// already running, which [`Kernel::kill`](crate::Kernel::kill) stops), and a
    /// `requeue` when the job holds no dead letter. Not retryable: the same call on the
    /// same id finds the same nothing.
    #[error("no job {0} here: it never existed, or it has ended (`Kernel::ended` says how)")]
    NotFound(JobId),
}

impl EmbeddedError {
    /// Whether the same call may succeed later: only a store write that failed (a full
    /// disk, say); every other error is bad input or a kernel that is going away.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            EmbeddedError::Store {
                retryable: true,
                ..
            }
        )
    }

    /// An [`EmbeddedError::Invalid`].
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        EmbeddedError::Invalid {
            field,
            reason: reason.into(),
        }
    }
}

/// Results of this crate.
pub type Result<T, E = EmbeddedError> = std::result::Result<T, E>;
