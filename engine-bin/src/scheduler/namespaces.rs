//! The paused namespaces as the leader sees them: read at takeover (before anything can
//! fire) and then polled, like the run-now requests, every `scheduler.trigger_interval`.
//!
//! The poller publishes the whole set on a watch channel when it changes; the term applies
//! the difference to its dispatcher. A failed read keeps the last set: a namespace is not
//! resumed by an etcd hiccup.

use std::collections::BTreeSet;
use std::time::Duration;

use ax_registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Reads the paused namespaces every `interval` and publishes the set when it changes.
pub(super) async fn poll(
    registry: Registry,
    interval: Duration,
    tx: watch::Sender<BTreeSet<String>>,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match registry.paused_namespaces().await {
            Ok(paused) => {
                let set: BTreeSet<String> = paused.into_iter().map(|p| p.namespace).collect();
                tx.send_if_modified(|current| {
                    if *current == set {
                        false
                    } else {
                        *current = set;
                        true
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "cannot read the paused namespaces; keeping the last known")
            }
        }
    }
}
