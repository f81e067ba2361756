//! Fan-out (see [`crate::fanout`]): one fire sent as many pieces, and their ends counted
//! back into one.
//!
//! A fire's progress lives in its task's state, not in the dispatcher: it must be written
//! with the pieces' ends so a new leader finishes the count, and the task holds it next to
//! the rest of what is written. So this part has no state of its own: it turns a fire that
//! leaves the ready queue into its pieces ([`FannedOutFire`]), addresses broadcast fires once
//! the shell has listed the workers, and folds each piece's last end into its fire's.

use std::sync::Arc;

use crate::execution::{shown_error, AttemptEnd, AttemptOutcome, EventPosition, ExecutionEvent};
use crate::execution_id::ExecutionId;
use crate::fanout::{FanoutProgress, Piece};
use crate::task::{Fanout, OverlapPolicy, MAX_PIECES};
use crate::time::UtcMillis;
use crate::workflow::StepOutcome;

use super::armed::{Armed, FireKind};
use super::dependencies::Dependencies;
use super::output::{failure_notice, Notice};
use super::{Dispatch, Dispatcher};
use crate::key::TaskKey;

/// A fire on its way out of the dispatcher: its instant and the ids it carries.
#[derive(Debug)]
pub(super) struct Outgoing {
    pub(super) fire_at: UtcMillis,
    pub(super) run_now: Option<ExecutionId>,
    pub(super) run_id: Option<ExecutionId>,
    pub(super) starts_run: bool,
}

impl Outgoing {
    /// The fire as one execution of `task`, not (yet) fanned out.
    pub(super) fn dispatch(
        self,
        task: &Armed,
        overlap: OverlapPolicy,
        broadcast: bool,
    ) -> Dispatch {
        Dispatch {
            key: Arc::clone(&task.key),
            spec: Arc::clone(&task.spec),
            fire_at: self.fire_at,
            overlap,
            run_now: self.run_now,
            run_id: self.run_id,
            starts_run: self.starts_run,
            piece: None,
            broadcast,
        }
    }
}

/// The pieces of one fanned-out fire, to dispatch.
struct FannedOutFire<'a> {
    fire: Outgoing,
    fanout: ExecutionId,
    total: u32,
    /// A broadcast fire's workers, by piece (empty for `shards`).
    workers: &'a [String],
}

impl<'a> FannedOutFire<'a> {
    /// The fire `progress` records, to send its pieces not ended again (after a failover,
    /// or to the workers a broadcast was addressed to).
    fn of(progress: &'a FanoutProgress, fire: Outgoing) -> Self {
        debug_assert!(
            progress.workers.is_empty() || progress.workers.len() == progress.total as usize,
            "a broadcast fire has one worker per piece"
        );
        FannedOutFire {
            fire,
            fanout: progress.id,
            total: progress.total,
            workers: &progress.workers,
        }
    }

    /// Its pieces `progress` shows open.
    fn open(&self, task: &Armed, progress: &FanoutProgress) -> Vec<Dispatch> {
        progress
            .open()
            .map(|index| self.piece(task, index))
            .collect()
    }

    /// Piece `index`: side by side with the others, so overlap `allow`.
    fn piece(&self, task: &Armed, index: u32) -> Dispatch {
        Dispatch {
            key: Arc::clone(&task.key),
            spec: Arc::clone(&task.spec),
            fire_at: self.fire.fire_at,
            overlap: OverlapPolicy::Allow,
            run_now: self.fire.run_now,
            run_id: self.fire.run_id,
            starts_run: self.fire.starts_run,
            piece: Some(Piece {
                index,
                total: self.total,
                fanout: self.fanout,
                worker: self.workers.get(index as usize).cloned(),
            }),
            broadcast: false,
        }
    }
}

