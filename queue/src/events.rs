//! Execution events from workers to the leader: one Redis list, read in batches.
//!
//! Workers run on every replica; the leader alone writes task states and judges failure
//! rates (circuit breaker) and overlap holds, so it needs to hear when executions start and
//! end. A list (LPUSH by workers, RPOP with a count by the leader) survives a leader change:
//! what the old leader did not read, the new one does. It is capped (LTRIM) so that a long
//! time without a leader cannot grow it without bound; states are then corrected by the
//! next executions. Event and history writes of one report go in one pipeline.

use ax_scheduler_core::{ExecutionEvent, UtcMillis};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{QueueError, Result};
use crate::history::HistoryEntry;
use crate::queue::Queue;

/// Most events kept waiting for a leader.
pub const EVENTS_CAP: isize = 100_000;

/// One event of one execution attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionEventRecord {
    /// Task namespace.
    pub namespace: String,
    /// Task id.
    pub task_id: String,
    /// Execution id.
    pub execution_id: Uuid,
    /// The fire the execution stands for.
    pub fire_at: UtcMillis,
    /// Attempt number, 0 for the first.
    pub attempt: u32,
    /// What happened.
    pub kind: ExecutionEvent,
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| QueueError::Json {
        action: "encode",
        what,
        source,
    })
}

impl Queue {
    /// Publishes `event` for the leader and, when given, records the attempt in the task's
    /// history, in one round trip.
    pub async fn report(
        &self,
        event: &ExecutionEventRecord,
        history: Option<&HistoryEntry>,
    ) -> Result<()> {
        self.report_many(&[(event.clone(), history.cloned())]).await
    }

    /// Publishes many reports in one pipeline: all events in one `LPUSH` (in the given
    /// order, so the leader reads them oldest first), one `LTRIM`, and each history entry
    /// with its own cap. A worker running thousands of executions a second spends one round
    /// trip per batch instead of one per report.
    pub async fn report_many(
        &self,
        reports: &[(ExecutionEventRecord, Option<HistoryEntry>)],
    ) -> Result<()> {
        if reports.is_empty() {
            return Ok(());
        }
        let events = self.keys().events();
        let encoded = reports
            .iter()
            .map(|(event, _)| encode("execution event", event))
            .collect::<Result<Vec<_>>>()?;
        let mut pipe = redis::pipe();
        pipe.lpush(&events, encoded)
            .ignore()
            .ltrim(&events, 0, EVENTS_CAP - 1)
            .ignore();
        let cap = isize::try_from(self.config().history_cap).unwrap_or(isize::MAX);
        for (event, history) in reports {
            if let Some(entry) = history {
                let key = self.keys().history(&event.namespace, &event.task_id);
                pipe.lpush(&key, encode("history entry", entry)?)
                    .ignore()
                    .ltrim(&key, 0, cap - 1)
                    .ignore();
            }
        }
        let mut conn = self.conn();
        self.run("report", pipe.query_async::<()>(&mut conn)).await
    }

    /// Takes up to `max` events, oldest first. Undecodable entries are dropped with a
    /// warning (they cannot be acted on, and must not block the ones behind them).
    pub async fn take_events(&self, max: usize) -> Result<Vec<ExecutionEventRecord>> {
        let mut conn = self.conn();
        let count = std::num::NonZeroUsize::new(max.max(1));
        let raw: Option<Vec<String>> = self
            .run(
                "take_events",
                redis::AsyncCommands::rpop(&mut conn, self.keys().events(), count),
            )
            .await?;
        Ok(raw
            .unwrap_or_default()
            .into_iter()
            .filter_map(|j| match serde_json::from_str(&j) {
                Ok(e) => Some(e),
                Err(e) => {
                    tracing::warn!(error = %e, "undecodable execution event dropped");
                    None
                }
            })
            .collect())
    }
}
