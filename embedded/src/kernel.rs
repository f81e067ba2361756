//! The kernel's face: a builder, the submits, the controls, and the two-phase shutdown.
//!
//! A submit turns the job's options and its time into a cluster [`TaskSpec`] and has the
//! schedule compiled by the core before anything is stored, so an invalid cron expression,
//! time zone or interval is an error of the call. A job that is to be persisted (a named
//! handler on a kernel with a store) goes through the async [`Kernel::submit`], which
//! returns only once the batch holding it is on disk; the plain `at`/`after`/`every`/`cron`
//! return at once and so refuse one. The handle is cheap to clone (one `Arc`): a job may
//! hold one to submit more jobs.
//!
//! The controls answer as the SDK client's `trigger`, `pause`, `resume` and `kill` do: a
//! [`Result`] whose `Ok` says what was done (the status after a pause or resume, the
//! execution a trigger or requeue started, how many attempts a kill stopped) and whose
//! [`EmbeddedError::NotFound`] says the kernel holds no such job, so "unknown job" and
//! "nothing to do" read apart.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::handler::IntoHandler;
use ax_scheduler_core::timer::TimerConfig;
use ax_scheduler_core::{
    Clock, CoreError, DispatcherConfig, ExecutionId, Schedule, TaskSpec, TaskStatus, UtcMillis,
};
use ax_tokio_clock::TokioClock;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::dead::DeadLetter;
use crate::ended::JobEnd;
use crate::engine::Engine;
use crate::error::{EmbeddedError, Result};
use crate::job::{shared_handler, Body, Handlers, Job, JobFn, NAMESPACE};
use crate::job_id::JobId;
use crate::parents::Parent;
use crate::run::{drive, Shared};
use crate::store::{self, StoreHandle};

/// Default number of attempts that run at once.
pub const DEFAULT_WORKERS: usize = 5;
/// The `handler` of a closure job, in its spec and in its metrics' labels.
const CLOSURE_HANDLER: &str = "closure";
/// Default timer tick: the cluster's, the precision a fire is due to.
pub const DEFAULT_TICK: Duration = Duration::from_millis(10);

/// Settings of a [`Kernel`]; [`Kernel::builder`].
pub struct KernelBuilder {
    workers: usize,
    tick: Duration,
    clock: Option<Arc<dyn Clock>>,
    dispatcher: DispatcherConfig,
    store: Option<PathBuf>,
    handlers: Handlers,
    #[cfg(feature = "metrics")]
    registry: Option<prometheus::Registry>,
}

