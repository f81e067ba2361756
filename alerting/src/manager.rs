//! The alert manager: a background task that applies the [`Policy`] and fans alerts out to
//! the channels.
//!
//! The engine must never wait on alerting, so the intake is a bounded queue fed with
//! `try_send`: when it is full the alert is counted as dropped and logged, and the engine moves
//! on. The manager task owns the pure [`Policy`] and feeds it a monotonic clock (a wall-clock
//! anchor read once at spawn from the injected [`Clock`], plus tokio's elapsed time), so
//! wall-clock jumps do not reopen or stretch windows, the manager reads no wall clock of its
//! own, and tests can drive it with `tokio::time::pause()`. Delivery happens in one
//! worker per channel (see `dispatch`).
//!
//! Shutdown: cancelling the token stops the manager and the channel workers promptly,
//! abandoning alerts still queued or deferred (in-flight requests are aborted). Dropping
//! every [`AlertSender`] instead ends the manager gracefully: the pending summary (if any) is
//! sent at once and the workers finish their queues (with retries) before exiting.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ax_scheduler_core::{Clock, SystemClock, UtcMillis};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::alert::Alert;
use crate::channel::Channel;
use crate::dispatch::{ChannelWorker, DeliveryRetry};
use crate::error::AlertError;
use crate::policy::{plus, Decision, Policy, PolicyConfig};
use crate::stats::{bump, snapshot, AlertStats, ChannelCounters, Counters};

/// Settings of an [`AlertManager`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertManagerConfig {
    /// De-duplication, rate limit and minimum level (defaults: 5 min, 10 per minute, info).
    pub policy: PolicyConfig,
    /// Retries of a failed delivery, per channel (default 3 retries after about 1, 2, 4 s,
    /// jittered).
    pub retry: DeliveryRetry,
    /// Capacity of the intake queue; alerts beyond it are dropped. Default 1024.
    pub queue_capacity: usize,
    /// Capacity of each channel's delivery queue; alerts beyond it are dropped for that
    /// channel. Default 256.
    pub channel_queue_capacity: usize,
}

impl Default for AlertManagerConfig {
    fn default() -> Self {
        AlertManagerConfig {
            policy: PolicyConfig::default(),
            retry: DeliveryRetry::default(),
            queue_capacity: 1024,
            channel_queue_capacity: 256,
        }
    }
}

struct Shared {
    counters: Counters,
    channels: Vec<(String, Arc<ChannelCounters>)>,
    /// Set while the intake is overflowing, so a flood logs once rather than per alert.
    overflowing: AtomicBool,
}

/// A configured alert manager, ready to [`spawn`](AlertManager::spawn).
pub struct AlertManager {
    config: AlertManagerConfig,
    policy: Policy,
    channels: Vec<Arc<dyn Channel>>,
    /// The wall clock the manager's time is anchored to at spawn.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for AlertManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.channels.iter().map(|c| c.name()).collect();
        f.debug_struct("AlertManager")
            .field("config", &self.config)
            .field("channels", &names)
            .field("clock", &self.clock)
            .finish()
    }
}

impl AlertManager {
    /// Validates the configuration; channel names must be unique. The manager runs on the
    /// host's clock ([`SystemClock`]) unless given another with [`with_clock`](Self::with_clock).
    pub fn new(
        config: AlertManagerConfig,
        channels: Vec<Arc<dyn Channel>>,
    ) -> Result<Self, AlertError> {
        let policy = Policy::new(config.policy.clone())?;
        if config.queue_capacity == 0 {
            return Err(AlertError::InvalidConfig {
                field: "queue_capacity",
                reason: "must be at least 1".into(),
            });
        }
        if config.channel_queue_capacity == 0 {
            return Err(AlertError::InvalidConfig {
                field: "channel_queue_capacity",
                reason: "must be at least 1".into(),
            });
        }
        let mut names = HashSet::new();
        for channel in &channels {
            if !names.insert(channel.name()) {
                return Err(AlertError::InvalidConfig {
                    field: "channels",
                    reason: format!("two channels are named {:?}", channel.name()),
                });
            }
        }
        Ok(AlertManager {
            config,
            policy,
            channels,
            clock: Arc::new(SystemClock),
        })
    }

    /// Anchors the manager's time to `clock` (the one the rest of the process runs on).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Starts the manager and one worker per channel on `tracker`; they stop when `cancel`
    /// fires (or, gracefully, when every [`AlertSender`] is dropped).
    pub fn spawn(self, tracker: &TaskTracker, cancel: CancellationToken) -> AlertSender {
        let mut outputs = Vec::with_capacity(self.channels.len());
        let mut counters = Vec::with_capacity(self.channels.len());
        for channel in self.channels {
            let (tx, rx) = mpsc::channel(self.config.channel_queue_capacity);
            let channel_counters = Arc::new(ChannelCounters::default());
            counters.push((channel.name().to_owned(), channel_counters.clone()));
            outputs.push(Output {
                name: channel.name().to_owned(),
                queue: tx,
                counters: channel_counters.clone(),
            });
            let worker = ChannelWorker {
                channel,
                queue: rx,
                retry: self.config.retry.clone(),
                counters: channel_counters,
                cancel: cancel.clone(),
            };
            tracker.spawn(worker.run());
        }
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            channels: counters,
            overflowing: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel(self.config.queue_capacity);
        let driver = Driver {
            policy: self.policy,
            intake: rx,
            outputs,
            shared: shared.clone(),
            clock: MonotonicClock::start(&*self.clock),
            cancel,
        };
        tracker.spawn(driver.run().instrument(info_span!("alert_manager")));
        AlertSender { tx, shared }
    }
}

