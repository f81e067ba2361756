//! Coalesced state writes: which tasks' states are to be written, and when.
//!
//! A change marks its task; the state itself is read only when the writes are taken, so a
//! task that changed ten times between two flushes is written once, at its newest. The one
//! mark that is not "now" is a fire's: RUNNING waits `running_write_delay`, so a short
//! execution's end goes in the same write (see the dispatcher's module notes). A task no
//! longer armed has no current state to read, so its write (INVALID) or deletion is kept
//! here as it is.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::state::TaskState;
use crate::time::UtcMillis;

use super::StateWrite;
use crate::key::TaskKey;

#[derive(Debug)]
enum Pending {
    /// Write the task's current state (read when the writes are taken, so the newest wins).
    WriteCurrent,
    /// Write the task's current state once this instant has passed, unless a change that
    /// must be written sooner comes first (a fire waits for its execution's end).
    WriteCurrentAfter(UtcMillis),
    /// Write this state (the task is no longer armed: invalid). Boxed: the map keeps up to
    /// half its slots empty and every slot is as large as the largest variant, so an inline
    /// state made each pending write cost about 450 bytes at a million tasks.
    Write(Box<TaskState>),
    /// Delete the state (the task is gone).
    Delete,
}

#[derive(Debug)]
pub(super) struct StateWrites {
    pending: HashMap<Arc<TaskKey>, Pending>,
    /// How long a fire's RUNNING waits to be written on its own.
    running_delay: Duration,
}

impl StateWrites {
    pub(super) fn new(running_delay: Duration) -> Self {
        StateWrites {
            pending: HashMap::new(),
            running_delay,
        }
    }

    /// The task's current state is to be written at the next flush.
    pub(super) fn current(&mut self, key: &Arc<TaskKey>) {
        self.pending.insert(Arc::clone(key), Pending::WriteCurrent);
    }

    /// The task's RUNNING state is to be written once the running delay from `now` has
    /// passed; a change already waiting to be written goes as soon as it would have.
    pub(super) fn running(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        self.pending
            .entry(Arc::clone(key))
            .or_insert(Pending::WriteCurrentAfter(now.add(self.running_delay)));
    }

    /// `state` is to be written as it is: the task is no longer armed.
    pub(super) fn invalid(&mut self, key: Arc<TaskKey>, state: TaskState) {
        self.pending.insert(key, Pending::Write(Box::new(state)));
    }

    /// The task's state is to be deleted.
    pub(super) fn delete(&mut self, key: Arc<TaskKey>) {
        self.pending.insert(key, Pending::Delete);
    }

    /// The writes due at `now`, each current state read through `current` (`None` for a
    /// task gone meanwhile, which writes nothing).
    pub(super) fn take<'a>(
        &mut self,
        now: UtcMillis,
        current: impl Fn(&TaskKey) -> Option<&'a TaskState>,
    ) -> Vec<StateWrite> {
        let mut out = Vec::with_capacity(self.pending.len());
        self.pending.retain(|key, pending| {
            let write = match pending {
                Pending::WriteCurrentAfter(at) if *at > now => return true,
                Pending::WriteCurrent | Pending::WriteCurrentAfter(_) => {
                    current(key).map(|state| Some(state.clone()))
                }
                Pending::Write(state) => Some(Some(TaskState::clone(state))),
                Pending::Delete => Some(None),
            };
            if let Some(w) = write {
                out.push((Arc::clone(key), w));
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
