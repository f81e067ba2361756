//! The registry's error type: each variant names the task and what to do about it.
//!
//! [`RegistryError::is_retryable`] splits transient trouble (etcd unreachable, slow, or a
//! write race that outlasted the retries) from answers that will not change by asking
//! again (a refused version, an invalid spec, a missing task, a lost fencing token).

use std::time::Duration;

use ax_scheduler_core::ValidationErrors;

/// Errors of registry operations.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// etcd answered with an error or the connection failed.
    #[error("etcd {op} failed: {source}")]
    Etcd {
        /// The operation, e.g. `task get`.
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
    /// A register offered a version not higher than the one stored.
    #[error(
        "task {namespace}/{id} is registered with version {existing}; version {offered} does \
         not replace it (raise `version` above {existing} to replace the spec)"
    )]
    VersionNotHigher {
        /// Namespace.
        namespace: String,
        /// Task id.
        id: String,
        /// Version stored.
        existing: u64,
        /// Version offered.
        offered: u64,
    },
    /// The task does not exist.
    #[error("task {namespace}/{id} is not registered")]
    NotFound {
        /// Namespace.
        namespace: String,
        /// Task id.
        id: String,
    },
    /// Concurrent writers kept changing the task during every attempt.
    #[error("task {namespace}/{id} changed concurrently during all {attempts} update attempts")]
    Conflict {
        /// Namespace.
        namespace: String,
        /// Task id.
        id: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The spec (offered, stored, or produced by an update) is not valid.
    #[error("task {namespace}/{id} is invalid:\n{errors}")]
    Invalid {
        /// Namespace.
        namespace: String,
        /// Task id.
        id: String,
        /// Every problem found.
        errors: ValidationErrors,
    },
    /// A fenced write was refused: the fence key (leader or shard owner) no longer has the given
    /// create revision.
    #[error("write refused: fencing token {token} is no longer the leader's")]
    Fenced {
        /// The token the writer held.
        token: i64,
    },
    /// A paged listing was continued after etcd compacted the revision its first page was
    /// read at: the pages would no longer be one snapshot.
    #[error("the listing started at revision {revision} expired (etcd compacted it); list again from the start")]
    ListingExpired {
        /// The revision of the listing's first page.
        revision: i64,
    },
    /// A paged listing was continued from a key outside the listing's range (a cursor of
    /// another listing, or a forged one).
    #[error("the listing cursor's key {after:?} is outside the listing's range {range:?}")]
    CursorOutsideListing {
        /// The cursor's last key.
        after: String,
        /// The prefix of the range listed.
        range: String,
    },
    /// A stored state record is not valid JSON of a task state.
    #[error("state record at {key} is not valid: {source}")]
    Decode {
        /// The key.
        key: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

impl RegistryError {
    /// Whether the same call may succeed later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            RegistryError::Etcd { .. }
                | RegistryError::Timeout { .. }
                | RegistryError::Conflict { .. }
        )
    }
}

/// What etcd says to a write once its database reached its space quota and it raised the
/// NOSPACE alarm (`ErrGRPCNoSpace`).
const NO_SPACE: &str = "database space exceeded";

impl RegistryError {
    /// Whether etcd refused the write because its database is at its space quota (the
    /// NOSPACE alarm): every write fails alike until an operator frees space and disarms the
    /// alarm, so it says nothing about the record written.
    pub fn is_out_of_space(&self) -> bool {
        matches!(self, RegistryError::Etcd { source, .. } if source.to_string().contains(NO_SPACE))
    }
}

/// Runs one etcd request under `after`.
pub(crate) async fn timed<T>(
    op: &'static str,
    after: Duration,
    fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, RegistryError> {
    match tokio::time::timeout(after, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(RegistryError::Etcd { op, source }),
        Err(_) => Err(RegistryError::Timeout { op, after }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_error_names_both_versions_and_is_permanent() {
        let e = RegistryError::VersionNotHigher {
            namespace: "default".into(),
            id: "report".into(),
            existing: 3,
            offered: 2,
        };
        let msg = e.to_string();
        assert!(
            msg.contains("version 3") && msg.contains("version 2"),
            "{msg}"
        );
        assert!(!e.is_retryable());
        let c = RegistryError::Conflict {
            namespace: "d".into(),
            id: "x".into(),
            attempts: 3,
        };
        assert!(c.is_retryable());
        assert!(!c.is_out_of_space());
    }

    #[test]
    fn a_nospace_refusal_is_out_of_space() {
        // What the client shows of etcd's gRPC status; only its message matters here.
        let e = RegistryError::Etcd {
            op: "state put",
            source: etcd_client::Error::InvalidArgs(
                "etcdserver: mvcc: database space exceeded".into(),
            ),
        };
        assert!(e.is_out_of_space());
        assert!(e.is_retryable());
        let other = RegistryError::Etcd {
            op: "state put",
            source: etcd_client::Error::InvalidArgs("request is too large".into()),
        };
        assert!(!other.is_out_of_space());
    }
}
