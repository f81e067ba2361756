//! Delayed retries: a failed attempt waits in the queue's delayed set until it is due, then
//! the maintenance loop promotes it to the queued set (`retry_later.lua` and
//! `promote_due.lua` beside this file).
//!
//! The move into the delayed set reads the operator's kill mark in the same script, so a
//! killed execution never gets another attempt, and appends the attempt's end record to the
//! queue's end log (`ends.rs`) for whichever of the two ends applies.

use std::sync::LazyLock;

use ax_scheduler_core::task::DEFAULT_PRIORITY;
use ax_scheduler_core::UtcMillis;
use redis::Script;

use crate::ends::EndRecord;
use crate::error::Result;
use crate::message::ExecutionMessage;
use crate::queue::{check_queue, concurrency_key, Delivery, Queue};
use crate::scripts::ordered;

/// `retry_later.lua`, after the order functions (a freed slot can let a gated message in).
static RETRY_LATER: LazyLock<Script> =
    LazyLock::new(|| ordered(include_str!("retry/retry_later.lua")));

/// `promote_due.lua`, after the order functions (it pushes into the queued set).
static PROMOTE_DUE: LazyLock<Script> =
    LazyLock::new(|| ordered(include_str!("retry/promote_due.lua")));

/// How [`Queue::retry_later`] settled a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetrySettle {
    /// The next attempt waits in the delayed set.
    Scheduled,
    /// An operator killed the execution: it ended here, no retry scheduled.
    Killed,
    /// The message was no longer taken (the reaper gave it back).
    NotTaken,
}

impl Queue {
    /// Moves a failed message to the delayed set as `next` (its next attempt), due at `due`,
    /// unless an operator killed the execution meanwhile (see [`RetrySettle`]).
    pub async fn retry_later(
        &self,
        d: &Delivery,
        next: &ExecutionMessage,
        due: UtcMillis,
    ) -> Result<RetrySettle> {
        Ok(self.retry_later_recorded(d, next, due, None).await?.0)
    }

    /// [`Queue::retry_later`], appending the attempt's end record to the queue's end log in
    /// the same script (see `ends.rs`): `records.0` when the retry is scheduled, `records.1`
    /// when a kill order ends the execution instead. Returns how it settled and the id of the
    /// record appended.
    pub async fn retry_later_recorded(
        &self,
        d: &Delivery,
        next: &ExecutionMessage,
        due: UtcMillis,
        records: Option<(&EndRecord, &EndRecord)>,
    ) -> Result<(RetrySettle, Option<String>)> {
        let json = next.to_json()?;
        let (scheduled, killed) = match records {
            Some((s, k)) => (s.to_json()?, k.to_json()?),
            None => (String::new(), String::new()),
        };
        let k = &self.inner.keys;
        let m = &d.message;
        let id = m.execution_id.to_string();
        let mut conn = self.conn();
        let mut inv = RETRY_LATER.prepare_invoke();
        inv.key(k.processing(&d.queue, &d.worker_id))
            .key(k.monitor(&d.queue))
            .key(k.delayed(&d.queue))
            .key(k.kill(&d.queue, m.execution_id))
            .key(k.active(&d.queue, &m.namespace, &m.task_id))
            .key(k.order(&d.queue))
            .key(k.queued(&d.queue))
            .key(k.wake(&d.queue))
            .key(k.ends(&d.queue))
            .arg(&d.raw)
            .arg(&id)
            .arg(json)
            .arg(due.0)
            .arg(concurrency_key(m))
            .arg(scheduled)
            .arg(killed);
        let (n, logged): (i64, String) =
            self.run("retry_later", inv.invoke_async(&mut conn)).await?;
        self.replicated(&k.queued(&d.queue)).await?;
        let settle = match n {
            1 => RetrySettle::Scheduled,
            2 => RetrySettle::Killed,
            _ => RetrySettle::NotTaken,
        };
        Ok((settle, (!logged.is_empty()).then_some(logged)))
    }

    /// Moves up to `batch` delayed messages due at `now` to the queued set; returns how many.
    pub async fn promote_due(&self, queue: &str, now: UtcMillis, batch: usize) -> Result<usize> {
        check_queue(queue)?;
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut inv = PROMOTE_DUE.prepare_invoke();
        inv.key(k.delayed(queue))
            .key(k.queued(queue))
            .key(k.monitor(queue))
            .key(k.order(queue))
            .key(k.clock(queue))
            .key(k.wake(queue))
            .key(k.workers(queue))
            .key(k.orphaned(queue))
            .arg(now.0)
            .arg(batch.max(1))
            .arg(self.inner.cfg.aging_step_us())
            .arg(DEFAULT_PRIORITY);
        self.run("promote_due", inv.invoke_async(&mut conn)).await
    }
}