/// Sends `fire` of a fanned-out task: every piece of a new `shards` fire (its progress
/// started), a broadcast fire unaddressed (the shell lists the workers), or the pieces not
/// ended of a fire addressed before.
pub(super) fn fan_out(task: &mut Armed, fanout: Fanout, fire: Outgoing, out: &mut Vec<Dispatch>) {
    let id = fire
        .run_now
        .unwrap_or_else(|| ExecutionId::for_fire(&task.key, fire.fire_at));
    let total = match fanout {
        Fanout::Pieces(total) => total,
        Fanout::Broadcast => {
            match task.state.fanouts.iter().find(|f| f.id == id) {
                // Addressed before (a fire replayed after a failover): its pieces not ended
                // go to the workers they were addressed to.
                Some(progress) => {
                    out.extend(FannedOutFire::of(progress, fire).open(task, progress))
                }
                None => out.push(fire.dispatch(task, OverlapPolicy::Allow, true)),
            }
            return;
        }
    };
    if !task.state.fanouts.iter().any(|f| f.id == id) {
        task.state
            .fanouts
            .push(FanoutProgress::new(id, fire.fire_at, total, fire.run_id));
    }
    let fire = FannedOutFire {
        fire,
        fanout: id,
        total,
        workers: &[],
    };
    out.extend((0..total).map(|index| fire.piece(task, index)));
}

/// Sends again the pieces not ended of the task's fire `id` (a new leader's resend).
pub(super) fn resend(task: &Armed, id: ExecutionId, deps: &Dependencies, out: &mut Vec<Dispatch>) {
    let Some(progress) = task.state.fanouts.iter().find(|f| f.id == id) else {
        return;
    };
    let fire = Outgoing {
        fire_at: progress.fire_at,
        run_now: None,
        run_id: progress.run,
        starts_run: progress.run.is_none() && deps.starts_runs(&task.key, &task.spec),
    };
    out.extend(FannedOutFire::of(progress, fire).open(task, progress));
}

impl Dispatcher {
    /// Addresses a broadcast fire `poll` returned (its `broadcast` set) to `workers`, the
    /// live workers of the task's queue the shell found: one piece each, in sorted order,
    /// at most [`MAX_PIECES`]. The fire's progress keeps the list (written at once: a new
    /// leader sends what is not ended to the same workers). With no worker the fire ends
    /// failed here, with a [`Notice::NoLiveWorker`]. Returns the executions to enqueue;
    /// a fire addressed already gets its pieces not ended, as addressed then.
    pub fn address_broadcast(
        &mut self,
        dispatch: &Dispatch,
        mut workers: Vec<String>,
        now: UtcMillis,
    ) -> Vec<Dispatch> {
        let Some(task) = self.tasks.get_mut(&dispatch.key) else {
            return Vec::new();
        };
        let Some(id) = dispatch.broadcast_fanout_id() else {
            return Vec::new();
        };
        if !task.state.fanouts.iter().any(|f| f.id == id) {
            workers.sort();
            workers.dedup();
            workers.truncate(MAX_PIECES as usize);
            if workers.is_empty() {
                self.no_live_worker(dispatch, id, now);
                return Vec::new();
            }
            task.state.fanouts.push(FanoutProgress::broadcast(
                id,
                dispatch.fire_at,
                workers,
                dispatch.run_id,
            ));
            self.writes.current(&task.key);
        }
        let Some(progress) = task.state.fanouts.iter().find(|f| f.id == id) else {
            return Vec::new();
        };
        let fire = Outgoing {
            fire_at: dispatch.fire_at,
            run_now: dispatch.run_now,
            run_id: dispatch.run_id,
            starts_run: dispatch.starts_run,
        };
        FannedOutFire::of(progress, fire).open(task, progress)
    }

