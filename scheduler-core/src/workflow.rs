//! Dependencies between tasks (`depends_on`): the graph, and the progress of a run.
//!
//! A **run** is one execution of a chain's first task (its root) and everything that follows
//! from it; its id is the root execution's id, and every execution of the run carries it. A
//! dependent task (a child) fires for a run once every parent has finished its part of that
//! run: it fires when each parent reached the outcome its edge asks for (`on`), and its step
//! is skipped when one did not, or did not finish within the edge's `within` of the run's
//! start. A skipped step counts as a finished parent that satisfies no edge, so the skip
//! travels down the chain and every run ends.
//!
//! Where the progress lives: in each child's state ([`RunProgress`] in
//! [`crate::state::TaskState::runs`]), written with the parent's end that caused it, before
//! that end is acknowledged. A new leader therefore finds every run where the old one left
//! it. The child's execution id for a run is derived from the run and the child
//! ([`ExecutionId::step`]), so sending it again after a failover is refused by the queue as
//! a duplicate: a step is neither skipped nor repeated.
//!
//! The graph is checked as a whole, which one spec cannot do: a parent that does not exist,
//! a cycle, or parents from chains with different roots (whose runs never meet, so the task
//! could never fire) make the task INVALID with the reason, until the graph is mended.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::execution_id::ExecutionId;
use crate::key::{KeyMap, KeySet, TableHasher, TaskKey};
use crate::task::{DependOn, Dependency};
use crate::time::UtcMillis;
use crate::validate::FieldError;

/// Runs one child keeps in progress at most: a root that fires faster than its chain
/// finishes must not grow a state without bound. The oldest run is dropped (skipped) first.
pub const MAX_RUNS_IN_PROGRESS: usize = 64;

/// How a task's part of a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// Its execution succeeded.
    Succeeded,
    /// Its execution failed for good (or was killed).
    Failed,
    /// It did not run in this run (an edge unmet, a parent too late, the task paused).
    Skipped,
}

impl StepOutcome {
    /// How an execution's last attempt ended, as a step of a run.
    pub fn of(end: &crate::execution::AttemptEnd) -> Self {
        if end.is_success() {
            StepOutcome::Succeeded
        } else {
            StepOutcome::Failed
        }
    }

    /// Whether an edge waiting for `on` is satisfied by this outcome.
    pub fn satisfies(self, on: DependOn) -> bool {
        matches!(
            (self, on),
            (StepOutcome::Succeeded, DependOn::Success | DependOn::Any)
                | (StepOutcome::Failed, DependOn::Failure | DependOn::Any)
        )
    }
}

/// A child's progress in one run (kept in the child's state until its step ends).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunProgress {
    /// The run's id (its root execution's id).
    pub run: ExecutionId,
    /// When the first parent finished its part (the `within` windows count from here).
    pub started_at: UtcMillis,
    /// The parents that finished, `namespace/id` -> outcome.
    #[serde(default)]
    pub done: BTreeMap<String, StepOutcome>,
    /// Once the step fired: its execution id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<ExecutionId>,
}

impl RunProgress {
    /// `run` reached this task at `now` (its first parent ended).
    pub fn new(run: ExecutionId, now: UtcMillis) -> Self {
        RunProgress {
            run,
            started_at: now,
            done: BTreeMap::new(),
            execution: None,
        }
    }
}

/// What a child does next in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextStep {
    /// Parents are still running, within their windows.
    Wait,
    /// Every parent finished as its edge asks: fire.
    Fire,
    /// The step does not run; why.
    Skip(String),
}

/// Decides a child's step from its edges and its progress at `now`.
pub fn next_step(deps: &[Dependency], progress: &RunProgress, now: UtcMillis) -> NextStep {
    let mut waiting = false;
    for dep in deps {
        match progress.done.get(&dep.task) {
            Some(outcome) if outcome.satisfies(dep.on) => {}
            Some(outcome) => {
                return NextStep::Skip(format!(
                    "parent {} ended {}, the edge waits for {}",
                    dep.task,
                    outcome_name(*outcome),
                    on_name(dep.on)
                ))
            }
            None if progress.started_at.add(dep.within) <= now => {
                return NextStep::Skip(format!(
                    "parent {} did not finish within {} of the run's start",
                    dep.task,
                    humantime::format_duration(dep.within)
                ))
            }
            None => waiting = true,
        }
    }
    if waiting {
        NextStep::Wait
    } else {
        NextStep::Fire
    }
}

