//! The queue routes: what a queue holds, hold workers off it, and let them back.
//!
//! Pause and resume answer with the queue's state after the call, so a repeated call is
//! harmless and says where the queue stands.

use axum::extract::{Extension, Path, Query, State};
use axum::Json;
use serde::Deserialize;

use super::{actor, ApiResult, ApiState};
use ax_control::api::{ApiError, Principal, QueueContents, QueueState};
use ax_scheduler_core::UtcMillis;

/// Most executions of each kind `GET /queues/{name}` lists.
const MAX_CONTENTS: usize = 500;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContentsQuery {
    limit: Option<usize>,
}

pub(super) async fn queue_contents(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<ContentsQuery>,
) -> ApiResult<QueueContents> {
    let limit = q.limit.unwrap_or(50);
    if !(1..=MAX_CONTENTS).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit: {limit} is out of range 1-{MAX_CONTENTS}"
        )));
    }
    Ok(Json(s.backend()?.queue_contents(name, limit).await?))
}

pub(super) async fn pause_queue(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<QueueState> {
    s.operate
        .admit(&who, &format!("queue {name}"), UtcMillis::now())?;
    Ok(Json(s.operations(&actor(&who))?.pause_queue(name).await?))
}

pub(super) async fn resume_queue(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<QueueState> {
    s.operate
        .admit(&who, &format!("queue {name}"), UtcMillis::now())?;
    Ok(Json(s.operations(&actor(&who))?.resume_queue(name).await?))
}
