//! The relay: writes the pool's attempt ends to the event stream and the history, batched.
//!
//! Each end is already in its queue's end log when it gets here (settled with it, see
//! [`super::settle`]), so a relay that fails or a process that dies loses nothing: the
//! queue's sweep relays the record later. Relaying at once keeps the leader's view within
//! milliseconds of the settle. One task for the whole pool, so under load one pipeline
//! relays many ends; it runs while the pool runs and drains what it was given when the pool
//! stops, after the last execution settled.

use std::sync::Arc;

use ax_queue::PendingEnd;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use super::retrying::settle;
use super::Shared;

/// Most ends relayed in one pipeline.
const RELAY_BATCH: usize = 512;

/// Where the pool's ends go while it runs.
pub(super) type Relays = UnboundedSender<PendingEnd>;

/// Starts the relay; it ends once `sh`'s sender is taken away ([`stop`]) and every end
/// sent before is relayed.
pub(super) fn start(sh: &Arc<Shared>) -> JoinHandle<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    *lock(sh) = Some(tx);
    tokio::spawn(relay_loop(Arc::clone(sh), rx))
}

/// Lets the relay end once it has relayed what it holds.
pub(super) fn stop(sh: &Shared) {
    lock(sh).take();
}

/// Hands an end to the relay. Outside a run of the pool (no relay) it is left to the sweep
/// when it is in an end log, and dropped with a warning when it is not.
pub(super) fn relay(sh: &Shared, end: PendingEnd) {
    let sent = match lock(sh).as_ref() {
        Some(tx) => tx.send(end).map_err(|e| e.0),
        None => Err(end),
    };
    if let Err(end) = sent {
        if end.logged.is_none() {
            tracing::warn!(
                execution_id = %end.record.event.execution_id,
                "an attempt's end was not relayed: the pool is not running"
            );
        }
    }
}

fn lock(sh: &Shared) -> std::sync::MutexGuard<'_, Option<Relays>> {
    // A poisoned lock only means a panic elsewhere while sending; the sender is still fine.
    sh.relays
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn relay_loop(sh: Arc<Shared>, mut rx: UnboundedReceiver<PendingEnd>) {
    let mut batch = Vec::with_capacity(RELAY_BATCH);
    while rx.recv_many(&mut batch, RELAY_BATCH).await > 0 {
        let q = &sh.queue;
        if settle(&sh, "relay_ends", || q.relay_ends(&batch))
            .await
            .is_none()
        {
            let unlogged = batch.iter().filter(|e| e.logged.is_none()).count();
            tracing::warn!(
                ends = batch.len(),
                unlogged,
                "could not relay attempt ends; those in an end log are relayed by the sweep"
            );
        }
        batch.clear();
    }
}
