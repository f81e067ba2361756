//! The scheduled-execution routes: schedule a batch (or one), read, cancel and move one, and
//! list a queue's, soonest first.
//!
//! A schedule request takes as many of its caller's `limits.scheduled_per_minute` as it
//! holds executions, before anything is written; its body is bounded by
//! `limits.max_request_bytes` and holds at most [`SCHEDULE_REQUEST_MAX`] executions. A
//! cancel or a move is an operate action (`limits.operate_actions_per_minute`).

use axum::extract::{Extension, Path, Query, State};
use axum::Json;
use serde::Deserialize;

use super::extract::{ApiBody, JsonBody};
use super::{actor, ApiResult, ApiState};
use ax_control::api::{
    ApiError, Principal, RescheduleRequest, ScheduleBatch, ScheduleReply, ScheduleRequest,
    ScheduledPage, ScheduledView, SCHEDULE_REQUEST_MAX,
};
use ax_scheduler_core::UtcMillis;

/// Most entries one page of `GET /queues/{name}/scheduled` lists.
const MAX_PAGE: usize = 1000;

/// A schedule request's body: a batch, or one execution.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum ScheduleBody {
    Batch(ScheduleBatch),
    One(Box<ScheduleRequest>),
}

impl ApiBody for ScheduleBody {
    fn refusal(e: serde_json::Error) -> ApiError {
        ApiError::invalid(format!(
            "the body must be one execution {{\"namespace\", \"handler\", \"at\" or \"after\", ...}} \
             or {{\"executions\": [...]}} of 1 to {SCHEDULE_REQUEST_MAX}: {e}"
        ))
    }
}

impl ApiBody for RescheduleRequest {
    fn refusal(e: serde_json::Error) -> ApiError {
        ApiError::invalid(format!(
            "the body must be {{\"at\": INSTANT}} or {{\"after\": \"DURATION\"}}: {e}"
        ))
    }
}

pub(super) async fn schedule(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    JsonBody(body): JsonBody<ScheduleBody>,
) -> ApiResult<ScheduleReply> {
    let batch = match body {
        ScheduleBody::Batch(b) => b,
        ScheduleBody::One(r) => ScheduleBatch {
            executions: vec![*r],
        },
    };
    let n = batch.executions.len();
    if n == 0 || n > SCHEDULE_REQUEST_MAX {
        return Err(ApiError::invalid(format!(
            "executions: {n} given; 1 to {SCHEDULE_REQUEST_MAX} per call"
        )));
    }
    s.scheduled.admit(&who, n, UtcMillis::now())?;
    Ok(Json(s.operations(&actor(&who))?.schedule(batch).await?))
}

pub(super) async fn scheduled(
    State(s): State<ApiState>,
    Path((queue, id)): Path<(String, String)>,
) -> ApiResult<ScheduledView> {
    Ok(Json(s.backend()?.scheduled(format!("{queue}/{id}")).await?))
}

pub(super) async fn cancel(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path((queue, id)): Path<(String, String)>,
) -> ApiResult<ScheduledView> {
    let id = format!("{queue}/{id}");
    s.operate
        .admit(&who, &format!("scheduled {id}"), UtcMillis::now())?;
    Ok(Json(
        s.operations(&actor(&who))?.cancel_scheduled(id).await?,
    ))
}

pub(super) async fn move_to(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path((queue, id)): Path<(String, String)>,
    JsonBody(request): JsonBody<RescheduleRequest>,
) -> ApiResult<ScheduledView> {
    let id = format!("{queue}/{id}");
    let due = request.due(UtcMillis::now())?;
    s.operate
        .admit(&who, &format!("scheduled {id}"), UtcMillis::now())?;
    Ok(Json(s.operations(&actor(&who))?.reschedule(id, due).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PageQuery {
    after: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn page(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Query(q): Query<PageQuery>,
) -> ApiResult<ScheduledPage> {
    let limit = q.limit.unwrap_or(50);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "limit: {limit} is out of range 1-{MAX_PAGE}"
        )));
    }
    Ok(Json(
        s.backend()?.scheduled_page(name, q.after, limit).await?,
    ))
}
