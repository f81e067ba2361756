//! Taking messages: a blocking move from the ready list into the worker's processing list.
//!
//! BLMOVE (not BRPOP) keeps every taken message in Redis until it is settled, so a worker that
//! dies holding one loses nothing: the reaper gives its processing list back. Each consumer
//! owns a dedicated connection, because a blocking command would hold up every other command
//! multiplexed on a shared socket; that connection's response timeout is set to the block
//! timeout plus the command timeout, deliberately, so a long block is not cut short (the
//! client's multiplexed default would fail it) while a dead socket is still noticed.
//!
//! A take first moves up to `max` messages without blocking (one script call), and blocks
//! only when the list is empty; after a blocking take returns one message, it tops the batch
//! up the same way. Under load that is one round trip per batch rather than per message.
//!
//! A paused queue (an operator's flag, checked inside `take.lua`) gives nothing; since a
//! `BLMOVE` cannot check the flag, the top-up after it does, and gives the message back when
//! the queue was paused while the take blocked.

use std::time::Duration;

use ax_scheduler_core::UtcMillis;
use redis::aio::ConnectionManager;
use redis::Direction;

use crate::error::{QueueError, Result};
use crate::message::ExecutionMessage;
use crate::queue::{check_queue, manager_config, Delivery, Queue};

/// How often a consumer of a paused queue looks again: a resume takes effect within it.
pub const PAUSED_POLL: Duration = Duration::from_millis(250);

/// Takes messages from one queue for one worker.
pub struct Consumer {
    queue: Queue,
    conn: ConnectionManager,
    name: String,
    worker_id: String,
    block_timeout: Duration,
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
    /// reaper; keep it alive with [`Queue::heartbeat`].
    pub async fn consumer(
        &self,
        queue: &str,
        worker_id: &str,
        block_timeout: Duration,
        now: UtcMillis,
    ) -> Result<Consumer> {
        check_queue(queue)?;
        check_queue(worker_id)?;
        let cfg = &self.inner.cfg;
        let response_timeout = block_timeout + cfg.command_timeout;
        let mcfg = manager_config(cfg, response_timeout);
        let limit = cfg.connect_timeout.saturating_mul(2);
        let conn = match tokio::time::timeout(
            limit,
            ConnectionManager::new_with_config(self.inner.client.clone(), mcfg),
        )
        .await
        {
            Ok(r) => r.map_err(QueueError::redis("consumer connect"))?,
            Err(_) => {
                return Err(QueueError::Timeout {
                    op: "consumer connect",
                    after: limit,
                })
            }
        };
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
    /// message a blocking take got just after the pause is given back, so a pause holds from
    /// the next take on.
    pub async fn take(&mut self, max: usize) -> Result<Vec<Delivery>> {
        let max = max.max(1);
        let (paused, mut raws) = self.take_now(max).await?;
        if paused {
            tokio::time::sleep(PAUSED_POLL.min(self.block_timeout)).await;
            return Ok(Vec::new());
        }
        if raws.is_empty() {
            if let Some(first) = self.block_one().await? {
                // The first message is already in the processing list: a failed top-up
                // must not drop it. A top-up of none still says whether the queue was
                // paused while this take blocked.
                match self.take_now(max - 1).await {
                    Ok((true, _)) => {
                        self.queue
                            .release_raw(&self.name, &self.worker_id, &first)
                            .await?;
                        return Ok(Vec::new());
                    }
                    Ok((false, more)) => {
                        raws.push(first);
                        raws.extend(more);
                    }
                    Err(e) => {
                        raws.push(first);
                        tracing::warn!(queue = %self.name, error = %e, "topping up a take failed; going on with one message")
                    }
                }
            }
        }
        let mut out = Vec::with_capacity(raws.len());
        for raw in raws {
            match ExecutionMessage::from_json(&raw) {
                Ok(message) => out.push(Delivery {
                    queue: self.name.clone(),
                    worker_id: self.worker_id.clone(),
                    raw,
                    message,
                }),
                Err(e) => {
                    // The decoded ones are held already: a failure here must not drop them.
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

    /// Whether the queue is paused, and what was taken (nothing when it is).
    async fn take_now(&mut self, max: usize) -> Result<(bool, Vec<String>)> {
        let k = self.queue.keys();
        let mut inv = self.queue.inner.scripts.take.prepare_invoke();
        inv.key(k.ready(&self.name))
            .key(k.processing(&self.name, &self.worker_id))
            .key(k.paused(&self.name))
            .arg(max);
        let mut conn = self.conn.clone();
        let (paused, raws): (i64, Vec<String>) =
            self.queue.run("take", inv.invoke_async(&mut conn)).await?;
        Ok((paused == 1, raws))
    }

    async fn block_one(&mut self) -> Result<Option<String>> {
        let k = self.queue.keys();
        let ready = k.ready(&self.name);
        let processing = k.processing(&self.name, &self.worker_id);
        let after = self.block_timeout + self.queue.config().command_timeout;
        let secs = self.block_timeout.as_secs_f64().max(0.01);
        let mut cmd = redis::cmd("BLMOVE");
        cmd.arg(ready)
            .arg(processing)
            .arg(Direction::Right)
            .arg(Direction::Left)
            .arg(secs);
        let fut = cmd.query_async::<Option<String>>(&mut self.conn);
        match tokio::time::timeout(after, fut).await {
            Ok(r) => r.map_err(QueueError::redis("take (BLMOVE)")),
            Err(_) => Err(QueueError::Timeout {
                op: "take (BLMOVE)",
                after,
            }),
        }
    }

    async fn dead_letter_garbage(&self, raw: String, err: &QueueError) -> Result<()> {
        let now = ax_scheduler_core::UtcMillis::now();
        self.queue
            .dead_letter_undecodable(&self.name, &self.worker_id, &raw, &err.to_string(), now)
            .await
            .map(|_| ())
    }
}
