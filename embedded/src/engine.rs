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
//! With a store, every change to a persisted job is also queued as a store [`Op`], in the
//! order it was made, and sent to the store's writer by [`Engine::flush`] before the lock is
//! let go (see [`crate::store`]); a restart rebuilds the engine from the file through
//! [`Engine::restore`], the dispatcher planning the missed fires from the recorded states,
//! and slow-starts at half the workers until it has caught up.
//!
//! A one-shot job not due within [`STAGING_WINDOW`](crate::staging::STAGING_WINDOW) is not
//! a dispatcher task yet: it waits compactly in [`Staging`] and is made one, through the
//! same path as a submit of a job due soon ([`submit`]), a window ahead of its instant, and
//! no more of them at a time than [`promote`] lets wait for a worker.
//!
//! Everything here is synchronous and takes `now`: the driver and the attempts call in with
//! the lock held for a few map operations and do the waiting outside it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_scheduler_core::dispatcher::StateWrite;
use ax_scheduler_core::execution::shown_error;
use ax_scheduler_core::handler::Cancel;
use ax_scheduler_core::ready::ReadyQueue;
use ax_scheduler_core::retry::{decide, RetryDecision};
use ax_scheduler_core::timer::TimerWheel;
use ax_scheduler_core::Interner;
use ax_scheduler_core::{
    attempt::Verdict, AttemptEnd, AttemptOutcome, Dispatch, Dispatcher, DispatcherConfig,
    EnqueueOutcome, ExecutionEvent, ExecutionId, Notice, OverlapPolicy, TaskKey, TaskSpec,
    TaskStatus, UtcMillis,
};
use tokio::sync::oneshot;

use crate::dead::DeadLetter;
use crate::ended::{Ends, JobEnd};
use crate::error::{EmbeddedError, Result};
use crate::job::{AttemptCall, JobFn, NAMESPACE};
use crate::job_id::JobId;
use crate::metrics::Recorder;
use crate::staging::Staging;
use crate::store::{Op, StoreHandle, StoredAttempt};
use crate::table::{JobTable, Running};

mod durable;
mod forget;
mod promote;
mod submit;

/// How many dispatches one step takes from the dispatcher, and how many staged jobs it
/// promotes: a step runs under the engine's lock, which every submit, cancel and attempt end
/// of the program waits for, so a burst is worked off in steps of a few hundred
/// microseconds with the lock let go in between (the step says its work is not done by a
/// wakeup that has passed), not in one step as long as the burst. The dispatches go through
/// one buffer of this size, kept from step to step.
const DISPATCH_BATCH: usize = 256;
const STEP_PROMOTIONS: usize = 128;

/// One execution's next attempt, waiting for a worker or for its retry time.
#[derive(Clone, Debug)]
pub(crate) struct Attempt {
    pub(crate) job: JobId,
    pub(crate) execution: ExecutionId,
    /// The attempt's index, 0 for the first (the dispatcher's and the retry decision's count).
    pub(crate) attempt: u32,
    pub(crate) fire_at: UtcMillis,
    /// When the execution's first attempt started: the retry budget counts from it.
    pub(crate) first_started: Option<UtcMillis>,
    /// The job's epoch when queued: a `replace` or a cancel moves it, and older attempts
    /// are dropped when they come up.
    epoch: u64,
    /// Found running in the store by a restart.
    recovered: bool,
    /// A run-now (`trigger`) execution: not a fire, so its start is not a fire's lateness.
    run_now: bool,
    /// When this attempt started (its duration's start).
    started: UtcMillis,
}

impl Attempt {
    fn stored(&self, retry_at: Option<UtcMillis>) -> StoredAttempt {
        StoredAttempt {
            execution: self.execution,
            attempt: self.attempt,
            fire_at: self.fire_at,
            first_started: self.first_started,
            retry_at,
        }
    }
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
    running: Running,
    /// Kept in the store.
    durable: bool,
    /// How its latest execution ended: what [`Engine::ended`] says once it has left.
    last_end: Option<JobEnd>,
    /// Promoted by a step and its first attempt not started yet (see [`promote`]).
    awaiting_launch: bool,
}

