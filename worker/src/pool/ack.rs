//! The acker: one task settles the acks of all the pool's executions.
//!
//! Under load one script call then settles many messages instead of one round trip each.
//! While acks come often (the last call was moments ago) the acker also lets the runtime run
//! the other ready tasks, a few turns, and takes the acks they hand it before it calls: at
//! 10 000 executions a second the calls otherwise settled a few each, and each call's own
//! bookkeeping in Redis cost about one command an execution. It never waits on a timer: an
//! execution holds its place in the pool until its ack returns, so a millisecond's linger
//! cost the pool a third of its rate at concurrency 50. A lone ack, after a quiet spell, goes
//! at once.
//! Each ack carries its attempt's end record, appended to the end log by the same script.
//! The task has no token of its own: it ends when the last sender is gone, and the fetch
//! loops and executions hold the senders, so it outlives every ack asked of it and the pool
//! stops its other background roles only after it.

use std::sync::Arc;
use std::time::Duration;

use ax_queue::{Delivery, EndRecord, Settled};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

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

/// How many times the acker yields to the other ready tasks for more acks, while they come
/// often.
const TURNS: usize = 4;

/// Acks come often when the last call started less than this long ago.
const BUSY: Duration = Duration::from_millis(10);

/// Starts the acker; it ends once every clone of the returned sender is dropped.
pub(super) fn start(sh: Arc<Shared>) -> (Acks, JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<AckRequest>();
    (tx, tokio::spawn(ack_loop(sh, rx)))
}

async fn ack_loop(sh: Arc<Shared>, mut rx: UnboundedReceiver<AckRequest>) {
    let mut batch = Vec::with_capacity(ACK_BATCH);
    let mut last_call: Option<Instant> = None;
    while rx.recv_many(&mut batch, ACK_BATCH).await > 0 {
        gather(&mut rx, &mut batch, last_call).await;
        last_call = Some(Instant::now());
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

/// Adds to `batch` (just received) what the other ready tasks send within [`TURNS`] yields,
/// when the last call was less than [`BUSY`] ago; it stops at a turn that brought nothing
/// and when the batch is full.
async fn gather<T>(rx: &mut UnboundedReceiver<T>, batch: &mut Vec<T>, last_call: Option<Instant>) {
    if last_call.is_none_or(|at| at.elapsed() >= BUSY) {
        return;
    }
    for _ in 0..TURNS {
        if batch.len() >= ACK_BATCH {
            return;
        }
        tokio::task::yield_now().await;
        let before = batch.len();
        while batch.len() < ACK_BATCH {
            let Ok(more) = rx.try_recv() else { break };
            batch.push(more);
        }
        if batch.len() == before {
            return;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends 6 items as soon as it runs, then 4 more 5 ms later.
    fn trickle(tx: tokio::sync::mpsc::UnboundedSender<u32>) {
        tokio::spawn(async move {
            for i in 0..6 {
                let _ = tx.send(i);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            for i in 6..10 {
                let _ = tx.send(i);
            }
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_acker_gathers_what_ready_tasks_send_without_waiting_on_a_timer() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batch = vec![0];
        trickle(tx);
        let started = Instant::now();
        let last_call = Some(started - Duration::from_millis(2));
        gather(&mut rx, &mut batch, last_call).await;
        assert_eq!(batch.len(), 1 + 6, "the acks of the ready tasks go with it");
        assert_eq!(Instant::now(), started, "and the later ones do not hold it");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_after_a_quiet_spell_goes_at_once() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let started = Instant::now();
        trickle(tx);
        for last_call in [None, Some(started - Duration::from_millis(50))] {
            let mut batch = vec![0];
            gather(&mut rx, &mut batch, last_call).await;
            assert_eq!(batch.len(), 1);
        }
        assert_eq!(Instant::now(), started, "no wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_goes_at_once() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        trickle(tx);
        let mut batch: Vec<u32> = (0..ACK_BATCH as u32).collect();
        let started = Instant::now();
        gather(&mut rx, &mut batch, Some(started)).await;
        assert_eq!((batch.len(), Instant::now()), (ACK_BATCH, started));
    }
}
