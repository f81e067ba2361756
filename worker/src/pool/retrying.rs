//! Retrying the pool's Redis writes through short outages.
//!
//! Settling a message, relaying an end and opening an awaiting attempt must not give up at
//! the first refused call: an unsettled message of a live worker sits in its processing
//! list until that worker stops, and an end not relayed waits for the sweep. [`settle`]
//! retries a call's retryable errors with jittered backoff for up to the pool's
//! `settle_retry_for`, and says when it could not be done.

use std::future::Future;
use std::time::Duration;

use ax_queue::QueueError;
use ax_scheduler_core::ReconnectBackoff;

use super::Shared;

/// Waits between failed Redis calls of the fetch and settle loops.
pub(super) fn error_backoff() -> ReconnectBackoff {
    ReconnectBackoff::new(Duration::from_millis(100), Duration::from_secs(5))
}

/// Runs a settling operation, retrying retryable errors for up to `settle_retry_for`.
/// `None` when it could not be done (logged).
pub(super) async fn settle<T, F, Fut>(sh: &Shared, op: &'static str, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, QueueError>>,
{
    let start = tokio::time::Instant::now();
    let mut backoff = error_backoff();
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) if e.is_retryable() && start.elapsed() < sh.cfg.settle_retry_for => {
                tracing::warn!(op, error = %e, "settling failed; retrying");
                let wait = backoff.next_delay(&mut rand::rng());
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                tracing::error!(op, error = %e, "settling failed; the message stays with this worker until it stops");
                return None;
            }
        }
    }
}
