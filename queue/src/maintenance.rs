//! The maintenance loop: promotes due retries, reaps dead workers' messages and keeps the
//! dead-letter queues within their retention.
//!
//! Every worker pool runs one for the queues it serves. Both jobs are single scripts, so any
//! number of these loops may run at once against the same queues without harm. The loop is an
//! explicit state machine advanced by [`Maintenance::step`], which reports how long to wait
//! before the next step: tests drive it step by step with chosen instants, and
//! [`Maintenance::run`] drives it with the clock until cancelled.

use std::time::Duration;

use ax_scheduler_core::{ReconnectBackoff, UtcMillis};
use tokio_util::sync::CancellationToken;

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
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            queues: vec![ax_scheduler_core::task::DEFAULT_QUEUE.to_string()],
            interval: Duration::from_millis(250),
            visibility_timeout: DEFAULT_VISIBILITY_TIMEOUT,
            promote_batch: 500,
            max_backoff: Duration::from_secs(10),
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
}

/// How often the loop enforces the dead-letter retention.
const DLQ_TRIM_INTERVAL: Duration = Duration::from_secs(5);

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
            wait: Duration::ZERO,
        };
        let result = match self.state {
            MaintenanceState::Promote => self.promote(now).await.map(|n| {
                report.promoted = n;
                self.state = MaintenanceState::Reap;
            }),
            MaintenanceState::Reap => self.reap(now).await.map(|(n, trimmed)| {
                report.reaped = n;
                report.dlq_trimmed = trimmed;
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
    /// (one bounded call each).
    async fn reap(&mut self, now: UtcMillis) -> Result<(usize, usize)> {
        let mut reaped = 0;
        for q in &self.cfg.queues {
            reaped += self.queue.reap(q, now, self.cfg.visibility_timeout).await?;
        }
        let mut trimmed = 0;
        if now >= self.next_trim {
            for q in &self.cfg.queues {
                trimmed += self.queue.trim_dlq(q, now).await?;
            }
            self.next_trim = now.add(DLQ_TRIM_INTERVAL);
        }
        Ok((reaped, trimmed))
    }

    /// Steps with the clock until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let report = tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.step(ax_scheduler_core::UtcMillis::now()) => r,
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(report.wait) => {}
            }
        }
    }
}
