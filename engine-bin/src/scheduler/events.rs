//! Worker events into the leader's dispatcher.
//!
//! Workers on every replica push their execution events to one Redis list; the leader reads
//! them in batches on its events interval and hands each to the dispatcher as it is (the
//! event type is the core's, serialized by the queue), which updates task states, releases
//! held fires and feeds the circuit breakers.
//!
//! The leader pops events as it reads them, so one that dies before writing what it heard
//! loses those ends, and its successor would show the tasks RUNNING for good. The history
//! list, written by the worker in the same pipeline as the event, has them too: a new
//! leader [reconciles](reconcile) every task its states show in flight against it (after
//! reading the events still waiting), and does the same, with its next read of events, for
//! fires Redis refused as duplicates (re-fires of what the dead leader had sent). An end
//! applied from history is not applied again if its event still arrives.

use std::sync::Arc;

use ax_scheduler_core::{Dispatcher, TaskKey, UtcMillis};
use tracing::warn;

use super::LeaderDeps;
use crate::metrics::BACKEND_REDIS;

/// Events read per round trip.
const EVENTS_BATCH: usize = 1000;

/// Reads every waiting event and applies it.
pub(super) async fn consume(deps: &LeaderDeps, dispatcher: &mut Dispatcher) {
    loop {
        let events = match deps.queue.take_events(EVENTS_BATCH).await {
            Ok(events) => events,
            Err(e) => {
                deps.metrics.backend_error(BACKEND_REDIS);
                warn!(error = %e, "cannot read execution events");
                return;
            }
        };
        let n = events.len();
        let now = UtcMillis::now();
        for record in events {
            let key = TaskKey::new(record.namespace, record.task_id);
            dispatcher.on_execution(
                &key,
                record.execution_id.as_u128(),
                record.attempt,
                &record.kind,
                now,
            );
        }
        if n < EVENTS_BATCH {
            return;
        }
    }
}

/// History entries read per task: the newest attempts of its latest fires.
const HISTORY_DEPTH: usize = 5;
/// Tasks whose history is read in one round trip.
const RECONCILE_BATCH: usize = 500;

/// Applies, for each (task, fire), the newest end the execution history holds for that fire.
/// A fire with no end in the history is still queued or running: its event will come.
pub(super) async fn reconcile(
    deps: &LeaderDeps,
    dispatcher: &mut Dispatcher,
    fires: &[(Arc<TaskKey>, UtcMillis)],
) -> usize {
    let mut applied = 0;
    for chunk in fires.chunks(RECONCILE_BATCH) {
        let tasks: Vec<(&str, &str)> = chunk
            .iter()
            .map(|(k, _)| (k.namespace.as_str(), k.id.as_str()))
            .collect();
        let histories = match deps.queue.history_many(&tasks, HISTORY_DEPTH).await {
            Ok(h) => h,
            Err(e) => {
                deps.metrics.backend_error(BACKEND_REDIS);
                warn!(error = %e, "cannot read execution history to reconcile task states");
                return applied;
            }
        };
        let now = UtcMillis::now();
        for ((key, fire_at), entries) in chunk.iter().zip(histories) {
            // Newest first: the latest attempt of that fire.
            if let Some(e) = entries.iter().find(|e| e.fire_at == *fire_at) {
                dispatcher.reconcile(
                    key,
                    e.execution_id.as_u128(),
                    e.attempt,
                    e.finished_at,
                    &e.end,
                    now,
                );
                applied += 1;
            }
        }
    }
    applied
}
