//! The worker pool: takes messages from its queues and runs them with bounded concurrency.
//!
//! One fetch loop per queue (each with its own blocking connection) takes messages only when
//! a place is free, and takes as many as there are free places in one round trip. There are
//! `concurrency + prefetch` places: the prefetched messages wait, in order, for a running
//! slot, so a slot that frees starts the next message at once instead of after a round trip
//! to Redis (without them every execution paid a take's round trip on top of its handler, and
//! a pool of N ran at most N messages per round trip). The take itself never blocks: a fetch
//! loop whose last take found nothing waits for a wake (`Consumer::wait_for_work`) before it
//! reserves places, so the fetch loops of idle queues (a partitioned queue's quiet
//! partitions) hold none of the places the busy ones need, and the busy ones share the
//! places in the semaphore's first-come order.
//!
//! Each message runs in its own task; the handler itself runs in a further spawned task
//! so a panic surfaces as a `JoinError` (recorded with its message) instead of unwinding
//! through the pool, and so a timeout can abort it. Settling (ack, retry, dead letter,
//! release) is retried through short Redis outages, because an unsettled message of a live
//! worker would sit in its processing list until that worker stops.
//!
//! Stopping one execution (an operator's kill, or overlap `replace`): every execution this
//! pool holds, running or waiting for a slot, is registered with a `watch` channel; one loop
//! asks Redis every [`STOP_POLL_INTERVAL`] about all of them in one round trip
//! ([`Queue::stop_orders`]) and signals the ones to stop, so the cost does not grow with a
//! round trip per execution. Messages just taken are asked about before they start, so a
//! killed message that comes back (a dead worker's, given back by the reaper) never runs.
//! A stopped execution ends `killed`: acknowledged, no retry, not a failure. However an
//! attempt is stopped (timeout, kill, shutdown), its handler's token is cancelled and the
//! handler gets its [`crate::Handler::stop_grace`] to end by itself (the `command` handler
//! stops a process group) before its future is dropped.
//!
//! Shutdown (the `CancellationToken` passed to [`WorkerPool::run`]): the fetch loops stop
//! taking (a blocked take ends within the block timeout; anything it returns after the
//! cancel is given straight back), in-flight attempts get up to `shutdown_grace` to finish,
//! the rest are stopped and their messages released to the front of the queue; then the
//! heartbeat stops and the worker deregisters.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_queue::{
    Delivery, Maintenance, MaintenanceConfig, Parked, Queue, QueueError, ReportedEnd,
    ReportedStatus, RetrySettle, StopOrder, StopProbe,
};
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, ReconnectBackoff, UtcMillis};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::egress::{EgressClient, EgressPolicy};
use crate::error::{Result, WorkerError};
use crate::handler::{HandlerContext, HandlerError, HandlerRegistry};
use crate::reporter::{ExecutionReport, ExecutionReporter};
use crate::retry::{decide, RetryDecision};

/// Settings of a worker pool.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Unique id of this worker (names its processing lists and heartbeat). Default
    /// `worker-` and a random suffix; give each process its own.
    pub worker_id: String,
    /// Queues to serve. Default `["default"]`.
    pub queues: Vec<String>,
    /// Attempts running at once. Default [`DEFAULT_CONCURRENCY`].
    pub concurrency: usize,
    /// Most messages taken in one round trip. Default 64.
    pub fetch_batch: usize,
    /// Messages taken ahead of a free slot, waiting in this pool. They count as this worker's
    /// (they go back to the queue on shutdown, or to another worker if this one dies), so
    /// keep it small when handlers are long and another replica may be idle. Default
    /// [`DEFAULT_PREFETCH`].
    pub prefetch: usize,
    /// How long in-flight attempts may run on after shutdown starts. Default
    /// [`DEFAULT_SHUTDOWN_GRACE`].
    pub shutdown_grace: Duration,
    /// Heartbeat period. Default 1 s.
    pub heartbeat_interval: Duration,
    /// Lifetime of a heartbeat key. Default 5 s.
    pub heartbeat_ttl: Duration,
    /// How long a silent worker's messages stay with it before the reaper gives them back.
    /// Default [`ax_queue::DEFAULT_VISIBILITY_TIMEOUT`].
    pub visibility_timeout: Duration,
    /// Longest blocking wait for a message (also bounds how long stopping takes). Default 1 s.
    pub block_timeout: Duration,
    /// Period of promoting due retries and reaping dead workers. Default 250 ms.
    pub maintenance_interval: Duration,
    /// Record every attempt in the task's history list. Default true.
    pub record_history: bool,
    /// How long settling an attempt is retried through Redis errors. Default 30 s.
    pub settle_retry_for: Duration,
    /// How often the processing lists are checked against what the pool really holds.
    /// Default 10 s.
    pub reconcile_interval: Duration,
    /// Address blocks the `http` handler may call besides public addresses (see
    /// [`crate::egress`]). Default none.
    pub http_allow_cidrs: Vec<crate::egress::IpNet>,
    /// Host names the `http` handler may call whatever they resolve to. Default none.
    pub http_allow_hosts: Vec<crate::egress::HostPattern>,
    /// The public base URL of ax's API (`https://ax.example.com`), under which the jobs of
    /// `http.async` tasks report their end. Default none: such tasks fail, saying so.
    pub completion_public_url: Option<String>,
}

