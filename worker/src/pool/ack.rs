//! The acker: one task settles the acks of all the pool's executions.
//!
//! Under load one script call then settles many messages instead of one round trip each.
//! Each ack carries its attempt's end record, appended to the end log by the same script.
//! The task has no token of its own: it ends when the last sender is gone, and the fetch
//! loops and executions hold the senders, so it outlives every ack asked of it and the pool
//! stops its other background roles only after it.

use std::sync::Arc;

use ax_queue::{Delivery, EndRecord, Settled};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::retrying::settle;
use super::Shared;

/// An ack waiting for the batcher, with the end to record; the execution learns how it was
/// settled and gets its record back.
type AckRequest = (
    Delivery,
    EndRecord,
    oneshot::Sender<(Option<Settled>, EndRecord)>,
);

/// Where executions send their acks.
pub(super) type Acks = UnboundedSender<AckRequest>;

/// Most acks settled in one script call.
const ACK_BATCH: usize = 256;

/// Starts the acker; it ends once every clone of the returned sender is dropped.
pub(super) fn start(sh: Arc<Shared>) -> (Acks, JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<AckRequest>();
    (tx, tokio::spawn(ack_loop(sh, rx)))
}

async fn ack_loop(sh: Arc<Shared>, mut rx: UnboundedReceiver<AckRequest>) {
    let mut batch = Vec::with_capacity(ACK_BATCH);
    while rx.recv_many(&mut batch, ACK_BATCH).await > 0 {
        let items: Vec<(&Delivery, Option<&EndRecord>)> =
            batch.iter().map(|(d, r, _)| (d, Some(r))).collect();
        let q = &sh.queue;
        let settled = settle(&sh, "ack", || q.ack_recorded(&items)).await;
        drop(items);
        for (i, (_, record, reply)) in batch.drain(..).enumerate() {
            let how = settled
                .as_ref()
                .map(|s| s.get(i).cloned().unwrap_or(Settled::NotTaken));
            let _ = reply.send((how, record));
        }
    }
}

/// Hands an ack with its end `record` to the batcher and waits for it: how it was settled
/// (`None` when it could not be) and the record; `None` for the record only when the acker
/// is gone (it outlives every execution, so only after a panic in it).
pub(super) async fn ack(
    acks: &Acks,
    d: &Delivery,
    record: EndRecord,
) -> (Option<Settled>, Option<EndRecord>) {
    let (tx, rx) = oneshot::channel();
    if let Err(e) = acks.send((d.clone(), record, tx)) {
        return (None, Some(e.0 .1));
    }
    match rx.await {
        Ok((how, record)) => (how, Some(record)),
        Err(_) => (None, None),
    }
}
