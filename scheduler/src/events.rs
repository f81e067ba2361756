//! Worker events into the leader's dispatcher.
//!
//! Workers on every replica append their execution events to a Redis stream (one per shard
//! when scheduling is sharded: the message names its shard, and so the stream its events go
//! to); the term of that shard (or the one leader) reads it in batches on its events interval and hands each event to the dispatcher as it is (the
//! event type is the core's, serialized by the queue), which updates task states, releases held
//! fires and feeds the circuit breakers.
//!
//! Reading does not remove an event: the leader acknowledges the events it read with the flush
//! that writes the states they changed (see the flusher), so a leader that dies in between
//! leaves them pending, and a new leader [claims](replay) and applies them before reading new
//! ones. (A start, whose RUNNING is written only if the execution runs long, is acknowledged
//! with the next flush all the same: a successor that missed it shows the task as it was until
//! the execution's end arrives.) Each state records the stream position of the last event
//! applied to it, written with that event's effects, so an event whose effects were written
//! before its leader died is not applied twice. A leader that read events and was deposed
//! before acknowledging them leaves them pending too; the leader claims entries pending longer
//! than [`STALE_PENDING`] on every [`PENDING_CHECK_INTERVAL`].
//!
//! Events can still be lost when the stream is trimmed (a long time without a leader) or by a
//! Redis without persistence. The execution history, written by the worker in the same pipeline
//! as the event, has the ends too: a new leader [reconciles](reconcile) every task its states
//! show in flight against it (after reading the events still waiting), and does the same, with
//! its next read of events, for fires Redis refused as duplicates (re-fires of what a dead
//! leader had sent). An end applied from history is not applied again if its event still
//! arrives.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ax_queue::EventEntry;
use ax_scheduler_core::{Dispatcher, EventPosition, TaskKey, UtcMillis};
use tracing::warn;

use crate::deps::TermDeps;
use crate::metrics::Backend;

/// Events read per round trip.
const EVENTS_BATCH: usize = 1000;
/// How often the leader looks for events read long ago and never acknowledged.
pub(super) const PENDING_CHECK_INTERVAL: Duration = Duration::from_secs(30);
/// How long an event stays read and unacknowledged before the leader claims it again: far
/// longer than a flush takes, so this leader's own unwritten events are rarely re-read (and
/// are ignored by position when they are).
pub(super) const STALE_PENDING: Duration = Duration::from_secs(60);

/// Reads every waiting event and applies it; its position goes to `unacked`.
pub(super) async fn consume(
    deps: &TermDeps,
    shard: Option<u32>,
    dispatcher: &mut Dispatcher,
    unacked: &mut BTreeSet<EventPosition>,
) {
    loop {
        let events = match deps.queue.read_events(shard, EVENTS_BATCH).await {
            Ok(events) => events,
            Err(e) => {
                deps.metrics.backend_error(Backend::Redis);
                warn!(error = %e, "cannot read execution events");
                return;
            }
        };
        let n = events.len();
        apply(dispatcher, events, unacked, deps.clock.now());
        if n < EVENTS_BATCH {
            return;
        }
    }
}

/// Claims and applies every event read at least `min_idle` ago and not acknowledged: at
/// takeover (`min_idle` zero) what the previous leader read and did not write, later what a
/// deposed leader read after this one took over. Returns how many it claimed.
pub(super) async fn replay(
    deps: &TermDeps,
    shard: Option<u32>,
    dispatcher: &mut Dispatcher,
    unacked: &mut BTreeSet<EventPosition>,
    min_idle: Duration,
) -> usize {
    let mut cursor = "0-0".to_owned();
    let mut claimed = 0;
    loop {
        let (next, events) = match deps
            .queue
            .claim_events(shard, min_idle, &cursor, EVENTS_BATCH)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                deps.metrics.backend_error(Backend::Redis);
                warn!(error = %e, "cannot claim unacknowledged execution events");
                return claimed;
            }
        };
        claimed += events.len();
        apply(dispatcher, events, unacked, deps.clock.now());
        if next == "0-0" {
            return claimed;
        }
        cursor = next;
    }
}

fn apply(
    dispatcher: &mut Dispatcher,
    events: Vec<EventEntry>,
    unacked: &mut BTreeSet<EventPosition>,
    now: UtcMillis,
) {
    for entry in events {
        unacked.insert(entry.position);
        let Some(record) = entry.record else { continue };
        let key = TaskKey::new(record.namespace, record.task_id);
        dispatcher.on_event(
            &key,
            entry.position,
            record.execution_id,
            record.attempt,
            &record.kind,
            now,
        );
    }
}

/// History entries read per task: the newest attempts of its latest fires.
const HISTORY_DEPTH: usize = 5;
/// Tasks whose history is read in one round trip.
const RECONCILE_BATCH: usize = 500;

/// Applies, for each (task, fire), the newest end the execution history holds for that fire.
/// A fire with no end in the history is still queued or running: its event will come.
pub(super) async fn reconcile(
    deps: &TermDeps,
    dispatcher: &mut Dispatcher,
    fires: &[(Arc<TaskKey>, UtcMillis)],
) -> usize {
    let mut applied = 0;
    for chunk in fires.chunks(RECONCILE_BATCH) {
        let tasks: Vec<(&str, &str)> = chunk.iter().map(|(k, _)| (&*k.namespace, &*k.id)).collect();
        let histories = match deps.queue.history_many(&tasks, HISTORY_DEPTH).await {
            Ok(h) => h,
            Err(e) => {
                deps.metrics.backend_error(Backend::Redis);
                warn!(error = %e, "cannot read execution history to reconcile task states");
                return applied;
            }
        };
        let now = deps.clock.now();
        for ((key, fire_at), entries) in chunk.iter().zip(histories) {
            // Newest first: the latest attempt of that fire.
            if let Some(e) = entries.iter().find(|e| e.fire_at == *fire_at) {
                dispatcher.reconcile(key, e.execution_id, e.attempt, e.finished_at, &e.end, now);
                applied += 1;
            }
        }
    }
    applied
}