/// Attempts a pool runs at once by default. Handlers are async I/O (an HTTP call waits on the
/// network, not on a core), so the bound is what the targets and memory take, not the cores:
/// twice the cores ran at most 40 calls a second against a 100 ms endpoint on two cores. A
/// running attempt holds its message (a payload is at most 32 KiB) and the handler's future;
/// the `http` handler does not read response bodies. Lower it for CPU-bound handlers.
pub const DEFAULT_CONCURRENCY: usize = 64;

/// Messages a pool takes ahead of a free slot, by default.
pub const DEFAULT_PREFETCH: usize = 16;

/// How long in-flight attempts may run on after shutdown starts, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

impl Default for WorkerConfig {
    fn default() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        WorkerConfig {
            worker_id: format!("worker-{}", &id[..12]),
            queues: vec![ax_scheduler_core::task::DEFAULT_QUEUE.to_string()],
            concurrency: DEFAULT_CONCURRENCY,
            fetch_batch: 64,
            prefetch: DEFAULT_PREFETCH,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_ttl: Duration::from_secs(5),
            visibility_timeout: ax_queue::DEFAULT_VISIBILITY_TIMEOUT,
            block_timeout: Duration::from_secs(1),
            maintenance_interval: Duration::from_millis(250),
            record_history: true,
            settle_retry_for: Duration::from_secs(30),
            reconcile_interval: Duration::from_secs(10),
            http_allow_cidrs: Vec::new(),
            http_allow_hosts: Vec::new(),
            completion_public_url: None,
        }
    }
}

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

/// An ack waiting for the batcher; the execution learns whether the message was still held.
type AckRequest = (Delivery, tokio::sync::oneshot::Sender<Option<bool>>);

/// Most acks settled in one script call.
const ACK_BATCH: usize = 256;

struct Shared {
    queue: Queue,
    cfg: WorkerConfig,
    registry: HandlerRegistry,
    reporter: Arc<dyn ExecutionReporter>,
    http: EgressClient,
    counters: Counters,
    /// The attempts this pool runs now, by (execution id, attempt): what its processing
    /// lists should hold.
    held: std::sync::Mutex<HashSet<(u128, u32)>>,
    /// The same attempts with what the stop loop asks about and how it tells them to stop.
    watched: std::sync::Mutex<HashMap<(u128, u32), Watched>>,
}

/// One held attempt as the stop loop sees it.
struct Watched {
    probe: StopProbe,
    stop: tokio::sync::watch::Sender<Option<StopOrder>>,
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
                held: std::sync::Mutex::new(HashSet::new()),
                watched: std::sync::Mutex::new(HashMap::new()),
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
        let slots = Slots {
            places: Arc::new(Semaphore::new(sh.cfg.concurrency + sh.cfg.prefetch)),
            running: Arc::new(Semaphore::new(sh.cfg.concurrency)),
        };
        let executions = TaskTracker::new();
        let hard_stop = CancellationToken::new();
        let background_stop = CancellationToken::new();
        let background = TaskTracker::new();

        heartbeat_once(sh, ax_scheduler_core::UtcMillis::now(), false).await;
        background.spawn(heartbeat_loop(
            self.shared.clone(),
            cancel.clone(),
            background_stop.clone(),
        ));
        let maintenance = Maintenance::new(
            sh.queue.clone(),
            MaintenanceConfig {
                queues: sh.cfg.queues.clone(),
                interval: sh.cfg.maintenance_interval,
                visibility_timeout: sh.cfg.visibility_timeout,
                ..MaintenanceConfig::default()
            },
        );
        background.spawn(maintenance.run(background_stop.clone()));
        background.spawn(reconcile_loop(self.shared.clone(), background_stop.clone()));
        background.spawn(stop_loop(self.shared.clone(), background_stop.clone()));
        background.spawn(deadline_loop(self.shared.clone(), background_stop.clone()));

        // Acks go through one batching task: under load, one script call settles many
        // messages. It ends when the last sender (held by fetchers and executions) is gone.
        let (ack_tx, ack_rx) = tokio::sync::mpsc::unbounded_channel::<AckRequest>();
        let acker = tokio::spawn(ack_loop(self.shared.clone(), ack_rx));

