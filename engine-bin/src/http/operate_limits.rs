//! Operate actions (pause, resume, run now, backfill, kill, requeue; of tasks, namespaces
//! and queues) per caller and per target through one replica's API.
//!
//! Each of these writes to etcd, and an `operate` token may call them in a loop: a backfill
//! writes up to `limits.max_backfill_fires` keys, and even a cheap pause writes a spec and
//! an audit record. Two token buckets bound them, one per caller (the token's name) and one
//! per task (a namespace action counts for the namespace), each at
//! `limits.operate_actions_per_minute` with a minute's burst, both bounded in the keys they
//! track (the `PerMinute` of the run-now limiter). A refusal is a 429 whose message names
//! the limit and whose `Retry-After` says when to try again. Dry runs write nothing and are
//! not counted.

use std::sync::Arc;

use ax_scheduler_core::UtcMillis;

use super::limits::{crowded, rate_limited, PerMinute, Refused};
use ax_control::api::{ApiError, Principal};

/// Callers whose rate is tracked at once: far above the tokens an install configures.
const MAX_TRACKED_CALLERS: usize = 1024;
/// Tasks (or namespaces) whose operate rate is tracked at once.
const MAX_TRACKED_TARGETS: usize = 10_000;

/// The operate-action rate of callers and of tasks.
#[derive(Clone, Debug)]
pub struct OperateLimiter {
    callers: PerMinute<Arc<str>>,
    targets: PerMinute<String>,
}

impl OperateLimiter {
    /// At most `per_minute` operate actions per caller and per target per minute.
    pub fn new(per_minute: u32) -> Self {
        OperateLimiter {
            callers: PerMinute::new(per_minute, MAX_TRACKED_CALLERS),
            targets: PerMinute::new(per_minute, MAX_TRACKED_TARGETS),
        }
    }

    /// Admits one operate action of `who` on `target` (`namespace/id`, or `namespace/*` for
    /// a namespace) at `now`, or refuses with 429.
    pub fn admit(&self, who: &Principal, target: &str, now: UtcMillis) -> Result<(), ApiError> {
        let per_minute = self.callers.per_minute();
        self.callers
            .take(&who.name, now)
            .map_err(|refused| match refused {
                Refused::Rate(wait_s) => rate_limited(
                    format!(
                        "caller `{}` made {per_minute} operate actions (pause, resume, run now, \
                         backfill, kill, requeue) in the last minute, the limit \
                         (limits.operate_actions_per_minute); try again in {wait_s} s",
                        who.name
                    ),
                    wait_s,
                ),
                Refused::Crowded(wait_s) => crowded("callers", wait_s),
            })?;
        self.targets
            .take(&target.to_owned(), now)
            .map_err(|refused| match refused {
                Refused::Rate(wait_s) => rate_limited(
                    format!(
                        "{target} had {per_minute} operate actions (pause, resume, run now, \
                         backfill, kill, requeue) in the last minute, the limit \
                         (limits.operate_actions_per_minute); try again in {wait_s} s"
                    ),
                    wait_s,
                ),
                Refused::Crowded(wait_s) => crowded("tasks operated on", wait_s),
            })
    }
}

/// The read rate of callers: every `GET` of `/api/v1` and every dry run, per caller (the
/// token's name), at `limits.reads_per_minute` with a minute's burst. Reads are cheap one by
/// one, but some cost a scan (a listing, the status of every queue) and a token in a loop
/// must not hold etcd or Redis.
#[derive(Clone, Debug)]
pub struct ReadLimiter(PerMinute<Arc<str>>);

impl ReadLimiter {
    /// At most `per_minute` reads per caller per minute.
    pub fn new(per_minute: u32) -> Self {
        ReadLimiter(PerMinute::new(per_minute, MAX_TRACKED_CALLERS))
    }

    /// Admits one read of `who` at `now`, or refuses with 429.
    pub fn admit(&self, who: &Principal, now: UtcMillis) -> Result<(), ApiError> {
        let per_minute = self.0.per_minute();
        self.0
            .take(&who.name, now)
            .map_err(|refused| match refused {
                Refused::Rate(wait_s) => rate_limited(
                    format!(
                        "caller `{}` made {per_minute} reads in the last minute, the limit \
                     (limits.reads_per_minute); try again in {wait_s} s",
                        who.name
                    ),
                    wait_s,
                ),
                Refused::Crowded(wait_s) => crowded("callers", wait_s),
            })
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;
    use ax_control::api::TokenRole;

    fn who(name: &str) -> Principal {
        Principal {
            name: name.into(),
            role: TokenRole::Operate,
        }
    }

    #[test]
    fn operate_actions_are_limited_per_caller_and_per_task() {
        let l = OperateLimiter::new(2);
        let t0 = UtcMillis(0);
        l.admit(&who("a"), "ns/x", t0).unwrap();
        l.admit(&who("a"), "ns/y", t0).unwrap();
        let e = l.admit(&who("a"), "ns/z", t0).unwrap_err();
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(e.to_string().contains("caller `a`"), "{e}");
        assert!(
            e.to_string().contains("limits.operate_actions_per_minute"),
            "{e}"
        );
        assert_eq!(e.retry_after_s(), Some(30));
        // Another caller on a task already at its rate.
        l.admit(&who("b"), "ns/x", t0).unwrap();
        let e = l.admit(&who("c"), "ns/x", t0).unwrap_err();
        assert!(e.to_string().starts_with("ns/x had 2"), "{e}");
        // A minute later both buckets are full again.
        l.admit(&who("a"), "ns/x", UtcMillis(60_000)).unwrap();
    }
}
