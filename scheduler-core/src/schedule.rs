//! Compiled schedules and next-fire computation.
//!
//! A [`Schedule`] is data as the user wrote it; [`CompiledSchedule`] is the same schedule made
//! ready to evaluate: the cron expression parsed once, the time zone resolved once. The engine
//! compiles when a spec is registered or changed and then asks `next_after` on every fire, so
//! evaluation never re-parses and never fails for a reason validation could have caught.
//!
//! All answers are "the first fire strictly after `after`", which makes the engine's loop
//! simple (`next = next_after(last_fire)`) and makes a fire at exactly `after` never repeat.
//! `anchor` is the instant a countdown starts: the spec's `created_at` or, for a spec written
//! without one, the instant the engine first recorded the task (kept in `TaskState::anchor_at`
//! so a failover does not restart it). Cron expressions and time zones, including ax's DST
//! rule, live in `cron.rs`.

use std::time::Duration;

use crate::cron::CronSchedule;
use crate::error::CoreError;
use crate::task::{Schedule, MAX_SCHEDULE_DURATION, MIN_EVERY};
use crate::time::UtcMillis;
use crate::validate::{FieldError, ValidationErrors};

/// A [`Schedule`] ready to evaluate. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CompiledSchedule {
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    At(UtcMillis),
    Delay(i64),
    Every(i64),
    Cron(Box<CronSchedule>),
    /// Fires only when its parents finish (see [`crate::workflow`]): never by the clock.
    Never,
}

impl Schedule {
    /// Whether the schedule fires more than once (`every`, `cron`).
    pub fn is_periodic(&self) -> bool {
        matches!(self, Schedule::Every(_) | Schedule::Cron { .. })
    }

    /// Checks and compiles the schedule (cron parsed and zone resolved once).
    pub fn compile(&self) -> Result<CompiledSchedule, CoreError> {
        self.compile_checked()
            .map_err(|errors| CoreError::Invalid(ValidationErrors::from(errors)))
    }

    /// The same, with errors as field errors under `schedule.`.
    pub(crate) fn compile_checked(&self) -> Result<CompiledSchedule, Vec<FieldError>> {
        let kind = match self {
            Schedule::At(t) => Kind::At(*t),
            Schedule::Delay(d) => Kind::Delay(positive_ms(*d, "schedule.delay", Duration::ZERO)?),
            Schedule::Every(d) => Kind::Every(positive_ms(*d, "schedule.every", MIN_EVERY)?),
            Schedule::Cron { expr, timezone } => {
                let cron = CronSchedule::new(expr, timezone).map_err(|es| {
                    es.into_iter()
                        .map(|(field, reason)| FieldError::new(format!("schedule.{field}"), reason))
                        .collect::<Vec<_>>()
                })?;
                Kind::Cron(Box::new(cron))
            }
            Schedule::Dependent => Kind::Never,
        };
        Ok(CompiledSchedule { kind })
    }
}

/// A duration in whole milliseconds, at least `min` and above zero.
fn positive_ms(d: Duration, path: &str, min: Duration) -> Result<i64, Vec<FieldError>> {
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    if ms <= 0 {
        return Err(vec![FieldError::new(
            path,
            "must be at least 1ms; a zero duration has no meaning here",
        )]);
    }
    if d < min {
        return Err(vec![FieldError::new(
            path,
            format!(
                "{} is below the minimum of {}",
                humantime::format_duration(d),
                humantime::format_duration(min)
            ),
        )]);
    }
    if d > MAX_SCHEDULE_DURATION {
        return Err(vec![FieldError::new(
            path,
            format!(
                "{} is above the limit of {}; use `at` for an instant that far away",
                humantime::format_duration(d),
                humantime::format_duration(MAX_SCHEDULE_DURATION)
            ),
        )]);
    }
    Ok(ms)
}