        let fetchers = TaskTracker::new();
        for q in &sh.cfg.queues {
            fetchers.spawn(fetch_loop(
                self.shared.clone(),
                q.clone(),
                slots.clone(),
                executions.clone(),
                cancel.clone(),
                hard_stop.clone(),
                ack_tx.clone(),
            ));
        }
        drop(ack_tx);
        fetchers.close();
        cancel.cancelled().await;
        tracing::info!(worker = %sh.cfg.worker_id, "worker pool stopping: no new messages");
        fetchers.wait().await;
        executions.close();
        if tokio::time::timeout(sh.cfg.shutdown_grace, executions.wait())
            .await
            .is_err()
        {
            tracing::warn!(worker = %sh.cfg.worker_id, grace = ?sh.cfg.shutdown_grace, "grace period over: giving back unfinished work");
            hard_stop.cancel();
            executions.wait().await;
        }
        if let Err(e) = acker.await {
            tracing::error!(error = %e, "ack task failed");
        }
        background_stop.cancel();
        background.close();
        background.wait().await;
        for q in &sh.cfg.queues {
            match sh.queue.deregister(q, &sh.cfg.worker_id).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(queue = %q, "worker still holds messages; the reaper will give them back")
                }
                Err(e) => tracing::warn!(queue = %q, error = %e, "could not deregister the worker"),
            }
        }
        let c = &sh.counters;
        PoolSummary {
            taken: c.taken.load(Ordering::Relaxed),
            succeeded: c.succeeded.load(Ordering::Relaxed),
            retried: c.retried.load(Ordering::Relaxed),
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
            released: c.released.load(Ordering::Relaxed),
        }
    }
}

/// One heartbeat on every queue; `stopping` once the pool takes nothing new (see
/// [`ax_queue::Queue::heartbeat_stopping`]: no broadcast fire is addressed to it then).
async fn heartbeat_once(sh: &Shared, now: UtcMillis, stopping: bool) {
    for q in &sh.cfg.queues {
        let (id, ttl) = (&sh.cfg.worker_id, sh.cfg.heartbeat_ttl);
        let beat = if stopping {
            sh.queue.heartbeat_stopping(q, id, ttl, now).await
        } else {
            sh.queue.heartbeat(q, id, ttl, now).await
        };
        if let Err(e) = beat {
            tracing::warn!(queue = %q, error = %e, "heartbeat failed");
        }
    }
}

/// Beats until `stop`; from `cancel` on (the pool takes nothing new) as a stopping worker,
/// at once and then at every interval.
async fn heartbeat_loop(sh: Arc<Shared>, cancel: CancellationToken, stop: CancellationToken) {
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = cancel.cancelled(), if !stopping => stopping = true,
            _ = tokio::time::sleep(sh.cfg.heartbeat_interval) => {}
        }
        heartbeat_once(&sh, ax_scheduler_core::UtcMillis::now(), stopping).await;
    }
}

/// Waits between failed Redis calls of the fetch and settle loops.
fn error_backoff() -> ReconnectBackoff {
    ReconnectBackoff::new(Duration::from_millis(100), Duration::from_secs(5))
}

/// The pool's two bounds: places for messages taken (running or waiting) and running slots.
#[derive(Clone)]
struct Slots {
    places: Arc<Semaphore>,
    running: Arc<Semaphore>,
}

async fn fetch_loop(
    sh: Arc<Shared>,
    queue_name: String,
    slots: Slots,
    executions: TaskTracker,
    cancel: CancellationToken,
    hard_stop: CancellationToken,
    acks: tokio::sync::mpsc::UnboundedSender<AckRequest>,
) {
    let mut backoff = error_backoff();
    let mut consumer = None;
    // The last take found nothing: wait for work before reserving places, so a fetcher of
    // an idle queue (or partition) holds none of the places the busy ones need.
    let mut idle = false;
    while !cancel.is_cancelled() {
        let c = match &mut consumer {
            Some(c) => c,
            None => match sh
                .queue
                .consumer(
                    &queue_name,
                    &sh.cfg.worker_id,
                    sh.cfg.block_timeout,
                    ax_scheduler_core::UtcMillis::now(),
                )
                .await
            {
                Ok(c) => consumer.insert(c),
                Err(e) => {
                    tracing::warn!(queue = %queue_name, error = %e, "cannot open a consumer; retrying");
                    let wait = backoff.next_delay(&mut rand::rng());
                    pause(&cancel, wait).await;
                    continue;
                }
            },
        };
        if idle {
            let waited = tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                w = c.wait_for_work() => w,
            };
            if let Err(e) = waited {
                tracing::warn!(queue = %queue_name, error = %e, retryable = e.is_retryable(), "waiting for messages failed");
                let wait = backoff.next_delay(&mut rand::rng());
                pause(&cancel, wait).await;
                continue;
            }
        }
        let first = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            p = slots.places.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let mut permits = vec![first];
        while permits.len() < sh.cfg.fetch_batch {
            match slots.places.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        match c.take_ready(permits.len()).await {
            Ok(deliveries) => {
                backoff.reset();
                idle = deliveries.is_empty();
                sh.counters
                    .taken
                    .fetch_add(deliveries.len() as u64, Ordering::Relaxed);
                let orders = stop_orders_of(&sh, &deliveries).await;
                for (d, order) in deliveries.into_iter().zip(orders) {
                    // One permit per delivery: take never returns more than asked.
                    let Some(permit) = permits.pop() else { break };
                    if cancel.is_cancelled() {
                        give_back(&sh, &d).await;
                        continue;
                    }
                    hold(&sh, &d, true);
                    let stop = watch(&sh, &d, order);
                    executions.spawn(execute(
                        sh.clone(),
                        d,
                        stop,
                        (permit, slots.running.clone()),
                        cancel.clone(),
                        hard_stop.clone(),
                        acks.clone(),
                    ));
                }
            }
            Err(e) => {
                tracing::warn!(queue = %queue_name, error = %e, retryable = e.is_retryable(), "taking messages failed");
                drop(permits);
                let wait = backoff.next_delay(&mut rand::rng());
                pause(&cancel, wait).await;
            }
        }
    }
}

