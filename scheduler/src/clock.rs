//! The role's clock: the injected wall clock, wall-clock targets as tokio deadlines, and
//! the check of this host's clock against the coordination store's.
//!
//! Every read of the wall clock in this crate goes through the [`Clock`] in the role's
//! dependencies, and every wait is a tokio deadline, so under tokio's paused time a
//! [`TokioClock`] makes the whole role run on virtual time. A replica passes a
//! [`SteadyClock`]: the host's clock, except that a step back is absorbed slowly instead of
//! followed at once, so the role's time never runs backwards and never stands still for the
//! length of the step.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ax_scheduler_core::UtcMillis;
pub use ax_scheduler_core::{Clock, SystemClock};
pub use ax_tokio_clock::{instant_at, TokioClock};
use tokio::time::{Interval, MissedTickBehavior};

/// How much slower than real time a [`SteadyClock`] runs while it absorbs a step back of
/// its host's clock: a tenth, so a minute's step is absorbed in ten minutes.
const SLEW_DIVISOR: i64 = 10;

/// A step back of the host's clock smaller than this is waited out (the reading holds
/// still until the host's clock passes it) rather than absorbed: the jitter of reading two
/// clocks, not a step.
const STEP_BACK_MS: i64 = 50;

/// The host's clock as the role reads it: it follows the host's clock forward at once (a
/// forward step is the term's stall, handled by the misfire policy), but a step back (an NTP
/// step, a VM restored) is absorbed at a tenth of real time (`SLEW_DIVISOR`), measured on
/// the monotonic clock. Followed at once, a step back of a minute would stop every schedule
/// for that minute: the next due instants lie a minute further off by the host's clock, and
/// what the leader fired in the minute before comes due again. Absorbed, the role goes on
/// at nine tenths of real time until its host's clock catches up, and never reads an instant
/// earlier than one it read before. A step forward while it absorbs (the step back undone)
/// is followed only as far as the host's clock: the reading never runs faster than real
/// time while it is ahead of its host.
#[derive(Debug, Default)]
pub struct SteadyClock {
    state: std::sync::Mutex<Option<Steady>>,
}

/// What a [`SteadyClock`] read last.
#[derive(Clone, Copy, Debug)]
struct Steady {
    /// The last reading.
    last: i64,
    /// When (monotonic) the last reading was taken.
    last_at: std::time::Instant,
    /// How far ahead of the host's clock the reading was at `anchor`, being absorbed.
    offset: i64,
    /// When (monotonic) `offset` was measured.
    anchor: std::time::Instant,
}

impl SteadyClock {
    /// A clock reading the host's from its first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reading at host time `wall` (ms) and monotonic instant `mono`.
    fn read(&self, wall: i64, mono: std::time::Instant) -> i64 {
        // A poisoned lock holds a consistent `Steady` (assigned whole): go on with it.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(s) = *state else {
            *state = Some(Steady {
                last: wall,
                last_at: mono,
                offset: 0,
                anchor: mono,
            });
            return wall;
        };
        let ms = |since: std::time::Instant| {
            i64::try_from(mono.saturating_duration_since(since).as_millis()).unwrap_or(i64::MAX)
        };
        let left = s.offset.saturating_sub(ms(s.anchor) / SLEW_DIVISOR).max(0);
        let candidate = wall.saturating_add(left);
        let real_time = s.last.saturating_add(ms(s.last_at));
        let next = if s.last - candidate > STEP_BACK_MS {
            // A step back: from here the reading goes on from the last one and absorbs the
            // difference.
            Steady {
                last: s.last,
                last_at: mono,
                offset: s.last - wall,
                anchor: mono,
            }
        } else if left > 0 && candidate > real_time && candidate > wall {
            // The host's clock stepped forward while a step back was being absorbed: what is
            // left to absorb shrinks by the step, so the reading does not overtake real time.
            let reading = wall.max(real_time).max(s.last);
            Steady {
                last: reading,
                last_at: mono,
                offset: reading - wall,
                anchor: mono,
            }
        } else {
            Steady {
                last: candidate.max(s.last),
                last_at: mono,
                ..s
            }
        };
        *state = Some(next);
        next.last
    }
}

impl Clock for SteadyClock {
    fn now(&self) -> UtcMillis {
        UtcMillis(self.read(UtcMillis::now().0, std::time::Instant::now()))
    }
}

/// The future of a [`ClockProbe`].
pub type SkewFuture<'a> = Pin<
    Box<dyn Future<Output = Result<f64, Box<dyn std::error::Error + Send + Sync>>> + Send + 'a>,
>;

/// Measures how far a clock is from the coordination store's (`ax serve` asks etcd's HTTP
/// `Date`). The role does not schedule while its own clock's offset exceeds
/// `max_clock_skew`, and a leader whose clock drifts past it gives its key up.
pub trait ClockProbe: Send + Sync {
    /// How far `clock` is ahead (negative: behind), in seconds. An error says why the check
    /// could not be made; the role goes on without it.
    fn skew<'a>(&'a self, clock: &'a dyn Clock) -> SkewFuture<'a>;
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

    #[test]
    fn a_steady_clock_follows_forward_and_absorbs_a_step_back() {
        let clock = SteadyClock::new();
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(clock.read(100_000, at(0)), 100_000);
        assert_eq!(clock.read(101_000, at(1_000)), 101_000);
        // Forward steps are followed at once.
        assert_eq!(clock.read(200_000, at(2_000)), 200_000);
        // A minute back: the reading holds, then runs at nine tenths of real time.
        assert_eq!(clock.read(140_000, at(2_000)), 200_000);
        assert_eq!(clock.read(141_000, at(3_000)), 200_900);
        assert_eq!(clock.read(150_000, at(12_000)), 209_000);
        // Ten minutes after the step its host's clock has caught up: followed again.
        assert_eq!(clock.read(740_000, at(602_000)), 740_000);
        assert_eq!(clock.read(741_000, at(603_000)), 741_000);
    }

    #[test]
    fn a_steady_clock_never_reads_earlier_than_before() {
        let clock = SteadyClock::new();
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(clock.read(10_000, at(0)), 10_000);
        // Jitter of a few milliseconds back holds the reading still.
        assert_eq!(clock.read(9_990, at(1)), 10_000);
        assert_eq!(clock.read(10_005, at(10)), 10_005);
        // Two steps back in a row are both absorbed.
        assert_eq!(clock.read(5_000, at(20)), 10_005);
        assert_eq!(clock.read(1_000, at(30)), 10_005);
        assert_eq!(clock.read(2_000, at(1_030)), 10_905);
    }

    #[test]
    fn a_step_back_undone_leaves_the_reading_at_the_host_clock() {
        let clock = SteadyClock::new();
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(clock.read(100_000, at(0)), 100_000);
        // Three seconds back at 100 ms: absorbed, the reading lags real time a little.
        assert_eq!(clock.read(97_100, at(100)), 100_000);
        assert_eq!(clock.read(101_900, at(4_900)), 104_320);
        // The step is undone at 6 s: the reading is the host's again, not 2.3 s ahead of it.
        assert_eq!(clock.read(106_000, at(6_000)), 106_000);
        assert_eq!(clock.read(107_000, at(7_000)), 107_000);
        // A step back of 5 s undone by a forward step of 2 s: 3 s left to absorb, no more.
        assert_eq!(clock.read(102_000, at(8_000)), 107_000);
        let after = clock.read(104_000, at(8_000));
        assert!((107_000..=108_000).contains(&after), "{after}");
        assert_eq!(clock.read(104_000 + 10_000, at(18_000)), 107_000 + 9_000);
    }
}
