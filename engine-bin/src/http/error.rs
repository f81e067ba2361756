//! The JSON error body every `/api/v1` failure has, and its status codes.
//!
//! One shape for every error, `{"error": {"code", "message"}}` (plus `errors` for invalid
//! input), so clients branch on `code` and show `message`. The codes are stable strings; the
//! messages are for people.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// Why an API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400 `invalid_input`: the request or the task spec failed validation; `errors` has one
    /// entry per problem.
    #[error("{message}")]
    Invalid {
        /// Summary.
        message: String,
        /// Each problem, with its field path where there is one.
        errors: Vec<String>,
    },
    /// 401 `unauthorized`: missing or wrong bearer token.
    #[error("{0}")]
    Unauthorized(String),
    /// 403 `forbidden`: the token's role is too low for the route.
    #[error("{0}")]
    Forbidden(String),
    /// 403 `api_closed`: no token is configured on a replica the network can reach; the
    /// message says what to configure.
    #[error("{0}")]
    Closed(String),
    /// 404 `not_found`.
    #[error("{0}")]
    NotFound(String),
    /// 409 `conflict`: the change lost a race or a newer version exists.
    #[error("{0}")]
    Conflict(String),
    /// A limit on input was exceeded (413 for a body, 414 for a URL, 431 for headers, 429
    /// for a rate, 422 for a count); `limit_exceeded`. The message names the limit and the
    /// setting that raises it.
    #[error("{message}")]
    Limit {
        /// The status.
        status: StatusCode,
        /// What was exceeded, and how to raise it.
        message: String,
    },
    /// 503 `backend_unavailable`: etcd or Redis cannot be reached (retry later).
    #[error("{0}")]
    Unavailable(String),
    /// 500 `internal`: a bug or an unexpected backend answer.
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

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::Closed(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Limit { status, .. } => *status,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Invalid { .. } => "invalid_input",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Closed(_) => "api_closed",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Limit { .. } => "limit_exceeded",
            ApiError::Unavailable(_) => "backend_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }
}

/// The response body of an error.
#[derive(Debug, Serialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` object.
#[derive(Debug, Serialize)]
pub struct ErrorDetail {
    /// Stable code (`invalid_input`, `unauthorized`, `forbidden`, `api_closed`,
    /// `not_found`, `conflict`, `limit_exceeded`, `backend_unavailable`, `internal`).
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Validation problems (only with `invalid_input`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let code = self.code();
        if status.is_server_error() {
            tracing::warn!(code, error = %self, "api request failed");
        }
        let unauthorized = matches!(self, ApiError::Unauthorized(_));
        let (message, errors) = match self {
            ApiError::Invalid { message, errors } => (message, errors),
            other => (other.to_string(), Vec::new()),
        };
        let mut response = (
            status,
            Json(ErrorBody {
                error: ErrorDetail {
                    code,
                    message,
                    errors,
                },
            }),
        )
            .into_response();
        if unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"ax\""),
            );
        }
        response
    }
}
