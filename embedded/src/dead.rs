//! Dead letters: executions that failed for good, kept with their job so they can be run
//! again.
//!
//! One letter per job, the latest: a periodic job that keeps failing does not grow the list,
//! and its next fires still run (the breaker slows them). A requeue runs the job again as a
//! new execution from its first attempt, as the cluster's requeue does.

use ax_scheduler_core::{AttemptOutcome, ExecutionId, UtcMillis};
use serde::{Deserialize, Serialize};

use crate::job_id::JobId;

/// An execution that failed for good.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The job.
    pub job: JobId,
    /// The execution.
    pub execution: ExecutionId,
    /// Attempts made.
    pub attempts: u32,
    /// How the last one ended.
    pub outcome: AttemptOutcome,
    /// Its error.
    pub error: String,
    /// Why no retry followed (retries exhausted, the time budget spent, not retryable).
    pub reason: String,
    /// When it was dead-lettered.
    pub at: UtcMillis,
}
