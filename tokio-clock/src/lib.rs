//! A wall clock that follows tokio's clock, and wall-clock instants as tokio deadlines: what
//! the scheduler role and the embedded kernel both run on.
//!
//! The scheduling core takes `now` as an argument and both shells wait only on tokio
//! deadlines, so a [`TokioClock`] makes them run on virtual time under a paused runtime
//! (`#[tokio::test(start_paused = true)]`): a job due in 30 minutes runs in microseconds of
//! a test. It sits in a crate of its own so that the core stays without tokio and the two
//! shells share one definition without depending on each other.

use std::fmt;

use ax_scheduler_core::{Clock, UtcMillis};
use tokio::time::Instant;

/// A wall clock that reads `at_origin` at `origin` and moves with tokio's clock from there:
/// under a paused runtime it moves only when tokio's time does (`tokio::time::advance`, or
/// auto-advance while idle). A step of the host's clock does not move it.
///
/// ```
/// use ax_scheduler_core::{Clock, UtcMillis};
/// use ax_tokio_clock::TokioClock;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::starting_at(UtcMillis(1_000));
/// tokio::time::advance(std::time::Duration::from_secs(1)).await;
/// assert_eq!(clock.now(), UtcMillis(2_000));
/// # }
/// ```
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

    /// A clock that reads the host's clock now and moves with tokio's time from here.
    pub fn from_now() -> Self {
        Self::starting_at(UtcMillis::now())
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

/// The tokio instant at which `clock` will read `target` (now, if it is past).
pub fn instant_at(clock: &dyn Clock, target: UtcMillis) -> Instant {
    Instant::now() + target.since(clock.now())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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
