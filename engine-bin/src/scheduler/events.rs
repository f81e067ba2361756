//! Worker events into the leader's dispatcher.
//!
//! Workers on every replica push their execution events to one Redis list; the leader reads
//! them in batches on its events interval and hands each to the dispatcher as it is (the
//! event type is the core's, serialized by the queue), which updates task states, releases
//! held fires and feeds the circuit breakers.

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
                deps.metrics
                    .backend_errors_total
                    .with_label_values(&[BACKEND_REDIS])
                    .inc();
                warn!(error = %e, "cannot read execution events");
                return;
            }
        };
        let n = events.len();
        let now = UtcMillis::now();
        for record in events {
            let key = TaskKey::new(record.namespace, record.task_id);
            dispatcher.on_execution(&key, &record.kind, now);
        }
        if n < EVENTS_BATCH {
            return;
        }
    }
}
