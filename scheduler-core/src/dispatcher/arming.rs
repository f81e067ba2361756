//! A task's life in the dispatcher: armed from its spec (loaded, or updated in place), set
//! aside INVALID, or gone.
//!
//! Loading is where a takeover's missed fires are found (the recorded state says how far
//! the last leader got, and the task's misfire policy says what of the rest runs); an
//! update re-arms from now without catch-up, since the change itself is not missed time.
//! A task's place in the dependency graph is checked before it is armed, and every task
//! downstream is checked again after it changed.

use std::sync::Arc;
use std::time::Duration;

use crate::misfire::{plan_misfires, ScheduleCursor};
use crate::schedule::CompiledSchedule;
use crate::state::TaskState;
use crate::status::TaskStatus;
use crate::task::{Schedule, TaskSpec};
use crate::time::UtcMillis;
use crate::validate::FieldError;

use super::armed::{set_status, Armed, FireKind};
use super::deadlines::restart_deadlines;
use super::output::misfire_notice;
use super::Dispatcher;
use crate::key::TaskKey;

impl Dispatcher {
    /// Adds or updates a task from its spec at etcd `revision`, with the state recorded for it
    /// (`None` for a task never recorded). Missed fires are planned with the task's misfire
    /// policy when it is first loaded; an update re-arms from `now` without catch-up.
    pub fn upsert(
        &mut self,
        key: impl Into<Arc<TaskKey>>,
        spec: impl Into<Arc<TaskSpec>>,
        revision: i64,
        recorded: Option<TaskState>,
        now: UtcMillis,
    ) {
        // Shared, not copied: the engine's catalog holds the same spec.
        let spec: Arc<TaskSpec> = spec.into();
        let key: Arc<TaskKey> = key.into();
        self.deps.insert(&key, &spec.depends_on);
        self.place(key.clone(), spec, revision, recorded, now);
        self.recheck_downstream(&key, now);
    }

    /// Arms a task whose place in the graph is sound, or holds it INVALID with the reason.
    fn place(
        &mut self,
        key: Arc<TaskKey>,
        spec: Arc<TaskSpec>,
        revision: i64,
        recorded: Option<TaskState>,
        now: UtcMillis,
    ) {
        let tasks = &self.tasks;
        let problems = self.deps.problems(&key, |k| tasks.contains_key(k));
        if !problems.is_empty() {
            self.deps.set_aside(&key, &spec, revision);
            self.invalidate(key, revision, problems, now);
            return;
        }
        self.deps.clear_set_aside(&key);
        let schedule = match spec.schedule.compile() {
            Ok(s) => s,
            Err(e) => {
                let errors = vec![FieldError::new("schedule", e.to_string())];
                self.invalidate(key, revision, errors, now);
                return;
            }
        };
        match self.tasks.remove(&key) {
            Some(old) if old.revision == revision => {
                // The same spec again (a relist after reconnecting): nothing changes.
                self.tasks.insert(key, old);
            }
            Some(old) => self.update(old, spec, schedule, revision, now),
            None => self.load(key, spec, schedule, revision, recorded, now),
        }
    }

    /// Re-checks every task downstream of `key` after it changed: they may have become
    /// valid (their missing parent arrived) or not (a cycle closed through it).
    fn recheck_downstream(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        if !self.deps.has_children(key) {
            // Nothing downstream (almost every task): no walk, no allocation.
            return;
        }
        for other in self.deps.affected(key) {
            if other != *key {
                self.recheck(&other, now);
            }
        }
    }

    /// Re-checks a task downstream of a graph change: arms one whose problems are gone,
    /// sets aside one that has some now.
    fn recheck(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        let tasks = &self.tasks;
        let problems = self.deps.problems(key, |k| tasks.contains_key(k));
        if let Some((spec, revision)) = self.deps.set_aside_spec(key) {
            if problems.is_empty() {
                self.place(Arc::clone(key), spec, revision, None, now);
            } else {
                self.invalidate(Arc::clone(key), revision, problems, now);
            }
        } else if !problems.is_empty() {
            if let Some(task) = self.tasks.get(key) {
                let (spec, revision) = (Arc::clone(&task.spec), task.revision);
                self.deps.set_aside(key, &spec, revision);
                self.invalidate(Arc::clone(key), revision, problems, now);
            }
        }
    }

