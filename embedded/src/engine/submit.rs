//! How a job enters the engine: a submit either stages it (a one-shot not due soon, see
//! [`crate::staging`]) or makes it a dispatcher task at once, and a staged job becomes a
//! task through the same path when its time comes or when an operation needs it whole.

use std::sync::Arc;

use ax_scheduler_core::{TaskKey, TaskSpec, TaskState, UtcMillis};

use super::{Engine, JobEntry};
use crate::job::JobFn;
use crate::job_id::JobId;
use crate::staging::Promoted;
use crate::store::Op;
use crate::table::Running;

impl Engine {
    /// Adds a job whose spec was built and checked by the caller (its id left for this to
    /// fill in); a `durable` one is queued for the store. A one-shot not due soon is staged.
    /// Returns its id and whether the driver is to be woken: the job's first instant (its
    /// promotion, for a staged one) comes before the driver's planned wakeup, or nothing
    /// tells when it comes. A submit that does not move the wakeup leaves the driver asleep,
    /// so a burst of submits costs no driver turn each.
    pub(crate) fn submit(
        &mut self,
        mut spec: TaskSpec,
        (run, durable): (Arc<JobFn>, bool),
        now: UtcMillis,
    ) -> (JobId, bool) {
        spec.namespace = Arc::clone(&self.namespace);
        spec.intern(&mut self.interner);
        let promote_at = self.staging.stages(&spec, now);
        if let (Some(at), false) = (promote_at, durable) {
            let key = spec.idempotency_key.clone();
            let jobs = &self.jobs;
            let staged = self
                .staging
                .stage(spec, Arc::clone(&run), at, |id| jobs.contains_key(&id));
            match staged {
                Ok(id) => {
                    if let Some(k) = key {
                        self.idempotency.insert(k, id);
                    }
                    return (id, self.moves_wakeup(Some(at)));
                }
                Err(back) => spec = *back,
            }
        }
        let (id, key) = self.new_id();
        spec.id = Arc::clone(&key.id);
        let spec = Arc::new(spec);
        self.persist(durable, || Op::PutJob(id, Arc::clone(&spec)));
        if let Some(k) = &spec.idempotency_key {
            self.idempotency.insert(k.clone(), id);
        }
        if let (Some(at), true) = (promote_at, durable) {
            self.staging.stage_durable(id, spec, run, at);
            return (id, self.moves_wakeup(Some(at)));
        }
        let first = self.admit(id, key, spec, (run, durable), (1, None), now);
        (id, self.moves_wakeup(first))
    }

    /// Makes a job a dispatcher task; returns when it first fires.
    pub(super) fn admit(
        &mut self,
        id: JobId,
        key: Arc<TaskKey>,
        spec: Arc<TaskSpec>,
        (run, durable): (Arc<JobFn>, bool),
        (revision, state): (i64, Option<TaskState>),
        now: UtcMillis,
    ) -> Option<UtcMillis> {
        self.dispatcher
            .upsert(Arc::clone(&key), Arc::clone(&spec), revision, state, now);
        let first = self.dispatcher.state(&key).and_then(|s| s.next_fire_at);
        let entry = JobEntry {
            key,
            spec,
            run,
            revision,
            epoch: 0,
            active: 0,
            running: Running::default(),
            durable,
            last_end: None,
            awaiting_launch: false,
        };
        self.jobs.insert(id, entry);
        first
    }

    /// A staged job made a task, exactly as a submit of a job due soon makes one, at the
    /// instant its promotion was due: one that waited past its own instant for its turn (a
    /// burst the fire path is behind on) is then a timer come due, fired as late as it is
    /// (and judged by its misfire policy only past the stall threshold, as any timer), not
    /// a task made after its instant, which the dispatcher plans as missed at once.
    pub(super) fn promote(&mut self, job: Promoted, now: UtcMillis) {
        let Promoted {
            id,
            run,
            mut spec,
            durable,
            promote_at,
        } = job;
        let key = self.key_of(id);
        spec.id = Arc::clone(&key.id);
        let at = now.min(promote_at);
        self.admit(id, key, Arc::new(spec), (run, durable), (1, None), at);
    }

    /// Makes `id` a task if it is staged, for an operation that acts on tasks.
    pub(super) fn unstage(&mut self, id: JobId, now: UtcMillis) {
        if let Some(job) = self.staging.take(id) {
            self.promote(job, now);
        }
    }

    fn moves_wakeup(&self, first: Option<UtcMillis>) -> bool {
        match (first, self.driver_wakes_at) {
            (Some(first), Some(planned)) => first < planned,
            _ => true,
        }
    }

    /// Drops a staged job: it was still to run.
    pub(super) fn cancel_staged(&mut self, id: JobId) -> bool {
        let Some(job) = self.staging.take(id) else {
            return false;
        };
        self.persist(job.durable, || Op::DeleteJob(id));
        if let Some(k) = &job.spec.idempotency_key {
            self.idempotency.remove(k);
        }
        true
    }
}
