//! A task's status and the state machine over it.
//!
//! The status is its own module, apart from the state record that holds it, because the
//! crate's error names statuses (an illegal transition) while the state record returns that
//! error: the status sits below both.

use serde::{Deserialize, Serialize};

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    /// Registered; no fire computed yet.
    Waiting,
    /// The next fire is computed and armed in the timer.
    Scheduled,
    /// An execution was enqueued and has not finished.
    Running,
    /// The last attempt failed; a retry is waiting for its backoff.
    Retrying,
    /// The last execution succeeded (a periodic task moves on to SCHEDULED).
    Success,
    /// The last execution failed for good (retries exhausted or a permanent error).
    Failed,
    /// Paused by the user: registered, not firing.
    Paused,
    /// The running execution was stopped by the user or replaced (overlap `replace`).
    Killed,
    /// The spec does not validate; `validation_errors` says why. It never fires.
    Invalid,
}

impl TaskStatus {
    /// Every status, for tables and tests.
    pub const ALL: [TaskStatus; 9] = [
        TaskStatus::Waiting,
        TaskStatus::Scheduled,
        TaskStatus::Running,
        TaskStatus::Retrying,
        TaskStatus::Success,
        TaskStatus::Failed,
        TaskStatus::Paused,
        TaskStatus::Killed,
        TaskStatus::Invalid,
    ];

    /// The statuses this one may move to; a status may always be rewritten to itself (a state
    /// update that changes only counters or times).
    pub fn successors(self) -> &'static [TaskStatus] {
        use TaskStatus::*;
        match self {
            Waiting => &[Scheduled, Running, Paused, Invalid],
            Scheduled => &[Running, Failed, Waiting, Paused, Invalid],
            Running => &[Success, Failed, Retrying, Killed, Paused, Invalid],
            Retrying => &[Running, Failed, Killed, Paused, Invalid],
            Success => &[Scheduled, Running, Waiting, Paused, Invalid],
            Failed => &[Scheduled, Running, Waiting, Paused, Invalid],
            Paused => &[Waiting, Scheduled, Running, Invalid],
            Killed => &[Scheduled, Running, Waiting, Paused, Invalid],
            Invalid => &[Waiting],
        }
    }

    /// Whether the state machine allows moving from `self` to `to`.
    pub fn can_transition_to(self, to: TaskStatus) -> bool {
        self == to || self.successors().contains(&to)
    }

    /// Whether an execution is in flight (running or waiting to retry).
    pub fn is_executing(self) -> bool {
        matches!(self, TaskStatus::Running | TaskStatus::Retrying)
    }

    /// The upper-case name used in storage and logs.
    pub fn as_str(self) -> &'static str {
        use TaskStatus::*;
        match self {
            Waiting => "WAITING",
            Scheduled => "SCHEDULED",
            Running => "RUNNING",
            Retrying => "RETRYING",
            Success => "SUCCESS",
            Failed => "FAILED",
            Paused => "PAUSED",
            Killed => "KILLED",
            Invalid => "INVALID",
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;

    #[test]
    fn serializes_screaming_snake_case() {
        assert_eq!(serde_json::to_string(&Retrying).unwrap(), "\"RETRYING\"");
        for s in TaskStatus::ALL {
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<TaskStatus>(&json).unwrap(), s);
        }
    }

    #[test]
    fn life_cycle_transitions_are_allowed() {
        // The life cycle every task goes through.
        for (from, to) in [
            (Waiting, Scheduled),
            (Waiting, Paused),
            (Scheduled, Running),
            (Scheduled, Failed),
            (Running, Success),
            (Running, Failed),
            (Running, Retrying),
            (Running, Killed),
            (Retrying, Running),
            (Retrying, Failed),
            (Success, Scheduled),
            (Failed, Running),
            (Paused, Waiting),
            (Paused, Running),
            (Killed, Waiting),
        ] {
            assert!(from.can_transition_to(to), "{from} -> {to}");
        }
    }

    #[test]
    fn forbidden_transitions() {
        for (from, to) in [
            (Waiting, Success),
            (Scheduled, Success),
            (Retrying, Success),
            (Paused, Success),
            (Invalid, Running),
            (Invalid, Scheduled),
            (Success, Retrying),
            (Waiting, Killed),
        ] {
            assert!(!from.can_transition_to(to), "{from} -> {to}");
        }
        // Every status can be made INVALID (the spec changed) and leaves it only via WAITING.
        for s in TaskStatus::ALL {
            assert!(s.can_transition_to(Invalid));
            assert!(s.can_transition_to(s));
            assert_eq!(Invalid.can_transition_to(s), s == Invalid || s == Waiting);
        }
    }
}
