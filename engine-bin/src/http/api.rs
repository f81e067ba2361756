//! `/api/v1`: the JSON API behind the CLI, over an [`ApiBackend`] trait object.
//!
//! The routes only translate HTTP to backend calls and results to JSON; what a call does
//! (etcd writes, Redis reads) lives in the backend, so the routes, their status codes and the
//! auth layer are tested with an in-memory backend in `tests/http.rs`. Specs leave through
//! [`TaskView::mask_secrets`] unless an admin asks for `show_secrets`. The trait uses boxed
//! futures rather than `async fn` so it can be used as `dyn ApiBackend`.
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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ax_scheduler_core::UtcMillis;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::auth::{Principal, Role};
use super::error::ApiError;
use super::limits::{self, ApiLimits, TriggerLimiter};
use crate::audit::{AuditDetail, AuditPage, AuditQuery, AuditRecord};

/// Largest `limit` a list call accepts.
pub const MAX_LIST_LIMIT: usize = 1000;
/// Tasks in a page when the request gives no `limit`.
pub const DEFAULT_TASK_PAGE: usize = 500;
/// Response header holding the token of the next page of a task listing.
pub const CONTINUE_HEADER: &str = "x-ax-continue";

/// Which tasks [`ApiBackend::list_tasks`] returns (the query string of `GET /tasks`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskQuery {
    /// Only this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only tasks in this status (`SCHEDULED`, `FAILED`, ...; any case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only tasks with this label: `key` (any value) or `key=value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Only tasks whose id contains this text (any case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// Most tasks in the page, 1 to [`MAX_LIST_LIMIT`]; default [`DEFAULT_TASK_PAGE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The previous page's continue token: the listing goes on after it, at the same
    /// snapshot.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
    /// Show the specs' secrets (HTTP header values, URL credentials and query values)
    /// instead of `***`; admin role only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub show_secrets: bool,
}

impl TaskQuery {
    /// The page size: `limit`, or the default; [`ApiError::Invalid`] outside 1 ..=
    /// [`MAX_LIST_LIMIT`].
    pub fn page_size(&self) -> Result<usize, ApiError> {
        match self.limit {
            None => Ok(DEFAULT_TASK_PAGE),
            Some(n) if (1..=MAX_LIST_LIMIT).contains(&n) => Ok(n),
            Some(n) => Err(ApiError::invalid(format!(
                "limit: {n} is outside 1 to {MAX_LIST_LIMIT}"
            ))),
        }
    }

    /// The status filter, checked against the status names.
    pub fn status_filter(&self) -> Result<Option<ax_scheduler_core::TaskStatus>, ApiError> {
        let Some(s) = &self.status else {
            return Ok(None);
        };
        ax_scheduler_core::TaskStatus::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
            .map(Some)
            .ok_or_else(|| {
                let names: Vec<&str> = ax_scheduler_core::TaskStatus::ALL
                    .iter()
                    .map(|s| s.as_str())
                    .collect();
                ApiError::invalid(format!("status: `{s}` is not one of {}", names.join(", ")))
            })
    }

    /// Whether a task id passes the `search` filter.
    pub fn id_matches(&self, id: &str) -> bool {
        self.search
            .as_deref()
            .is_none_or(|text| id.to_lowercase().contains(&text.trim().to_lowercase()))
    }

    /// The label filter: (key, value if one is required).
    pub fn label_filter(&self) -> Option<(&str, Option<&str>)> {
        self.label.as_deref().map(|l| match l.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (l, None),
        })
    }
}

/// One page of a task listing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskList {
    /// The tasks, in key order.
    pub items: Vec<TaskView>,
    /// Pass as `continue` for the next page; `None` on the last page.
    pub continue_token: Option<String>,
}

/// Attempts in a page of `GET /executions` when the request gives no `limit`.
pub const DEFAULT_EXECUTION_PAGE: usize = 50;

/// The outcome labels an attempt can end with, as the history shows them.
pub const OUTCOME_LABELS: [&str; 7] = [
    "succeeded",
    "retrying",
    "failed",
    "timed_out",
    "panicked",
    "dead_lettered",
    "killed",
];

/// The labels of failed attempts (`failed=true`, `ax history --failed`): a retried failure
/// is a failure too.
pub const FAILED_LABELS: [&str; 5] = [
    "retrying",
    "failed",
    "timed_out",
    "panicked",
    "dead_lettered",
];

/// The query string of `GET /executions`, as written; [`ExecutionParams::resolve`] checks it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionParams {
    /// Only this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only this task: `NS/ID`, or `ID` in `namespace` (else `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Only these outcomes, comma separated ([`OUTCOME_LABELS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Only failed attempts ([`FAILED_LABELS`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Only attempts written at or after: milliseconds since the epoch, or a duration
    /// before now (`1h`, `30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only attempts written at or before, as `since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Most attempts in the page, 1 to [`MAX_LIST_LIMIT`]; default
    /// [`DEFAULT_EXECUTION_PAGE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The previous page's `continue`.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// Which attempts [`ApiBackend::executions`] returns, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this task id (in `namespace`).
    pub task_id: Option<String>,
    /// Only these outcome labels; empty: all.
    pub outcomes: Vec<String>,
    /// Only attempts written at or after.
    pub since: Option<UtcMillis>,
    /// Only attempts written at or before.
    pub until: Option<UtcMillis>,
    /// Most attempts in the page.
    pub limit: usize,
    /// Where the page starts (a previous page's `continue`).
    pub continue_token: Option<String>,
}