impl CompiledSchedule {
    /// The first fire strictly after `after`; `None` when the schedule has no more fires.
    ///
    /// * `at(t)`: `t`, if `t > after`.
    /// * `delay(d)`: `anchor + d`, if that is `> after`.
    /// * `every(i)`: the smallest `anchor + k*i` (`k >= 1`) that is `> after`.
    /// * `cron`: the next match in the zone, by the DST rule in `docs/tasks.md`.
    pub fn next_after(&self, after: UtcMillis, anchor: UtcMillis) -> Option<UtcMillis> {
        match &self.kind {
            Kind::At(t) => (*t > after).then_some(*t),
            Kind::Delay(d) => {
                let t = anchor.0.checked_add(*d)?;
                (t > after.0).then_some(UtcMillis(t))
            }
            Kind::Every(i) => {
                let first = anchor.0.checked_add(*i)?;
                if first > after.0 {
                    return Some(UtcMillis(first));
                }
                let k = (i128::from(after.0) - i128::from(anchor.0)) / i128::from(*i) + 1;
                let t = i128::from(anchor.0) + k * i128::from(*i);
                i64::try_from(t).ok().map(UtcMillis)
            }
            Kind::Cron(c) => c.next_after(after.0).map(UtcMillis),
            Kind::Never => None,
        }
    }

    /// The first fire of a task recorded at `anchor` that has never fired.
    ///
    /// Unlike `next_after(anchor, anchor)` this returns an `at` instant that lies before the
    /// anchor: a one-shot task registered late still fires (the misfire policy decides how).
    pub fn first_fire(&self, anchor: UtcMillis) -> Option<UtcMillis> {
        match &self.kind {
            Kind::At(t) => Some(*t),
            Kind::Never => None,
            _ => self.next_after(anchor, anchor),
        }
    }

    /// The fires in `from ..= to`, oldest first, at most `limit` of them (a backfill: what the
    /// schedule would have fired then). A one-shot's instant counts when it lies in the range.
    pub fn fires_between(
        &self,
        from: UtcMillis,
        to: UtcMillis,
        anchor: UtcMillis,
        limit: usize,
    ) -> Vec<UtcMillis> {
        let mut out = Vec::new();
        let first = match &self.kind {
            Kind::At(t) => Some(*t).filter(|t| *t >= from),
            _ => self.next_after(UtcMillis(from.0.saturating_sub(1)), anchor),
        };
        let mut next = first;
        while let Some(t) = next {
            if t > to || out.len() >= limit {
                break;
            }
            out.push(t);
            next = self.next_after(t, anchor);
        }
        out
    }

