//! Slow start: the pool opens its running slots gradually, so a backlog does not reach the
//! downstreams all at once.
//!
//! After a restart, or a takeover whose leader replays the fires missed during an outage
//! (`fire_all`), or a burst of one-shots come due together, a pool at full concurrency would
//! send the whole backlog to its targets at once. The pool therefore starts at half its
//! concurrency and opens a tenth more every [`RAMP_STEP`] until all slots are open; and when
//! a backlog arrives while it runs (a first attempt starts [`BACKLOG_LATENESS`] or more after
//! its fire, when none in the steps before was late by more than [`ON_TIME_LATENESS`]), it
//! goes back to half and ramps up again. A lateness that grows step by step (the pool is
//! simply overloaded) does not count as a backlog arriving: halving then would only make it
//! worse. [`Ramp`] is the pure rule; [`ramp_loop`] applies it to the pool's running
//! semaphore, and the limit in force is reported (`scheduler_worker_concurrency_limit`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Shared;

/// How often the limit moves.
pub(super) const RAMP_STEP: Duration = Duration::from_secs(1);
/// A first attempt started at least this late marks a backlog.
pub(super) const BACKLOG_LATENESS: Duration = Duration::from_secs(10);
/// A step whose starts were all at most this late was on time.
pub(super) const ON_TIME_LATENESS: Duration = Duration::from_secs(1);

/// The slow start's rule: how many running slots are open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Ramp {
    full: usize,
    limit: usize,
    /// The last step's starts were on time (a backlog can arrive).
    on_time: bool,
}

impl Ramp {
    /// A pool of `full` slots, starting slow.
    pub(super) fn new(full: usize) -> Self {
        Ramp {
            full,
            limit: half(full),
            on_time: true,
        }
    }

    /// The slots open now.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// One step, given the largest lateness of a first attempt started during it (`None`:
    /// none started). Returns the new limit.
    pub(super) fn step(&mut self, lateness: Option<Duration>) -> usize {
        let late = lateness.unwrap_or(Duration::ZERO);
        if late >= BACKLOG_LATENESS && self.on_time && self.limit > half(self.full) {
            self.limit = half(self.full);
        } else if self.limit < self.full {
            self.limit = (self.limit + (self.full / 10).max(1)).min(self.full);
        }
        if lateness.is_some() {
            self.on_time = late <= ON_TIME_LATENESS;
        }
        self.limit
    }
}

fn half(full: usize) -> usize {
    (full / 2).max(1)
}

/// Applies the ramp to `running` (created with all `full` permits) until `stop`: closes the
/// slots above the limit as they come free and opens them again as the limit rises.
pub(super) async fn ramp_loop(sh: Arc<Shared>, running: Arc<Semaphore>, stop: CancellationToken) {
    let full = sh.cfg.concurrency;
    let mut ramp = Ramp::new(full);
    // Slots out of use: `forget_permits` takes only free ones, so a cut below what runs now
    // completes over the next steps, as attempts end.
    let mut closed = 0usize;
    loop {
        let target = full - ramp.limit();
        if closed < target {
            closed += running.forget_permits(target - closed);
        } else if closed > target {
            running.add_permits(closed - target);
            closed = target;
        }
        sh.reporter.on_concurrency_limit(ramp.limit());
        tokio::select! {
            _ = stop.cancelled() => {
                running.add_permits(closed);
                return;
            }
            _ = tokio::time::sleep(RAMP_STEP) => {}
        }
        let late = sh.start_lateness_ms.swap(-1, Ordering::Relaxed);
        let lateness = u64::try_from(late).ok().map(Duration::from_millis);
        let before = ramp.limit();
        let now = ramp.step(lateness);
        if now < before {
            tracing::info!(
                limit = now,
                lateness_ms = late,
                "a backlog arrived: running at half concurrency, ramping up again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    #[test]
    fn a_pool_starts_at_half_and_opens_a_tenth_a_step() {
        let mut r = Ramp::new(64);
        assert_eq!(r.limit(), 32);
        let limits: Vec<usize> = (0..6).map(|_| r.step(None)).collect();
        assert_eq!(limits, [38, 44, 50, 56, 62, 64]);
        assert_eq!(r.step(None), 64);
        // The smallest pools still ramp.
        let mut one = Ramp::new(1);
        assert_eq!((one.limit(), one.step(None)), (1, 1));
        let mut three = Ramp::new(3);
        assert_eq!(
            (three.limit(), three.step(None), three.step(None)),
            (1, 2, 3)
        );
    }

    #[test]
    fn a_backlog_arriving_halves_it_again_and_a_growing_lateness_does_not() {
        let mut r = Ramp::new(20);
        for _ in 0..10 {
            r.step(secs(0));
        }
        assert_eq!(r.limit(), 20);
        // Starts 30 s late right after on-time ones: a backlog arrived.
        assert_eq!(r.step(secs(30)), 10);
        // Still late while it drains: no second halving, the ramp goes on.
        assert_eq!(r.step(secs(25)), 12);
        for _ in 0..5 {
            r.step(secs(20));
        }
        assert_eq!(r.limit(), 20);
        // Overload: lateness creeping up from on time never halves.
        let mut o = Ramp::new(20);
        for _ in 0..10 {
            o.step(secs(0));
        }
        for late in [1, 2, 4, 8, 12, 16, 30] {
            assert_eq!(o.step(secs(late)), 20, "late {late} s");
        }
        // Steps without starts keep what the last one said.
        let mut q = Ramp::new(20);
        for _ in 0..10 {
            q.step(None);
        }
        assert_eq!(q.step(secs(30)), 10, "idle then a backlog");
    }
}
