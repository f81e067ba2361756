//! Paused namespaces, and the fires their tasks missed meanwhile.
//!
//! A paused task keeps its schedule but not its timer: the first fire that comes due is
//! parked (one per task, with the task's generation then) and nothing is re-armed, so a
//! paused namespace of many tasks costs no work per tick. On resume each parked task's
//! misfire policy decides what of the missed fires runs, as after a leader's stall; a task
//! whose spec changed meanwhile armed itself anew and is left alone (its generation moved).

use std::collections::HashSet;
use std::sync::Arc;

use crate::time::UtcMillis;

use super::deadlines::restart_deadlines;
use super::Dispatcher;
use crate::key::{KeyMap, TableHasher, TaskKey};

/// A parked task's first missed fire, and its generation when it was parked.
#[derive(Clone, Copy, Debug)]
pub(super) struct Parked {
    pub(super) first_missed: UtcMillis,
    pub(super) generation: u64,
}

#[derive(Debug, Default)]
pub(super) struct Pauses {
    /// Namespaces whose tasks do not fire (an operator paused them).
    paused: HashSet<Arc<str>, TableHasher>,
    /// Tasks of paused namespaces whose scheduled fire came due.
    parked: KeyMap<Parked>,
}

impl Pauses {
    pub(super) fn pause(&mut self, namespace: &str) {
        self.paused.insert(Arc::from(namespace));
    }

    pub(super) fn is_paused(&self, namespace: &str) -> bool {
        self.paused.contains(namespace)
    }

    pub(super) fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.paused.iter().map(|n| &**n)
    }

    /// Parks the task's fire at `fire_at` unless one is parked already (the first missed
    /// fire is the one the misfire policy counts from).
    pub(super) fn park(&mut self, key: &Arc<TaskKey>, fire_at: UtcMillis, generation: u64) {
        debug_assert!(
            self.is_paused(&key.namespace),
            "only tasks of paused namespaces park"
        );
        self.parked.entry(Arc::clone(key)).or_insert(Parked {
            first_missed: fire_at,
            generation,
        });
    }

    /// Resumes `namespace`, handing out its parked tasks; `None` if it was not paused.
    pub(super) fn resume(&mut self, namespace: &str) -> Option<Vec<(Arc<TaskKey>, Parked)>> {
        if !self.paused.remove(namespace) {
            return None;
        }
        let keys: Vec<Arc<TaskKey>> = self
            .parked
            .keys()
            .filter(|k| &*k.namespace == namespace)
            .cloned()
            .collect();
        Some(
            keys.into_iter()
                .filter_map(|key| self.parked.remove_entry(&key))
                .collect(),
        )
    }

    /// Whether the task has a fire parked.
    pub(super) fn is_parked(&self, key: &TaskKey) -> bool {
        !self.parked.is_empty() && self.parked.contains_key(key)
    }

    /// Forgets a task that is gone.
    pub(super) fn forget(&mut self, key: &TaskKey) {
        if !self.parked.is_empty() {
            self.parked.remove(key);
        }
    }
}

impl Dispatcher {
    /// Stops the tasks of `namespace` from firing: each scheduled fire that comes due
    /// meanwhile is parked, one per task. Run-now requests still run (an operator asked).
    pub fn pause_namespace(&mut self, namespace: &str) {
        self.pauses.pause(namespace);
    }

    /// Lets the tasks of `namespace` fire again at `now`. The fires each task missed while
    /// paused follow its misfire policy (`fire_once` runs one, `fire_all` those within the
    /// catch-up window, `skip` none), and its schedule goes on from `now`.
    pub fn resume_namespace(&mut self, namespace: &str, now: UtcMillis) {
        let Some(parked) = self.pauses.resume(namespace) else {
            return;
        };
        for (key, parked) in parked {
            let Some(mut task) = self.tasks.remove(&key) else {
                continue;
            };
            // A spec changed meanwhile armed its own next fire under a new generation.
            if task.generation == parked.generation && task.timer.is_none() {
                self.replay_missed(&mut task, parked.first_missed, now);
            }
            // The fires due while paused are not judged by the deadline.
            restart_deadlines(&mut task.state, &task.spec, now);
            self.judge_deadline(&mut task, now);
            self.tasks.insert(key, task);
        }
    }

    /// The paused namespaces.
    pub fn paused_namespaces(&self) -> impl Iterator<Item = &str> {
        self.pauses.namespaces()
    }
}
