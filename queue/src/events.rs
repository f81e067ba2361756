//! Execution events from workers to the leader: one Redis stream, read through a consumer
//! group and acknowledged only once their effects are written.
//!
//! Workers run on every replica; the leader alone writes task states and judges failure
//! rates (circuit breaker) and overlap holds, so it needs to hear when executions start and
//! end. Workers append to a stream (`XADD`); the leader reads it as the one consumer of a
//! consumer group, so an entry it read stays pending until it acknowledges it
//! ([`Queue::ack_events`], which also deletes it), and it does so only after the task states
//! the entry changed are in etcd. A leader that dies in between leaves its entries pending,
//! and its successor claims them ([`Queue::claim_events`]) before reading new ones; the
//! stream id of each entry ([`EventPosition`]) is recorded in the task state with the
//! entry's effects, so an entry read twice is applied once. The stream is capped
//! (`MAXLEN ~`) so that a long time without a leader cannot grow it without bound; states
//! are then corrected from the execution history. Event and history writes of one report go
//! in one pipeline (the history's: the task's list and the stream across tasks, see
//! `history.rs`).

use std::time::Duration;

use ax_scheduler_core::{EventPosition, ExecutionEvent, UtcMillis};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{QueueError, Result};
use crate::history::HistoryEntry;
use crate::queue::Queue;

/// Most events kept waiting for a leader (approximately: the stream is trimmed in whole
/// nodes).
pub const EVENTS_CAP: usize = 100_000;

/// The consumer group the leader reads the event stream through.
const GROUP: &str = "leader";
/// The group's one consumer: every leader reads as the same consumer, so the entries a dead
/// leader left pending are simply this consumer's pending entries.
const CONSUMER: &str = "leader";
/// The stream field holding an event's JSON.
const FIELD: &str = "e";

/// One entry of the event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventEntry {
    /// The entry's stream id.
    pub position: EventPosition,
    /// The event; `None` when the entry cannot be decoded (or was trimmed away while
    /// pending). Such an entry is acknowledged like any other, so it does not come back.
    pub record: Option<ExecutionEventRecord>,
}

/// One event of one execution attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionEventRecord {
    /// Task namespace.
    pub namespace: std::sync::Arc<str>,
    /// Task id.
    pub task_id: std::sync::Arc<str>,
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

    /// Publishes many reports in one pipeline: one `XADD` per event (in the given order, so
    /// the leader reads them oldest first) and each history entry with its own cap. A worker
    /// running thousands of executions a second spends one round trip per batch instead of
    /// one per report.
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
        for json in &encoded {
            pipe.cmd("XADD")
                .arg(&events)
                .arg("MAXLEN")
                .arg("~")
                .arg(EVENTS_CAP)
                .arg("*")
                .arg(FIELD)
                .arg(json)
                .ignore();
        }
        let mut recorded = false;
        for (event, history) in reports {
            if let Some(entry) = history {
                self.push_history(&mut pipe, &event.namespace, &event.task_id, entry)?;
                recorded = true;
            }
        }
        if recorded {
            self.trim_executions(&mut pipe);
        }
        let mut conn = self.conn();
        self.run("report", pipe.query_async::<()>(&mut conn)).await
    }

    /// Reads up to `max` events no leader has read yet, oldest first.
    pub async fn read_events(&self, max: usize) -> Result<Vec<EventEntry>> {
        Ok(self.read_events_script("", "0-0", max).await?.1)
    }

    /// Claims up to `max` events read before and not acknowledged for at least `min_idle`
    /// (left by a leader that died before writing their effects), from `cursor` (`"0-0"` to
    /// start). Returns them with the cursor to go on from, `"0-0"` when there are no more.
    pub async fn claim_events(
        &self,
        min_idle: Duration,
        cursor: &str,
        max: usize,
    ) -> Result<(String, Vec<EventEntry>)> {
        let idle = min_idle.as_millis().to_string();
        self.read_events_script(&idle, cursor, max).await
    }

    async fn read_events_script(
        &self,
        min_idle: &str,
        cursor: &str,
        max: usize,
    ) -> Result<(String, Vec<EventEntry>)> {
        const OP: &str = "read_events";
        let keys = self.keys();
        let mut inv = self.inner.scripts.read_events.prepare_invoke();
        inv.key(keys.events())
            .key(keys.legacy_events())
            .arg(GROUP)
            .arg(CONSUMER)
            .arg(max.max(1))
            .arg(min_idle)
            .arg(cursor);
        let mut conn = self.conn();
        let reply: Vec<String> = self.run(OP, inv.invoke_async(&mut conn)).await?;
        let mut items = reply.into_iter();
        let next = items.next().ok_or_else(|| QueueError::UnexpectedReply {
            op: OP,
            detail: "empty reply".into(),
        })?;
        let mut entries = Vec::new();
        while let (Some(id), Some(json)) = (items.next(), items.next()) {
            let position = id
                .parse()
                .map_err(|detail| QueueError::UnexpectedReply { op: OP, detail })?;
            let record = if json.is_empty() {
                None
            } else {
                match serde_json::from_str(&json) {
                    Ok(e) => Some(e),
                    Err(e) => {
                        tracing::warn!(error = %e, %position, "undecodable execution event dropped");
                        None
                    }
                }
            };
            entries.push(EventEntry { position, record });
        }
        Ok((next, entries))
    }

    /// Acknowledges and deletes events whose effects are written: they are not read again.
    pub async fn ack_events(&self, positions: &[EventPosition]) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        let key = self.keys().events();
        let ids: Vec<String> = positions.iter().map(ToString::to_string).collect();
        let mut pipe = redis::pipe();
        pipe.cmd("XACK")
            .arg(&key)
            .arg(GROUP)
            .arg(&ids)
            .ignore()
            .cmd("XDEL")
            .arg(&key)
            .arg(&ids)
            .ignore();
        let mut conn = self.conn();
        self.run("ack_events", pipe.query_async::<()>(&mut conn))
            .await
    }
}
