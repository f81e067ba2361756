//! The dead-letter queue as the API shows it: one dead letter, and what a requeue names.
//!
//! A requeue names its executions or asks for all of them (of one queue), one untagged
//! body, so a caller writes `{"ids": [...]}` or `{"all": true}` and nothing else.

use ax_scheduler_core::{ExecutionId, UtcMillis};
use serde::{Deserialize, Serialize};

/// A dead-lettered execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Execution id.
    pub execution_id: ExecutionId,
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
    /// Every attempt's error in full, oldest first, the last one included.
    #[serde(default)]
    pub errors: Vec<AttemptFailure>,
    /// The payload the execution ran with (`null` when it had none or its message could
    /// not be decoded).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub payload: serde_json::Value,
    /// The stored text of a message that could not be decoded, to show what was there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// One failed attempt of a dead letter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptFailure {
    /// The attempt, 1 for the first.
    pub attempt: u32,
    /// When it failed.
    pub at: UtcMillis,
    /// Its error, in full.
    pub error: String,
}

/// What [`ApiBackend::dlq_requeue`](super::ApiBackend::dlq_requeue) puts back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DlqRequeue {
    /// These executions.
    Ids {
        /// Execution ids.
        ids: Vec<String>,
        /// Requeue the stored messages as they are, even for a task gone or re-pointed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        use_stored: bool,
        /// Who asks, as the operation names its caller: never taken from a request body.
        #[serde(skip)]
        requested_by: Option<String>,
    },
    /// Every dead letter, or those of one queue.
    All {
        /// Must be true.
        all: bool,
        /// Only this queue.
        #[serde(default)]
        queue: Option<String>,
        /// Requeue the stored messages as they are, even for a task gone or re-pointed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        use_stored: bool,
        /// Who asks, as the operation names its caller: never taken from a request body.
        #[serde(skip)]
        requested_by: Option<String>,
    },
}

impl DlqRequeue {
    /// Names who asks.
    pub fn requested_by(mut self, actor: &str) -> Self {
        match &mut self {
            DlqRequeue::Ids { requested_by, .. } | DlqRequeue::All { requested_by, .. } => {
                *requested_by = Some(actor.to_owned());
            }
        }
        self
    }
}

/// Most requeued dead letters a [`DlqRequeued`] lists one by one; `count` is the total.
pub const REQUEUED_LISTED: usize = 1000;

/// What a requeue put back: how many, and for each (up to [`REQUEUED_LISTED`]) the new
/// execution and what it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqRequeued {
    /// Dead letters requeued.
    pub count: u64,
    /// The first [`REQUEUED_LISTED`] of them, in the order requeued.
    #[serde(default)]
    pub requeued: Vec<RequeuedLetter>,
}

/// One dead letter put back, as a new execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequeuedLetter {
    /// The dead-lettered execution.
    pub dead_letter: ExecutionId,
    /// The new execution it became.
    pub execution_id: ExecutionId,
    /// The task.
    pub namespace: String,
    /// The task.
    pub task_id: String,
    /// What it runs: the task's spec now, or the message stored with the dead letter.
    pub onto: RequeueOnto,
    /// With `onto: current_spec`, what of the target differs from the attempt that failed
    /// (`handler http → log`, `http.url`, ...); empty when the target is the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
}

/// What a requeued execution runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequeueOnto {
    /// Rebuilt from the task's current spec (the default): a fixed task runs as fixed.
    CurrentSpec,
    /// The stored message as it ran (`use_stored`).
    Stored,
}