/// An attempt to start now, handed to the driver to spawn outside the lock.
pub(crate) struct Launch {
    pub(crate) attempt: Attempt,
    pub(crate) key: Arc<TaskKey>,
    pub(crate) run: Arc<JobFn>,
    /// Its `cancel` is also the attempt's kill switch (see [`crate::run`]).
    pub(crate) ctx: AttemptCall,
    pub(crate) timeout: std::time::Duration,
    /// For a persisted job: answered once the store holds the attempt as running. The body
    /// waits for it, so that an attempt whose process dies is found in flight by the restart
    /// and runs again as redelivered, never as a fresh fire it could not tell from a first.
    pub(crate) on_disk: Option<oneshot::Receiver<Result<(), String>>>,
    durable: bool,
}

/// See the [module notes](self).
pub(crate) struct Engine {
    dispatcher: Dispatcher,
    jobs: JobTable<JobEntry>,
    /// One-shot jobs not due soon, not tasks yet (see [`crate::staging`]).
    staging: Staging,
    /// The jobs promoted ahead of the fire path, not started yet.
    ahead: promote::Ahead,
    idempotency: HashMap<String, JobId>,
    waiting: ReadyQueue<Attempt>,
    retries: TimerWheel<Attempt>,
    dead: BTreeMap<JobId, DeadLetter>,
    /// How jobs that left ended, for a while.
    ends: Ends,
    next_id: u64,
    running: usize,
    /// How many attempts may run at once.
    pub(crate) workers: usize,
    /// Whether new attempts start (false from the first phase of a shutdown on).
    pub(crate) starting: bool,
    store: Option<StoreHandle>,
    /// Store changes not sent yet.
    outbox: Vec<Op>,
    /// After a restart, until the work found due has started: half the workers run.
    catching_up: bool,
    /// When the driver sleeps until (`None`: until woken); an attempt that moves the next
    /// wakeup before it wakes the driver.
    pub(crate) driver_wakes_at: Option<UtcMillis>,
    /// One copy of the names every job shares (namespace, handler, queue, default retry).
    interner: Interner,
    namespace: Arc<str>,
    metrics: Recorder,
    /// The buffer of [`Engine::step`]'s dispatches, empty between steps.
    dispatches: Vec<Dispatch>,
}

impl Engine {
    pub(crate) fn new(config: DispatcherConfig, workers: usize, now: UtcMillis) -> Self {
        Engine {
            waiting: ReadyQueue::new(config.ready.clone()),
            retries: TimerWheel::new(config.timer.clone(), now),
            staging: Staging::new(config.timer.clone(), now),
            ahead: promote::Ahead::default(),
            dispatcher: Dispatcher::new(config, now),
            jobs: JobTable::default(),
            idempotency: HashMap::new(),
            dead: BTreeMap::new(),
            ends: Ends::default(),
            next_id: 0,
            running: 0,
            workers,
            starting: true,
            store: None,
            outbox: Vec::new(),
            catching_up: false,
            driver_wakes_at: None,
            interner: Interner::default(),
            namespace: Arc::from(NAMESPACE),
            metrics: Recorder::none(),
            dispatches: Vec::new(),
        }
    }

    /// Records the kernel's metrics into `metrics` from now on.
    #[cfg(feature = "metrics")]
    pub(crate) fn set_metrics(&mut self, metrics: Recorder) {
        self.metrics = metrics;
        self.report_gauges();
    }

    /// Sets the gauges: attempts running, the workers' limit now, dead letters held.
    fn report_gauges(&self) {
        self.metrics
            .gauges(self.running, self.worker_limit(), self.dead.len());
    }

    /// Workers that may run now: half of them while a restart catches up.
    fn worker_limit(&self) -> usize {
        if self.catching_up {
            (self.workers / 2).max(1)
        } else {
            self.workers
        }
    }

    /// The job holding `key`, if any (an idempotent submit returns it).
    pub(crate) fn by_idempotency_key(&self, key: &str) -> Option<JobId> {
        self.idempotency.get(key).copied()
    }

    /// A fresh id and the dispatcher key for it.
    fn new_id(&mut self) -> (JobId, Arc<TaskKey>) {
        self.next_id += 1;
        let id = JobId(self.next_id);
        (id, self.key_of(id))
    }

    fn key_of(&self, id: JobId) -> Arc<TaskKey> {
        let namespace = Arc::clone(&self.namespace);
        Arc::new(TaskKey::new(namespace, id.0.to_string()))
    }