    fn load(
        &mut self,
        key: Arc<TaskKey>,
        spec: Arc<TaskSpec>,
        schedule: CompiledSchedule,
        revision: i64,
        recorded: Option<TaskState>,
        now: UtcMillis,
    ) {
        // What the last leader wrote: the state is written again only if loading changed it.
        let written = recorded.clone();
        // Stored: a recorded state, an INVALID one written, or one whose delete is not
        // written yet (the same key registered again meanwhile).
        let stored =
            self.forget_invalid_stored(&key) || recorded.is_some() || self.writes.is_deleting(&key);
        self.deps.clear_invalid(&key);
        let (state, anchor) = loaded_state(&spec, revision, recorded, now);
        let generation = self.new_generation();
        let mut task = Armed::new(
            Arc::clone(&key),
            Arc::clone(&spec),
            schedule,
            revision,
            anchor,
            generation,
            state,
        );
        task.stored = stored;
        // A fire the previous leader held (forbid) is still owed: its retry timer sends it
        // once the previous execution is over.
        if task.state.held_fire_at.is_some() && !spec.paused {
            self.timers.arm_held_retry(&mut task, Duration::ZERO, now);
        }
        if spec.paused {
            task.state.next_fire_at = None;
            set_status(&mut task.state, TaskStatus::Paused, now);
        } else {
            self.arm_loaded(&mut task, now);
        }
        self.judge_deadline(&mut task, now);
        self.resend_steps(&task, now);
        self.resend_fanouts(&task, now);
        let unchanged = written.is_some_and(|mut w| {
            // The time of the last write is not a change.
            w.updated_at = task.state.updated_at;
            w == task.state
        });
        if !unchanged {
            self.writes.current(&key);
        }
        self.tasks.insert(key, task);
    }

    /// Arms a task just loaded from where its state says the last leader got: the fires
    /// missed since run as its misfire policy says, with a notice of what it dropped.
    fn arm_loaded(&mut self, task: &mut Armed, now: UtcMillis) {
        let progress = match task.state.last_fire_at {
            Some(last) => Some(ScheduleCursor::LastFire(last)),
            None => task
                .schedule
                .first_fire(task.anchor)
                .map(ScheduleCursor::NextDue),
        };
        let Some(progress) = progress else {
            self.arm(task, None, now);
            return;
        };
        let plan = plan_misfires(
            task.spec.misfire,
            &task.schedule,
            task.anchor,
            progress,
            now,
            self.config.catch_up_window,
        );
        for fire_at in &plan.run_now {
            self.fires.push(task, *fire_at, FireKind::Scheduled, now);
        }
        self.notices.extend(misfire_notice(&task.key, &plan));
        self.arm(task, plan.next_fire, now);
    }

    fn update(
        &mut self,
        mut task: Box<Armed>,
        spec: Arc<TaskSpec>,
        schedule: CompiledSchedule,
        revision: i64,
        now: UtcMillis,
    ) {
        let schedule_changed = task.spec.schedule != spec.schedule;
        if schedule_changed {
            if let Schedule::Every(_) = spec.schedule {
                // A new interval counts from the change, not from the old anchor.
                task.anchor = now;
            }
            if let (Schedule::Delay(_), Some(created)) = (&spec.schedule, spec.created_at) {
                task.anchor = created;
            }
        }
        self.timers.cancel(task.timer.take());
        task.generation = self.new_generation();
        task.spec = Arc::clone(&spec);
        task.drop_breaker_unless_periodic(&mut self.notices);
        task.schedule = schedule;
        task.revision = revision;
        task.state.spec_revision = revision;
        task.state.anchor_at = Some(task.anchor);
        self.timers.cancel(task.held_timer.take());
        // Deadlines start afresh from a spec change: the fires of the old spec (or of the
        // pause this change may end) are not judged by the new one.
        restart_deadlines(&mut task.state, &spec, now);
        if spec.paused {
            task.state.held_fire_at = None;
            task.state.next_fire_at = None;
            set_status(&mut task.state, TaskStatus::Paused, now);
        } else {
            let next = self.next_after_update(&mut task, now);
            if task.state.status == TaskStatus::Paused {
                set_status(&mut task.state, TaskStatus::Waiting, now);
            }
            self.arm(&mut task, next, now);
            if task.state.held_fire_at.is_some() {
                // The held fire keeps its retry, under the new generation.
                self.timers
                    .arm_held_retry(&mut task, self.config.hold_retry, now);
            }
        }
        self.judge_deadline(&mut task, now);
        self.writes.current(&task.key);
        self.tasks.insert(Arc::clone(&task.key), task);
    }

    /// The next fire of a task whose spec just changed. A one-shot that has not fired
    /// (perhaps paused past its time) fires now if its instant passed, under its misfire
    /// policy; anything else goes on from `now`.
    fn next_after_update(&mut self, task: &mut Armed, now: UtcMillis) -> Option<UtcMillis> {
        if task.spec.schedule.is_periodic() || task.state.last_fire_at.is_some() {
            return task.schedule.next_after(now, task.anchor);
        }
        let first = task.schedule.first_fire(task.anchor)?;
        let plan = plan_misfires(
            task.spec.misfire,
            &task.schedule,
            task.anchor,
            ScheduleCursor::NextDue(first),
            now,
            self.config.catch_up_window,
        );
        for fire_at in plan.run_now {
            self.fires.push(task, fire_at, FireKind::Scheduled, now);
        }
        plan.next_fire
    }