impl std::fmt::Debug for KernelBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelBuilder")
            .field("workers", &self.workers)
            .field("tick", &self.tick)
            .field("store", &self.store)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl KernelBuilder {
    /// Attempts that run at once; default 5.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Timer tick, whole milliseconds; default 10 ms.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// The wall clock. Default: the host's clock read once, then moved by tokio's clock
    /// (so a paused tokio runtime runs the kernel on virtual time).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Everything else the cluster's dispatcher takes (aging, catch-up window, breaker,
    /// rate limit); the tick set here wins over the one in `config`.
    pub fn dispatcher(mut self, config: DispatcherConfig) -> Self {
        self.dispatcher = config;
        self
    }

    /// Keeps the jobs run by a named handler in the redb file at `path` (created if absent):
    /// a restart finds them there, runs again what was running and goes on with the rest.
    pub fn store(mut self, path: impl Into<PathBuf>) -> Self {
        self.store = Some(path.into());
        self
    }

    /// Exports the kernel's metrics on `registry`, under the cluster's names and help texts
    /// (docs/metrics.md): fires dispatched (`scheduler_fires_total`), their
    /// lateness (`scheduler_schedule_latency_seconds`), attempts by outcome, failures,
    /// retries and durations, attempts running, the workers' limit and the dead letters.
    /// The one `queue` is `default`; `handler` is a named job's handler, or `closure`.
    /// A registry that already holds these families (another kernel's, an ax service's)
    /// makes [`KernelBuilder::build`] fail.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ax_embedded::EmbeddedError> {
    /// let registry = prometheus::Registry::new();
    /// let kernel = ax_embedded::Kernel::builder().metrics(&registry).build()?;
    /// let names: Vec<String> = registry.gather().iter().map(|f| f.name().to_owned()).collect();
    /// assert!(names.iter().any(|n| n == "scheduler_attempts_total"));
    /// # kernel.shutdown(std::time::Duration::from_secs(1)).await;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, registry: &prometheus::Registry) -> Self {
        self.registry = Some(registry.clone());
        self
    }

    /// Registers the handler that runs jobs made with [`Job::named`]`(name)`: an async
    /// function of a [`handler::Typed<T>`](crate::handler::Typed) (its payload decoded as a `T`;
    /// one that does not decode fails the attempt for good), or any [`Handler`](crate::Handler), the trait a
    /// cluster worker of the Rust SDK runs too: an `Arc` of one serves both in one process.
    pub fn handler<M>(mut self, name: &str, handler: impl IntoHandler<M>) -> Self {
        let handler = handler.into_handler();
        self.handlers
            .insert(Arc::from(name), shared_handler(handler));
        self
    }

    /// Starts the kernel's driver on the current tokio runtime. With a store, the file is
    /// opened and what it holds restored first (this blocks on the file).
    pub fn build(self) -> Result<Kernel> {
        if self.workers == 0 {
            return Err(EmbeddedError::invalid("workers", "must be at least 1"));
        }
        let mut config = self.dispatcher;
        config.timer = TimerConfig {
            tick: self.tick,
            ..config.timer
        };
        if let Some(problem) = config.timer.problem() {
            return Err(EmbeddedError::invalid("tick", problem));
        }
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| EmbeddedError::NoRuntime)?;
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(TokioClock::from_now()));
        let now = clock.now();
        if self.store.is_some() {
            // A fire's RUNNING state is what a restart re-runs from: written at once. And no
            // log of events replays what a routine run's delayed write held: every run too.
            config.running_write_delay = Duration::ZERO;
            config.routine_write_delay = Duration::ZERO;
        }
        // Without a store no state is kept anywhere: the dispatcher need not record writes.
        config.write_states = self.store.is_some();
        let mut engine = Engine::new(config, self.workers, now);
        #[cfg(feature = "metrics")]
        if let Some(registry) = &self.registry {
            engine.set_metrics(crate::metrics::Recorder(Some(register_metrics(
                registry,
                &self.handlers,
            )?)));
        }
        if let Some(path) = &self.store {
            let (db, loaded) = store::open(path)?;
            engine.restore(loaded, &self.handlers, now)?;
            engine.set_store(StoreHandle::start(db, path)?);
        }
        let shared = Arc::new(Shared {
            engine: parking_lot::Mutex::new(engine),
            handlers: self.handlers,
            clock,
            wake: Notify::new(),
            ended: Notify::new(),
            stop: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
        });
        runtime.spawn(drive(Arc::clone(&shared)));
        Ok(Kernel { shared })
    }
}

/// The scheduling kernel; see the [crate notes](crate).
#[derive(Clone)]
pub struct Kernel {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").finish_non_exhaustive()
    }
}

/// When a job submitted with [`Kernel::submit`] runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// Once, at an instant.
    At(UtcMillis),
    /// Once, this long from now.
    After(Duration),
    /// Every interval (at least 1 s), counted from now.
    Every(Duration),
    /// On a cron expression in an IANA time zone.
    Cron {
        /// 5 fields, or 6 with seconds first.
        expr: String,
        /// The zone, e.g. `Europe/Paris`.
        timezone: String,
    },
    /// No time of its own: each time its parents' executions end as they ask (a run of
    /// theirs reached it), once (see [`Kernel::when_done`]).
    AfterJobs(Vec<Parent>),
}

/// What a shutdown came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether every running attempt ended within the grace.
    pub drained: bool,
    /// Attempts still running at the end of the grace, then stopped.
    pub stopped: usize,
}

impl Kernel {
    /// Settings with their defaults.
    pub fn builder() -> KernelBuilder {
        KernelBuilder {
            workers: DEFAULT_WORKERS,
            tick: DEFAULT_TICK,
            clock: None,
            dispatcher: DispatcherConfig::default(),
            store: None,
            handlers: Handlers::new(),
            #[cfg(feature = "metrics")]
            registry: None,
        }
    }

    /// The kernel's time now.
    pub fn now(&self) -> UtcMillis {
        self.shared.clock.now()
    }

