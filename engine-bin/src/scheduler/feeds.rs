//! What every term reads from etcd besides the tasks: run-now requests and paused
//! namespaces, polled once per replica and published to its terms.
//!
//! A run-now request is a key under `{prefix}/triggers/{namespace}/{id}/{execution_id}`,
//! written by `ax task trigger` (and the API). The term whose scope holds the task enqueues
//! a run-now execution with the key's execution id, and only then deletes the key (through
//! its flusher). A term that ends in between leaves the key for its successor, whose enqueue
//! of the same execution id is refused as a duplicate if the first one got through: a
//! trigger runs once. A term never deletes a request outside its scope. Polling, rather than
//! a second watch, keeps this path simple and restart-proof.
//!
//! Both are small prefixes read every `scheduler.trigger_interval` (250 ms by default, well
//! within the promise that a run-now starts within a second). One poller each for the whole
//! replica, whatever the number of shards it owns, keeps the load on etcd flat: each term
//! takes what is in its scope from the published value. A failed read keeps the last value
//! (a namespace is not resumed by an etcd hiccup); the paused set is `None` until first read,
//! so no term fires before it knows what is paused.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ax_registry::{PendingTrigger, Registry};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info_span, warn, Instrument};

use super::term::ticker;
use super::LeaderDeps;

/// The published values; cloned into every term.
#[derive(Clone)]
pub(super) struct Feeds {
    /// Every pending run-now request, as last read.
    pub(super) triggers: watch::Receiver<Arc<Vec<PendingTrigger>>>,
    /// The paused namespaces, as last read (`None` before the first read).
    pub(super) paused: watch::Receiver<Option<BTreeSet<String>>>,
}

impl Feeds {
    /// Starts the pollers on the role's tracker; they stop with `cancel`.
    pub(super) fn start(
        deps: &LeaderDeps,
        interval: Duration,
        cancel: &CancellationToken,
    ) -> Feeds {
        let (triggers_tx, triggers) = watch::channel(Arc::new(Vec::new()));
        let (paused_tx, paused) = watch::channel(None);
        deps.tracker.spawn(
            poll_triggers(
                deps.registry.clone(),
                interval,
                triggers_tx,
                cancel.child_token(),
            )
            .instrument(info_span!("triggers")),
        );
        deps.tracker.spawn(
            poll_paused(
                deps.registry.clone(),
                interval,
                paused_tx,
                cancel.child_token(),
            )
            .instrument(info_span!("paused_namespaces")),
        );
        Feeds { triggers, paused }
    }
}

async fn poll_triggers(
    registry: Registry,
    interval: Duration,
    tx: watch::Sender<Arc<Vec<PendingTrigger>>>,
    cancel: CancellationToken,
) {
    let mut tick = ticker(interval);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match registry.list_triggers().await {
            Ok((_, pending)) => {
                tx.send_if_modified(|current| {
                    let same = current.len() == pending.len()
                        && current
                            .iter()
                            .zip(&pending)
                            .all(|(a, b)| a.execution_id == b.execution_id);
                    if !same {
                        *current = Arc::new(pending);
                    }
                    !same
                });
            }
            Err(e) => warn!(error = %e, "cannot read run-now triggers"),
        }
    }
}

async fn poll_paused(
    registry: Registry,
    interval: Duration,
    tx: watch::Sender<Option<BTreeSet<String>>>,
    cancel: CancellationToken,
) {
    let mut tick = ticker(interval);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match registry.paused_namespaces().await {
            Ok(paused) => {
                let set: BTreeSet<String> = paused.into_iter().map(|p| p.namespace).collect();
                tx.send_if_modified(|current| {
                    if current.as_ref() == Some(&set) {
                        false
                    } else {
                        *current = Some(set);
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
