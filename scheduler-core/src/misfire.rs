//! Planning what to run for fires that were missed (downtime, failover, a long pause in the
//! engine's loop).
//!
//! A pure function of the schedule, the engine's recorded progress and `now`, so a new leader
//! and the tests get the same answer. The policies (what a new leader does about fires nobody
//! made while no leader acted):
//!
//! * `fire_once` (default): one execution, for the latest missed fire, however old. A one-shot
//!   task (`at`, `delay`) missed during downtime therefore still runs, late, instead of
//!   vanishing silently.
//! * `fire_all`: every missed fire inside the catch-up window (default 10 min) runs, oldest
//!   first, at most [`MAX_CATCH_UP_FIRES`] (the newest are kept; the plan says when it cut).
//!   Fires older than the window are not replayed one by one; if *only* such fires were
//!   missed, one execution runs for the latest of them, so `fire_all` never does less than
//!   `fire_once`.
//! * `skip`: nothing runs; the schedule continues with the next future fire.
//!
//! In every case the plan counts the missed fires, those older than the window (the engine
//! alerts on them) and gives the next fire after `now`. Counting stops at
//! [`MAX_COUNTED_MISSES`] for schedules that must be walked fire by fire (cron); `every` is
//! counted arithmetically, exactly.

use std::collections::VecDeque;
use std::time::Duration;

use crate::schedule::CompiledSchedule;
use crate::task::MisfirePolicy;
use crate::time::UtcMillis;

/// Default catch-up window for `fire_all`, and the age beyond which a missed fire is alerted.
pub const DEFAULT_CATCH_UP_WINDOW: Duration = Duration::from_secs(600);
/// Longest catch-up window honoured; longer ones are clamped. With `every` at its 1 s minimum
/// this bounds a `fire_all` plan to walking 7 200 fires.
pub const MAX_CATCH_UP_WINDOW: Duration = Duration::from_secs(2 * 3600);
/// Most fires one `fire_all` plan runs.
pub const MAX_CATCH_UP_FIRES: usize = 1000;
/// Missed fires older than the window are counted up to this many (cron only).
pub const MAX_COUNTED_MISSES: u64 = 10_000;

/// Where a task stands on its schedule, as recorded in its state: the point from which
/// missed fires are counted. (Not the progress an `http.async` job reports.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleCursor {
    /// The last fire dispatched was due at this instant; later fires are candidates.
    LastFire(UtcMillis),
    /// The next fire was armed for this instant and has not been dispatched; it and later
    /// fires are candidates. For a task that never fired, use
    /// [`CompiledSchedule::first_fire`].
    NextDue(UtcMillis),
}

/// What to do now about missed fires.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MisfirePlan {
    /// Due instants to dispatch now, oldest first (each execution carries its due time).
    pub run_now: Vec<UtcMillis>,
    /// Fires that were due at or before `now` and not dispatched.
    pub missed: u64,
    /// Missed fires that are not run (`missed - run_now.len()`).
    pub skipped: u64,
    /// Missed fires older than the catch-up window; the engine alerts when this is not zero.
    pub beyond_window: u64,
    /// The oldest missed fire, for the alert's lateness.
    pub oldest_missed: Option<UtcMillis>,
    /// `missed` and `beyond_window` are lower bounds: counting stopped at
    /// [`MAX_COUNTED_MISSES`].
    pub count_capped: bool,
    /// `fire_all` found more fires in the window than [`MAX_CATCH_UP_FIRES`]; the oldest of
    /// them were dropped (counted in `skipped`).
    pub truncated: bool,
    /// The first fire after `now`; `None` when the schedule has no more fires.
    pub next_fire: Option<UtcMillis>,
}

impl MisfirePlan {
    /// Whether the engine should raise a misfire alert for this plan.
    pub fn needs_alert(&self) -> bool {
        self.beyond_window > 0 || self.truncated
    }
}