async fn pause(cancel: &CancellationToken, d: Duration) {
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::time::sleep(d) => {}
    }
}

async fn give_back(sh: &Shared, d: &Delivery) {
    let q = &sh.queue;
    if settle(sh, "release", || q.release(d)).await == Some(true) {
        sh.counters.released.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs a settling operation, retrying retryable errors for up to `settle_retry_for`.
/// `None` when it could not be done (logged).
async fn settle<T, F, Fut>(sh: &Shared, op: &'static str, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, QueueError>>,
{
    let start = tokio::time::Instant::now();
    let mut backoff = error_backoff();
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) if e.is_retryable() && start.elapsed() < sh.cfg.settle_retry_for => {
                tracing::warn!(op, error = %e, "settling failed; retrying");
                let wait = backoff.next_delay(&mut rand::rng());
                tokio::time::sleep(wait).await;
            }
            Err(e) => {
                tracing::error!(op, error = %e, "settling failed; the message stays with this worker until it stops");
                return None;
            }
        }
    }
}

/// How often the pool asks whether any execution it holds must stop (killed, or replaced
/// under overlap `replace`): a kill takes effect within it plus a round trip.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Registers a held attempt with the stop loop; `order` is what was known when it was taken.
fn watch(
    sh: &Shared,
    d: &Delivery,
    order: Option<StopOrder>,
) -> tokio::sync::watch::Receiver<Option<StopOrder>> {
    let (stop, rx) = tokio::sync::watch::channel(order);
    let key = (d.message.execution_id.as_u128(), d.message.attempt);
    let watched = Watched {
        probe: StopProbe::of(&d.message),
        stop,
    };
    sh.watched
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key, watched);
    rx
}

fn unwatch(sh: &Shared, d: &Delivery) {
    let key = (d.message.execution_id.as_u128(), d.message.attempt);
    sh.watched
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&key);
}

/// The kill orders of messages just taken, so a killed one does not start. Only kills: a
/// `replace` execution starts and is stopped by the loop when its marker moved, as before.
/// On a Redis error nothing is known; the stop loop asks again within its interval.
async fn stop_orders_of(sh: &Shared, deliveries: &[Delivery]) -> Vec<Option<StopOrder>> {
    let probes: Vec<StopProbe> = deliveries
        .iter()
        .map(|d| StopProbe {
            overlap: ax_scheduler_core::OverlapPolicy::Allow,
            ..StopProbe::of(&d.message)
        })
        .collect();
    match sh.queue.stop_orders(&probes).await {
        Ok(orders) => orders,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read kill orders of a take; the stop loop will");
            vec![None; deliveries.len()]
        }
    }
}

/// Asks Redis, for every attempt the pool holds, whether it must stop, and tells those that
/// must. A Redis error stops nothing: it is asked again next round.
async fn stop_loop(sh: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(STOP_POLL_INTERVAL) => {}
        }
        let (keys, probes): (Vec<(u128, u32)>, Vec<StopProbe>) = {
            let watched = sh
                .watched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            watched
                .iter()
                .filter(|(_, w)| w.stop.borrow().is_none())
                .map(|(k, w)| (*k, w.probe.clone()))
                .unzip()
        };
        if probes.is_empty() {
            continue;
        }
        let orders = match sh.queue.stop_orders(&probes).await {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(error = %e, "cannot read stop orders; asking again next round");
                continue;
            }
        };
        let watched = sh
            .watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (key, order) in keys.iter().zip(orders) {
            if let (Some(order), Some(w)) = (order, watched.get(key)) {
                w.stop.send_replace(Some(order));
            }
        }
    }
}

/// Ends the attempts of this pool's queues that waited for a completion past their
/// deadline (see [`crate::awaiting::expire_due`]), reporting each as the pool reports its
/// own ends. Every pool runs it; each attempt is ended by one of them.
async fn deadline_loop(sh: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(sh.cfg.maintenance_interval) => {}
        }
        for q in &sh.cfg.queues {
            match crate::awaiting::expire_due(&sh.queue, q, UtcMillis::now()).await {
                Ok(reports) => {
                    for report in reports {
                        tracing::warn!(
                            execution_id = %report.execution_id,
                            attempt = report.attempt,
                            "no completion by the deadline"
                        );
                        publish(&sh, &report).await;
                    }
                }
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "cannot end expired waiting attempts")
                }
            }
            end_orphans(&sh, q).await;
        }
    }
}

/// Orphans one round of [`end_orphans`] ends per queue.
const ORPHAN_BATCH: usize = 100;

