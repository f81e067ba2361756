//! A token bucket for the enqueue rate: an optional cap on fires per second, so a burst of due
//! tasks cannot flood the workers or Redis.
//!
//! Off by default. When on, the leader asks [`TokenBucket::try_take`] before each enqueue; a
//! fire that finds no token waits in the ready queue, so a burst of due tasks is spread out
//! instead of flooding Redis and the workers. The bucket refills continuously from the `now`
//! it is given, so it reads no clock and tests run on virtual time.

use crate::time::UtcMillis;

/// Refill adds `elapsed * rate` in floating point, so a token due exactly now may sit a hair
/// below 1.0; this much is forgiven.
const EPSILON: f64 = 1e-9;

/// A token bucket of `capacity` tokens refilled at `rate_per_sec`.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_per_sec: f64,
    capacity: f64,
    tokens: f64,
    last: UtcMillis,
}

impl TokenBucket {
    /// A full bucket. `burst` below 1 is raised to 1 so the bucket can ever give a token.
    pub fn new(rate_per_sec: f64, burst: f64, now: UtcMillis) -> Self {
        let capacity = burst.max(1.0);
        TokenBucket {
            rate_per_sec: rate_per_sec.max(0.0),
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    fn refill(&mut self, now: UtcMillis) {
        if now > self.last {
            let elapsed = (now.0 - self.last.0) as f64 / 1000.0;
            self.tokens = (self.tokens + elapsed * self.rate_per_sec).min(self.capacity);
            self.last = now;
        }
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: UtcMillis) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 - EPSILON {
            self.tokens = (self.tokens - 1.0).max(0.0);
            true
        } else {
            false
        }
    }

    /// When the next token will be there (now, if one is).
    pub fn next_token_at(&mut self, now: UtcMillis) -> UtcMillis {
        self.refill(now);
        if self.tokens >= 1.0 - EPSILON || self.rate_per_sec <= 0.0 {
            return now;
        }
        let wait_ms = ((1.0 - self.tokens) / self.rate_per_sec * 1000.0).ceil() as i64;
        UtcMillis(now.0.saturating_add(wait_ms.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let t0 = UtcMillis(1_000_000);
        let mut b = TokenBucket::new(100.0, 10.0, t0);
        assert_eq!((0..50).filter(|_| b.try_take(t0)).count(), 10);
        assert_eq!(b.next_token_at(t0), UtcMillis(t0.0 + 10));
        // Over one virtual second at 1 ms steps, 100 more tokens, not more.
        let taken = (1..=1000)
            .filter(|ms| b.try_take(UtcMillis(t0.0 + ms)))
            .count();
        assert_eq!(taken, 100);
    }

    #[test]
    fn never_more_than_capacity_after_idle() {
        let t0 = UtcMillis(0);
        let mut b = TokenBucket::new(1000.0, 5.0, t0);
        let later = UtcMillis(3_600_000);
        assert_eq!((0..20).filter(|_| b.try_take(later)).count(), 5);
    }
}
