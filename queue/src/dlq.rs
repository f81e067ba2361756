//! The dead-letter queue: executions that will not be retried, with every attempt's error.
//!
//! Entries live in a hash (entry id -> JSON) with a sorted set beside it scored by the time
//! they were dead-lettered: the set gives paging in order and a cheap size (ZCARD), the hash
//! gives requeue and inspection by id. The entry id is the dead execution's id. A requeue is a
//! new execution (new id, attempt 0), moved in one script so an entry is requeued once even
//! when two operators click at the same time.

use std::sync::LazyLock;

use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::UtcMillis;
use redis::{AsyncCommands, Script};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ends::{EndRecord, Settled};
use crate::error::{QueueError, Result};
use crate::message::{AttemptError, ExecutionMessage};
use crate::queue::{check_queue, Delivery, Queue};
use crate::scripts::ordered;

/// `dead_letter.lua`, after the order functions (a freed slot can let a gated message in).
static DEAD_LETTER: LazyLock<Script> =
    LazyLock::new(|| ordered(include_str!("dlq/dead_letter.lua")));

/// `dlq_requeue.lua`, after the order functions (it pushes into the queued set).
static DLQ_REQUEUE: LazyLock<Script> =
    LazyLock::new(|| ordered(include_str!("dlq/dlq_requeue.lua")));

/// `dlq_trim.lua` (it puts nothing in the queued set: no order functions).
static DLQ_TRIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("dlq/dlq_trim.lua")));

/// One dead-lettered execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DlqEntry {
    /// Entry id (the execution id of the dead execution; a fresh one for a message that
    /// could not be decoded).
    pub id: ExecutionId,
    /// Queue it came from.
    pub queue: String,
    /// Task namespace (empty when the message could not be decoded).
    pub namespace: String,
    /// Task id (empty when the message could not be decoded).
    pub task_id: String,
    /// Why it was dead-lettered (the last error, or e.g. an unknown handler).
    pub reason: String,
    /// When it was dead-lettered.
    pub dead_lettered_at: UtcMillis,
    /// Every attempt's error and time, oldest first, the last one included.
    pub errors: Vec<AttemptError>,
    /// The message of the last attempt, payload included; `None` when it could not be decoded.
    pub message: Option<ExecutionMessage>,
    /// The stored text, kept only when it could not be decoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

impl DlqEntry {
    /// The entry for a message whose last attempt failed with `reason` at `now`.
    pub fn from_message(msg: &ExecutionMessage, reason: impl Into<String>, now: UtcMillis) -> Self {
        let reason = reason.into();
        let mut errors = msg.previous_errors.clone();
        errors.push(AttemptError {
            attempt: msg.attempt,
            at: now,
            error: reason.clone(),
        });
        DlqEntry {
            id: msg.execution_id,
            queue: msg.queue.to_string(),
            namespace: msg.namespace.to_string(),
            task_id: msg.task_id.to_string(),
            reason,
            dead_lettered_at: now,
            errors,
            message: Some(msg.clone()),
            raw: None,
        }
    }

    pub(crate) fn undecodable(
        id: ExecutionId,
        queue: &str,
        raw: &str,
        reason: String,
        now: UtcMillis,
    ) -> Self {
        DlqEntry {
            id,
            queue: queue.to_string(),
            namespace: String::new(),
            task_id: String::new(),
            reason: reason.clone(),
            dead_lettered_at: now,
            errors: vec![AttemptError {
                attempt: 0,
                at: now,
                error: reason,
            }],
            message: None,
            raw: Some(raw.to_string()),
        }
    }

    fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|source| QueueError::Json {
            action: "encode",
            what: "dead-letter entry",
            source,
        })
    }

    fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|source| QueueError::Json {
            action: "decode",
            what: "dead-letter entry",
            source,
        })
    }
}

/// Most dead-letter entries one `Queue::trim_dlq` call removes.
const DLQ_TRIM_BATCH: usize = 500;

impl Queue {
    /// Moves a taken message to the dead-letter queue with `reason` as its last error.
    /// `false` when it was no longer taken.
    pub async fn dead_letter(&self, d: &Delivery, reason: &str, now: UtcMillis) -> Result<bool> {
        Ok(self
            .dead_letter_recorded(d, reason, now, None)
            .await?
            .was_taken())
    }