    /// One turn of the driver at `now`: due retries and fires queued, attempts started up to
    /// the free workers and added to `launches` (the caller's buffer, kept from turn to turn
    /// so that a turn allocates none) to spawn. Returns when to come back: at or before
    /// `now` when the step's bounds left promotions or fires for the next one.
    pub(crate) fn step(&mut self, now: UtcMillis, launches: &mut Vec<Launch>) -> Option<UtcMillis> {
        self.promote_due(now);
        for (_, attempt) in self.retries.advance(now) {
            self.requeue_attempt(attempt, now);
        }
        let mut batch = std::mem::take(&mut self.dispatches);
        self.dispatcher.poll_into(now, DISPATCH_BATCH, &mut batch);
        for dispatch in batch.drain(..) {
            self.enqueue(&dispatch, now);
        }
        self.dispatches = batch;
        log_notices(self.dispatcher.take_notices(), &self.metrics);
        if self.store.is_some() {
            let writes = self.dispatcher.take_state_writes(UtcMillis::MAX);
            self.persist_states(writes);
        }
        let first_new = launches.len();
        while self.starting && self.running < self.worker_limit() {
            let Some(attempt) = self.waiting.pop(now) else {
                break;
            };
            if let Some(launch) = self.launch(attempt, now) {
                launches.push(launch);
            }
        }
        // The first answer covers the whole outbox (the attempts' running marks and the
        // dispatcher's states); each later one an empty batch committed after it.
        for launch in launches[first_new..].iter_mut().filter(|l| l.durable) {
            launch.on_disk = self.flush_acked();
        }
        if self.catching_up && self.waiting.is_empty() {
            self.catching_up = false;
            tracing::info!("caught up after the restart: all workers run");
        }
        self.report_gauges();
        // While the promoted jobs are as many as may wait, a staged one's time is no reason
        // to wake: the start that makes room takes a step.
        self.settle_ahead();
        let staged = self.may_promote().then(|| self.staging.next_due());
        [
            self.dispatcher.next_wakeup(now),
            self.retries.next_due(),
            staged.flatten(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Queues the dispatcher's states of durable jobs for the store; a deleted state goes
    /// with its job's deletion.
    fn persist_states(&mut self, writes: Vec<StateWrite>) {
        for (key, state) in writes {
            let Some(id) = job_id(&key) else { continue };
            let durable = self.jobs.get(&id).is_some_and(|j| j.durable);
            if let (true, Some(state)) = (durable, state) {
                self.outbox.push(Op::PutState(id, Box::new(state)));
            }
        }
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
                    job.running.cancel_all();
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
            recovered: false,
            run_now: d.run_now.is_some(),
            started: now,
        };
        // In flight from here: the dispatcher counts the fire as sent, so the store must
        // hold the execution until it ends, whether or not a worker took it yet.
        if job.durable && self.store.is_some() {
            self.outbox.push(Op::PutRunning(id, attempt.stored(None)));
        }
        self.metrics.scheduled(&job.spec.queue);
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
        attempt.started = now;
        job.awaiting_launch = false;
        if attempt.attempt == 0 && !attempt.run_now && !attempt.recovered {
            self.metrics
                .started_late(&job.spec.queue, now.0 - attempt.fire_at.0);
        }
        // One signal both stops the body and tells it so: a kill is its cancel.
        let cancel = Cancel::new();
        job.running.insert(attempt.execution, cancel.clone());
        self.running += 1;
        let ctx = AttemptCall {
            execution: attempt.execution,
            attempt: attempt.attempt.saturating_add(1),
            fire_at: attempt.fire_at,
            recovered: attempt.recovered,
            deadline: now.add(job.spec.timeout),
            cancel,
            spec: Arc::clone(&job.spec),
        };
        let launch = Launch {
            key: Arc::clone(&job.key),
            run: Arc::clone(&job.run),
            timeout: job.spec.timeout,
            ctx,
            attempt: attempt.clone(),
            on_disk: None,
            durable: job.durable,
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
        job.running.remove(attempt.execution);
        let durable = job.durable;
        let Verdict {
            outcome,
            error,
            retryable,
        } = verdict;
        if outcome == AttemptOutcome::Released {
            // Given back unfinished by a shutdown: nothing ended, and the store still holds
            // the execution for the next process.
            return;
        }
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
                        recovered: false,
                        ..attempt.clone()
                    };
                    let stored = next.stored(Some(retry_at));
                    self.persist(durable, || Op::PutRunning(attempt.job, stored));
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
                    let bytes = serde_json::to_vec(&letter).unwrap_or_default();
                    self.persist(durable, || Op::PutDead(attempt.job, bytes));
                    self.dead.insert(attempt.job, letter);
                }
            }
        }
        if let Some(job) = self.jobs.get(&attempt.job) {
            let ran_ms = now.0 - attempt.started.0;
            self.metrics
                .attempt(&job.spec.queue, &job.spec.handler, &end, ran_ms);
        }
        self.end_execution(&attempt, end, now);
        self.report_gauges();
    }

    /// Reports an attempt's end; the last one of an execution frees its job's overlap, and
    /// a job with nothing left to do is forgotten.
    fn end_execution(&mut self, attempt: &Attempt, end: AttemptEnd, now: UtcMillis) {
        let Some(job) = self.jobs.get_mut(&attempt.job) else {
            return;
        };
        let last = end.is_last();
        if last {
            job.last_end = Some(JobEnd::of_outcome(end.outcome));
        }
        let event = ExecutionEvent::Finished { at: now, end };
        self.dispatcher
            .on_execution(&job.key, attempt.execution, attempt.attempt, &event, now);
        if last {
            job.active = job.active.saturating_sub(1);
            let (durable, execution) = (job.durable, attempt.execution);
            self.persist(durable, || Op::DeleteRunning(attempt.job, execution));
            self.forget_if_done(attempt.job, now);
        }
    }

    pub(super) fn remove(&mut self, id: JobId, now: UtcMillis) {
        let Some(job) = self.jobs.remove(&id) else {
            return;
        };
        // Nothing ran to its end: a cancel, or a parent's cancel.
        let end = job.last_end.unwrap_or(JobEnd::Cancelled);
        self.ends.record(id, end, now);
        // Its queued attempts and retries are dropped when they come up (the job is gone).
        self.dispatcher.remove(&job.key, now);
        self.persist(job.durable, || Op::DeleteJob(id));
        if let Some(k) = &job.spec.idempotency_key {
            self.idempotency.remove(k);
        }
        if self.dead.remove(&id).is_some() {
            self.report_gauges();
        }
    }

    /// Forgets a job so that nothing more of it starts; `NotFound` if it is unknown or its
    /// only work is an attempt already running (see [`kill`](Self::kill)).
    pub(crate) fn cancel(&mut self, id: JobId, now: UtcMillis) -> Result<()> {
        let Some(job) = self.jobs.get(&id) else {
            if !self.cancel_staged(id) {
                return Err(EmbeddedError::NotFound(id));
            }
            self.ends.record(id, JobEnd::Cancelled, now);
            return Ok(());
        };
        let state = self.dispatcher.state(&job.key);
        let to_come = job.spec.paused
            || job.spec.schedule.is_periodic()
            || job.active as usize > job.running.len()
            || self.dead.contains_key(&id)
            || state.is_some_and(|s| s.next_fire_at.is_some() || s.held_fire_at.is_some())
            || self.dispatcher.fire_pending(&job.key);
        if !to_come {
            return Err(EmbeddedError::NotFound(id));
        }
        self.remove_with_dependents(id, now);
        self.ends.record(id, JobEnd::Cancelled, now);
        Ok(())
    }

    /// Stops the job's running attempts (they end killed, not retried); how many this
    /// stopped, 0 if none runs.
    pub(crate) fn kill(&mut self, id: JobId, now: UtcMillis) -> Result<usize> {
        self.unstage(id, now);
        let job = self.jobs.get(&id).ok_or(EmbeddedError::NotFound(id))?;
        Ok(job.running.cancel_all())
    }

    /// Runs the job now, beside its schedule, as an execution of its own: its id.
    pub(crate) fn trigger(&mut self, id: JobId, now: UtcMillis) -> Result<ExecutionId> {
        self.unstage(id, now);
        let job = self.jobs.get(&id).ok_or(EmbeddedError::NotFound(id))?;
        let execution = ExecutionId::from_uuid(uuid::Uuid::now_v7());
        if !self.dispatcher.trigger(&job.key, execution, now) {
            return Err(EmbeddedError::NotFound(id));
        }
        Ok(execution)
    }

    /// Pauses or resumes a job: its spec changes, as a task's does in the cluster, and the
    /// dispatcher re-arms it from `now`. Its status after, as [`status`](Self::status) says.
    pub(crate) fn set_paused(
        &mut self,
        id: JobId,
        paused: bool,
        now: UtcMillis,
    ) -> Result<TaskStatus> {
        self.unstage(id, now);
        let job = self.jobs.get_mut(&id).ok_or(EmbeddedError::NotFound(id))?;
        if job.spec.paused != paused {
            let mut spec = (*job.spec).clone();
            spec.paused = paused;
            job.spec = Arc::new(spec);
            job.revision += 1;
            if job.durable && self.store.is_some() {
                self.outbox.push(Op::PutJob(id, Arc::clone(&job.spec)));
            }
            self.dispatcher.upsert(
                Arc::clone(&job.key),
                Arc::clone(&job.spec),
                job.revision,
                None,
                now,
            );
        }
        self.status(id).ok_or(EmbeddedError::NotFound(id))
    }

    /// Pauses or resumes every job (the dispatcher's namespace pause).
    pub(crate) fn set_all_paused(&mut self, paused: bool, now: UtcMillis) {
        if paused {
            self.dispatcher.pause_namespace(NAMESPACE);
        } else {
            self.dispatcher.resume_namespace(NAMESPACE, now);
        }
    }

    /// A staged job is scheduled: its next fire is known and waits for its time.
    pub(crate) fn status(&self, id: JobId) -> Option<TaskStatus> {
        let Some(job) = self.jobs.get(&id) else {
            return self.staging.contains(id).then_some(TaskStatus::Scheduled);
        };
        self.dispatcher.state(&job.key).map(|s| s.status)
    }

    /// How `id` ended, while that is remembered; a dead-lettered job is still held.
    pub(crate) fn ended(&self, id: JobId, now: UtcMillis) -> Option<JobEnd> {
        if self.dead.contains_key(&id) {
            return Some(JobEnd::DeadLettered);
        }
        if self.jobs.contains_key(&id) || self.staging.contains(id) {
            return None;
        }
        self.ends.get(id, now)
    }

    pub(crate) fn dead_letters(&self) -> Vec<DeadLetter> {
        self.dead.values().cloned().collect()
    }

    /// Runs a dead-lettered job again as a new execution: its id; `NotFound` if the job
    /// holds no dead letter.
    pub(crate) fn requeue(&mut self, id: JobId, now: UtcMillis) -> Result<ExecutionId> {
        if self.dead.remove(&id).is_none() {
            return Err(EmbeddedError::NotFound(id));
        }
        let durable = self.jobs.get(&id).is_some_and(|j| j.durable);
        self.persist(durable, || Op::DeleteDead(id));
        let triggered = self.trigger(id, now);
        self.report_gauges();
        triggered
    }

    /// Drops every dead letter, and the one-shot jobs kept only for them.
    pub(crate) fn purge(&mut self, now: UtcMillis) -> usize {
        let ids: Vec<JobId> = self.dead.keys().copied().collect();
        for id in &ids {
            self.dead.remove(id);
            let durable = self.jobs.get(id).is_some_and(|j| j.durable);
            self.persist(durable, || Op::DeleteDead(*id));
            self.forget_if_done(*id, now);
        }
        self.report_gauges();
        ids.len()
    }

    /// Jobs known (scheduled, running, paused or dead-lettered).
    pub(crate) fn len(&self) -> usize {
        self.jobs.len() + self.staging.len()
    }

    /// Jobs staged, not tasks yet.
    #[cfg(test)]
    pub(crate) fn staged(&self) -> usize {
        self.staging.len()
    }

    /// Whether every worker runs an attempt: each one's end takes a step.
    pub(crate) fn workers_busy(&self) -> bool {
        self.starting && self.running >= self.worker_limit()
    }

    /// Attempts running now.
    pub(crate) fn running(&self) -> usize {
        self.running
    }

    /// Stops every running attempt (the second phase of a shutdown).
    pub(crate) fn kill_all(&mut self) {
        for job in self.jobs.values() {
            job.running.cancel_all();
        }
    }
}

/// The job a dispatcher key names.
fn job_id(key: &TaskKey) -> Option<JobId> {
    key.id.parse().ok().map(JobId)
}

/// Logs what the dispatcher noticed: the cluster alerts on these, a library logs them.
fn log_notices(notices: Vec<Notice>, metrics: &Recorder) {
    for notice in notices {
        match notice {
            Notice::AttemptFailed { .. } => {}
            Notice::DeadlineMissed { key, within, miss } => {
                let reason = miss.reason.as_str();
                metrics.deadline_missed(reason, miss.missed);
                tracing::error!(
                    task_id = %key,
                    fire_at = %miss.first_fire,
                    within_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX),
                    missed = miss.missed,
                    reason,
                    detail = %miss.reason,
                    "deadline missed: no success within the window after the fire"
                );
            }
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
