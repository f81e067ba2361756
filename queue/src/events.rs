//! Execution events from workers to the leader: one Redis stream (per scheduling shard, when
//! the task space is sharded), read through a consumer group and acknowledged only once
//! their effects are written.
//!
//! Workers run on every replica; the leader alone writes task states and judges failure
//! rates (circuit breaker) and overlap holds, so it needs to hear when executions start and
//! end. Workers append to a stream (`XADD`), a report batch's events in as few entries as
//! keep each task's events at increasing positions (one event, or an array of up to
//! [`EVENTS_PER_ENTRY`]: one command per batch rather than per event); the leader reads
//! it as the one consumer of a consumer group, so an entry it read stays pending until it
//! acknowledges it
//! ([`Queue::ack_events`], which also deletes it), and it does so only after the task states
//! the entry changed are in etcd. A leader that dies in between leaves its entries pending,
//! and its successor claims them ([`Queue::claim_events`]) before reading new ones; the
//! stream id of each entry ([`EventPosition`]) is recorded in the task state with the
//! entry's effects, so an entry read twice is applied once. The stream is capped
//! (`MAXLEN ~`) so that a long time without a leader cannot grow it without bound; states
//! are then corrected from the execution history. Event and history writes of one report go
//! in one pipeline (the history's: the task's list and the stream across tasks, see
//! `history.rs`).
//!
//! With sharded scheduling each shard's owner reads its own stream, as a lone leader reads
//! the one stream: an event carries the shard of its execution's message
//! ([`ExecutionEventRecord::shard`]) and goes to that shard's stream. `None` is the stream
//! of an unsharded install, under the name it always had.

use std::sync::LazyLock;
use std::time::Duration;

use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::{EventPosition, ExecutionEvent, UtcMillis};
use redis::Script;
use serde::{Deserialize, Serialize};

use crate::error::{QueueError, Result};
use crate::history::HistoryEntry;
use crate::queue::Queue;

/// `read_events.lua` (it puts nothing in the queued set: no order functions).
static READ_EVENTS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("events/read_events.lua")));

/// Most entries kept waiting for a leader (approximately: the stream is trimmed in whole
/// nodes), each of one to `EVENTS_PER_ENTRY` events.
pub const EVENTS_CAP: usize = 100_000;

/// Most events one stream entry carries. A busy worker reports its ends in batches, and one
/// `XADD` per batch instead of one per event is a Redis command less per execution; the
/// bound keeps an entry small and what a leaderless stream can hold within
/// `EVENTS_CAP * EVENTS_PER_ENTRY` events.
pub(crate) const EVENTS_PER_ENTRY: usize = 16;

/// The consumer group the leader reads the event stream through.
const GROUP: &str = "leader";
/// The group's one consumer: every leader reads as the same consumer, so the entries a dead
/// leader left pending are simply this consumer's pending entries.
const CONSUMER: &str = "leader";
/// The stream field holding an entry's events: one event's JSON object, or a JSON array of
/// several.
const FIELD: &str = "e";

/// One event read from the event stream. The events of one entry share its position, and
/// an entry holds at most one event of a task, so a task's events still have increasing
/// positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventEntry {
    /// The stream id of the entry holding the event.
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
    pub execution_id: ExecutionId,
    /// The fire the execution stands for.
    pub fire_at: UtcMillis,
    /// Attempt number, 0 for the first.
    pub attempt: u32,
    /// What happened.
    pub kind: ExecutionEvent,
    /// The scheduling shard of the execution's message ([`crate::ExecutionMessage::shard`]):
    /// the event goes to that shard's stream, read by its owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| QueueError::Json {
        action: "encode",
        what,
        source,
    })
}

/// The stream entries `events` are written as, in order: per shard, runs of consecutive
/// events of at most [`EVENTS_PER_ENTRY`] with no task twice. A task's second event starts
/// a new entry, so it gets a later position than its first and a leader that applied the
/// first (and recorded its position) does not take the second for it.
fn entries<'a>(
    events: impl Iterator<Item = &'a ExecutionEventRecord>,
) -> Vec<(Option<u32>, Vec<&'a ExecutionEventRecord>)> {
    let mut done = Vec::new();
    // The entry being filled for each shard met so far (nearly always one).
    let mut open: Vec<(Option<u32>, Vec<&ExecutionEventRecord>)> = Vec::new();
    for event in events {
        let at = match open.iter().position(|(shard, _)| *shard == event.shard) {
            Some(at) => at,
            None => {
                open.push((event.shard, Vec::new()));
                open.len() - 1
            }
        };
        let filling = &mut open[at].1;
        let repeats = filling
            .iter()
            .any(|e| e.task_id == event.task_id && e.namespace == event.namespace);
        if repeats || filling.len() == EVENTS_PER_ENTRY {
            done.push((event.shard, std::mem::take(filling)));
        }
        filling.push(event);
    }
    done.extend(open);
    done
}

