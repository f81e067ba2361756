//! A per-task circuit breaker over a sliding window of outcomes.
//!
//! The rule: when more than half of a task's executions failed within the last five
//! minutes, dispatch slows to a tenth (one fire in ten is enqueued, the others are skipped and
//! counted) and an alert is raised once when the breaker opens. It closes again when the
//! window's failure ratio drops back to the threshold or below.
//!
//! The window is kept as per-second buckets in a ring, so memory is fixed per task (300
//! buckets of two counters at the default window, and only for tasks that have run) and an
//! update is O(1) amortized. Time comes in as [`UtcMillis`]; the breaker reads no clock.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::UtcMillis;

/// An open breaker as the task's state records it, so that the CLI, the API and the console
/// can say the task is throttled and why, instead of showing a plain SCHEDULED.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttle {
    /// When the breaker opened.
    pub since: UtcMillis,
    /// Failures in the window when it opened.
    pub failures: u32,
    /// Executions in the window when it opened.
    pub executions: u32,
    /// One fire in this many is dispatched while it stays open.
    pub dispatch_every: u32,
}

/// Breaker settings; the defaults open when more than half of at least 4 executions in the
/// last 5 minutes failed.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerConfig {
    /// Length of the sliding window.
    pub window: Duration,
    /// The breaker opens when failures / executions in the window is above this.
    pub failure_ratio: f64,
    /// No judgement on fewer executions than this in the window (one failure out of one
    /// run is no trend).
    pub min_executions: u32,
    /// While open, one fire in this many is dispatched.
    pub open_dispatch_every: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(300),
            failure_ratio: 0.5,
            min_executions: 4,
            open_dispatch_every: 10,
        }
    }
}

/// What the dispatcher should do with a fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Dispatch it.
    Dispatch,
    /// Skip it: the breaker is open and this is not the one fire in N that goes through.
    Skip,
}

/// A state change worth an alert or a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The failure ratio went above the threshold.
    Opened {
        /// Failures in the window.
        failures: u32,
        /// Executions in the window.
        executions: u32,
    },
    /// The failure ratio came back to the threshold or below.
    Closed,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    second: i64,
    executions: u32,
    failures: u32,
}

/// The breaker of one task.
#[derive(Clone, Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    buckets: VecDeque<Bucket>,
    executions: u32,
    failures: u32,
    open: bool,
    skipped_since_dispatch: u32,
}

impl CircuitBreaker {
    /// A closed breaker with no history.
    pub fn new(config: BreakerConfig) -> Self {
        CircuitBreaker {
            config,
            buckets: VecDeque::new(),
            executions: 0,
            failures: 0,
            open: false,
            skipped_since_dispatch: 0,
        }
    }

    /// One fire in this many is dispatched while open.
    pub fn dispatch_every(&self) -> u32 {
        self.config.open_dispatch_every.max(1)
    }

    /// Whether dispatch is currently slowed.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Executions and failures inside the window as of the last update.
    pub fn counts(&self) -> (u32, u32) {
        (self.executions, self.failures)
    }

    /// Records one finished execution and returns the transition it caused, if any.
    pub fn record(&mut self, succeeded: bool, now: UtcMillis) -> Option<Transition> {
        self.expire(now);
        let second = now.0.div_euclid(1000);
        match self.buckets.back_mut() {
            Some(b) if b.second == second => {
                b.executions += 1;
                b.failures += u32::from(!succeeded);
            }
            _ => self.buckets.push_back(Bucket {
                second,
                executions: 1,
                failures: u32::from(!succeeded),
            }),
        }
        self.executions += 1;
        self.failures += u32::from(!succeeded);
        self.judge()
    }

    /// Decides whether a fire at `now` is dispatched, and returns any transition caused by
    /// old outcomes leaving the window.
    pub fn admit(&mut self, now: UtcMillis) -> (Admission, Option<Transition>) {
        self.expire(now);
        let transition = self.judge();
        if !self.open {
            return (Admission::Dispatch, transition);
        }
        let every = self.config.open_dispatch_every.max(1);
        if self.skipped_since_dispatch + 1 >= every {
            self.skipped_since_dispatch = 0;
            (Admission::Dispatch, transition)
        } else {
            self.skipped_since_dispatch += 1;
            (Admission::Skip, transition)
        }
    }

