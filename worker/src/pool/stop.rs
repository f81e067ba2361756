//! The stop listener: stopping one execution (an operator's kill, or overlap `replace`).
//!
//! Every execution this pool has in hand, running or waiting for a slot, is registered with a
//! `watch` channel; one loop asks Redis every [`STOP_POLL_INTERVAL`] about all of them in one
//! round trip ([`ax_queue::Queue::stop_orders`]) and signals the ones to stop, so the cost
//! does not grow with a round trip per execution. Messages just taken are asked about before
//! they start ([`stop_orders_of`]), so a killed message that comes back (a dead worker's,
//! given back by the reaper) never runs. A stopped execution ends `killed`: acknowledged, no
//! retry, not a failure. However an attempt is stopped (timeout, kill, shutdown), its
//! handler's token is cancelled and the handler gets its [`crate::Handler::stop_grace`] to
//! end by itself (the `command` handler stops a process group) before its future is dropped.

use std::sync::Arc;
use std::time::Duration;

use ax_queue::{Delivery, StopOrder, StopProbe};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Shared;

/// How often the pool asks whether any execution it has in hand must stop (killed, or replaced
/// under overlap `replace`): a kill takes effect within it plus a round trip.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// One attempt in hand as the stop loop sees it.
pub(super) struct Watched {
    probe: StopProbe,
    stop: watch::Sender<Option<StopOrder>>,
}

/// Registers an attempt in hand with the stop loop; `order` is what was known when it was taken.
pub(super) fn watch(
    sh: &Shared,
    d: &Delivery,
    order: Option<StopOrder>,
) -> watch::Receiver<Option<StopOrder>> {
    let (stop, rx) = watch::channel(order);
    let key = (d.message.execution_id.as_u128(), d.message.attempt);
    let watched = Watched {
        probe: StopProbe::of(&d.message),
        stop,
    };
    sh.watched
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key, watched);
    rx
}

pub(super) fn unwatch(sh: &Shared, d: &Delivery) {
    let key = (d.message.execution_id.as_u128(), d.message.attempt);
    sh.watched
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&key);
}

/// The kill orders of messages just taken, so a killed one does not start. Only kills: a
/// `replace` execution starts and is stopped by the loop when its marker moved, as before.
/// On a Redis error nothing is known; the stop loop asks again within its interval.
pub(super) async fn stop_orders_of(sh: &Shared, deliveries: &[Delivery]) -> Vec<Option<StopOrder>> {
    let probes: Vec<StopProbe> = deliveries
        .iter()
        .map(|d| StopProbe {
            overlap: ax_scheduler_core::OverlapPolicy::Allow,
            ..StopProbe::of(&d.message)
        })
        .collect();
    match sh.queue.stop_orders(&probes).await {
        Ok(orders) => orders,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read kill orders of a take; the stop loop will");
            vec![None; deliveries.len()]
        }
    }
}

/// Asks Redis, for every attempt the pool has in hand, whether it must stop, and tells those that
/// must. A Redis error stops nothing: it is asked again next round.
pub(super) async fn stop_loop(sh: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(STOP_POLL_INTERVAL) => {}
        }
        let (keys, probes): (Vec<(u128, u32)>, Vec<StopProbe>) = {
            let watched = sh
                .watched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            watched
                .iter()
                .filter(|(_, w)| w.stop.borrow().is_none())
                .map(|(k, w)| (*k, w.probe.clone()))
                .unzip()
        };
        if probes.is_empty() {
            continue;
        }
        let orders = match sh.queue.stop_orders(&probes).await {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read stop orders; asking again next round");
                continue;
            }
        };
        let watched = sh
            .watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (key, order) in keys.iter().zip(orders) {
            if let (Some(order), Some(w)) = (order, watched.get(key)) {
                w.stop.send_replace(Some(order));
            }
        }
    }
}

/// Resolves with the order once the attempt is told to stop; never when its pool forgets it.
pub(super) async fn stopped(rx: &mut watch::Receiver<Option<StopOrder>>) -> StopOrder {
    let order = rx.wait_for(Option::is_some).await.map(|o| *o);
    match order {
        Ok(order) => order.unwrap_or(StopOrder::Killed),
        Err(_) => std::future::pending().await,
    }
}
