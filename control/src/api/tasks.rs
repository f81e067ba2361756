//! Tasks as the API takes and shows them: listing queries and pages, the view of one task,
//! and what a put, a run-now and a backfill ask for and answer.
//!
//! The checks that need nothing but the request (page size, status names, payload size)
//! are methods of the request types, so every caller refuses the same input with the same
//! words before any backend is asked.

use ax_scheduler_core::breaker::Throttle;
use ax_scheduler_core::UtcMillis;
use serde::{Deserialize, Serialize};

use super::{ApiError, Outcome, MAX_LIST_LIMIT};
use crate::audit::AuditDetail;

/// Tasks in a page when the request gives no `limit`.
pub const DEFAULT_TASK_PAGE: usize = 500;

/// Which tasks [`ApiBackend::list_tasks`](super::ApiBackend::list_tasks) returns (the query
/// string of `GET /tasks`).
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
    pub last_outcome: Option<Outcome>,
    /// The last failure's message, while the task fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Whether the task's namespace is paused (`ax namespace pause`): then its status is
    /// `PAUSED` and it shows no next fire, whatever its own spec says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub namespace_paused: bool,
    /// The task's circuit breaker is open: more than half of its recent executions failed,
    /// so the leader dispatches one fire in [`Throttle::dispatch_every`] and skips the rest
    /// until they succeed again. The CLI and the console show the task `THROTTLED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<Throttle>,
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

/// How many next fires a task's preview shows (`ax task put --dry-run`, a put's answer).
pub const PREVIEW_FIRES: usize = 5;

impl TaskView {
    /// Replaces the spec's secrets by `***` (see [`ax_scheduler_core::redact::mask_spec`]).
    pub fn mask_secrets(&mut self) {
        ax_scheduler_core::redact::mask_spec(&mut self.spec);
    }
}

/// How a put is carried out: the query of `POST /tasks`, the flags of `ax task put`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutOptions {
    /// Validate and compute the next fires; write nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Register even when no live worker serves the task's handler (its workers are deployed
    /// later). Without it such a put is refused: the task would fail at every fire.
    #[serde(default)]
    pub allow_unserved_handler: bool,
}

/// Result of [`ApiBackend::put_task`](super::ApiBackend::put_task).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PutTaskResult {
    /// Namespace.
    pub namespace: String,
    /// Id.
    pub id: String,
    /// Whether the spec was written (false for a dry run, and when unchanged).
    pub written: bool,
    /// Whether the registered spec already said the same (same version, same content), so
    /// that nothing was written: putting a file again is not a conflict.
    #[serde(default)]
    pub unchanged: bool,
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
    /// Who asks, as the operation names its caller: never taken from a request body.
    #[serde(skip)]
    pub requested_by: Option<String>,
}

impl TriggerParams {
    /// The spec's limits apply: a payload of at most 32 KiB serialized, a key of 1 to 256
    /// bytes.
    pub fn check(&self) -> Result<(), ApiError> {
        use ax_scheduler_core::options::{
            check_idempotency_key, check_payload_size, payload_bytes,
        };
        let mut errors = Vec::new();
        if let Some(p) = &self.payload {
            errors.extend(check_payload_size(payload_bytes(p)).map(|e| format!("payload: {e}")));
        }
        if let Some(k) = &self.idempotency_key {
            errors.extend(check_idempotency_key(k).map(|e| format!("idempotency_key: {e}")));
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
/// The highest `limits.max_backfill_fires` may be: each fire is an etcd key until the
/// leader takes it.
pub const BACKFILL_HARD_MAX: usize = 100_000;

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
    /// Enqueue a range with more than `max` fires (up to `limits.max_backfill_fires`).
    #[serde(default)]
    pub force: bool,
    /// Only list the fires.
    #[serde(default)]
    pub dry_run: bool,
    /// Who asks, as the operation names its caller: never taken from a request body.
    #[serde(skip)]
    pub requested_by: Option<String>,
}

/// Result of [`ApiBackend::backfill`](super::ApiBackend::backfill).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillResult {
    /// The fires of the range, oldest first.
    pub fires: Vec<UtcMillis>,
    /// The execution of each fire, in the same order (empty for a dry run): the one this
    /// backfill requested, or, for a fire an earlier backfill ran, that earlier execution.
    pub execution_ids: Vec<ax_scheduler_core::ExecutionId>,
    /// For each fire, whether an earlier backfill ran it already (within the dedupe
    /// window): nothing is requested for it, and its id is the earlier execution's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub already_run: Vec<bool>,
    /// For each fire, whether an earlier backfill requested it and the leader has not taken
    /// it yet: nothing is requested again, and its id is that pending request's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<bool>,
    /// Whether the requests were written (false for a dry run).
    pub written: bool,
}

/// Result of [`ApiBackend::trigger`](super::ApiBackend::trigger).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerResult {
    /// The execution started for this trigger.
    pub execution_id: ax_scheduler_core::ExecutionId,
}
