//! The worker pool: takes messages from its queues and runs them with bounded concurrency.
//!
//! The pool is a set of roles, each in a module of its own and each a loop that ends on a
//! token the pool cancels at a known step of its shutdown, so the order in which they start
//! and stop is written once, in [`WorkerPool::run`]:
//!
//! - [`fetch`]: one loop per queue takes messages when the pool has places for them;
//! - [`execute`]: one attempt, its handler under its timeout with panics caught, its
//!   outcome settled ([`settle`]) and reported; [`awaiting`] for an `http.async` attempt;
//! - [`ack`]: batches the acks of all executions into few script calls;
//! - [`ramp`]: the slow start, which opens the running slots gradually;
//! - [`relay`]: writes the ends settled with their messages to the leader and the history;
//! - [`retrying`]: retries the pool's Redis writes through short outages;
//! - [`heartbeat`]: tells the queues this worker is alive;
//! - [`stop`]: tells the attempts an operator kills (or overlap `replace` ends) to stop;
//! - [`reconcile`]: gives back what the processing lists hold beyond what the pool has in hand;
//! - [`deadline`]: ends awaiting attempts past their deadline and messages of gone workers;
//! - the queue's [`Maintenance`]: promotes due retries and gives back dead workers' messages.
//!
//! The state they share ([`Shared`]) is one `Arc`: the queue, the settings, the handlers,
//! the reporter, the counters, and what the pool has in hand now.
//!
//! Shutdown (the `CancellationToken` passed to [`WorkerPool::run`]): the fetch loops stop
//! taking (a blocked take ends within the block timeout; anything it returns after the
//! cancel is given straight back), in-flight attempts get up to `shutdown_grace` to finish,
//! the rest are stopped and their messages released to the front of the queue; then the
//! heartbeat stops and the worker deregisters.

mod ack;
mod awaiting;
mod config;
mod deadline;
mod execute;
mod fetch;
mod heartbeat;
mod ramp;
mod reconcile;
mod relay;
mod retrying;
mod settle;
mod stop;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ax_queue::{Maintenance, MaintenanceConfig, Promoter, PromoterConfig, Queue};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{WorkerConfig, DEFAULT_CONCURRENCY, DEFAULT_PREFETCH, DEFAULT_SHUTDOWN_GRACE};

use crate::egress::{EgressClient, EgressPolicy};
use crate::error::{Result, WorkerError};
use crate::registry::HandlerRegistry;
use crate::reporter::ExecutionReporter;
use crate::supervise::supervise;

// How an attempt ended, its error, and whether that error may be retried: what the steps of
// an attempt hand on, in `execute` and in `awaiting` alike.
use ax_scheduler_core::attempt::Verdict;

/// Counts of what a pool did, returned when it stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolSummary {
    /// Messages taken.
    pub taken: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed and were scheduled for retry.
    pub retried: u64,
    /// Executions sent to the dead-letter queue.
    pub dead_lettered: u64,
    /// Messages given back unfinished.
    pub released: u64,
}

#[derive(Default)]
struct Counters {
    taken: AtomicU64,
    succeeded: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    released: AtomicU64,
}

impl Counters {
    fn summary(&self) -> PoolSummary {
        PoolSummary {
            taken: self.taken.load(Ordering::Relaxed),
            succeeded: self.succeeded.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
        }
    }
}

struct Shared {
    queue: Queue,
    cfg: WorkerConfig,
    registry: HandlerRegistry,
    reporter: Arc<dyn ExecutionReporter>,
    http: EgressClient,
    counters: Counters,
    /// The attempts this pool has in hand now, by (execution id, attempt): what its
    /// processing lists should hold.
    in_hand: std::sync::Mutex<HashSet<(u128, u32)>>,
    /// The same attempts with what the stop loop asks about and how it tells them to stop.
    watched: std::sync::Mutex<HashMap<(u128, u32), stop::Watched>>,
    /// Where ends go to be relayed, while the pool runs.
    relays: std::sync::Mutex<Option<relay::Relays>>,
    /// The largest lateness (ms) of a first scheduled attempt started since the slow start
    /// last looked; -1 for none.
    start_lateness_ms: std::sync::atomic::AtomicI64,
    /// True while the heartbeat has not reached Redis for most of the visibility timeout:
    /// the attempts in hand are abandoned before the reaper gives them to another worker
    /// (see [`heartbeat`]).
    redis_lost: tokio::sync::watch::Sender<bool>,
}

