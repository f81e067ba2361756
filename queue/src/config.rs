//! Queue client settings, with the defaults documented on each field.

use std::time::Duration;

use crate::error::{QueueError, Result};
use crate::keys::{validate_name, DEFAULT_PREFIX};

/// Executions kept per task in its history list, by default.
pub const DEFAULT_HISTORY_CAP: usize = 100;
/// How long a task's history is kept after its last execution, by default (30 days).
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a dead-letter entry is kept, by default (90 days).
pub const DEFAULT_DLQ_RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);
/// Most dead-letter entries kept per queue, by default.
pub const DEFAULT_DLQ_MAX_ENTRIES: usize = 10_000;

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
    /// How long a dead-letter entry is kept. Default [`DEFAULT_DLQ_RETENTION`].
    pub dlq_retention: Duration,
    /// Most dead-letter entries kept per queue; the oldest go first. Default
    /// [`DEFAULT_DLQ_MAX_ENTRIES`].
    pub dlq_max_entries: usize,
    /// Reconnect attempts per failed command before it reports the error. Default 4.
    pub reconnect_retries: usize,
    /// Longest wait between reconnect attempts. Default 1 s.
    pub reconnect_max_delay: Duration,
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
            dlq_retention: DEFAULT_DLQ_RETENTION,
            dlq_max_entries: DEFAULT_DLQ_MAX_ENTRIES,
            reconnect_retries: 4,
            reconnect_max_delay: Duration::from_secs(1),
        }
    }
}

impl QueueConfig {
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
        if self.history_cap == 0 || self.dlq_max_entries == 0 {
            return Err(QueueError::InvalidConfig(
                "history_cap and dlq_max_entries must be at least 1".into(),
            ));
        }
        if self.history_retention.as_millis() == 0 || self.dlq_retention.as_millis() == 0 {
            return Err(QueueError::InvalidConfig(
                "history_retention and dlq_retention must be positive".into(),
            ));
        }
        Ok(())
    }
}
