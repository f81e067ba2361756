//! Library errors as API errors.
//!
//! The split follows what a caller can do: fix the input (invalid), look elsewhere (not
//! found), re-read and retry the change (conflict), wait for etcd or Redis (unavailable,
//! decided by each library's `is_retryable`), or report a bug (internal).

use ax_election::ElectionError;
use ax_queue::QueueError;
use ax_registry::RegistryError;

use crate::api::ApiError;

pub(super) fn registry(e: RegistryError) -> ApiError {
    match e {
        RegistryError::NotFound { .. } => ApiError::NotFound(e.to_string()),
        RegistryError::CursorOutsideListing { .. } => ApiError::BadCursor(format!(
            "continue: not a token of this listing ({e}); list again from the start"
        )),
        RegistryError::VersionNotHigher { .. }
        | RegistryError::Conflict { .. }
        | RegistryError::ListingExpired { .. } => ApiError::Conflict(e.to_string()),
        RegistryError::Invalid {
            namespace,
            id,
            errors,
        } => ApiError::Invalid {
            message: format!("task {namespace}/{id} is invalid"),
            errors: errors.iter().map(ToString::to_string).collect(),
        },
        e if e.is_retryable() => ApiError::Unavailable(e.to_string()),
        e => ApiError::Internal(e.to_string()),
    }
}

pub(super) fn queue(e: QueueError) -> ApiError {
    match e {
        // Raised for names a caller gave (a queue with a space or a brace).
        QueueError::InvalidConfig(msg) => ApiError::invalid(msg),
        e if e.is_retryable() => ApiError::Unavailable(e.to_string()),
        e => ApiError::Internal(e.to_string()),
    }
}

pub(super) fn election(e: ElectionError) -> ApiError {
    if e.is_retryable() {
        ApiError::Unavailable(e.to_string())
    } else {
        ApiError::Internal(e.to_string())
    }
}

pub(super) fn etcd(op: &str, e: etcd_client::Error) -> ApiError {
    // Every etcd client error reaching here is transport or server trouble: requests are
    // well-formed by construction.
    ApiError::Unavailable(format!("etcd {op} failed: {e}"))
}

#[cfg(test)]
mod tests {
    use ax_scheduler_core::{FieldError, ValidationErrors};

    use super::*;

    #[test]
    fn registry_errors_map_to_what_a_caller_can_do() {
        let v = RegistryError::VersionNotHigher {
            namespace: "d".into(),
            id: "t".into(),
            existing: 3,
            offered: 2,
        };
        assert!(matches!(registry(v), ApiError::Conflict(m) if m.contains("version 3")));
        let i = RegistryError::Invalid {
            namespace: "d".into(),
            id: "t".into(),
            errors: ValidationErrors::from(vec![
                FieldError::new("handler", "missing"),
                FieldError::new("priority", "too high"),
            ]),
        };
        match registry(i) {
            ApiError::Invalid { errors, .. } => {
                assert_eq!(errors, ["handler: missing", "priority: too high"])
            }
            other => panic!("{other:?}"),
        }
        let t = RegistryError::Timeout {
            op: "get",
            after: std::time::Duration::from_secs(1),
        };
        assert!(matches!(registry(t), ApiError::Unavailable(_)));
        assert!(matches!(
            registry(RegistryError::Fenced { token: 1 }),
            ApiError::Internal(_)
        ));
    }
}
