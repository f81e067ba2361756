//! Queue client settings, with the defaults documented on each field.
//!
//! TLS material is plain PEM bytes, not file paths: the caller decides where certificates
//! come from (files, a secret store) and this crate never touches the file system for them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::ready::DEFAULT_AGING_INTERVAL;
use ax_scheduler_core::{Clock, SystemClock};

use crate::error::{QueueError, Result};
use crate::keys::{validate_name, DEFAULT_PREFIX};
use crate::partitions::{MAX_PARTITIONS, PARTITION_SEPARATOR};

/// Executions kept per task in its history list, by default.
pub const DEFAULT_HISTORY_CAP: usize = 100;
/// How long a task's history is kept after its last execution, by default (30 days).
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long the execution history across tasks keeps an attempt, by default (7 days).
pub const DEFAULT_EXECUTION_HISTORY_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Most attempts the execution history across tasks keeps, by default.
pub const DEFAULT_EXECUTION_HISTORY_MAX_ENTRIES: usize = 200_000;
/// How long a dead-letter entry is kept, by default (90 days).
pub const DEFAULT_DLQ_RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);
/// Most dead-letter entries kept per queue, by default.
pub const DEFAULT_DLQ_MAX_ENTRIES: usize = 10_000;

/// The longest aging step (about 11.6 days), also used for a step of zero. Scores stay exact
/// integers in a double with it: an instant in µs (about 1.8e15 now) less 9 steps (9e12).
pub const STRICT_PRIORITY_STEP: Duration = Duration::from_secs(1_000_000);

/// How a [`crate::Queue`] talks to Redis.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Prefix of every key. Default `ax`.
    pub prefix: String,
    /// Limit on any one non-blocking command or script, including waiting for a reconnect.
    /// Also the connection's response timeout. Default 5 s.
    pub command_timeout: Duration,
    /// Limit on establishing a connection. Default 5 s.
    pub connect_timeout: Duration,
    /// How long a dedupe key keeps a (task, fire instant) from being enqueued again.
    /// Default 24 h.
    pub dedupe_ttl: Duration,
    /// Executions kept per task in the history list. Default [`DEFAULT_HISTORY_CAP`].
    pub history_cap: usize,
    /// How long a task's history is kept after its last execution (a deleted task's history
    /// is removed with its state; this also bounds what tasks deleted by older versions left).
    /// Default [`DEFAULT_HISTORY_RETENTION`].
    pub history_retention: Duration,
    /// How long the execution history across tasks (one stream) keeps an attempt. Default
    /// [`DEFAULT_EXECUTION_HISTORY_RETENTION`].
    pub execution_history_retention: Duration,
    /// Most attempts that stream keeps (approximately: it is trimmed in whole nodes).
    /// Default [`DEFAULT_EXECUTION_HISTORY_MAX_ENTRIES`].
    pub execution_history_max_entries: usize,
    /// How long a dead-letter entry is kept. Default [`DEFAULT_DLQ_RETENTION`].
    pub dlq_retention: Duration,
    /// Most dead-letter entries kept per queue; the oldest go first. Default
    /// [`DEFAULT_DLQ_MAX_ENTRIES`].
    pub dlq_max_entries: usize,
    /// Reconnect attempts per failed command before it reports the error. Default 4.
    pub reconnect_retries: usize,
    /// Longest wait between reconnect attempts. Default 1 s.
    pub reconnect_max_delay: Duration,
    /// Waiting time worth one priority level in the order of waiting messages: a message of
    /// priority `p` is never overtaken by one of priority `q > p` enqueued more than
    /// `(q - p) x priority_aging` after it (see `docs/redis-layout.md`). Every process that
    /// enqueues into a queue (leader, workers' retries, operators' requeues) must use the
    /// same value. Default [`DEFAULT_AGING_INTERVAL`], as the leader's ready queue. Zero (or
    /// anything above [`STRICT_PRIORITY_STEP`]) means that step: strict priority in practice,
    /// where a low priority can wait for ever under a stream of higher ones.
    pub priority_aging: Duration,
    /// Limits per queue name, enforced inside the take script so they hold across all
    /// workers; every worker of a queue must be given the same. Default none.
    pub limits: BTreeMap<String, QueueLimits>,
    /// Partitions per queue name, 1 ..= [`crate::MAX_PARTITIONS`] (see `partitions.rs`): a
    /// queue named here is that many physical queues on different cluster slots. Every
    /// process that enqueues into, serves or operates on a queue must be given the same
    /// count. A partitioned queue's [`QueueConfig::limits`] apply to each partition. Default
    /// none (every queue is one).
    pub partitions: BTreeMap<String, u32>,
    /// Replicas that must have an enqueue or a settle (ack, retry, dead letter) before it
    /// returns: `WAIT n` on the primary that took the write, bounded by
    /// [`QueueConfig::command_timeout`]. Narrows what a failover can lose (Redis replicates
    /// asynchronously: a primary that dies loses what its replica had not received yet) to
    /// writes whose WAIT had not returned, at the cost of a replication round trip per
    /// write; it does not make Redis strongly consistent. A WAIT ends after
    /// [`crate::REPLICA_ACK_WAIT`] at most; with fewer replicas it is logged, not an error:
    /// the write stands on the primary. Default 0 (off).
    pub replica_acks: u32,
    /// The wall clock the queue's own instants come from (a dead letter's, a pause's, the
    /// history's age trim, the maintenance loop's steps); Redis's `TIME` orders the queue
    /// itself. Default [`SystemClock`]; a test on paused time passes one that follows it.
    pub clock: Arc<dyn Clock>,
    /// TLS settings for a `rediss://` URL beyond the defaults (a private CA, a client
    /// certificate). Default none: `rediss://` trusts the system's root certificates.
    pub tls: Option<RedisTls>,
}