    fn arm(&mut self, task: &mut Armed, next: Option<UtcMillis>, now: UtcMillis) {
        self.timers.set_next(task, next);
        if next.is_some() && !task.state.status.is_executing() {
            set_status(&mut task.state, TaskStatus::Scheduled, now);
        }
    }

    /// Records a spec that does not validate: the task stops firing and its state becomes
    /// INVALID with the errors. It still exists for the graph (its children wait; they do
    /// not name a missing parent).
    pub fn mark_invalid(
        &mut self,
        key: impl Into<Arc<TaskKey>>,
        revision: i64,
        errors: Vec<FieldError>,
        now: UtcMillis,
    ) {
        let key: Arc<TaskKey> = key.into();
        self.deps.insert(&key, &[]);
        self.deps.clear_set_aside(&key);
        self.invalidate(Arc::clone(&key), revision, errors, now);
        self.recheck_downstream(&key, now);
    }

    /// A task whose INVALID state is already stored as it is (a takeover found it): nothing
    /// is written, but the state is there, so the fixed spec's first state must be written.
    pub fn keep_invalid(&mut self, key: impl Into<Arc<TaskKey>>) {
        self.invalid_stored.insert(key.into());
    }

    fn invalidate(
        &mut self,
        key: Arc<TaskKey>,
        revision: i64,
        errors: Vec<FieldError>,
        now: UtcMillis,
    ) {
        self.runs.untrack(&key);
        let state = match self.tasks.remove(&key) {
            Some(task) => {
                self.timers.cancel_all(&task);
                let mut state = task.state;
                state.spec_revision = revision;
                state.next_fire_at = None;
                set_status(&mut state, TaskStatus::Invalid, now);
                state.validation_errors = errors;
                state
            }
            None => TaskState::invalid(revision, errors, now),
        };
        self.invalid_stored.insert(Arc::clone(&key));
        self.deps.set_invalid(&key);
        self.writes.invalid(key, state);
    }

    /// Drops the task's mark of a stored INVALID state; true if it had one. The set is
    /// almost always empty, and a removal from an empty table still hashes the key.
    fn forget_invalid_stored(&mut self, key: &TaskKey) -> bool {
        !self.invalid_stored.is_empty() && self.invalid_stored.remove(key)
    }

    /// Forgets a deleted task: nothing more fires and its state is deleted. Tasks that
    /// depend on it become INVALID (a missing parent).
    pub fn remove(&mut self, key: &TaskKey, now: UtcMillis) {
        self.deps.remove(key);
        self.runs.untrack(key);
        let key = match self.tasks.remove_entry(key) {
            Some((key, task)) => {
                self.timers.cancel_all(&task);
                key
            }
            None => Arc::new(key.clone()),
        };
        self.pauses.forget(&key);
        self.forget_invalid_stored(&key);
        // Ready entries of the task are dropped when they come up (the task is gone).
        self.writes.delete(Arc::clone(&key));
        // Its children keep their edges to it, now to a missing parent.
        self.recheck_downstream(&key, now);
    }
}

/// The state a task is loaded with, and its countdown anchor: the recorded one (the task's
/// progress, even from an older spec revision), or a new one.
fn loaded_state(
    spec: &TaskSpec,
    revision: i64,
    recorded: Option<TaskState>,
    now: UtcMillis,
) -> (TaskState, UtcMillis) {
    // A state recorded for an older spec revision still carries the task's progress; the
    // countdown anchor is the one thing a changed spec may move (see `update`).
    let mut state = recorded.unwrap_or_else(|| {
        let anchor = match spec.schedule {
            Schedule::Delay(_) => spec.created_at.unwrap_or(now),
            _ => now,
        };
        TaskState::new(revision, anchor, now)
    });
    if state.status == TaskStatus::Invalid {
        // Time spent invalid is not missed time: the fixed spec starts afresh.
        set_status(&mut state, TaskStatus::Waiting, now);
        state.anchor_at = None;
    }
    let anchor = match (state.anchor_at, &spec.schedule, spec.created_at) {
        (Some(a), _, _) => a,
        (None, Schedule::Delay(_), Some(created)) => created,
        (None, _, _) => now,
    };
    state.anchor_at = Some(anchor);
    state.spec_revision = revision;
    // Breakers live in the leader's memory: a task loaded starts with its breaker closed.
    state.throttled = None;
    (state, anchor)
}