/// The engine's handle: raises alerts without ever waiting, and reads the counters.
#[derive(Clone)]
pub struct AlertSender {
    tx: mpsc::Sender<Alert>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AlertSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertSender").finish_non_exhaustive()
    }
}

impl AlertSender {
    /// Queues `alert` for the manager; never blocks. Returns `false` (and counts the alert as
    /// dropped) when the intake queue is full or the manager has stopped.
    pub fn send(&self, alert: Alert) -> bool {
        match self.tx.try_send(alert.redacted()) {
            Ok(()) => {
                if self.shared.overflowing.swap(false, Ordering::Relaxed) {
                    info!("alert intake accepting again");
                }
                true
            }
            Err(mpsc::error::TrySendError::Full(alert)) => {
                bump(&self.shared.counters.dropped);
                if !self.shared.overflowing.swap(true, Ordering::Relaxed) {
                    warn!(kind = alert.kind.as_str(), title = %alert.title, "alert intake full; dropping alerts until it drains");
                }
                false
            }
            Err(mpsc::error::TrySendError::Closed(alert)) => {
                bump(&self.shared.counters.dropped);
                debug!(kind = alert.kind.as_str(), title = %alert.title, "alert manager stopped; alert dropped");
                false
            }
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AlertStats {
        snapshot(&self.shared.counters, &self.shared.channels)
    }
}

/// Maps tokio's monotonic clock onto UTC milliseconds, anchored once at start to the wall
/// clock given.
struct MonotonicClock {
    start: Instant,
    start_utc: UtcMillis,
}

impl MonotonicClock {
    fn start(clock: &dyn Clock) -> Self {
        MonotonicClock {
            start: Instant::now(),
            start_utc: clock.now(),
        }
    }

    fn now(&self) -> UtcMillis {
        plus(self.start_utc, self.start.elapsed())
    }

    fn instant_at(&self, at: UtcMillis) -> Instant {
        self.start + at.since(self.start_utc)
    }
}

struct Output {
    name: String,
    queue: mpsc::Sender<Arc<Alert>>,
    counters: Arc<ChannelCounters>,
}

struct Driver {
    policy: Policy,
    intake: mpsc::Receiver<Alert>,
    outputs: Vec<Output>,
    shared: Arc<Shared>,
    clock: MonotonicClock,
    cancel: CancellationToken,
}

impl Driver {
    async fn run(mut self) {
        loop {
            let deadline = self
                .policy
                .next_deadline()
                .map(|at| self.clock.instant_at(at));
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => {
                    let deferred = self.policy.deferred();
                    if deferred > 0 {
                        warn!(deferred, "alert manager cancelled with alerts deferred");
                    }
                    break;
                }
                _ = sleep_until_opt(deadline) => {
                    if let Some(summary) = self.policy.flush(self.clock.now()) {
                        self.dispatch(summary);
                    }
                }
                next = self.intake.recv() => match next {
                    Some(alert) => self.offer(alert),
                    None => {
                        if let Some(summary) = self.policy.flush_now(self.clock.now()) {
                            self.dispatch(summary);
                        }
                        debug!("all alert senders dropped; alert manager finished");
                        break;
                    }
                },
            }
        }
    }

    fn offer(&mut self, alert: Alert) {
        let counters = &self.shared.counters;
        bump(&counters.received);
        let (kind, title) = (alert.kind, alert.title.clone());
        match self.policy.offer(alert, self.clock.now()) {
            Decision::Send(alert) => self.dispatch(alert),
            Decision::Duplicate => {
                bump(&counters.deduplicated);
                debug!(kind = kind.as_str(), %title, "duplicate alert suppressed");
            }
            Decision::Deferred => {
                bump(&counters.rate_limited);
                debug!(kind = kind.as_str(), %title, "alert deferred by the rate limit");
            }
            Decision::Filtered => {
                bump(&counters.filtered);
            }
        }
    }

    fn dispatch(&self, alert: Alert) {
        if alert.kind == crate::alert::AlertKind::DeferredSummary {
            bump(&self.shared.counters.summaries);
        }
        let alert = Arc::new(alert);
        for output in &self.outputs {
            match output.queue.try_send(alert.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    bump(&self.shared.counters.dropped);
                    bump(&output.counters.dropped);
                    warn!(channel = %output.name, title = %alert.title, "alert channel queue full; alert dropped for this channel");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    bump(&self.shared.counters.dropped);
                    bump(&output.counters.dropped);
                    debug!(channel = %output.name, "alert channel stopped; alert dropped");
                }
            }
        }
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
