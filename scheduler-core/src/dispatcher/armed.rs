//! A task as the dispatcher holds it, and the entries that point back at it from the timer
//! wheel and the ready queue.
//!
//! Those entries carry the task's generation rather than being removed when the task
//! changes: a re-arm bumps the generation, and an entry of an older one is dropped when it
//! comes up, which costs nothing until then. The status moves and the task's circuit breaker
//! are used by every path that changes a task (fires, events, reconciliation), so they are
//! methods of the task.

use std::cell::Cell;
use std::sync::Arc;

use crate::breaker::{Admission, BreakerConfig, CircuitBreaker, Throttle, Transition};
use crate::execution::{shown_error, AttemptEnd, AttemptOutcome};
use crate::execution_id::ExecutionId;
use crate::schedule::CompiledSchedule;
use crate::state::TaskState;
use crate::status::TaskStatus;
use crate::task::TaskSpec;
use crate::time::UtcMillis;
use crate::timer::TimerHandle;

use super::output::{breaker_notice, Notice};
use super::writes::Current;
use crate::key::TaskKey;

#[derive(Clone, Copy, Debug)]
pub(super) enum TimerKind {
    /// The task's next scheduled fire.
    Scheduled,
    /// The task's held fire asks again (its completion event may have been lost).
    HeldRetry,
    /// The task's next deadline (`expect_success_within`) is to be judged.
    Deadline,
}

/// Why a fire is in the ready queue.
#[derive(Debug)]
pub(super) enum FireKind {
    /// A schedule instant came due: a new fire (counted, passes the breaker).
    Scheduled,
    /// The held fire is dispatched again: the same fire, not a new one.
    HeldAgain,
    /// A run-now request with its execution id.
    RunNow(ExecutionId),
    /// A dependent task's step in a run: its (derived) execution id, and the run.
    Step(Box<(ExecutionId, ExecutionId)>),
    /// The pieces not ended of a fanned-out fire, sent again by a new leader (those already
    /// queued are refused as duplicates): the fan-out id.
    Resend(ExecutionId),
}

#[derive(Clone, Debug)]
pub(super) struct TimerEntry {
    pub(super) key: Arc<TaskKey>,
    pub(super) kind: TimerKind,
    pub(super) generation: u64,
}

#[derive(Debug)]
pub(super) struct ReadyFire {
    pub(super) key: Arc<TaskKey>,
    /// The [`Armed::born`] of the task that queued it.
    pub(super) born: u64,
    pub(super) fire_at: UtcMillis,
    pub(super) kind: FireKind,
    pub(super) generation: u64,
}

#[derive(Debug)]
pub(super) struct Armed {
    pub(super) key: Arc<TaskKey>,
    pub(super) spec: Arc<TaskSpec>,
    pub(super) schedule: CompiledSchedule,
    pub(super) revision: i64,
    pub(super) anchor: UtcMillis,
    /// Bumped on every re-arm so stale timer and ready entries are recognised.
    pub(super) generation: u64,
    /// The generation the task was loaded with: it tells this task's ready entries from
    /// those of an earlier task of the same key, removed since.
    pub(super) born: u64,
    /// Its entries in the ready queue (of any generation): a fire due and not dispatched
    /// yet. A cell, so that queueing a fire needs the task only to read.
    pub(super) queued: Cell<u32>,
    pub(super) timer: Option<TimerHandle>,
    /// The held fire's one retry timer (the fire itself is the state's `held_fire_at`, so
    /// that it is written and a new leader finds it).
    pub(super) held_timer: Option<TimerHandle>,
    /// When the task's deadline is judged next (tasks with `expect_success_within` only).
    pub(super) deadline_timer: Option<TimerHandle>,
    /// Boxed: created at a task's first execution, and 80 bytes inline.
    breaker: Option<Box<CircuitBreaker>>,
    pub(super) state: TaskState,
    /// The last execution attempt whose end was applied (from its event or from the
    /// history): the same end arriving again (its event after a reconciliation, the history
    /// after the event, or a finished execution run again after its worker died) is not
    /// counted a second time.
    pub(super) last_end: Option<(ExecutionId, u32)>,
    /// Whether etcd may hold a state of this task (one was loaded or written): until then a
    /// state the spec implies is not written (see [`TaskState::is_implied_by`]).
    pub(super) stored: bool,
}

impl Armed {
    /// A task just loaded, with no timer yet.
    pub(super) fn new(
        key: Arc<TaskKey>,
        spec: Arc<TaskSpec>,
        schedule: CompiledSchedule,
        revision: i64,
        anchor: UtcMillis,
        generation: u64,
        state: TaskState,
    ) -> Box<Self> {
        Box::new(Armed {
            key,
            spec,
            schedule,
            revision,
            anchor,
            generation,
            born: generation,
            queued: Cell::new(0),
            timer: None,
            held_timer: None,
            deadline_timer: None,
            breaker: None,
            last_end: None,
            state,
            stored: false,
        })
    }

