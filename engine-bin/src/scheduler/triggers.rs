//! Run-now requests: keys under `{prefix}/triggers/{namespace}/{id}/{execution_id}`.
//!
//! `ax task trigger` (and the API) writes such a key; the leader reads them and enqueues a
//! run-now execution with the key's execution id, and only then deletes the key (through the
//! flusher). A leader that dies in between leaves the key for its successor, whose enqueue of
//! the same execution id is refused as a duplicate if the first one got through: a trigger
//! runs once. Polling, rather than a second watch, keeps this path simple and restart-proof;
//! the interval (250 ms by default) keeps it well within the one-second promise.

use std::collections::HashSet;
use std::time::Duration;

use ax_registry::Registry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub(super) use ax_registry::PendingTrigger;

/// Reads pending triggers every `interval` and sends the new ones to the leader loop.
pub(super) async fn poll(
    registry: Registry,
    interval: Duration,
    tx: mpsc::Sender<PendingTrigger>,
    cancel: CancellationToken,
) {
    let mut sent: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pending = match registry.list_triggers().await {
            Ok((_, p)) => p,
            Err(e) => {
                warn!(error = %e, "cannot read run-now triggers");
                continue;
            }
        };
        let present: HashSet<String> = pending.iter().map(|t| t.execution_id.clone()).collect();
        sent.retain(|k| present.contains(k));
        for t in pending {
            if !sent.insert(t.execution_id.clone()) {
                continue;
            }
            if tx.send(t).await.is_err() {
                return;
            }
        }
    }
}
