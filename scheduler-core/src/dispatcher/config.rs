//! The dispatcher's settings. Every duration the fire path waits on is here, so tests run
//! the same code on virtual time with short settings and the engine maps its own
//! configuration onto one value.

use std::time::Duration;

use crate::breaker::BreakerConfig;
use crate::misfire::DEFAULT_CATCH_UP_WINDOW;
use crate::ready::ReadyConfig;
use crate::timer::TimerConfig;

/// Settings of a [`Dispatcher`](super::Dispatcher).
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Timer shape (tick, levels).
    pub timer: TimerConfig,
    /// Ready-queue aging.
    pub ready: ReadyConfig,
    /// Missed fires older than this are not replayed by `fire_all` and raise an alert.
    pub catch_up_window: Duration,
    /// Per-task circuit breaker.
    pub breaker: BreakerConfig,
    /// Enqueue rate limit as (fires per second, burst); `None` (the default) for no limit.
    pub rate_limit: Option<(f64, f64)>,
    /// How often a held fire asks again whether the previous execution finished, in case
    /// its completion event was lost.
    pub hold_retry: Duration,
    /// A timer that comes due later than this means the leader stalled; the fires it missed
    /// follow the task's misfire policy.
    pub stall_threshold: Duration,
    /// How long after a fire its state (RUNNING) waits to be written on its own: an
    /// execution that ends sooner has its end written instead, in one write.
    pub running_write_delay: Duration,
    /// How long a periodic task's routine run (one that succeeded, after one that did too)
    /// waits to be written, with every routine run that follows meanwhile: a task firing
    /// every second is written once in this delay, not once a fire. Any other change is
    /// written at once. Zero writes every run (a user without a log of events to replay
    /// what a lost write held, as the embedded kernel, sets it so).
    pub routine_write_delay: Duration,
    /// Whether changes are recorded for [`Dispatcher::take_state_writes`](super::Dispatcher::take_state_writes)
    /// at all. A user that keeps no states (an embedded kernel without a store) sets it
    /// false: every fire would otherwise mark its task twice, hashing its key each time, for
    /// writes that are dropped.
    pub write_states: bool,
}

/// Default [`DispatcherConfig::stall_threshold`]: far above any lateness of a working
/// leader (milliseconds), well below the outages it stands for (a backend down for minutes,
/// a clock stepped forward).
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_secs(5);

/// Default [`DispatcherConfig::routine_write_delay`]: a tenth of a state write per fire
/// for tasks firing every second, while a reader sees a healthy task's counts at most this
/// late.
pub const DEFAULT_ROUTINE_WRITE_DELAY: Duration = Duration::from_secs(10);

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            timer: TimerConfig::default(),
            ready: ReadyConfig::default(),
            catch_up_window: DEFAULT_CATCH_UP_WINDOW,
            breaker: BreakerConfig::default(),
            rate_limit: None,
            hold_retry: Duration::from_secs(5),
            stall_threshold: DEFAULT_STALL_THRESHOLD,
            running_write_delay: Duration::from_secs(5),
            routine_write_delay: DEFAULT_ROUTINE_WRITE_DELAY,
            write_states: true,
        }
    }
}
