//! The kernel's state behind its one lock: the cluster's [`Dispatcher`] deciding what fires
//! when, and around it what the cluster keeps in Redis and in its worker pool: the jobs'
//! bodies, the executions waiting for a worker, the retries waiting for their time, and the
//! dead letters.
//!
//! The split follows the cluster's exactly, so no scheduling decision is made twice: the
//! dispatcher arms timers, plans misfires, orders due fires, applies the breaker and decides
//! overlap; this module carries its dispatches out the way the Redis enqueue script and the
//! worker pool do (hold a `forbid` fire while the task has an execution active, stop the
//! old one for `replace`), queues them for the workers by priority with aging (the core's
//! [`ReadyQueue`]), and reports every start and end back as execution events. The retry
//! decision is the core's too ([`ax_scheduler_core::retry`]); a retry waits in the core's
//! [`TimerWheel`], as a fire does.
//!
//! Everything here is synchronous and takes `now`: the driver and the attempts call in with
//! the lock held for a few map operations and do the waiting outside it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_scheduler_core::dispatcher::StateWrite;
use ax_scheduler_core::execution::shown_error;
use ax_scheduler_core::ready::ReadyQueue;
use ax_scheduler_core::retry::{decide, RetryDecision};
use ax_scheduler_core::timer::TimerWheel;
use ax_scheduler_core::{
    attempt::Verdict, AttemptEnd, AttemptOutcome, Dispatch, Dispatcher, DispatcherConfig,
    EnqueueOutcome, ExecutionEvent, ExecutionId, Notice, OverlapPolicy, TaskKey, TaskSpec,
    TaskStatus, UtcMillis,
};
use tokio_util::sync::CancellationToken;

use crate::dead::DeadLetter;
use crate::job::{JobContext, JobFn, JobId};

/// The namespace every job of a kernel lives in, as far as the dispatcher is concerned.
pub(crate) const NAMESPACE: &str = "embedded";

/// One execution's next attempt, waiting for a worker or for its retry time.
#[derive(Clone, Debug)]
pub(crate) struct Attempt {
    pub(crate) job: JobId,
    pub(crate) execution: ExecutionId,
    pub(crate) attempt: u32,
    pub(crate) fire_at: UtcMillis,
    /// When the execution's first attempt started: the retry budget counts from it.
    pub(crate) first_started: Option<UtcMillis>,
    /// The job's epoch when queued: a `replace` or a cancel moves it, and older attempts
    /// are dropped when they come up.
    epoch: u64,
}

/// A job the kernel knows.
pub(crate) struct JobEntry {
    pub(crate) key: Arc<TaskKey>,
    pub(crate) spec: Arc<TaskSpec>,
    pub(crate) run: Arc<JobFn>,
    revision: i64,
    epoch: u64,
    /// Executions queued, running or waiting for a retry: what overlap is judged by.
    active: u32,
    /// Each running attempt's kill switch.
    running: HashMap<ExecutionId, CancellationToken>,
}

/// An attempt to start now, handed to the driver to spawn outside the lock.
pub(crate) struct Launch {
    pub(crate) attempt: Attempt,
    pub(crate) key: Arc<TaskKey>,
    pub(crate) run: Arc<JobFn>,
    pub(crate) ctx: JobContext,
    pub(crate) kill: CancellationToken,
    pub(crate) timeout: std::time::Duration,
}

/// See the [module notes](self).
pub(crate) struct Engine {
    dispatcher: Dispatcher,
    jobs: HashMap<JobId, JobEntry>,
    idempotency: HashMap<String, JobId>,
    waiting: ReadyQueue<Attempt>,
    retries: TimerWheel<Attempt>,
    dead: BTreeMap<JobId, DeadLetter>,
    next_id: u64,
    running: usize,
    /// How many attempts may run at once.
    pub(crate) workers: usize,
    /// Whether new attempts start (false from the first phase of a shutdown on).
    pub(crate) starting: bool,
}

impl Engine {
    pub(crate) fn new(config: DispatcherConfig, workers: usize, now: UtcMillis) -> Self {
        Engine {
            waiting: ReadyQueue::new(config.ready.clone()),
            retries: TimerWheel::new(config.timer.clone(), now),
            dispatcher: Dispatcher::new(config, now),
            jobs: HashMap::new(),
            idempotency: HashMap::new(),
            dead: BTreeMap::new(),
            next_id: 0,
            running: 0,
            workers,
            starting: true,
        }
    }