    /// What writing the task's current state means: to the ledger (a one-shot's final), to
    /// its state key, or nothing (nothing stored yet, and the spec implies the state).
    pub(super) fn current_write(&self) -> Current<'_> {
        if crate::finals::is_final(&self.spec.schedule, &self.state) {
            Current::Final(&self.state)
        } else if !self.stored && self.state.is_implied_by(&self.spec.schedule) {
            Current::Implied
        } else {
            Current::Write(&self.state)
        }
    }

    /// The timers the task owns, to cancel when it goes.
    pub(super) fn timers(&self) -> impl Iterator<Item = TimerHandle> {
        [self.timer, self.held_timer, self.deadline_timer]
            .into_iter()
            .flatten()
    }

    fn breaker(&mut self, config: &BreakerConfig) -> &mut CircuitBreaker {
        self.breaker
            .get_or_insert_with(|| Box::new(CircuitBreaker::new(config.clone())))
    }

    /// Asks the breaker whether a new fire at `fire_at` may go; a skipped fire and a move
    /// of the breaker are noticed. Only a periodic task has a breaker: it slows the fires to
    /// come, and a one-shot has one fire (its spec changed to fire again starts afresh), so
    /// its failures are its retries' and its dead letter's to tell, not a breaker's.
    pub(super) fn admit(
        &mut self,
        config: &BreakerConfig,
        fire_at: UtcMillis,
        now: UtcMillis,
        notices: &mut Vec<Notice>,
    ) -> bool {
        if !self.spec.schedule.is_periodic() {
            return true;
        }
        let (admission, transition) = self.breaker(config).admit(now);
        if let Some(t) = transition {
            self.breaker_moved(t, now, notices);
        }
        if admission == Admission::Skip {
            notices.push(Notice::BreakerSkipped {
                key: Arc::clone(&self.key),
                fire_at,
            });
            return false;
        }
        true
    }

    /// Tells the breaker how an attempt ended; a move of the breaker is noticed.
    pub(super) fn record_for_breaker(
        &mut self,
        config: &BreakerConfig,
        end: &AttemptEnd,
        now: UtcMillis,
        notices: &mut Vec<Notice>,
    ) {
        if !self.spec.schedule.is_periodic() {
            return;
        }
        if let Some(t) = self.breaker(config).record(!end.outcome.is_failure(), now) {
            self.breaker_moved(t, now, notices);
        }
    }

    /// Drops the breaker of a task whose spec is a one-shot now (see [`Armed::admit`]); an
    /// open one is noticed closed.
    pub(super) fn drop_breaker_unless_periodic(&mut self, notices: &mut Vec<Notice>) {
        if self.spec.schedule.is_periodic() || self.breaker.take().is_none() {
            return;
        }
        if self.state.throttled.take().is_some() {
            notices.push(breaker_notice(&self.key, Transition::Closed));
        }
    }

    /// Whether the task's breaker is open (its state says so).
    pub(super) fn is_throttled(&self) -> bool {
        self.state.throttled.is_some()
    }

    /// Records an opened or closed breaker in the state (what operators read) and notices it.
    fn breaker_moved(&mut self, t: Transition, now: UtcMillis, notices: &mut Vec<Notice>) {
        self.state.throttled = match t {
            Transition::Opened {
                failures,
                executions,
            } => Some(Throttle {
                since: now,
                failures,
                executions,
                dispatch_every: self.breaker.as_ref().map_or(1, |b| b.dispatch_every()),
            }),
            Transition::Closed => None,
        };
        notices.push(breaker_notice(&self.key, t));
    }

    /// Records an attempt's end in the state: its error while retries follow, the outcome
    /// at the last one; then the status it leaves.
    pub(super) fn record_end(&mut self, end: &AttemptEnd, now: UtcMillis) {
        if !end.is_last() {
            self.state.last_error = end.error.clone().map(shown_error);
        } else {
            self.state.record_outcome(
                if end.is_success() {
                    Ok(())
                } else {
                    Err(end.error.clone().unwrap_or_else(|| "failed".to_owned()))
                },
                now,
            );
        }
        self.apply_end_status(end, now);
    }

    /// The status `end` leaves the task in: RETRYING when another attempt follows, else the
    /// outcome's, then SCHEDULED (a next fire is armed) or PAUSED.
    pub(super) fn apply_end_status(&mut self, end: &AttemptEnd, now: UtcMillis) {
        if !end.is_last() {
            set_status(&mut self.state, TaskStatus::Retrying, now);
            return;
        }
        let status = match end.outcome {
            AttemptOutcome::Killed => TaskStatus::Killed,
            AttemptOutcome::Succeeded => TaskStatus::Success,
            _ => TaskStatus::Failed,
        };
        set_status(&mut self.state, status, now);
        if self.spec.paused {
            set_status(&mut self.state, TaskStatus::Paused, now);
        } else if self.state.next_fire_at.is_some() {
            set_status(&mut self.state, TaskStatus::Scheduled, now);
        }
    }

    /// Whether a step fired as `execution` is still in progress in one of the task's runs.
    pub(super) fn has_step(&self, execution: ExecutionId) -> bool {
        self.state
            .runs
            .iter()
            .any(|r| r.execution == Some(execution))
    }
}

/// Moves `state` to `to` along the state machine. Worker events cross the network and may
/// arrive out of order (a retry's start after its end), so a move the machine does not allow
/// directly is tried through RUNNING, and otherwise the status is left as it is (counters
/// and times are still recorded by the caller).
pub(super) fn set_status(state: &mut TaskState, to: TaskStatus, now: UtcMillis) {
    if state.transition(to, now).is_ok() {
        return;
    }
    if state.status.can_transition_to(TaskStatus::Running)
        && TaskStatus::Running.can_transition_to(to)
    {
        state.status = TaskStatus::Running;
        let _ = state.transition(to, now);
    }
}