fn outcome_name(o: StepOutcome) -> &'static str {
    match o {
        StepOutcome::Succeeded => "in success",
        StepOutcome::Failed => "in failure",
        StepOutcome::Skipped => "skipped",
    }
}

fn on_name(on: DependOn) -> &'static str {
    match on {
        DependOn::Success => "success",
        DependOn::Failure => "failure",
        DependOn::Any => "any end",
    }
}

/// The key a `depends_on[].task` names (validated as `namespace/id`).
pub fn parse_key(task: &str) -> TaskKey {
    let (ns, id) = task.split_once('/').unwrap_or(("", task));
    TaskKey::new(ns, id)
}

/// The edges between registered tasks, to check the graph and to find a task's children.
/// Which tasks exist is the caller's to say (the dispatcher's task table knows): the graph
/// holds nothing for a task without edges, which is almost every task.
#[derive(Debug, Default)]
pub struct Graph {
    parents: KeyMap<Vec<Arc<TaskKey>>>,
    children: KeyMap<Vec<Arc<TaskKey>>>,
}

impl Graph {
    /// Records `key` with its parents (none for an ordinary task), replacing what it had.
    pub fn insert(&mut self, key: &Arc<TaskKey>, deps: &[Dependency]) {
        self.unlink(key);
        if deps.is_empty() {
            return;
        }
        let parents: Vec<Arc<TaskKey>> =
            deps.iter().map(|d| Arc::new(parse_key(&d.task))).collect();
        for p in &parents {
            self.children
                .entry(Arc::clone(p))
                .or_default()
                .push(Arc::clone(key));
        }
        self.parents.insert(Arc::clone(key), parents);
    }

    /// Forgets `key` (deleted); its children now name a missing parent.
    pub fn remove(&mut self, key: &TaskKey) {
        self.unlink(key);
    }

    fn unlink(&mut self, key: &TaskKey) {
        // Most graphs have no edges: a removal from an empty table still hashes the key.
        if self.parents.is_empty() {
            return;
        }
        if let Some(old) = self.parents.remove(key) {
            for p in old {
                if let Some(c) = self.children.get_mut(&p) {
                    c.retain(|k| **k != *key);
                    if c.is_empty() {
                        self.children.remove(&p);
                    }
                }
            }
        }
    }

    /// The tasks that depend on `key` directly.
    pub fn children(&self, key: &TaskKey) -> &[Arc<TaskKey>] {
        self.children.get(key).map_or(&[], Vec::as_slice)
    }

    /// Whether any task depends on `key`.
    pub fn has_children(&self, key: &TaskKey) -> bool {
        self.children.contains_key(key)
    }

    /// Whether an execution of `key` (with `spec`) starts a run: it is the first task of a
    /// chain (no parents of its own, some children).
    pub fn starts_runs(&self, key: &TaskKey, spec: &crate::task::TaskSpec) -> bool {
        spec.depends_on.is_empty() && self.has_children(key)
    }

    /// `key` and every task downstream of it: those whose problems may change with it.
    pub fn affected(&self, key: &Arc<TaskKey>) -> Vec<Arc<TaskKey>> {
        let mut seen = KeySet::default();
        let mut out = Vec::new();
        let mut stack = vec![Arc::clone(key)];
        while let Some(k) = stack.pop() {
            if !seen.insert(Arc::clone(&k)) {
                continue;
            }
            stack.extend(self.children(&k).iter().cloned());
            out.push(k);
        }
        out
    }