/// Ends the messages of `queue` addressed to a worker that is gone (a broadcast fire's
/// shards, see [`ax_queue::Queue::take_orphans`]): none may run on another worker, which
/// runs its own copy, so each fails for good, as an attempt of the worker it was addressed
/// to (dead letter, history, the leader's event), and its fire can end.
async fn end_orphans(sh: &Shared, queue: &str) {
    let orphans = match sh
        .queue
        .take_orphans(queue, &sh.cfg.worker_id, ORPHAN_BATCH)
        .await
    {
        Ok(orphans) => orphans,
        Err(e) => {
            tracing::debug!(queue, error = %e, "cannot take the orphans of gone workers");
            return;
        }
    };
    for d in orphans {
        let msg = &d.message;
        let worker = msg.lineage.target_worker.clone().unwrap_or_default();
        let reason =
            format!("worker {worker} is gone: a broadcast execution runs only on its worker");
        let now = UtcMillis::now();
        tracing::warn!(execution_id = %msg.execution_id, attempt = msg.attempt, %worker, "{reason}");
        sh.reporter.on_started(msg, &worker, now).await;
        let q = &sh.queue;
        if settle(sh, "dead_letter", || q.dead_letter(&d, &reason, now)).await == Some(true) {
            sh.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
        }
        let end = AttemptEnd {
            outcome: AttemptOutcome::Failed,
            error: Some(reason),
            retry_at: None,
        };
        let report = ExecutionReport::of(msg, &d.queue, worker, now, now, end);
        publish(sh, &report).await;
    }
}

/// Resolves with the order once the attempt is told to stop; never when its pool forgets it.
async fn stopped(rx: &mut tokio::sync::watch::Receiver<Option<StopOrder>>) -> StopOrder {
    let order = rx.wait_for(Option::is_some).await.map(|o| *o);
    match order {
        Ok(order) => order.unwrap_or(StopOrder::Killed),
        Err(_) => std::future::pending().await,
    }
}

fn panic_message(e: JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => {
            if let Some(s) = p.downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = p.downcast_ref::<String>() {
                s.clone()
            } else {
                "panic with a non-string payload".to_string()
            }
        }
        Err(e) => format!("handler task ended abnormally: {e}"),
    }
}

async fn ack_loop(sh: Arc<Shared>, mut rx: tokio::sync::mpsc::UnboundedReceiver<AckRequest>) {
    let mut batch = Vec::with_capacity(ACK_BATCH);
    while rx.recv_many(&mut batch, ACK_BATCH).await > 0 {
        let (deliveries, replies): (Vec<Delivery>, Vec<_>) = batch.drain(..).unzip();
        let q = &sh.queue;
        let held = settle(&sh, "ack", || q.ack_many(&deliveries)).await;
        for (i, reply) in replies.into_iter().enumerate() {
            let _ = reply.send(held.as_ref().map(|h| h.get(i).copied().unwrap_or(false)));
        }
    }
}

/// Hands an ack to the batcher and waits for it; `None` when it could not be settled.
async fn ack(acks: &tokio::sync::mpsc::UnboundedSender<AckRequest>, d: &Delivery) -> Option<bool> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    acks.send((d.clone(), tx)).ok()?;
    rx.await.ok().flatten()
}

/// Waits for a running slot (a prefetched message), then runs the delivery. A message still
/// waiting when the pool stops has not started: it goes back to the queue at once.
async fn execute(
    sh: Arc<Shared>,
    d: Delivery,
    mut stop: tokio::sync::watch::Receiver<Option<StopOrder>>,
    (place, running): (OwnedSemaphorePermit, Arc<Semaphore>),
    cancel: CancellationToken,
    hard_stop: CancellationToken,
    acks: tokio::sync::mpsc::UnboundedSender<AckRequest>,
) {
    // A message killed while it waits for a slot ends at once, without one.
    let slot = tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        _ = stopped(&mut stop) => Some(None),
        slot = running.acquire_owned() => slot.ok().map(Some),
    };
    let Some(slot) = slot else {
        give_back(&sh, &d).await;
        unwatch(&sh, &d);
        hold(&sh, &d, false);
        return;
    };
    let m = &d.message;
    let span = tracing::info_span!(
        "execution",
        task_id = %m.task_id,
        namespace = %m.namespace,
        execution_id = %m.execution_id,
        fire_at = %m.fire_at,
        attempt = m.attempt,
        lateness_ms = tracing::field::Empty,
    );
    execute_in_span(&sh, &d, &hard_stop, &acks, slot, stop)
        .instrument(span)
        .await;
    unwatch(&sh, &d);
    hold(&sh, &d, false);
    drop(place);
}

/// Marks a delivery as held by this pool (or no longer).
fn hold(sh: &Shared, d: &Delivery, held: bool) {
    let key = (d.message.execution_id.as_u128(), d.message.attempt);
    // A poisoned lock only means a panic elsewhere while holding it; the set stays usable.
    let mut set = sh
        .held
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if held {
        set.insert(key);
    } else {
        set.remove(&key);
    }
}

