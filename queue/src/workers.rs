//! The workers of a queue as Redis sees them: heartbeats, the live set, a clean stop, and the
//! reaper that gives back what a dead worker had taken (`deregister.lua`, `take_orphans.lua` and
//! `reap.lua` beside this file).
//!
//! A worker counts as alive while its heartbeat key lives; the workers set keeps each one's
//! last beat as its score, so the reaper finds its suspects with one range read and runs its
//! script only for those. Messages addressed to a worker that is gone become orphans that a
//! live worker ends failed, since no other worker may run them.

use std::sync::LazyLock;
use std::time::Duration;

use ax_scheduler_core::task::DEFAULT_PRIORITY;
use ax_scheduler_core::{ExecutionId, UtcMillis};
use redis::{AsyncCommands, Script};

use crate::error::{QueueError, Result};
use crate::message::ExecutionMessage;
use crate::millis::ms;
use crate::queue::{check_queue, Delivery, Queue};
use crate::scripts::ordered;

/// `deregister.lua` (it puts nothing in the queued set: no order functions).
static DEREGISTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("workers/deregister.lua")));

/// `take_orphans.lua` (it puts nothing in the queued set: no order functions).
static TAKE_ORPHANS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("workers/take_orphans.lua")));

/// `reap.lua`, after the order functions (it puts messages back in their place).
static REAP: LazyLock<Script> = LazyLock::new(|| ordered(include_str!("workers/reap.lua")));

impl Queue {
    /// Records that `worker_id` is alive and serving `queue`: its heartbeat key lives for
    /// `ttl`, and the workers set remembers `now` as its last beat.
    pub async fn heartbeat(
        &self,
        queue: &str,
        worker_id: &str,
        ttl: Duration,
        now: UtcMillis,
    ) -> Result<()> {
        self.beat(queue, worker_id, ttl, now, false).await
    }

    /// The heartbeat of a worker that is stopping: alive (the reaper leaves what it holds, a
    /// second process under its id is refused) but taking nothing new, so it is not among
    /// the [`Queue::live_workers`] a broadcast fire is addressed to. The key holds the beat
    /// negated.
    pub async fn heartbeat_stopping(
        &self,
        queue: &str,
        worker_id: &str,
        ttl: Duration,
        now: UtcMillis,
    ) -> Result<()> {
        self.beat(queue, worker_id, ttl, now, true).await
    }

    async fn beat(
        &self,
        queue: &str,
        worker_id: &str,
        ttl: Duration,
        now: UtcMillis,
        stopping: bool,
    ) -> Result<()> {
        check_queue(queue)?;
        check_queue(worker_id)?;
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(k.heartbeat(queue, worker_id))
            .arg(if stopping { -now.0 } else { now.0 })
            .arg("PX")
            .arg(ms(ttl).max(1))
            .ignore()
            .zadd(k.workers(queue), worker_id, now.0)
            .ignore();
        self.run("heartbeat", pipe.query_async::<()>(&mut conn))
            .await
    }

    /// Every message in `worker_id`'s processing list of `queue`, as stored.
    pub async fn processing_entries(&self, queue: &str, worker_id: &str) -> Result<Vec<String>> {
        check_queue(queue)?;
        let mut conn = self.conn();
        self.run(
            "processing_entries",
            conn.lrange(self.inner.keys.processing(queue, worker_id), 0, -1),
        )
        .await
    }

    /// The last heartbeat (ms since the epoch) of `worker_id` on `queue`, while its key lives.
    pub async fn last_heartbeat(&self, queue: &str, worker_id: &str) -> Result<Option<i64>> {
        check_queue(queue)?;
        let mut conn = self.conn();
        self.run(
            "last_heartbeat",
            conn.get(self.inner.keys.heartbeat(queue, worker_id)),
        )
        .await
    }