    /// What is wrong with `key`'s place in the graph: a missing parent (one `exists` denies),
    /// a cycle through it, parents of different chains. Empty for a task without parents.
    pub fn problems(&self, key: &TaskKey, exists: &dyn Fn(&TaskKey) -> bool) -> Vec<FieldError> {
        let Some(parents) = self.parents.get(key) else {
            return Vec::new();
        };
        let mut errors = Vec::new();
        for (i, p) in parents.iter().enumerate() {
            if !exists(p) {
                errors.push(FieldError::new(
                    format!("depends_on[{i}].task"),
                    format!("task {} does not exist; register it first", p),
                ));
            }
        }
        if let Some(cycle) = self.cycle_through(key) {
            errors.push(FieldError::new(
                "depends_on",
                format!("is a cycle: {}", cycle.join(" -> ")),
            ));
            return errors;
        }
        let roots = self.roots(key, exists);
        if roots.len() > 1 {
            let names: Vec<String> = roots.iter().map(ToString::to_string).collect();
            errors.push(FieldError::new(
                "depends_on",
                format!(
                    "leads back to {} chains (first tasks {}); a run is one execution of one first task, so this task would never fire; make its parents share one first task",
                    roots.len(),
                    names.join(", ")
                ),
            ));
        }
        errors
    }

    /// A cycle through `key`, as `ns/id` names in the order the tasks would run (each one a
    /// parent of the next), if there is one.
    fn cycle_through(&self, key: &TaskKey) -> Option<Vec<String>> {
        // Depth-first over parents with an explicit stack of (task, next parent index).
        let mut path: Vec<(TaskKey, usize)> = vec![(key.clone(), 0)];
        let mut done: HashSet<TaskKey, TableHasher> = HashSet::default();
        while let Some((k, i)) = path.last().cloned() {
            let ps = self.parents.get(&k).map_or(&[][..], Vec::as_slice);
            if i >= ps.len() {
                done.insert(k);
                path.pop();
                continue;
            }
            if let Some(top) = path.last_mut() {
                top.1 += 1;
            }
            let next = ps[i].as_ref();
            if next == key {
                let mut names: Vec<String> =
                    path.iter().rev().map(|(k, _)| k.to_string()).collect();
                names.insert(0, key.to_string());
                return Some(names);
            }
            if !done.contains(next) && !path.iter().any(|(k, _)| k == next) {
                path.push((next.clone(), 0));
            }
        }
        None
    }

