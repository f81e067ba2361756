//! An [`ApiError`] over HTTP: the JSON error body every `/api/v1` failure has, and its status
//! codes, the one definition the server answers with and the client reads back.
//!
//! One shape for every error, `{"error": {"code", "message"}}` (plus `errors` for invalid
//! input), so clients branch on `code` and show `message`. The codes are stable strings; the
//! messages are for people. With the `axum` feature an [`ApiError`] is an axum response.

use http::StatusCode;
use serde::{Deserialize, Serialize};

use super::{ApiError, LimitKind};

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid { .. } | ApiError::BadCursor(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::Closed(_) => StatusCode::FORBIDDEN,
            ApiError::CrossOrigin(_) => StatusCode::FORBIDDEN,
            ApiError::UnknownHost(_) => StatusCode::MISDIRECTED_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Limit { kind, .. } => limit_status(*kind),
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// The status of each limit: the 4xx that names it, where HTTP has one.
fn limit_status(kind: LimitKind) -> StatusCode {
    match kind {
        LimitKind::Body => StatusCode::PAYLOAD_TOO_LARGE,
        LimitKind::Url => StatusCode::URI_TOO_LONG,
        LimitKind::Headers => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        LimitKind::Rate => StatusCode::TOO_MANY_REQUESTS,
        LimitKind::Count => StatusCode::UNPROCESSABLE_ENTITY,
        LimitKind::Time => StatusCode::REQUEST_TIMEOUT,
    }
}

/// The limit an error answer's status names (the inverse of the statuses above); a count
/// for any other status.
pub fn limit_of_status(status: StatusCode) -> LimitKind {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => LimitKind::Body,
        StatusCode::URI_TOO_LONG => LimitKind::Url,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => LimitKind::Headers,
        StatusCode::TOO_MANY_REQUESTS => LimitKind::Rate,
        StatusCode::REQUEST_TIMEOUT => LimitKind::Time,
        _ => LimitKind::Count,
    }
}

/// The response body of an error.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` object.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable code (`invalid_input`, `bad_cursor`, `unauthorized`, `forbidden`, `api_closed`,
    /// `cross_origin`, `unknown_host`, `unsupported_media_type`, `not_found`, `conflict`, `limit_exceeded`, `backend_unavailable`, `internal`).
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Validation problems (only with `invalid_input`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl From<ApiError> for ErrorBody {
    fn from(error: ApiError) -> Self {
        let code = error.code().to_owned();
        let (message, errors) = match error {
            ApiError::Invalid { message, errors } => (message, errors),
            other => (other.to_string(), Vec::new()),
        };
        ErrorBody {
            error: ErrorDetail {
                code,
                message,
                errors,
            },
        }
    }
}

impl ErrorBody {
    /// The error this body stands for, given the answer's status and `Retry-After`.
    pub fn into_error(self, status: StatusCode, retry_after_s: Option<u64>) -> ApiError {
        let ErrorDetail {
            code,
            message,
            errors,
        } = self.error;
        ApiError::from_code(
            &code,
            message,
            errors,
            limit_of_status(status),
            retry_after_s,
        )
    }
}

#[cfg(feature = "axum")]
mod response {
    use axum::http::{header, HeaderValue};
    use axum::response::{IntoResponse, Response};
    use axum::Json;

    use super::{ApiError, ErrorBody};

    impl IntoResponse for ApiError {
        fn into_response(self) -> Response {
            let status = self.status();
            let code = self.code();
            if status.is_server_error() {
                tracing::warn!(code, error = %self, "api request failed");
            }
            let unauthorized = matches!(self, ApiError::Unauthorized(_));
            let retry_after = self.retry_after_s();
            let mut response = (status, Json(ErrorBody::from(self))).into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
            }
            if unauthorized {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"ax\""),
                );
            }
            response
        }
    }
}