/// Plans missed fires: see the module documentation for each policy.
pub fn plan_misfires(
    policy: MisfirePolicy,
    schedule: &CompiledSchedule,
    anchor: UtcMillis,
    progress: ScheduleCursor,
    now: UtcMillis,
    catch_up_window: Duration,
) -> MisfirePlan {
    let from = match progress {
        ScheduleCursor::LastFire(t) => t,
        ScheduleCursor::NextDue(t) => UtcMillis(t.0.saturating_sub(1)),
    };
    let next_fire = schedule.next_after(from.max(now), anchor);
    if from >= now {
        return MisfirePlan {
            next_fire,
            ..MisfirePlan::default()
        };
    }
    let window = catch_up_window.min(MAX_CATCH_UP_WINDOW);
    // Fires at or after `window_start` are inside the window.
    let window_start = now.sub(window);
    let old_until = UtcMillis(window_start.0.saturating_sub(1)).max(from);

    let (beyond_window, count_capped) = count_between(schedule, anchor, from, old_until);

    // In-window fires, newest MAX_CATCH_UP_FIRES kept.
    let mut in_window: VecDeque<UtcMillis> = VecDeque::new();
    let mut in_window_count: u64 = 0;
    let mut cursor = old_until;
    while let Some(t) = schedule.next_after(cursor, anchor).filter(|t| *t <= now) {
        in_window_count += 1;
        if in_window.len() == MAX_CATCH_UP_FIRES {
            in_window.pop_front();
        }
        in_window.push_back(t);
        cursor = t;
    }

    let missed = beyond_window + in_window_count;
    if missed == 0 {
        return MisfirePlan {
            next_fire,
            ..MisfirePlan::default()
        };
    }
    let latest = match in_window.back() {
        Some(t) => Some(*t),
        None => latest_between(schedule, anchor, from, old_until),
    };
    let oldest_missed = schedule.next_after(from, anchor);
    let mut truncated = false;
    let run_now: Vec<UtcMillis> = match policy {
        MisfirePolicy::Skip => Vec::new(),
        MisfirePolicy::FireOnce => latest.into_iter().collect(),
        MisfirePolicy::FireAll if in_window.is_empty() => latest.into_iter().collect(),
        MisfirePolicy::FireAll => {
            truncated = in_window_count > in_window.len() as u64;
            in_window.into_iter().collect()
        }
    };
    MisfirePlan {
        skipped: missed.saturating_sub(run_now.len() as u64),
        run_now,
        missed,
        beyond_window,
        oldest_missed,
        count_capped,
        truncated,
        next_fire,
    }
}

/// Number of fires in `(from, until]`, and whether counting stopped at the cap.
fn count_between(
    s: &CompiledSchedule,
    anchor: UtcMillis,
    from: UtcMillis,
    until: UtcMillis,
) -> (u64, bool) {
    let Some(first) = s.next_after(from, anchor).filter(|t| *t <= until) else {
        return (0, false);
    };
    if let Some(i) = s.every_ms() {
        return (
            u64::try_from((until.0 - first.0) / i).unwrap_or(0) + 1,
            false,
        );
    }
    let mut n = 1;
    let mut cursor = first;
    while let Some(t) = s.next_after(cursor, anchor).filter(|t| *t <= until) {
        if n >= MAX_COUNTED_MISSES {
            return (n, true);
        }
        n += 1;
        cursor = t;
    }
    (n, false)
}

