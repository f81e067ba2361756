//! Enqueue: the one path by which messages enter a queue (a single message is a batch of
//! one), through `enqueue_many.lua` beside this file.
//!
//! Fence, dedupe, the overlap check and the push are one script, so they are atomic per
//! message. A batch is grouped by queue and shard, because a script touches one queue's slot
//! and checks one fence, and every chunk goes in one pipeline, so a batch costs one round trip
//! whatever its size.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use ax_scheduler_core::task::MAX_PRIORITY;
use ax_scheduler_core::EnqueueOutcome;
use redis::{AsyncCommands, Script};

use crate::error::{QueueError, Result};
use crate::message::{backfill_identity, Dedupe, ExecutionMessage};
use crate::millis::ms;
use crate::queue::{check_queue, Queue};
use crate::scripts::ordered;

/// `enqueue_many.lua`, after the order functions (it pushes into the queued set).
static ENQUEUE_MANY: LazyLock<Script> =
    LazyLock::new(|| ordered(include_str!("enqueue/enqueue_many.lua")));

/// Messages per script call in [`Queue::enqueue_batch`].
pub const ENQUEUE_CHUNK: usize = 100;

impl Queue {
    /// For each of `fires` of a task, the execution a backfill of it already enqueued (its
    /// dedupe marker, kept for the dedupe window), on any partition of `queue`: a backfill
    /// of the same range again runs nothing, and says which executions ran.
    pub async fn backfilled(
        &self,
        namespace: &str,
        task_id: &str,
        queue: &str,
        fires: &[ax_scheduler_core::UtcMillis],
    ) -> Result<Vec<Option<String>>> {
        check_queue(queue)?;
        let mut found: Vec<Option<String>> = vec![None; fires.len()];
        if fires.is_empty() {
            return Ok(found);
        }
        for physical in self.physical_queues(queue) {
            let keys: Vec<String> = fires
                .iter()
                .map(|t| {
                    self.inner
                        .keys
                        .dedupe(&physical, &backfill_identity(namespace, task_id, *t))
                })
                .collect();
            let mut conn = self.conn();
            // One slot: every key of a physical queue shares its hash tag.
            let ids: Vec<Option<String>> = self.run("backfilled", conn.mget(&keys)).await?;
            for (slot, id) in found.iter_mut().zip(ids) {
                if slot.is_none() {
                    *slot = id;
                }
            }
        }
        Ok(found)
    }

    /// Enqueues one message: [`Queue::enqueue_batch`] of one.
    pub async fn enqueue(&self, msg: &ExecutionMessage) -> Result<EnqueueOutcome> {
        let outcomes = self.enqueue_batch(std::slice::from_ref(msg)).await?;
        outcomes
            .first()
            .copied()
            .ok_or_else(|| QueueError::UnexpectedReply {
                op: "enqueue",
                detail: "no outcome for the message".into(),
            })
    }

    /// Enqueues many messages, each at most once per dedupe identity within the dedupe
    /// window and only if its fencing token is not older than the newest its queue's fence
    /// of its shard ([`ExecutionMessage::shard`]) has seen: one call of `enqueue_many.lua`
    /// per (queue, shard) and chunk of [`ENQUEUE_CHUNK`] messages, all in one pipeline (one
    /// round trip). Each message gets its own outcome, in order. Safe to
    /// repeat after an error: every message is deduplicated. A message for a partitioned
    /// queue goes to its partition (see `partitions.rs`), stored under that physical name.
    pub async fn enqueue_batch(&self, msgs: &[ExecutionMessage]) -> Result<Vec<EnqueueOutcome>> {
        if msgs.iter().any(|m| self.partitions(&m.queue) > 1) {
            let routed: Vec<ExecutionMessage> = msgs
                .iter()
                .map(|m| {
                    let mut routed = m.clone();
                    routed.queue = self.physical_queue(m).into();
                    routed
                })
                .collect();
            return self.enqueue_physical(&routed).await;
        }
        self.enqueue_physical(msgs).await
    }