/// Gives back what the processing lists hold and the pool does not: messages a failed reply
/// left there (a take whose answer was lost after Redis moved them), which would
/// otherwise stay until the process stops. An entry must be found unknown on two rounds in a
/// row, so a take whose reply is on its way is never mistaken for one.
async fn reconcile_loop(sh: Arc<Shared>, stop: CancellationToken) {
    let mut suspects: HashMap<String, HashSet<String>> = HashMap::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(sh.cfg.reconcile_interval) => {}
        }
        for q in &sh.cfg.queues {
            let entries = match sh.queue.processing_entries(q, &sh.cfg.worker_id).await {
                Ok(e) => e,
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "cannot read the processing list");
                    continue;
                }
            };
            let unknown: HashSet<String> = {
                let held = sh
                    .held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                entries
                    .into_iter()
                    .filter(|raw| match ax_queue::ExecutionMessage::from_json(raw) {
                        Ok(m) => !held.contains(&(m.execution_id.as_u128(), m.attempt)),
                        Err(_) => true,
                    })
                    .collect()
            };
            let before = suspects.remove(q).unwrap_or_default();
            let (stuck, fresh): (HashSet<String>, HashSet<String>) =
                unknown.into_iter().partition(|raw| before.contains(raw));
            for raw in stuck {
                release_stuck(&sh, q, raw).await;
            }
            suspects.insert(q.clone(), fresh);
        }
    }
}

async fn release_stuck(sh: &Shared, queue: &str, raw: String) {
    let worker = &sh.cfg.worker_id;
    let result = match ax_queue::ExecutionMessage::from_json(&raw) {
        Ok(message) => {
            let d = Delivery {
                queue: queue.to_owned(),
                worker_id: worker.clone(),
                raw,
                message,
                limited_wait: None,
            };
            sh.queue.release(&d).await
        }
        Err(e) => {
            sh.queue
                .dead_letter_undecodable(queue, worker, &raw, &e.to_string(), UtcMillis::now())
                .await
        }
    };
    match result {
        Ok(true) => tracing::warn!(
            queue,
            "gave back a message this worker held without knowing it (a lost reply)"
        ),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(queue, error = %e, "cannot give back a stuck message; trying again next round")
        }
    }
}

