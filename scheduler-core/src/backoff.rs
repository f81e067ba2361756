//! The reconnect backoff every retry loop of ax shares: doubling waits up to a cap, jittered.
//!
//! Each loop that talks to a backend (the binary's first connection, the election campaign,
//! the registry watch, the worker's fetch and settle loops, alert delivery) waits between
//! failed attempts. They all wait the same way: the n-th consecutive failure waits
//! `initial * 2^n` capped at `max`, then jittered uniformly into its upper half
//! (`[base / 2, base]`, "equal jitter"), so replicas that lost the same backend at the same
//! instant do not come back in lockstep, and the cap stays a true upper bound. A success
//! resets it. The random source is passed in (`rand::rng()` in production, a seeded generator
//! in tests), which keeps this type free of I/O like the rest of the core.

use std::time::Duration;

use rand::Rng;

/// Jittered exponential waits between failed attempts; see the [module notes](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconnectBackoff {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl ReconnectBackoff {
    /// Waits starting near `initial`, doubling up to `max` (`max` below `initial` is raised to
    /// it).
    pub const fn new(initial: Duration, max: Duration) -> Self {
        let max = if max.as_nanos() < initial.as_nanos() {
            initial
        } else {
            max
        };
        ReconnectBackoff {
            initial,
            max,
            failures: 0,
        }
    }

    /// The un-jittered wait after the current number of failures.
    pub fn base(&self) -> Duration {
        let factor = 1u32 << self.failures.min(20);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// Records one more failure and returns how long to wait before the next attempt.
    pub fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let base = self.base();
        self.failures = self.failures.saturating_add(1);
        let half = base / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(rng.random_range(0..=nanos))
    }

    /// An attempt succeeded: the next failure waits near `initial` again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Consecutive failures recorded since the last reset.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn doubles_to_the_cap_within_the_upper_half() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut b = ReconnectBackoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut bases = Vec::new();
        for _ in 0..8 {
            let base = b.base();
            let d = b.next_delay(&mut rng);
            assert!(
                d >= base / 2 && d <= base,
                "{d:?} outside [{:?}, {base:?}]",
                base / 2
            );
            bases.push(base.as_millis());
        }
        assert_eq!(bases, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        assert_eq!(b.failures(), 8);
        b.reset();
        assert_eq!(b.base(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_spreads_replicas_apart() {
        let mut rng = StdRng::seed_from_u64(1);
        let waits: std::collections::HashSet<Duration> = (0..20)
            .map(|_| {
                ReconnectBackoff::new(Duration::from_secs(1), Duration::from_secs(1))
                    .next_delay(&mut rng)
            })
            .collect();
        assert!(waits.len() > 10, "{waits:?}");
    }

    #[test]
    fn never_overflows() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut b = ReconnectBackoff::new(Duration::from_secs(1), Duration::MAX);
        for _ in 0..100 {
            b.next_delay(&mut rng);
        }
        assert!(b.base() >= Duration::from_secs(1 << 20));
        let inverted = ReconnectBackoff::new(Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(inverted.base(), Duration::from_secs(2));
    }
}