/// A pool of workers serving some queues. See the module notes for its life cycle.
#[derive(Clone)]
pub struct WorkerPool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("cfg", &self.shared.cfg)
            .field("handlers", &self.shared.registry.names())
            .finish_non_exhaustive()
    }
}

impl WorkerPool {
    /// A pool on `queue` with `registry`'s handlers, reporting to `reporter`.
    pub fn new(
        queue: Queue,
        cfg: WorkerConfig,
        registry: HandlerRegistry,
        reporter: Arc<dyn ExecutionReporter>,
    ) -> Result<Self> {
        if cfg.concurrency == 0 || cfg.fetch_batch == 0 {
            return Err(WorkerError::InvalidConfig(
                "concurrency and fetch_batch must be at least 1".into(),
            ));
        }
        if cfg.queues.is_empty() {
            return Err(WorkerError::InvalidConfig("no queues to serve".into()));
        }
        if !ax_queue::keys::validate_name(&cfg.worker_id) {
            return Err(WorkerError::InvalidConfig(format!(
                "worker id `{}` must be non-empty without braces or spaces",
                cfg.worker_id
            )));
        }
        if cfg.heartbeat_ttl <= cfg.heartbeat_interval {
            return Err(WorkerError::InvalidConfig(
                "heartbeat_ttl must be longer than heartbeat_interval".into(),
            ));
        }
        let http = EgressClient::new(EgressPolicy::new(
            cfg.http_allow_cidrs.clone(),
            cfg.http_allow_hosts.clone(),
        ))?;
        Ok(WorkerPool {
            shared: Arc::new(Shared {
                queue,
                cfg,
                registry,
                reporter,
                http,
                counters: Counters::default(),
                in_hand: std::sync::Mutex::new(HashSet::new()),
                watched: std::sync::Mutex::new(HashMap::new()),
                relays: std::sync::Mutex::new(None),
                start_lateness_ms: std::sync::atomic::AtomicI64::new(-1),
                redis_lost: tokio::sync::watch::Sender::new(false),
            }),
        })
    }

    /// Takes this pool's worker id over from an earlier process under the same id (a
    /// restart under a stable id, such as a StatefulSet pod): gives back at once what that
    /// process left in its processing lists. Call it before [`WorkerPool::run`]. Refuses with
    /// [`WorkerError::IdInUse`] when another process under the id is alive: a heartbeat
    /// found is watched for two heartbeat intervals, and one that advances belongs to a
    /// live process (a dead one's only expires).
    pub async fn claim_id(&self) -> Result<usize> {
        let sh = &self.shared;
        let id = &sh.cfg.worker_id;
        let mut seen = Vec::new();
        for q in &sh.cfg.queues {
            if let Some(beat) = sh.queue.last_heartbeat(q, id).await? {
                seen.push((q, beat));
            }
        }
        if !seen.is_empty() {
            tokio::time::sleep(sh.cfg.heartbeat_interval * 2).await;
            for (q, beat) in seen {
                let now = sh.queue.last_heartbeat(q, id).await?;
                if now.is_some_and(|n| n != beat) {
                    return Err(WorkerError::IdInUse {
                        worker_id: id.clone(),
                        queue: q.clone(),
                    });
                }
            }
        }
        let mut given_back = 0;
        for q in &sh.cfg.queues {
            given_back += sh.queue.recover_worker(q, id).await?;
        }
        Ok(given_back)
    }

    /// The worker id.
    pub fn worker_id(&self) -> &str {
        &self.shared.cfg.worker_id
    }

    /// Serves the queues until `cancel` fires, then shuts down gracefully.
    pub async fn run(&self, cancel: CancellationToken) -> PoolSummary {
        let sh = &self.shared;
        let executions = TaskTracker::new();
        let hard_stop = CancellationToken::new();
        let relay = relay::start(sh);
        let background = Background::start(sh, &cancel).await;
        // Acks go through one batching task: under load, one script call settles many
        // messages. It ends when the last sender (kept by fetchers and executions) is gone.
        let (acks, acker) = ack::start(sh.clone());
        let running = Arc::new(tokio::sync::Semaphore::new(sh.cfg.concurrency));
        let ramp_stop = cancel.child_token();
        let ramp = sh.cfg.slow_start.then(|| {
            tokio::spawn(ramp::ramp_loop(
                sh.clone(),
                running.clone(),
                ramp_stop.clone(),
            ))
        });
        let fetchers = fetch::start(sh, &executions, &cancel, &hard_stop, acks, running);

        cancel.cancelled().await;
        tracing::info!(worker = %sh.cfg.worker_id, "worker pool stopping: no new messages");
        // Stopping opens every slot: what still waits for one starts or goes back at once.
        ramp_stop.cancel();
        if let Some(Err(e)) = match ramp {
            Some(r) => Some(r.await),
            None => None,
        } {
            tracing::error!(error = %e, "slow start task failed");
        }
        fetchers.wait().await;
        drain(&sh.cfg, &executions, &hard_stop).await;
        if let Err(e) = acker.await {
            tracing::error!(error = %e, "ack task failed");
        }
        background.stop().await;
        relay::stop(sh);
        if let Err(e) = relay.await {
            tracing::error!(error = %e, "relay task failed");
        }
        deregister(sh).await;
        sh.counters.summary()
    }
}

