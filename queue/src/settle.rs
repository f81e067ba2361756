//! Settling what a worker holds: ack (done) and release (given back undone), through
//! `ack.lua` and `release.lua` beside this file. A failed attempt's retry is in `retry.rs`,
//! its dead letter in `dlq.rs`.
//!
//! Each settle removes the stored text from the worker's processing list by value, so a
//! message the reaper gave back meanwhile is reported as no longer taken instead of being
//! settled twice; acks are grouped per (queue, worker) so that one script call settles many.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use ax_scheduler_core::task::DEFAULT_PRIORITY;
use redis::Script;

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
        let mut groups: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
        for (i, d) in ds.iter().enumerate() {
            groups
                .entry((d.queue.as_str(), d.worker_id.as_str()))
                .or_default()
                .push(i);
        }
        let mut taken = vec![false; ds.len()];
        for ((queue, worker), group) in groups {
            let mut conn = self.conn();
            let mut inv = ACK.prepare_invoke();
            inv.key(self.inner.keys.processing(queue, worker))
                .key(self.inner.keys.monitor(queue))
                .key(self.inner.keys.order(queue))
                .key(self.inner.keys.queued(queue))
                .key(self.inner.keys.wake(queue));
            for &i in &group {
                let m = &ds[i].message;
                inv.key(self.inner.keys.active(queue, &m.namespace, &m.task_id));
            }
            for &i in &group {
                inv.arg(&ds[i].raw)
                    .arg(ds[i].message.execution_id.to_string())
                    .arg(concurrency_key(&ds[i].message));
            }
            let flags: Vec<i64> = self.run("ack", inv.invoke_async(&mut conn)).await?;
            for (&i, flag) in group.iter().zip(flags) {
                taken[i] = flag == 1;
            }
            self.replicated(&self.inner.keys.queued(queue)).await?;
        }
        Ok(taken)
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
