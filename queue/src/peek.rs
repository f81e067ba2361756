//! What a queue holds now, for an operator to look at: the first waiting executions in the
//! order workers take them, the pending retries by due time, and what each worker runs.
//!
//! Read-only and bounded: each list is cut at `limit` per physical queue and the totals come
//! from the sets' sizes, so a backlog of a million costs what one of a hundred does. One
//! pipeline per physical queue, all of whose keys share the queue's hash tag. A message that
//! does not decode is left out here (the reconciliation deals with it), and executions gated
//! on their concurrency key are not listed (they wait outside the queued set).

use redis::AsyncCommands;

use crate::error::Result;
use crate::message::ExecutionMessage;
use crate::queue::{check_queue, Queue};
use ax_scheduler_core::UtcMillis;

/// A queue's contents as [`Queue::peek`] reads them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueuePeek {
    /// The first waiting executions, in take order (per physical queue).
    pub waiting: Vec<ExecutionMessage>,
    /// Executions waiting in all.
    pub waiting_total: u64,
    /// The first pending retries, with when each is due, soonest first.
    pub retrying: Vec<(UtcMillis, ExecutionMessage)>,
    /// Pending retries in all.
    pub retrying_total: u64,
    /// Executions taken by a worker and not settled, with the worker's id.
    pub running: Vec<(String, ExecutionMessage)>,
}

fn decoded(raw: &[String]) -> impl Iterator<Item = ExecutionMessage> + '_ {
    raw.iter()
        .filter_map(|m| ExecutionMessage::from_json(m).ok())
}

impl Queue {
    /// Up to `limit` executions of each kind in `queue` (per partition of a partitioned
    /// queue), and the totals of waiting and retrying ones.
    pub async fn peek(&self, queue: &str, limit: usize) -> Result<QueuePeek> {
        check_queue(queue)?;
        let stop = isize::try_from(limit.max(1) - 1).unwrap_or(isize::MAX);
        let k = self.keys();
        let mut conn = self.conn();
        let mut out = QueuePeek::default();
        for q in self.physical_queues(queue) {
            let workers: Vec<String> = self
                .run("peek (workers)", conn.zrange(k.workers(&q), 0, -1))
                .await?;
            let mut pipe = redis::pipe();
            pipe.zrange(k.queued(&q), 0, stop)
                .zcard(k.queued(&q))
                .zrange_withscores(k.delayed(&q), 0, stop)
                .zcard(k.delayed(&q));
            for w in &workers {
                pipe.lrange(k.processing(&q, w), 0, stop);
            }
            type Head = (Vec<String>, u64, Vec<(String, i64)>, u64);
            let mut reply: Vec<redis::Value> =
                self.run("peek", pipe.query_async(&mut conn)).await?;
            let running: Vec<redis::Value> = reply.split_off(4.min(reply.len()));
            let (waiting, waiting_total, retrying, retrying_total): Head =
                redis::from_redis_value(&redis::Value::Array(reply)).map_err(|e| {
                    crate::error::QueueError::UnexpectedReply {
                        op: "peek",
                        detail: e.to_string(),
                    }
                })?;
            out.waiting.extend(decoded(&waiting));
            out.waiting_total += waiting_total;
            out.retrying_total += retrying_total;
            out.retrying.extend(retrying.iter().filter_map(|(m, due)| {
                ExecutionMessage::from_json(m)
                    .ok()
                    .map(|m| (UtcMillis(*due), m))
            }));
            for (w, list) in workers.iter().zip(running) {
                let raw: Vec<String> = redis::from_redis_value(&list).unwrap_or_default();
                out.running.extend(decoded(&raw).map(|m| (w.clone(), m)));
            }
        }
        out.retrying.sort_by_key(|(due, _)| *due);
        Ok(out)
    }
}
