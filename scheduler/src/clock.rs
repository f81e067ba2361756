//! The role's clock: the injected wall clock, wall-clock targets as tokio deadlines, and
//! the check of this host's clock against the coordination store's.
//!
//! Every read of the wall clock in this crate goes through the [`Clock`] in the role's
//! dependencies, and every wait is a tokio deadline, so under tokio's paused time a
//! [`TokioClock`] makes the whole role run on virtual time. A replica passes
//! [`ax_scheduler_core::SystemClock`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ax_scheduler_core::UtcMillis;
pub use ax_scheduler_core::{Clock, SystemClock};
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// The tokio instant at which `clock` will read `target` (now, if it is past).
pub fn instant_at(clock: &dyn Clock, target: UtcMillis) -> Instant {
    Instant::now() + target.since(clock.now())
}

/// A wall clock that follows tokio's clock from an anchor: under a paused runtime it moves
/// only when tokio's time does (`tokio::time::advance`, or auto-advance while idle), so
/// tests of the role run on virtual time.
#[derive(Clone, Copy)]
pub struct TokioClock {
    origin: Instant,
    at_origin: UtcMillis,
}

impl TokioClock {
    /// A clock that reads `at` now and moves with tokio's time from here.
    pub fn starting_at(at: UtcMillis) -> Self {
        TokioClock {
            origin: Instant::now(),
            at_origin: at,
        }
    }
}

impl fmt::Debug for TokioClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokioClock({})", self.now().0)
    }
}

impl Clock for TokioClock {
    fn now(&self) -> UtcMillis {
        self.at_origin.add(self.origin.elapsed())
    }
}

/// The future of a [`ClockProbe`].
pub type SkewFuture<'a> = Pin<
    Box<dyn Future<Output = Result<f64, Box<dyn std::error::Error + Send + Sync>>> + Send + 'a>,
>;

/// Measures how far this host's clock is from the coordination store's (`ax serve` asks
/// etcd's HTTP `Date`). The role does not schedule while the offset exceeds
/// `max_clock_skew`.
pub trait ClockProbe: Send + Sync {
    /// How far this host's clock is ahead (negative: behind), in seconds. An error says why
    /// the check could not be made; the role goes on without it.
    fn skew(&self) -> SkewFuture<'_>;
}

/// A ticker that, when late, waits a whole period after the late tick (no burst of
/// catch-up ticks).
pub(crate) fn ticker(period: Duration) -> Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick
}
/// How long a refused clock check waits before it checks again.
pub(crate) const CLOCK_RECHECK: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_moves_with_paused_time() {
        let clock = TokioClock::starting_at(UtcMillis(1_000_000));
        assert_eq!(clock.now(), UtcMillis(1_000_000));
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), UtcMillis(1_090_000));
        let at = instant_at(&clock, UtcMillis(1_100_000));
        assert_eq!(at - Instant::now(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn instant_at_the_past_is_now() {
        let clock = TokioClock::starting_at(UtcMillis(5_000));
        let start = Instant::now();
        assert_eq!(instant_at(&clock, UtcMillis(0)), start);
        let later = instant_at(&clock, clock.now().add(Duration::from_secs(10)));
        assert_eq!(later, start + Duration::from_secs(10));
    }
}