    /// The job holding `key`, if any (an idempotent submit returns it).
    pub(crate) fn by_idempotency_key(&self, key: &str) -> Option<JobId> {
        self.idempotency.get(key).copied()
    }

    /// A fresh id and the dispatcher key for it.
    pub(crate) fn new_id(&mut self) -> (JobId, Arc<TaskKey>) {
        self.next_id += 1;
        let id = JobId(self.next_id);
        (id, Arc::new(TaskKey::new(NAMESPACE, id.0.to_string())))
    }

    /// Adds a job whose spec was built and checked by the caller.
    pub(crate) fn insert(
        &mut self,
        id: JobId,
        key: Arc<TaskKey>,
        spec: TaskSpec,
        run: Arc<JobFn>,
        now: UtcMillis,
    ) {
        let spec = Arc::new(spec);
        if let Some(k) = &spec.idempotency_key {
            self.idempotency.insert(k.clone(), id);
        }
        self.dispatcher
            .upsert(Arc::clone(&key), Arc::clone(&spec), 1, None, now);
        let entry = JobEntry {
            key,
            spec,
            run,
            revision: 1,
            epoch: 0,
            active: 0,
            running: HashMap::new(),
        };
        self.jobs.insert(id, entry);
    }

    /// One turn of the driver at `now`: due retries and fires queued, attempts started up to
    /// the free workers. Returns what to spawn and when to come back.
    pub(crate) fn step(&mut self, now: UtcMillis) -> (Vec<Launch>, Option<UtcMillis>) {
        for (_, attempt) in self.retries.advance(now) {
            self.requeue_attempt(attempt, now);
        }
        for dispatch in self.dispatcher.poll(now) {
            self.enqueue(&dispatch, now);
        }
        log_notices(self.dispatcher.take_notices());
        // Nothing to write them to in memory; taken so they do not pile up.
        drop::<Vec<StateWrite>>(self.dispatcher.take_state_writes(UtcMillis::MAX));
        let mut launches = Vec::new();
        while self.starting && self.running < self.workers {
            let Some(attempt) = self.waiting.pop(now) else {
                break;
            };
            if let Some(launch) = self.launch(attempt, now) {
                launches.push(launch);
            }
        }
        let next = match (self.dispatcher.next_wakeup(now), self.retries.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (launches, next)
    }

    /// Carries out one dispatch as the cluster's enqueue would: held while the job has an
    /// execution active (`forbid`), the active ones stopped first (`replace`).
    fn enqueue(&mut self, d: &Dispatch, now: UtcMillis) {
        let Some(id) = job_id(&d.key) else { return };
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if job.active > 0 {
            match d.overlap {
                OverlapPolicy::Forbid => {
                    self.dispatcher.on_enqueued(d, EnqueueOutcome::Held, now);
                    return;
                }
                OverlapPolicy::Replace => {
                    job.epoch += 1;
                    for kill in job.running.values() {
                        kill.cancel();
                    }
                }
                OverlapPolicy::Allow => {}
            }
        }
        job.active += 1;
        let execution = d
            .run_now
            .unwrap_or_else(|| ExecutionId::for_fire(&d.key, d.fire_at));
        let attempt = Attempt {
            job: id,
            execution,
            attempt: 0,
            fire_at: d.fire_at,
            first_started: None,
            epoch: job.epoch,
        };
        self.waiting.push(attempt, job.spec.priority, now);
        self.dispatcher
            .on_enqueued(d, EnqueueOutcome::Enqueued, now);
    }

    /// A retry whose time came, back in the queue for a worker.
    fn requeue_attempt(&mut self, attempt: Attempt, now: UtcMillis) {
        let priority = self.jobs.get(&attempt.job).map_or(0, |j| j.spec.priority);
        self.waiting.push(attempt, priority, now);
    }

    /// Starts `attempt` if its job still wants it; an attempt left behind by a `replace`
    /// ends as killed without running.
    fn launch(&mut self, mut attempt: Attempt, now: UtcMillis) -> Option<Launch> {
        let job = self.jobs.get_mut(&attempt.job)?;
        if attempt.epoch != job.epoch {
            let end = AttemptEnd::new(AttemptOutcome::Killed, Some("replaced".to_owned()));
            self.end_execution(&attempt, end, now);
            return None;
        }
        attempt.first_started.get_or_insert(now);
        let kill = CancellationToken::new();
        job.running.insert(attempt.execution, kill.clone());
        self.running += 1;
        let ctx = JobContext {
            id: attempt.job,
            execution: attempt.execution,
            attempt: attempt.attempt,
            fire_at: attempt.fire_at,
            cancel: kill.child_token(),
            spec: Arc::clone(&job.spec),
        };
        let launch = Launch {
            key: Arc::clone(&job.key),
            run: Arc::clone(&job.run),
            timeout: job.spec.timeout,
            ctx,
            kill,
            attempt: attempt.clone(),
        };
        let started = ExecutionEvent::Started { at: now };
        self.dispatcher
            .on_execution(&job.key, attempt.execution, attempt.attempt, &started, now);
        Some(launch)
    }

    /// Takes the verdict of an attempt that ran: a retry armed, a dead letter written, or
    /// the execution over; the end reported to the dispatcher either way.
    pub(crate) fn finish(&mut self, attempt: Attempt, verdict: Verdict, now: UtcMillis) {
        self.running = self.running.saturating_sub(1);
        let Some(job) = self.jobs.get_mut(&attempt.job) else {
            // Cancelled while it ran: nothing of it is kept.
            return;
        };
        job.running.remove(&attempt.execution);
        let (outcome, error, retryable) = verdict;
        let error = error.map(shown_error);
        let mut end = match outcome {
            AttemptOutcome::Succeeded => AttemptEnd::succeeded(),
            _ => AttemptEnd::new(outcome, error.clone()),
        };
        if outcome.is_failure() {
            let reason = if retryable && attempt.epoch == job.epoch {
                let first = attempt.first_started.unwrap_or(now);
                let mut rng = rand::rng();
                match decide(&job.spec.retry, attempt.attempt, first, now, &mut rng) {
                    RetryDecision::RetryAt { due, .. } => {
                        end.retry_at = Some(due);
                        None
                    }
                    RetryDecision::GiveUp { reason } => Some(reason),
                }
            } else {
                Some("not retryable".to_owned())
            };
            match reason {
                None => {
                    tracing::warn!(error = error.as_deref(), "attempt failed; retrying");
                    let retry_at = end.retry_at.unwrap_or(now);
                    let next = Attempt {
                        attempt: attempt.attempt + 1,
                        ..attempt.clone()
                    };
                    self.retries.insert(retry_at, next);
                }
                Some(reason) => {
                    tracing::error!(error = error.as_deref(), %reason, "attempt failed; dead letter");
                    let letter = DeadLetter {
                        job: attempt.job,
                        execution: attempt.execution,
                        attempts: attempt.attempt + 1,
                        outcome,
                        error: error.unwrap_or_default(),
                        reason,
                        at: now,
                    };
                    self.dead.insert(attempt.job, letter);
                }
            }
        }
        self.end_execution(&attempt, end, now);
    }

    /// Reports an attempt's end; the last one of an execution frees its job's overlap, and
    /// a job with nothing left to do is forgotten.
    fn end_execution(&mut self, attempt: &Attempt, end: AttemptEnd, now: UtcMillis) {
        let Some(job) = self.jobs.get_mut(&attempt.job) else {
            return;
        };
        let last = end.is_last();
        let event = ExecutionEvent::Finished { at: now, end };
        self.dispatcher
            .on_execution(&job.key, attempt.execution, attempt.attempt, &event, now);
        if last {
            job.active = job.active.saturating_sub(1);
            self.forget_if_done(attempt.job, now);
        }
    }

    /// Forgets a job that will not run again: a one-shot whose execution is over and that is
    /// not in the dead letters (a requeue needs it).
    fn forget_if_done(&mut self, id: JobId, now: UtcMillis) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let state = self.dispatcher.state(&job.key);
        let done = job.active == 0
            && !job.spec.paused
            && !job.spec.schedule.is_periodic()
            && !self.dead.contains_key(&id)
            && state.is_none_or(|s| s.next_fire_at.is_none() && s.held_fire_at.is_none());
        if done {
            self.remove(id, now);
        }
    }

