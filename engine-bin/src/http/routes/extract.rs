//! The request parts the handlers share, as extractors that refuse with the API's errors.
//!
//! A handler names what it takes (`TaskPath`, `ApiQuery<T>`, `JsonBody<T>`) and axum runs
//! the extractors in the order of its arguments, so the order of the checks (path, then
//! query, then body) is the order of the arguments. A body is read under the size limit and
//! any content type is accepted: what it must look like is the body type's own business
//! ([`ApiBody`]), so a syntax error gets the same error shape as a validation error.

use ax_scheduler_core::ExecutionId;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::ApiState;
use crate::http::limits;
use ax_control::api::{ApiError, TaskKey};

/// The task a `/tasks/{namespace}/{id}/...` route names. A path that does not decode keeps
/// axum's own refusal.
pub(super) struct TaskPath(pub(super) TaskKey);

impl<S: Send + Sync> FromRequestParts<S> for TaskPath {
    type Rejection = PathRejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path((namespace, id)) =
            Path::<(String, String)>::from_request_parts(parts, state).await?;
        Ok(TaskPath(TaskKey::new(namespace, id)))
    }
}

/// The execution an `/executions/{id}/...` route names, parsed once here: text that is not
/// an execution id is `invalid_input`, a path that does not decode keeps axum's refusal.
pub(super) struct ExecutionPath(pub(super) ExecutionId);

impl<S: Send + Sync> FromRequestParts<S> for ExecutionPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        parse_execution_id(&id)
            .map(ExecutionPath)
            .map_err(IntoResponse::into_response)
    }
}

/// `text` as an execution id, or `invalid_input` saying it is not one.
pub(super) fn parse_execution_id(text: &str) -> Result<ExecutionId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::invalid(format!("`{text}` is not an execution id")))
}

/// A query string as `T`, or `invalid_input` saying what is wrong with it.
pub(super) struct ApiQuery<T>(pub(super) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(t)| ApiQuery(t))
            .map_err(|e| ApiError::invalid(format!("bad query string: {}", e.body_text())))
    }
}

/// The request body's bytes, read under `limits.max_request_bytes`.
pub(super) struct Body(pub(super) Bytes);

impl FromRequest<ApiState> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let read = Bytes::from_request(request, state).await;
        limits::body(read, &state.limits).map(Body)
    }
}

/// What a JSON request body is parsed into, and how a body that is not one is refused.
pub(super) trait ApiBody: DeserializeOwned + Send {
    /// The `invalid_input` error of a body that does not parse, saying what it must be.
    fn refusal(e: serde_json::Error) -> ApiError;

    /// What a blank body (empty, or only white space) stands for, where the body may be
    /// left out; `None` parses it like any other.
    fn blank() -> Option<Self> {
        None
    }
}

/// `bytes` as a `T`.
pub(super) fn parse<T: ApiBody>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if let Some(blank) = T::blank() {
            return Ok(blank);
        }
    }
    serde_json::from_slice(bytes).map_err(T::refusal)
}

/// A JSON request body as `T`, read under the size limit.
pub(super) struct JsonBody<T>(pub(super) T);

impl<T: ApiBody> FromRequest<ApiState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let Body(bytes) = Body::from_request(request, state).await?;
        parse(&bytes).map(JsonBody)
    }
}
