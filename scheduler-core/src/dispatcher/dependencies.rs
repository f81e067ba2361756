//! Every task's place in the dependency graph, and the specs the graph sets aside.
//!
//! A valid spec whose place is unsound (a parent missing, a cycle) is not armed: it is kept
//! here, INVALID, until a change elsewhere in the graph mends it, and then armed from here
//! without the registry sending it again. The graph itself ([`Graph`]) knows only edges.
//!
//! A parent exists if it is a task the dispatcher knows: armed (in its task table, which
//! the caller asks) or invalid (kept here, being out of that table). So the check costs
//! nothing per task beyond the table every task is in anyway.

use std::sync::Arc;

use crate::task::{Dependency, TaskSpec};
use crate::validate::FieldError;
use crate::workflow::Graph;

use crate::key::{KeyMap, KeySet, TaskKey};

#[derive(Debug, Default)]
pub(super) struct Dependencies {
    graph: Graph,
    /// Valid specs set aside because of their place in the graph, with their revision.
    set_aside: KeyMap<(Arc<TaskSpec>, i64)>,
    /// Tasks registered but not armed (INVALID, by their spec or their place): they exist
    /// for their children, which wait rather than name a missing parent.
    invalid: KeySet,
}

impl Dependencies {
    /// Records the task's parents (none for an invalid spec: it still exists for its
    /// children, which wait rather than name a missing parent).
    pub(super) fn insert(&mut self, key: &Arc<TaskKey>, depends_on: &[Dependency]) {
        self.graph.insert(key, depends_on);
    }

    /// Forgets a deleted task; its children keep their edges, to a missing parent now.
    pub(super) fn remove(&mut self, key: &TaskKey) {
        self.graph.remove(key);
        if !self.set_aside.is_empty() {
            self.set_aside.remove(key);
        }
        self.clear_invalid(key);
    }

    /// The task is registered and INVALID: it exists, out of the task table.
    pub(super) fn set_invalid(&mut self, key: &Arc<TaskKey>) {
        self.invalid.insert(Arc::clone(key));
    }

    /// The task is armed (or gone): no longer kept as invalid.
    pub(super) fn clear_invalid(&mut self, key: &TaskKey) {
        if !self.invalid.is_empty() {
            self.invalid.remove(key);
        }
    }

    /// What is wrong with the task's place in the graph (nothing, almost always); `armed`
    /// says whether a task is in the dispatcher's table.
    pub(super) fn problems(
        &self,
        key: &TaskKey,
        armed: impl Fn(&TaskKey) -> bool,
    ) -> Vec<FieldError> {
        let exists = |k: &TaskKey| *k == *key || armed(k) || self.invalid.contains(k);
        self.graph.problems(key, &exists)
    }

    /// Sets aside a valid spec whose place is unsound.
    pub(super) fn set_aside(&mut self, key: &Arc<TaskKey>, spec: &Arc<TaskSpec>, revision: i64) {
        self.set_aside
            .insert(Arc::clone(key), (Arc::clone(spec), revision));
    }

    /// The task is armed, or invalid for its own spec: nothing of it is set aside any more.
    pub(super) fn clear_set_aside(&mut self, key: &TaskKey) {
        if !self.set_aside.is_empty() {
            self.set_aside.remove(key);
        }
    }

    /// The spec set aside for the task, if any.
    pub(super) fn set_aside_spec(&self, key: &TaskKey) -> Option<(Arc<TaskSpec>, i64)> {
        self.set_aside.get(key).cloned()
    }

    pub(super) fn has_children(&self, key: &TaskKey) -> bool {
        self.graph.has_children(key)
    }

    /// The tasks downstream of `key` (and `key` itself), to re-check after it changed.
    pub(super) fn affected(&self, key: &Arc<TaskKey>) -> Vec<Arc<TaskKey>> {
        self.graph.affected(key)
    }

    pub(super) fn children(&self, key: &TaskKey) -> &[Arc<TaskKey>] {
        self.graph.children(key)
    }

    /// Whether a fire of the task starts a run (it is the first of a chain).
    pub(super) fn starts_runs(&self, key: &TaskKey, spec: &TaskSpec) -> bool {
        self.graph.starts_runs(key, spec)
    }
}
