//! The task routes: list, put, get, delete, pause, resume, run now, backfill, history and
//! kill, under `/tasks`.
//!
//! Specs leave masked (secrets as `***`) except where an admin asks for `show_secrets` on a
//! read; the answers of pause and resume are always masked, since no one asked to see the
//! secrets there. Every change goes through [`Operations`](ax_control::operations), which
//! records it in the audit log under the caller's name.

use ax_scheduler_core::UtcMillis;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::extract::{parse_execution_id, ApiBody, ApiQuery, JsonBody, TaskPath};
use super::{actor, check_limit, with_continue, ApiResult, ApiState};
use ax_control::api::{
    ApiError, BackfillParams, ExecutionRecord, KillResult, Principal, PutOptions, TaskQuery,
    TaskView, TokenRole, TriggerParams,
};

#[derive(Deserialize)]
pub(super) struct SecretsQuery {
    #[serde(default)]
    show_secrets: bool,
}

#[derive(Deserialize)]
pub(super) struct LimitQuery {
    #[serde(default = "default_history_limit")]
    limit: usize,
}

fn default_history_limit() -> usize {
    20
}

#[derive(Deserialize)]
pub(super) struct KillQuery {
    execution: Option<String>,
}

/// A put's body is the task spec as its author wrote it; the backend validates it.
impl ApiBody for serde_json::Value {
    fn refusal(e: serde_json::Error) -> ApiError {
        ApiError::invalid(format!("the body is not JSON: {e}"))
    }
}

impl ApiBody for TriggerParams {
    fn refusal(e: serde_json::Error) -> ApiError {
        ApiError::invalid(format!(
            "the body must be {{\"payload\": ..., \"idempotency_key\": \"...\"}} (both optional): {e}"
        ))
    }

    /// An empty body runs the task as its spec says.
    fn blank() -> Option<Self> {
        Some(TriggerParams::default())
    }
}

impl ApiBody for BackfillParams {
    fn refusal(e: serde_json::Error) -> ApiError {
        ApiError::invalid(format!(
            "the body must be {{\"from\": MS, \"to\": MS, \"max\": N, \"force\": BOOL, \"dry_run\": BOOL}}: {e}"
        ))
    }
}

/// The page's tasks as the body (a JSON array, as before paging), and the next page's token
/// in the [`CONTINUE_HEADER`](super::CONTINUE_HEADER) header when there is one.
pub(super) async fn list_tasks(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    ApiQuery(q): ApiQuery<TaskQuery>,
) -> Result<Response, ApiError> {
    q.page_size()?;
    q.status_filter()?;
    let show = secrets_shown(q.show_secrets, &who)?;
    let mut page = s.backend()?.list_tasks(q).await?;
    if !show {
        page.items.iter_mut().for_each(TaskView::mask_secrets);
    }
    Ok(with_continue(
        Json(page.items).into_response(),
        page.continue_token,
    ))
}

pub(super) async fn put_task(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    ApiQuery(opts): ApiQuery<PutOptions>,
    JsonBody(spec): JsonBody<serde_json::Value>,
) -> Result<Response, ApiError> {
    if opts.dry_run {
        s.reads.admit(&who, UtcMillis::now())?;
    }
    let actor = actor(&who);
    let result = s.operations(&actor)?.put_task(spec, opts).await?;
    let status = if result.written {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(result)).into_response())
}

pub(super) async fn get_task(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    TaskPath(key): TaskPath,
    ApiQuery(q): ApiQuery<SecretsQuery>,
) -> ApiResult<TaskView> {
    let show = secrets_shown(q.show_secrets, &who)?;
    let mut view = s.backend()?.get_task(key).await?;
    if !show {
        view.mask_secrets();
    }
    Ok(Json(view))
}

/// Whether a request may see secrets: only when it asks and its role is admin.
fn secrets_shown(asked: bool, who: &Principal) -> Result<bool, ApiError> {
    if asked && who.role < TokenRole::Admin {
        return Err(ApiError::Forbidden(format!(
            "show_secrets needs the `admin` role; token `{}` has `{}`",
            who.name,
            who.role.as_str()
        )));
    }
    Ok(asked)
}

pub(super) async fn delete_task(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    TaskPath(key): TaskPath,
) -> Result<StatusCode, ApiError> {
    s.operations(&actor(&who))?.delete_task(key).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn pause(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    TaskPath(key): TaskPath,
) -> ApiResult<TaskView> {
    s.operate.admit(&who, &key.to_string(), UtcMillis::now())?;
    let mut view = s.operations(&actor(&who))?.pause(key).await?;
    view.mask_secrets();
    Ok(Json(view))
}

pub(super) async fn resume(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    TaskPath(key): TaskPath,
) -> ApiResult<TaskView> {
    s.operate.admit(&who, &key.to_string(), UtcMillis::now())?;
    let mut view = s.operations(&actor(&who))?.resume(key).await?;
    view.mask_secrets();
    Ok(Json(view))
}

pub(super) async fn trigger(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    TaskPath(key): TaskPath,
    JsonBody(params): JsonBody<TriggerParams>,
) -> Result<Response, ApiError> {
    params.check()?;
    let actor = actor(&who);
    let operations = s.operations(&actor)?;
    s.triggers.admit(&key, UtcMillis::now())?;
    s.operate.admit(&who, &key.to_string(), UtcMillis::now())?;
    if params.payload.is_some() && who.role < TokenRole::Admin {
        let view = s.backend()?.get_task(key.clone()).await?;
        if sends_credentials(&view.spec) {
            return Err(ApiError::Forbidden(format!(
                "{key} sends credentials with its request (http.headers, or secrets in \
                 http.url); a run-now with a payload of the caller's choosing would send them \
                 with that body, which needs an admin token; without a payload it runs with \
                 the task's own"
            )));
        }
    }
    let result = operations.trigger(key, params).await?;
    Ok((StatusCode::ACCEPTED, Json(result)).into_response())
}

/// Whether a task's request carries credentials: headers, or secret references in its URL.
fn sends_credentials(spec: &serde_json::Value) -> bool {
    let http = &spec["http"];
    let headers = http["headers"].as_object().is_some_and(|h| !h.is_empty());
    let url_secrets = http["url"]
        .as_str()
        .is_some_and(ax_scheduler_core::secret_ref::has_references);
    headers || url_secrets
}

pub(super) async fn backfill(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    TaskPath(key): TaskPath,
    JsonBody(params): JsonBody<BackfillParams>,
) -> Result<Response, ApiError> {
    if params.dry_run {
        s.reads.admit(&who, UtcMillis::now())?;
    } else {
        s.operate.admit(&who, &key.to_string(), UtcMillis::now())?;
    }
    let result = s.operations(&actor(&who))?.backfill(key, params).await?;
    let status = if result.written {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(result)).into_response())
}

pub(super) async fn history(
    State(s): State<ApiState>,
    TaskPath(key): TaskPath,
    ApiQuery(q): ApiQuery<LimitQuery>,
) -> ApiResult<Vec<ExecutionRecord>> {
    let limit = check_limit(q.limit)?;
    Ok(Json(s.backend()?.history(key, limit).await?))
}

pub(super) async fn kill_task(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    TaskPath(key): TaskPath,
    ApiQuery(q): ApiQuery<KillQuery>,
) -> ApiResult<KillResult> {
    let execution = q.execution.as_deref().map(parse_execution_id).transpose()?;
    s.operate.admit(&who, &key.to_string(), UtcMillis::now())?;
    let actor = actor(&who);
    Ok(Json(s.operations(&actor)?.kill_task(key, execution).await?))
}