    /// The workers serving `queue` now: those in its workers set whose heartbeat key lives
    /// and is not a stopping worker's (a worker of any language registers the same way, see
    /// `docs/worker-protocol.md`).
    /// A partitioned queue's are those live on any partition.
    pub async fn live_workers(&self, queue: &str) -> Result<Vec<String>> {
        check_queue(queue)?;
        let mut all = Vec::new();
        for q in self.physical_queues(queue) {
            for id in self.live_workers_of(&q).await? {
                if !all.contains(&id) {
                    all.push(id);
                }
            }
        }
        Ok(all)
    }

    async fn live_workers_of(&self, queue: &str) -> Result<Vec<String>> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let ids: Vec<String> = self
            .run("live_workers", conn.zrange(k.workers(queue), 0, -1))
            .await?;
        if ids.is_empty() {
            return Ok(ids);
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.get(k.heartbeat(queue, id));
        }
        let beats: Vec<Option<String>> = self
            .run("live_workers", pipe.query_async(&mut conn))
            .await?;
        Ok(ids
            .into_iter()
            .zip(beats)
            .filter_map(|(id, beat)| {
                // A stopping worker's beat is negative; any other value is a live one's.
                let stopping = beat.as_deref().is_some_and(|b| b.starts_with('-'));
                (beat.is_some() && !stopping).then_some(id)
            })
            .collect())
    }

    /// Fixes the workers broadcast fire `fanout_id` of `queue` is addressed to: `workers`
    /// when it is the first to, else those given first (by another leader, before a
    /// failover), for as long as the fire's executions are deduplicated. Returns the list
    /// that holds.
    pub async fn fix_fanout_workers(
        &self,
        queue: &str,
        fanout_id: ExecutionId,
        workers: &[String],
    ) -> Result<Vec<String>> {
        check_queue(queue)?;
        // One place per fire whatever the partitions: the first partition's slot.
        let home = self.physical_queues(queue).swap_remove(0);
        let key = self.inner.keys.fanout_workers(&home, fanout_id);
        let json = serde_json::to_string(workers).map_err(|source| QueueError::Json {
            action: "encode",
            what: "broadcast workers",
            source,
        })?;
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(&key)
            .arg(&json)
            .arg("NX")
            .arg("PX")
            .arg(ms(self.inner.cfg.dedupe_ttl).max(1))
            .ignore()
            .get(&key);
        let (kept,): (Option<String>,) = self
            .run("fix_fanout_workers", pipe.query_async(&mut conn))
            .await?;
        match kept {
            Some(text) => serde_json::from_str(&text).map_err(|source| QueueError::Json {
                action: "decode",
                what: "broadcast workers",
                source,
            }),
            // Expired in between (a dedupe TTL shorter than a round trip): ours.
            None => Ok(workers.to_vec()),
        }
    }

    /// Removes a cleanly stopping worker that holds nothing; messages still addressed to it
    /// become orphans (see [`Queue::take_orphans`]). `false` when it still holds messages
    /// (the reaper will give them back after the visibility timeout).
    pub async fn deregister(&self, queue: &str, worker_id: &str) -> Result<bool> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut inv = DEREGISTER.prepare_invoke();
        inv.key(k.processing(queue, worker_id))
            .key(k.workers(queue))
            .key(k.heartbeat(queue, worker_id))
            .key(k.addressed(queue, worker_id))
            .key(k.orphaned(queue))
            .key(k.worker_wake(queue, worker_id))
            .arg(worker_id);
        let n: i64 = self.run("deregister", inv.invoke_async(&mut conn)).await?;
        Ok(n == 1)
    }

    /// Takes up to `max` orphans of `queue` (messages addressed to a worker that is gone)
    /// into `worker_id`'s processing list, for it to end each failed with
    /// [`Queue::dead_letter`]: none may run elsewhere, and each must end for its fire to.
    pub async fn take_orphans(
        &self,
        queue: &str,
        worker_id: &str,
        max: usize,
    ) -> Result<Vec<Delivery>> {
        check_queue(queue)?;
        check_queue(worker_id)?;
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut inv = TAKE_ORPHANS.prepare_invoke();
        inv.key(k.orphaned(queue))
            .key(k.processing(queue, worker_id))
            .arg(max.max(1));
        let raws: Vec<String> = self
            .run("take_orphans", inv.invoke_async(&mut conn))
            .await?;
        let mut out = Vec::with_capacity(raws.len());
        for raw in raws {
            match ExecutionMessage::from_json(&raw) {
                Ok(message) => out.push(Delivery {
                    queue: queue.to_owned(),
                    worker_id: worker_id.to_owned(),
                    raw,
                    message,
                    limited_wait: None,
                }),
                Err(e) => {
                    self.dead_letter_undecodable(
                        queue,
                        worker_id,
                        &raw,
                        &e.to_string(),
                        self.config().clock.now(),
                    )
                    .await?;
                }
            }
        }
        Ok(out)
    }

    /// Gives back the messages of workers of `queue` whose heartbeat key is gone and whose
    /// last beat is older than `visibility_timeout`; messages addressed to such a worker
    /// become orphans (see [`Queue::take_orphans`]). Returns how many messages moved.
    pub async fn reap(
        &self,
        queue: &str,
        now: UtcMillis,
        visibility_timeout: Duration,
    ) -> Result<usize> {
        check_queue(queue)?;
        let k = &self.inner.keys;
        let cutoff = now.sub(visibility_timeout);
        let mut conn = self.conn();
        let suspects: Vec<String> = self
            .run(
                "reap",
                conn.zrangebyscore(k.workers(queue), "-inf", cutoff.0),
            )
            .await?;
        let mut given_back = 0usize;
        for worker in suspects {
            let inv = self.reap_invocation(queue, &worker, cutoff.0, false);
            let n: i64 = self.run("reap", inv.invoke_async(&mut conn)).await?;
            if n > 0 {
                tracing::warn!(queue, worker = %worker, messages = n, "gave back messages of a dead worker");
                given_back += usize::try_from(n).unwrap_or(0);
            }
        }
        Ok(given_back)
    }

    /// The call of `reap.lua` for `worker` of `queue`, dead if last seen at `cutoff` or before
    /// (`restart`: the worker is starting again under the same id).
    fn reap_invocation(
        &self,
        queue: &str,
        worker: &str,
        cutoff: i64,
        restart: bool,
    ) -> redis::ScriptInvocation<'_> {
        let k = &self.inner.keys;
        let mut inv = REAP.prepare_invoke();
        inv.key(k.queued(queue))
            .key(k.workers(queue))
            .key(k.processing(queue, worker))
            .key(k.heartbeat(queue, worker))
            .key(k.order(queue))
            .key(k.clock(queue))
            .key(k.wake(queue))
            .key(k.addressed(queue, worker))
            .key(k.orphaned(queue))
            .key(k.worker_wake(queue, worker))
            .arg(worker)
            .arg(cutoff)
            .arg(self.inner.cfg.aging_step_us())
            .arg(DEFAULT_PRIORITY)
            .arg(if restart { "1" } else { "0" });
        inv
    }

    /// Gives back everything an earlier process under `worker_id` left in its processing
    /// list, at once (a restart under a stable id, such as a StatefulSet pod name, would
    /// otherwise keep its own heartbeat alive and the reaper away from those messages).
    /// Call it before the new process takes from `queue`. Returns the messages given back.
    pub async fn recover_worker(&self, queue: &str, worker_id: &str) -> Result<usize> {
        check_queue(queue)?;
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let _: () = self
            .run("recover_worker", conn.del(k.heartbeat(queue, worker_id)))
            .await?;
        let inv = self.reap_invocation(queue, worker_id, i64::MAX, true);
        let n: i64 = self
            .run("recover_worker", inv.invoke_async(&mut conn))
            .await?;
        if n > 0 {
            tracing::warn!(queue, worker = %worker_id, messages = n, "gave back what this worker id had taken before a restart");
        }
        Ok(usize::try_from(n).unwrap_or(0))
    }
}
