//! The leader's scheduling state machine: which tasks are armed, what is due, what to enqueue.
//!
//! The engine feeds it registry changes, execution events and the time, and carries out what
//! it asks for (enqueue these fires, write these states, raise these alerts); it does no I/O
//! and reads no clock, so the whole fire-path logic runs on virtual time in tests. One
//! [`Dispatcher`] lives for one leadership term: a new leader builds a fresh one from the
//! registry and the recorded states, which is where missed fires are found
//! ([`crate::misfire`]).
//!
//! Fire path: the [`TimerWheel`](crate::timer::TimerWheel) holds one entry per armed task (its
//! next fire). When [`Dispatcher::poll`] advances it, each due task is re-armed for its
//! following fire at once (so the schedule never drifts with dispatch delays) and the due fire
//! goes to the [`ReadyQueue`](crate::ready::ReadyQueue), which orders fires by priority with
//! aging when the optional [`TokenBucket`](crate::limiter::TokenBucket) defers them. Fires
//! leaving the ready queue pass the task's [`CircuitBreaker`](crate::breaker::CircuitBreaker)
//! and become [`Dispatch`]es.
//!
//! Overlap is decided here and enforced in Redis ([`crate::overlap`]): each dispatch carries
//! the mode its enqueue is to apply, and a `forbid` fire that comes back
//! [`EnqueueOutcome::Held`](crate::execution::EnqueueOutcome::Held) is kept by its task (one
//! held fire and one retry timer per task; later fires merge into it) until the task's final
//! execution event arrives or the retry finds the previous execution gone. Dispatching a held
//! fire again is not a new fire: it is not counted and does not pass the breaker again.
//!
//! States are written lazily: changes mark a task dirty and [`Dispatcher::take_state_writes`]
//! hands the engine the latest state of each dirty task, so a busy leader writes each task at
//! most once per flush however often it fired. What a new leader needs in order to continue
//! (anchor, last and next fire) is in every write; a fire dispatched but not yet written is
//! dispatched again by the next leader and refused as a duplicate by the enqueue script.
//!
//! That refusal is also why a fire's own state change (RUNNING, the fire counted) waits: it is
//! written only if the execution is still running [`DispatcherConfig::running_write_delay`]
//! later, and otherwise goes in one write with the execution's end. A periodic task whose
//! executions are short costs one etcd write per execution, not two. A one-shot's final goes
//! to the finals ledger, many to an etcd key ([`crate::finals`]), and an `at` one-shot's first
//! state, which its spec implies, is not written at all. A takeover writes only the states it
//! changed.
//!
//! Layout: each concern that keeps state of its own between calls is a small struct the
//! [`Dispatcher`] owns and delegates to: the timers (`timers`), the rate-limited ready queue
//! (`fires`), the coalesced state writes (`writes`), paused namespaces and their parked fires
//! (`pauses`), the dependency graph and the specs it sets aside (`dependencies`), and the
//! index of tasks with runs in progress (`runs`). What is the task's own, because it is
//! written with its state (a held fire, a deadline mark, a fan-out's progress, a run's
//! steps) or lives and dies with it (its breaker), is kept in the task (`armed`); the
//! modules `held`, `deadlines`, `pieces` and `runs` handle it through the task table. The
//! task's life (`arming`), the fire path (`poll`) and execution events (`events`) tie them
//! together.

use crate::state::TaskState;
use crate::time::UtcMillis;

mod armed;
mod arming;
mod config;
mod deadlines;
mod dependencies;
mod events;
mod fires;
mod held;
mod output;
mod pauses;
mod pieces;
mod poll;
mod repair;
mod runs;
mod timers;
mod writes;

pub use crate::key::TaskKey;
use crate::key::{KeyMap, KeySet};
pub use config::{DispatcherConfig, DEFAULT_ROUTINE_WRITE_DELAY, DEFAULT_STALL_THRESHOLD};
pub use output::{Dispatch, Notice, StateWrite};
pub use repair::{InDoubt, LOST_END_ERROR};

use armed::Armed;
use dependencies::Dependencies;
use fires::ReadyFires;
use pauses::Pauses;
use runs::RunTracker;
use timers::Timers;
pub use writes::Writes;
use writes::{Current, StateWrites};

/// The scheduling state machine of one leadership term; see the [module notes](self).
#[derive(Debug)]
pub struct Dispatcher {
    config: DispatcherConfig,
    /// Boxed: a hash table keeps up to half its slots empty, and an empty slot of a large
    /// inline value costs as much as a full one (at a million tasks the table alone held
    /// about 900 bytes per task; boxed, a slot is 16 bytes).
    tasks: KeyMap<Box<Armed>>,
    timers: Timers,
    fires: ReadyFires,
    writes: StateWrites,
    notices: Vec<Notice>,
    next_generation: u64,
    pauses: Pauses,
    deps: Dependencies,
    runs: RunTracker,
    /// When this term began: a fire due before it and never sent was missed for want of a
    /// leader.
    term_start: UtcMillis,
    /// Tasks whose breaker opened, a superset of those open now: pruned when counted, so
    /// that the count costs nothing on the fire path and nothing for a task never throttled.
    throttled: KeySet,
    /// Tasks not armed whose INVALID state is stored: when one is armed again, its state is
    /// written even if the spec implies it.
    invalid_stored: KeySet,
}