/// One entry's field: a lone event as the object it always was, several as an array.
fn encode_entry(events: &[&ExecutionEventRecord]) -> Result<String> {
    match events {
        [one] => encode("execution event", one),
        many => encode("execution events", &many),
    }
}

/// The events of one entry's field ([`encode_entry`]); an error when it cannot be decoded.
fn decode_entry(json: &str) -> std::result::Result<Vec<ExecutionEventRecord>, serde_json::Error> {
    if json.trim_start().starts_with('[') {
        serde_json::from_str(json)
    } else {
        serde_json::from_str(json).map(|one| vec![one])
    }
}

impl Queue {
    /// Publishes `event` for the leader and, when given, records the attempt in the task's
    /// history, in one round trip.
    pub async fn report(
        &self,
        event: &ExecutionEventRecord,
        history: Option<&HistoryEntry>,
    ) -> Result<()> {
        self.report_each(std::iter::once((event, history))).await
    }

    /// Publishes many reports in one pipeline: the events in the given order (so the leader
    /// reads them oldest first), several to a stream entry, and each history entry with its
    /// own cap. A worker
    /// running thousands of executions a second spends one round trip per batch instead of
    /// one per report.
    pub async fn report_many(
        &self,
        reports: &[(ExecutionEventRecord, Option<HistoryEntry>)],
    ) -> Result<()> {
        self.report_each(
            reports
                .iter()
                .map(|(event, history)| (event, history.as_ref())),
        )
        .await
    }