    /// Runs `job` once at `when` (at once if it is past, as its misfire policy says).
    pub fn at(&self, when: UtcMillis, job: Job) -> Result<JobId> {
        self.submit_now(When::At(when), job)
    }

    /// Runs `job` once, `delay` from now.
    pub fn after(&self, delay: Duration, job: Job) -> Result<JobId> {
        self.submit_now(When::After(delay), job)
    }

    /// Runs `job` every `interval` (at least 1 s, the cluster's minimum), counted from now.
    pub fn every(&self, interval: Duration, job: Job) -> Result<JobId> {
        self.submit_now(When::Every(interval), job)
    }

    /// Runs `job` on a cron expression (5 fields, or 6 with seconds first) in an IANA time
    /// zone, with the cluster's rule for daylight-saving gaps and repeats.
    pub fn cron(&self, expr: &str, timezone: &str, job: Job) -> Result<JobId> {
        let when = When::Cron {
            expr: expr.to_owned(),
            timezone: timezone.to_owned(),
        };
        self.submit_now(when, job)
    }

    /// Runs `job` after its parents: each time a run of theirs reaches it (every parent's
    /// execution ended as its [`Parent`] asks, the later ones within their `within` of the
    /// first), once; a run in which one ended otherwise or too late skips it, and the jobs
    /// after it. A `JobId` is a parent on success. The parents must be jobs of this kernel
    /// (persisted ones for a persisted child); a job that has parents cannot carry a
    /// deadline (it has no fires of its own to judge: put it on the first job of the
    /// chain). Cancelling a parent cancels the jobs that wait on it; a dependent job is
    /// forgotten once its parents will run no more and its last run is over.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), ax_embedded::EmbeddedError> {
    /// use std::time::Duration;
    /// use ax_embedded::{Job, Kernel};
    /// let kernel = Kernel::builder().build()?;
    /// let extract = kernel.after(Duration::from_secs(60), Job::new(|_| async { Ok(()) }))?;
    /// let load = kernel.when_done([extract], Job::new(|_| async { Ok(()) }))?;
    /// # let _ = load;
    /// # kernel.shutdown(Duration::from_secs(1)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn when_done<P: Into<Parent>>(
        &self,
        parents: impl IntoIterator<Item = P>,
        job: Job,
    ) -> Result<JobId> {
        let parents = parents.into_iter().map(Into::into).collect();
        self.submit_now(When::AfterJobs(parents), job)
    }

    /// Submits any job; one the kernel persists (a named handler, with a store) is on disk
    /// when this returns, in the same batch as the submits made meanwhile. A write that
    /// fails (a full disk) is an error and the job is not kept.
    pub async fn submit(&self, when: When, job: Job) -> Result<JobId> {
        let (id, answer) = self.insert(when, job)?;
        let Some(answer) = answer else {
            return Ok(id);
        };
        let written = answer
            .await
            .unwrap_or_else(|_| Err("the store's writer stopped".to_owned()));
        match written {
            Ok(()) => Ok(id),
            Err(reason) => {
                let now = self.now();
                let mut engine = self.shared.lock();
                // Not kept: whatever of it the engine holds goes (a `NotFound` is nothing).
                let _ = engine.cancel(id, now);
                let path = engine.store_path().unwrap_or_default();
                Err(EmbeddedError::Store {
                    path,
                    reason: format!(
                        "write failed, the job was not kept; submit it again once the store \
                         can write (free space if its disk is full): {reason}"
                    ),
                    retryable: true,
                })
            }
        }
    }

    fn submit_now(&self, when: When, job: Job) -> Result<JobId> {
        if matches!(job.body, Body::Named(_)) && self.shared.lock().has_store() {
            return Err(EmbeddedError::invalid(
                "job",
                "a persisted job is submitted with `submit(..).await`, which returns once it is on disk",
            ));
        }
        self.insert(when, job).map(|(id, _)| id)
    }

    /// Checks and adds a job; for a persisted one, the answer of the store's writer.
    fn insert(&self, when: When, job: Job) -> Result<(JobId, Option<StoreAnswer>)> {
        let now = self.now();
        let depends_on = match &when {
            When::AfterJobs(parents) => crate::parents::dependencies(parents)?,
            _ => Vec::new(),
        };
        if !depends_on.is_empty() && job.options.task.expect_success_within.is_some() {
            return Err(EmbeddedError::invalid(
                "deadline",
                "judges the fires of a schedule, and a dependent job has none; put it on the chain's first job",
            ));
        }
        let schedule = schedule_of(when, now)?;
        let payload = job.options.check()?;
        let (run, named) = match &job.body {
            Body::Closure(run) => (Arc::clone(run), false),
            Body::Named(name) => (self.handler(name)?, true),
        };
        let mut engine = self.shared.lock();
        if !engine.starting {
            return Err(EmbeddedError::ShuttingDown);
        }
        if let Some(key) = &job.options.task.idempotency_key {
            if let Some(id) = engine.by_idempotency_key(key) {
                return Ok((id, None));
            }
        }
        let durable = named && engine.has_store();
        let mut spec = spec_of(schedule, payload, &job, now);
        spec.depends_on = depends_on;
        engine.check_parents(&spec, durable, now)?;
        let (id, wake) = engine.submit(spec, (run, durable), now);
        let answer = if durable { engine.flush_acked() } else { None };
        drop(engine);
        if wake {
            self.shared.wake.notify_one();
        }
        Ok((id, answer))
    }

    fn handler(&self, name: &str) -> Result<Arc<JobFn>> {
        self.shared
            .handlers
            .get(name)
            .cloned()
            .ok_or_else(|| EmbeddedError::UnknownHandler(name.to_owned()))
    }

    /// Drops a job before it starts. [`EmbeddedError::NotFound`] if nothing of it was left
    /// to run: unknown, ended, or its only work an attempt already running, which goes on
    /// (see [`kill`](Self::kill)) but is not retried.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ax_embedded::EmbeddedError> {
    /// use std::time::Duration;
    /// use ax_embedded::{EmbeddedError, Job, Kernel};
    ///
    /// let kernel = Kernel::builder().build()?;
    /// let id = kernel.after(Duration::from_secs(60), Job::new(|_| async { Ok(()) }))?;
    /// kernel.cancel(id)?;
    /// assert!(matches!(kernel.cancel(id), Err(EmbeddedError::NotFound(gone)) if gone == id));
    /// # kernel.shutdown(Duration::from_secs(1)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn cancel(&self, id: JobId) -> Result<()> {
        let now = self.now();
        self.shared.lock().cancel(id, now)
    }

    /// Stops the job's running attempts: their token is cancelled and they are dropped;
    /// they end killed, with no retry. Returns how many it stopped: `Ok(0)` for a job that
    /// has none running, [`EmbeddedError::NotFound`] for one the kernel does not hold.
    pub fn kill(&self, id: JobId) -> Result<usize> {
        let now = self.now();
        self.shared.lock().kill(id, now)
    }

    /// Runs the job now as an execution of its own; its schedule is not disturbed. Returns
    /// that execution's id (what its attempts' [`Context::execution_id`] says);
    /// [`EmbeddedError::NotFound`] for a job the kernel does not hold.
    ///
    /// [`Context::execution_id`]: crate::Context::execution_id
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), ax_embedded::EmbeddedError> {
    /// use std::time::Duration;
    /// use ax_embedded::{EmbeddedError, Job, Kernel};
    ///
    /// let kernel = Kernel::builder().build()?;
    /// let report = kernel.every(Duration::from_secs(3600), Job::new(|_| async { Ok(()) }))?;
    /// let run = kernel.trigger(report)?; // the hourly report, once more now
    /// # let _ = run;
    /// kernel.cancel(report)?;
    /// assert!(matches!(kernel.trigger(report), Err(EmbeddedError::NotFound(id)) if id == report));
    /// # kernel.shutdown(Duration::from_secs(1)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn trigger(&self, id: JobId) -> Result<ExecutionId> {
        self.control(|e, now| e.trigger(id, now))
    }

    /// Stops the job from firing until [`resume`](Self::resume). Returns its status after
    /// ([`TaskStatus::Paused`]); a paused job is paused again at no cost.
    /// [`EmbeddedError::NotFound`] for a job the kernel does not hold.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), ax_embedded::EmbeddedError> {
    /// use std::time::Duration;
    /// use ax_embedded::{EmbeddedError, Job, Kernel, TaskStatus};
    ///
    /// let kernel = Kernel::builder().build()?;
    /// let sync = kernel.every(Duration::from_secs(60), Job::new(|_| async { Ok(()) }))?;
    /// assert_eq!(kernel.pause(sync)?, TaskStatus::Paused);
    /// assert_eq!(kernel.pause(sync)?, TaskStatus::Paused, "idempotent");
    /// kernel.cancel(sync)?;
    /// assert!(matches!(kernel.pause(sync), Err(EmbeddedError::NotFound(id)) if id == sync));
    /// # kernel.shutdown(Duration::from_secs(1)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn pause(&self, id: JobId) -> Result<TaskStatus> {
        self.control(|e, now| e.set_paused(id, true, now))
    }

    /// Lets a paused job fire again. As for a task resumed in the cluster, a periodic
    /// schedule goes on from now (what it missed is not run), and a one-shot whose instant
    /// passed meanwhile runs as its misfire policy says. Returns its status after (a job
    /// with its next fire armed is [`TaskStatus::Scheduled`]); resuming a job that is not
    /// paused changes nothing. [`EmbeddedError::NotFound`] for a job the kernel does not
    /// hold.
    pub fn resume(&self, id: JobId) -> Result<TaskStatus> {
        self.control(|e, now| e.set_paused(id, false, now))
    }

    /// Stops every job from firing; the first fire each misses is kept, and on
    /// [`resume_all`](Self::resume_all) its misfire policy says what of the missed ones run.
    pub fn pause_all(&self) {
        self.control(|e, now| e.set_all_paused(true, now));
    }

    /// Lets every job fire again after [`pause_all`](Self::pause_all).
    pub fn resume_all(&self) {
        self.control(|e, now| e.set_all_paused(false, now));
    }

    /// The job's status as the cluster shows a task's, while the kernel holds it; `None`
    /// once it has left ([`ended`](Self::ended) then says how) or for an unknown id.
    pub fn status(&self, id: JobId) -> Option<TaskStatus> {
        self.shared.lock().status(id)
    }

    /// How the job ended: succeeded, failed, killed, cancelled, or dead-lettered (still
    /// held for a requeue). `None` while it still has work to come, and for an id the kernel
    /// does not know or no longer remembers: an end is kept for
    /// [`ENDS_KEPT_FOR`](crate::ENDS_KEPT_FOR) and among the latest
    /// [`MAX_ENDS_KEPT`](crate::MAX_ENDS_KEPT).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ax_embedded::EmbeddedError> {
    /// use std::time::Duration;
    /// use ax_embedded::{Job, JobEnd, Kernel};
    ///
    /// let kernel = Kernel::builder().build()?;
    /// let id = kernel.after(Duration::from_secs(60), Job::new(|_| async { Ok(()) }))?;
    /// assert_eq!(kernel.ended(id), None, "still to come");
    /// kernel.cancel(id)?;
    /// assert_eq!(kernel.ended(id), Some(JobEnd::Cancelled));
    /// # kernel.shutdown(Duration::from_secs(1)).await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn ended(&self, id: JobId) -> Option<JobEnd> {
        let now = self.now();
        self.shared.lock().ended(id, now)
    }

    /// Jobs known: scheduled, running, paused or dead-lettered.
    pub fn len(&self) -> usize {
        self.shared.lock().len()
    }

    /// Whether no job is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The executions that failed for good, one (the latest) per job.
    pub fn dead_letters(&self) -> Vec<DeadLetter> {
        self.shared.lock().dead_letters()
    }

    /// Runs a dead-lettered job again from its first attempt, as a new execution: its id.
    /// [`EmbeddedError::NotFound`] if the job holds no dead letter.
    pub fn requeue(&self, id: JobId) -> Result<ExecutionId> {
        self.control(|e, now| e.requeue(id, now))
    }

    /// Drops every dead letter; returns how many.
    pub fn purge_dead_letters(&self) -> usize {
        let now = self.now();
        self.shared.lock().purge(now)
    }

    /// Stops the kernel in two phases: no attempt starts from now on and running ones get up
    /// to `grace` to end; then those still running are cancelled and dropped (given back
    /// unfinished: a persisted one runs again after the restart). Last, the store's writes
    /// are flushed. Submits fail with [`EmbeddedError::ShuttingDown`] from the first phase on.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        self.shared.lock().starting = false;
        let drained = tokio::time::timeout(grace, self.wait_idle()).await.is_ok();
        let mut stopped = 0;
        if !drained {
            self.shared.hard_stop.cancel();
            stopped = {
                let mut engine = self.shared.lock();
                engine.kill_all();
                engine.running()
            };
            // A killed attempt is dropped at once; this waits for its verdict to land.
            let _ = tokio::time::timeout(Duration::from_secs(1), self.wait_idle()).await;
        }
        self.shared.stop.cancel();
        // Everything changed so far is on disk, and the file closed, before the kernel is
        // reported stopped: the next kernel on the file may open it at once.
        let (flushed, store) = {
            let mut engine = self.shared.lock();
            (engine.flush_acked(), engine.take_store())
        };
        if let Some(flushed) = flushed {
            if let Ok(Err(e)) = flushed.await {
                tracing::error!(error = %e, "the store's last write failed");
            }
        }
        if let Some(store) = store {
            let _ = tokio::task::spawn_blocking(move || store.close()).await;
        }
        ShutdownReport { drained, stopped }
    }

    async fn wait_idle(&self) {
        loop {
            let ended = self.shared.ended.notified();
            if self.shared.lock().running() == 0 {
                return;
            }
            ended.await;
        }
    }

    /// Jobs staged, not tasks yet.
    #[cfg(test)]
    pub(crate) fn staged(&self) -> usize {
        self.shared.lock().staged()
    }

    /// Runs `f` on the engine at the kernel's time and wakes the driver.
    fn control<T>(&self, f: impl FnOnce(&mut Engine, UtcMillis) -> T) -> T {
        let now = self.now();
        let out = f(&mut self.shared.lock(), now);
        self.shared.wake.notify_one();
        out
    }
}

