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
//! An event whose task's write waits (a fire's RUNNING, a periodic task's routine runs
//! gathered for up to `routine_write_delay`, see the dispatcher's state writes) is held:
//! acknowledged with the flush that makes that write, not before, so that a leader dying
//! meanwhile leaves it for its successor. A stream entry holds events of several tasks, and
//! is acknowledged once every one of them is written ([`Unacked`]).
//!
//! Events can still be lost when the stream is trimmed (a long time without a leader) or by a
//! Redis without persistence. The execution history, written by the worker in the same pipeline
//! as the event, has the ends too: a new leader [reconciles](reconcile) every task its states
//! show in flight against it (after reading the events still waiting), and does the same, with
//! its next read of events, for fires Redis refused as duplicates (re-fires of what a dead
//! leader had sent). An end applied from history is not applied again if its event still
//! arrives.

use std::collections::{BTreeMap, BTreeSet};
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

/// Most stream entries held for writes that wait; past it, every waiting write is made at
/// the next flush. A quarter of what the stream keeps ([`ax_queue::EVENTS_CAP`]): its
/// trimming takes the oldest entries first, held or not, and must never reach a held one,
/// which a successor would then not find.
pub(super) const MAX_HELD: usize = ax_queue::EVENTS_CAP / 4;

/// The stream positions of the events applied and not yet acknowledged.
#[derive(Debug, Default)]
pub(super) struct Unacked {
    /// Events whose effects go with the next flush.
    ready: BTreeSet<EventPosition>,
    /// Events of tasks whose write waits, with those tasks: acknowledged once none waits.
    held: BTreeMap<EventPosition, Vec<Arc<TaskKey>>>,
}

impl Unacked {
    /// Notes an event applied to `key`'s task (`None`: an entry that did not decode).
    fn note(&mut self, dispatcher: &Dispatcher, position: EventPosition, key: Option<TaskKey>) {
        match key.as_ref().and_then(|k| dispatcher.pending_write_key(k)) {
            // The dispatcher's own key: no allocation per held event.
            Some(held) => self
                .held
                .entry(position)
                .or_default()
                .push(Arc::clone(held)),
            None => {
                self.ready.insert(position);
            }
        }
    }

    /// Moves to the ready ones the held events none of whose tasks' writes waits any more:
    /// called after the writes of a flush were taken, they go with that flush.
    pub(super) fn release(&mut self, dispatcher: &Dispatcher) {
        let ready = &mut self.ready;
        self.held.retain(|position, keys| {
            keys.retain(|k| dispatcher.write_pending(k));
            if keys.is_empty() {
                ready.insert(*position);
            }
            !keys.is_empty()
        });
    }

    /// Whether so many entries are held that the writes they wait for are to be made now.
    pub(super) fn too_many_held(&self) -> bool {
        self.held.len() > MAX_HELD
    }

    /// Whether no event is ready to be acknowledged.
    pub(super) fn nothing_ready(&self) -> bool {
        self.ready.iter().all(|p| self.held.contains_key(p))
    }

    /// The events to acknowledge with this flush: the ready ones not held for another of
    /// their entry's tasks.
    pub(super) fn take_ready(&mut self) -> Vec<EventPosition> {
        let held = &self.held;
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ready)
            .into_iter()
            .partition(|p| !held.contains_key(p));
        self.ready.extend(stay);
        go
    }
}

/// Reads every waiting event and applies it; its position goes to `unacked`.
pub(super) async fn consume(
    deps: &TermDeps,
    shard: Option<u32>,
    dispatcher: &mut Dispatcher,
    unacked: &mut Unacked,
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
    unacked: &mut Unacked,
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
    unacked: &mut Unacked,
    now: UtcMillis,
) {
    for entry in events {
        let Some(record) = entry.record else {
            unacked.note(dispatcher, entry.position, None);
            continue;
        };
        let key = TaskKey::new(record.namespace, record.task_id);
        dispatcher.on_event(
            &key,
            entry.position,
            record.execution_id,
            record.attempt,
            &record.kind,
            now,
        );
        unacked.note(dispatcher, entry.position, Some(key));
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

#[cfg(test)]
mod tests {
    use super::*;
    use ax_scheduler_core::{DispatcherConfig, TaskSpec};

    fn pos(seq: u64) -> EventPosition {
        EventPosition { ms: 1, seq }
    }

    /// A dispatcher with one task, `ns/a` every second, whose first state waits to be written.
    fn with_task_a() -> (Dispatcher, UtcMillis) {
        let now = UtcMillis(1_800_000_000_000);
        let mut d = Dispatcher::new(DispatcherConfig::default(), now);
        let spec =
            TaskSpec::from_json(br#"{"handler":"log","schedule":{"every":"1s"}}"#, "ns", "a")
                .unwrap();
        d.upsert(Arc::new(TaskKey::new("ns", "a")), spec, 1, None, now);
        (d, now)
    }

    #[test]
    fn an_event_is_acknowledged_with_the_flush_that_writes_every_task_it_changed() {
        let (mut d, now) = with_task_a();
        let a = || Some(TaskKey::new("ns", "a"));
        let b = || Some(TaskKey::new("ns", "b"));
        let mut unacked = Unacked::default();
        // `a` has a write waiting (its first state); `b` is not armed here.
        unacked.note(&d, pos(1), a());
        unacked.note(&d, pos(2), b());
        unacked.note(&d, pos(3), None);
        // One entry with events of both.
        unacked.note(&d, pos(4), b());
        unacked.note(&d, pos(4), a());
        assert!(!unacked.nothing_ready());
        assert_eq!(unacked.take_ready(), [pos(2), pos(3)]);
        assert!(unacked.nothing_ready(), "the rest waits for a's write");
        unacked.release(&d);
        assert!(unacked.nothing_ready(), "not yet taken");
        assert!(!d.take_writes(now).is_empty());
        unacked.release(&d);
        assert_eq!(unacked.take_ready(), [pos(1), pos(4)]);
        assert!(unacked.nothing_ready());
    }

    #[test]
    fn past_a_quarter_of_the_stream_held_the_waiting_writes_are_due() {
        let (d, _) = with_task_a();
        let mut unacked = Unacked::default();
        for seq in 0..=u64::try_from(MAX_HELD).unwrap() {
            assert!(!unacked.too_many_held());
            unacked.note(&d, pos(seq), Some(TaskKey::new("ns", "a")));
        }
        assert!(unacked.too_many_held());
    }
}
