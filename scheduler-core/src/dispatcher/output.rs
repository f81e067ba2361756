//! What the dispatcher hands the engine: executions to enqueue, notices to alert on, and
//! states to write. They are plain values, so the engine carries them out after the
//! dispatcher's call has returned and the dispatcher never waits on I/O.
//!
//! The notices every concern raises in the same shape (a failed attempt, a breaker's move,
//! missed fires) are built here, once.

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::Transition;
use crate::deadline::Miss;
use crate::execution::ExecutionEvent;
use crate::execution_id::ExecutionId;
use crate::fanout::Piece;
use crate::misfire::MisfirePlan;
use crate::state::TaskState;
use crate::task::{OverlapPolicy, TaskSpec};
use crate::time::UtcMillis;

use crate::key::TaskKey;

/// One execution to enqueue.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// The task.
    pub key: Arc<TaskKey>,
    /// Its spec as armed.
    pub spec: Arc<TaskSpec>,
    /// The due instant this execution is for; with the key, the dedupe identity.
    pub fire_at: UtcMillis,
    /// For a run-now request: its execution id (its own dedupe identity).
    pub run_now: Option<ExecutionId>,
    /// What the enqueue does about the task's still-active previous execution, as this
    /// dispatcher decided it (see [`crate::overlap`]); Redis only enforces it.
    pub overlap: OverlapPolicy,
    /// The run (see [`crate::workflow`]) this execution is a step of.
    pub run_id: Option<ExecutionId>,
    /// The execution starts a run: its task is the first of a chain. Its own execution id
    /// (its fan-out id, for a fanned-out fire) is the run's id.
    pub starts_run: bool,
    /// For a fanned-out fire: which piece this is (see [`crate::fanout`]).
    pub piece: Option<Piece>,
    /// A broadcast fire not addressed yet: never enqueued as it is. The shell lists the
    /// live workers of the task's queue and hands them to
    /// [`Dispatcher::address_broadcast`](super::Dispatcher::address_broadcast), which
    /// returns the executions to enqueue.
    pub broadcast: bool,
}

impl Dispatch {
    /// For a broadcast fire not addressed yet: its fan-out id (the run-now's execution id, or
    /// derived from the task and the fire instant), the same on every leader.
    pub fn broadcast_fanout_id(&self) -> Option<ExecutionId> {
        self.broadcast.then(|| {
            self.run_now
                .unwrap_or_else(|| ExecutionId::for_fire(&self.key, self.fire_at))
        })
    }
}

/// Something the engine should alert on or log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Missed fires were found: when the task was loaded (a takeover), or after a stall.
    Misfired {
        /// The task.
        key: Arc<TaskKey>,
        /// Fires missed in all.
        missed: u64,
        /// Fires not run (policy `skip`, `fire_once` folding, or beyond the window).
        skipped: u64,
        /// Missed fires older than the catch-up window.
        beyond_window: u64,
        /// The oldest missed fire.
        oldest: Option<UtcMillis>,
    },
    /// The task's breaker opened: dispatch is slowed.
    CircuitOpened {
        /// The task.
        key: Arc<TaskKey>,
        /// Failures in the window.
        failures: u32,
        /// Executions in the window.
        executions: u32,
    },
    /// The task's breaker closed again.
    CircuitClosed {
        /// The task.
        key: Arc<TaskKey>,
    },
    /// A fire was skipped because the breaker is open.
    BreakerSkipped {
        /// The task.
        key: Arc<TaskKey>,
        /// The skipped fire.
        fire_at: UtcMillis,
    },
    /// A dependent task's step in a run was skipped (and so are the steps after it).
    StepSkipped {
        /// The task.
        key: Arc<TaskKey>,
        /// The run.
        run: ExecutionId,
        /// Why.
        reason: String,
    },
    /// An attempt failed (it may be retried, or it was the last and went to the dead-letter
    /// queue). Raised once per attempt end the dispatcher applies: an event read again, or
    /// an end read both from the history and from its event, raises nothing more, so the
    /// engine alerts on failures from here, whoever ended the attempt (a worker in any
    /// language, a job's completion report, a deadline).
    AttemptFailed {
        /// The task.
        key: Arc<TaskKey>,
        /// The execution.
        execution: ExecutionId,
        /// The attempt, 0 for the first.
        attempt: u32,
        /// When it ended.
        at: UtcMillis,
        /// How it ended, and the retry that follows, if any.
        end: crate::execution::AttemptEnd,
    },
    /// A broadcast fire found no live worker on its task's queue: it ended failed at once
    /// (its end is in the task's state; the shell records it in the history).
    NoLiveWorker {
        /// The task.
        key: Arc<TaskKey>,
        /// The fire's fan-out id, the id its end is recorded under.
        fanout: ExecutionId,
        /// The fire.
        fire_at: UtcMillis,
        /// The dependency run the fire is a step of, if any.
        run: Option<ExecutionId>,
        /// The task's queue.
        queue: Arc<str>,
        /// Why it failed, as recorded.
        reason: String,
    },
    /// Fires of a task with `expect_success_within` were not followed by a success in time
    /// (each missed fire is reported once; see [`crate::deadline`]).
    DeadlineMissed {
        /// The task.
        key: Arc<TaskKey>,
        /// Its window.
        within: Duration,
        /// What was missed, and why.
        miss: Miss,
    },
}

/// A state to write (`Some`) or delete (`None`).
pub type StateWrite = (Arc<TaskKey>, Option<TaskState>);

/// The notice of an attempt that failed, if `event` ends one that did.
pub(super) fn failure_notice(
    key: &Arc<TaskKey>,
    execution: ExecutionId,
    attempt: u32,
    event: &ExecutionEvent,
) -> Option<Notice> {
    match event {
        ExecutionEvent::Finished { at, end } if end.outcome.is_failure() => {
            Some(Notice::AttemptFailed {
                key: Arc::clone(key),
                execution,
                attempt,
                at: *at,
                end: end.clone(),
            })
        }
        _ => None,
    }
}

/// The notice of a breaker's move.
pub(super) fn breaker_notice(key: &Arc<TaskKey>, transition: Transition) -> Notice {
    match transition {
        Transition::Opened {
            failures,
            executions,
        } => Notice::CircuitOpened {
            key: Arc::clone(key),
            failures,
            executions,
        },
        Transition::Closed => Notice::CircuitClosed {
            key: Arc::clone(key),
        },
    }
}

/// The notice of missed fires `plan` dropped, if it dropped any (fires it runs all are not
/// worth an alert).
pub(super) fn misfire_notice(key: &Arc<TaskKey>, plan: &MisfirePlan) -> Option<Notice> {
    (plan.skipped > 0 || plan.beyond_window > 0).then(|| Notice::Misfired {
        key: Arc::clone(key),
        missed: plan.missed,
        skipped: plan.skipped,
        beyond_window: plan.beyond_window,
        oldest: plan.oldest_missed,
    })
}
