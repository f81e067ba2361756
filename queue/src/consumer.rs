//! Taking messages: a move from the queued set into the worker's processing list.
//!
//! The move (`take.lua`: `ZPOPMIN` of up to `max` messages, then `LPUSH` into the processing
//! list, in one script) keeps every taken message in Redis until it is settled, so a worker
//! that dies holding one loses nothing: the reaper gives its processing list back. Messages
//! come out in the queue's order, priority with aging (see `order.lua`): a sorted set, so a
//! take costs O(log n) per message whatever the backlog.
//!
//! A sorted set has no blocking atomic move (`BZPOPMIN` hands the message to the client,
//! which could die before holding it), so an idle consumer blocks on the queue's wake list
//! instead: every push into the queued set adds tokens there, `BLPOP` returns when one comes
//! (or the block timeout runs out), and the consumer then takes with the script as always. A
//! token taken when someone else got the messages costs one empty take; the script drops the
//! tokens whenever it leaves the set empty, so they do not pile up.
//!
//! Each consumer owns a dedicated connection for the blocking wait, because a blocking
//! command would hold up every other command multiplexed on a shared socket; that
//! connection's response timeout is set to the block timeout plus the command timeout,
//! deliberately, so a long block is not cut short while a dead socket is still noticed.
//!
//! A paused queue (an operator's flag, checked inside `take.lua`) gives nothing.
//!
//! Messages addressed to this worker (a broadcast fire's pieces) wait in a list of its own
//! and are taken first; their wake tokens go to a wake list of its own, which the blocking
//! wait watches beside the queue's (both in the queue's slot).

use std::sync::LazyLock;
use std::time::Duration;

use ax_scheduler_core::task::DEFAULT_PRIORITY;
use ax_scheduler_core::UtcMillis;
use redis::Script;

use crate::config::QueueLimits;
use crate::conn::Connection;
use crate::error::{QueueError, Result};
use crate::message::ExecutionMessage;
use crate::queue::{check_queue, Delivery, Queue};
use crate::scripts::ordered;

/// `take.lua`, after the order functions (it takes in the queue order).
static TAKE: LazyLock<Script> = LazyLock::new(|| ordered(include_str!("consumer/take.lua")));

/// How often a consumer of a paused queue looks again: a resume takes effect within it.
pub const PAUSED_POLL: Duration = Duration::from_millis(250);

/// What one call of `take.lua` answered.
struct Taken {
    /// The queue is paused (nothing was taken).
    paused: bool,
    /// The messages, each with how long it waited gated on its concurrency key.
    raws: Vec<(String, Option<Duration>)>,
    /// 0; -1 when the queue is at `max_running`; else ms until its rate allows a take.
    hold: i64,
}

/// Takes messages from one queue for one worker.
pub struct Consumer {
    queue: Queue,
    conn: Connection,
    name: String,
    worker_id: String,
    block_timeout: Duration,
    limits: QueueLimits,
    /// What the last take found, for [`Consumer::wait_for_work`].
    last: Found,
}

/// What the last take found when it took nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    /// Messages, or no take yet.
    Work,
    /// The queue is paused.
    Paused,
    /// The queue's rate allows a take again after this long.
    RateHold(Duration),
    /// Nothing to take (empty, or at its `max_running`).
    Nothing,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.name)
            .field("worker_id", &self.worker_id)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// A consumer of `queue` for `worker_id`, on its own connection. It registers the worker
    /// in the queue's workers set at `now` so its processing list is never unknown to the
    /// reaper; keep it alive with [`Queue::heartbeat`]. A partitioned queue is consumed by
    /// its partitions' names ([`Queue::physical_queues`]), each with a consumer of its own.
    pub async fn consumer(
        &self,
        queue: &str,
        worker_id: &str,
        block_timeout: Duration,
        now: UtcMillis,
    ) -> Result<Consumer> {
        check_queue(queue)?;
        check_queue(worker_id)?;
        if self.partitions(queue) > 1 {
            // Its messages wait in its partitions: a consumer of the name would wait for ever.
            return Err(QueueError::InvalidConfig(format!(
                "queue `{queue}` has partitions: consume each of its physical queues \
                 (Queue::physical_queues)"
            )));
        }
        let cfg = &self.inner.cfg;
        let response_timeout = block_timeout + cfg.command_timeout;
        let conn = self
            .dedicated_connection(response_timeout, "consumer connect")
            .await?;
        let mut reg = self.conn();
        let workers = self.inner.keys.workers(queue);
        self.run(
            "register worker",
            redis::cmd("ZADD")
                .arg(&workers)
                .arg("NX")
                .arg(now.0)
                .arg(worker_id)
                .query_async::<()>(&mut reg),
        )
        .await?;
        Ok(Consumer {
            queue: self.clone(),
            conn,
            name: queue.to_string(),
            worker_id: worker_id.to_string(),
            block_timeout,
            limits: cfg.limits_of(self.logical_queue(queue)),
            last: Found::Work,
        })
    }
}

impl Consumer {
    /// Queue name.
    pub fn queue_name(&self) -> &str {
        &self.name
    }

