//! Deadlines (`expect_success_within`): when a task's fires are judged, and what a
//! judgement leaves behind.
//!
//! The judging itself is [`crate::deadline`]'s, on plain values; this side owns the one
//! timer per task that brings the next judgement, and the mark in the state that says how
//! far the fires are accounted for (written, so a new leader neither misses nor repeats a
//! report).

use std::sync::Arc;

use crate::deadline::{judge, Expectation};
use crate::state::TaskState;
use crate::task::TaskSpec;
use crate::time::UtcMillis;

use super::armed::Armed;
use super::output::Notice;
use super::Dispatcher;

impl Dispatcher {
    /// Judges the task's deadline at `now` (see [`crate::deadline`]): raises the miss,
    /// records how far its fires are accounted for, and arms the next judgement.
    pub(super) fn judge_deadline(&mut self, task: &mut Armed, now: UtcMillis) {
        self.timers.cancel(task.deadline_timer.take());
        let Some(within) = task.spec.expect_success_within else {
            return;
        };
        let expectation = Expectation {
            schedule: &task.schedule,
            anchor: task.anchor,
            within,
            paused: task.spec.paused || self.pauses.is_paused(&task.key.namespace),
            leader_since: self.term_start,
        };
        let judgement = judge(&expectation, &task.state, now);
        if let Some(mark) = judgement
            .mark
            .filter(|m| task.state.deadline_mark != Some(*m))
        {
            task.state.deadline_mark = Some(mark);
            self.writes.current(&task.key);
        }
        if let Some(miss) = judgement.miss {
            self.notices.push(Notice::DeadlineMissed {
                key: Arc::clone(&task.key),
                within,
                miss,
            });
        }
        if let Some(at) = judgement.check_at {
            self.timers.arm_deadline(task, at);
        }
    }
}

/// Deadlines start afresh at `now` (a spec change, a resume): fires due before are not
/// judged. Only for a task with a deadline: the mark is read by nothing else.
pub(super) fn restart_deadlines(state: &mut TaskState, spec: &TaskSpec, now: UtcMillis) {
    if spec.expect_success_within.is_some() {
        state.deadline_mark = state.deadline_mark.max(Some(now));
    }
}
