//! The fire path: timers come due, their fires go through the ready queue, and those that
//! leave it become [`Dispatch`]es.
//!
//! A due task is re-armed for its following fire before its due fire is queued, so the
//! schedule never drifts with dispatch delays. What leaves the ready queue is checked
//! against the task as it is now (a spec change, a pause, a step ended meanwhile make an
//! entry stale), and only a new scheduled fire passes the breaker and is counted: a held
//! fire sent again, a run-now request or a step are not new fires of the schedule.

use std::sync::Arc;

use crate::misfire::{plan_misfires, ScheduleCursor};
use crate::overlap::dispatch_mode;
use crate::status::TaskStatus;
use crate::time::UtcMillis;

use super::armed::{set_status, Armed, FireKind, ReadyFire, TimerEntry, TimerKind};
use super::output::misfire_notice;
use super::pieces::{fan_out, resend, Outgoing};
use super::{Dispatch, Dispatcher};
use crate::execution_id::ExecutionId;
use crate::key::TaskKey;

impl Dispatcher {
    /// Queues a run-now execution with its own id; the periodic schedule is not disturbed.
    /// Returns false for an unknown task.
    pub fn trigger(&mut self, key: &TaskKey, execution_id: ExecutionId, now: UtcMillis) -> bool {
        let Some(task) = self.tasks.get(key) else {
            return false;
        };
        self.fires
            .push(task, now, FireKind::RunNow(execution_id), now);
        true
    }