impl ExecutionParams {
    /// The checked query, relative times taken back from `now`; [`ApiError::Invalid`]
    /// names each problem.
    pub fn resolve(&self, now: UtcMillis) -> Result<ExecutionQuery, ApiError> {
        let mut problems = Vec::new();
        let limit = match self.limit {
            None => DEFAULT_EXECUTION_PAGE,
            Some(n) if (1..=MAX_LIST_LIMIT).contains(&n) => n,
            Some(n) => {
                problems.push(format!("limit: {n} is outside 1 to {MAX_LIST_LIMIT}"));
                DEFAULT_EXECUTION_PAGE
            }
        };
        let mut instant = |name: &str, v: &Option<String>| -> Option<UtcMillis> {
            let v = v.as_deref()?.trim();
            if let Ok(ms) = v.parse::<i64>() {
                return Some(UtcMillis(ms));
            }
            match ax_scheduler_core::duration_serde::parse(v) {
                Ok(d) => Some(UtcMillis(
                    now.0
                        .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
                )),
                Err(e) => {
                    problems.push(format!(
                        "{name}: `{v}` is neither milliseconds since the epoch nor a duration \
                         before now: {e}"
                    ));
                    None
                }
            }
        };
        let since = instant("since", &self.since);
        let until = instant("until", &self.until);
        let mut outcomes: Vec<String> = Vec::new();
        for o in self.outcome.iter().flat_map(|o| o.split(',')) {
            let o = o.trim().to_ascii_lowercase();
            if o.is_empty() {
                continue;
            }
            if OUTCOME_LABELS.contains(&o.as_str()) {
                outcomes.push(o);
            } else {
                problems.push(format!(
                    "outcome: `{o}` is not one of {}",
                    OUTCOME_LABELS.join(", ")
                ));
            }
        }
        if self.failed {
            if outcomes.is_empty() {
                outcomes = FAILED_LABELS.iter().map(|s| (*s).to_owned()).collect();
            } else {
                outcomes.retain(|o| FAILED_LABELS.contains(&o.as_str()));
                if outcomes.is_empty() {
                    problems.push("outcome: no failed outcome named, and failed=true".into());
                }
            }
        }
        let (namespace, task_id) = match (&self.namespace, &self.task) {
            (ns, Some(t)) => match t.split_once('/') {
                Some((n, id)) => (Some(n.to_owned()), Some(id.to_owned())),
                None => (
                    Some(ns.clone().unwrap_or_else(|| "default".to_owned())),
                    Some(t.clone()),
                ),
            },
            (ns, None) => (ns.clone(), None),
        };
        if let Some(c) = &self.continue_token {
            if c.parse::<ax_scheduler_core::EventPosition>().is_err() {
                problems.push(format!("continue: `{c}` is not a continue token"));
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::Invalid {
                message: format!("invalid execution query: {}", problems.join("; ")),
                errors: problems,
            });
        }
        Ok(ExecutionQuery {
            namespace,
            task_id,
            outcomes,
            since,
            until,
            limit,
            continue_token: self.continue_token.clone(),
        })
    }
}

/// One page of `GET /executions`, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionList {
    /// The attempts.
    pub items: Vec<ExecutionRecord>,
    /// Pass as `continue` for the next page; absent when the range is done. A page may be
    /// short, even empty, and still have one: each request scans a bounded part of the
    /// history.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// An attempt of an `http.async` task that its receiver accepted (`202`) and that waits
/// for the job's completion report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitingAttempt {
    /// The attempt, counted from 1.
    pub attempt: u32,
    /// The worker that sent its request.
    pub worker: String,
    /// When it started.
    pub started: UtcMillis,
    /// When the completion or the next progress report must come by: it times out then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<UtcMillis>,
    /// The job's last progress report (`percent`, `message` as stored, and `at`, when it
    /// came), if it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ax_queue::Progress>,
}

/// One execution's whole story (`GET /executions/{id}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutionStory {
    /// Execution id.
    pub execution_id: String,
    /// The task.
    pub namespace: String,
    /// The task.
    pub task_id: String,
    /// Queue it ran on.
    pub queue: String,
    /// The fire it stands for (for a run-now execution, when it was asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<UtcMillis>,
    /// When its first attempt was enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<UtcMillis>,
    /// Every recorded attempt, oldest first.
    pub attempts: Vec<ExecutionRecord>,
    /// The attempt that waits for its completion now (`http.async`), with the job's last
    /// progress report; it has no record in `attempts` before it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingAttempt>,
    /// How it ended: the last attempt's outcome (`retrying` while a retry is pending,
    /// `waiting` while an attempt waits for its completion).
    pub outcome: String,
    /// Its dead-letter entry, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
    /// False when the search for its attempts stopped at its bound before their end.
    pub complete: bool,
    /// For an execution of a fanned-out fire (shards, or a broadcast's one per worker):
    /// that fire with all its executions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire: Option<FireView>,
}

