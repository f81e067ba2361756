//! Settling what a worker holds: ack (done) and release (given back undone), through
//! `ack.lua` and `release.lua` beside this file. An ack may carry the attempt's end record,
//! which the same script appends to the queue's end log (`ends.rs`). A failed attempt's retry is in `retry.rs`,
//! its dead letter in `dlq.rs`.
//!
//! Each settle removes the stored text from the worker's processing list by value, so a
//! message the reaper gave back meanwhile is reported as no longer taken instead of being
//! settled twice; acks are grouped per (queue, worker) so that one script call settles many.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use ax_scheduler_core::task::DEFAULT_PRIORITY;
use redis::Script;

use crate::ends::{EndRecord, Settled};
use crate::error::Result;
use crate::queue::{concurrency_key, Delivery, Queue};
use crate::scripts::ordered;

/// `ack.lua`, after the order functions (a freed slot can let a gated message in).
static ACK: LazyLock<Script> = LazyLock::new(|| ordered(include_str!("settle/ack.lua")));

/// `release.lua`, after the order functions (it puts the message back in its place).
static RELEASE: LazyLock<Script> = LazyLock::new(|| ordered(include_str!("settle/release.lua")));

impl Queue {
    /// Settles a finished message. `false` when it was no longer taken (the reaper gave it
    /// back because this worker looked dead).
    pub async fn ack(&self, d: &Delivery) -> Result<bool> {
        Ok(self
            .ack_many(std::slice::from_ref(d))
            .await?
            .first()
            .copied()
            .unwrap_or(false))
    }

    /// Settles many finished messages, one script call per (queue, worker). Returns, per
    /// delivery in order, whether it was still taken.
    pub async fn ack_many(&self, ds: &[Delivery]) -> Result<Vec<bool>> {
        let items: Vec<(&Delivery, Option<&EndRecord>)> = ds.iter().map(|d| (d, None)).collect();
        Ok(self
            .ack_recorded(&items)
            .await?
            .iter()
            .map(Settled::was_taken)
            .collect())
    }

    /// Settles many finished messages, each with its attempt's end record if given (appended
    /// to the queue's end log in the same script, see `ends.rs`), one script call per
    /// (queue, worker). Returns, per delivery in order, how it was settled.
    pub async fn ack_recorded(
        &self,
        items: &[(&Delivery, Option<&EndRecord>)],
    ) -> Result<Vec<Settled>> {
        let mut groups: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
        for (i, (d, _)) in items.iter().enumerate() {
            groups
                .entry((d.queue.as_str(), d.worker_id.as_str()))
                .or_default()
                .push(i);
        }
        let mut settled = vec![Settled::NotTaken; items.len()];
        for ((queue, worker), group) in groups {
            let k = &self.inner.keys;
            let mut conn = self.conn();
            let mut inv = ACK.prepare_invoke();
            inv.key(k.processing(queue, worker))
                .key(k.monitor(queue))
                .key(k.order(queue))
                .key(k.queued(queue))
                .key(k.wake(queue))
                .key(k.ends(queue));
            for &i in &group {
                let m = &items[i].0.message;
                inv.key(k.active(queue, &m.namespace, &m.task_id));
            }
            for &i in &group {
                let (d, record) = items[i];
                let record = match record {
                    Some(r) => r.to_json()?,
                    None => String::new(),
                };
                inv.arg(&d.raw)
                    .arg(d.message.execution_id.to_string())
                    .arg(concurrency_key(&d.message))
                    .arg(record);
            }
            let replies: Vec<String> = self.run("ack", inv.invoke_async(&mut conn)).await?;
            for (&i, reply) in group.iter().zip(replies) {
                settled[i] = Settled::from_reply(&reply);
            }
            self.replicated(&k.queued(queue)).await?;
        }
        Ok(settled)
    }

    /// Gives a taken message back to its place in the queue (for work a stopping worker did
    /// not finish): taken before anything enqueued after it. `false` when it was no longer
    /// taken.
    pub async fn release(&self, d: &Delivery) -> Result<bool> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut inv = RELEASE.prepare_invoke();
        inv.key(k.processing(&d.queue, &d.worker_id))
            .key(k.queued(&d.queue))
            .key(k.order(&d.queue))
            .key(k.clock(&d.queue))
            .key(k.wake(&d.queue))
            .key(k.addressed(&d.queue, &d.worker_id))
            .key(k.orphaned(&d.queue))
            .key(k.worker_wake(&d.queue, &d.worker_id))
            .arg(&d.raw)
            .arg(self.inner.cfg.aging_step_us())
            .arg(DEFAULT_PRIORITY)
            // The slots it took go with it.
            .arg(d.message.execution_id.to_string())
            .arg(concurrency_key(&d.message))
            .arg(&d.worker_id);
        let n: i64 = self.run("release", inv.invoke_async(&mut conn)).await?;
        Ok(n == 1)
    }
}
