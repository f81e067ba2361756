//! Token buckets: one for the enqueue rate (an optional cap on fires per second, so a burst
//! of due tasks cannot flood the workers or Redis), and one per key for rates per caller or
//! per task ([`KeyedBuckets`], used for run-now requests per task).
//!
//! Off by default. When on, the leader asks [`TokenBucket::try_take`] before each enqueue; a
//! fire that finds no token waits in the ready queue, so a burst of due tasks is spread out
//! instead of flooding Redis and the workers. The bucket refills continuously from the `now`
//! it is given, so it reads no clock and tests run on virtual time.

use std::collections::HashMap;
use std::hash::Hash;

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
        self.try_take_n(1.0, now)
    }

    /// Takes `n` tokens at once if there are that many (none otherwise); `n` above the
    /// burst is never granted.
    pub fn try_take_n(&mut self, n: f64, now: UtcMillis) -> bool {
        self.refill(now);
        if self.tokens >= n - EPSILON {
            self.tokens = (self.tokens - n).max(0.0);
            true
        } else {
            false
        }
    }

    /// When the next token will be there (now, if one is).
    pub fn next_token_at(&mut self, now: UtcMillis) -> UtcMillis {
        self.next_tokens_at(1.0, now)
    }

    /// When `n` tokens will be there (now, if they are; at a full bucket's refill for `n`
    /// above the burst, which is never granted).
    pub fn next_tokens_at(&mut self, n: f64, now: UtcMillis) -> UtcMillis {
        self.refill(now);
        let n = n.min(self.capacity);
        if self.tokens >= n - EPSILON || self.rate_per_sec <= 0.0 {
            return now;
        }
        let wait_ms = ((n - self.tokens) / self.rate_per_sec * 1000.0).ceil() as i64;
        UtcMillis(now.0.saturating_add(wait_ms.max(1)))
    }
}

/// A token bucket per key, all with the same rate and burst, for at most `max_keys` keys.
/// Buckets are made on a key's first take. A new key past the bound first drops the buckets
/// full again (idle for a whole refill; that loses nothing, since a new bucket starts full),
/// at most once per token's refill time, since none can have refilled sooner; while that
/// frees no room, new keys are refused ([`KeyRefusal::Crowded`]) and tracked keys keep their
/// own rate. Memory and the work of a take are bounded whoever picks the keys.
#[derive(Clone, Debug)]
pub struct KeyedBuckets<K> {
    rate_per_sec: f64,
    burst: f64,
    max_keys: usize,
    /// When the next prune of a full map may run.
    next_prune: UtcMillis,
    buckets: HashMap<K, TokenBucket>,
}

/// Why [`KeyedBuckets::try_take`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRefusal {
    /// The key used up its rate; its next token comes at this instant.
    Rate(UtcMillis),
    /// Too many keys are active to track one more; room may come at this instant.
    Crowded(UtcMillis),
}

impl<K: Eq + Hash + Clone> KeyedBuckets<K> {
    /// Buckets of `burst` tokens refilled at `rate_per_sec`, for at most `max_keys` keys.
    pub fn new(rate_per_sec: f64, burst: f64, max_keys: usize) -> Self {
        KeyedBuckets {
            rate_per_sec,
            burst,
            max_keys: max_keys.max(1),
            next_prune: UtcMillis(i64::MIN),
            buckets: HashMap::new(),
        }
    }

    /// Takes a token of `key`'s bucket, or says why not and until when.
    pub fn try_take(&mut self, key: &K, now: UtcMillis) -> Result<(), KeyRefusal> {
        self.try_take_n(key, 1, now)
    }

