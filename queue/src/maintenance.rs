//! The maintenance loop: promotes due retries, reaps dead workers' messages, relays the end
//! records a dead worker left in an end log (`ends.rs`) and keeps the dead-letter queues
//! within their retention.
//!
//! Every worker pool runs one for the queues it serves. Both jobs are single scripts, so any
//! number of these loops may run at once against the same queues without harm. The loop is an
//! explicit state machine advanced by [`Maintenance::step`], which reports how long to wait
//! before the next step: tests drive it step by step with chosen instants, and
//! [`Maintenance::run`] drives it with the clock until cancelled.

use std::time::Duration;

use ax_scheduler_core::{ReconnectBackoff, UtcMillis};
use tokio_util::sync::CancellationToken;

use crate::ends::END_RELAY_AFTER;
use crate::error::Result;
use crate::queue::Queue;

/// Settings of the maintenance loop.
#[derive(Clone, Debug)]
pub struct MaintenanceConfig {
    /// Queues to look after.
    pub queues: Vec<String>,
    /// Pause between rounds. Default 250 ms (the promotion delay of a due retry is at most
    /// this).
    pub interval: Duration,
    /// How long a worker must have been silent before its messages are given back.
    /// Default [`DEFAULT_VISIBILITY_TIMEOUT`].
    pub visibility_timeout: Duration,
    /// Delayed messages moved per script call. Default 500.
    pub promote_batch: usize,
    /// Longest wait after repeated Redis errors. Default 10 s.
    pub max_backoff: Duration,
    /// Who sweeps the end logs (one sweeper per queue at a time): the worker's id. Default
    /// a fresh random id.
    pub sweeper: String,
    /// How old an end record must be before the sweep relays it. Default
    /// [`END_RELAY_AFTER`].
    pub relay_after: Duration,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            queues: vec![ax_scheduler_core::task::DEFAULT_QUEUE.to_string()],
            interval: Duration::from_millis(250),
            visibility_timeout: DEFAULT_VISIBILITY_TIMEOUT,
            promote_batch: 500,
            max_backoff: Duration::from_secs(10),
            sweeper: uuid::Uuid::new_v4().to_string(),
            relay_after: END_RELAY_AFTER,
        }
    }
}

/// Where the loop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceState {
    /// Next: move due delayed messages to their queued sets.
    Promote,
    /// Next: give back messages taken by dead workers.
    Reap,
    /// A Redis call failed `failures` times in a row; the next step starts a new round.
    Backoff {
        /// Consecutive failed rounds.
        failures: u32,
    },
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepReport {
    /// Delayed messages moved to queued sets.
    pub promoted: usize,
    /// Messages given back from dead workers.
    pub reaped: usize,
    /// Dead-letter entries removed by the retention or the cap.
    pub dlq_trimmed: usize,
    /// End records relayed from the end logs.
    pub ends_relayed: usize,
    /// How long to wait before the next step.
    pub wait: Duration,
}

/// How long a worker must have been silent (heartbeat gone, last beat older than this) before
/// the reaper gives its messages to another worker. A live worker keeps its heartbeat, so a
/// long handler is never taken away; a dead one's work moves on within this time.
pub const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);

/// The maintenance loop of one set of queues.
#[derive(Debug)]
pub struct Maintenance {
    queue: Queue,
    cfg: MaintenanceConfig,
    state: MaintenanceState,
    backoff: ReconnectBackoff,
    /// When the dead-letter queues are trimmed next: retention is not worth a script call
    /// per queue every round.
    next_trim: UtcMillis,
    /// When the end logs are swept next.
    next_sweep: UtcMillis,
}

/// How often the loop enforces the dead-letter retention.
const DLQ_TRIM_INTERVAL: Duration = Duration::from_secs(5);

/// How often the loop sweeps the end logs: an end a dead worker left is relayed within
/// [`END_RELAY_AFTER`] plus this (plus the sweeper key's expiry if it was the sweeper).
const ENDS_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

