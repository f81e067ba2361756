//! When a failed attempt is tried again: the `backoff` crate's jittered exponential policy,
//! built from the task's [`RetryPolicy`].
//!
//! The worker keeps no retry state in memory: the attempt number and the first attempt's
//! instant travel in the message, and the wait is spent in Redis (the delayed set). So the
//! n-th retry's wait is computed from scratch: an `ExponentialBackoff` whose current interval
//! is `initial * multiplier^n` capped at `max_interval`, randomized by `jitter`
//! (uniform in `w*(1-j) ..= w*(1+j)`), on a clock fixed at `now` and started at the first
//! attempt, so the crate's own `max_elapsed_time` rule applies: no retry starts later than
//! `max_elapsed` after the first attempt.

use std::time::{Duration, Instant};

use ax_scheduler_core::{RetryPolicy, UtcMillis};
use backoff::backoff::Backoff;
use backoff::exponential::ExponentialBackoff;
use backoff::Clock;

/// What to do after a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again at `due` (after `wait`).
    RetryAt {
        /// When the next attempt becomes due.
        due: UtcMillis,
        /// The jittered wait.
        wait: Duration,
    },
    /// Do not retry; the reason goes to the dead-letter entry.
    GiveUp {
        /// Why (retries exhausted, time budget spent).
        reason: String,
    },
}

struct FixedClock(Instant);

impl Clock for FixedClock {
    fn now(&self) -> Instant {
        self.0
    }
}

/// The un-jittered wait before retry number `retry` (0 for the first retry).
pub fn base_interval(policy: &RetryPolicy, retry: u32) -> Duration {
    let exp = i32::try_from(retry).unwrap_or(i32::MAX);
    let secs = policy.initial_interval.as_secs_f64() * policy.multiplier.max(1.0).powi(exp);
    let max = policy.max_interval.as_secs_f64();
    Duration::from_secs_f64(if secs.is_finite() { secs.min(max) } else { max })
}

/// Decides the fate of a message whose attempt `attempt` (0 for the first) failed at `now`,
/// given when its first attempt was enqueued.
pub fn decide(
    policy: &RetryPolicy,
    attempt: u32,
    first_attempt_at: UtcMillis,
    now: UtcMillis,
) -> RetryDecision {
    if attempt >= policy.max_retries {
        return RetryDecision::GiveUp {
            reason: format!("retries exhausted ({} of {})", attempt, policy.max_retries),
        };
    }
    let elapsed = now.since(first_attempt_at);
    let anchor = Instant::now();
    let Some(start) = anchor.checked_sub(elapsed) else {
        return RetryDecision::GiveUp {
            reason: "retry time budget spent".into(),
        };
    };
    let mut b = ExponentialBackoff {
        current_interval: base_interval(policy, attempt),
        initial_interval: policy.initial_interval,
        randomization_factor: policy.jitter.clamp(0.0, 1.0),
        multiplier: policy.multiplier.max(1.0),
        max_interval: policy.max_interval,
        start_time: start,
        max_elapsed_time: policy.max_elapsed,
        clock: FixedClock(anchor),
    };
    match b.next_backoff() {
        Some(wait) => RetryDecision::RetryAt {
            due: now.add(wait),
            wait,
        },
        None => RetryDecision::GiveUp {
            reason: format!(
                "retry time budget spent ({:?} of {:?})",
                elapsed,
                policy.max_elapsed.unwrap_or_default()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 5,
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_millis(400),
            multiplier: 2.0,
            jitter: 0.2,
            max_elapsed: Some(Duration::from_secs(10)),
        }
    }

    #[test]
    fn intervals_grow_and_cap() {
        let p = policy();
        let w: Vec<u128> = (0..4).map(|n| base_interval(&p, n).as_millis()).collect();
        assert_eq!(w, vec![100, 200, 400, 400]);
    }

    #[test]
    fn exhausted_retries_and_budget_give_up() {
        let p = policy();
        let t = UtcMillis(1_000_000);
        assert!(matches!(decide(&p, 5, t, t), RetryDecision::GiveUp { .. }));
        let late = t.add(Duration::from_secs(11));
        assert!(matches!(
            decide(&p, 1, t, late),
            RetryDecision::GiveUp { .. }
        ));
        // Within budget but the wait would end past it.
        let edge = t.add(Duration::from_millis(9_990));
        assert!(matches!(
            decide(&p, 3, t, edge),
            RetryDecision::GiveUp { .. }
        ));
        let mut no_limit = p.clone();
        no_limit.max_elapsed = None;
        assert!(matches!(
            decide(&no_limit, 1, t, late),
            RetryDecision::RetryAt { .. }
        ));
    }

    proptest! {
        #[test]
        fn wait_is_within_the_jitter_bounds(attempt in 0u32..5, jitter in 0.0f64..1.0) {
            let mut p = policy();
            p.jitter = jitter;
            p.max_elapsed = None;
            let now = UtcMillis(5_000_000);
            let base = base_interval(&p, attempt).as_secs_f64();
            match decide(&p, attempt, now, now) {
                RetryDecision::RetryAt { due, wait } => {
                    let w = wait.as_secs_f64();
                    prop_assert!(w >= base * (1.0 - jitter) - 1e-6, "{w} < {base}");
                    prop_assert!(w <= base * (1.0 + jitter) + 1e-6, "{w} > {base}");
                    prop_assert_eq!(due, now.add(wait));
                }
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
