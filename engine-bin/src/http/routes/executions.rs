//! The execution routes: the history across tasks, executions found by a fragment of their
//! id, one execution's story, a kill, and the completion report of an `http.async` job.
//!
//! The completion route takes no API token (its body carries the execution's completion
//! token, checked by the backend), so it is rate limited per execution before its body is
//! even parsed: a runaway job is refused cheaply.

use ax_scheduler_core::UtcMillis;
use axum::extract::{Extension, FromRequest, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::extract::{parse, ApiBody, ApiQuery, Body, ExecutionPath};
use super::{actor, with_continue, ApiResult, ApiState};
use ax_control::api::{
    ApiError, CompletionReply, CompletionRequest, ExecutionMatches, ExecutionParams,
    ExecutionStory, FindParams, KillResult, Principal,
};

impl ApiBody for CompletionRequest {
    fn refusal(e: serde_json::Error) -> ApiError {
        ApiError::invalid(format!(
            "the body must be {{\"token\": ..., \"status\": \"succeeded\" | \"failed\" | \"progress\", ...}}: {e}"
        ))
    }
}

/// The page as the body (`{"items", "continue"}`), the token also in
/// [`CONTINUE_HEADER`](super::CONTINUE_HEADER) as for tasks.
pub(super) async fn executions(
    State(s): State<ApiState>,
    ApiQuery(q): ApiQuery<ExecutionParams>,
) -> Result<Response, ApiError> {
    let q = q.resolve(UtcMillis::now())?;
    let page = s.backend()?.executions(q).await?;
    let token = page.continue_token.clone();
    Ok(with_continue(Json(page).into_response(), token))
}

pub(super) async fn find_executions(
    State(s): State<ApiState>,
    ApiQuery(q): ApiQuery<FindParams>,
) -> ApiResult<ExecutionMatches> {
    Ok(Json(s.backend()?.find_executions(q.id).await?))
}

pub(super) async fn execution(
    State(s): State<ApiState>,
    ExecutionPath(id): ExecutionPath,
) -> ApiResult<ExecutionStory> {
    Ok(Json(s.backend()?.execution(id).await?))
}

pub(super) async fn kill_execution(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    ExecutionPath(id): ExecutionPath,
) -> ApiResult<KillResult> {
    s.operate
        .admit(&who, &format!("execution {id}"), UtcMillis::now())?;
    Ok(Json(s.operations(&actor(&who))?.kill_execution(id).await?))
}

/// Not behind an API token: the completion token in the body is the credential, checked by
/// the backend (see `auth::EXECUTION_TOKEN_ROUTES`).
pub(super) async fn complete_execution(
    State(s): State<ApiState>,
    ExecutionPath(id): ExecutionPath,
    request: axum::extract::Request,
) -> ApiResult<CompletionReply> {
    // Before the body is read: a caller without a token must not make the replica read
    // (and wait for) bodies past the execution's rate.
    s.completions.admit(id, UtcMillis::now())?;
    let Body(body) = Body::from_request(request, &s).await?;
    let request: CompletionRequest = parse(&body)?;
    Ok(Json(s.backend()?.complete_execution(id, request).await?))
}
