//! `/api/v1`: the JSON API behind the CLI, over an [`ApiBackend`] trait object.
//!
//! The routes only translate HTTP to backend calls and results to JSON; what a call does
//! (etcd writes, Redis reads) lives in the backend, and the types and errors are the API's
//! ([`ax_control::api`]), so the routes, their status codes and the auth layer are tested with an
//! in-memory backend in `tests/http.rs`. Specs leave through
//! [`TaskView::mask_secrets`](ax_control::api::TaskView::mask_secrets) unless an admin asks for
//! `show_secrets`. The table below is the whole API, kept in one [`router`] so it reads as
//! one; the handlers are grouped by what they act on (one module each), and the request
//! parts they share (a task's path, a query string, a JSON body) come through the
//! extractors of `extract`, which refuse with the API's own errors.
//!
//! Routes (all JSON):
//!
//! | method | path | backend call |
//! | --- | --- | --- |
//! | GET | `/tasks?namespace=&status=&label=&search=&limit=&continue=&show_secrets=` | [`ApiBackend::list_tasks`] (paged: the next page's token in `X-Ax-Continue`) |
//! | POST | `/tasks?dry_run=true` (body: task spec) | [`ApiBackend::put_task`] |
//! | GET | `/tasks/{namespace}/{id}?show_secrets=` | [`ApiBackend::get_task`] |
//! | DELETE | `/tasks/{namespace}/{id}` | [`ApiBackend::delete_task`] |
//! | POST | `/tasks/{namespace}/{id}/pause` | [`ApiBackend::pause`] |
//! | POST | `/tasks/{namespace}/{id}/resume` | [`ApiBackend::resume`] |
//! | POST | `/tasks/{namespace}/{id}/trigger` (body: optional [`TriggerParams`]) | [`ApiBackend::trigger`] |
//! | POST | `/tasks/{namespace}/{id}/backfill` (body: [`BackfillParams`]) | [`ApiBackend::backfill`] |
//! | GET | `/tasks/{namespace}/{id}/history?limit=` | [`ApiBackend::history`] |
//! | GET | `/executions?namespace=&task=&outcome=&failed=&since=&until=&limit=&continue=` | [`ApiBackend::executions`] (paged: `continue` in the body and in `X-Ax-Continue`) |
//! | GET | `/executions/find?id=` (the start or the end of an id) | [`ApiBackend::find_executions`] |
//! | GET | `/executions/{id}` | [`ApiBackend::execution`] |
//! | GET | `/dlq?queue=&limit=` | [`ApiBackend::dlq_list`] |
//! | POST | `/dlq/requeue` (body: `{"ids": [...]}` or `{"all": true, "queue": ...}`) | [`ApiBackend::dlq_requeue`] |
//! | POST | `/dlq/purge?queue=` | [`ApiBackend::dlq_purge`] |
//! | POST | `/namespaces/{namespace}/pause` | [`ApiBackend::pause_namespace`] |
//! | POST | `/namespaces/{namespace}/resume` | [`ApiBackend::resume_namespace`] |
//! | GET | `/status` | [`ApiBackend::status`] |
//! | GET | `/audit?since=&actor=&limit=&continue=` | [`ApiBackend::audit_list`] (paged, newest first) |
//! | POST | `/tasks/{namespace}/{id}/kill?execution=` | [`ApiBackend::kill_task`] |
//! | POST | `/executions/{id}/kill` | [`ApiBackend::kill_execution`] |
//! | POST | `/queues/{name}/pause` | [`ApiBackend::pause_queue`] |
//! | POST | `/queues/{name}/resume` | [`ApiBackend::resume_queue`] |
//! | GET | `/whoami` | none: the caller's token name and role ([`WhoAmI`]) |
//! | POST | `/executions/{id}/complete` (body: [`CompletionRequest`]; authenticated by its token, not an API token) | [`ApiBackend::complete_execution`] |
//!
//! [`TriggerParams`]: ax_control::api::TriggerParams
//! [`BackfillParams`]: ax_control::api::BackfillParams
//! [`WhoAmI`]: ax_control::api::WhoAmI
//! [`CompletionRequest`]: ax_control::api::CompletionRequest

mod audit;
mod dlq;
mod executions;
mod extract;
mod namespaces;
mod queues;
mod scheduled;
mod status;
mod tasks;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::limits::{ApiLimits, CompletionLimiter, ScheduleLimiter, TriggerLimiter};
use super::operate_limits::{OperateLimiter, ReadLimiter};
use ax_control::api::{ApiBackend, ApiError, Principal, MAX_LIST_LIMIT};
use ax_control::audit::Actor;
use ax_control::operations::Operations;
use ax_scheduler_core::UtcMillis;

pub use ax_control::api::CONTINUE_HEADER;

/// Shared by the API handlers: the backend, or `None` while this process has none (the
/// API then answers 503), and the input limits.
#[derive(Clone)]
pub struct ApiState {
    backend: Option<Arc<dyn ApiBackend>>,
    limits: ApiLimits,
    triggers: TriggerLimiter,
    completions: CompletionLimiter,
    operate: OperateLimiter,
    reads: ReadLimiter,
    scheduled: ScheduleLimiter,
}

