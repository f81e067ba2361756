//! The promoter: moves a physical queue's scheduled executions into its queued set when
//! they are due, in every worker of the queue.
//!
//! It is an explicit state machine ([`PromoterState`]) advanced by [`Promoter::step`], which
//! says how long to wait: tests drive it with chosen instants, and [`Promoter::run`] drives it
//! with the queue's clock, waiting on the scheduled set's wake list (`BLPOP` on a connection
//! of its own, since a blocking command would hold up every command multiplexed on a
//! shared one) so that a new, earlier head cuts the wait short; the last part of a wait is
//! slept, as Redis ends a block only at its next cron tick. The wait is capped
//! ([`PromoterConfig::max_wait`]) so a token another promoter took, or a clock step, costs
//! at most that.

use std::time::Duration;

use ax_scheduler_core::{ReconnectBackoff, UtcMillis};
use tokio_util::sync::CancellationToken;

use crate::conn::Connection;
use crate::error::{QueueError, Result};
use crate::queue::Queue;

/// The end of a wait slept rather than blocked on Redis: Redis ends a block's timeout at
/// its next cron tick, up to 100 ms late at its default `hz` of 10. An execution submitted
/// for an instant before the head in that window waits for the sleep (submissions due at
/// once are promoted by the submitter, see [`crate::Queue::schedule_batch`]).
const TIMEOUT_SLACK: Duration = Duration::from_millis(150);

/// The shortest block worth a round trip.
const MIN_BLOCK: Duration = Duration::from_millis(100);

/// Settings of a [`Promoter`].
#[derive(Clone, Debug)]
pub struct PromoterConfig {
    /// Executions moved per script call. Default 500.
    pub batch: usize,
    /// Longest wait between looks at the set's head. Default 1 s.
    pub max_wait: Duration,
    /// Longest wait after repeated Redis errors. Default 10 s.
    pub max_backoff: Duration,
}

impl Default for PromoterConfig {
    fn default() -> Self {
        PromoterConfig {
            batch: 500,
            max_wait: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// Where a promoter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromoterState {
    /// Next: move what is due.
    Promote,
    /// Waiting for the head (or a wake token) until this instant.
    Wait {
        /// When the head is due, or the wait's cap.
        until: UtcMillis,
    },
    /// A Redis call failed `failures` times in a row.
    Backoff {
        /// Consecutive failures.
        failures: u32,
    },
}

/// Promotes one physical queue's scheduled executions.
pub struct Promoter {
    queue: Queue,
    name: String,
    cfg: PromoterConfig,
    state: PromoterState,
    backoff: ReconnectBackoff,
    /// For the blocking wait; opened on first use and again after an error.
    conn: Option<Connection>,
}

impl std::fmt::Debug for Promoter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promoter")
            .field("queue", &self.name)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Promoter {
    /// A promoter of physical queue `name` (a partition's name on a partitioned queue), in
    /// state [`PromoterState::Promote`].
    pub fn new(queue: Queue, name: &str, cfg: PromoterConfig) -> Result<Self> {
        crate::queue::check_queue(name)?;
        Ok(Promoter {
            backoff: ReconnectBackoff::new(Duration::from_millis(100), cfg.max_backoff),
            queue,
            name: name.to_owned(),
            cfg,
            state: PromoterState::Promote,
            conn: None,
        })
    }

    /// The current state.
    pub fn state(&self) -> PromoterState {
        self.state
    }

    /// Moves what is due at `now` (a full batch goes again at once) and sets the next wait:
    /// until the head is due, at most [`PromoterConfig::max_wait`]. Returns how many moved.
    pub async fn step(&mut self, now: UtcMillis) -> usize {
        match self
            .queue
            .promote_scheduled(&self.name, now, self.cfg.batch)
            .await
        {
            Ok((moved, head)) => {
                self.backoff.reset();
                self.state = if moved >= self.cfg.batch {
                    PromoterState::Promote
                } else {
                    let cap = now.add(self.cfg.max_wait);
                    PromoterState::Wait {
                        until: head.map_or(cap, |h| h.min(cap)),
                    }
                };
                moved
            }
            Err(e) => {
                self.fail(&e);
                0
            }
        }
    }

    fn fail(&mut self, e: &QueueError) {
        let failures = self.backoff.failures().saturating_add(1);
        tracing::warn!(queue = %self.name, error = %e, failures, "promoting scheduled executions failed");
        self.conn = None;
        self.state = PromoterState::Backoff { failures };
    }

    /// Steps with the queue's clock until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let now = self.queue.config().clock.now();
            let step = match self.state {
                PromoterState::Promote => {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        moved = self.step(now) => {
                            if moved > 0 {
                                tracing::debug!(queue = %self.name, moved, "promoted scheduled executions");
                            }
                        }
                    }
                    continue;
                }
                PromoterState::Wait { until } => until.0.saturating_sub(now.0),
                PromoterState::Backoff { .. } => {
                    let wait = self.backoff.next_delay(&mut rand::rng());
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    self.state = PromoterState::Promote;
                    continue;
                }
            };
            if step > 0 {
                let wait = Duration::from_millis(u64::try_from(step).unwrap_or(0));
                let woken = tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = self.wait_for_wake(wait) => r,
                };
                if let Err(e) = woken {
                    self.fail(&e);
                    continue;
                }
            }
            self.state = PromoterState::Promote;
        }
    }

    /// Waits `wait` for the head: blocked on the wake list (a new, earlier head ends it)
    /// for all but the last [`TIMEOUT_SLACK`], which is slept here, since Redis ends a
    /// block's timeout only at its next cron tick (100 ms apart at its default `hz`).
    async fn wait_for_wake(&mut self, wait: Duration) -> Result<()> {
        let cfg = self.queue.config();
        let Some(block) = wait.checked_sub(TIMEOUT_SLACK).filter(|b| *b >= MIN_BLOCK) else {
            tokio::time::sleep(wait).await;
            return Ok(());
        };
        let wait = block;
        let response_timeout = self.cfg.max_wait + cfg.command_timeout;
        if self.conn.is_none() {
            self.conn = Some(
                self.queue
                    .dedicated_connection(response_timeout, "promoter connect")
                    .await?,
            );
        }
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let key = self.queue.keys().scheduled_wake(&self.name);
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(key).arg(wait.as_secs_f64());
        let after = wait + cfg.command_timeout;
        match tokio::time::timeout(after, cmd.query_async::<Option<(String, String)>>(conn)).await {
            Ok(r) => r
                .map(|_| ())
                .map_err(QueueError::redis("promoter wait (BLPOP)")),
            Err(_) => Err(QueueError::Timeout {
                op: "promoter wait (BLPOP)",
                after,
            }),
        }
    }
}
