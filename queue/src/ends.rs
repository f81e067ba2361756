//! The end log: an attempt's end recorded in the same step that settles its message.
//!
//! A worker that settles a message (ack, retry later, dead letter) and then reports the
//! attempt's end in a second call can die in between: the execution is settled, so nothing
//! runs it again, and its end never reaches a leader, so its task stays `RUNNING` for good.
//! Settling therefore takes the attempt's [`EndRecord`] (the event the leader reads and the
//! history entry) and the settle script appends it to the queue's end log, a stream in the
//! queue's own slot (`{prefix:q:NAME}:ends`): one script, so a process death leaves either an
//! unsettled message (redelivered) or a settled one whose end is in the log.
//!
//! From the log a relay writes each record to the event stream and the history
//! ([`Queue::relay_ends`]) and then deletes it. The worker that settled relays at once; for
//! a worker that died first, one worker of the queue at a time (a sweeper key with an
//! expiry) relays the records older than [`END_RELAY_AFTER`] ([`Queue::sweep_ends`]), run by
//! the maintenance loop. A record is relayed at least once: a relay that dies between the
//! writes and the delete relays it again later, and the leader applies an attempt's end
//! once (it remembers the last end applied per task). The log is never trimmed by count,
//! since a trimmed record is a lost end.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use serde::{Deserialize, Serialize};

use crate::error::{QueueError, Result};
use crate::events::ExecutionEventRecord;
use crate::history::HistoryEntry;
use crate::queue::Queue;

/// `sweep_ends.lua` (it puts nothing in the queued set: no order functions).
static SWEEP_ENDS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("ends/sweep_ends.lua")));

/// How old a record in the end log must be before the sweeper relays it: well past the
/// time the worker that settled it takes to relay it itself, so a live worker's records are
/// relayed once.
pub const END_RELAY_AFTER: Duration = Duration::from_secs(5);

/// How long a sweeper keeps the queue's sweeper key without renewing it; another worker
/// takes over the sweeping after that.
const SWEEPER_TTL: Duration = Duration::from_secs(3);

/// An attempt's end as recorded when its message is settled: the event the leader reads
/// and, when the worker keeps the history, the attempt's history entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndRecord {
    /// The end event for the leader.
    pub event: ExecutionEventRecord,
    /// The attempt's history entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryEntry>,
}

impl EndRecord {
    pub(crate) fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|source| QueueError::Json {
            action: "encode",
            what: "end record",
            source,
        })
    }
}

/// How settling a message with an end record went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The message was no longer taken (the reaper gave it back): nothing was settled and
    /// nothing recorded.
    NotTaken,
    /// Settled; the end record given, if any, is in the end log under this id.
    Done(Option<String>),
}

impl Settled {
    /// From a settle script's reply: `0` not taken, `1` settled without a record, else the
    /// record's id.
    pub(crate) fn from_reply(reply: &str) -> Self {
        match reply {
            "0" | "" => Settled::NotTaken,
            "1" => Settled::Done(None),
            id => Settled::Done(Some(id.to_owned())),
        }
    }

    /// Whether the message was still taken.
    pub fn was_taken(&self) -> bool {
        matches!(self, Settled::Done(_))
    }
}

/// An end to relay: its record, and where it sits in an end log, if it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEnd {
    /// The queue and end log id of the record; `None` for an end not in a log (settled
    /// without one), which is only written.
    pub logged: Option<(String, String)>,
    /// The record.
    pub record: EndRecord,
}

impl Queue {
    /// Writes each end's event and history entry (in the given order), then deletes the
    /// logged ones from their end logs. A failure before the delete leaves the records in
    /// the log, where the sweeper finds them.
    pub async fn relay_ends(&self, ends: &[PendingEnd]) -> Result<()> {
        if ends.is_empty() {
            return Ok(());
        }
        self.report_each(
            ends.iter()
                .map(|e| (&e.record.event, e.record.history.as_ref())),
        )
        .await?;
        // One `XDEL` per end log for the whole batch.
        let mut logs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (queue, id) in ends.iter().filter_map(|e| e.logged.as_ref()) {
            logs.entry(queue.as_str()).or_default().push(id.as_str());
        }
        if logs.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (queue, ids) in logs {
            pipe.cmd("XDEL")
                .arg(self.keys().ends(queue))
                .arg(ids)
                .ignore();
        }
        let mut conn = self.conn();
        self.run("relay_ends", pipe.query_async::<()>(&mut conn))
            .await
    }

    /// Takes the sweep of `queue`'s end log for `sweeper` (unless another sweeper holds it)
    /// and returns up to `max` records older than `older_than` by Redis's clock, oldest first.
    /// A record that cannot be decoded is logged and deleted.
    pub async fn sweep_ends(
        &self,
        queue: &str,
        sweeper: &str,
        older_than: Duration,
        max: usize,
    ) -> Result<Vec<PendingEnd>> {
        const OP: &str = "sweep_ends";
        let k = self.keys();
        let mut inv = SWEEP_ENDS.prepare_invoke();
        inv.key(k.ends(queue))
            .key(k.ends_sweeper(queue))
            .arg(sweeper)
            .arg(millis(SWEEPER_TTL))
            .arg(millis(older_than))
            .arg(max.max(1));
        let mut conn = self.conn();
        let reply: Vec<String> = self.run(OP, inv.invoke_async(&mut conn)).await?;
        let mut out = Vec::new();
        let mut undecodable = Vec::new();
        let mut items = reply.into_iter();
        while let (Some(id), Some(json)) = (items.next(), items.next()) {
            match serde_json::from_str::<EndRecord>(&json) {
                Ok(record) => out.push(PendingEnd {
                    logged: Some((queue.to_owned(), id)),
                    record,
                }),
                Err(e) => {
                    tracing::error!(queue, entry = %id, error = %e, "undecodable end record deleted");
                    undecodable.push(id);
                }
            }
        }
        if !undecodable.is_empty() {
            let mut conn = self.conn();
            let mut del = redis::cmd("XDEL");
            del.arg(k.ends(queue)).arg(&undecodable);
            self.run(OP, del.query_async::<()>(&mut conn)).await?;
        }
        Ok(out)
    }

    /// How many records `queue`'s end log holds (ends not relayed yet).
    pub async fn end_log_len(&self, queue: &str) -> Result<u64> {
        let mut conn = self.conn();
        let mut len = redis::cmd("XLEN");
        len.arg(self.keys().ends(queue));
        self.run("end_log_len", len.query_async::<u64>(&mut conn))
            .await
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settle_reply_says_whether_it_was_taken_and_where_its_record_went() {
        assert_eq!(Settled::from_reply("0"), Settled::NotTaken);
        assert_eq!(Settled::from_reply("1"), Settled::Done(None));
        assert_eq!(
            Settled::from_reply("1700000000000-0"),
            Settled::Done(Some("1700000000000-0".into()))
        );
        assert!(!Settled::NotTaken.was_taken());
        assert!(Settled::Done(None).was_taken());
    }
}