    /// [`Queue::dead_letter`], appending the attempt's end `record` to the queue's end log in
    /// the same script (see `ends.rs`).
    pub async fn dead_letter_recorded(
        &self,
        d: &Delivery,
        reason: &str,
        now: UtcMillis,
        record: Option<&EndRecord>,
    ) -> Result<Settled> {
        let entry = DlqEntry::from_message(&d.message, reason, now);
        self.dead_letter_raw(&d.queue, &d.worker_id, &d.raw, &entry, now, record)
            .await
    }

    /// Moves a message that cannot be decoded out of `worker_id`'s processing list into the
    /// dead-letter queue, kept as stored with `error`. `false` when it was no longer there.
    pub async fn dead_letter_undecodable(
        &self,
        queue: &str,
        worker_id: &str,
        raw: &str,
        error: &str,
        now: UtcMillis,
    ) -> Result<bool> {
        let id = ExecutionId::from(Uuid::new_v4());
        tracing::error!(queue, entry = %id, error, "undecodable message moved to the dead-letter queue");
        let entry = DlqEntry::undecodable(id, queue, raw, error.to_owned(), now);
        Ok(self
            .dead_letter_raw(queue, worker_id, raw, &entry, now, None)
            .await?
            .was_taken())
    }

    pub(crate) async fn dead_letter_raw(
        &self,
        queue: &str,
        worker_id: &str,
        raw: &str,
        entry: &DlqEntry,
        now: UtcMillis,
        record: Option<&EndRecord>,
    ) -> Result<Settled> {
        // The task's active marker is cleared if it names this execution. Without a
        // decodable message there is no task: a key that is never set, in the queue's slot.
        let (active, execution) = match &entry.message {
            Some(m) => (
                self.keys().active(queue, &m.namespace, &m.task_id),
                m.execution_id.to_string(),
            ),
            None => (self.keys().active(queue, "-", "-"), String::new()),
        };
        let k = self.keys();
        let json = entry.to_json()?;
        let mut conn = self.conn();
        let mut inv = DEAD_LETTER.prepare_invoke();
        inv.key(k.processing(queue, worker_id))
            .key(k.monitor(queue))
            .key(k.dlq(queue))
            .key(k.dlq_entries(queue))
            .key(active)
            .key(k.order(queue))
            .key(k.queued(queue))
            .key(k.wake(queue))
            .key(k.ends(queue))
            .arg(raw)
            .arg(entry.id.to_string())
            .arg(json)
            .arg(now.0)
            .arg(execution)
            .arg(
                entry
                    .message
                    .as_ref()
                    .map_or("", crate::queue::concurrency_key),
            )
            .arg(match record {
                Some(r) => r.to_json()?,
                None => String::new(),
            });
        let reply: String = self.run("dead_letter", inv.invoke_async(&mut conn)).await?;
        self.replicated(&k.queued(queue)).await?;
        Ok(Settled::from_reply(&reply))
    }

    /// Removes `queue`'s dead-letter entries older than the retention and the oldest beyond
    /// the cap ([`crate::QueueConfig::dlq_retention`], [`crate::QueueConfig::dlq_max_entries`]),
    /// at most 500 per call. Returns how many went.
    /// A partitioned queue's partitions are trimmed each by these limits.
    pub async fn trim_dlq(&self, queue: &str, now: UtcMillis) -> Result<usize> {
        check_queue(queue)?;
        let mut total = 0;
        for q in self.physical_queues(queue) {
            total += self.trim_dlq_of(&q, now).await?;
        }
        Ok(total)
    }

    async fn trim_dlq_of(&self, queue: &str, now: UtcMillis) -> Result<usize> {
        let cfg = self.config();
        let retention = i64::try_from(cfg.dlq_retention.as_millis()).unwrap_or(i64::MAX);
        let k = self.keys();
        let mut inv = DLQ_TRIM.prepare_invoke();
        inv.key(k.dlq(queue))
            .key(k.dlq_entries(queue))
            .arg(now.0.saturating_sub(retention))
            .arg(cfg.dlq_max_entries)
            .arg(DLQ_TRIM_BATCH);
        let mut conn = self.conn();
        let n: usize = self.run("trim_dlq", inv.invoke_async(&mut conn)).await?;
        if n > 0 {
            tracing::info!(
                queue,
                removed = n,
                "dead-letter entries past the retention or the cap removed"
            );
        }
        Ok(n)
    }

