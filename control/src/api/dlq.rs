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
    },
}
