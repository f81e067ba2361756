//! The audit log's route: `GET /audit`, a page of records, newest first.
//!
//! The backend is asked for before the query is read, so a replica without one answers 503
//! whatever the query says.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::extract::ApiQuery;
use super::{with_continue, ApiState};
use ax_control::api::ApiError;
use ax_control::audit::AuditQuery;

/// The page's records as the body (newest first), the next page's token in
/// [`CONTINUE_HEADER`](super::CONTINUE_HEADER).
pub(super) async fn audit(
    State(s): State<ApiState>,
    q: Result<ApiQuery<AuditQuery>, ApiError>,
) -> Result<Response, ApiError> {
    let backend = s.backend()?;
    let ApiQuery(q) = q?;
    let page = backend.audit_list(q).await?;
    Ok(with_continue(
        Json(page.items).into_response(),
        page.continue_token,
    ))
}