/// The background roles that run beside the executions from the first heartbeat until the
/// last ack is settled, and stop together on a token of their own (not the pool's
/// cancellation, which comes before the executions are done).
struct Background {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Background {
    /// Beats once (so the worker is alive before it takes anything), then starts the
    /// heartbeat, maintenance, scheduled-execution promoters, reconcile, stop and deadline
    /// loops.
    async fn start(sh: &Arc<Shared>, cancel: &CancellationToken) -> Self {
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        heartbeat::heartbeat_once(sh, sh.cfg.clock.now(), false).await;
        let maintenance = MaintenanceConfig {
            queues: sh.cfg.queues.clone(),
            interval: sh.cfg.maintenance_interval,
            visibility_timeout: sh.cfg.visibility_timeout,
            sweeper: sh.cfg.worker_id.clone(),
            ..MaintenanceConfig::default()
        };
        let report = || Arc::clone(&sh.reporter);
        let (s, c, t) = (sh.clone(), cancel.clone(), stop.clone());
        tasks.spawn(supervise("heartbeat", report(), stop.clone(), move || {
            heartbeat::heartbeat_loop(s.clone(), c.clone(), t.clone())
        }));
        let (q, t) = (sh.queue.clone(), stop.clone());
        tasks.spawn(supervise(
            "maintenance",
            report(),
            stop.clone(),
            move || Maintenance::new(q.clone(), maintenance.clone()).run(t.clone()),
        ));
        // Every worker promotes its queues' scheduled executions when due: no leader is
        // needed, and each is promoted once however many workers serve the queue.
        for physical in sh.queue.physical_queues_of(&sh.cfg.queues) {
            let (q, t) = (sh.queue.clone(), stop.clone());
            tasks.spawn(supervise("promoter", report(), stop.clone(), move || {
                let (q, t, physical) = (q.clone(), t.clone(), physical.clone());
                async move {
                    match Promoter::new(q, &physical, PromoterConfig::default()) {
                        Ok(p) => p.run(t).await,
                        // The pool's queue names were checked at its start.
                        Err(e) => tracing::error!(queue = %physical, error = %e, "no promoter for the queue"),
                    }
                }
            }));
        }
        let (s, t) = (sh.clone(), stop.clone());
        tasks.spawn(supervise("reconcile", report(), stop.clone(), move || {
            reconcile::reconcile_loop(s.clone(), t.clone())
        }));
        let (s, t) = (sh.clone(), stop.clone());
        tasks.spawn(supervise("stop", report(), stop.clone(), move || {
            stop::stop_loop(s.clone(), t.clone())
        }));
        let (s, t) = (sh.clone(), stop.clone());
        tasks.spawn(supervise("deadline", report(), stop.clone(), move || {
            deadline::deadline_loop(s.clone(), t.clone())
        }));
        Background { stop, tasks }
    }

    /// Stops every background loop and waits until each has ended.
    async fn stop(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Waits for the executions, for up to the shutdown grace; then stops the ones still
/// running (their messages go back to the queue) and waits for them too.
async fn drain(cfg: &WorkerConfig, executions: &TaskTracker, hard_stop: &CancellationToken) {
    executions.close();
    if tokio::time::timeout(cfg.shutdown_grace, executions.wait())
        .await
        .is_err()
    {
        tracing::warn!(worker = %cfg.worker_id, grace = ?cfg.shutdown_grace, "grace period over: giving back unfinished work");
        hard_stop.cancel();
        executions.wait().await;
    }
}

/// Deregisters the worker from every queue (see [`Queue::deregister`]): one that still holds
/// messages stays, for the reaper.
async fn deregister(sh: &Shared) {
    for q in &sh.cfg.queues {
        match sh.queue.deregister(q, &sh.cfg.worker_id).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(queue = %q, "worker still holds messages; the reaper will give them back")
            }
            Err(e) => tracing::warn!(queue = %q, error = %e, "could not deregister the worker"),
        }
    }
}
