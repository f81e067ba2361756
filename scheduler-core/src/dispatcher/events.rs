//! Execution events: a worker's start and end of an attempt, from the event log, from a
//! report, or read back from the execution history by a new leader.
//!
//! Every source can repeat an event (a leader that died before acknowledging, an end read
//! both from the history and from its event), so applying one is idempotent twice over: the
//! event log's position goes into the state with the event's effects, and the last attempt
//! end applied is remembered by the task. Fanned-out tasks' events are pieces, counted in
//! their fire's progress first (see the `pieces` module).

use std::sync::Arc;

use crate::execution::{AttemptEnd, AttemptOutcome, EventPosition, ExecutionEvent};
use crate::execution_id::ExecutionId;
use crate::status::TaskStatus;
use crate::time::UtcMillis;
use crate::workflow::StepOutcome;

use super::armed::{set_status, Armed, FireKind};
use super::output::failure_notice;
use super::Dispatcher;
use crate::key::TaskKey;

impl Dispatcher {
    /// Takes a worker event read from the event log at `position`. An event at or before the
    /// last one applied to the task's state is already in it (read again because the leader
    /// that read it first died before acknowledging it) and is ignored; the position goes
    /// into the state with the event's effects, so the two are written together.
    pub fn on_event(
        &mut self,
        key: &TaskKey,
        position: EventPosition,
        execution: ExecutionId,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) {
        self.apply_execution(key, Some(position), execution, attempt, event, now);
    }

    /// Takes an execution event reported by a worker.
    /// `execution` and `attempt` name the attempt.
    pub fn on_execution(
        &mut self,
        key: &TaskKey,
        execution: ExecutionId,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) {
        self.apply_execution(key, None, execution, attempt, event, now);
    }

    /// Both of the above: an event from the event log carries its `position`.
    fn apply_execution(
        &mut self,
        key: &TaskKey,
        position: Option<EventPosition>,
        execution: ExecutionId,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) {
        let Some(task) = self.tasks.get(key) else {
            // Unknown: neither its state nor a run has anything to take the event.
            return;
        };
        // A fanned-out task's executions are pieces: a final end that matches no fire in
        // progress is one already counted (read again), not an execution of its own.
        if task.spec.fanout.is_some() {
            if let Some((step, outcome)) =
                self.apply_piece(key, position, execution, attempt, event, now)
            {
                self.on_step_end(key, step, outcome, now);
            }
            return;
        }
        // Neither a step nor the first task of a chain (almost every task): no run to tell,
        // and no second lookup of the task to find that out.
        let in_chain = !task.spec.depends_on.is_empty() || self.deps.has_children(key);
        self.apply_to_state(key, position, execution, attempt, event, true, now);
        if let ExecutionEvent::Finished { end, .. } = event {
            if in_chain && end.is_last() {
                // Even when the state says the event was applied: the children's states are
                // other records, and may not have been written with it (see `on_step_end`).
                self.on_step_end(key, execution, StepOutcome::of(end), now);
            }
        }
    }