/// A fanned-out fire and its executions, in an execution's story.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FireView {
    /// The fan-out id its executions share.
    pub fanout_id: String,
    /// How many executions it has (shards, or workers of a broadcast).
    pub total: u32,
    /// The last recorded attempt of each of its executions, by shard index (from the task's
    /// recent history: executions not recorded yet, or no longer kept, are missing).
    pub executions: Vec<ExecutionRecord>,
}

/// What a backend call returns.
pub type ApiFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// The operations behind `/api/v1`. Implemented over etcd and Redis by the engine.
pub trait ApiBackend: Send + Sync {
    /// One page of the tasks `query` selects, in key order (namespace, then id).
    fn list_tasks(&self, query: TaskQuery) -> ApiFuture<'_, TaskList>;
    /// One task; [`ApiError::NotFound`] if it does not exist.
    fn get_task(&self, key: TaskKey) -> ApiFuture<'_, TaskView>;
    /// Validates `spec` (the JSON a user wrote) and, unless `dry_run`, registers it.
    /// [`ApiError::Invalid`] lists every problem; [`ApiError::Conflict`] when a newer version
    /// is registered.
    fn put_task(&self, spec: serde_json::Value, dry_run: bool) -> ApiFuture<'_, PutTaskResult>;
    /// Deletes a task.
    fn delete_task(&self, key: TaskKey) -> ApiFuture<'_, ()>;
    /// Pauses a task.
    fn pause(&self, key: TaskKey) -> ApiFuture<'_, TaskView>;
    /// Resumes a task.
    fn resume(&self, key: TaskKey) -> ApiFuture<'_, TaskView>;
    /// Runs a task now, outside its schedule, as `params` ask.
    fn trigger(&self, key: TaskKey, params: TriggerParams) -> ApiFuture<'_, TriggerResult>;
    /// Runs the task's fires in a past range now, oldest first, each once.
    fn backfill(&self, key: TaskKey, params: BackfillParams) -> ApiFuture<'_, BackfillResult>;
    /// Pauses a namespace: none of its tasks fires until it is resumed. `by` names who.
    fn pause_namespace(&self, namespace: String, by: String) -> ApiFuture<'_, ()>;
    /// Resumes a namespace; [`ApiError::NotFound`] when it was not paused.
    fn resume_namespace(&self, namespace: String) -> ApiFuture<'_, ()>;
    /// The last `limit` executions of a task, newest first.
    fn history(&self, key: TaskKey, limit: usize) -> ApiFuture<'_, Vec<ExecutionRecord>>;
    /// One page of the attempts of every task `query` selects, newest first.
    fn executions(&self, query: ExecutionQuery) -> ApiFuture<'_, ExecutionList>;
    /// One execution's story; [`ApiError::NotFound`] when nothing of it is recorded.
    fn execution(&self, id: String) -> ApiFuture<'_, ExecutionStory>;
    /// Dead-lettered executions, newest first.
    fn dlq_list(&self, queue: Option<String>, limit: usize) -> ApiFuture<'_, Vec<DeadLetter>>;
    /// Puts dead-lettered executions back on their queues; returns how many.
    fn dlq_requeue(&self, request: DlqRequeue) -> ApiFuture<'_, u64>;
    /// Deletes dead-lettered executions; returns how many.
    fn dlq_purge(&self, queue: Option<String>) -> ApiFuture<'_, u64>;
    /// The cluster at a glance.
    fn status(&self) -> ApiFuture<'_, StatusView>;
    /// Records a change in the audit log.
    fn audit_record(&self, record: AuditRecord) -> ApiFuture<'_, ()>;
    /// A page of the audit log, newest first.
    fn audit_list(&self, query: AuditQuery) -> ApiFuture<'_, AuditPage>;
    /// Kills a task's current executions (waiting, retrying or running), or only
    /// `execution`; [`ApiError::NotFound`] when there is none.
    fn kill_task(&self, key: TaskKey, execution: Option<String>) -> ApiFuture<'_, KillResult>;
    /// Kills one execution, whatever its task; [`ApiError::NotFound`] when no queue has it
    /// (finished, or unknown).
    fn kill_execution(&self, id: String) -> ApiFuture<'_, KillResult>;
    /// Pauses a queue: workers take nothing from it until it is resumed.
    fn pause_queue(&self, name: String) -> ApiFuture<'_, QueueState>;
    /// Resumes a paused queue.
    fn resume_queue(&self, name: String) -> ApiFuture<'_, QueueState>;
    /// A job's report on an execution of an `http.async` task (its end, or progress),
    /// authenticated by the completion token its request carried: [`ApiError::Unauthorized`]
    /// without a token shaped like one, [`ApiError::Forbidden`] when it is not the
    /// execution's, [`ApiError::Conflict`] when the attempt ended otherwise (timed out,
    /// killed, completed with another outcome, superseded by a retry).
    fn complete_execution(
        &self,
        id: String,
        request: CompletionRequest,
    ) -> ApiFuture<'_, CompletionReply>;
}

