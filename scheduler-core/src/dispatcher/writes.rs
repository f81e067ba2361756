//! Coalesced state writes: which tasks' states are to be written, and when.
//!
//! A change marks its task; the state itself is read only when the writes are taken, so a
//! task that changed ten times between two flushes is written once, at its newest. Two marks
//! are not "now". A fire's: RUNNING waits `running_write_delay`, so a short execution's end
//! goes in the same write (see the dispatcher's module notes). And a routine run's: a
//! periodic task's run that succeeded like the one before changes only what a reader reads
//! as "still fine" (counts, instants), so its write waits up to `routine_write_delay` and
//! takes every run that comes meanwhile with it. A task firing every second is then written
//! once in that delay, not once a fire; any other change (a failure, a pause, a new spec)
//! marks it "now" and ends the wait. The worker events such a write holds stay
//! unacknowledged until it is made (see [`StateWrites::is_pending`]), so a leader that dies
//! meanwhile leaves them for its successor to apply again. A task no
//! longer armed has no current state to read, so its write (INVALID) or deletion is kept
//! here as it is.
//!
//! What a current state's write becomes is the task's to say when the writes are taken
//! ([`Current`]): a one-shot's final goes to the finals ledger ([`crate::finals`]) apart, and
//! the first state of a task nothing was stored for, which only repeats what its spec
//! implies (an `at` one-shot's SCHEDULED), is not written: a new leader derives the same
//! from the spec.

use std::sync::Arc;
use std::time::Duration;

use crate::state::TaskState;
use crate::time::UtcMillis;

use super::StateWrite;
use crate::key::{KeyMap, TaskKey};

#[derive(Debug)]
enum Pending {
    /// Write the task's current state (read when the writes are taken, so the newest wins).
    WriteCurrent,
    /// Write the task's current state once this instant has passed, unless a change that
    /// must be written sooner comes first (a fire waits for its execution's end).
    WriteCurrentAfter(UtcMillis),
    /// Write the task's current state once this instant has passed: routine runs gathered
    /// since the first of them, which later fires and routine runs do not move.
    Routine(UtcMillis),
    /// Write this state (the task is no longer armed: invalid). Boxed: the map keeps up to
    /// half its slots empty and every slot is as large as the largest variant, so an inline
    /// state made each pending write cost about 450 bytes at a million tasks.
    Write(Box<TaskState>),
    /// Delete the state (the task is gone).
    Delete,
}

/// What writing a task's current state means, as the task says when the writes are taken.
pub(super) enum Current<'a> {
    /// The task is gone meanwhile: nothing.
    Gone,
    /// Nothing stored, and the spec implies the state: nothing.
    Implied,
    /// Its state key.
    Write(&'a TaskState),
    /// A one-shot's final: the finals ledger.
    Final(&'a TaskState),
}

/// The writes taken at one flush.
#[derive(Debug, Default)]
pub struct Writes {
    /// States to write to their tasks' state keys (`Some`) or delete (`None`).
    pub states: Vec<StateWrite>,
    /// One-shots' final states, for the finals ledger.
    pub finals: Vec<(Arc<TaskKey>, TaskState)>,
}

impl Writes {
    /// Whether nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty() && self.finals.is_empty()
    }
}

#[derive(Debug)]
pub(super) struct StateWrites {
    pending: KeyMap<Pending>,
    /// How long a fire's RUNNING waits to be written on its own.
    running_delay: Duration,
    /// How long a routine run's state waits to be written (zero: not at all).
    routine_delay: Duration,
    /// False: nothing is recorded (the user keeps no states).
    enabled: bool,
}

impl StateWrites {
    pub(super) fn new(running_delay: Duration, routine_delay: Duration, enabled: bool) -> Self {
        StateWrites {
            pending: KeyMap::default(),
            running_delay,
            routine_delay,
            enabled,
        }
    }

    /// The task's current state is to be written at the next flush.
    pub(super) fn current(&mut self, key: &Arc<TaskKey>) {
        if !self.enabled {
            return;
        }
        self.pending.insert(Arc::clone(key), Pending::WriteCurrent);
    }

    /// The task's RUNNING state is to be written once the running delay from `now` has
    /// passed; a change already waiting to be written goes as soon as it would have.
    pub(super) fn running(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        if !self.enabled {
            return;
        }
        self.pending
            .entry(Arc::clone(key))
            .or_insert(Pending::WriteCurrentAfter(now.add(self.running_delay)));
    }

    /// A routine run of the task ended: its state is to be written once the routine delay
    /// from the first routine run not yet written has passed, or sooner with any change that
    /// must be. It replaces a fire's RUNNING mark, which its end answers.
    pub(super) fn routine(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        if !self.enabled {
            return;
        }
        if self.routine_delay.is_zero() {
            return self.current(key);
        }
        let after = Pending::Routine(now.add(self.routine_delay));
        match self.pending.get_mut(key) {
            None => {
                self.pending.insert(Arc::clone(key), after);
            }
            Some(pending @ Pending::WriteCurrentAfter(_)) => *pending = after,
            Some(_) => {}
        }
    }

    /// Whether a write of the task's state waits to be taken: the worker events applied to
    /// it are not in etcd yet.
    pub(super) fn is_pending(&self, key: &TaskKey) -> bool {
        self.pending.contains_key(key)
    }

    /// The pending write's own key for `key`, if a write waits.
    pub(super) fn pending_key(&self, key: &TaskKey) -> Option<&Arc<TaskKey>> {
        self.pending.get_key_value(key).map(|(k, _)| k)
    }

    /// `state` is to be written as it is: the task is no longer armed.
    pub(super) fn invalid(&mut self, key: Arc<TaskKey>, state: TaskState) {
        if !self.enabled {
            return;
        }
        self.pending.insert(key, Pending::Write(Box::new(state)));
    }

    /// The task's state is to be deleted.
    pub(super) fn delete(&mut self, key: Arc<TaskKey>) {
        if !self.enabled {
            return;
        }
        self.pending.insert(key, Pending::Delete);
    }

    /// Whether the task's state is to be deleted and was not yet: what is stored is still
    /// there, so a task armed again under the key must write its state over it.
    pub(super) fn is_deleting(&self, key: &TaskKey) -> bool {
        matches!(self.pending.get(key), Some(Pending::Delete))
    }

    /// The writes due at `now`, each current state's write as `current` says.
    pub(super) fn take<'a>(
        &mut self,
        now: UtcMillis,
        current: impl Fn(&TaskKey) -> Current<'a>,
    ) -> Writes {
        let mut out = Writes {
            states: Vec::with_capacity(self.pending.len()),
            finals: Vec::new(),
        };
        self.pending.retain(|key, pending| {
            let key = Arc::clone(key);
            match pending {
                Pending::WriteCurrentAfter(at) | Pending::Routine(at) if *at > now => return true,
                Pending::WriteCurrent | Pending::WriteCurrentAfter(_) | Pending::Routine(_) => {
                    match current(&key) {
                        Current::Gone | Current::Implied => {}
                        Current::Write(state) => out.states.push((key, Some(state.clone()))),
                        Current::Final(state) => out.finals.push((key, state.clone())),
                    }
                }
                Pending::Write(state) => out.states.push((key, Some(TaskState::clone(state)))),
                Pending::Delete => out.states.push((key, None)),
            }
            false
        });
        // A takeover marks every task; the table keeps that capacity (tens of bytes a task)
        // long after the writes went unless it is given back.
        if self.pending.capacity() > 4 * self.pending.len() + 1024 {
            self.pending.shrink_to(2 * self.pending.len());
        }
        out
    }
}
