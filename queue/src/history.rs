//! Execution history per task: a capped list, newest first, read by `ax task history`.
//!
//! LPUSH + LTRIM in one MULTI keeps the list bounded without a cleanup job, and each write
//! renews the key's expiry ([`crate::QueueConfig::history_retention`]), so the history of a
//! task that no longer runs goes by itself; the leader also deletes it with a deleted task's
//! state. The list is keyed
//! per task under its own hash tag: no script touches it together with queue keys.

use ax_scheduler_core::{AttemptEnd, UtcMillis};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{QueueError, Result};
use crate::queue::Queue;

/// One attempt of one execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Execution id.
    pub execution_id: Uuid,
    /// Schedule instant.
    pub fire_at: UtcMillis,
    /// When the handler started.
    pub started_at: UtcMillis,
    /// When it finished.
    pub finished_at: UtcMillis,
    /// `started_at - fire_at` in ms (negative if it started early).
    pub lateness_ms: i64,
    /// `finished_at - started_at` in ms.
    pub duration_ms: u64,
    /// How it ended, its error and the retry that follows, if any.
    #[serde(flatten)]
    pub end: AttemptEnd,
    /// Worker id.
    pub worker: String,
    /// Attempt number, 0 for the first.
    pub attempt: u32,
}

impl Queue {
    /// Prepends `entry` to the task's history, keeping the newest
    /// [`crate::QueueConfig::history_cap`] entries.
    pub async fn record_history(
        &self,
        namespace: &str,
        task_id: &str,
        entry: &HistoryEntry,
    ) -> Result<()> {
        let json = serde_json::to_string(entry).map_err(|source| QueueError::Json {
            action: "encode",
            what: "history entry",
            source,
        })?;
        let key = self.keys().history(namespace, task_id);
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        self.push_history(pipe.atomic(), &key, json);
        self.run("record_history", pipe.query_async::<()>(&mut conn))
            .await
    }

    /// Deletes the history of each task in `tasks` (namespace, id): they were deleted.
    pub async fn delete_histories(&self, tasks: &[(&str, &str)]) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (namespace, id) in tasks {
            pipe.del(self.keys().history(namespace, id)).ignore();
        }
        let mut conn = self.conn();
        self.run("delete_histories", pipe.query_async::<()>(&mut conn))
            .await
    }

    /// The newest `limit` history entries of each task of `tasks` (namespace, id), newest
    /// first, in one round trip; an entry that cannot be decoded is passed over.
    pub async fn history_many(
        &self,
        tasks: &[(&str, &str)],
        limit: usize,
    ) -> Result<Vec<Vec<HistoryEntry>>> {
        if tasks.is_empty() || limit == 0 {
            return Ok(vec![Vec::new(); tasks.len()]);
        }
        let stop = isize::try_from(limit - 1).unwrap_or(isize::MAX);
        let mut pipe = redis::pipe();
        for (namespace, task_id) in tasks {
            pipe.lrange(self.keys().history(namespace, task_id), 0, stop);
        }
        let mut conn = self.conn();
        let lists: Vec<Vec<String>> = self
            .run("history_many", pipe.query_async(&mut conn))
            .await?;
        Ok(lists
            .into_iter()
            .map(|list| {
                list.iter()
                    .filter_map(|j| serde_json::from_str(j).ok())
                    .collect()
            })
            .collect())
    }

    /// The newest `limit` history entries of a task, newest first.
    pub async fn history(
        &self,
        namespace: &str,
        task_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = self.keys().history(namespace, task_id);
        let stop = isize::try_from(limit - 1).unwrap_or(isize::MAX);
        let mut conn = self.conn();
        let jsons: Vec<String> = self
            .run(
                "history",
                redis::AsyncCommands::lrange(&mut conn, key, 0, stop),
            )
            .await?;
        jsons
            .iter()
            .map(|j| {
                serde_json::from_str(j).map_err(|source| QueueError::Json {
                    action: "decode",
                    what: "history entry",
                    source,
                })
            })
            .collect()
    }
}

impl Queue {
    /// Adds one history write to `pipe`: the entry pushed, the list cut to its cap, its
    /// expiry renewed. The one way history is written (alone, or with a report's event).
    pub(crate) fn push_history(&self, pipe: &mut redis::Pipeline, key: &str, json: String) {
        let cap = isize::try_from(self.config().history_cap).unwrap_or(isize::MAX);
        let retention =
            i64::try_from(self.config().history_retention.as_millis()).unwrap_or(i64::MAX);
        pipe.lpush(key, json)
            .ignore()
            .ltrim(key, 0, cap - 1)
            .ignore()
            .pexpire(key, retention)
            .ignore();
    }
}