    /// A broadcast fire found no live worker: it ends failed at once, as one execution.
    fn no_live_worker(&mut self, dispatch: &Dispatch, id: ExecutionId, now: UtcMillis) {
        let Some(task) = self.tasks.get_mut(&dispatch.key) else {
            return;
        };
        let reason = format!("no live worker serves queue {}", task.spec.queue);
        task.state.last_error = Some(reason.clone());
        let key = Arc::clone(&task.key);
        self.notices.push(Notice::NoLiveWorker {
            key: Arc::clone(&key),
            fanout: id,
            fire_at: dispatch.fire_at,
            run: dispatch.run_id,
            queue: Arc::clone(&task.spec.queue),
            reason: reason.clone(),
        });
        let end = AttemptEnd::new(AttemptOutcome::Failed, Some(reason));
        let event = ExecutionEvent::Finished {
            at: now,
            end: end.clone(),
        };
        self.apply_to_state(&key, None, id, 0, &event, false, now);
        self.on_step_end(&key, id, StepOutcome::of(&end), now);
    }

    /// A piece's event: a start or a retry as for any execution; a final end counted in its
    /// fire's progress. The fire's one end (all succeeded, or how many failed) is applied
    /// once the last piece has ended, and returned (its fan-out id as an execution, and the
    /// outcome) for the dependency chain.
    pub(super) fn apply_piece(
        &mut self,
        key: &TaskKey,
        position: Option<EventPosition>,
        execution: ExecutionId,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) -> Option<(ExecutionId, StepOutcome)> {
        let ExecutionEvent::Finished { at, end } = event else {
            self.apply_to_state(key, position, execution, attempt, event, true, now);
            return None;
        };
        if !end.is_last() {
            self.apply_to_state(key, position, execution, attempt, event, true, now);
            return None;
        }
        let task = self.tasks.get_mut(key)?;
        let (slot, index) = task
            .state
            .fanouts
            .iter()
            .enumerate()
            .find_map(|(slot, f)| Some((slot, f.id.piece_index(execution, f.total)?)))?;
        if let Some(p) = position {
            if task.state.last_event.is_some_and(|applied| applied >= p) {
                return None;
            }
            task.state.last_event = Some(p);
        }
        let progress = &mut task.state.fanouts[slot];
        if !progress.record(index, end.is_success()) {
            return None;
        }
        // The piece's own last attempt; the fire's end below is not an attempt of its own.
        self.notices
            .extend(failure_notice(&task.key, execution, attempt, event));
        if let Some(e) = &end.error {
            task.state.last_error = Some(shown_error(e.clone()));
        }
        self.writes.current(&task.key);
        if !task.state.fanouts[slot].complete() {
            return None;
        }
        let done = task.state.fanouts.remove(slot);
        let whole = fanout_end(&done, task.state.last_error.as_deref());
        let fanout = done.id;
        // The fire's end, as one execution's: counted, settled, a held fire released.
        let event = ExecutionEvent::Finished {
            at: *at,
            end: whole.clone(),
        };
        self.apply_to_state(key, None, fanout, 0, &event, false, now);
        Some((fanout, StepOutcome::of(&whole)))
    }

    /// Queues again, for a task just loaded, the pieces not ended of its fires in progress
    /// (those already queued are refused as duplicates).
    pub(super) fn resend_fanouts(&mut self, task: &Armed, now: UtcMillis) {
        for progress in &task.state.fanouts {
            self.fires
                .push(task, now, FireKind::Resend(progress.id), now);
        }
    }
}

/// The one end of a fanned-out fire whose pieces have all ended: it succeeded when every
/// piece did; otherwise it failed, with the count and the last piece error.
fn fanout_end(done: &FanoutProgress, last_error: Option<&str>) -> AttemptEnd {
    debug_assert!(done.complete(), "a fire ends once every piece has");
    let failures = done.failures();
    AttemptEnd::new(
        if failures == 0 {
            AttemptOutcome::Succeeded
        } else {
            AttemptOutcome::Failed
        },
        (failures > 0).then(|| {
            // Worded in the spec's own term (`fanout.shards`): users read this error.
            format!(
                "{failures} of {} shards failed; last error: {}",
                done.total,
                last_error.unwrap_or_default()
            )
        }),
    )
}