    /// When [`poll`](Self::poll) next has work: the earliest timer, or the next rate-limit
    /// token while fires wait.
    pub fn next_wakeup(&mut self, now: UtcMillis) -> Option<UtcMillis> {
        let ready = self.fires.next_wakeup(now);
        match (self.timers.next_due(), ready) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Advances to `now` and returns the executions to enqueue, in dispatch order.
    pub fn poll(&mut self, now: UtcMillis) -> Vec<Dispatch> {
        let mut out = Vec::new();
        self.poll_into(now, usize::MAX, &mut out);
        out
    }

    /// As [`poll`](Self::poll), into `out`, stopping once `out` holds `max` executions or
    /// more (a fanned-out fire's pieces go together); the fires left wait in the ready
    /// queue, in order, for the next call. A burst of due fires is so taken in batches of a
    /// buffer the caller keeps, rather than in one list as long as the burst.
    pub fn poll_into(&mut self, now: UtcMillis, max: usize, out: &mut Vec<Dispatch>) {
        let mut due = self.timers.take_due(now);
        for (fire_at, entry) in due.drain(..) {
            self.on_timer(fire_at, entry, now);
        }
        self.timers.give_back(due);
        self.sweep_runs(now);

        while out.len() < max {
            let Some(item) = self.fires.pop(now) else {
                break;
            };
            self.dispatch_fire(item, now, out);
        }
    }

    /// Sends one fire that left the ready queue, unless it went stale, was parked or the
    /// breaker skipped it.
    fn dispatch_fire(&mut self, item: ReadyFire, now: UtcMillis, out: &mut Vec<Dispatch>) {
        let Some(task) = self.tasks.get_mut(&item.key) else {
            return;
        };
        if item.born == task.born {
            task.queued.set(task.queued.get().saturating_sub(1));
        }
        let (run_now, run_id) = match &item.kind {
            FireKind::Resend(id) => return resend(task, *id, &self.deps, out),
            FireKind::RunNow(id) => (Some(*id), None),
            FireKind::Step(step) => {
                let (execution, run) = **step;
                // Stale: the step ended (its end was replayed) or was dropped meanwhile.
                if !task.has_step(execution) {
                    return;
                }
                (Some(execution), Some(run))
            }
            FireKind::Scheduled | FireKind::HeldAgain => (None, None),
        };
        // Queued before the spec changed or the task was paused: stale.
        if run_now.is_none() && (item.generation != task.generation || task.spec.paused) {
            return;
        }
        let fire_at = match item.kind {
            FireKind::HeldAgain => match task.state.held_fire_at {
                // The held fire may have merged newer fires meanwhile: send the newest.
                Some(held) => held,
                // Released since (enqueued, or superseded by a newer fire).
                None => return,
            },
            FireKind::Scheduled | FireKind::RunNow(_) | FireKind::Step(_) | FireKind::Resend(_) => {
                item.fire_at
            }
        };
        if matches!(item.kind, FireKind::Scheduled) {
            if self.pauses.is_paused(&task.key.namespace) {
                // A fire queued without its timer (a takeover's missed fires) or before the
                // pause: parked like one whose timer came due.
                self.pauses.park(&task.key, fire_at, task.generation);
                return;
            }
            // Only new fires pass the breaker; a held fire was admitted when it first came.
            let was_throttled = task.is_throttled();
            let admitted = task.admit(&self.config.breaker, fire_at, now, &mut self.notices);
            if task.is_throttled() {
                self.throttled.insert(Arc::clone(&task.key));
            }
            if !admitted {
                // The stored next fire is the one armed ahead, not this skipped one.
                self.writes.current(&task.key);
                return;
            }
            if was_throttled != task.is_throttled() {
                self.writes.current(&task.key);
            }
            task.state.record_fire(fire_at, now);
        }
        self.fires.spend(now);
        set_status(&mut task.state, TaskStatus::Running, now);
        self.writes.running(&task.key, now);
        let fire = Outgoing {
            fire_at,
            starts_run: run_id.is_none() && self.deps.starts_runs(&task.key, &task.spec),
            run_now,
            run_id,
        };
        match task.spec.fanout {
            Some(fanout) => fan_out(task, fanout, fire, out),
            None => {
                let overlap = dispatch_mode(&task.spec, fire.run_now.is_some());
                out.push(fire.dispatch(task, overlap, false));
            }
        }
    }

    fn on_timer(&mut self, fire_at: UtcMillis, entry: TimerEntry, now: UtcMillis) {
        if matches!(entry.kind, TimerKind::Scheduled) && self.fire_in_place(fire_at, &entry, now) {
            return;
        }
        let Some(mut task) = self.tasks.remove(&entry.key) else {
            return;
        };
        if task.generation == entry.generation {
            match entry.kind {
                TimerKind::Scheduled if self.pauses.is_paused(&task.key.namespace) => {
                    // Parked, not re-armed: the resume arms it again.
                    task.timer = None;
                    self.pauses.park(&task.key, fire_at, task.generation);
                }
                TimerKind::Scheduled => {
                    task.timer = None;
                    if now.since(fire_at) > self.config.stall_threshold {
                        // The leader stalled (a backend it waited on, a paused process, a
                        // forward clock step): the fires missed meanwhile follow the task's
                        // misfire policy, exactly as at a takeover, instead of all running.
                        self.replay_missed(&mut task, fire_at, now);
                    } else {
                        let next = task.schedule.next_after(fire_at, task.anchor);
                        self.rearm_and_push(&mut task, next, vec![fire_at], now);
                    }
                }
                TimerKind::Deadline => {
                    task.deadline_timer = None;
                    self.judge_deadline(&mut task, now);
                }
                TimerKind::HeldRetry => {
                    task.held_timer = None;
                    if let Some(held) = task.state.held_fire_at {
                        self.fires.push(&task, held, FireKind::HeldAgain, now);
                    }
                }
            }
        }
        self.tasks.insert(Arc::clone(&task.key), task);
    }

    /// The common timer, a scheduled fire on time of a task not paused: re-armed and queued
    /// in the task table's slot (one lookup, where the general path takes the task out and
    /// puts it back). False when it is not that case, for the general path to take.
    fn fire_in_place(&mut self, fire_at: UtcMillis, entry: &TimerEntry, now: UtcMillis) -> bool {
        if now.since(fire_at) > self.config.stall_threshold
            || self.pauses.is_paused(&entry.key.namespace)
        {
            return false;
        }
        let Some(task) = self.tasks.get_mut(&entry.key) else {
            return true;
        };
        if task.generation == entry.generation {
            task.timer = None;
            let next = task.schedule.next_after(fire_at, task.anchor);
            // As `rearm_and_push`: re-armed before the due fire is queued.
            self.timers.set_next(task, next);
            self.fires.push(task, fire_at, FireKind::Scheduled, now);
        }
        true
    }

    /// Runs what the task's misfire policy keeps of the fires from `first_missed` to `now`
    /// (a stall, a paused namespace), with a notice of what it dropped, and re-arms.
    pub(super) fn replay_missed(
        &mut self,
        task: &mut Armed,
        first_missed: UtcMillis,
        now: UtcMillis,
    ) {
        let plan = plan_misfires(
            task.spec.misfire,
            &task.schedule,
            task.anchor,
            ScheduleCursor::NextDue(first_missed),
            now,
            self.config.catch_up_window,
        );
        self.notices.extend(misfire_notice(&task.key, &plan));
        self.rearm_and_push(task, plan.next_fire, plan.run_now, now);
    }

    /// Arms the task's next fire, then queues `fires`: re-armed before dispatching, so the
    /// schedule keeps its cadence.
    fn rearm_and_push(
        &mut self,
        task: &mut Armed,
        next: Option<UtcMillis>,
        fires: Vec<UtcMillis>,
        now: UtcMillis,
    ) {
        self.timers.set_next(task, next);
        for fire_at in fires {
            self.fires.push(task, fire_at, FireKind::Scheduled, now);
        }
    }
}
