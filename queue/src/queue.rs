//! The queue client: its connection, the command timeout, the replica wait and the partition
//! routing that every operation shares. The operations sit beside it by concern, each module
//! with the scripts it runs in a folder of its own name (`enqueue.rs`, `fence.rs`, `settle.rs`,
//! `retry.rs`, `workers.rs`, `stats.rs`, `dlq.rs`, ...), so a script's caller and its text are
//! read together.
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

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisResult;

use crate::config::QueueConfig;
use crate::conn::{Client, Connection};
use crate::error::{QueueError, Result};
use crate::keys::{validate_name, Keys};
use crate::message::ExecutionMessage;
use crate::millis::ms;
use crate::partitions::{partition_name, partition_of, split_partition};

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
    /// How long it waited gated because its concurrency key was at its limit (`None`:
    /// its key did not gate it).
    pub limited_wait: Option<Duration>,
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

/// The concurrency key argument of the settle scripts ('' for none).
pub(crate) fn concurrency_key(m: &ExecutionMessage) -> &str {
    m.concurrency.as_ref().map_or("", |c| c.key.as_str())
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

    /// A connection of its own, for a blocking command (`BLPOP`), whose response timeout
    /// covers the longest block asked for.
    pub(crate) async fn dedicated_connection(
        &self,
        response_timeout: std::time::Duration,
        op: &'static str,
    ) -> Result<Connection> {
        self.inner
            .client
            .connect(&self.inner.cfg, response_timeout, op)
            .await
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
}

// Every operation routes by partition, so the queue's own partition counts are read here,
// beside the settings every operation shares.
impl Queue {
    /// How many partitions `queue` has (1: it is one physical queue, by its own name).
    pub fn partitions(&self, queue: &str) -> u32 {
        self.inner
            .cfg
            .partitions
            .get(queue)
            .copied()
            .unwrap_or(1)
            .max(1)
    }

    /// The physical queues of `queue`: its partitions, or itself when it has none (or when it
    /// is a partition's name already). A worker of `queue` serves all of them.
    pub fn physical_queues(&self, queue: &str) -> Vec<String> {
        match self.partitions(queue) {
            1 => vec![queue.to_owned()],
            n => (0..n).map(|p| partition_name(queue, p)).collect(),
        }
    }

    /// [`Queue::physical_queues`] of each of `queues`, in order.
    pub fn physical_queues_of(&self, queues: &[String]) -> Vec<String> {
        queues
            .iter()
            .flat_map(|q| self.physical_queues(q))
            .collect()
    }

    /// The physical queue `msg` goes to: its own queue, or the partition it hashes to.
    pub(crate) fn physical_queue<'m>(&self, msg: &'m ExecutionMessage) -> Cow<'m, str> {
        match self.partitions(&msg.queue) {
            1 => Cow::Borrowed(&*msg.queue),
            n => Cow::Owned(partition_name(&msg.queue, partition_of(msg, n))),
        }
    }

    /// The configured name whose settings (limits) apply to physical queue `physical`.
    pub(crate) fn logical_queue<'a>(&self, physical: &'a str) -> &'a str {
        match split_partition(physical) {
            Some((logical, p)) if p < self.partitions(logical) => logical,
            _ => physical,
        }
    }
}
