//! Workflow runs (see [`crate::workflow`]): a first task's end starts a run, and each
//! dependent task's step in it fires, waits or is skipped as its parents' ends arrive.
//!
//! A run's progress is kept in each child's state (written, so a new leader carries on); the
//! dispatcher only needs to know which tasks hold runs in progress, to sweep them for
//! parents that are too late without walking every task. That index and its sweep clock
//! are [`RunTracker`]; the steps themselves are decided here, on the task table, since a
//! step's outcome travels on to tasks further down.

use std::sync::Arc;
use std::time::Duration;

use crate::execution_id::ExecutionId;
use crate::state::TaskState;
use crate::time::UtcMillis;
use crate::workflow::{next_step, NextStep, RunProgress, StepOutcome, MAX_RUNS_IN_PROGRESS};

use super::armed::{Armed, FireKind};
use super::output::Notice;
use super::Dispatcher;
use crate::key::{KeySet, TaskKey};

/// Finished runs a task remembers (see [`remember_done`]).
const RUNS_REMEMBERED: usize = 16;

/// The tasks whose state holds runs in progress, and when they are swept next.
#[derive(Debug)]
pub(super) struct RunTracker {
    with_runs: KeySet,
    next_sweep: UtcMillis,
}

impl RunTracker {
    pub(super) fn new(now: UtcMillis) -> Self {
        RunTracker {
            with_runs: KeySet::default(),
            next_sweep: now,
        }
    }

    /// The task holds a run in progress.
    pub(super) fn track(&mut self, key: &Arc<TaskKey>) {
        self.with_runs.insert(Arc::clone(key));
    }

    /// The task holds no run in progress any more (or is gone).
    pub(super) fn untrack(&mut self, key: &TaskKey) {
        if !self.with_runs.is_empty() {
            self.with_runs.remove(key);
        }
    }

    /// The tasks to sweep at `now`, once a second at most; `None` when it is not time.
    fn sweep_due(&mut self, now: UtcMillis) -> Option<Vec<Arc<TaskKey>>> {
        if now < self.next_sweep || self.with_runs.is_empty() {
            return None;
        }
        self.next_sweep = now.add(Duration::from_secs(1));
        Some(self.with_runs.iter().cloned().collect())
    }
}

impl Dispatcher {
    /// A task's execution ended for good: its part of a run is over, and its children learn
    /// it. A first task (no parents) starts a run named after the execution; a dependent
    /// task ends the step its execution was fired for (its other executions, run by hand,
    /// belong to no run). Idempotent: the same end again records nothing new, a step fired
    /// again keeps its execution id, and runs a child finished are remembered.
    pub(super) fn on_step_end(
        &mut self,
        key: &TaskKey,
        execution: ExecutionId,
        outcome: StepOutcome,
        now: UtcMillis,
    ) {
        let Some(task) = self.tasks.get_mut(key) else {
            return;
        };
        if task.spec.depends_on.is_empty() && !self.deps.has_children(key) {
            // Neither a step nor the first task of a chain: the common case, kept free.
            return;
        }
        let run = if task.spec.depends_on.is_empty() {
            execution
        } else {
            let Some(i) = task
                .state
                .runs
                .iter()
                .position(|r| r.execution == Some(execution))
            else {
                return;
            };
            let done = task.state.runs.remove(i);
            remember_done(&mut task.state, done.run);
            if task.state.runs.is_empty() {
                self.runs.untrack(key);
            }
            self.writes.current(&task.key);
            done.run
        };
        let parent = Arc::clone(&task.key);
        self.propagate(parent, run, outcome, now);
    }

    /// Hands `parent`'s outcome in `run` to its children, and a skip on down the chain.
    fn propagate(
        &mut self,
        parent: Arc<TaskKey>,
        run: ExecutionId,
        outcome: StepOutcome,
        now: UtcMillis,
    ) {
        let mut work = vec![(parent, outcome)];
        while let Some((parent, outcome)) = work.pop() {
            let parent_text = parent.to_string();
            for child in self.deps.children(&parent).to_vec() {
                let Some(task) = self.tasks.get_mut(&child) else {
                    // INVALID or held: its step does not run, and nothing runs after it.
                    work.push((child, StepOutcome::Skipped));
                    continue;
                };
                if task.state.runs_done.contains(&run) {
                    continue;
                }
                let i = match task.state.runs.iter().position(|r| r.run == run) {
                    Some(i) => i,
                    None => {
                        if task.state.runs.len() >= MAX_RUNS_IN_PROGRESS {
                            self.drop_oldest_run(&child, now);
                        }
                        let Some(task) = self.tasks.get_mut(&child) else {
                            continue;
                        };
                        task.state.runs.push(RunProgress::new(run, now));
                        task.state.runs.len() - 1
                    }
                };
                let Some(task) = self.tasks.get_mut(&child) else {
                    continue;
                };
                self.runs.track(&child);
                self.writes.current(&child);
                let progress = &mut task.state.runs[i];
                if progress.execution.is_some() {
                    continue;
                }
                progress.done.insert(parent_text.clone(), outcome);
                if let Some(skip) = self.decide_step(&child, i, now) {
                    work.push((child, skip));
                }
            }
        }
    }