/// How a job's report on its execution says it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionStatus {
    /// It did its work: the attempt succeeds.
    Succeeded,
    /// It failed: the attempt fails and is retried as the task says (unless `retryable` is
    /// false).
    Failed,
    /// It is still at work: the deadline moves to a full task timeout from now.
    Progress,
}

/// The body of `POST /executions/{id}/complete`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    /// The completion token the job's request carried (`x-ax-completion-token`,
    /// `completion_token`).
    #[serde(default)]
    pub token: String,
    /// What is reported.
    pub status: CompletionStatus,
    /// A message: the error of a failure, what a progress report says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The job's output (any JSON), kept (its first KiB) in the history like an answer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// How far along a progress report is, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// For a failure: `false` sends it to the dead-letter queue at once instead of retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}

/// What a completion call did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompletionReply {
    /// The execution.
    pub execution_id: String,
    /// The attempt the token belongs to (0 for the first).
    pub attempt: u32,
    /// `succeeded`, `failed`, or `waiting` after a progress report.
    pub state: String,
    /// The same end was reported before: nothing more was done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repeated: bool,
    /// After a progress report: when the next report or the end must come by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<UtcMillis>,
}

/// What a kill did, per execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillResult {
    /// The executions killed (or found killed already).
    pub killed: Vec<KilledExecution>,
}

/// One execution a kill reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KilledExecution {
    /// Execution id.
    pub execution_id: String,
    /// Its task's namespace, when known (not for one killed before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its task's id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Its queue.
    pub queue: String,
    /// Where it was: `waiting` or `retry_pending` (removed: it never runs), `running` (its
    /// worker stops it within a second), `already_killed`.
    pub state: String,
}

/// A queue's pause state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    /// Queue name.
    pub name: String,
    /// Whether workers are held off it.
    pub paused: bool,
}

/// A task's address: `{prefix}/tasks/{namespace}/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskKey {
    /// Namespace.
    pub namespace: String,
    /// Id.
    pub id: String,
}

/// A task as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// Namespace.
    pub namespace: String,
    /// Id.
    pub id: String,
    /// The spec as registered (raw JSON: an invalid spec is shown as written).
    pub spec: serde_json::Value,
    /// State machine status (such as `SCHEDULED`, `PAUSED`, `INVALID`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Next fire time, when armed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire: Option<UtcMillis>,
    /// Last fire time, when it has fired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fire: Option<UtcMillis>,
    /// Validation errors of an invalid spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// How the last finished execution ended, `succeeded` or `failed`, once one has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_outcome: Option<String>,
    /// The last failure's message, while the task fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The schedule in words (`every day at 02:30 Asia/Shanghai`), for a valid spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_text: Option<String>,
    /// The next fires, up to [`UPCOMING_FIRES`], oldest first: in `GET
    /// /tasks/{namespace}/{id}` only (a listing would compute them for every task).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upcoming_fires: Vec<UtcMillis>,
}

/// Fires a task's view lists ahead ([`TaskView::upcoming_fires`]).
pub const UPCOMING_FIRES: usize = 10;

impl TaskView {
    /// Replaces the spec's secrets by `***` (see [`ax_scheduler_core::redact::mask_spec`]).
    pub fn mask_secrets(&mut self) {
        ax_scheduler_core::redact::mask_spec(&mut self.spec);
    }
}

/// Result of [`ApiBackend::put_task`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PutTaskResult {
    /// Namespace.
    pub namespace: String,
    /// Id.
    pub id: String,
    /// Whether the spec was written (false for a dry run).
    pub written: bool,
    /// The next fire times (up to 5).
    pub next_fires: Vec<UtcMillis>,
    /// What the audit log records of the change (the diff, the revision); not shown.
    #[serde(skip)]
    pub audit: Option<AuditDetail>,
}

/// What a run-now asks for: the body of `POST /tasks/{namespace}/{id}/trigger`, every field
/// optional (an empty body runs the task as its spec says).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerParams {
    /// The payload to run with instead of the spec's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// Run-now requests of the task sharing this key within the dedupe window (24 h) run
    /// once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl TriggerParams {
    /// The spec's limits apply: a payload of at most 32 KiB serialized, a key of 1 to 256
    /// bytes.
    pub fn check(&self) -> Result<(), ApiError> {
        use ax_scheduler_core::task::{MAX_IDEMPOTENCY_KEY_LEN, MAX_PAYLOAD_BYTES};
        let mut errors = Vec::new();
        if let Some(p) = &self.payload {
            let len = serde_json::to_vec(p).map_or(usize::MAX, |b| b.len());
            if len > MAX_PAYLOAD_BYTES {
                errors.push(format!(
                    "payload: is {len} bytes serialized; the limit is {MAX_PAYLOAD_BYTES} bytes (32 KiB)"
                ));
            }
        }
        if let Some(k) = &self.idempotency_key {
            if k.is_empty() || k.len() > MAX_IDEMPOTENCY_KEY_LEN {
                errors.push(format!(
                    "idempotency_key: must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes, found {}",
                    k.len()
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Invalid {
                message: "the run-now request is invalid".into(),
                errors,
            })
        }
    }
}

/// Fires a backfill enqueues when no `max` is given.
pub const DEFAULT_BACKFILL_MAX: usize = 1000;
/// Fires one backfill enqueues at most, even forced: each is an etcd key until the leader
/// takes it.
pub const BACKFILL_HARD_MAX: usize = 100_000;

/// A namespace name as task specs allow it; [`ApiError::Invalid`] otherwise.
pub fn check_namespace(namespace: &str) -> Result<(), ApiError> {
    ax_scheduler_core::validate::check_name(namespace)
        .map_err(|e| ApiError::invalid(format!("namespace: `{namespace}` {e}")))
}

/// What a backfill asks for: the body of `POST /tasks/{namespace}/{id}/backfill`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackfillParams {
    /// Start of the range (ms since the epoch), inclusive.
    pub from: UtcMillis,
    /// End of the range, inclusive.
    pub to: UtcMillis,
    /// Most fires to enqueue; a range with more is refused unless `force`. Default
    /// [`DEFAULT_BACKFILL_MAX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<usize>,
    /// Enqueue a range with more than `max` fires (up to [`BACKFILL_HARD_MAX`]).
    #[serde(default)]
    pub force: bool,
    /// Only list the fires.
    #[serde(default)]
    pub dry_run: bool,
}