/// The store writer's answer for a batch.
type StoreAnswer = tokio::sync::oneshot::Receiver<Result<(), String>>;

/// The cluster schedule for `when`, compiled once to check it.
fn schedule_of(when: When, now: UtcMillis) -> Result<Schedule> {
    let schedule = match when {
        When::At(at) => Schedule::At(at),
        When::After(delay) => {
            let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
            match now.0.checked_add(ms) {
                Some(at) if at < i64::MAX => Schedule::At(UtcMillis(at)),
                _ => {
                    return Err(EmbeddedError::invalid(
                        "delay",
                        format!("{delay:?} is too far"),
                    ))
                }
            }
        }
        When::Every(interval) => Schedule::Every(interval),
        When::Cron { expr, timezone } => Schedule::Cron { expr, timezone },
        When::AfterJobs(_) => Schedule::Dependent,
    };
    schedule.compile().map_err(|e| match e {
        CoreError::Invalid(errors) => EmbeddedError::InvalidSchedule(errors),
        other => EmbeddedError::invalid("schedule", other.to_string()),
    })?;
    Ok(schedule)
}

/// The kernel's metric families on `registry`, their series at zero for every handler.
#[cfg(feature = "metrics")]
fn register_metrics(
    registry: &prometheus::Registry,
    handlers: &Handlers,
) -> Result<crate::metrics::KernelMetrics> {
    let mut names: Vec<&str> = handlers.keys().map(|k| &**k).collect();
    names.push(CLOSURE_HANDLER);
    crate::metrics::KernelMetrics::register(registry, ax_scheduler_core::task::DEFAULT_QUEUE, &names).map_err(|e| {
        EmbeddedError::invalid(
            "metrics",
            format!("the registry refused the kernel's families ({e}): it may hold another kernel's or an ax service's"),
        )
    })
}

/// The cluster task spec of a job.
pub(crate) fn spec_of(
    schedule: Schedule,
    payload: serde_json::Value,
    job: &Job,
    now: UtcMillis,
) -> TaskSpec {
    let handler = match &job.body {
        Body::Named(name) => name,
        Body::Closure(_) => CLOSURE_HANDLER,
    };
    // The engine names the job: the id is set when it is submitted.
    let mut spec = TaskSpec::new(NAMESPACE, "", handler, schedule)
        .with_options(job.options.task.clone())
        .with_payload(payload);
    spec.created_at = Some(now);
    spec
}