    /// Up to `n` fires after `after`, in order (for previews such as `ax task put --dry-run`).
    pub fn upcoming(&self, after: UtcMillis, anchor: UtcMillis, n: usize) -> Vec<UtcMillis> {
        let mut out = Vec::with_capacity(n.min(64));
        let mut cursor = after;
        while out.len() < n {
            match self.next_after(cursor, anchor) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }

    /// The interval of an `every` schedule, which allows arithmetic instead of iteration.
    pub(crate) fn every_ms(&self) -> Option<i64> {
        match self.kind {
            Kind::Every(i) => Some(i),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone};
    use chrono_tz::Tz;

    fn cron(expr: &str, tz: &str) -> CompiledSchedule {
        Schedule::Cron {
            expr: expr.into(),
            timezone: tz.into(),
        }
        .compile()
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    /// An instant from a UTC wall-clock time.
    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> UtcMillis {
        let n = NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|d| d.and_hms_opt(h, mi, s))
            .unwrap();
        UtcMillis(n.and_utc().timestamp_millis())
    }

    #[test]
    fn a_backfill_range_takes_the_fires_in_it_inclusive_oldest_first_up_to_the_limit() {
        let daily = cron("0 30 2 * * *", "UTC");
        let fires = daily.fires_between(
            utc(2026, 11, 1, 2, 30, 0),
            utc(2026, 11, 4, 2, 30, 0),
            UtcMillis(0),
            100,
        );
        assert_eq!(
            fires,
            [
                utc(2026, 11, 1, 2, 30, 0),
                utc(2026, 11, 2, 2, 30, 0),
                utc(2026, 11, 3, 2, 30, 0),
                utc(2026, 11, 4, 2, 30, 0)
            ]
        );
        assert_eq!(
            daily
                .fires_between(
                    utc(2026, 11, 1, 0, 0, 0),
                    utc(2026, 12, 1, 0, 0, 0),
                    UtcMillis(0),
                    2
                )
                .len(),
            2
        );
        let every = Schedule::Every(std::time::Duration::from_secs(60))
            .compile()
            .unwrap();
        assert_eq!(
            every.fires_between(UtcMillis(60_000), UtcMillis(200_000), UtcMillis(0), 10),
            [UtcMillis(60_000), UtcMillis(120_000), UtcMillis(180_000)]
        );
        let at = Schedule::At(UtcMillis(5_000)).compile().unwrap();
        assert_eq!(
            at.fires_between(UtcMillis(5_000), UtcMillis(5_000), UtcMillis(0), 10),
            [UtcMillis(5_000)]
        );
        assert!(at
            .fires_between(UtcMillis(5_001), UtcMillis(9_000), UtcMillis(0), 10)
            .is_empty());
    }

    /// Fires after `after`, shown as local wall clock with offset, for readable assertions.
    fn local_fires(s: &CompiledSchedule, tz: &str, after: UtcMillis, n: usize) -> Vec<String> {
        let tz: Tz = tz.parse().unwrap();
        s.upcoming(after, after, n)
            .into_iter()
            .map(|t| {
                tz.timestamp_millis_opt(t.0)
                    .unwrap()
                    .format("%m-%d %H:%M:%S%:z")
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn at_delay_every() {
        let a = UtcMillis(1_000_000);
        let at = Schedule::At(UtcMillis(5_000)).compile().unwrap();
        assert_eq!(at.next_after(UtcMillis(4_999), a), Some(UtcMillis(5_000)));
        assert_eq!(at.next_after(UtcMillis(5_000), a), None);
        assert_eq!(at.first_fire(a), Some(UtcMillis(5_000)));
        assert!(!Schedule::At(UtcMillis(5_000)).is_periodic());

        let delay = Schedule::Delay(Duration::from_secs(60)).compile().unwrap();
        assert_eq!(delay.next_after(a, a), Some(UtcMillis(1_060_000)));
        assert_eq!(delay.next_after(UtcMillis(1_060_000), a), None);
        assert_eq!(delay.upcoming(a, a, 5), vec![UtcMillis(1_060_000)]);

        let every = Schedule::Every(Duration::from_secs(30)).compile().unwrap();
        assert!(Schedule::Every(Duration::from_secs(30)).is_periodic());
        assert_eq!(
            every.next_after(UtcMillis(0), a),
            Some(UtcMillis(1_030_000))
        );
        assert_eq!(
            every.next_after(UtcMillis(1_030_000), a),
            Some(UtcMillis(1_060_000))
        );
        assert_eq!(
            every.next_after(UtcMillis(1_059_999), a),
            Some(UtcMillis(1_060_000))
        );
        assert_eq!(
            every.upcoming(UtcMillis(1_095_000), a, 3),
            vec![
                UtcMillis(1_120_000),
                UtcMillis(1_150_000),
                UtcMillis(1_180_000)
            ]
        );
    }

    #[test]
    fn rejects_zero_and_too_short() {
        let e = Schedule::Every(Duration::from_millis(500))
            .compile()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("schedule.every: 500ms is below the minimum of 1s"),
            "{e}"
        );
        let e = Schedule::Delay(Duration::ZERO).compile().unwrap_err();
        assert!(
            e.to_string()
                .contains("schedule.delay: must be at least 1ms"),
            "{e}"
        );
        assert!(!e.is_retryable());
    }

    #[test]
    fn five_fields_mean_second_zero_and_six_have_seconds_first() {
        let t0 = utc(2026, 1, 1, 0, 0, 0);
        let five = cron("*/5 * * * *", "UTC");
        assert_eq!(
            five.upcoming(t0, t0, 2),
            vec![utc(2026, 1, 1, 0, 5, 0), utc(2026, 1, 1, 0, 10, 0)]
        );
        let six = cron("15 */5 * * * *", "UTC");
        assert_eq!(
            six.upcoming(t0, t0, 2),
            vec![utc(2026, 1, 1, 0, 0, 15), utc(2026, 1, 1, 0, 5, 15)]
        );
        let secs = cron("*/10 * * * * *", "UTC");
        assert_eq!(
            secs.next_after(UtcMillis(t0.0 + 1), t0),
            Some(utc(2026, 1, 1, 0, 0, 10))
        );
    }

    #[test]
    fn non_dst_zone_is_a_fixed_shift() {
        let s = cron("0 30 9 * * *", "Asia/Shanghai");
        let t0 = utc(2026, 3, 1, 0, 0, 0);
        assert_eq!(
            s.upcoming(t0, t0, 2),
            vec![utc(2026, 3, 1, 1, 30, 0), utc(2026, 3, 2, 1, 30, 0)]
        );
        // Asia/Shanghai has no DST: the fire stays at 01:30 UTC through the northern
        // transition dates.
        let t1 = utc(2026, 11, 1, 0, 0, 0);
        assert_eq!(s.next_after(t1, t1), Some(utc(2026, 11, 1, 1, 30, 0)));
    }

    #[test]
    fn new_york_spring_forward() {
        // 2026-03-08: 02:00 EST becomes 03:00 EDT.
        let after = utc(2026, 3, 7, 12, 0, 0);
        let fixed = cron("30 2 * * *", "America/New_York");
        assert_eq!(
            local_fires(&fixed, "America/New_York", after, 3),
            vec![
                "03-08 03:00:00-04:00",
                "03-09 02:30:00-04:00",
                "03-10 02:30:00-04:00"
            ]
        );
        // Several nonexistent times of one fixed-hour job fire once, together.
        let quarter = cron("*/15 2 * * *", "America/New_York");
        assert_eq!(
            local_fires(&quarter, "America/New_York", after, 2),
            vec!["03-08 03:00:00-04:00", "03-09 02:00:00-04:00"]
        );
        // A nonexistent time that coincides with a real fire fires once.
        let both = cron("0 2,3 * * *", "America/New_York");
        assert_eq!(
            local_fires(&both, "America/New_York", utc(2026, 3, 8, 6, 0, 0), 2),
            vec!["03-08 03:00:00-04:00", "03-09 02:00:00-04:00"]
        );
        // Wildcard hours follow elapsed time: 01:59 EST is followed by 03:00 EDT.
        let minutely = cron("* * * * *", "America/New_York");
        assert_eq!(
            local_fires(&minutely, "America/New_York", utc(2026, 3, 8, 6, 58, 0), 3),
            vec![
                "03-08 01:59:00-05:00",
                "03-08 03:00:00-04:00",
                "03-08 03:01:00-04:00"
            ]
        );
        let hourly = cron("30 * * * *", "America/New_York");
        assert_eq!(
            local_fires(&hourly, "America/New_York", utc(2026, 3, 8, 5, 0, 0), 3),
            vec![
                "03-08 00:30:00-05:00",
                "03-08 01:30:00-05:00",
                "03-08 03:30:00-04:00"
            ]
        );
    }

    #[test]
    fn new_york_fall_back() {
        // 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:00-01:59 occurs twice.
        let after = utc(2026, 10, 31, 12, 0, 0);
        let fixed = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            local_fires(&fixed, "America/New_York", after, 2),
            vec!["11-01 01:30:00-04:00", "11-02 01:30:00-05:00"]
        );
        // Asking from inside the second pass does not fire the fixed time again.
        let second_pass = utc(2026, 11, 1, 6, 10, 0); // 01:10 EST
        assert_eq!(
            local_fires(&fixed, "America/New_York", second_pass, 1),
            vec!["11-02 01:30:00-05:00"]
        );
        // Wildcard hours fire on both passes: every real hour.
        let hourly = cron("30 * * * *", "America/New_York");
        assert_eq!(
            local_fires(&hourly, "America/New_York", utc(2026, 11, 1, 4, 0, 0), 4),
            vec![
                "11-01 00:30:00-04:00",
                "11-01 01:30:00-04:00",
                "11-01 01:30:00-05:00",
                "11-01 02:30:00-05:00"
            ]
        );
        // Every minute through the end of the first pass continues into the second.
        let minutely = cron("* * * * *", "America/New_York");
        assert_eq!(
            local_fires(&minutely, "America/New_York", utc(2026, 11, 1, 5, 58, 0), 3),
            vec![
                "11-01 01:59:00-04:00",
                "11-01 01:00:00-05:00",
                "11-01 01:01:00-05:00"
            ]
        );
        // A fixed-hour job with many minutes fires each wall-clock time once.
        let tens = cron("*/20 1 * * *", "America/New_York");
        assert_eq!(
            local_fires(&tens, "America/New_York", utc(2026, 11, 1, 4, 0, 0), 4),
            vec![
                "11-01 01:00:00-04:00",
                "11-01 01:20:00-04:00",
                "11-01 01:40:00-04:00",
                "11-02 01:00:00-05:00"
            ]
        );
    }

    #[test]
    fn berlin_both_directions() {
        // 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
        let daily = cron("0 30 2 * * *", "Europe/Berlin");
        assert_eq!(
            local_fires(&daily, "Europe/Berlin", utc(2026, 3, 28, 12, 0, 0), 2),
            vec!["03-29 03:00:00+02:00", "03-30 02:30:00+02:00"]
        );
        assert_eq!(
            local_fires(&daily, "Europe/Berlin", utc(2026, 10, 24, 12, 0, 0), 3),
            vec![
                "10-25 02:30:00+02:00",
                "10-26 02:30:00+01:00",
                "10-27 02:30:00+01:00"
            ]
        );
        let half_hourly = cron("0 */30 * * * *", "Europe/Berlin");
        assert_eq!(
            local_fires(
                &half_hourly,
                "Europe/Berlin",
                utc(2026, 10, 24, 23, 50, 0),
                6
            ),
            vec![
                "10-25 02:00:00+02:00",
                "10-25 02:30:00+02:00",
                "10-25 02:00:00+01:00",
                "10-25 02:30:00+01:00",
                "10-25 03:00:00+01:00",
                "10-25 03:30:00+01:00"
            ]
        );
    }

    #[test]
    fn sydney_southern_hemisphere() {
        // 2026-04-05 03:00 AEDT -> 02:00 AEST (fall back); 2026-10-04 02:00 AEST -> 03:00
        // AEDT (spring forward).
        let daily = cron("30 2 * * *", "Australia/Sydney");
        assert_eq!(
            local_fires(&daily, "Australia/Sydney", utc(2026, 4, 4, 0, 0, 0), 2),
            vec!["04-05 02:30:00+11:00", "04-06 02:30:00+10:00"]
        );
        assert_eq!(
            local_fires(&daily, "Australia/Sydney", utc(2026, 10, 3, 0, 0, 0), 2),
            vec!["10-04 03:00:00+11:00", "10-05 02:30:00+11:00"]
        );
        let hourly = cron("0 * * * *", "Australia/Sydney");
        assert_eq!(
            local_fires(&hourly, "Australia/Sydney", utc(2026, 4, 4, 14, 30, 0), 3),
            vec![
                "04-05 02:00:00+11:00",
                "04-05 02:00:00+10:00",
                "04-05 03:00:00+10:00"
            ]
        );
        assert_eq!(
            local_fires(&hourly, "Australia/Sydney", utc(2026, 10, 3, 14, 30, 0), 2),
            vec!["10-04 01:00:00+10:00", "10-04 03:00:00+11:00"]
        );
    }

    /// Reference DST rule, written from the definition rather than the search: walk every
    /// minute instant; a minute whose wall clock matches fires unless it is the second
    /// occurrence of a repeated time of a fixed-hour expression; a spring-forward instant
    /// fires (fixed-hour only) when a wall-clock time inside the skipped range matches.
    fn reference_fires(expr: &str, tz: Tz, from: i64, to: i64) -> Vec<i64> {
        use chrono::{LocalResult, Offset};
        let checked = crate::cron::check_expr(expr).unwrap();
        let m = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Required)
            .build()
            .parse(&checked.six_fields)
            .unwrap();
        let local = |t: i64| tz.timestamp_millis_opt(t).unwrap().naive_local();
        let offset = |t: i64| {
            tz.timestamp_millis_opt(t)
                .unwrap()
                .offset()
                .fix()
                .local_minus_utc()
        };
        let mut out = Vec::new();
        let mut t = from;
        while t <= to {
            let l = local(t);
            let second_pass = matches!(
                tz.from_local_datetime(&l),
                LocalResult::Ambiguous(_, b) if b.timestamp_millis() == t
            );
            let mut fires =
                m.is_time_matching(&l).unwrap() && (checked.wildcard_hours || !second_pass);
            if !checked.wildcard_hours && offset(t) > offset(t - 60_000) {
                let mut g = local(t - 60_000) + chrono::TimeDelta::minutes(1);
                while g < l {
                    fires |= m.is_time_matching(&g).unwrap();
                    g += chrono::TimeDelta::minutes(1);
                }
            }
            if fires {
                out.push(t);
            }
            t += 60_000;
        }
        out
    }

    const EXPRS: [&str; 11] = [
        "* * * * *",
        "*/20 * * * *",
        "30 * * * *",
        "0 */2 * * *",
        "30 2 * * *",
        "*/15 2 * * *",
        "0 1-3 * * *",
        "15,45 1,2 * * *",
        "59 1 * * *",
        "0 0 * * *",
        "*/10 0-4 * * 0",
    ];
    /// (zone, a day before one of its 2026 transitions)
    const CASES: [(&str, (u32, u32)); 10] = [
        ("America/New_York", (3, 7)),
        ("America/New_York", (10, 31)),
        ("Europe/Berlin", (3, 28)),
        ("Europe/Berlin", (10, 24)),
        ("Australia/Sydney", (4, 4)),
        ("Australia/Sydney", (10, 3)),
        ("Australia/Lord_Howe", (4, 4)),
        ("Australia/Lord_Howe", (10, 3)),
        ("Asia/Shanghai", (3, 7)),
        ("America/Sao_Paulo", (11, 1)),
    ];

    /// Exhaustive near each transition: every minute (and just around it) within 4 h.
    #[test]
    fn dst_rule_matches_reference_around_transitions() {
        use chrono::Offset;
        for (zone, (mo, d)) in CASES {
            let tz: Tz = zone.parse().unwrap();
            let start = utc(2026, mo, d, 0, 0, 0).0;
            let end = start + 4 * 86_400_000;
            let offset = |t: i64| {
                tz.timestamp_millis_opt(t)
                    .unwrap()
                    .offset()
                    .fix()
                    .local_minus_utc()
            };
            let transitions: Vec<i64> = (1..(end - start) / 60_000)
                .map(|k| start + k * 60_000)
                .filter(|t| offset(*t) != offset(t - 60_000))
                .collect();
            for expr in EXPRS {
                let fires = reference_fires(expr, tz, start, end);
                let compiled = cron(expr, zone);
                for t in &transitions {
                    for k in -240..240 {
                        for jitter in [-1, 0, 1, 30_000] {
                            let after = t + k * 60_000 + jitter;
                            // Past the reference's end there is nothing to compare.
                            let Some(expected) = fires.iter().copied().find(|f| *f > after) else {
                                continue;
                            };
                            let expected = Some(expected);
                            let got = compiled
                                .next_after(UtcMillis(after), UtcMillis(0))
                                .map(|t| t.0);
                            assert_eq!(
                                got,
                                expected,
                                "{expr} in {zone} after {}",
                                UtcMillis(after)
                            );
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(150))]
        #[test]
        fn dst_rule_matches_reference(
            case in 0usize..10,
            expr_i in 0usize..11,
            offset_min in 0i64..(3 * 24 * 60),
            offset_ms in 0i64..60_000,
        ) {
            let (zone, (mo, d)) = CASES[case];
            let tz: Tz = zone.parse().unwrap();
            let expr = EXPRS[expr_i];
            let start = utc(2026, mo, d, 0, 0, 0).0;
            let end = start + 4 * 86_400_000;
            let fires = reference_fires(expr, tz, start, end);
            let after = start + offset_min * 60_000 + offset_ms;
            let expected = fires.iter().copied().find(|f| *f > after);
            proptest::prop_assume!(expected.is_some());
            let got = cron(expr, zone).next_after(UtcMillis(after), UtcMillis(0)).map(|t| t.0);
            proptest::prop_assert_eq!(got, expected, "{} in {} after {}", expr, zone, UtcMillis(after));
        }
    }

    #[test]
    fn far_fires_across_several_transitions() {
        // A yearly July job asked from the previous July crosses a fall-back and a
        // spring-forward; the answer is the plain wall-clock time.
        let yearly = cron("0 0 12 1 7 *", "America/New_York");
        assert_eq!(
            local_fires(&yearly, "America/New_York", utc(2026, 7, 2, 0, 0, 0), 2),
            vec!["07-01 12:00:00-04:00", "07-01 12:00:00-04:00"]
        );
        let t = yearly.next_after(utc(2026, 7, 2, 0, 0, 0), UtcMillis(0));
        assert_eq!(t, Some(utc(2027, 7, 1, 16, 0, 0)));
    }
}