/// Result of [`ApiBackend::backfill`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillResult {
    /// The fires of the range, oldest first.
    pub fires: Vec<UtcMillis>,
    /// The execution enqueued for each fire, in the same order (empty for a dry run).
    pub execution_ids: Vec<String>,
    /// Whether the requests were written (false for a dry run).
    pub written: bool,
}

/// Result of [`ApiBackend::trigger`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerResult {
    /// The execution started for this trigger.
    pub execution_id: String,
}

/// One execution of a task, as kept in its history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// Execution id.
    pub execution_id: String,
    /// Attempt number, 1 for the first.
    pub attempt: u32,
    /// When it was due.
    pub due: UtcMillis,
    /// When a worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<UtcMillis>,
    /// Start minus due, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lateness_ms: Option<u64>,
    /// Run time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// How the attempt ended: `succeeded`, `retrying` (failed, a retry is scheduled),
    /// `dead_lettered` (failed for good), `timed_out`, `panicked`, or `released` (given back
    /// unfinished at a worker's shutdown).
    pub outcome: String,
    /// Error message of a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Instance id of the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The task (in the history across tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The task (in the history across tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Queue it ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// When the attempt was enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<UtcMillis>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<UtcMillis>,
    /// When the retry that follows is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<UtcMillis>,
    /// The start of the handler's answer: `{"status", "body", "truncated"}`, the body's
    /// first KiB at most (in the history across tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ax_scheduler_core::AttemptOutput>,
    /// The dependency run and the shard of a sharded fire it belongs to (`run_id`,
    /// `fanout_id`, `shard_index`, `shard_total`, and for a broadcast fire the worker it is
    /// addressed to, `target_worker`), when it does.
    #[serde(flatten)]
    pub lineage: ax_queue::Lineage,
}

/// A dead-lettered execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Execution id.
    pub execution_id: String,
    /// The task.
    pub namespace: String,
    /// The task.
    pub task_id: String,
    /// Queue it ran on.
    pub queue: String,
    /// Attempts made.
    pub attempts: u32,
    /// Error of the last attempt.
    pub last_error: String,
    /// When it was dead-lettered.
    pub dead_at: UtcMillis,
}

/// What [`ApiBackend::dlq_requeue`] puts back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DlqRequeue {
    /// These executions.
    Ids {
        /// Execution ids.
        ids: Vec<String>,
    },
    /// Every dead letter, or those of one queue.
    All {
        /// Must be true.
        all: bool,
        /// Only this queue.
        #[serde(default)]
        queue: Option<String>,
    },
}

/// The cluster at a glance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    /// Instance id of the leader, if there is one.
    pub leader: Option<String>,
    /// When the leader's term started (it won the election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_since: Option<UtcMillis>,
    /// Registered replicas.
    pub replicas: Vec<ReplicaView>,
    /// Queues.
    pub queues: Vec<QueueView>,
    /// Dead-lettered executions.
    pub dlq_size: u64,
    /// Redis settings that would lose ax's queue state (no persistence, evicting memory
    /// policy), one sentence each; empty when none or unknown.
    #[serde(default)]
    pub redis_warnings: Vec<String>,
    /// etcd's database size against its quota, when etcd answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_db: Option<EtcdDbView>,
    /// Namespaces whose tasks do not fire, with who paused them and when.
    #[serde(default)]
    pub paused_namespaces: Vec<ax_registry::NamespacePause>,
    /// The answering host's clock against etcd's, when it could be measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockView>,
    /// The shard map, with sharded scheduling (`scheduler.shards` above 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsView>,
}

/// Who schedules which shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardsView {
    /// Shards of the installation.
    pub total: u32,
    /// Each owned shard's owner and fencing token, in shard order; a shard missing here
    /// has no owner (nothing of it fires).
    pub owners: Vec<ax_election::ShardOwnerRecord>,
}

/// One host's clock against etcd's (the check a replica makes before it campaigns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockView {
    /// How far the host's clock is ahead of etcd's (negative: behind), milliseconds.
    pub skew_ms: i64,
    /// `scheduler.max_clock_skew`: a replica this far off refuses to lead, milliseconds.
    pub max_skew_ms: u64,
}