/// Runs one delivery. The concurrency permit bounds running handlers: it is given back as
/// soon as the handler is done, so settling (a Redis round trip, batched with others) does
/// not keep the next message waiting.
async fn execute_in_span(
    sh: &Shared,
    d: &Delivery,
    hard_stop: &CancellationToken,
    acks: &tokio::sync::mpsc::UnboundedSender<AckRequest>,
    permit: Option<OwnedSemaphorePermit>,
    mut stop: tokio::sync::watch::Receiver<Option<StopOrder>>,
) {
    let msg = &d.message;
    let worker = sh.cfg.worker_id.as_str();
    let started = ax_scheduler_core::UtcMillis::now();
    let lateness_ms = started.0 - msg.fire_at.0;
    tracing::Span::current().record("lateness_ms", lateness_ms);
    if let Some(wait) = d.limited_wait {
        sh.reporter.on_concurrency_wait(&d.queue, wait);
    }
    sh.reporter.on_started(msg, worker, started).await;

    let ordered = *stop.borrow();
    if let Some(order) = ordered {
        tracing::warn!(reason = order.reason(), "stopped before it started");
        drop(permit);
        ack(acks, d).await;
        let end = AttemptEnd::new(AttemptOutcome::Killed, Some(order.reason().to_owned()));
        finish(sh, d, started, end, None).await;
        return;
    }

    let Some(handler) = sh.registry.get(&msg.handler) else {
        let reason = format!(
            "unknown handler `{}`; this worker serves: [{}]",
            msg.handler,
            sh.registry.names().join(", ")
        );
        tracing::error!(%reason, "dead-lettering execution");
        let q = &sh.queue;
        let now = ax_scheduler_core::UtcMillis::now();
        if settle(sh, "dead_letter", || q.dead_letter(d, &reason, now)).await == Some(true) {
            sh.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
        }
        finish(
            sh,
            d,
            started,
            AttemptEnd::new(AttemptOutcome::DeadLettered, Some(reason)),
            None,
        )
        .await;
        return;
    };

    // An `http.async` attempt is opened before its request goes out (see `crate::awaiting`);
    // a completion that came before a crash ends it without sending the request again.
    let (completion, before) = open_completion(sh, d, started).await;
    let ctx_cancel = hard_stop.child_token();
    let output = crate::handler::OutputSlot::default();
    let (mut outcome, mut error, mut retryable) = match before {
        Some(ended) => reported_outcome(&ended, &output),
        None => {
            let ctx = HandlerContext {
                worker_id: worker.to_string(),
                cancel: ctx_cancel.clone(),
                http: sh.http.clone(),
                output: output.clone(),
                completion: completion.clone(),
            };
            let owned = msg.clone();
            let stop_grace = handler.stop_grace(msg);
            let mut handle = tokio::spawn(async move { handler.run(ctx, &owned).await });
            // How the attempt ended, its error, and whether that error may be retried.
            let ended = tokio::select! {
                r = tokio::time::timeout(msg.timeout(), &mut handle) => match r {
                    Ok(Ok(Ok(()))) => (AttemptOutcome::Succeeded, None, false),
                    Ok(Ok(Err(HandlerError::Retryable(e)))) => (AttemptOutcome::Failed, Some(e), true),
                    Ok(Ok(Err(HandlerError::Permanent(e)))) => (AttemptOutcome::Failed, Some(e), false),
                    Ok(Err(e)) => {
                        let message = panic_message(e);
                        tracing::error!(panic = %message, "handler panicked");
                        (AttemptOutcome::Panicked, Some(format!("handler panicked: {message}")), true)
                    }
                    Err(_) => (
                        AttemptOutcome::TimedOut,
                        Some(format!("timed out after {:?}", msg.timeout())),
                        true,
                    ),
                },
                _ = hard_stop.cancelled() => (AttemptOutcome::Released, None, false),
                order = stopped(&mut stop) => (
                    AttemptOutcome::Killed,
                    Some(order.reason().to_owned()),
                    false,
                ),
            };
            if matches!(
                ended.0,
                AttemptOutcome::TimedOut | AttemptOutcome::Released | AttemptOutcome::Killed
            ) {
                ctx_cancel.cancel();
                // A handler that stops something outside (a command's processes) gets its
                // grace to do it; the others are dropped at once.
                let stopped_in_grace = !stop_grace.is_zero()
                    && tokio::time::timeout(stop_grace, &mut handle).await.is_ok();
                if !stopped_in_grace {
                    handle.abort();
                    // Wait for the abort so the handler is gone before its message is
                    // settled; a handler that ignores cancellation and never yields cannot
                    // be waited for.
                    let _ = tokio::time::timeout(Duration::from_secs(1), handle).await;
                }
            }
            ended
        }
    };
    if let Some(c) = &completion {
        if outcome == AttemptOutcome::Succeeded && c.accepted() {
            match park(sh, d).await {
                Park::Parked => {
                    drop(permit);
                    sh.reporter.on_parked(msg, worker).await;
                    return;
                }
                Park::NotHeld => {
                    tracing::warn!(
                        "accepted, but the message was no longer held (the reaper gave it back)"
                    );
                    return;
                }
                Park::Early(ended) => {
                    (outcome, error, retryable) = reported_outcome(&ended, &output);
                }
                Park::Ended(o, e, r) => (outcome, error, retryable) = (o, e, r),
            }
        } else {
            let q = &sh.queue;
            settle(sh, "close_awaiting", || {
                q.close_awaiting(d, closed_label(outcome))
            })
            .await;
        }
    }
    drop(permit);
    // Errors can echo anything (a URL with its credentials, a response body): masked and
    // capped once here, before they go into the message, the dead letter, the history, the
    // events and the alerts.
    let error = error.map(ax_scheduler_core::execution::shown_error);
    let now = UtcMillis::now();
    let end = match outcome {
        AttemptOutcome::Succeeded => {
            if ack(acks, d).await == Some(false) {
                tracing::warn!("ack found the message gone (the reaper gave it back)");
            }
            sh.counters.succeeded.fetch_add(1, Ordering::Relaxed);
            AttemptEnd::succeeded()
        }
        AttemptOutcome::Released => {
            give_back(sh, d).await;
            AttemptEnd::new(outcome, None)
        }
        AttemptOutcome::Killed => {
            tracing::warn!(reason = error.as_deref().unwrap_or(""), "stopped");
            ack(acks, d).await;
            AttemptEnd::new(outcome, error)
        }
        _ => {
            let error = error.unwrap_or_else(|| "failed".to_owned());
            match fail(sh, d, &error, now, retryable).await {
                Failed::Killed => AttemptEnd::new(
                    AttemptOutcome::Killed,
                    Some(StopOrder::Killed.reason().to_owned()),
                ),
                Failed::RetryAt(retry_at) => AttemptEnd {
                    outcome,
                    error: Some(error),
                    retry_at,
                },
            }
        }
    };
    finish(sh, d, started, end, output.take()).await;
}

/// What a pool does before an attempt of an `http.async` task: opens it with a new token
/// and returns its completion contract, or the end the attempt has already (a completion
/// that came before a crash; or no public URL to offer, a permanent failure).
async fn open_completion(
    sh: &Shared,
    d: &Delivery,
    started: UtcMillis,
) -> (Option<crate::awaiting::Completion>, Option<ReportedEnd>) {
    let msg = &d.message;
    if !msg.http.as_ref().is_some_and(|h| h.await_completion) {
        return (None, None);
    }
    let Some(base) = &sh.cfg.completion_public_url else {
        return (
            None,
            Some(failure(
                "the task waits for a completion (http.async), but this replica has no \
                 public URL for the job to call back (set `http.public_url` in ax.toml)",
                false,
            )),
        );
    };
    let token = ax_queue::CompletionToken::issue(&d.queue, msg.attempt);
    let q = &sh.queue;
    match settle(sh, "open_awaiting", || q.open_awaiting(d, &token, started)).await {
        Some(ax_queue::Opened::Opened) => {
            let url = crate::awaiting::completion_url(base, msg.execution_id);
            (Some(crate::awaiting::Completion::new(url, token)), None)
        }
        Some(ax_queue::Opened::Early(ended)) => (None, Some(ended)),
        None => (
            None,
            Some(failure(
                "cannot record the attempt's completion token in Redis",
                true,
            )),
        ),
    }
}