    /// Number of dead-letter entries of `queue` (ZCARD; summed over a partitioned queue's
    /// partitions).
    pub async fn dlq_size(&self, queue: &str) -> Result<u64> {
        check_queue(queue)?;
        let mut conn = self.conn();
        let mut total = 0;
        for q in self.physical_queues(queue) {
            let n: u64 = self
                .run("dlq_size", conn.zcard(self.keys().dlq(&q)))
                .await?;
            total += n;
        }
        Ok(total)
    }

    /// A page of dead-letter entries, oldest first. A partitioned queue's page merges its
    /// partitions' by the time they were dead-lettered (each partition read up to the
    /// page's end, so deep pages cost more).
    pub async fn dlq_list(
        &self,
        queue: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<DlqEntry>> {
        check_queue(queue)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let parts = self.physical_queues(queue);
        if parts.len() == 1 {
            return self.dlq_page(queue, offset, limit).await;
        }
        let end = offset.saturating_add(limit);
        let mut all = Vec::new();
        for q in &parts {
            all.extend(self.dlq_page(q, 0, end).await?);
        }
        all.sort_by_key(|e| (e.dead_lettered_at, e.id));
        Ok(all.into_iter().skip(offset).take(limit).collect())
    }

    async fn dlq_page(&self, queue: &str, offset: usize, limit: usize) -> Result<Vec<DlqEntry>> {
        let k = self.keys();
        let mut conn = self.conn();
        let start = isize::try_from(offset).unwrap_or(isize::MAX);
        let stop = isize::try_from(offset.saturating_add(limit - 1)).unwrap_or(isize::MAX);
        let ids: Vec<String> = self
            .run("dlq_list", conn.zrange(k.dlq(queue), start, stop))
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let jsons: Vec<Option<String>> = self
            .run(
                "dlq_list",
                redis::cmd("HMGET")
                    .arg(k.dlq_entries(queue))
                    .arg(&ids)
                    .query_async(&mut conn),
            )
            .await?;
        jsons
            .into_iter()
            .flatten()
            .map(|j| DlqEntry::from_json(&j))
            .collect()
    }

    /// One dead-letter entry by id.
    /// Looked for in every partition of a partitioned queue.
    pub async fn dlq_get(&self, queue: &str, entry_id: ExecutionId) -> Result<Option<DlqEntry>> {
        check_queue(queue)?;
        Ok(self
            .dlq_find(queue, entry_id)
            .await?
            .map(|(_, entry)| entry))
    }

    /// The entry and the physical queue that holds it.
    async fn dlq_find(
        &self,
        queue: &str,
        entry_id: ExecutionId,
    ) -> Result<Option<(String, DlqEntry)>> {
        let mut conn = self.conn();
        for q in self.physical_queues(queue) {
            let json: Option<String> = self
                .run(
                    "dlq_get",
                    conn.hget(self.keys().dlq_entries(&q), entry_id.to_string()),
                )
                .await?;
            if let Some(j) = json {
                return Ok(Some((q, DlqEntry::from_json(&j)?)));
            }
        }
        Ok(None)
    }

    /// Enqueues an entry again as a new execution (new id, attempt 0) and removes it from
    /// the dead-letter queue. Returns the new execution id; `None` when the entry is gone or
    /// holds no decodable message.
    pub async fn dlq_requeue(
        &self,
        queue: &str,
        entry_id: ExecutionId,
        now: UtcMillis,
    ) -> Result<Option<ExecutionId>> {
        self.dlq_requeue_as(queue, entry_id, now, |m| m).await
    }

    /// [`dlq_requeue`](Self::dlq_requeue) with the new execution's message (a fresh copy of
    /// the stored one) passed through `rebuild`: a caller that re-read the task puts its
    /// current target and settings in, so a requeue does not replay what the task no longer
    /// says, and names who asked.
    pub async fn dlq_requeue_as(
        &self,
        queue: &str,
        entry_id: ExecutionId,
        now: UtcMillis,
        rebuild: impl FnOnce(ExecutionMessage) -> ExecutionMessage,
    ) -> Result<Option<ExecutionId>> {
        check_queue(queue)?;
        // The entry goes back to the partition that holds it (its message names it).
        let Some((queue, entry)) = self.dlq_find(queue, entry_id).await? else {
            return Ok(None);
        };
        let queue = queue.as_str();
        let Some(msg) = entry.message else {
            return Ok(None);
        };
        let fresh = rebuild(msg.fresh_copy(now));
        let json = fresh.to_json()?;
        let k = self.keys();
        let mut conn = self.conn();
        let mut inv = DLQ_REQUEUE.prepare_invoke();
        inv.key(k.dlq(queue))
            .key(k.dlq_entries(queue))
            .key(k.queued(queue))
            .key(k.monitor(queue))
            .key(k.order(queue))
            .key(k.clock(queue))
            .key(k.wake(queue))
            .key(k.requeued_as(queue, entry_id))
            .arg(entry_id.to_string())
            .arg(json)
            .arg(fresh.execution_id.to_string())
            .arg(now.0)
            .arg(fresh.priority.min(ax_scheduler_core::task::MAX_PRIORITY))
            .arg(self.config().aging_step_us())
            .arg(
                u64::try_from(self.config().execution_history_retention.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            );
        let n: i64 = self.run("dlq_requeue", inv.invoke_async(&mut conn)).await?;
        Ok((n == 1).then_some(fresh.execution_id))
    }

    /// Requeues every entry `queue` holds when the call starts; returns how many were
    /// requeued. The ids are read first: an execution that fails for good again while this
    /// runs comes back as a new entry, and paging the live set would meet it again and again.
    /// Every partition of a partitioned queue.
    pub async fn dlq_requeue_all(&self, queue: &str, now: UtcMillis) -> Result<usize> {
        check_queue(queue)?;
        let mut requeued = 0;
        for q in self.physical_queues(queue) {
            requeued += self.dlq_requeue_all_of(&q, now).await?;
        }
        Ok(requeued)
    }

    async fn dlq_requeue_all_of(&self, queue: &str, now: UtcMillis) -> Result<usize> {
        let mut conn = self.conn();
        let ids: Vec<String> = self
            .run(
                "dlq_requeue_all",
                redis::AsyncCommands::zrange(&mut conn, self.keys().dlq(queue), 0, -1),
            )
            .await?;
        let mut requeued = 0;
        for id in ids {
            // An id that is not a UUID cannot have been written by ax; it stays for a person.
            let Ok(id) = id.parse::<ExecutionId>() else {
                continue;
            };
            if self.dlq_requeue(queue, id, now).await?.is_some() {
                requeued += 1;
            }
        }
        Ok(requeued)
    }

    /// The execution the dead letter `entry_id` of `queue` (any partition) was requeued as,
    /// while the execution history keeps it.
    pub async fn requeued_as(
        &self,
        queue: &str,
        entry_id: ExecutionId,
    ) -> Result<Option<ExecutionId>> {
        check_queue(queue)?;
        for q in self.physical_queues(queue) {
            let mut conn = self.conn();
            let id: Option<String> = self
                .run(
                    "requeued_as",
                    redis::AsyncCommands::get(&mut conn, self.keys().requeued_as(&q, entry_id)),
                )
                .await?;
            if let Some(id) = id.and_then(|s| s.parse().ok()) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// The ids of `queue`'s dead letters (every partition), up to `limit` of each, oldest
    /// first: cheap enough to search for an id by its start or end.
    pub async fn dlq_ids(&self, queue: &str, limit: usize) -> Result<Vec<ExecutionId>> {
        check_queue(queue)?;
        let stop = isize::try_from(limit)
            .unwrap_or(isize::MAX)
            .saturating_sub(1);
        let mut out = Vec::new();
        for q in self.physical_queues(queue) {
            if limit == 0 {
                break;
            }
            let mut conn = self.conn();
            let ids: Vec<String> = self
                .run(
                    "dlq_ids",
                    redis::AsyncCommands::zrange(&mut conn, self.keys().dlq(&q), 0, stop),
                )
                .await?;
            out.extend(ids.iter().filter_map(|id| id.parse::<ExecutionId>().ok()));
        }
        Ok(out)
    }

    /// Deletes every dead-letter entry of `queue` (of each partition of a partitioned one);
    /// returns how many there were.
    pub async fn dlq_purge(&self, queue: &str) -> Result<u64> {
        check_queue(queue)?;
        let k = self.keys();
        let mut conn = self.conn();
        let mut total = 0;
        for q in self.physical_queues(queue) {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .zcard(k.dlq(&q))
                .del(k.dlq(&q))
                .ignore()
                .del(k.dlq_entries(&q))
                .ignore();
            let (n,): (u64,) = self.run("dlq_purge", pipe.query_async(&mut conn)).await?;
            total += n;
        }
        Ok(total)
    }
}