impl Maintenance {
    /// A loop in state [`MaintenanceState::Promote`]. A partitioned queue among
    /// [`MaintenanceConfig::queues`] stands for all its partitions.
    pub fn new(queue: Queue, mut cfg: MaintenanceConfig) -> Self {
        let mut physical = queue.physical_queues_of(&cfg.queues);
        physical.dedup();
        cfg.queues = physical;
        Maintenance {
            queue,
            state: MaintenanceState::Promote,
            backoff: ReconnectBackoff::new(cfg.interval, cfg.max_backoff),
            next_trim: UtcMillis(0),
            next_sweep: UtcMillis(0),
            cfg,
        }
    }

    /// The current state.
    pub fn state(&self) -> MaintenanceState {
        self.state
    }

    /// Runs the current state's work at `now` and moves to the next state.
    pub async fn step(&mut self, now: UtcMillis) -> StepReport {
        let mut report = StepReport {
            promoted: 0,
            reaped: 0,
            dlq_trimmed: 0,
            ends_relayed: 0,
            wait: Duration::ZERO,
        };
        let result = match self.state {
            MaintenanceState::Promote => self.promote(now).await.map(|n| {
                report.promoted = n;
                self.state = MaintenanceState::Reap;
            }),
            MaintenanceState::Reap => self.reap(now).await.map(|(n, trimmed, relayed)| {
                report.reaped = n;
                report.dlq_trimmed = trimmed;
                report.ends_relayed = relayed;
                self.backoff.reset();
                self.state = MaintenanceState::Promote;
                report.wait = self.cfg.interval;
            }),
            MaintenanceState::Backoff { .. } => {
                self.state = MaintenanceState::Promote;
                Ok(())
            }
        };
        if let Err(e) = result {
            let wait = self.backoff.next_delay(&mut rand::rng());
            let failures = self.backoff.failures();
            tracing::warn!(error = %e, failures, retry_in = ?wait, "queue maintenance failed");
            self.state = MaintenanceState::Backoff { failures };
            report.wait = wait;
        }
        report
    }

    async fn promote(&self, now: UtcMillis) -> Result<usize> {
        let mut total = 0;
        for q in &self.cfg.queues {
            loop {
                let n = self
                    .queue
                    .promote_due(q, now, self.cfg.promote_batch)
                    .await?;
                total += n;
                if n < self.cfg.promote_batch {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// Reaps dead workers, then, every [`DLQ_TRIM_INTERVAL`], trims the dead-letter queues
    /// (one bounded call each), and every [`ENDS_SWEEP_INTERVAL`] relays old end records.
    async fn reap(&mut self, now: UtcMillis) -> Result<(usize, usize, usize)> {
        let mut reaped = 0;
        for q in &self.cfg.queues {
            reaped += self.queue.reap(q, now, self.cfg.visibility_timeout).await?;
        }
        let (mut trimmed, mut relayed) = (0, 0);
        if now >= self.next_trim {
            for q in &self.cfg.queues {
                trimmed += self.queue.trim_dlq(q, now).await?;
            }
            self.next_trim = now.add(DLQ_TRIM_INTERVAL);
        }
        if now >= self.next_sweep {
            for q in &self.cfg.queues {
                relayed += self.relay_old_ends(q).await?;
            }
            self.next_sweep = now.add(ENDS_SWEEP_INTERVAL);
        }
        Ok((reaped, trimmed, relayed))
    }

    /// Relays the end records of `queue` left in its log longer than the settling worker
    /// takes to relay them itself (that worker died), in bounded batches.
    async fn relay_old_ends(&self, queue: &str) -> Result<usize> {
        const BATCH: usize = 500;
        let mut total = 0;
        loop {
            let ends = self
                .queue
                .sweep_ends(queue, &self.cfg.sweeper, self.cfg.relay_after, BATCH)
                .await?;
            if ends.is_empty() {
                return Ok(total);
            }
            self.queue.relay_ends(&ends).await?;
            total += ends.len();
            tracing::warn!(
                queue,
                relayed = ends.len(),
                "relayed end records a worker left unrelayed"
            );
            if ends.len() < BATCH {
                return Ok(total);
            }
        }
    }

    /// Steps with the clock until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let report = tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.step(self.queue.config().clock.now()) => r,
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(report.wait) => {}
            }
        }
    }
}