impl ClockView {
    /// Whether the skew is beyond what a leader may have.
    pub fn too_far(&self) -> bool {
        self.skew_ms.unsigned_abs() > self.max_skew_ms
    }
}

/// etcd's database size against its quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdDbView {
    /// Size of the database file, bytes.
    pub bytes: u64,
    /// The quota, bytes (`--quota-backend-bytes`).
    pub quota_bytes: u64,
}

/// One replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaView {
    /// Instance id.
    pub id: String,
    /// Roles.
    pub roles: Vec<String>,
    /// ax version it runs.
    pub version: String,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<UtcMillis>,
    /// Time since it last renewed its registration in etcd (its heartbeat), milliseconds;
    /// absent when etcd could not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_ms: Option<u64>,
}

/// One queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    /// Queue name.
    pub name: String,
    /// Waiting executions.
    pub depth: u64,
    /// Age of the oldest waiting execution, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_age_ms: Option<u64>,
    /// Dead-lettered executions of this queue.
    #[serde(default)]
    pub dlq_size: u64,
    /// An operator paused it: workers take nothing from it.
    #[serde(default)]
    pub paused: bool,
    /// Ids of the workers serving it now (heartbeat alive), whatever their language.
    #[serde(default)]
    pub workers: Vec<String>,
    /// Physical queues it is spread over (`redis.queue_partitions`); the figures above are
    /// their sums. 1 (left out) when it has no partitions.
    #[serde(default = "one_partition", skip_serializing_if = "is_one_partition")]
    pub partitions: u32,
}

fn one_partition() -> u32 {
    1
}

fn is_one_partition(n: &u32) -> bool {
    *n == 1
}

/// Who is calling: the body of `GET /whoami`, so a client (the console) can offer only what
/// the caller's role allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    /// The token's name, or `anonymous` where the API admits callers without one.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

/// Shared by the API handlers: the backend, or `None` while this process has none (the
/// API then answers 503), and the input limits.
#[derive(Clone)]
pub struct ApiState {
    backend: Option<Arc<dyn ApiBackend>>,
    limits: ApiLimits,
    triggers: TriggerLimiter,
    completions: limits::CompletionLimiter,
}

impl ApiState {
    fn backend(&self) -> Result<&dyn ApiBackend, ApiError> {
        self.backend.as_deref().ok_or_else(|| {
            ApiError::Unavailable("this replica has no API backend connected yet".into())
        })
    }
}

/// The `/api/v1` routes (to be nested) with their input limits, without authentication.
pub fn router(backend: Option<Arc<dyn ApiBackend>>, limits: ApiLimits) -> Router {
    let state = ApiState {
        backend,
        limits,
        triggers: TriggerLimiter::new(limits.triggers_per_task_per_minute),
        completions: limits::CompletionLimiter::new(),
    };
    Router::new()
        .route("/tasks", get(list_tasks).post(put_task))
        .route("/tasks/{namespace}/{id}", get(get_task).delete(delete_task))
        .route("/tasks/{namespace}/{id}/pause", post(pause))
        .route("/tasks/{namespace}/{id}/resume", post(resume))
        .route("/tasks/{namespace}/{id}/trigger", post(trigger))
        .route("/tasks/{namespace}/{id}/backfill", post(backfill))
        .route("/tasks/{namespace}/{id}/history", get(history))
        .route("/executions", get(executions))
        .route("/executions/{id}", get(execution))
        .route("/dlq", get(dlq_list))
        .route("/dlq/requeue", post(dlq_requeue))
        .route("/dlq/purge", post(dlq_purge))
        .route("/namespaces/{namespace}/pause", post(pause_namespace))
        .route("/namespaces/{namespace}/resume", post(resume_namespace))
        .route("/status", get(status))
        .route("/audit", get(audit))
        .route("/tasks/{namespace}/{id}/kill", post(kill_task))
        .route("/executions/{id}/kill", post(kill_execution))
        .route("/queues/{name}/pause", post(pause_queue))
        .route("/queues/{name}/resume", post(resume_queue))
        .route("/whoami", get(whoami))
        .route("/executions/{id}/complete", post(complete_execution))
        .fallback(|| async { ApiError::NotFound("no such API route".into()) })
        .layer(DefaultBodyLimit::max(limits.max_request_bytes))
        .with_state(state)
}

type ApiResult<T> = Result<Json<T>, ApiError>;

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|e| ApiError::invalid(format!("bad query string: {}", e.body_text())))
}

fn check_limit(limit: usize) -> Result<usize, ApiError> {
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(ApiError::invalid(format!(
            "limit must be between 1 and {MAX_LIST_LIMIT}"
        )));
    }
    Ok(limit)
}

fn key((namespace, id): (String, String)) -> TaskKey {
    TaskKey { namespace, id }
}

