//! The reconciler: checks the processing lists against what the pool really has in hand.
//!
//! A take whose reply is lost after Redis moved its messages leaves them in this worker's
//! processing list with no execution to settle them, and the reaper gives back only a dead
//! worker's messages. So the pool keeps the set of attempts it has in hand ([`mark_in_hand`]), and a loop
//! of its own, on a slow period, gives back what the lists hold beyond it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ax_queue::Delivery;
use tokio_util::sync::CancellationToken;

use super::Shared;

/// Marks a delivery as in hand at this pool (or no longer).
pub(super) fn mark_in_hand(sh: &Shared, d: &Delivery, in_hand: bool) {
    let key = (d.message.execution_id.as_u128(), d.message.attempt);
    // A poisoned lock only means a panic elsewhere while holding it; the set stays usable.
    let mut set = sh
        .in_hand
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if in_hand {
        set.insert(key);
    } else {
        set.remove(&key);
    }
}

/// Gives back what the processing lists hold and the pool does not: messages a failed reply
/// left there (a take whose answer was lost after Redis moved them), which would
/// otherwise stay until the process stops. An entry must be found unknown on two rounds in a
/// row, so a take whose reply is on its way is never mistaken for one.
pub(super) async fn reconcile_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let mut suspects: HashMap<String, HashSet<String>> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(sh.cfg.reconcile_interval) => {}
        }
        for q in &sh.cfg.queues {
            let entries = match sh.queue.processing_entries(q, &sh.cfg.worker_id).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "cannot read the processing list");
                    continue;
                }
            };
            let unknown: HashSet<String> = {
                let in_hand = sh
                    .in_hand
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                entries
                    .into_iter()
                    .filter(|raw| match ax_queue::ExecutionMessage::from_json(raw) {
                        Ok(m) => !in_hand.contains(&(m.execution_id.as_u128(), m.attempt)),
                        Err(_) => true,
                    })
                    .collect()
            };
            let before = suspects.remove(q).unwrap_or_default();
            let (stuck, fresh): (HashSet<String>, HashSet<String>) =
                unknown.into_iter().partition(|raw| before.contains(raw));
            for raw in stuck {
                release_stuck(&sh, q, raw).await;
            }
            suspects.insert(q.clone(), fresh);
        }
    }
}

async fn release_stuck(sh: &Shared, queue: &str, raw: String) {
    let worker = &sh.cfg.worker_id;
    let result = match ax_queue::ExecutionMessage::from_json(&raw) {
        Ok(message) => {
            let d = Delivery {
                queue: queue.to_owned(),
                worker_id: worker.clone(),
                raw,
                message,
                limited_wait: None,
            };
            sh.queue.release(&d).await
        }
        Err(e) => {
            sh.queue
                .dead_letter_undecodable(queue, worker, &raw, &e.to_string(), sh.cfg.clock.now())
                .await
        }
    };
    match result {
        Ok(true) => tracing::warn!(
            queue,
            "gave back a message this worker had taken without knowing it (a lost reply)"
        ),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(queue, error = %e, "cannot give back a stuck message; trying again next round")
        }
    }
}