    fn remove(&mut self, id: JobId, now: UtcMillis) {
        let Some(job) = self.jobs.remove(&id) else {
            return;
        };
        // Its queued attempts and retries are dropped when they come up (the job is gone).
        self.dispatcher.remove(&job.key, now);
        if let Some(k) = &job.spec.idempotency_key {
            self.idempotency.remove(k);
        }
        self.dead.remove(&id);
    }

    /// Forgets a job so that nothing more of it starts; false if it is unknown or its only
    /// work is an attempt already running (see [`kill`](Self::kill)).
    pub(crate) fn cancel(&mut self, id: JobId, now: UtcMillis) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        let state = self.dispatcher.state(&job.key);
        let to_come = job.spec.paused
            || job.spec.schedule.is_periodic()
            || job.active as usize > job.running.len()
            || self.dead.contains_key(&id)
            || state.is_some_and(|s| s.next_fire_at.is_some() || s.held_fire_at.is_some());
        if !to_come {
            return false;
        }
        self.remove(id, now);
        true
    }

    /// Stops the job's running attempts (they end killed, not retried); false if none runs.
    pub(crate) fn kill(&mut self, id: JobId) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        for kill in job.running.values() {
            kill.cancel();
        }
        !job.running.is_empty()
    }

    /// Runs the job now, beside its schedule.
    pub(crate) fn trigger(&mut self, id: JobId, now: UtcMillis) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        let execution = ExecutionId::from_uuid(uuid::Uuid::now_v7());
        self.dispatcher.trigger(&job.key, execution, now)
    }

    /// Pauses or resumes a job: its spec changes, as a task's does in the cluster, and the
    /// dispatcher re-arms it from `now`.
    pub(crate) fn set_paused(&mut self, id: JobId, paused: bool, now: UtcMillis) -> bool {
        let Some(job) = self.jobs.get_mut(&id) else {
            return false;
        };
        if job.spec.paused == paused {
            return true;
        }
        let mut spec = (*job.spec).clone();
        spec.paused = paused;
        job.spec = Arc::new(spec);
        job.revision += 1;
        self.dispatcher.upsert(
            Arc::clone(&job.key),
            Arc::clone(&job.spec),
            job.revision,
            None,
            now,
        );
        true
    }

    /// Pauses or resumes every job (the dispatcher's namespace pause).
    pub(crate) fn set_all_paused(&mut self, paused: bool, now: UtcMillis) {
        if paused {
            self.dispatcher.pause_namespace(NAMESPACE);
        } else {
            self.dispatcher.resume_namespace(NAMESPACE, now);
        }
    }

    pub(crate) fn status(&self, id: JobId) -> Option<TaskStatus> {
        let job = self.jobs.get(&id)?;
        self.dispatcher.state(&job.key).map(|s| s.status)
    }

    pub(crate) fn dead_letters(&self) -> Vec<DeadLetter> {
        self.dead.values().cloned().collect()
    }

    /// Runs a dead-lettered job again as a new execution.
    pub(crate) fn requeue(&mut self, id: JobId, now: UtcMillis) -> bool {
        if self.dead.remove(&id).is_none() {
            return false;
        }
        self.trigger(id, now)
    }

    /// Drops every dead letter, and the one-shot jobs kept only for them.
    pub(crate) fn purge(&mut self, now: UtcMillis) -> usize {
        let ids: Vec<JobId> = self.dead.keys().copied().collect();
        for id in &ids {
            self.dead.remove(id);
            self.forget_if_done(*id, now);
        }
        ids.len()
    }

    /// Jobs known (scheduled, running, paused or dead-lettered).
    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Attempts running now.
    pub(crate) fn running(&self) -> usize {
        self.running
    }

    /// Stops every running attempt (the second phase of a shutdown).
    pub(crate) fn kill_all(&mut self) {
        for job in self.jobs.values() {
            for kill in job.running.values() {
                kill.cancel();
            }
        }
    }
}

/// The job a dispatcher key names.
fn job_id(key: &TaskKey) -> Option<JobId> {
    key.id.parse().ok().map(JobId)
}

/// Logs what the dispatcher noticed: the cluster alerts on these, a library logs them.
fn log_notices(notices: Vec<Notice>) {
    for notice in notices {
        match notice {
            Notice::AttemptFailed { .. } => {}
            Notice::Misfired {
                key,
                missed,
                skipped,
                ..
            } => tracing::warn!(task_id = %key, missed, skipped, "fires missed"),
            Notice::CircuitOpened { key, failures, .. } => {
                tracing::warn!(task_id = %key, failures, "circuit opened: fires slowed")
            }
            other => tracing::info!(notice = ?other, "dispatcher notice"),
        }
    }
}