#[derive(Deserialize)]
struct PutQuery {
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
struct SecretsQuery {
    #[serde(default)]
    show_secrets: bool,
}

#[derive(Deserialize)]
struct LimitQuery {
    #[serde(default = "default_history_limit")]
    limit: usize,
}

fn default_history_limit() -> usize {
    20
}

#[derive(Deserialize)]
struct DlqQuery {
    queue: Option<String>,
    #[serde(default = "default_dlq_limit")]
    limit: usize,
}

fn default_dlq_limit() -> usize {
    50
}

#[derive(Deserialize)]
struct QueueQuery {
    queue: Option<String>,
}

/// Count of items a DLQ call acted on.
#[derive(Serialize)]
struct Count {
    count: u64,
}

/// The page's tasks as the body (a JSON array, as before paging), and the next page's token
/// in the [`CONTINUE_HEADER`] header when there is one.
async fn list_tasks(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    q: Result<Query<TaskQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    q.page_size()?;
    q.status_filter()?;
    let show = secrets_shown(q.show_secrets, &who)?;
    let mut page = s.backend()?.list_tasks(q).await?;
    if !show {
        page.items.iter_mut().for_each(TaskView::mask_secrets);
    }
    let mut response = Json(page.items).into_response();
    if let Some(token) = page.continue_token {
        if let Ok(value) = axum::http::HeaderValue::from_str(&token) {
            response.headers_mut().insert(CONTINUE_HEADER, value);
        }
    }
    Ok(response)
}

async fn put_task(
    State(s): State<ApiState>,
    q: Result<Query<PutQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?;
    let body = limits::body(body, &s.limits)?;
    // Parsed here rather than with `Json<_>` so that any content type is accepted and a
    // syntax error gets the same error shape as a validation error.
    let spec: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("the body is not JSON: {e}")))?;
    let mut result = s.backend()?.put_task(spec, q.dry_run).await?;
    let status = if result.written {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let audit = result.audit.take();
    let mut response = (status, Json(result)).into_response();
    if let Some(audit) = audit {
        response.extensions_mut().insert(audit);
    }
    Ok(response)
}

async fn get_task(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(p): Path<(String, String)>,
    q: Result<Query<SecretsQuery>, QueryRejection>,
) -> ApiResult<TaskView> {
    let show = secrets_shown(query(q)?.show_secrets, &who)?;
    let mut view = s.backend()?.get_task(key(p)).await?;
    if !show {
        view.mask_secrets();
    }
    Ok(Json(view))
}

/// Whether a request may see secrets: only when it asks and its role is admin.
fn secrets_shown(asked: bool, who: &Principal) -> Result<bool, ApiError> {
    if asked && who.role < Role::Admin {
        return Err(ApiError::Forbidden(format!(
            "show_secrets needs the `admin` role; token `{}` has `{}`",
            who.name,
            who.role.as_str()
        )));
    }
    Ok(asked)
}

async fn delete_task(
    State(s): State<ApiState>,
    Path(p): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    s.backend()?.delete_task(key(p)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn pause(State(s): State<ApiState>, Path(p): Path<(String, String)>) -> ApiResult<TaskView> {
    let mut view = s.backend()?.pause(key(p)).await?;
    view.mask_secrets();
    Ok(Json(view))
}

async fn resume(State(s): State<ApiState>, Path(p): Path<(String, String)>) -> ApiResult<TaskView> {
    let mut view = s.backend()?.resume(key(p)).await?;
    view.mask_secrets();
    Ok(Json(view))
}

async fn trigger(
    State(s): State<ApiState>,
    Path(p): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = limits::body(body, &s.limits)?;
    let params: TriggerParams = if body.iter().all(u8::is_ascii_whitespace) {
        TriggerParams::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::invalid(format!(
                "the body must be {{\"payload\": ..., \"idempotency_key\": \"...\"}} (both optional): {e}"
            ))
        })?
    };
    params.check()?;
    let key = key(p);
    let backend = s.backend()?;
    s.triggers.admit(&key, UtcMillis::now())?;
    let mut detail = serde_json::to_value(&params).unwrap_or_default();
    let result = backend.trigger(key, params).await?;
    detail["execution_id"] = serde_json::Value::String(result.execution_id.clone());
    let mut response = (StatusCode::ACCEPTED, Json(result)).into_response();
    response.extensions_mut().insert(AuditDetail {
        detail: Some(detail),
        ..AuditDetail::default()
    });
    Ok(response)
}

async fn backfill(
    State(s): State<ApiState>,
    Path(p): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = limits::body(body, &s.limits)?;
    let params: BackfillParams = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid(format!(
            "the body must be {{\"from\": MS, \"to\": MS, \"max\": N, \"force\": BOOL, \"dry_run\": BOOL}}: {e}"
        ))
    })?;
    let detail = serde_json::to_value(&params).unwrap_or_default();
    let result = s.backend()?.backfill(key(p), params).await?;
    let status = if result.written {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    let mut response = (status, Json(result)).into_response();
    response.extensions_mut().insert(AuditDetail {
        detail: Some(detail),
        ..AuditDetail::default()
    });
    Ok(response)
}

async fn history(
    State(s): State<ApiState>,
    Path(p): Path<(String, String)>,
    q: Result<Query<LimitQuery>, QueryRejection>,
) -> ApiResult<Vec<ExecutionRecord>> {
    let limit = check_limit(query(q)?.limit)?;
    Ok(Json(s.backend()?.history(key(p), limit).await?))
}