    /// Makes room for a new run in `key`'s state: the oldest run gives way, its step
    /// skipped (and the steps after it, if it had not fired).
    fn drop_oldest_run(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        let Some(task) = self.tasks.get_mut(key) else {
            return;
        };
        if task.state.runs.is_empty() {
            return;
        }
        let oldest = task.state.runs.remove(0);
        remember_done(&mut task.state, oldest.run);
        self.notices.push(Notice::StepSkipped {
            key: Arc::clone(key),
            run: oldest.run,
            reason: format!("more than {MAX_RUNS_IN_PROGRESS} runs in progress"),
        });
        if oldest.execution.is_none() {
            self.propagate(Arc::clone(key), oldest.run, StepOutcome::Skipped, now);
        }
    }

    /// Fires the step at `runs[i]` of `key` if its parents allow it now, or skips it.
    /// Returns `Some(Skipped)` when the step was skipped (to hand on to its children).
    fn decide_step(&mut self, key: &Arc<TaskKey>, i: usize, now: UtcMillis) -> Option<StepOutcome> {
        let paused = self.pauses.is_paused(&key.namespace);
        let task = self.tasks.get_mut(key)?;
        let progress = task.state.runs.get(i)?;
        let mut decided = next_step(&task.spec.depends_on, progress, now);
        if decided == NextStep::Fire && (task.spec.paused || paused) {
            decided = NextStep::Skip("the task is paused".to_owned());
        }
        match decided {
            NextStep::Wait => None,
            NextStep::Fire => {
                let run = progress.run;
                let execution = ExecutionId::step(run, key);
                task.state.runs[i].execution = Some(execution);
                let step = FireKind::Step(Box::new((execution, run)));
                self.fires.push(task, now, step, now);
                None
            }
            NextStep::Skip(reason) => {
                let done = task.state.runs.remove(i);
                remember_done(&mut task.state, done.run);
                self.notices.push(Notice::StepSkipped {
                    key: Arc::clone(key),
                    run: done.run,
                    reason,
                });
                Some(StepOutcome::Skipped)
            }
        }
    }

    /// Skips the steps whose parents are too late, once a second at most.
    pub(super) fn sweep_runs(&mut self, now: UtcMillis) {
        let Some(keys) = self.runs.sweep_due(now) else {
            return;
        };
        for key in keys {
            let mut i = 0;
            while let Some(task) = self.tasks.get(&key) {
                let Some(progress) = task.state.runs.get(i) else {
                    if task.state.runs.is_empty() {
                        self.runs.untrack(&key);
                    }
                    break;
                };
                if progress.execution.is_some() {
                    i += 1;
                    continue;
                }
                let run = progress.run;
                match self.decide_step(&key, i, now) {
                    Some(skipped) => {
                        self.writes.current(&key);
                        self.propagate(Arc::clone(&key), run, skipped, now);
                    }
                    None => i += 1,
                }
            }
        }
    }

    /// Sends again the steps a previous leader fired for a task just loaded: they may not
    /// have reached the queue (under the same execution id, a duplicate if they had).
    pub(super) fn resend_steps(&mut self, task: &Armed, now: UtcMillis) {
        for progress in &task.state.runs {
            if let Some(execution) = progress.execution {
                let step = FireKind::Step(Box::new((execution, progress.run)));
                self.fires.push(task, now, step, now);
            }
        }
        if !task.state.runs.is_empty() {
            self.runs.track(&task.key);
        }
    }
}

/// Keeps the last runs a task finished its step of, so that a parent's end read again
/// (after a failover) does not start the step anew.
fn remember_done(state: &mut TaskState, run: ExecutionId) {
    if state.runs_done.len() >= RUNS_REMEMBERED {
        state.runs_done.remove(0);
    }
    state.runs_done.push(run);
}
