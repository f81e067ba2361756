//! The acker: one task settles the acks of all the pool's executions.
//!
//! Under load one script call then settles many messages instead of one round trip each.
//! The task has no token of its own: it ends when the last sender is gone, and the fetch
//! loops and executions hold the senders, so it outlives every ack asked of it and the pool
//! stops its other background roles only after it.

use std::sync::Arc;

use ax_queue::Delivery;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::settle::settle;
use super::Shared;

/// An ack waiting for the batcher; the execution learns whether the message was still taken.
type AckRequest = (Delivery, oneshot::Sender<Option<bool>>);

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
        let (deliveries, replies): (Vec<Delivery>, Vec<_>) = batch.drain(..).unzip();
        let q = &sh.queue;
        let taken = settle(&sh, "ack", || q.ack_many(&deliveries)).await;
        for (i, reply) in replies.into_iter().enumerate() {
            let _ = reply.send(taken.as_ref().map(|h| h.get(i).copied().unwrap_or(false)));
        }
    }
}

/// Hands an ack to the batcher and waits for it; `None` when it could not be settled.
pub(super) async fn ack(acks: &Acks, d: &Delivery) -> Option<bool> {
    let (tx, rx) = oneshot::channel();
    acks.send((d.clone(), tx)).ok()?;
    rx.await.ok().flatten()
}
