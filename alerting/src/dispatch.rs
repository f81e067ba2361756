//! Per-channel delivery: one worker task and one bounded queue per channel.
//!
//! Each channel gets its own queue and task so a slow or dead destination only delays its own
//! alerts: the manager hands alerts over with `try_send` and never waits for a channel. Within
//! a channel, alerts go out in order, each retried while the error is retryable. The waits
//! between attempts come from the core's [`ReconnectBackoff`], the one backoff every retry loop
//! of ax uses: doubling up to a cap, jittered into the upper half of each step. Alerts are few,
//! so the jitter matters less here than for reconnecting replicas, but one rule everywhere is
//! easier to reason about than a second, deterministic one.

use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::ReconnectBackoff;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, warn, Instrument};

use crate::alert::Alert;
use crate::channel::Channel;
use crate::error::AlertError;
use crate::stats::{bump, ChannelCounters};

/// How a channel retries a failed delivery (not to be confused with a task's
/// `ax_scheduler_core::RetryPolicy`, which retries executions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryRetry {
    /// Attempts after the first one. Default 3.
    pub retries: u32,
    /// Wait before the first retry; doubles for each further retry, each wait jittered into
    /// the upper half of its step. Default 1 s (so about 1, 2, 4 s).
    pub initial_backoff: Duration,
    /// Upper bound of a single wait. Default 30 s.
    pub max_backoff: Duration,
}

impl Default for DeliveryRetry {
    fn default() -> Self {
        DeliveryRetry {
            retries: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl DeliveryRetry {
    /// A fresh backoff for one alert's retries: the n-th retry waits within
    /// `[b / 2, b]` where `b = min(initial_backoff * 2^(n-1), max_backoff)`.
    pub fn backoff(&self) -> ReconnectBackoff {
        ReconnectBackoff::new(self.initial_backoff, self.max_backoff)
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
    pub(crate) retry: DeliveryRetry,
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
        let mut backoff = self.retry.backoff();
        let outcome = loop {
            let result = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break Outcome::Cancelled,
                result = self.channel.send(alert) => result,
            };
            match result {
                Ok(()) => break Outcome::Sent,
                Err(err) if err.is_retryable() && attempt <= self.retry.retries => {
                    let wait = backoff.next_delay(&mut rand::rng());
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
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn backoff_doubles_and_caps_within_jitter() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut backoff = DeliveryRetry::default().backoff();
        for base_secs in [1, 2, 4, 8, 16, 30, 30] {
            let base = Duration::from_secs(base_secs);
            let wait = backoff.next_delay(&mut rng);
            assert!(
                wait >= base / 2 && wait <= base,
                "{wait:?} outside [{:?}, {base:?}]",
                base / 2
            );
        }
        for _ in 0..100 {
            assert!(backoff.next_delay(&mut rng) <= Duration::from_secs(30));
        }
    }
}