    fn expire(&mut self, now: UtcMillis) {
        let window_secs = i64::try_from(self.config.window.as_secs()).unwrap_or(i64::MAX);
        let oldest_kept = now.0.div_euclid(1000).saturating_sub(window_secs) + 1;
        while let Some(front) = self.buckets.front() {
            if front.second >= oldest_kept {
                break;
            }
            self.executions -= front.executions;
            self.failures -= front.failures;
            self.buckets.pop_front();
        }
    }

    fn judge(&mut self) -> Option<Transition> {
        let tripped = self.executions >= self.config.min_executions
            && f64::from(self.failures) > self.config.failure_ratio * f64::from(self.executions);
        match (self.open, tripped) {
            (false, true) => {
                self.open = true;
                // The first fire after opening goes through at the slowed rate's end, not
                // at once: count it as the start of a fresh cycle.
                self.skipped_since_dispatch = 0;
                Some(Transition::Opened {
                    failures: self.failures,
                    executions: self.executions,
                })
            }
            (true, false) => {
                self.open = false;
                Some(Transition::Closed)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> UtcMillis {
        UtcMillis(1_700_000_000_000 + secs * 1000)
    }

    #[test]
    fn opens_above_half_and_slows_to_a_tenth() {
        let mut b = CircuitBreaker::new(BreakerConfig::default());
        assert_eq!(b.record(false, at(0)), None, "too few executions to judge");
        assert_eq!(b.record(true, at(1)), None);
        assert_eq!(b.record(false, at(2)), None);
        // 2 of 4 failed: exactly half is not above half.
        assert_eq!(b.record(true, at(3)), None);
        assert!(!b.is_open());
        assert_eq!(
            b.record(false, at(4)),
            Some(Transition::Opened {
                failures: 3,
                executions: 5
            })
        );
        let dispatched = (0..100)
            .filter(|i| b.admit(at(5 + i)).0 == Admission::Dispatch)
            .count();
        assert_eq!(dispatched, 10);
    }

    #[test]
    fn closes_when_failures_leave_the_window() {
        let mut b = CircuitBreaker::new(BreakerConfig::default());
        for s in 0..5 {
            b.record(false, at(s));
        }
        assert!(b.is_open());
        // Everything recorded at 0..5 s has left a 300 s window by 305 s.
        let (admission, transition) = b.admit(at(305));
        assert_eq!(transition, Some(Transition::Closed));
        assert_eq!(admission, Admission::Dispatch);
        assert_eq!(b.counts(), (0, 0));
    }

    #[test]
    fn successes_close_it_again() {
        let mut b = CircuitBreaker::new(BreakerConfig::default());
        for s in 0..4 {
            b.record(false, at(s));
        }
        assert!(b.is_open());
        for s in 4..7 {
            assert_eq!(b.record(true, at(s)), None);
        }
        // 4 failures of 8: not above half any more.
        assert_eq!(b.record(true, at(7)), Some(Transition::Closed));
    }

    #[test]
    fn window_counts_match_a_plain_recount() {
        let mut b = CircuitBreaker::new(BreakerConfig::default());
        let mut log = Vec::new();
        for i in 0..2000i64 {
            let t = at(i * 7 / 10);
            let ok = i % 3 != 0;
            b.record(ok, t);
            log.push((t, ok));
            let lo = t.0.div_euclid(1000) - 300;
            let inside: Vec<_> = log
                .iter()
                .filter(|(s, _)| s.0.div_euclid(1000) > lo)
                .collect();
            let fails = inside.iter().filter(|(_, ok)| !ok).count() as u32;
            assert_eq!(b.counts(), (inside.len() as u32, fails));
        }
    }
}
