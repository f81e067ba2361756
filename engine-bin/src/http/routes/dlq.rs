//! The dead-letter routes: list, requeue and purge, under `/dlq`.
//!
//! A requeue that would do nothing (no ids, or `all: false`) is refused here rather than
//! passed on, so a caller's mistake is an error and not a silent count of 0.

use ax_scheduler_core::UtcMillis;
use axum::extract::{Extension, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::extract::{ApiBody, ApiQuery, JsonBody};
use super::{actor, check_limit, ApiResult, ApiState};
use ax_control::api::{ApiError, DeadLetter, DlqRequeue, DlqRequeued, Principal, TokenRole};

#[derive(Deserialize)]
pub(super) struct DlqQuery {
    queue: Option<String>,
    #[serde(default = "default_dlq_limit")]
    limit: usize,
}

fn default_dlq_limit() -> usize {
    50
}

#[derive(Deserialize)]
pub(super) struct QueueQuery {
    queue: Option<String>,
}

/// Count of items a DLQ call acted on.
#[derive(Serialize)]
pub(super) struct Count {
    count: u64,
}

impl ApiBody for DlqRequeue {
    fn refusal(e: serde_json::Error) -> ApiError {
        ApiError::invalid(format!(
            "the body must be {{\"ids\": [...]}} or {{\"all\": true, \"queue\": ...}}: {e}"
        ))
    }
}

pub(super) async fn dlq_list(
    State(s): State<ApiState>,
    ApiQuery(q): ApiQuery<DlqQuery>,
) -> ApiResult<Vec<DeadLetter>> {
    let limit = check_limit(q.limit)?;
    Ok(Json(s.backend()?.dlq_list(q.queue, limit).await?))
}

pub(super) async fn dlq_requeue(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    JsonBody(request): JsonBody<DlqRequeue>,
) -> ApiResult<DlqRequeued> {
    match &request {
        DlqRequeue::Ids { ids, .. } if ids.is_empty() => {
            return Err(ApiError::invalid("ids is empty"));
        }
        DlqRequeue::All { all: false, .. } => {
            return Err(ApiError::invalid("all must be true when no ids are given"));
        }
        _ => {}
    }
    let use_stored = matches!(
        request,
        DlqRequeue::Ids {
            use_stored: true,
            ..
        } | DlqRequeue::All {
            use_stored: true,
            ..
        }
    );
    if use_stored && who.role < TokenRole::Admin {
        return Err(ApiError::Forbidden(
            "use_stored replays the target and credentials stored with a dead letter, which \
             the task may no longer have (deleted, or pointed elsewhere): it needs an admin \
             token; without it a requeue runs with the task's current spec"
                .into(),
        ));
    }
    s.operate.admit(&who, "dead letters", UtcMillis::now())?;
    Ok(Json(
        s.operations(&actor(&who))?.dlq_requeue(request).await?,
    ))
}

pub(super) async fn dlq_purge(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<QueueQuery>,
) -> ApiResult<Count> {
    let count = s.operations(&actor(&who))?.dlq_purge(q.queue).await?;
    Ok(Json(Count { count }))
}