    /// Applies an execution's event to its task's state. `is_attempt` is false for the
    /// made-up end of a fanned-out fire as a whole, which is no attempt of its own (its
    /// pieces' are) and so raises no failure notice.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply_to_state(
        &mut self,
        key: &TaskKey,
        position: Option<EventPosition>,
        execution: ExecutionId,
        attempt: u32,
        event: &ExecutionEvent,
        is_attempt: bool,
        now: UtcMillis,
    ) {
        let Some(task) = self.tasks.get_mut(key) else {
            return;
        };
        if let Some(position) = position {
            if task
                .state
                .last_event
                .is_some_and(|applied| applied >= position)
            {
                return;
            }
            task.state.last_event = Some(position);
        }
        if matches!(event, ExecutionEvent::Finished { .. })
            && task.last_end == Some((execution, attempt))
        {
            return;
        }
        match event {
            ExecutionEvent::Started { at } => {
                // Events of different attempts come from different workers; a start older
                // than the last recorded end belongs to an attempt already over.
                if task.state.last_finished_at.is_none_or(|end| *at >= end)
                    && task.state.status != TaskStatus::Running
                {
                    // A retry's start: like a fire, written with its end unless it runs long.
                    set_status(&mut task.state, TaskStatus::Running, now);
                    self.writes.running(&task.key, now);
                }
            }
            ExecutionEvent::Finished { end, .. } => {
                if end.outcome == AttemptOutcome::Released {
                    // Given back unfinished: it runs again elsewhere; nothing ended.
                    return;
                }
                task.last_end = Some((execution, attempt));
                let was_fine = task.state.consecutive_failures == 0
                    && task.state.last_success_at.is_some()
                    && !task.is_throttled();
                if is_attempt {
                    self.notices
                        .extend(failure_notice(&task.key, execution, attempt, event));
                }
                task.record_for_breaker(&self.config.breaker, end, now, &mut self.notices);
                if task.is_throttled() {
                    self.throttled.insert(Arc::clone(&task.key));
                }
                task.record_end(end, now);
                if end.is_last() {
                    if let Some(held) = task.state.held_fire_at {
                        self.fires.push(task, held, FireKind::HeldAgain, now);
                    }
                }
                let routine = was_fine
                    && is_routine_end(task, end, self.config.routine_write_delay)
                    && !self.deps.has_children(&task.key);
                if routine {
                    self.writes.routine(&task.key, now);
                } else {
                    self.writes.current(&task.key);
                }
            }
        }
    }

    /// Tasks whose state says an execution is in flight (RUNNING, RETRYING), with the fire
    /// it is for. A new leader checks them against the execution history: their end may
    /// have been heard by a leader that died before writing it.
    pub fn in_flight(&self) -> Vec<(Arc<TaskKey>, UtcMillis)> {
        self.tasks
            .values()
            .filter(|t| t.state.status.is_executing())
            .filter_map(|t| t.state.last_fire_at.map(|f| (Arc::clone(&t.key), f)))
            .collect()
    }

    /// Applies the end of an attempt read from the execution history (see
    /// [`in_flight`](Self::in_flight)), as if its event had arrived; the event itself, if it
    /// still comes, is then ignored.
    ///
    /// An end already applied (its event came first) is not counted again, but still sets
    /// the status: the history is read for a fire sent again and refused as a duplicate (its
    /// first dispatch was not in the state a new leader loaded), and that re-dispatch moved
    /// the status back to RUNNING.
    pub fn reconcile(
        &mut self,
        key: &TaskKey,
        execution: ExecutionId,
        attempt: u32,
        finished_at: UtcMillis,
        end: &AttemptEnd,
        now: UtcMillis,
    ) {
        if let Some(task) = self.tasks.get_mut(key) {
            if task.last_end == Some((execution, attempt)) {
                if task.state.status.is_executing() {
                    task.apply_end_status(end, now);
                    self.writes.current(&task.key);
                }
                return;
            }
        }
        let event = ExecutionEvent::Finished {
            at: finished_at,
            end: end.clone(),
        };
        self.on_execution(key, execution, attempt, &event, now);
    }
}

/// Whether `end`, following a success, is a periodic task's routine success: outside any
/// run or chain, the task firing again within `delay`. Nothing a reader acts on changed, so
/// its write can wait for the runs that follow and go with them.
fn is_routine_end(task: &Armed, end: &AttemptEnd, delay: std::time::Duration) -> bool {
    let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    let frequent = task
        .state
        .next_fire_at
        .zip(task.state.last_fire_at)
        .is_some_and(|(next, last)| next.0.saturating_sub(last.0) < delay_ms);
    frequent
        && end.is_last()
        && end.is_success()
        && task.stored
        && task.spec.schedule.is_periodic()
        && !task.spec.paused
        && task.spec.depends_on.is_empty()
        && task.spec.fanout.is_none()
        && task.state.runs.is_empty()
        && task.state.held_fire_at.is_none()
}
