//! The leader's watch on its own clock while it leads.
//!
//! The role checks its clock against etcd's before it campaigns; a clock that goes wrong
//! afterwards (an NTP step, a VM resumed) would make the leader fire early or late for
//! everyone while replicas with a right clock stand by. So, while a term runs, the clock it
//! fires by is checked again every [`WATCH_EVERY`], and at once when its reading jumps
//! ahead of the monotonic clock by more than half of `max_clock_skew` (a forward step makes
//! everything due until then fire at once: the sooner it is caught, the fewer fire early).
//! Past `max_clock_skew` the term gives its key up ([`super::End::ClockSkew`]), with an
//! error line, a metric and an alert; the replica campaigns again once its clock agrees.
//!
//! The watch is a task beside the term's loop, so a slow check never delays a fire; it
//! reads the clock every [`JUMP_POLL`], which is cheap. The fire path looks for a jump too
//! ([`Jumps`], at every round): after one, it checks before it fires, so a forward step past
//! the bound fires nothing early (a step under it, within what the cluster tolerates, does).

use std::sync::Arc;
use std::time::Duration;

use ax_alerting::Alert;
use ax_scheduler_core::UtcMillis;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use crate::clock::{Clock, ClockProbe};
use crate::deps::TermDeps;
use crate::metrics::Backend;

/// How often a leader checks its clock against etcd's: one small HTTP request, and a drift
/// that makes no jump fires early (or late) until the next check.
pub(super) const WATCH_EVERY: Duration = Duration::from_secs(2);

/// How often the watch reads the clock for a jump; how long the fire path waits before it
/// tries again a check that could not be made.
pub(super) const JUMP_POLL: Duration = Duration::from_millis(200);

/// The `reason` of `scheduler_leader_step_downs_total` for a leader whose clock drifted.
pub(crate) const STEP_DOWN_CLOCK: &str = "clock_skew";

/// A forward jump of a clock against the monotonic one: the reading advanced more than the
/// time that passed, by more than half of `max_clock_skew`, since the last read.
pub(super) struct Jumps {
    last: Option<(UtcMillis, Instant)>,
    threshold_ms: i64,
    /// A jump was seen and no check has said the clock agrees since: the fire path holds.
    pub(super) unverified: bool,
}

impl Jumps {
    /// No read yet; jumps of more than half of `max_skew` count.
    pub(super) fn new(max_skew: Duration) -> Self {
        Jumps {
            last: None,
            threshold_ms: i64::try_from(max_skew.as_millis() / 2).unwrap_or(i64::MAX),
            unverified: false,
        }
    }

    /// Whether `now`, read at the monotonic instant `at`, jumped ahead since the last read.
    pub(super) fn jumped(&mut self, now: UtcMillis, at: Instant) -> bool {
        let Some((then, then_at)) = self.last.replace((now, at)) else {
            return false;
        };
        let real_ms =
            i64::try_from(at.saturating_duration_since(then_at).as_millis()).unwrap_or(i64::MAX);
        now.0.saturating_sub(then.0).saturating_sub(real_ms) > self.threshold_ms
    }
}

/// What a check of the clock against etcd's found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Checked {
    /// Within `max_clock_skew`.
    Agrees,
    /// Past it: the term gives its key up.
    Off,
    /// No answer (etcd's HTTP listener did not answer in time).
    Unknown,
}