/// Limits of one queue, across all its workers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueLimits {
    /// Most executions taken and not settled at once; 0: no limit.
    pub max_running: u32,
    /// Most executions taken per second (a token bucket holding one second's worth, at
    /// least one); 0: no limit.
    pub rate: f64,
}

/// TLS material for `rediss://`, as PEM bytes.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// CA certificates that signed the server's certificate; `None`: the system's roots.
    pub ca: Option<Vec<u8>>,
    /// Client certificate chain and key for mutual TLS; `None`: no client certificate.
    pub client: Option<ClientIdentity>,
}

/// A client certificate chain and its private key, as PEM bytes.
#[derive(Clone)]
pub struct ClientIdentity {
    /// The certificate chain, leaf first.
    pub cert: Vec<u8>,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Vec<u8>,
}

// The key is a secret and certificates are noise in a log: say only what is set.
impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca", &self.ca.as_ref().map(|_| "set"))
            .field("client", &self.client.as_ref().map(|_| "set"))
            .finish()
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            prefix: DEFAULT_PREFIX.to_string(),
            command_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            dedupe_ttl: Duration::from_secs(24 * 3600),
            history_cap: DEFAULT_HISTORY_CAP,
            history_retention: DEFAULT_HISTORY_RETENTION,
            execution_history_retention: DEFAULT_EXECUTION_HISTORY_RETENTION,
            execution_history_max_entries: DEFAULT_EXECUTION_HISTORY_MAX_ENTRIES,
            dlq_retention: DEFAULT_DLQ_RETENTION,
            dlq_max_entries: DEFAULT_DLQ_MAX_ENTRIES,
            reconnect_retries: 4,
            reconnect_max_delay: Duration::from_secs(1),
            priority_aging: DEFAULT_AGING_INTERVAL,
            limits: BTreeMap::new(),
            partitions: BTreeMap::new(),
            replica_acks: 0,
            clock: Arc::new(SystemClock),
            tls: None,
        }
    }
}

impl QueueConfig {
    /// [`QueueConfig::priority_aging`] in the scripts' unit (µs).
    pub(crate) fn aging_step_us(&self) -> u64 {
        let strict = u64::try_from(STRICT_PRIORITY_STEP.as_micros()).unwrap_or(u64::MAX);
        match u64::try_from(self.priority_aging.as_micros()) {
            Ok(0) | Err(_) => strict,
            Ok(us) => us.min(strict),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if !validate_name(&self.prefix) {
            return Err(QueueError::InvalidConfig(format!(
                "prefix `{}` must be non-empty without braces or spaces",
                self.prefix
            )));
        }
        if self.command_timeout.is_zero() || self.dedupe_ttl.as_millis() == 0 {
            return Err(QueueError::InvalidConfig(
                "command_timeout and dedupe_ttl must be positive".into(),
            ));
        }
        if self.history_cap == 0
            || self.dlq_max_entries == 0
            || self.execution_history_max_entries == 0
        {
            return Err(QueueError::InvalidConfig(
                "history_cap, execution_history_max_entries and dlq_max_entries must be at \
                 least 1"
                    .into(),
            ));
        }
        if self.history_retention.as_millis() == 0
            || self.dlq_retention.as_millis() == 0
            || self.execution_history_retention.as_millis() == 0
        {
            return Err(QueueError::InvalidConfig(
                "history_retention, execution_history_retention and dlq_retention must be \
                 positive"
                    .into(),
            ));
        }
        for (queue, l) in &self.limits {
            if !validate_name(queue) || !l.rate.is_finite() || l.rate < 0.0 {
                return Err(QueueError::InvalidConfig(format!(
                    "limits of queue `{queue}`: the name must be non-empty without braces or \
                     spaces, the rate a number of at least 0"
                )));
            }
        }
        for (queue, &n) in &self.partitions {
            if !validate_name(queue) || queue.contains(PARTITION_SEPARATOR) {
                return Err(QueueError::InvalidConfig(format!(
                    "partitions of queue `{queue}`: the name must be non-empty without braces, \
                     spaces or `{PARTITION_SEPARATOR}`"
                )));
            }
            if !(1..=MAX_PARTITIONS).contains(&n) {
                return Err(QueueError::InvalidConfig(format!(
                    "partitions of queue `{queue}`: {n}; 1 to {MAX_PARTITIONS} are allowed"
                )));
            }
        }
        Ok(())
    }

    /// The limits of `queue` (none when unset).
    pub(crate) fn limits_of(&self, queue: &str) -> QueueLimits {
        self.limits.get(queue).copied().unwrap_or_default()
    }
}
