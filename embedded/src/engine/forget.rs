//! When a job leaves the engine: a job is forgotten once nothing of it is to come, so a
//! kernel's memory follows what is pending, not what ever ran.
//!
//! For a lone job that is its last execution over (a one-shot, not dead-lettered, since a
//! requeue needs it). A chain adds two rules, because the dispatcher judges a run from the
//! edges it knows: a parent stays while a job that waits on it is known (forgetting it first
//! would make the child's edge point at nothing and set the child aside as invalid), and a
//! dependent job is done once no run of its parents can reach it any more (every parent
//! done or gone) and no run is in progress in its state (waiting for a parent, or fired and
//! not ended). So a finished chain leaves child first, then each parent, and a parent that
//! ends makes its children check again: a skipped step leaves nothing running to do it.
//!
//! Cancelling a job cancels the jobs that wait on it: without their parent their edge
//! points at nothing, and nothing could ever run them.

use ax_scheduler_core::UtcMillis;

use super::Engine;
use crate::error::{EmbeddedError, Result};
use crate::job_id::JobId;
use crate::parents::parent_ids;

impl Engine {
    /// Forgets `id` if nothing of it is to come (see the [module notes](self)), and then
    /// whatever that lets go: its parents, or its children first.
    pub(super) fn forget_if_done(&mut self, id: JobId, now: UtcMillis) {
        if !self.finished(id) {
            return;
        }
        let children = self.known_dependents(id);
        if !children.is_empty() {
            // Each child forgotten asks again for this job, which goes with the last.
            for child in children {
                self.forget_if_done(child, now);
            }
            return;
        }
        let parents: Vec<JobId> = match self.jobs.get(&id) {
            Some(job) => parent_ids(&job.spec).collect(),
            None => return,
        };
        self.remove(id, now);
        for parent in parents {
            self.forget_if_done(parent, now);
        }
    }

    /// Whether nothing of `id` is to come: no execution active or due, and, for a dependent
    /// job, no run in progress and none to come from its parents.
    fn finished(&self, id: JobId) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return true;
        };
        let state = self.dispatcher.state(&job.key);
        let idle = job.active == 0
            && !job.spec.paused
            && !job.spec.schedule.is_periodic()
            && !self.dead.contains_key(&id)
            && state.is_none_or(|s| {
                s.next_fire_at.is_none() && s.held_fire_at.is_none() && s.runs.is_empty()
            })
            && !self.dispatcher.fire_pending(&job.key);
        idle && parent_ids(&job.spec).all(|p| self.finished(p))
    }

    /// The jobs that wait on `id` and are still known.
    fn known_dependents(&self, id: JobId) -> Vec<JobId> {
        let Some(job) = self.jobs.get(&id) else {
            return Vec::new();
        };
        self.dispatcher
            .dependents(&job.key)
            .iter()
            .filter_map(|k| k.id.parse().ok().map(JobId))
            .filter(|child| self.jobs.contains_key(child))
            .collect()
    }

    /// Refuses parents that no one run reaches together. A run starts at a job without
    /// parents and goes down its chain, and a job with several parents runs when each ended
    /// in the same run: parents that share no first job would each wait for the others in
    /// a run that never comes, and the job would never run.
    fn check_one_run(&self, parents: &[JobId]) -> Result<()> {
        let mut common: Option<std::collections::HashSet<JobId>> = None;
        for &parent in parents {
            let roots = self.first_jobs(parent);
            common = Some(match common {
                None => roots,
                Some(c) => c.intersection(&roots).copied().collect(),
            });
        }
        if common.is_some_and(|c| c.is_empty()) {
            return Err(EmbeddedError::invalid(
                "parents",
                "they start from different first jobs, so no run reaches them all and the job would never run; give their chains one first job",
            ));
        }
        Ok(())
    }

    /// The jobs without parents whose runs reach `id` (itself, if it has none).
    fn first_jobs(&self, id: JobId) -> std::collections::HashSet<JobId> {
        let mut roots = std::collections::HashSet::new();
        let mut work = vec![id];
        while let Some(id) = work.pop() {
            let parents: Vec<JobId> = match self.jobs.get(&id) {
                Some(job) => parent_ids(&job.spec).collect(),
                None => Vec::new(),
            };
            if parents.is_empty() {
                roots.insert(id);
            }
            work.extend(parents);
        }
        roots
    }

    /// Drops `id` and every job that waits on it, down the chain.
    pub(super) fn remove_with_dependents(&mut self, id: JobId, now: UtcMillis) {
        let mut work = vec![id];
        while let Some(id) = work.pop() {
            work.extend(self.known_dependents(id));
            self.remove(id, now);
        }
    }

    /// Refuses a dependent job whose parents this engine cannot run it after: a parent
    /// unknown, or one that is not persisted for a `durable` child (after a restart the
    /// child would wait on nothing). A staged parent becomes a task now, so the dispatcher
    /// knows the edge from the start.
    pub(crate) fn check_parents(
        &mut self,
        spec: &ax_scheduler_core::TaskSpec,
        durable: bool,
        now: UtcMillis,
    ) -> Result<()> {
        let parents: Vec<JobId> = parent_ids(spec).collect();
        for &parent in &parents {
            let known = self.jobs.contains_key(&parent) || self.staging.contains(parent);
            if !known {
                return Err(EmbeddedError::invalid(
                    "parents",
                    format!(
                        "job {} is not a job of this kernel (never, or no longer)",
                        parent.get()
                    ),
                ));
            }
        }
        self.check_one_run(&parents)?;
        for parent in parents {
            self.unstage(parent, now);
            let persisted = self.jobs.get(&parent).is_some_and(|j| j.durable);
            if durable && !persisted {
                return Err(EmbeddedError::invalid(
                    "parents",
                    format!(
                        "job {} is not persisted, and a persisted job's parents must be (a restart would lose the edge)",
                        parent.get()
                    ),
                ));
            }
        }
        Ok(())
    }
}
