//! A task's runtime state, as the engine stores it under `{prefix}/state/{ns}/{id}`.
//!
//! The spec (what the user wants) and the state (what happened) are separate records so that a
//! user's write never races the engine's bookkeeping. The state holds everything a new leader
//! needs to continue exactly where the old one stopped: the next due fire, the last fire, and
//! the anchor a `delay`/`every` countdown started from. The status follows a small state
//! machine (the usual scheduler life cycle, with INVALID added for specs that fail
//! validation); the allowed moves are listed in [`TaskStatus::can_transition_to`] and in
//! `docs/tasks.md`.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
pub use crate::status::TaskStatus;
use crate::time::UtcMillis;
use crate::validate::FieldError;

/// The runtime record of one task (JSON under `{prefix}/state/{ns}/{id}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    /// Current status.
    pub status: TaskStatus,
    /// The next fire the engine armed; `None` when nothing is due (one-shot done, paused,
    /// invalid).
    #[serde(default)]
    pub next_fire_at: Option<UtcMillis>,
    /// The due time of the last fire that was dispatched.
    #[serde(default)]
    pub last_fire_at: Option<UtcMillis>,
    /// When the last execution finished (any outcome).
    #[serde(default)]
    pub last_finished_at: Option<UtcMillis>,
    /// The instant a `delay`/`every` countdown started (the spec's `created_at`, or when the
    /// engine first recorded the task); persisted so a failover does not restart it.
    #[serde(default)]
    pub anchor_at: Option<UtcMillis>,
    /// etcd mod revision of the spec this state belongs to; a newer spec resets the state.
    #[serde(default)]
    pub spec_revision: i64,
    /// Fires dispatched.
    #[serde(default)]
    pub fire_count: u64,
    /// Executions that succeeded.
    #[serde(default)]
    pub success_count: u64,
    /// Executions that failed for good.
    #[serde(default)]
    pub failure_count: u64,
    /// Failures since the last success.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// The last failure's message.
    #[serde(default)]
    pub last_error: Option<String>,
    /// When an execution last succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_at: Option<UtcMillis>,
    /// The instant through which the task's fires are accounted for by its deadline
    /// (`expect_success_within`): alerted as missed, or not judged (paused, before a spec
    /// change). Written so a new leader alerts no fire twice (see [`crate::deadline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_mark: Option<UtcMillis>,
    /// Runs this dependent task takes part in and has not finished (see
    /// [`crate::workflow`]): which parents finished, and the step's execution once fired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<crate::workflow::RunProgress>,
    /// Fanned-out fires whose pieces have not all ended (see [`crate::fanout`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fanouts: Vec<crate::fanout::FanoutProgress>,
    /// The last runs this task's step finished in (a few), so that a parent's end read
    /// again does not start the step anew.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_done: Vec<crate::execution_id::ExecutionId>,
    /// Why the spec is INVALID; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation_errors: Vec<FieldError>,
    /// The fire held by overlap `forbid` while the previous execution runs: counted as
    /// fired, not yet enqueued. Recorded so a new leader sends it instead of losing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_fire_at: Option<UtcMillis>,
    /// The position of the last worker event applied to this state: an event read again
    /// (its leader died before acknowledging it) at or before it is not applied twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<crate::execution::EventPosition>,
    /// The task's circuit breaker is open: most fires are skipped until its executions
    /// succeed again. Kept by the leader that opened it; a new term starts closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<crate::breaker::Throttle>,
    /// When this record was last written.
    pub updated_at: UtcMillis,
}

impl TaskState {
    /// A fresh WAITING state for the spec at `spec_revision`, anchored at `anchor`.
    pub fn new(spec_revision: i64, anchor: UtcMillis, now: UtcMillis) -> Self {
        TaskState {
            status: TaskStatus::Waiting,
            next_fire_at: None,
            last_fire_at: None,
            last_finished_at: None,
            anchor_at: Some(anchor),
            spec_revision,
            fire_count: 0,
            success_count: 0,
            failure_count: 0,
            consecutive_failures: 0,
            last_error: None,
            last_success_at: None,
            deadline_mark: None,
            runs: Vec::new(),
            runs_done: Vec::new(),
            fanouts: Vec::new(),
            validation_errors: Vec::new(),
            held_fire_at: None,
            last_event: None,
            throttled: None,
            updated_at: now,
        }
    }