impl Dispatcher {
    /// An empty dispatcher whose timer starts at `now`.
    pub fn new(config: DispatcherConfig, now: UtcMillis) -> Self {
        Dispatcher {
            timers: Timers::new(config.timer.clone(), now),
            fires: ReadyFires::new(&config, now),
            writes: StateWrites::new(
                config.running_write_delay,
                config.routine_write_delay,
                config.write_states,
            ),
            config,
            tasks: KeyMap::default(),
            notices: Vec::new(),
            next_generation: 0,
            pauses: Pauses::default(),
            deps: Dependencies::default(),
            runs: RunTracker::new(now),
            term_start: now,
            throttled: KeySet::default(),
            invalid_stored: KeySet::default(),
        }
    }

    /// Tasks known (armed, paused or done).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is known.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Fires due but not yet dispatched (deferred by the rate limit).
    pub fn ready_len(&self) -> usize {
        self.fires.len()
    }

    /// Timers pending.
    pub fn armed_len(&self) -> usize {
        self.timers.len()
    }

    /// Tasks whose circuit breaker is open now.
    pub fn throttled_len(&mut self) -> usize {
        let tasks = &self.tasks;
        self.throttled
            .retain(|key| tasks.get(key).is_some_and(|t| t.is_throttled()));
        self.throttled.len()
    }

    /// The tasks that list `key` among their parents (`depends_on`), known or not.
    pub fn dependents(&self, key: &TaskKey) -> &[std::sync::Arc<TaskKey>] {
        self.deps.children(key)
    }

    /// Whether a fire of the task came due and is not dispatched yet: it waits in the ready
    /// queue (a burst, the rate limit) or is parked by its namespace's pause. Its state does
    /// not show it (the next fire is already the one after), yet it is still to come.
    pub fn fire_pending(&self, key: &TaskKey) -> bool {
        self.tasks.get(key).is_some_and(|t| t.queued.get() > 0) || self.pauses.is_parked(key)
    }

    /// The current state of a task.
    pub fn state(&self, key: &TaskKey) -> Option<&TaskState> {
        self.tasks.get(key).map(|t| &t.state)
    }

    /// The states to write at `now`, newest version of each: `Some` to write, `None` to
    /// delete. A fire's state whose write waits (see the module notes) stays until its time;
    /// [`UtcMillis::MAX`] takes everything (the last flush of a term).
    /// (Finals included, as state writes: see [`Dispatcher::take_writes`] for them apart.)
    pub fn take_state_writes(&mut self, now: UtcMillis) -> Vec<StateWrite> {
        let Writes { mut states, finals } = self.take_writes(now);
        states.extend(finals.into_iter().map(|(k, s)| (k, Some(s))));
        states
    }

    /// The writes due at `now`, as [`Dispatcher::take_state_writes`], with the one-shots'
    /// finals apart (they go to the finals ledger, [`crate::finals`]). A state the spec
    /// implies, of a task nothing was stored for, is not written at all.
    pub fn take_writes(&mut self, now: UtcMillis) -> Writes {
        let tasks = &self.tasks;
        let taken = self.writes.take(now, |key| match tasks.get(key) {
            Some(t) => t.current_write(),
            None => Current::Gone,
        });
        let written = taken
            .states
            .iter()
            .filter(|(_, s)| s.is_some())
            .map(|(k, _)| k);
        for key in written.chain(taken.finals.iter().map(|(k, _)| k)) {
            if let Some(t) = self.tasks.get_mut(key) {
                t.stored = true;
            }
        }
        taken
    }

    /// Whether a write of the task's state waits (a fire's RUNNING, routine runs gathered):
    /// the worker events applied to the task are not in etcd yet, so they are not to be
    /// acknowledged.
    pub fn write_pending(&self, key: &TaskKey) -> bool {
        self.writes.is_pending(key)
    }

    /// The key of the task whose state write waits, as the writes hold it (so a caller that
    /// keeps it shares that allocation); `None` when none waits.
    pub fn pending_write_key(&self, key: &TaskKey) -> Option<&std::sync::Arc<TaskKey>> {
        self.writes.pending_key(key)
    }

    /// Notices raised since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    /// A generation no entry of the timer or the ready queue carries yet.
    fn new_generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }
}

#[cfg(test)]
mod tests;