fn failure(message: &str, retryable: bool) -> ReportedEnd {
    ReportedEnd {
        status: ReportedStatus::Failed,
        message: Some(message.to_owned()),
        output: None,
        retryable,
        at: UtcMillis::now(),
    }
}

/// A reported end as the pool's (outcome, error, retryable), its output kept as the
/// attempt's.
fn reported_outcome(
    ended: &ReportedEnd,
    output: &crate::handler::OutputSlot,
) -> (AttemptOutcome, Option<String>, bool) {
    if let Some(o) = &ended.output {
        output.set(o.clone());
    }
    match ended.status {
        ReportedStatus::Succeeded => (AttemptOutcome::Succeeded, None, false),
        ReportedStatus::Failed => (
            AttemptOutcome::Failed,
            Some(
                ended
                    .message
                    .clone()
                    .unwrap_or_else(|| "the job reported a failure".into()),
            ),
            ended.retryable,
        ),
    }
}

/// The end recorded for an opened attempt that ended at its worker.
fn closed_label(outcome: AttemptOutcome) -> &'static str {
    match outcome {
        // Succeeded without a 202: the receiver answered at once.
        AttemptOutcome::Succeeded => "answered",
        other => other.as_str(),
    }
}

/// How a park came out, as far as the pool goes on.
enum Park {
    /// Parked: the pool is done with the attempt.
    Parked,
    /// The message was gone: nothing to settle or report.
    NotHeld,
    /// The job's completion overtook its 202: the attempt ends here with it.
    Early(ReportedEnd),
    /// The attempt ends here after all, so.
    Ended(AttemptOutcome, Option<String>, bool),
}

/// Parks an accepted attempt until a full timeout from now.
async fn park(sh: &Shared, d: &Delivery) -> Park {
    let deadline = UtcMillis::now().add(d.message.timeout());
    let q = &sh.queue;
    match settle(sh, "park_awaiting", || q.park_awaiting(d, deadline)).await {
        Some(Parked::Parked) => Park::Parked,
        Some(Parked::NotHeld) => Park::NotHeld,
        Some(Parked::Early(ended)) => Park::Early(ended),
        Some(Parked::Killed) => Park::Ended(
            AttemptOutcome::Killed,
            Some(StopOrder::Killed.reason().to_owned()),
            false,
        ),
        Some(Parked::Gone) | None => Park::Ended(
            AttemptOutcome::Failed,
            Some("accepted, but the attempt could not be parked to wait for its completion".into()),
            true,
        ),
    }
}

/// How a failed attempt was settled.
enum Failed {
    /// A retry is due then, or none follows (dead-lettered).
    RetryAt(Option<UtcMillis>),
    /// An operator killed the execution before its retry was scheduled: none is.
    Killed,
}

/// Schedules a retry or dead-letters.
async fn fail(sh: &Shared, d: &Delivery, error: &str, now: UtcMillis, retryable: bool) -> Failed {
    let msg = &d.message;
    let decision = if retryable {
        decide(
            &msg.retry,
            msg.attempt,
            msg.first_attempt_at,
            now,
            &mut rand::rng(),
        )
    } else {
        RetryDecision::GiveUp {
            reason: "not retryable".into(),
        }
    };
    let q = &sh.queue;
    match decision {
        RetryDecision::RetryAt { due, wait } => {
            tracing::warn!(%error, retry_in = ?wait, "attempt failed; retry scheduled");
            let next = msg.next_attempt(error, now);
            if settle(sh, "retry_later", || q.retry_later(d, &next, due)).await
                == Some(RetrySettle::Killed)
            {
                tracing::warn!("killed by an operator; no retry");
                return Failed::Killed;
            }
            sh.counters.retried.fetch_add(1, Ordering::Relaxed);
            Failed::RetryAt(Some(due))
        }
        RetryDecision::GiveUp { reason } => {
            tracing::error!(%error, %reason, "attempt failed; dead-lettering");
            let full = format!("{error} ({reason})");
            if settle(sh, "dead_letter", || q.dead_letter(d, &full, now)).await == Some(true) {
                sh.counters.dead_lettered.fetch_add(1, Ordering::Relaxed);
            }
            Failed::RetryAt(None)
        }
    }
}

async fn finish(
    sh: &Shared,
    d: &Delivery,
    started: UtcMillis,
    end: AttemptEnd,
    output: Option<ax_scheduler_core::AttemptOutput>,
) {
    let msg = &d.message;
    let report = ExecutionReport {
        output,
        ..ExecutionReport::of(
            msg,
            &d.queue,
            sh.cfg.worker_id.clone(),
            started,
            UtcMillis::now(),
            end,
        )
    };
    publish(sh, &report).await;
}

/// Records an attempt's end in the history (if this pool writes it) and tells the reporter.
async fn publish(sh: &Shared, report: &ExecutionReport) {
    if sh.cfg.record_history {
        if let Err(e) = sh
            .queue
            .record_history(&report.namespace, &report.task_id, &report.history())
            .await
        {
            tracing::warn!(error = %e, "could not record execution history");
        }
    }
    sh.reporter.on_finished(report).await;
}
