//! The queue client: enqueue, settle taken messages, maintenance and monitoring reads.
//!
//! One `ConnectionManager` (a multiplexed connection that reconnects by itself) carries every
//! non-blocking command; concurrent callers share it and their commands are pipelined on the
//! socket, which is what makes many in-flight acks cheap. Its response timeout is set
//! deliberately to [`QueueConfig::command_timeout`], and every call is also bounded by a
//! Tokio timeout so a reconnect storm cannot stall a caller. Blocking takes use a separate
//! connection per consumer (see `consumer.rs`): a blocking command would hold up everything
//! else multiplexed on the same socket. All of them come from one `redis::Client`, made once
//! with the TLS settings of [`QueueConfig::tls`], so a consumer's connection can never differ
//! from the shared one in what it trusts or presents.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::task::{DEFAULT_PRIORITY, MAX_PRIORITY};
use ax_scheduler_core::{EnqueueOutcome, UtcMillis};
use redis::{AsyncCommands, RedisResult};

use crate::config::QueueConfig;
use crate::conn::{Client, Connection};
use crate::error::{QueueError, Result};
use crate::keys::{validate_name, Keys};
use crate::message::{Dedupe, ExecutionMessage};
use crate::scripts::Scripts;

/// A message a consumer took: settle it with [`Queue::ack`], [`Queue::retry_later`],
/// [`Queue::dead_letter`] or [`Queue::release`].
#[derive(Clone, Debug)]
pub struct Delivery {
    /// Queue it came from.
    pub queue: String,
    /// Worker whose processing list holds it.
    pub worker_id: String,
    /// The exact stored text (settling removes it by value).
    pub raw: String,
    /// The decoded message.
    pub message: ExecutionMessage,
    /// How long it waited parked because its concurrency key was at its limit (`None`:
    /// it was not held back by its key).
    pub limited_wait: Option<Duration>,
}

/// A queue's fence after a leader raised it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The newest token the queue has seen.
    pub newest: u64,
    /// The token the leader raised it with.
    pub token: u64,
    /// The etcd cluster that owns the fence.
    pub owner: String,
    /// The leader's etcd cluster.
    pub cluster: String,
}

impl Fence {
    /// The fence belongs to another etcd cluster (two installations share a Redis key
    /// prefix, or etcd was rebuilt): its tokens are not comparable with the leader's.
    pub fn is_foreign(&self) -> bool {
        self.owner != self.cluster
    }

    /// The fence is above the leader's own token although the leader holds its key: a
    /// token from before an etcd restore or rebuild (revisions started again lower). Every
    /// enqueue of this leader would be refused.
    pub fn is_ahead(&self) -> bool {
        self.newest > self.token
    }
}

/// How [`Queue::retry_later`] settled a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetrySettle {
    /// The next attempt waits in the delayed set.
    Scheduled,
    /// An operator killed the execution: it ended here, no retry scheduled.
    Killed,
    /// The message was no longer held (the reaper gave it back).
    NotHeld,
}

/// Cheap monitoring figures of one queue, read in one round trip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages waiting to be taken.
    pub ready: u64,
    /// Messages enqueued and not yet settled (ready plus taken).
    pub unsettled: u64,
    /// Messages waiting for a retry.
    pub delayed: u64,
    /// Dead-letter entries.
    pub dead: u64,
    /// Age of the oldest unsettled message; `None` when there is none.
    pub oldest_age: Option<Duration>,
    /// Time since the newest heartbeat of a worker that takes from the queue; `None` when no
    /// worker is registered for it.
    pub last_worker_beat: Option<Duration>,
    /// An operator paused the queue: workers take nothing from it.
    pub paused: bool,
}

/// How long messages may wait in a queue without any worker's heartbeat before the queue
/// counts as unserved (see [`QueueStats::is_unserved`]).
pub const UNSERVED_AFTER: Duration = Duration::from_secs(30);

impl QueueStats {
    /// The figures of two partitions of one queue as one: counts add up, the oldest age is
    /// the older, the last beat the newer; paused when either is.
    pub fn merge(&self, other: &QueueStats) -> QueueStats {
        QueueStats {
            ready: self.ready + other.ready,
            unsettled: self.unsettled + other.unsettled,
            delayed: self.delayed + other.delayed,
            dead: self.dead + other.dead,
            oldest_age: self.oldest_age.max(other.oldest_age),
            last_worker_beat: match (self.last_worker_beat, other.last_worker_beat) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            paused: self.paused || other.paused,
        }
    }

