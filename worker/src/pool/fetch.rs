//! The fetch loops: take messages from the queues only when the pool has places for them.
//!
//! One fetch loop per queue (each with its own blocking connection) takes messages only when
//! a place is free, and takes as many as there are free places in one round trip. There are
//! `concurrency + prefetch` places: the prefetched messages wait, in order, for a running
//! slot, so a slot that frees starts the next message at once instead of after a round trip
//! to Redis (without them every execution paid a take's round trip on top of its handler, and
//! a pool of N ran at most N messages per round trip). The take itself never blocks: a fetch
//! loop whose last take found nothing waits for a wake (`Consumer::wait_for_work`) before it
//! reserves places, so the fetch loops of idle queues (a partitioned queue's quiet
//! partitions) hold none of the places the busy ones need, and the busy ones share the
//! places in the semaphore's first-come order.
//!
//! The loops stop taking on the pool's cancellation: a take in flight then ends within the
//! block timeout, and anything it returns after the cancel is given straight back.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ax_queue::{Consumer, Delivery};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ack::Acks;
use super::execute::execute;
use super::reconcile::mark_in_hand;
use super::retrying::error_backoff;
use super::settle::give_back;
use super::stop::{stop_orders_of, watch};
use super::Shared;

/// The pool's two bounds: places for messages taken (running or waiting) and running slots.
#[derive(Clone)]
struct Slots {
    places: Arc<Semaphore>,
    running: Arc<Semaphore>,
}

/// What every fetch loop of a pool shares.
#[derive(Clone)]
struct Fetcher {
    sh: Arc<Shared>,
    slots: Slots,
    /// Where the executions run, so the pool can wait for them.
    executions: TaskTracker,
    /// The pool's cancellation: take nothing new.
    cancel: CancellationToken,
    /// The end of the shutdown grace: stop what still runs.
    hard_stop: CancellationToken,
    acks: Acks,
}

/// Starts one fetch loop per queue, its executions on `executions`, running in the slots of
/// `running` (`concurrency` of them, fewer while the slow start holds some back); the
/// returned tracker is done once every loop has stopped taking.
pub(super) fn start(
    sh: &Arc<Shared>,
    executions: &TaskTracker,
    cancel: &CancellationToken,
    hard_stop: &CancellationToken,
    acks: Acks,
    running: Arc<Semaphore>,
) -> TaskTracker {
    let fetcher = Fetcher {
        sh: sh.clone(),
        slots: Slots {
            places: Arc::new(Semaphore::new(sh.cfg.concurrency + sh.cfg.prefetch)),
            running,
        },
        executions: executions.clone(),
        cancel: cancel.clone(),
        hard_stop: hard_stop.clone(),
        acks,
    };
    let fetchers = TaskTracker::new();
    for q in &sh.cfg.queues {
        fetchers.spawn(fetcher.clone().fetch_loop(q.clone()));
    }
    fetchers.close();
    fetchers
}

impl Fetcher {
    async fn fetch_loop(self, queue_name: String) {
        let mut backoff = error_backoff();
        let mut consumer = None;
        // The last take found nothing: wait for work before reserving places, so a fetcher
        // of an idle queue (or partition) holds none of the places the busy ones need.
        let mut idle = false;
        while !self.cancel.is_cancelled() {
            let c = match &mut consumer {
                Some(c) => c,
                None => match self.consumer(&queue_name).await {
                    Ok(c) => consumer.insert(c),
                    Err(e) => {
                        tracing::warn!(queue = %queue_name, error = %e, "cannot open a consumer; retrying");
                        let wait = backoff.next_delay(&mut rand::rng());
                        pause(&self.cancel, wait).await;
                        continue;
                    }
                },
            };
            if idle {
                let waited = tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => break,
                    w = c.wait_for_work() => w,
                };
                if let Err(e) = waited {
                    tracing::warn!(queue = %queue_name, error = %e, retryable = e.is_retryable(), "waiting for messages failed");
                    let wait = backoff.next_delay(&mut rand::rng());
                    pause(&self.cancel, wait).await;
                    continue;
                }
            }
            let Some(permits) = self.places().await else {
                break;
            };
            match c.take_ready(permits.len()).await {
                Ok(deliveries) => {
                    backoff.reset();
                    idle = deliveries.is_empty();
                    self.start_all(deliveries, permits).await;
                }
                Err(e) => {
                    tracing::warn!(queue = %queue_name, error = %e, retryable = e.is_retryable(), "taking messages failed");
                    drop(permits);
                    let wait = backoff.next_delay(&mut rand::rng());
                    pause(&self.cancel, wait).await;
                }
            }
        }
    }

    async fn consumer(&self, queue_name: &str) -> ax_queue::Result<Consumer> {
        let sh = &self.sh;
        sh.queue
            .consumer(
                queue_name,
                &sh.cfg.worker_id,
                sh.cfg.block_timeout,
                sh.cfg.clock.now(),
            )
            .await
    }

    /// Waits for one free place, then takes as many more as are free, up to a batch; `None`
    /// when the pool stops first.
    async fn places(&self) -> Option<Vec<OwnedSemaphorePermit>> {
        let first = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return None,
            p = self.slots.places.clone().acquire_owned() => p.ok()?,
        };
        let mut permits = vec![first];
        while permits.len() < self.sh.cfg.fetch_batch {
            match self.slots.places.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        Some(permits)
    }

    /// Starts an execution of each delivery just taken, each with one of `permits`.
    async fn start_all(&self, deliveries: Vec<Delivery>, mut permits: Vec<OwnedSemaphorePermit>) {
        let sh = &self.sh;
        sh.counters
            .taken
            .fetch_add(deliveries.len() as u64, Ordering::Relaxed);
        let orders = stop_orders_of(sh, &deliveries).await;
        for (d, order) in deliveries.into_iter().zip(orders) {
            // One permit per delivery: take never returns more than asked.
            let Some(permit) = permits.pop() else { break };
            if self.cancel.is_cancelled() {
                give_back(sh, &d).await;
                continue;
            }
            mark_in_hand(sh, &d, true);
            let stop = watch(sh, &d, order);
            self.executions.spawn(execute(
                sh.clone(),
                d,
                stop,
                (permit, self.slots.running.clone()),
                self.cancel.clone(),
                self.hard_stop.clone(),
                self.acks.clone(),
            ));
        }
    }
}

async fn pause(cancel: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}
