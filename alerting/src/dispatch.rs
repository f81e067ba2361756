//! Per-channel delivery: one worker task and one bounded queue per channel.
//!
//! Each channel gets its own queue and task so a slow or dead destination only delays its own
//! alerts: the manager hands alerts over with `try_send` and never waits for a channel. Within
//! a channel, alerts go out in order, each retried with exponential backoff while the error is
//! retryable. Backoff is deterministic (no jitter): alerts are few, and there is no thundering
//! herd to spread out, while deterministic delays keep the retry tests exact.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, warn, Instrument};

use crate::alert::Alert;
use crate::channel::Channel;
use crate::error::AlertError;
use crate::stats::{bump, ChannelCounters};

/// How a channel retries a failed delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first one. Default 3.
    pub retries: u32,
    /// Wait before the first retry; doubles for each further retry. Default 1 s (so 1, 2, 4 s).
    pub initial_backoff: Duration,
    /// Upper bound of a single wait. Default 30 s.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// Outcome of delivering one alert through one channel, retries included.
#[derive(Debug)]
enum Outcome {
    Sent,
    Failed(AlertError),
    Cancelled,
}

pub(crate) struct ChannelWorker {
    pub(crate) channel: Arc<dyn Channel>,
    pub(crate) queue: mpsc::Receiver<Arc<Alert>>,
    pub(crate) retry: RetryPolicy,
    pub(crate) counters: Arc<ChannelCounters>,
    pub(crate) cancel: CancellationToken,
}

impl ChannelWorker {
    /// Delivers queued alerts until the queue closes (manager finished) or cancellation.
    pub(crate) async fn run(mut self) {
        loop {
            let alert = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break,
                next = self.queue.recv() => match next {
                    Some(alert) => alert,
                    None => break,
                },
            };
            let span = info_span!(
                "alert_delivery",
                channel = self.channel.name(),
                kind = alert.kind.as_str(),
                title = %alert.title,
                task_id = tracing::field::Empty,
            );
            if let Some(task) = &alert.task {
                span.record("task_id", tracing::field::display(task));
            }
            if let Outcome::Cancelled = self.deliver(&alert).instrument(span).await {
                break;
            }
        }
        let abandoned = self.queue.len();
        if abandoned > 0 {
            warn!(
                channel = self.channel.name(),
                abandoned, "alert channel stopped with undelivered alerts"
            );
        }
    }

    async fn deliver(&self, alert: &Alert) -> Outcome {
        let mut attempt: u32 = 1;
        let outcome = loop {
            let result = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break Outcome::Cancelled,
                result = self.channel.send(alert) => result,
            };
            match result {
                Ok(()) => break Outcome::Sent,
                Err(err) if err.is_retryable() && attempt <= self.retry.retries => {
                    let wait = self.retry.backoff(attempt);
                    debug!(attempt, wait_ms = wait.as_millis() as u64, error = %err, "alert delivery failed; retrying");
                    bump(&self.counters.retries);
                    attempt += 1;
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => break Outcome::Cancelled,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                Err(err) => break Outcome::Failed(err),
            }
        };
        match &outcome {
            Outcome::Sent => {
                bump(&self.counters.sent);
                debug!(attempt, "alert delivered");
            }
            Outcome::Failed(err) => {
                bump(&self.counters.failed);
                warn!(attempt, retryable = err.is_retryable(), error = %err, "alert delivery failed; giving up");
            }
            Outcome::Cancelled => debug!(attempt, "alert delivery cancelled"),
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let policy = RetryPolicy::default();
        let waits: Vec<_> = (1..=7).map(|r| policy.backoff(r).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(30));
    }
}
