//! Why an API call failed, as every caller of the API sees it.
//!
//! The variants follow what a caller can do about a failure (fix the input, look elsewhere,
//! retry the change, wait, report a bug), and each has a stable code the clients branch
//! on. How a failure travels (the HTTP status, the JSON body, the CLI's exit code) belongs
//! to each transport: the HTTP mapping is in the `ax` binary's `http::error`, keyed on [`LimitKind`]
//! where one variant spans several statuses.

/// Which input limit a request went past; each transport says it its own way (HTTP: 413,
/// 414, 431, 429, 422, 408).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// The request body is too large.
    Body,
    /// The request URL is too long.
    Url,
    /// Too many request headers, or too many bytes of them.
    Headers,
    /// Too many requests in a time window.
    Rate,
    /// Too many things: tasks in a namespace, fires in a backfill.
    Count,
    /// The request took too long to arrive (its body sent too slowly).
    Time,
}

/// Why an API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// `invalid_input`: the request or the task spec failed validation; `errors` has one
    /// entry per problem.
    #[error("{message}")]
    Invalid {
        /// Summary.
        message: String,
        /// Each problem, with its field path where there is one.
        errors: Vec<String>,
    },
    /// `bad_cursor`: a listing's `continue` token is not one this listing issued (malformed,
    /// outside the listing's range, or from a listing with another filter); list again from
    /// the start.
    #[error("{0}")]
    BadCursor(String),
    /// `unauthorized`: missing or wrong bearer token.
    #[error("{0}")]
    Unauthorized(String),
    /// `forbidden`: the token's role is too low for the route.
    #[error("{0}")]
    Forbidden(String),
    /// `api_closed`: no token is configured on a replica the network can reach; the
    /// message says what to configure.
    #[error("{0}")]
    Closed(String),
    /// `cross_origin`: a web page of another origin sent the request (its `Origin` header is
    /// neither the API's own nor an allowed one).
    #[error("{0}")]
    CrossOrigin(String),
    /// `unknown_host`: the request names a host this replica does not answer for (a
    /// loopback-only replica reached under another name, as by DNS rebinding).
    #[error("{0}")]
    UnknownHost(String),
    /// `unsupported_media_type`: a request body that is not declared as JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// `conflict`: the change lost a race or a newer version exists.
    #[error("{0}")]
    Conflict(String),
    /// `limit_exceeded`: a limit on input was exceeded. The message names the limit and the
    /// setting that raises it.
    #[error("{message}")]
    Limit {
        /// Which limit.
        kind: LimitKind,
        /// What was exceeded, and how to raise it.
        message: String,
        /// For a rate: seconds until the next call may succeed (HTTP's `Retry-After`).
        retry_after_s: Option<u64>,
    },
    /// `backend_unavailable`: etcd or Redis cannot be reached (retry later).
    #[error("{0}")]
    Unavailable(String),
    /// `internal`: a bug or an unexpected backend answer.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// An [`ApiError::Invalid`] with a single problem.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError::Invalid {
            errors: vec![message.clone()],
            message,
        }
    }

    /// Whether the same call may succeed later unchanged: a backend that did not answer, a
    /// change that lost a race, a rate that refused it for now.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ApiError::Unavailable(_) | ApiError::Conflict(_) | ApiError::Limit { .. }
        )
    }

    /// Seconds until a refused rate lets the next call in, when the refusal says.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            ApiError::Limit { retry_after_s, .. } => *retry_after_s,
            _ => None,
        }
    }

    /// The error a `code` names (the inverse of [`ApiError::code`]), as a client reads it
    /// back from an answer: `errors` are an invalid input's problems, `kind` and
    /// `retry_after_s` a limit's. An unknown code is [`ApiError::Internal`].
    pub fn from_code(
        code: &str,
        message: String,
        errors: Vec<String>,
        kind: LimitKind,
        retry_after_s: Option<u64>,
    ) -> ApiError {
        let m = message;
        match code {
            "invalid_input" => ApiError::Invalid {
                errors: if errors.is_empty() {
                    vec![m.clone()]
                } else {
                    errors
                },
                message: m,
            },
            "bad_cursor" => ApiError::BadCursor(m),
            "unauthorized" => ApiError::Unauthorized(m),
            "forbidden" => ApiError::Forbidden(m),
            "api_closed" => ApiError::Closed(m),
            "cross_origin" => ApiError::CrossOrigin(m),
            "unknown_host" => ApiError::UnknownHost(m),
            "unsupported_media_type" => ApiError::UnsupportedMediaType(m),
            "not_found" => ApiError::NotFound(m),
            "conflict" => ApiError::Conflict(m),
            "limit_exceeded" => ApiError::Limit {
                kind,
                message: m,
                retry_after_s,
            },
            "backend_unavailable" => ApiError::Unavailable(m),
            _ => ApiError::Internal(m),
        }
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Invalid { .. } => "invalid_input",
            ApiError::BadCursor(_) => "bad_cursor",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Closed(_) => "api_closed",
            ApiError::CrossOrigin(_) => "cross_origin",
            ApiError::UnknownHost(_) => "unknown_host",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Limit { .. } => "limit_exceeded",
            ApiError::Unavailable(_) => "backend_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_into_its_error() {
        let errors = [
            ApiError::Invalid {
                message: "m".into(),
                errors: vec!["a".into(), "b".into()],
            },
            ApiError::BadCursor("m".into()),
            ApiError::Unauthorized("m".into()),
            ApiError::Forbidden("m".into()),
            ApiError::Closed("m".into()),
            ApiError::CrossOrigin("m".into()),
            ApiError::UnknownHost("m".into()),
            ApiError::UnsupportedMediaType("m".into()),
            ApiError::NotFound("m".into()),
            ApiError::Conflict("m".into()),
            ApiError::Limit {
                kind: LimitKind::Rate,
                message: "m".into(),
                retry_after_s: Some(3),
            },
            ApiError::Unavailable("m".into()),
            ApiError::Internal("m".into()),
        ];
        for e in errors {
            let problems = match &e {
                ApiError::Invalid { errors, .. } => errors.clone(),
                _ => Vec::new(),
            };
            let back = ApiError::from_code(
                e.code(),
                e.to_string(),
                problems,
                LimitKind::Rate,
                e.retry_after_s(),
            );
            assert_eq!(back, e);
        }
        assert_eq!(
            ApiError::from_code("no_such_code", "m".into(), vec![], LimitKind::Count, None),
            ApiError::Internal("m".into())
        );
    }
}
