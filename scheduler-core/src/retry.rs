//! When a failed attempt is tried again: jittered exponential backoff from the task's
//! [`RetryPolicy`].
//!
//! It is here, below every runtime, because two shells decide retries the same way: the
//! cluster's worker pool (which spends the wait in Redis's delayed set) and the embedded
//! kernel (which spends it in its own timer). Neither keeps retry state beyond the attempt
//! number and the first attempt's instant, so the n-th retry's wait is computed from
//! scratch: the exponential sequence (`initial * multiplier^n`, `max_interval` from the
//! first step that would pass it on; the unmaintained `backoff` crate's sequence, without
//! its extra nanosecond of noise) gives the base, `rand` spreads it
//! uniformly over `base*(1-jitter) ..= base*(1+jitter)`, and the time budget is checked on
//! the message's own instants: no retry starts later than `max_elapsed` after the first
//! attempt.

use std::time::Duration;

use rand::Rng;

use crate::task::RetryPolicy;
use crate::time::UtcMillis;

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

/// The un-jittered wait before retry number `retry` (0 for the first retry). Computed in
/// floating-point nanoseconds, so no policy a caller gives (a huge multiplier, an interval of
/// years) can overflow: past `max_interval` the sequence stays there.
pub fn base_interval(policy: &RetryPolicy, retry: u32) -> Duration {
    let max = policy.max_interval.as_secs_f64();
    let multiplier = policy.multiplier.max(1.0);
    let mut wait = policy.initial_interval.as_secs_f64();
    // Retries are few (the policy caps them), and the sequence stops growing at the cap.
    for _ in 0..retry.min(64) {
        if wait >= max / multiplier {
            return policy.max_interval;
        }
        wait *= multiplier;
    }
    // Seconds as f64 back to a Duration may round a nanosecond past the cap.
    Duration::try_from_secs_f64(wait).map_or(policy.max_interval, |w| w.min(policy.max_interval))
}

/// Decides the fate of a message whose attempt `attempt` (0 for the first) failed at `now`,
/// given when its first attempt was enqueued; `rng` supplies the jitter.
pub fn decide(
    policy: &RetryPolicy,
    attempt: u32,
    first_attempt_at: UtcMillis,
    now: UtcMillis,
    rng: &mut impl Rng,
) -> RetryDecision {
    if attempt >= policy.max_retries {
        return RetryDecision::GiveUp {
            reason: format!("retries exhausted ({} of {})", attempt, policy.max_retries),
        };
    }
    let jitter = policy.jitter.clamp(0.0, 1.0);
    let factor = if jitter > 0.0 {
        rng.random_range(1.0 - jitter..=1.0 + jitter)
    } else {
        1.0
    };
    // A policy decoded from a message or a store may not have been checked: the product
    // saturates instead of panicking as `Duration::mul_f64` would.
    let wait = Duration::try_from_secs_f64(base_interval(policy, attempt).as_secs_f64() * factor)
        .unwrap_or(Duration::MAX);
    let due = now.add(wait);
    if let Some(budget) = policy.max_elapsed {
        if due > first_attempt_at.add(budget) {
            return RetryDecision::GiveUp {
                reason: format!(
                    "retry time budget spent ({:?} of {:?})",
                    now.since(first_attempt_at),
                    budget
                ),
            };
        }
    }
    RetryDecision::RetryAt { due, wait }
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

    proptest! {
        /// Any policy validation lets through, however large, gives waits that grow with the
        /// retry, never pass the cap, and match the plain model `initial * multiplier^n`
        /// (capped) to a microsecond.
        #[test]
        fn waits_grow_to_the_cap_and_never_overflow(
            initial_ms in 1u64..=10_000_000_000,
            extra_ms in 0u64..=u64::MAX / 4_000_000,
            multiplier in 1.0f64..1.0e6,
            retry in 0u32..200,
        ) {
            let policy = RetryPolicy {
                initial_interval: Duration::from_millis(initial_ms),
                max_interval: Duration::from_millis(initial_ms.saturating_add(extra_ms)),
                multiplier,
                ..policy()
            };
            let wait = base_interval(&policy, retry);
            let next = base_interval(&policy, retry + 1);
            prop_assert!(wait <= policy.max_interval);
            prop_assert!(next >= wait);
            let model = (policy.initial_interval.as_secs_f64()
                * multiplier.powi(i32::try_from(retry.min(64)).unwrap_or(64)))
                .min(policy.max_interval.as_secs_f64());
            let diff = (wait.as_secs_f64() - model).abs();
            prop_assert!(diff <= 1e-6_f64.max(model * 1e-9), "{wait:?} against {model}");
        }
    }

    #[test]
    fn an_unchecked_policy_of_huge_intervals_saturates_instead_of_panicking() {
        // What an old message or stored job may carry: validation now refuses it, but the
        // decision must not panic on it (`Duration::mul_f64` did, at `u64::MAX` seconds).
        let p = RetryPolicy {
            initial_interval: Duration::from_secs(u64::MAX),
            max_interval: Duration::MAX,
            jitter: 1.0,
            max_elapsed: None,
            ..policy()
        };
        let now = UtcMillis(5_000_000);
        for _ in 0..64 {
            match decide(&p, 0, now, now, &mut rand::rng()) {
                RetryDecision::RetryAt { due, .. } => assert!(due >= now),
                RetryDecision::GiveUp { .. } => {}
            }
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
        assert!(matches!(
            decide(&p, 5, t, t, &mut rand::rng()),
            RetryDecision::GiveUp { .. }
        ));
        let late = t.add(Duration::from_secs(11));
        assert!(matches!(
            decide(&p, 1, t, late, &mut rand::rng()),
            RetryDecision::GiveUp { .. }
        ));
        // Within budget but the wait would end past it.
        let edge = t.add(Duration::from_millis(9_990));
        assert!(matches!(
            decide(&p, 3, t, edge, &mut rand::rng()),
            RetryDecision::GiveUp { .. }
        ));
        let mut no_limit = p.clone();
        no_limit.max_elapsed = None;
        assert!(matches!(
            decide(&no_limit, 1, t, late, &mut rand::rng()),
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
            match decide(&p, attempt, now, now, &mut rand::rng()) {
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