    /// Worker id.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Takes up to `max` messages, waiting up to the block timeout for the first one. An empty
    /// result means the wait ran out. Messages that cannot be decoded go to the dead-letter
    /// queue instead of being returned.
    ///
    /// A paused queue gives nothing: the take waits [`PAUSED_POLL`] and returns empty. A
    /// queue at its rate waits until the rate allows a take (at most the block timeout);
    /// one at its `max_running` waits for a wake, as an empty one does.
    pub async fn take(&mut self, max: usize) -> Result<Vec<Delivery>> {
        let first = self.take_ready(max).await?;
        if !first.is_empty() {
            return Ok(first);
        }
        let paused = self.last == Found::Paused;
        if !self.wait_for_work().await? || paused {
            return Ok(Vec::new());
        }
        let again = self.take_ready(max).await?;
        Ok(again)
    }

    /// Takes up to `max` messages without waiting (one call of `take.lua`): empty when there
    /// is nothing to take now. [`Consumer::wait_for_work`] then waits as [`Consumer::take`]
    /// would. A caller that reserves room for what it takes (a worker pool serving several
    /// queues) reserves it for this call only, not for the wait.
    pub async fn take_ready(&mut self, max: usize) -> Result<Vec<Delivery>> {
        let taken = self.take_now(max.max(1)).await?;
        self.last = if taken.paused {
            Found::Paused
        } else if !taken.raws.is_empty() {
            Found::Work
        } else {
            match u64::try_from(taken.hold) {
                Ok(ms) if ms > 0 => Found::RateHold(Duration::from_millis(ms)),
                _ => Found::Nothing,
            }
        };
        let mut out = Vec::with_capacity(taken.raws.len());
        for (raw, limited_wait) in taken.raws {
            match ExecutionMessage::from_json(&raw) {
                Ok(message) => out.push(Delivery {
                    queue: self.name.clone(),
                    worker_id: self.worker_id.clone(),
                    raw,
                    message,
                    limited_wait,
                }),
                Err(e) => {
                    // The decoded ones are taken already: a failure here must not drop them.
                    // What stays in the processing list is found by the worker's
                    // reconciliation.
                    if let Err(dl) = self.dead_letter_garbage(raw, &e).await {
                        tracing::warn!(queue = %self.name, error = %dl, "cannot dead-letter an undecodable message; it stays for the reconciliation");
                    }
                }
            }
        }
        Ok(out)
    }

    /// Waits for something to take after a [`Consumer::take_ready`] that took nothing: a
    /// wake (at most the block timeout), the queue's rate, or [`PAUSED_POLL`] on a paused
    /// queue. `false` when a wake wait ran out; returns at once after a take that found work.
    pub async fn wait_for_work(&mut self) -> Result<bool> {
        match self.last {
            Found::Work => Ok(true),
            Found::Paused => {
                tokio::time::sleep(PAUSED_POLL.min(self.block_timeout)).await;
                Ok(true)
            }
            Found::RateHold(after) => {
                tokio::time::sleep(after.min(self.block_timeout)).await;
                Ok(true)
            }
            Found::Nothing => self.wait_for_wake().await,
        }
    }

    /// One call of `take.lua`.
    async fn take_now(&mut self, max: usize) -> Result<Taken> {
        let k = self.queue.keys();
        let mut inv = TAKE.prepare_invoke();
        inv.key(k.queued(&self.name))
            .key(k.processing(&self.name, &self.worker_id))
            .key(k.paused(&self.name))
            .key(k.legacy_ready(&self.name))
            .key(k.order(&self.name))
            .key(k.clock(&self.name))
            .key(k.wake(&self.name))
            .key(k.legacy_moved(&self.name))
            .key(k.addressed(&self.name, &self.worker_id))
            .key(k.worker_wake(&self.name, &self.worker_id))
            .arg(max)
            .arg(self.queue.config().aging_step_us())
            .arg(DEFAULT_PRIORITY)
            .arg(self.limits.max_running)
            .arg(self.limits.rate);
        let mut conn = self.conn.clone();
        let (paused, raws, hold, waits): (i64, Vec<String>, i64, Vec<i64>) =
            self.queue.run("take", inv.invoke_async(&mut conn)).await?;
        let taken = raws
            .into_iter()
            .zip(waits.into_iter().chain(std::iter::repeat(-1)))
            .map(|(raw, wait)| {
                let wait = u64::try_from(wait).ok().map(Duration::from_millis);
                (raw, wait)
            })
            .collect();
        Ok(Taken {
            paused: paused == 1,
            raws: taken,
            hold,
        })
    }

    /// Waits up to the block timeout for a wake token, the queue's or this worker's own
    /// (a message addressed to it); `true` when one came.
    async fn wait_for_wake(&mut self) -> Result<bool> {
        let wake = self.queue.keys().wake(&self.name);
        let own = self.queue.keys().worker_wake(&self.name, &self.worker_id);
        let after = self.block_timeout + self.queue.config().command_timeout;
        let secs = self.block_timeout.as_secs_f64().max(0.01);
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(wake).arg(own).arg(secs);
        let fut = cmd.query_async::<Option<(String, String)>>(&mut self.conn);
        match tokio::time::timeout(after, fut).await {
            Ok(r) => r
                .map(|token| token.is_some())
                .map_err(QueueError::redis("take (BLPOP)")),
            Err(_) => Err(QueueError::Timeout {
                op: "take (BLPOP)",
                after,
            }),
        }
    }

    async fn dead_letter_garbage(&self, raw: String, err: &QueueError) -> Result<()> {
        let now = self.queue.config().clock.now();
        self.queue
            .dead_letter_undecodable(&self.name, &self.worker_id, &raw, &err.to_string(), now)
            .await
            .map(|_| ())
    }
}