    /// A state for a spec that failed validation.
    pub fn invalid(spec_revision: i64, errors: Vec<FieldError>, now: UtcMillis) -> Self {
        TaskState {
            status: TaskStatus::Invalid,
            anchor_at: None,
            validation_errors: errors,
            ..TaskState::new(spec_revision, now, now)
        }
    }

    /// Moves to `to` if the state machine allows it, stamping `updated_at`.
    pub fn transition(&mut self, to: TaskStatus, now: UtcMillis) -> Result<(), CoreError> {
        if !self.status.can_transition_to(to) {
            return Err(CoreError::IllegalTransition {
                from: self.status,
                to,
            });
        }
        self.status = to;
        self.updated_at = now;
        if to != TaskStatus::Invalid {
            self.validation_errors.clear();
        }
        Ok(())
    }

    /// Whether this state only repeats what a task of `schedule` gets from its spec when it is
    /// armed with nothing recorded: an `at` one-shot, armed (or waiting), that never fired and
    /// holds nothing of its own. Such a state is not written: a new leader derives the same.
    /// A `delay` or `every` task's anchor is its own (when the engine first saw it), so its
    /// state always is written; so is one with a deadline mark, a held fire or runs.
    pub fn is_implied_by(&self, schedule: &crate::task::Schedule) -> bool {
        matches!(schedule, crate::task::Schedule::At(_))
            && matches!(self.status, TaskStatus::Scheduled | TaskStatus::Waiting)
            && self.fire_count == 0
            && self.last_fire_at.is_none()
            && self.last_finished_at.is_none()
            && self.consecutive_failures == 0
            && self.last_error.is_none()
            && self.deadline_mark.is_none()
            && self.held_fire_at.is_none()
            && self.last_event.is_none()
            && self.runs.is_empty()
            && self.fanouts.is_empty()
            && self.runs_done.is_empty()
            && self.validation_errors.is_empty()
    }

    /// Records a dispatched fire due at `fire_at`.
    pub fn record_fire(&mut self, fire_at: UtcMillis, now: UtcMillis) {
        self.last_fire_at = Some(fire_at);
        self.fire_count += 1;
        self.updated_at = now;
    }

    /// Records a finished execution: success, or a final failure with its message.
    pub fn record_outcome(&mut self, outcome: Result<(), String>, now: UtcMillis) {
        self.last_finished_at = Some(now);
        self.updated_at = now;
        match outcome {
            Ok(()) => {
                self.success_count += 1;
                self.last_success_at = Some(now);
                self.consecutive_failures = 0;
            }
            Err(e) => {
                self.failure_count += 1;
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.last_error = Some(crate::execution::shown_error(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    #[test]
    fn state_round_trips_and_enforces_transitions() {
        let mut st = TaskState::new(42, UtcMillis(1_000), UtcMillis(1_000));
        st.transition(Scheduled, UtcMillis(1_001)).unwrap();
        st.next_fire_at = Some(UtcMillis(5_000));
        st.transition(Running, UtcMillis(5_000)).unwrap();
        st.record_fire(UtcMillis(5_000), UtcMillis(5_001));
        st.record_outcome(Err("HTTP 500".into()), UtcMillis(6_000));
        let err = st.transition(Success, UtcMillis(6_000));
        assert!(err.is_ok());
        let bad = st.transition(Retrying, UtcMillis(6_001)).unwrap_err();
        assert_eq!(
            bad.to_string(),
            "task status cannot change from SUCCESS to RETRYING"
        );
        assert_eq!(st.consecutive_failures, 1);
        st.record_outcome(Ok(()), UtcMillis(7_000));
        assert_eq!(
            (st.success_count, st.failure_count, st.consecutive_failures),
            (1, 1, 0)
        );

        let json = serde_json::to_string(&st).unwrap();
        assert!(json.contains("\"status\":\"SUCCESS\""), "{json}");
        let back: TaskState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, st);

        let inv = TaskState::invalid(7, vec![FieldError::new("priority", "bad")], UtcMillis(1));
        assert_eq!(inv.status, Invalid);
        let json = serde_json::to_string(&inv).unwrap();
        assert!(
            json.contains("\"validation_errors\":[{\"path\":\"priority\""),
            "{json}"
        );
    }
}