    /// [`Queue::enqueue_batch`] of messages that name their physical queue.
    async fn enqueue_physical(&self, msgs: &[ExecutionMessage]) -> Result<Vec<EnqueueOutcome>> {
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        let mut jsons = Vec::with_capacity(msgs.len());
        for m in msgs {
            check_queue(&m.queue)?;
            jsons.push(m.to_json()?);
        }
        // Indices grouped by queue (a script touches one queue's slot) and shard (a script
        // checks one fence), then chunked.
        let mut by_fence: BTreeMap<(&str, Option<u32>), Vec<usize>> = BTreeMap::new();
        for (i, m) in msgs.iter().enumerate() {
            by_fence.entry((&*m.queue, m.shard)).or_default().push(i);
        }
        let chunks: Vec<&[usize]> = by_fence
            .values()
            .flat_map(|v| v.chunks(ENQUEUE_CHUNK))
            .collect();
        let script: &Script = &ENQUEUE_MANY;
        let invocations: Vec<redis::ScriptInvocation<'_>> = chunks
            .iter()
            .map(|chunk| self.enqueue_invocation(script, msgs, &jsons, chunk))
            .collect();
        let replies: Vec<Vec<redis::Value>> =
            crate::scripts::pipelined(self, "enqueue", script, &invocations).await?;
        let mut out = vec![EnqueueOutcome::Duplicate; msgs.len()];
        for (chunk, reply) in chunks.iter().zip(replies) {
            if reply.len() != chunk.len() + 1 {
                return Err(QueueError::UnexpectedReply {
                    op: "enqueue",
                    detail: format!("{} values for {} messages", reply.len(), chunk.len()),
                });
            }
            let newest: String = reply
                .last()
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or_default();
            for (&i, code) in chunk.iter().zip(&reply) {
                let code: i64 =
                    redis::from_redis_value(code).map_err(QueueError::redis("enqueue"))?;
                out[i] = Self::outcome(code, &newest)?;
            }
        }
        let queues: std::collections::BTreeSet<&str> = by_fence.keys().map(|(q, _)| *q).collect();
        for queue in queues {
            self.replicated(&self.inner.keys.queued(queue)).await?;
        }
        Ok(out)
    }

    /// The call of `enqueue_many.lua` for one (queue, shard)'s `chunk` of `msgs` (KEYS and
    /// ARGV as the script's header lists them).
    fn enqueue_invocation<'s>(
        &self,
        script: &'s redis::Script,
        msgs: &[ExecutionMessage],
        jsons: &[String],
        chunk: &[usize],
    ) -> redis::ScriptInvocation<'s> {
        let k = &self.inner.keys;
        let first = &msgs[chunk[0]];
        let q = &*first.queue;
        let mut inv = script.prepare_invoke();
        inv.key(k.queued(q))
            .key(k.monitor(q))
            .key(k.fence(q, first.shard))
            .key(k.order(q))
            .key(k.clock(q))
            .key(k.wake(q))
            .key(k.workers(q))
            .key(k.orphaned(q));
        let dedupes: Vec<Dedupe> = chunk.iter().map(|&i| msgs[i].dedupe()).collect();
        for (&i, dedupe) in chunk.iter().zip(&dedupes) {
            let m = &msgs[i];
            let key = match dedupe {
                Dedupe::Fire(_) => k.fired(q, &m.namespace, &m.task_id),
                Dedupe::Key(identity) => k.dedupe(q, identity),
            };
            inv.key(key).key(k.active(q, &m.namespace, &m.task_id));
        }
        inv.arg(ms(self.inner.cfg.dedupe_ttl).max(1))
            .arg(self.inner.cfg.aging_step_us());
        for (&i, dedupe) in chunk.iter().zip(&dedupes) {
            let m = &msgs[i];
            inv.arg(&jsons[i])
                .arg(m.execution_id.to_string())
                .arg(m.enqueued_at.0)
                .arg(m.fencing_token)
                .arg(m.priority.min(MAX_PRIORITY))
                .arg(m.overlap_mode())
                .arg(m.active_ttl_ms())
                .arg(match dedupe {
                    Dedupe::Fire(at) => at.0.to_string(),
                    Dedupe::Key(_) => String::new(),
                })
                .arg(m.lineage.target_worker.as_deref().unwrap_or(""));
        }
        inv
    }

    fn outcome(code: i64, newest: &str) -> Result<EnqueueOutcome> {
        match code {
            1 => Ok(EnqueueOutcome::Enqueued),
            0 => Ok(EnqueueOutcome::Duplicate),
            2 => Ok(EnqueueOutcome::Held),
            -1 => Ok(EnqueueOutcome::Fenced {
                newest: newest.parse().unwrap_or(u64::MAX),
            }),
            other => Err(QueueError::UnexpectedReply {
                op: "enqueue",
                detail: format!("status {other}"),
            }),
        }
    }

    /// The execution id a task's active marker names (overlap `forbid`/`replace`), if any.
    pub async fn active_holder(
        &self,
        queue: &str,
        namespace: &str,
        task_id: &str,
    ) -> Result<Option<String>> {
        check_queue(queue)?;
        let mut conn = self.conn();
        self.run(
            "active_holder",
            conn.get(self.inner.keys.active(queue, namespace, task_id)),
        )
        .await
    }
}