    /// [`Queue::report_many`] over borrowed events and entries.
    pub(crate) async fn report_each<'a>(
        &self,
        reports: impl Iterator<Item = (&'a ExecutionEventRecord, Option<&'a HistoryEntry>)> + Clone,
    ) -> Result<()> {
        let keys = self.keys();
        let mut pipe = redis::pipe();
        // A scheduled execution has no task (`scheduled.rs`): no leader keeps a state for it,
        // so its events would be read and dropped; its history is written all the same.
        let entries = entries(
            reports
                .clone()
                .map(|(event, _)| event)
                .filter(|e| !e.task_id.starts_with(crate::SCHEDULED_ID_MARK)),
        );
        if entries.is_empty() && reports.clone().all(|(_, history)| history.is_none()) {
            return Ok(());
        }
        // Each entry to its shard's stream. Streams of several shards are in several slots;
        // on a Redis Cluster the connection splits the pipeline by slot, each part in order,
        // so every stream still gets its entries in the order given.
        for (shard, events) in &entries {
            pipe.cmd("XADD")
                .arg(keys.events(*shard))
                .arg("MAXLEN")
                .arg("~")
                .arg(EVENTS_CAP)
                .arg("*")
                .arg(FIELD)
                .arg(encode_entry(events)?)
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

    /// Reads up to `max` events of scheduling `shard` (`None`: an unsharded install's) that
    /// no owner has read yet, oldest first.
    pub async fn read_events(&self, shard: Option<u32>, max: usize) -> Result<Vec<EventEntry>> {
        Ok(self.read_events_script(shard, "", "0-0", max).await?.1)
    }

    /// Claims up to `max` events of scheduling `shard` read before and not acknowledged for
    /// at least `min_idle` (left by an owner that died before writing their effects), from
    /// `cursor` (`"0-0"` to start). Returns them with the cursor to go on from, `"0-0"` when
    /// there are no more.
    pub async fn claim_events(
        &self,
        shard: Option<u32>,
        min_idle: Duration,
        cursor: &str,
        max: usize,
    ) -> Result<(String, Vec<EventEntry>)> {
        let idle = min_idle.as_millis().to_string();
        self.read_events_script(shard, &idle, cursor, max).await
    }

    async fn read_events_script(
        &self,
        shard: Option<u32>,
        min_idle: &str,
        cursor: &str,
        max: usize,
    ) -> Result<(String, Vec<EventEntry>)> {
        const OP: &str = "read_events";
        let keys = self.keys();
        let mut inv = READ_EVENTS.prepare_invoke();
        inv.key(keys.events(shard))
            .key(keys.legacy_events(shard))
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
            if json.is_empty() {
                entries.push(EventEntry {
                    position,
                    record: None,
                });
                continue;
            }
            match decode_entry(&json) {
                // An empty array (no writer of ours makes one) is still an entry to
                // acknowledge, or it would be claimed again for ever.
                Ok(events) if events.is_empty() => entries.push(EventEntry {
                    position,
                    record: None,
                }),
                Ok(events) => entries.extend(events.into_iter().map(|e| EventEntry {
                    position,
                    record: Some(e),
                })),
                Err(e) => {
                    tracing::warn!(error = %e, %position, "undecodable execution event dropped");
                    entries.push(EventEntry {
                        position,
                        record: None,
                    });
                }
            }
        }
        Ok((next, entries))
    }

    /// Acknowledges and deletes events of scheduling `shard` whose effects are written: they
    /// are not read again.
    pub async fn ack_events(&self, shard: Option<u32>, positions: &[EventPosition]) -> Result<()> {
        if positions.is_empty() {
            return Ok(());
        }
        let key = self.keys().events(shard);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(task: &str, shard: Option<u32>) -> ExecutionEventRecord {
        ExecutionEventRecord {
            namespace: "ns".into(),
            task_id: task.into(),
            execution_id: ExecutionId::from_u128(1),
            fire_at: UtcMillis(1),
            attempt: 0,
            kind: ExecutionEvent::Started { at: UtcMillis(2) },
            shard,
        }
    }

    fn tasks(entries: &[(Option<u32>, Vec<&ExecutionEventRecord>)]) -> Vec<(Option<u32>, String)> {
        entries
            .iter()
            .map(|(shard, events)| {
                let names: Vec<&str> = events.iter().map(|e| &*e.task_id).collect();
                (*shard, names.join(","))
            })
            .collect()
    }

    #[test]
    fn a_batch_goes_in_few_entries_each_holding_a_task_once_and_one_shard() {
        let events = [
            ended("a", None),
            ended("b", None),
            ended("x", Some(1)),
            ended("a", None),
            ended("c", None),
            ended("y", Some(1)),
        ];
        let got = entries(events.iter());
        assert_eq!(
            tasks(&got),
            [
                (None, "a,b".to_owned()),
                (None, "a,c".to_owned()),
                (Some(1), "x,y".to_owned()),
            ]
        );
        // The same task in another namespace is another task.
        let mut other = ended("a", None);
        other.namespace = "other".into();
        let both = [ended("a", None), other];
        assert_eq!(entries(both.iter()).len(), 1);
    }

    #[test]
    fn an_entry_holds_at_most_its_bound_of_events() {
        let events: Vec<_> = (0..EVENTS_PER_ENTRY * 2 + 1)
            .map(|i| ended(&format!("t{i}"), None))
            .collect();
        let sizes: Vec<usize> = entries(events.iter())
            .iter()
            .map(|(_, e)| e.len())
            .collect();
        assert_eq!(sizes, [EVENTS_PER_ENTRY, EVENTS_PER_ENTRY, 1]);
        assert!(entries(std::iter::empty()).is_empty());
    }

    #[test]
    fn an_entry_decodes_to_its_events_whether_one_or_many() {
        let (a, b) = (ended("a", None), ended("b", Some(2)));
        let one = encode_entry(&[&a]).unwrap();
        assert!(
            one.starts_with('{'),
            "a lone event is written as before: {one}"
        );
        assert_eq!(decode_entry(&one).unwrap(), std::slice::from_ref(&a));
        let many = encode_entry(&[&a, &b]).unwrap();
        assert_eq!(decode_entry(&many).unwrap(), [a, b]);
        assert!(decode_entry("[{").is_err());
    }

    #[test]
    fn the_scheduling_shard_is_left_out_when_there_is_none() {
        let mut record = ExecutionEventRecord {
            namespace: "ns".into(),
            task_id: "t".into(),
            execution_id: ExecutionId::from_u128(7),
            fire_at: UtcMillis(1),
            attempt: 0,
            kind: ExecutionEvent::Started { at: UtcMillis(2) },
            shard: None,
        };
        // The bytes an unsharded install always wrote, and they decode as unsharded.
        let text = encode("execution event", &record).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"namespace":"ns","task_id":"t","execution_id":"00000000-0000-0000-0000-000000000007","#,
                r#""fire_at":1,"attempt":0,"kind":{"type":"started","at":2}}"#
            )
        );
        let back: ExecutionEventRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
        record.shard = Some(3);
        let text = encode("execution event", &record).unwrap();
        assert!(text.ends_with(r#","shard":3}"#), "{text}");
        let back: ExecutionEventRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
    }
}
