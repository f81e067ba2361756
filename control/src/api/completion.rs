//! A job's report on an execution of an `http.async` task: its end, or its progress.
//!
//! The request carries its own credential (the completion token), so these types stand
//! apart from the calls behind an API token; the backend checks the token against the
//! attempt it belongs to.

use ax_scheduler_core::UtcMillis;
use serde::{Deserialize, Serialize};

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
    pub execution_id: ax_scheduler_core::ExecutionId,
    /// The attempt the token belongs to (1 for the first).
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