    /// The first tasks (no parents, registered) upstream of `key`.
    fn roots(&self, key: &TaskKey, exists: &dyn Fn(&TaskKey) -> bool) -> Vec<TaskKey> {
        let mut roots = Vec::new();
        let mut seen: HashSet<TaskKey, TableHasher> = HashSet::default();
        let mut stack = vec![key.clone()];
        while let Some(k) = stack.pop() {
            if !seen.insert(k.clone()) {
                continue;
            }
            match self.parents.get(&k) {
                Some(ps) => stack.extend(ps.iter().map(|p| TaskKey::clone(p))),
                None if exists(&k) => roots.push(k),
                None => {}
            }
        }
        roots.sort();
        roots
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn dep(task: &str, on: DependOn) -> Dependency {
        Dependency {
            task: task.to_owned(),
            on,
            within: Duration::from_secs(60),
        }
    }

    fn key(id: &str) -> Arc<TaskKey> {
        Arc::new(TaskKey::new("ns", id))
    }

    /// A graph with the set of registered tasks its caller keeps.
    #[derive(Default)]
    struct Registered {
        graph: Graph,
        known: KeySet,
    }

    impl Registered {
        fn insert(&mut self, key: &Arc<TaskKey>, deps: &[Dependency]) {
            self.graph.insert(key, deps);
            self.known.insert(Arc::clone(key));
        }

        fn remove(&mut self, key: &TaskKey) {
            self.graph.remove(key);
            self.known.remove(key);
        }

        fn problems(&self, key: &TaskKey) -> Vec<FieldError> {
            self.graph.problems(key, &|k| self.known.contains(k))
        }
    }

    #[test]
    fn a_child_fires_when_every_edge_is_met_and_skips_when_one_is_not() {
        let deps = [dep("ns/a", DependOn::Success), dep("ns/b", DependOn::Any)];
        let mut p = RunProgress {
            run: ExecutionId::from_u128(1),
            started_at: UtcMillis(0),
            done: BTreeMap::new(),
            execution: None,
        };
        p.done.insert("ns/a".into(), StepOutcome::Succeeded);
        assert_eq!(next_step(&deps, &p, UtcMillis(1_000)), NextStep::Wait);
        p.done.insert("ns/b".into(), StepOutcome::Failed);
        assert_eq!(next_step(&deps, &p, UtcMillis(1_000)), NextStep::Fire);
        p.done.insert("ns/a".into(), StepOutcome::Skipped);
        assert!(
            matches!(next_step(&deps, &p, UtcMillis(1_000)), NextStep::Skip(r) if r.contains("ns/a ended skipped"))
        );
        // A parent too late.
        p.done.remove("ns/a");
        assert!(
            matches!(next_step(&deps, &p, UtcMillis(60_000)), NextStep::Skip(r) if r.contains("within 1m"))
        );
    }

    #[test]
    fn missing_parents_cycles_and_split_roots_are_problems() {
        let mut g = Registered::default();
        g.insert(&key("b"), &[dep("ns/a", DependOn::Success)]);
        let p = g.problems(&key("b"));
        assert!(p[0].reason.contains("ns/a does not exist"), "{p:?}");
        g.insert(&key("a"), &[]);
        assert!(g.problems(&key("b")).is_empty());
        assert_eq!(g.graph.children(&key("a")).len(), 1);

        // a -> b -> c -> a
        g.insert(&key("c"), &[dep("ns/b", DependOn::Success)]);
        g.insert(&key("a"), &[dep("ns/c", DependOn::Success)]);
        let p = g.problems(&key("a"));
        assert_eq!(p.len(), 1, "{p:?}");
        // Arrows point from a parent to the task that runs after it.
        assert_eq!(p[0].reason, "is a cycle: ns/a -> ns/b -> ns/c -> ns/a");
        assert!(!g.problems(&key("b")).is_empty());

        // Two roots: x and y both first tasks of z.
        let mut g = Registered::default();
        g.insert(&key("x"), &[]);
        g.insert(&key("y"), &[]);
        g.insert(
            &key("z"),
            &[
                dep("ns/x", DependOn::Success),
                dep("ns/y", DependOn::Success),
            ],
        );
        let p = g.problems(&key("z"));
        assert!(
            p[0].reason.contains("2 chains (first tasks ns/x, ns/y)"),
            "{p:?}"
        );
        // A diamond under one root is fine.
        let mut g = Registered::default();
        g.insert(&key("r"), &[]);
        g.insert(&key("a"), &[dep("ns/r", DependOn::Success)]);
        g.insert(&key("b"), &[dep("ns/r", DependOn::Success)]);
        g.insert(
            &key("c"),
            &[dep("ns/a", DependOn::Success), dep("ns/b", DependOn::Any)],
        );
        assert!(g.problems(&key("c")).is_empty());
        let mut affected: Vec<String> = g
            .graph
            .affected(&key("r"))
            .iter()
            .map(|k| k.to_string())
            .collect();
        affected.sort();
        assert_eq!(affected, ["ns/a", "ns/b", "ns/c", "ns/r"]);
        g.remove(&key("r"));
        assert!(!g.problems(&key("a")).is_empty());
    }

    #[test]
    fn step_ids_are_stable_uuids_per_run_and_child() {
        let (run_1, run_2) = (ExecutionId::from_u128(1), ExecutionId::from_u128(2));
        let a = ExecutionId::step(run_1, &TaskKey::new("ns", "c"));
        assert_eq!(a, ExecutionId::step(run_1, &TaskKey::new("ns", "c")));
        assert_ne!(a, ExecutionId::step(run_2, &TaskKey::new("ns", "c")));
        assert_ne!(a, ExecutionId::step(run_1, &TaskKey::new("ns", "d")));
        let text = a.to_string();
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "8", "version 8: {text}");
        assert_eq!(
            ExecutionId::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef).to_string(),
            "01234567-89ab-cdef-0123-456789abcdef"
        );
    }
}