impl ApiState {
    fn backend(&self) -> Result<&dyn ApiBackend, ApiError> {
        self.backend.as_deref().ok_or_else(|| {
            ApiError::Unavailable("this replica has no API backend connected yet".into())
        })
    }

    /// The changes the backend makes for `actor`, each recorded in the audit log.
    fn operations<'a>(&'a self, actor: &'a Actor) -> Result<Operations<'a>, ApiError> {
        Ok(Operations::new(self.backend()?, actor))
    }
}

/// The audit log's actor of a request: its caller, through the API.
fn actor(who: &Principal) -> Actor {
    Actor::api(who.name.to_string())
}

/// The `/api/v1` routes (to be nested) with their input limits, without authentication.
pub fn router(backend: Option<Arc<dyn ApiBackend>>, limits: ApiLimits) -> Router {
    let state = ApiState {
        backend,
        limits,
        triggers: TriggerLimiter::new(limits.triggers_per_task_per_minute),
        completions: CompletionLimiter::new(),
        operate: OperateLimiter::new(limits.operate_actions_per_minute),
        reads: ReadLimiter::new(limits.reads_per_minute),
        scheduled: ScheduleLimiter::new(limits.scheduled_per_minute),
    };
    let reads = state.reads.clone();
    Router::new()
        .route("/tasks", get(tasks::list_tasks).post(tasks::put_task))
        .route(
            "/tasks/{namespace}/{id}",
            get(tasks::get_task).delete(tasks::delete_task),
        )
        .route("/tasks/{namespace}/{id}/pause", post(tasks::pause))
        .route("/tasks/{namespace}/{id}/resume", post(tasks::resume))
        .route("/tasks/{namespace}/{id}/trigger", post(tasks::trigger))
        .route("/tasks/{namespace}/{id}/backfill", post(tasks::backfill))
        .route("/tasks/{namespace}/{id}/history", get(tasks::history))
        .route("/executions", get(executions::executions))
        .route("/executions/find", get(executions::find_executions))
        .route("/executions/{id}", get(executions::execution))
        .route("/dlq", get(dlq::dlq_list))
        .route("/dlq/requeue", post(dlq::dlq_requeue))
        .route("/dlq/purge", post(dlq::dlq_purge))
        .route(
            "/namespaces/{namespace}/pause",
            post(namespaces::pause_namespace),
        )
        .route(
            "/namespaces/{namespace}/resume",
            post(namespaces::resume_namespace),
        )
        .route("/status", get(status::status))
        .route("/audit", get(audit::audit))
        .route("/tasks/{namespace}/{id}/kill", post(tasks::kill_task))
        .route("/executions/{id}/kill", post(executions::kill_execution))
        .route("/queues/{name}", get(queues::queue_contents))
        .route("/queues/{name}/pause", post(queues::pause_queue))
        .route("/queues/{name}/resume", post(queues::resume_queue))
        .route("/queues/{name}/scheduled", get(scheduled::page))
        .route("/scheduled", post(scheduled::schedule))
        .route(
            "/scheduled/{queue}/{id}",
            get(scheduled::scheduled).delete(scheduled::cancel),
        )
        .route("/scheduled/{queue}/{id}/move", post(scheduled::move_to))
        .route("/whoami", get(status::whoami))
        .route(
            "/executions/{id}/complete",
            post(executions::complete_execution),
        )
        .fallback(|| async { ApiError::NotFound("no such API route".into()) })
        .route_layer(axum::middleware::from_fn(
            move |req: Request, next: Next| limit_reads(reads.clone(), req, next),
        ))
        .layer(DefaultBodyLimit::max(limits.max_request_bytes))
        .with_state(state)
}

/// Counts each `GET` (and `HEAD`) against its caller's read rate (see [`ReadLimiter`]).
async fn limit_reads(reads: ReadLimiter, req: Request, next: Next) -> Response {
    let is_read =
        req.method() == axum::http::Method::GET || req.method() == axum::http::Method::HEAD;
    if is_read {
        if let Some(who) = req.extensions().get::<Principal>() {
            if let Err(e) = reads.admit(who, UtcMillis::now()) {
                return e.into_response();
            }
        }
    }
    next.run(req).await
}

type ApiResult<T> = Result<Json<T>, ApiError>;

fn check_limit(limit: usize) -> Result<usize, ApiError> {
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_LIST_LIMIT}"
        )));
    }
    Ok(limit)
}

/// `response` with the next page's token in [`CONTINUE_HEADER`], when there is one (and it
/// can be a header value).
fn with_continue(mut response: Response, token: Option<String>) -> Response {
    if let Some(token) = token {
        if let Ok(value) = axum::http::HeaderValue::from_str(&token) {
            response.headers_mut().insert(CONTINUE_HEADER, value);
        }
    }
    response
}