    /// Whether messages wait that no worker will take: some have waited at least 10 s, and no
    /// worker serving the queue has beaten its heart for [`UNSERVED_AFTER`] (or none ever
    /// registered): a queue name no worker is configured for, or every worker gone.
    pub fn is_unserved(&self) -> bool {
        self.ready > 0
            && self
                .oldest_age
                .is_some_and(|age| age >= Duration::from_secs(10))
            && self
                .last_worker_beat
                .is_none_or(|beat| beat >= UNSERVED_AFTER)
    }
}

/// Client of the Redis queues under one key prefix. Cheap to clone (shared connection).
#[derive(Clone)]
pub struct Queue {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) conn: Connection,
    pub(crate) keys: Keys,
    pub(crate) cfg: QueueConfig,
    pub(crate) scripts: Scripts,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("prefix", &self.inner.cfg.prefix)
            .finish_non_exhaustive()
    }
}

pub(crate) fn check_queue(name: &str) -> Result<()> {
    if validate_name(name) {
        Ok(())
    } else {
        Err(QueueError::InvalidConfig(format!(
            "queue or worker name `{name}` must be non-empty without braces or spaces"
        )))
    }
}

/// Longest wait for [`QueueConfig::replica_acks`] replicas after a write (Redis's own
/// `WAIT` timeout, well inside the command timeout): a primary whose replica is gone (just
/// promoted, its old primary not back yet) holds each write this long, and it stands.
pub const REPLICA_ACK_WAIT: Duration = Duration::from_millis(500);

/// Messages per script call in [`Queue::enqueue_batch`].
pub const ENQUEUE_CHUNK: usize = 100;

/// The concurrency key argument of the settle scripts ('' for none).
pub(crate) fn concurrency_key(m: &ExecutionMessage) -> &str {
    m.concurrency.as_ref().map_or("", |c| c.key.as_str())
}

