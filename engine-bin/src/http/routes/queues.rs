//! The queue routes: hold workers off a queue, and let them back.
//!
//! Both answer with the queue's state after the call, so a repeated call is harmless and
//! says where the queue stands.

use axum::extract::{Path, State};
use axum::Json;

use super::{ApiResult, ApiState};
use crate::api::QueueState;

pub(super) async fn pause_queue(
    State(s): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<QueueState> {
    Ok(Json(s.backend()?.pause_queue(name).await?))
}

pub(super) async fn resume_queue(
    State(s): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<QueueState> {
    Ok(Json(s.backend()?.resume_queue(name).await?))
}