/// The last fire in `(from, until]`.
///
/// Walking forward from `from` could take millions of steps after a long outage, so this
/// looks at windows ending at `until`, doubling them until one holds a fire.
fn latest_between(
    s: &CompiledSchedule,
    anchor: UtcMillis,
    from: UtcMillis,
    until: UtcMillis,
) -> Option<UtcMillis> {
    s.next_after(from, anchor).filter(|t| *t <= until)?;
    if let Some(i) = s.every_ms() {
        let k = (until.0 - anchor.0) / i;
        return Some(UtcMillis(anchor.0 + k * i));
    }
    let mut width: i64 = 1000;
    loop {
        let lo = UtcMillis(until.0.saturating_sub(width)).max(from);
        let mut last = None;
        let mut cursor = lo;
        while let Some(t) = s.next_after(cursor, anchor).filter(|t| *t <= until) {
            last = Some(t);
            cursor = t;
        }
        if last.is_some() || lo == from {
            return last;
        }
        width = width.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Schedule;
    use proptest::prelude::*;

    const MIN: i64 = 60_000;

    fn every(secs: u64) -> CompiledSchedule {
        Schedule::Every(Duration::from_secs(secs))
            .compile()
            .unwrap()
    }

    fn cron(expr: &str) -> CompiledSchedule {
        Schedule::Cron {
            expr: expr.into(),
            timezone: "UTC".into(),
        }
        .compile()
        .unwrap()
    }

    #[test]
    fn nothing_missed() {
        let s = every(60);
        let p = plan_misfires(
            MisfirePolicy::FireAll,
            &s,
            UtcMillis(0),
            ScheduleCursor::LastFire(UtcMillis(60 * MIN)),
            UtcMillis(60 * MIN + 30_000),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(
            p,
            MisfirePlan {
                next_fire: Some(UtcMillis(61 * MIN)),
                ..MisfirePlan::default()
            }
        );
        assert!(!p.needs_alert());
    }

    #[test]
    fn each_policy_after_a_30_minute_outage() {
        // Every minute from 0; last fire at minute 10; now is minute 40 + 30 s.
        let s = every(60);
        let now = UtcMillis(40 * MIN + 30_000);
        let plan = |p| {
            plan_misfires(
                p,
                &s,
                UtcMillis(0),
                ScheduleCursor::LastFire(UtcMillis(10 * MIN)),
                now,
                DEFAULT_CATCH_UP_WINDOW,
            )
        };

        let once = plan(MisfirePolicy::FireOnce);
        assert_eq!(once.run_now, vec![UtcMillis(40 * MIN)]);
        assert_eq!((once.missed, once.skipped), (30, 29));
        // Minutes 11..=30 are older than 10 min (window starts at 30:30).
        assert_eq!(once.beyond_window, 20);
        assert_eq!(once.oldest_missed, Some(UtcMillis(11 * MIN)));
        assert_eq!(once.next_fire, Some(UtcMillis(41 * MIN)));
        assert!(once.needs_alert());

        let all = plan(MisfirePolicy::FireAll);
        assert_eq!(
            all.run_now,
            (31..=40).map(|m| UtcMillis(m * MIN)).collect::<Vec<_>>()
        );
        assert_eq!((all.missed, all.skipped, all.truncated), (30, 20, false));

        let skip = plan(MisfirePolicy::Skip);
        assert!(skip.run_now.is_empty());
        assert_eq!((skip.missed, skip.skipped), (30, 30));
        assert_eq!(skip.next_fire, Some(UtcMillis(41 * MIN)));
    }

    #[test]
    fn one_shot_missed_long_ago_still_runs_once() {
        let s = Schedule::At(UtcMillis(1_000)).compile().unwrap();
        for policy in [MisfirePolicy::FireOnce, MisfirePolicy::FireAll] {
            let p = plan_misfires(
                policy,
                &s,
                UtcMillis(0),
                ScheduleCursor::NextDue(UtcMillis(1_000)),
                UtcMillis(10_000_000),
                DEFAULT_CATCH_UP_WINDOW,
            );
            assert_eq!(p.run_now, vec![UtcMillis(1_000)], "{policy:?}");
            assert_eq!((p.missed, p.beyond_window, p.next_fire), (1, 1, None));
        }
        let p = plan_misfires(
            MisfirePolicy::Skip,
            &s,
            UtcMillis(0),
            ScheduleCursor::NextDue(UtcMillis(1_000)),
            UtcMillis(10_000_000),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!((p.run_now.len(), p.skipped), (0, 1));
        // Not due yet: nothing missed.
        let p = plan_misfires(
            MisfirePolicy::FireOnce,
            &s,
            UtcMillis(0),
            ScheduleCursor::NextDue(UtcMillis(1_000)),
            UtcMillis(999),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!((p.missed, p.next_fire), (0, Some(UtcMillis(1_000))));
    }

    #[test]
    fn fire_all_is_capped_and_says_so() {
        let s = every(1);
        let now = UtcMillis(3 * 3600 * 1000);
        let p = plan_misfires(
            MisfirePolicy::FireAll,
            &s,
            UtcMillis(0),
            ScheduleCursor::LastFire(UtcMillis(0)),
            now,
            Duration::from_secs(1800),
        );
        assert_eq!(p.run_now.len(), MAX_CATCH_UP_FIRES);
        assert_eq!(p.run_now.last(), Some(&now));
        assert!(p.truncated && p.needs_alert());
        assert_eq!(p.missed, 3 * 3600);
        assert_eq!(p.skipped, 3 * 3600 - 1000);
    }

    #[test]
    fn cron_counting_is_capped_but_latest_is_exact() {
        // Every second for two days; the window is 10 min.
        let s = cron("* * * * * *");
        let now = UtcMillis(2 * 86_400_000);
        let p = plan_misfires(
            MisfirePolicy::FireOnce,
            &s,
            UtcMillis(0),
            ScheduleCursor::LastFire(UtcMillis(0)),
            now,
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(p.run_now, vec![now]);
        assert!(p.count_capped);
        assert_eq!(p.beyond_window, MAX_COUNTED_MISSES);
        // A sparse cron with only old misses: the latest is found without walking every fire.
        let daily = cron("0 0 3 * * *");
        let p = plan_misfires(
            MisfirePolicy::FireAll,
            &daily,
            UtcMillis(0),
            ScheduleCursor::LastFire(UtcMillis(0)),
            UtcMillis(400 * 86_400_000),
            DEFAULT_CATCH_UP_WINDOW,
        );
        assert_eq!(p.run_now, vec![UtcMillis(399 * 86_400_000 + 3 * 3_600_000)]);
        assert_eq!(
            (p.missed, p.beyond_window, p.count_capped),
            (400, 400, false)
        );
    }

    /// Reference: walk every fire in (from, now].
    fn reference(
        policy: MisfirePolicy,
        s: &CompiledSchedule,
        anchor: UtcMillis,
        from: UtcMillis,
        now: UtcMillis,
        window: Duration,
    ) -> (Vec<UtcMillis>, u64, u64, Option<UtcMillis>) {
        let mut all = Vec::new();
        let mut c = from;
        while let Some(t) = s.next_after(c, anchor).filter(|t| *t <= now) {
            all.push(t);
            c = t;
        }
        let start = now.sub(window);
        let in_win: Vec<UtcMillis> = all.iter().copied().filter(|t| *t >= start).collect();
        let old = (all.len() - in_win.len()) as u64;
        let run = match policy {
            MisfirePolicy::Skip => vec![],
            MisfirePolicy::FireOnce => all.last().copied().into_iter().collect(),
            MisfirePolicy::FireAll if in_win.is_empty() => {
                all.last().copied().into_iter().collect()
            }
            MisfirePolicy::FireAll => {
                in_win[in_win.len().saturating_sub(MAX_CATCH_UP_FIRES)..].to_vec()
            }
        };
        (
            run,
            all.len() as u64,
            old,
            s.next_after(from.max(now), anchor),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn matches_reference(
            policy in prop_oneof![Just(MisfirePolicy::FireOnce), Just(MisfirePolicy::FireAll), Just(MisfirePolicy::Skip)],
            kind in 0..4usize,
            anchor in 0i64..100_000,
            from_off in 0i64..3_000_000,
            span in 0i64..3_000_000,
            window_s in 1u64..1500,
            next_due in any::<bool>(),
        ) {
            let s = match kind {
                0 => every(7),
                1 => every(90),
                2 => cron("*/20 * * * * *"),
                _ => Schedule::Delay(Duration::from_secs(100)).compile().unwrap(),
            };
            let anchor = UtcMillis(anchor);
            let mark = UtcMillis(anchor.0 + from_off);
            let now = UtcMillis(mark.0 + span);
            let window = Duration::from_secs(window_s);
            let (progress, from) = if next_due {
                (ScheduleCursor::NextDue(mark), UtcMillis(mark.0 - 1))
            } else {
                (ScheduleCursor::LastFire(mark), mark)
            };
            let plan = plan_misfires(policy, &s, anchor, progress, now, window);
            let (run, missed, old, next) = reference(policy, &s, anchor, from, now, window);
            prop_assert_eq!(&plan.run_now, &run);
            prop_assert_eq!(plan.missed, missed);
            prop_assert_eq!(plan.beyond_window, old);
            prop_assert_eq!(plan.skipped, missed - run.len() as u64);
            prop_assert_eq!(plan.next_fire, next);
            prop_assert!(!plan.count_capped);
            prop_assert!(plan.run_now.iter().all(|t| *t > from && *t <= now));
        }
    }
}