    /// Takes `n` tokens of `key`'s bucket at once (a batch), or none and says why not and
    /// until when.
    pub fn try_take_n(&mut self, key: &K, n: u32, now: UtcMillis) -> Result<(), KeyRefusal> {
        if !self.buckets.contains_key(key) && self.buckets.len() >= self.max_keys {
            if now >= self.next_prune {
                self.buckets.retain(|_, b| !b.is_full(now));
                self.next_prune = UtcMillis(now.0.saturating_add(self.refill_ms()));
            }
            if self.buckets.len() >= self.max_keys {
                return Err(KeyRefusal::Crowded(self.next_prune));
            }
        }
        let bucket = self
            .buckets
            .entry(key.clone())
            .or_insert_with(|| TokenBucket::new(self.rate_per_sec, self.burst, now));
        let n = f64::from(n);
        if bucket.try_take_n(n, now) {
            Ok(())
        } else {
            Err(KeyRefusal::Rate(bucket.next_tokens_at(n, now)))
        }
    }

    /// Time for one token to come back, milliseconds.
    fn refill_ms(&self) -> i64 {
        if self.rate_per_sec <= 0.0 {
            return i64::MAX;
        }
        ((1000.0 / self.rate_per_sec).ceil() as i64).max(1)
    }

    /// Keys with a bucket.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no key has a bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

impl TokenBucket {
    /// Whether the bucket holds its whole capacity (after refilling to `now`).
    pub fn is_full(&mut self, now: UtcMillis) -> bool {
        self.refill(now);
        self.tokens >= self.capacity - EPSILON
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_has_its_own_rate_and_idle_keys_are_pruned() {
        let t0 = UtcMillis(0);
        // 6 a minute, burst 6: one token back every 10 s.
        let mut k = KeyedBuckets::new(0.1, 6.0, 2);
        for _ in 0..6 {
            assert!(k.try_take(&"a", t0).is_ok());
        }
        assert_eq!(
            k.try_take(&"a", t0),
            Err(KeyRefusal::Rate(UtcMillis(10_000)))
        );
        assert!(k.try_take(&"b", t0).is_ok());
        assert_eq!(k.len(), 2);
        // A third key while both are still draining: none is dropped (their limits hold),
        // and the new key waits until a prune may run again.
        assert_eq!(
            k.try_take(&"c", UtcMillis(1)),
            Err(KeyRefusal::Crowded(UtcMillis(10_001)))
        );
        assert_eq!(k.len(), 2);
        assert!(k.try_take(&"a", UtcMillis(1)).is_err());
        // Before the next prune time nothing is scanned; after it, still nothing is full.
        assert!(matches!(
            k.try_take(&"c", UtcMillis(5_000)),
            Err(KeyRefusal::Crowded(_))
        ));
        // A minute later all are full again: a new key prunes them.
        assert!(k.try_take(&"d", UtcMillis(60_000)).is_ok());
        assert_eq!(k.len(), 1);
        assert!(k.try_take(&"a", UtcMillis(60_000)).is_ok());
    }

    #[test]
    fn a_batch_takes_its_size_at_once_or_nothing() {
        let mut b = TokenBucket::new(10.0, 100.0, UtcMillis(0));
        assert!(b.try_take_n(60.0, UtcMillis(0)));
        assert!(!b.try_take_n(60.0, UtcMillis(0)), "40 left");
        assert!(
            b.try_take_n(40.0, UtcMillis(0)),
            "nothing was taken by the refusal"
        );
        assert_eq!(b.next_tokens_at(30.0, UtcMillis(0)), UtcMillis(3_000));
        assert!(
            !b.try_take_n(101.0, UtcMillis(60_000)),
            "past the burst, never"
        );
        let mut k: KeyedBuckets<&str> = KeyedBuckets::new(10.0, 100.0, 4);
        assert!(k.try_take_n(&"a", 100, UtcMillis(0)).is_ok());
        assert_eq!(
            k.try_take_n(&"a", 20, UtcMillis(0)),
            Err(KeyRefusal::Rate(UtcMillis(2_000)))
        );
        assert!(
            k.try_take_n(&"b", 20, UtcMillis(0)).is_ok(),
            "each key its own"
        );
    }

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