/// The page as the body (`{"items", "continue"}`), the token also in [`CONTINUE_HEADER`] as
/// for tasks.
async fn executions(
    State(s): State<ApiState>,
    q: Result<Query<ExecutionParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let q = query(q)?.resolve(UtcMillis::now())?;
    let page = s.backend()?.executions(q).await?;
    let token = page.continue_token.clone();
    let mut response = Json(page).into_response();
    if let Some(token) = token {
        if let Ok(value) = axum::http::HeaderValue::from_str(&token) {
            response.headers_mut().insert(CONTINUE_HEADER, value);
        }
    }
    Ok(response)
}

async fn execution(State(s): State<ApiState>, Path(id): Path<String>) -> ApiResult<ExecutionStory> {
    if id.parse::<uuid::Uuid>().is_err() {
        return Err(ApiError::invalid(format!("`{id}` is not an execution id")));
    }
    Ok(Json(s.backend()?.execution(id).await?))
}

async fn dlq_list(
    State(s): State<ApiState>,
    q: Result<Query<DlqQuery>, QueryRejection>,
) -> ApiResult<Vec<DeadLetter>> {
    let q = query(q)?;
    let limit = check_limit(q.limit)?;
    Ok(Json(s.backend()?.dlq_list(q.queue, limit).await?))
}

async fn dlq_requeue(
    State(s): State<ApiState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Count> {
    let body = limits::body(body, &s.limits)?;
    let request: DlqRequeue = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid(format!(
            "the body must be {{\"ids\": [...]}} or {{\"all\": true, \"queue\": ...}}: {e}"
        ))
    })?;
    match &request {
        DlqRequeue::Ids { ids } if ids.is_empty() => {
            return Err(ApiError::invalid("ids is empty"));
        }
        DlqRequeue::All { all: false, .. } => {
            return Err(ApiError::invalid("all must be true when no ids are given"));
        }
        _ => {}
    }
    let count = s.backend()?.dlq_requeue(request).await?;
    Ok(Json(Count { count }))
}

async fn dlq_purge(
    State(s): State<ApiState>,
    q: Result<Query<QueueQuery>, QueryRejection>,
) -> ApiResult<Count> {
    let q = query(q)?;
    let count = s.backend()?.dlq_purge(q.queue).await?;
    Ok(Json(Count { count }))
}

/// The page's records as the body (newest first), the next page's token in
/// [`CONTINUE_HEADER`].
async fn audit(
    State(s): State<ApiState>,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let page = s.backend()?.audit_list(query(q)?).await?;
    let mut response = Json(page.items).into_response();
    if let Some(token) = page.continue_token {
        if let Ok(value) = axum::http::HeaderValue::from_str(&token) {
            response.headers_mut().insert(CONTINUE_HEADER, value);
        }
    }
    Ok(response)
}

async fn pause_namespace(
    State(s): State<ApiState>,
    Extension(who): Extension<Principal>,
    Path(namespace): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.backend()?
        .pause_namespace(namespace, who.name.to_string())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resume_namespace(
    State(s): State<ApiState>,
    Path(namespace): Path<String>,
) -> Result<StatusCode, ApiError> {
    s.backend()?.resume_namespace(namespace).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn status(State(s): State<ApiState>) -> ApiResult<StatusView> {
    Ok(Json(s.backend()?.status().await?))
}

#[derive(Deserialize)]
struct KillQuery {
    execution: Option<String>,
}

async fn kill_task(
    State(s): State<ApiState>,
    Path(p): Path<(String, String)>,
    q: Result<Query<KillQuery>, QueryRejection>,
) -> ApiResult<KillResult> {
    let q = query(q)?;
    Ok(Json(s.backend()?.kill_task(key(p), q.execution).await?))
}

async fn kill_execution(
    State(s): State<ApiState>,
    Path(id): Path<String>,
) -> ApiResult<KillResult> {
    Ok(Json(s.backend()?.kill_execution(id).await?))
}

async fn pause_queue(State(s): State<ApiState>, Path(name): Path<String>) -> ApiResult<QueueState> {
    Ok(Json(s.backend()?.pause_queue(name).await?))
}

async fn resume_queue(
    State(s): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<QueueState> {
    Ok(Json(s.backend()?.resume_queue(name).await?))
}

/// Not behind an API token: the completion token in the body is the credential, checked by
/// the backend (see `auth::EXECUTION_TOKEN_ROUTES`).
async fn complete_execution(
    State(s): State<ApiState>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<CompletionReply> {
    let body = limits::body(body, &s.limits)?;
    s.completions.admit(&id, UtcMillis::now())?;
    let request: CompletionRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid(format!(
            "the body must be {{\"token\": ..., \"status\": \"succeeded\" | \"failed\" | \"progress\", ...}}: {e}"
        ))
    })?;
    Ok(Json(s.backend()?.complete_execution(id, request).await?))
}

/// Needs no backend: the answer is the authorization layer's.
async fn whoami(Extension(who): Extension<Principal>) -> Json<WhoAmI> {
    Json(WhoAmI {
        name: who.name.to_string(),
        role: who.role,
    })
}