/// Checks the term's clock against etcd's now; past `max_skew`, gives the key up (cancels
/// `off`, with an error line, the metric and an alert). A check that cannot be made changes
/// nothing here: the periodic watch guards against a bad clock, not a bad etcd (the lease
/// says whether etcd answers), as the campaign's check does; the fire path, after a jump,
/// holds until one can be made.
pub(super) async fn check_now(
    probe: &dyn ClockProbe,
    deps: &TermDeps,
    max_skew: Duration,
    off: &CancellationToken,
    jumped: bool,
) -> Checked {
    let clock: &dyn Clock = &*deps.clock;
    let skew = match probe.skew(clock).await {
        Ok(skew) => skew,
        Err(e) => {
            debug!(error = %e, "cannot check the leader's clock against etcd's");
            return Checked::Unknown;
        }
    };
    if skew.abs() <= max_skew.as_secs_f64() {
        return Checked::Agrees;
    }
    error!(
        skew_seconds = skew,
        max_seconds = max_skew.as_secs_f64(),
        jumped,
        "the leader's clock is off etcd's by more than scheduler.max_clock_skew: giving the key up so that a replica with a right clock leads; fix NTP on this host"
    );
    deps.metrics.stepped_down(STEP_DOWN_CLOCK);
    if let Some(alerts) = &deps.alerts {
        alerts.send(Alert::backend_unavailable(
            Backend::Etcd.label(),
            &format!(
                "the leader's clock is {skew:+.1} s off etcd's (scheduler.max_clock_skew {max_skew:?}); it gave its key up"
            ),
            0,
            Duration::ZERO,
            clock.now(),
        ));
    }
    off.cancel();
    Checked::Off
}

/// Watches the term's clock until `stop`; cancels `off` (and returns) when it is off
/// etcd's by more than `max_skew`.
pub(super) async fn run(
    probe: Arc<dyn ClockProbe>,
    deps: TermDeps,
    max_skew: Duration,
    off: CancellationToken,
    stop: CancellationToken,
) {
    let mut jumps = Jumps::new(max_skew);
    jumps.jumped(deps.clock.now(), Instant::now());
    let mut next_check = Instant::now() + WATCH_EVERY;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(JUMP_POLL) => {}
        }
        let at = Instant::now();
        let jumped = jumps.jumped(deps.clock.now(), at);
        if !jumped && at < next_check {
            continue;
        }
        next_check = at + WATCH_EVERY;
        if check_now(&*probe, &deps, max_skew, &off, jumped).await == Checked::Off {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::fakes::{self, ReferenceProbe, SteppedClock};
    use std::sync::atomic::Ordering;

    /// Runs the watch on a clock stepped ahead by each `(after, ms)` in turn (a wait, then a
    /// step); how long after the last step it gave the key up, if it did within 30 s.
    async fn watch(steps: &[(Duration, i64)]) -> Option<Duration> {
        let start = Instant::now();
        let clock = Arc::new(SteppedClock::new(start, 1_000_000));
        let mut deps = fakes::term_deps();
        deps.clock = clock.clone();
        let probe = Arc::new(ReferenceProbe::new(start, 1_000_000));
        let (off, stop) = (CancellationToken::new(), CancellationToken::new());
        let task = tokio::spawn(run(
            probe,
            deps,
            Duration::from_secs(2),
            off.clone(),
            stop.clone(),
        ));
        for (after, ms) in steps {
            tokio::time::sleep(*after).await;
            clock.step.fetch_add(*ms, Ordering::SeqCst);
        }
        let stepped = Instant::now();
        let seen = tokio::time::timeout(Duration::from_secs(30), off.cancelled())
            .await
            .ok()
            .map(|()| stepped.elapsed());
        stop.cancel();
        let _ = task.await;
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn a_forward_step_past_the_bound_is_caught_at_once() {
        let seen = watch(&[(Duration::from_millis(1_100), 10_000)]).await;
        let seen = seen.expect("the leader gave its key up");
        assert!(seen <= JUMP_POLL, "caught {seen:?} after the step");
    }

    #[tokio::test(start_paused = true)]
    async fn a_drift_without_a_jump_is_caught_at_the_next_check() {
        // A drift comes in steps under the jump's threshold (half the bound: 1 s), so only
        // the periodic check sees it: 900 ms ahead at a time, 1 s apart; 1.8 s is within
        // the bound, 2.7 s is not.
        let seen = watch(&[(Duration::from_secs(1), 900); 3]).await;
        let seen = seen.expect("the leader gave its key up");
        assert!(seen <= WATCH_EVERY, "caught {seen:?} after the last step");
    }

    #[tokio::test(start_paused = true)]
    async fn a_right_clock_or_a_small_step_keeps_the_key() {
        assert_eq!(watch(&[(Duration::from_secs(1), 1_500)]).await, None);
    }
}
