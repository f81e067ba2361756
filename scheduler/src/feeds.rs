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

use ax_registry::PendingTrigger;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info_span, warn, Instrument};

use crate::clock::ticker;
use crate::deps::TermDeps;
use crate::supervise::{self, supervise};

/// The published values; cloned into every term.
#[derive(Clone)]
pub(super) struct Feeds {
    /// Every pending run-now request, as last read.
    pub(super) triggers: watch::Receiver<Arc<Vec<PendingTrigger>>>,
    /// The paused namespaces, as last read (`None` before the first read).
    pub(super) paused: watch::Receiver<Option<BTreeSet<String>>>,
}

impl Feeds {
    /// Starts the pollers on the role's tracker; they stop with `cancel`. Each is supervised
    /// ([`crate::supervise`]): a panic is counted and the poller starts again, publishing to
    /// the same channel (its last value stays meanwhile).
    pub(super) fn start(deps: &TermDeps, interval: Duration, cancel: &CancellationToken) -> Feeds {
        let (triggers_tx, triggers) = watch::channel(Arc::new(Vec::<PendingTrigger>::new()));
        let (paused_tx, paused) = watch::channel(None);
        let triggers_tx = Arc::new(triggers_tx);
        let paused_tx = Arc::new(paused_tx);
        let (store, stop) = (Arc::clone(&deps.store), cancel.child_token());
        deps.tracker.spawn(supervise(
            supervise::TRIGGERS,
            Arc::clone(&deps.metrics),
            deps.tracker.clone(),
            stop.clone(),
            move || {
                let (store, tx) = (Arc::clone(&store), Arc::clone(&triggers_tx));
                poll(
                    interval,
                    stop.clone(),
                    move || {
                        let store = Arc::clone(&store);
                        async move { store.list_triggers().await.map(|(_, p)| p) }
                    },
                    move |pending: Vec<PendingTrigger>| publish_triggers(&tx, pending),
                )
                .instrument(info_span!("triggers"))
            },
        ));
        let (store, stop) = (Arc::clone(&deps.store), cancel.child_token());
        let metrics = Arc::clone(&deps.metrics);
        deps.tracker.spawn(supervise(
            supervise::PAUSED_NAMESPACES,
            Arc::clone(&deps.metrics),
            deps.tracker.clone(),
            stop.clone(),
            move || {
                let (store, tx, metrics) = (
                    Arc::clone(&store),
                    Arc::clone(&paused_tx),
                    Arc::clone(&metrics),
                );
                poll(
                    interval,
                    stop.clone(),
                    move || {
                        let store = Arc::clone(&store);
                        async move { store.paused_namespaces().await }
                    },
                    move |paused: Vec<ax_registry::NamespacePause>| {
                        let set: BTreeSet<String> =
                            paused.into_iter().map(|p| p.namespace).collect();
                        metrics.set_paused_namespaces(set.len());
                        tx.send_if_modified(|current| {
                            let changed = current.as_ref() != Some(&set);
                            if changed {
                                *current = Some(set);
                            }
                            changed
                        });
                    },
                )
                .instrument(info_span!("paused_namespaces"))
            },
        ));
        Feeds { triggers, paused }
    }
}

/// Publishes the pending run-now requests, when they are not those already published.
fn publish_triggers(tx: &watch::Sender<Arc<Vec<PendingTrigger>>>, pending: Vec<PendingTrigger>) {
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

/// Reads with `read` every `interval` and hands what it read to `publish`; a failed read
/// is logged and the last published value stays.
async fn poll<V, Fut>(
    interval: Duration,
    cancel: CancellationToken,
    read: impl Fn() -> Fut,
    publish: impl Fn(V),
) where
    Fut: std::future::Future<Output = Result<V, ax_registry::RegistryError>>,
{
    let mut tick = ticker(interval);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match read().await {
            Ok(value) => publish(value),
            Err(e) => warn!(error = %e, "cannot read from etcd; keeping the last value"),
        }
    }
}