/// A duration as whole milliseconds (for Redis TTLs and scores).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Queue {
    /// Connects to Redis at `url` (`redis://host:port/db`, or `rediss://` for TLS with
    /// [`QueueConfig::tls`]).
    pub async fn connect(url: &str, cfg: QueueConfig) -> Result<Self> {
        cfg.validate()?;
        let client = Client::single(url, cfg.tls.as_ref())?;
        Self::with_client(client, cfg).await
    }

    /// Connects to the Redis Cluster that `nodes` belong to (`redis://host:port` or
    /// `rediss://` URLs of some of its nodes; one reachable node is enough to find the
    /// rest). Every script touches one slot, so the queue works on a cluster as on a single
    /// server (see `docs/redis-layout.md`).
    pub async fn connect_cluster(nodes: &[String], cfg: QueueConfig) -> Result<Self> {
        cfg.validate()?;
        let client = Client::cluster(nodes, &cfg)?;
        Self::with_client(client, cfg).await
    }

    async fn with_client(client: Client, cfg: QueueConfig) -> Result<Self> {
        let conn = client.connect(&cfg, cfg.command_timeout, "connect").await?;
        Ok(Queue {
            inner: Arc::new(Inner {
                client,
                conn,
                keys: Keys::new(cfg.prefix.clone()),
                cfg,
                scripts: Scripts::new(),
            }),
        })
    }

    /// The key builder (for tools and tests that inspect Redis directly).
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The configuration.
    pub fn config(&self) -> &QueueConfig {
        &self.inner.cfg
    }

    pub(crate) fn conn(&self) -> Connection {
        self.inner.conn.clone()
    }

    /// The shared connection (for tools and tests that inspect Redis directly): a single
    /// server's or the cluster's, whichever the queue was connected to.
    pub fn connection(&self) -> Connection {
        self.conn()
    }

    /// Runs one Redis future under the command timeout.
    pub(crate) async fn run<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = RedisResult<T>>,
    ) -> Result<T> {
        let after = self.inner.cfg.command_timeout;
        match tokio::time::timeout(after, fut).await {
            Ok(r) => r.map_err(QueueError::redis(op)),
            Err(_) => Err(QueueError::Timeout { op, after }),
        }
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
        let script = &self.inner.scripts.enqueue_many;
        let invocations: Vec<redis::ScriptInvocation<'_>> = chunks
            .iter()
            .map(|chunk| self.enqueue_invocation(script, msgs, &jsons, chunk))
            .collect();
        let pipeline = |load: bool| {
            let mut pipe = redis::pipe();
            if load {
                // Redis lost its script cache (a restart): load once, then the same calls.
                pipe.load_script(script).ignore();
            }
            for inv in &invocations {
                pipe.invoke_script(inv);
            }
            pipe
        };
        let mut conn = self.conn();
        let replies: Vec<Vec<redis::Value>> =
            match self.run_raw(pipeline(false).query_async(&mut conn)).await? {
                Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                    self.run_raw(pipeline(true).query_async(&mut conn)).await?
                }
                first => first,
            }
            .map_err(QueueError::redis("enqueue"))?;
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

    /// Like [`Queue::run`] but leaves the Redis error to the caller (to react to NOSCRIPT).
    async fn run_raw<T>(
        &self,
        fut: impl Future<Output = RedisResult<T>>,
    ) -> Result<RedisResult<T>> {
        let after = self.inner.cfg.command_timeout;
        tokio::time::timeout(after, fut)
            .await
            .map_err(|_| QueueError::Timeout {
                op: "enqueue",
                after,
            })
    }

    /// With [`QueueConfig::replica_acks`] set, waits until that many replicas have the writes
    /// made so far on the connection to the primary of `key` (each primary has one socket per
    /// client, so that includes the write just made), at most [`REPLICA_ACK_WAIT`].
    pub(crate) async fn replicated(&self, key: &str) -> Result<()> {
        let wanted = self.inner.cfg.replica_acks;
        if wanted == 0 {
            return Ok(());
        }
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(wanted).arg(ms(REPLICA_ACK_WAIT));
        let mut conn = self.conn();
        let got: i64 = self.run("wait replicas", conn.query_at(key, &cmd)).await?;
        if got < i64::from(wanted) {
            tracing::warn!(key, wanted, got, "fewer replicas than asked have the write");
        }
        Ok(())
    }

    /// The newest fencing token `queue` has seen from the owners of scheduling `shard`
    /// (`None`: an unsharded install's leaders), 0 when none.
    /// A partitioned queue's is the highest of its partitions'.
    pub async fn fence(&self, queue: &str, shard: Option<u32>) -> Result<u64> {
        check_queue(queue)?;
        let mut conn = self.conn();
        let mut newest = 0;
        for q in self.physical_queues(queue) {
            let v: Option<u64> = self
                .run("fence", conn.get(self.inner.keys.fence(&q, shard)))
                .await?;
            newest = newest.max(v.unwrap_or(0));
        }
        Ok(newest)
    }

    /// Raises `queue`'s fence of scheduling `shard` to `token`, issued by the etcd cluster
    /// `cluster` (a new leader, or a shard's new owner, calls this for every queue it knows,
    /// so a deposed one is refused even on queues the new one has not pushed to yet). The
    /// first cluster to raise a fence owns it; a fence owned by another cluster is not
    /// touched (see [`Fence::is_foreign`]). Other shards' fences are not touched either.
    /// A partitioned queue's fence is raised on every partition; the answer is the first
    /// partition's that is foreign or ahead, else the last one's.
    pub async fn advance_fence(
        &self,
        queue: &str,
        shard: Option<u32>,
        token: u64,
        cluster: &str,
    ) -> Result<Fence> {
        check_queue(queue)?;
        let mut last = None;
        for q in self.physical_queues(queue) {
            let fence = self.advance_one_fence(&q, shard, token, cluster).await?;
            let refuses = fence.is_foreign() || fence.is_ahead();
            last = Some(fence);
            if refuses {
                break;
            }
        }
        // `physical_queues` lists at least the queue itself.
        last.ok_or_else(|| QueueError::UnexpectedReply {
            op: "advance_fence",
            detail: "no physical queue".into(),
        })
    }

    async fn advance_one_fence(
        &self,
        queue: &str,
        shard: Option<u32>,
        token: u64,
        cluster: &str,
    ) -> Result<Fence> {
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.advance_fence.prepare_invoke();
        inv.key(self.inner.keys.fence(queue, shard))
            .key(self.inner.keys.fence_owner(queue, shard))
            .arg(token)
            .arg(cluster);
        let (newest, owner): (String, String) = self
            .run("advance_fence", inv.invoke_async(&mut conn))
            .await?;
        let newest = newest.parse().map_err(|_| QueueError::UnexpectedReply {
            op: "advance_fence",
            detail: format!("token `{newest}`"),
        })?;
        Ok(Fence {
            newest,
            token,
            owner,
            cluster: cluster.to_owned(),
        })
    }

    /// Sets `queue`'s fence of scheduling `shard` to `token` and its owner to `cluster`,
    /// whatever they were: the operator's repair after an etcd restore or a change of
    /// cluster (`ax fence reseat`). Safe only when no other installation uses this Redis key
    /// prefix. A partitioned queue's fence is set on every partition.
    pub async fn reseat_fence(
        &self,
        queue: &str,
        shard: Option<u32>,
        token: u64,
        cluster: &str,
    ) -> Result<()> {
        check_queue(queue)?;
        let k = &self.inner.keys;
        for q in self.physical_queues(queue) {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .set(k.fence(&q, shard), token)
                .ignore()
                .set(k.fence_owner(&q, shard), cluster)
                .ignore();
            let mut conn = self.conn();
            self.run("reseat_fence", pipe.query_async::<()>(&mut conn))
                .await?;
        }
        Ok(())
    }

    /// Settles a finished message. `false` when it was no longer held (the reaper gave it
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
    /// delivery in order, whether it was still held.
    pub async fn ack_many(&self, ds: &[Delivery]) -> Result<Vec<bool>> {
        let mut groups: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
        for (i, d) in ds.iter().enumerate() {
            groups
                .entry((d.queue.as_str(), d.worker_id.as_str()))
                .or_default()
                .push(i);
        }
        let mut held = vec![false; ds.len()];
        for ((queue, worker), group) in groups {
            let mut conn = self.conn();
            let mut inv = self.inner.scripts.ack.prepare_invoke();
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
                held[i] = flag == 1;
            }
            self.replicated(&self.inner.keys.queued(queue)).await?;
        }
        Ok(held)
    }

    /// Moves a failed message to the delayed set as `next` (its next attempt), due at `due`,
    /// unless an operator killed the execution meanwhile (see [`RetrySettle`]).
    pub async fn retry_later(
        &self,
        d: &Delivery,
        next: &ExecutionMessage,
        due: UtcMillis,
    ) -> Result<RetrySettle> {
        let json = next.to_json()?;
        let k = &self.inner.keys;
        let m = &d.message;
        let id = m.execution_id.to_string();
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.retry_later.prepare_invoke();
        inv.key(k.processing(&d.queue, &d.worker_id))
            .key(k.monitor(&d.queue))
            .key(k.delayed(&d.queue))
            .key(k.kill(&d.queue, &id))
            .key(k.active(&d.queue, &m.namespace, &m.task_id))
            .key(k.order(&d.queue))
            .key(k.queued(&d.queue))
            .key(k.wake(&d.queue))
            .arg(&d.raw)
            .arg(&id)
            .arg(json)
            .arg(due.0)
            .arg(concurrency_key(m));
        let n: i64 = self.run("retry_later", inv.invoke_async(&mut conn)).await?;
        self.replicated(&k.queued(&d.queue)).await?;
        Ok(match n {
            1 => RetrySettle::Scheduled,
            2 => RetrySettle::Killed,
            _ => RetrySettle::NotHeld,
        })
    }

    /// Gives a held message back to its place in the queue (for work a stopping worker did
    /// not finish): taken before anything enqueued after it. `false` when it was no longer
    /// held.
    pub async fn release(&self, d: &Delivery) -> Result<bool> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.release.prepare_invoke();
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
            // The slots it held go with it.
            .arg(d.message.execution_id.to_string())
            .arg(concurrency_key(&d.message))
            .arg(&d.worker_id);
        let n: i64 = self.run("release", inv.invoke_async(&mut conn)).await?;
        Ok(n == 1)
    }

    /// Moves up to `batch` delayed messages due at `now` to the queued set; returns how many.
    pub async fn promote_due(&self, queue: &str, now: UtcMillis, batch: usize) -> Result<usize> {
        check_queue(queue)?;
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.promote_due.prepare_invoke();
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
        fanout_id: &str,
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
        let (held,): (Option<String>,) = self
            .run("fix_fanout_workers", pipe.query_async(&mut conn))
            .await?;
        match held {
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
        let mut inv = self.inner.scripts.deregister.prepare_invoke();
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
        let mut inv = self.inner.scripts.take_orphans.prepare_invoke();
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
                        UtcMillis::now(),
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
        let mut inv = self.inner.scripts.reap.prepare_invoke();
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
            tracing::warn!(queue, worker = %worker_id, messages = n, "gave back what this worker id held before a restart");
        }
        Ok(usize::try_from(n).unwrap_or(0))
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

    /// Messages waiting to be taken (ZCARD of the queued set, plus what an earlier version
    /// left in its ready list and no take has moved yet).
    /// Summed over a partitioned queue's partitions.
    pub async fn depth(&self, queue: &str) -> Result<u64> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut total = 0;
        for q in self.physical_queues(queue) {
            let mut pipe = redis::pipe();
            pipe.zcard(k.queued(&q)).llen(k.legacy_ready(&q));
            let (queued, legacy): (u64, u64) =
                self.run("depth", pipe.query_async(&mut conn)).await?;
            total += queued + legacy;
        }
        Ok(total)
    }

    /// Messages waiting in the delayed set (ZCARD), summed over a partitioned queue's
    /// partitions.
    pub async fn delayed_len(&self, queue: &str) -> Result<u64> {
        let mut conn = self.conn();
        let mut total = 0;
        for q in self.physical_queues(queue) {
            let n: u64 = self
                .run("delayed_len", conn.zcard(self.inner.keys.delayed(&q)))
                .await?;
            total += n;
        }
        Ok(total)
    }

    /// How long the oldest unsettled message has waited since it was enqueued, from the
    /// monitoring set (ZRANGE 0 0 WITHSCORES); `None` when nothing is unsettled.
    pub async fn oldest_age(&self, queue: &str, now: UtcMillis) -> Result<Option<Duration>> {
        let mut conn = self.conn();
        let first: Vec<(String, i64)> = self
            .run(
                "oldest_age",
                conn.zrange_withscores(self.inner.keys.monitor(queue), 0, 0),
            )
            .await?;
        Ok(first.first().map(|(_, at)| now.since(UtcMillis(*at))))
    }

    /// All monitoring figures of `queue` in one round trip (one per partition of a
    /// partitioned queue, summed: see [`QueueStats::merge`]).
    pub async fn stats(&self, queue: &str, now: UtcMillis) -> Result<QueueStats> {
        let mut total: Option<QueueStats> = None;
        for q in self.physical_queues(queue) {
            let one = self.partition_stats(&q, now).await?;
            total = Some(match total {
                None => one,
                Some(t) => t.merge(&one),
            });
        }
        total.ok_or_else(|| QueueError::UnexpectedReply {
            op: "stats",
            detail: "no physical queue".into(),
        })
    }

    /// The figures of each physical queue of `queue`, by name (one entry for a queue
    /// without partitions).
    pub async fn partition_stats_of(
        &self,
        queue: &str,
        now: UtcMillis,
    ) -> Result<Vec<(String, QueueStats)>> {
        let mut out = Vec::new();
        for q in self.physical_queues(queue) {
            let stats = self.partition_stats(&q, now).await?;
            out.push((q, stats));
        }
        Ok(out)
    }

    async fn partition_stats(&self, queue: &str, now: UtcMillis) -> Result<QueueStats> {
        let k = &self.inner.keys;
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        pipe.zcard(k.queued(queue))
            .llen(k.legacy_ready(queue))
            .zcard(k.monitor(queue))
            .zcard(k.delayed(queue))
            .zcard(k.dlq(queue))
            .zrange_withscores(k.monitor(queue), 0, 0)
            .zrange_withscores(k.workers(queue), -1, -1)
            .exists(k.paused(queue));
        type Reply = (
            u64,
            u64,
            u64,
            u64,
            u64,
            Vec<(String, i64)>,
            Vec<(String, i64)>,
            bool,
        );
        let (queued, legacy, unsettled, delayed, dead, first, beat, paused): Reply =
            self.run("stats", pipe.query_async(&mut conn)).await?;
        Ok(QueueStats {
            ready: queued + legacy,
            unsettled,
            delayed,
            dead,
            oldest_age: first.first().map(|(_, at)| now.since(UtcMillis(*at))),
            last_worker_beat: beat.first().map(|(_, at)| now.since(UtcMillis(*at))),
            paused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_unserved_when_work_waits_and_no_worker_beats() {
        let secs = |s| Some(Duration::from_secs(s));
        let stats = |ready, oldest, beat| QueueStats {
            ready,
            unsettled: ready,
            delayed: 0,
            dead: 0,
            oldest_age: oldest,
            last_worker_beat: beat,
            paused: false,
        };
        // No worker ever registered, work waiting 12 s.
        assert!(stats(3, secs(12), None).is_unserved());
        // Every worker gone a minute ago.
        assert!(stats(3, secs(12), secs(60)).is_unserved());
        // A live worker: it is only behind (the backlog alert's business).
        assert!(!stats(3, secs(12), secs(1)).is_unserved());
        // Just enqueued, or nothing waiting.
        assert!(!stats(3, secs(2), None).is_unserved());
        assert!(!stats(0, None, None).is_unserved());
    }
}
