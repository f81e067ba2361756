//! Cron expressions: our own field check, croner for wall-clock matching, our DST rule on top.
//!
//! croner's parse errors say little ("Invalid range start."), so every field is checked here
//! first and a problem is reported as the person would fix it: which field, which value, what
//! range is allowed. croner then parses the (already checked) text and answers the one question
//! it is good at: which *wall-clock* times match. It is evaluated on `NaiveDateTime`, so it
//! never sees a time zone; mapping wall-clock matches to instants is done here, because croner
//! and the `cron` crate each have their own DST behaviour and ax's rule is part of its
//! contract (see `docs/tasks.md`):
//!
//! * **Fixed-hour expressions** (the hour field names hours: `2`, `1-3`, `9,17`): a wall-clock
//!   time that does not exist (spring-forward gap) fires once, at the first instant after the
//!   gap; several such times in one gap fire once together. A wall-clock time that occurs twice
//!   (fall-back) fires once, at its first occurrence.
//! * **Wildcard-hour expressions** (the hour field starts with `*`: `*`, `*/2`): they follow
//!   real elapsed time. Nonexistent times are skipped (every minute goes 01:59 -> 03:00) and
//!   repeated times fire at both occurrences (every minute keeps firing through the repeated
//!   hour). This is the Vixie cron / Kubernetes CronJob split between "fixed" and "wildcard"
//!   jobs, decided on the hour field because that is the field a DST shift moves.
//!
//! The search walks wall-clock matches in order and converts each to instants. That order
//! agrees with instant order except across a fall-back transition, so after a candidate is
//! found the zone's offsets between `after` and the candidate are sampled; when the clock went
//! back in between, the search restarts from the transition with the wall clock it shows then.

use std::str::FromStr;

use chrono::{LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

/// An expression that passed the field check, ready to evaluate in a zone.
#[derive(Clone, Debug)]
pub(crate) struct CronSchedule {
    cron: Cron,
    tz: Tz,
    wildcard_hours: bool,
}

/// The pieces of an expression, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckedExpr {
    /// Six fields, seconds first (aliases expanded, a 5-field form given second `0`).
    pub(crate) six_fields: String,
    /// The hour field starts with `*`: the expression follows elapsed time across DST.
    pub(crate) wildcard_hours: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    DayOfMonth,
    DayOfWeek,
}

struct FieldDef {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    names_from: u32,
    kind: Kind,
}

const MONTHS: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const FIELDS: [FieldDef; 6] = [
    FieldDef {
        name: "second",
        min: 0,
        max: 59,
        names: &[],
        names_from: 0,
        kind: Kind::Plain,
    },
    FieldDef {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
        names_from: 0,
        kind: Kind::Plain,
    },
    FieldDef {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
        names_from: 0,
        kind: Kind::Plain,
    },
    FieldDef {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
        names_from: 0,
        kind: Kind::DayOfMonth,
    },
    FieldDef {
        name: "month",
        min: 1,
        max: 12,
        names: MONTHS,
        names_from: 1,
        kind: Kind::Plain,
    },
    FieldDef {
        name: "day-of-week",
        min: 0,
        max: 7,
        names: DAYS,
        names_from: 0,
        kind: Kind::DayOfWeek,
    },
];

/// The shortcuts accepted in place of fields, with their expansion.
const ALIASES: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Checks an expression field by field; every problem found is returned.
pub(crate) fn check_expr(expr: &str) -> Result<CheckedExpr, Vec<String>> {
    let trimmed = expr.trim();
    if trimmed.is_empty() {
        return Err(vec![
            "the expression is empty; write e.g. \"0 */5 * * * *\"".into(),
        ]);
    }
    let expanded = if trimmed.starts_with('@') {
        match ALIASES
            .iter()
            .find(|(a, _)| a.eq_ignore_ascii_case(trimmed))
        {
            Some((_, e)) => *e,
            None => {
                let names: Vec<&str> = ALIASES.iter().map(|(a, _)| *a).collect();
                return Err(vec![format!(
                    "unknown shortcut `{trimmed}`; use one of {}",
                    names.join(", ")
                )]);
            }
        }
    } else {
        trimmed
    };
    let parts: Vec<&str> = expanded.split_whitespace().collect();
    let fields: Vec<&str> = match parts.len() {
        5 => std::iter::once("0").chain(parts.iter().copied()).collect(),
        6 => parts,
        n => {
            return Err(vec![format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with \
                 seconds first, found {n}"
            )])
        }
    };
    let mut errors = Vec::new();
    for (def, text) in FIELDS.iter().zip(&fields) {
        check_field(def, text, &mut errors);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(CheckedExpr {
        six_fields: fields.join(" "),
        wildcard_hours: fields[2].starts_with('*'),
    })
}

fn check_field(def: &FieldDef, text: &str, errors: &mut Vec<String>) {
    let name = def.name;
    let mut body = text;
    if def.kind == Kind::DayOfWeek {
        if let Some(rest) = body.strip_prefix('+') {
            body = rest;
        }
    }
    for item in body.split(',') {
        if item.is_empty() {
            errors.push(format!("empty item in the {name} field `{text}`"));
            continue;
        }
        check_item(def, item, errors);
    }
}

/// One comma-separated item of a field: a wildcard, a range or a value, each with an
/// optional step.
fn check_item(def: &FieldDef, item: &str, errors: &mut Vec<String>) {
    let name = def.name;
    let upper = item.to_ascii_uppercase();
    let (base, step) = match upper.split_once('/') {
        Some((b, s)) => (b, Some(s)),
        None => (upper.as_str(), None),
    };
    if let Some(s) = step {
        check_step(def, item, s, errors);
    }
    let wildcard = base == "*" || (base == "?" && def.kind != Kind::Plain);
    if wildcard {
        return;
    }
    if base == "?" {
        errors.push(format!(
            "`?` is only allowed in day-of-month and day-of-week, not {name}"
        ));
        return;
    }
    if let Some((a, b)) = base.split_once('-') {
        let lo = value(def, a, errors);
        let hi = value(def, b, errors);
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if lo > hi {
                errors.push(format!(
                    "{name} range {a}-{b} runs backwards; ranges do not wrap, write \
                     {a}-{},{}-{b}",
                    def.max, def.min
                ));
            }
        }
        return;
    }
    if step.is_some() {
        errors.push(format!(
            "{name} `{item}`: a step needs `*` or a range before it, e.g. `*/{s}` or \
             `{base}-{max}/{s}`",
            s = step.unwrap_or_default(),
            max = def.max
        ));
        return;
    }
    check_value(def, item, base, errors);
}

/// The step `s` after the `/` of `item`.
fn check_step(def: &FieldDef, item: &str, s: &str, errors: &mut Vec<String>) {
    let name = def.name;
    match s.parse::<u32>() {
        Err(_) => errors.push(format!("{name} step `{s}` in `{item}` is not a number")),
        Ok(0) => errors.push(format!("{name} step in `{item}` must be at least 1")),
        Ok(n) if n > def.max - def.min + 1 => errors.push(format!(
            "{name} step {n} in `{item}` is larger than the whole range {}-{}",
            def.min, def.max
        )),
        Ok(_) => {}
    }
}

/// A single value `base` (upper-cased `item`), or one of the special forms of the day
/// fields (`L`, `15W`, `FRI#2`, `5L`).
fn check_value(def: &FieldDef, item: &str, base: &str, errors: &mut Vec<String>) {
    match def.kind {
        Kind::DayOfMonth if base == "L" => {}
        Kind::DayOfMonth if base.ends_with('W') => {
            let day = &base[..base.len() - 1];
            match day.parse::<u32>() {
                Ok(d) if (1..=31).contains(&d) => {}
                _ => errors.push(format!(
                    "day-of-month `{item}`: `W` (nearest weekday) needs a day 1-31 before it"
                )),
            }
        }
        Kind::DayOfWeek if base.contains('#') => {
            let (day, nth) = base.split_once('#').unwrap_or((base, ""));
            value(def, day, errors);
            if !(nth == "L" || matches!(nth.parse::<u32>(), Ok(1..=5))) {
                errors.push(format!(
                    "day-of-week `{item}`: the occurrence after `#` must be 1-5 or L"
                ));
            }
        }
        Kind::DayOfWeek if base.len() > 1 && base.ends_with('L') => {
            value(def, &base[..base.len() - 1], errors);
        }
        _ => {
            value(def, base, errors);
        }
    }
}

/// Reads one value (number or name) of a field, recording why it is not allowed.
fn value(def: &FieldDef, text: &str, errors: &mut Vec<String>) -> Option<u32> {
    let name = def.name;
    if let Ok(n) = text.parse::<u32>() {
        if n < def.min || n > def.max {
            errors.push(format!(
                "{name} {n} is out of range {}-{}",
                def.min, def.max
            ));
            return None;
        }
        return Some(n);
    }
    if let Some(i) = def.names.iter().position(|n| *n == text) {
        return u32::try_from(i).ok().map(|i| i + def.names_from);
    }
    let hint = if def.names.is_empty() {
        String::new()
    } else {
        format!(" or {}-{}", def.names[0], def.names[def.names.len() - 1])
    };
    errors.push(format!(
        "`{text}` is not a valid {name}; use {}-{}{hint}",
        def.min, def.max
    ));
    None
}

impl CronSchedule {
    /// Checks and compiles `expr` for evaluation in the IANA zone `timezone`.
    ///
    /// Errors are `(field, reason)` with field `cron` or `timezone`.
    pub(crate) fn new(expr: &str, timezone: &str) -> Result<Self, Vec<(&'static str, String)>> {
        let mut errors = Vec::new();
        let tz = match parse_zone(timezone) {
            Ok(tz) => Some(tz),
            Err(e) => {
                errors.push(("timezone", e));
                None
            }
        };
        let checked = match check_expr(expr) {
            Ok(c) => Some(c),
            Err(es) => {
                errors.extend(es.into_iter().map(|e| ("cron", e)));
                None
            }
        };
        let (Some(tz), Some(checked)) = (tz, checked) else {
            return Err(errors);
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .build()
            .parse(&checked.six_fields)
            .map_err(|e| vec![("cron", format!("not a valid expression: {e}"))])?;
        // An expression such as `0 0 30 2 *` passes every field check yet names no real date;
        // croner's search gives up on it (at its year limit), which would otherwise surface
        // only when the engine asks for the next fire.
        let probe = NaiveDateTime::default();
        if cron.find_next_occurrence(&probe, true).is_err() {
            return Err(vec![(
                "cron",
                "the expression never matches a real date (e.g. day 30 of February)".to_string(),
            )]);
        }
        Ok(CronSchedule {
            cron,
            tz,
            wildcard_hours: checked.wildcard_hours,
        })
    }

    /// The first fire strictly after `after` (ms since the epoch), by ax's DST rule.
    pub(crate) fn next_after(&self, after: i64) -> Option<i64> {
        let mut lower = after;
        let mut scan_from = after;
        let mut start = self.local(lower)?;
        // Each round either answers or moves past one fall-back transition; a handful covers
        // any real zone between two fires.
        for _ in 0..64 {
            let candidate = self.first_by_wall_clock(lower, scan_from, start)?;
            match first_fall_back(&self.tz, scan_from, candidate) {
                Some(t) => {
                    // Nothing fires in (lower, t) (the walk would have found it first), so
                    // continue from the transition with the wall clock it shows then.
                    lower = t - 1;
                    scan_from = t;
                    start = self.local(t)?;
                }
                None => return Some(candidate),
            }
        }
        None
    }

    /// The wall-clock time (whole seconds) at instant `ms` in the zone.
    fn local(&self, ms: i64) -> Option<NaiveDateTime> {
        let dt = Utc
            .timestamp_millis_opt(ms)
            .single()?
            .with_timezone(&self.tz);
        dt.naive_local().with_nanosecond(0)
    }

    /// Walks wall-clock matches from `start` (inclusive) and returns the smallest fire instant
    /// above `lower` of the first match that has one. Exact while the clock does not go back
    /// between `region` (`<= lower + 1`, where the walk's offset regime starts) and the answer;
    /// the caller checks that.
    fn first_by_wall_clock(&self, lower: i64, region: i64, start: NaiveDateTime) -> Option<i64> {
        let region_offset = offset_at(&self.tz, region)?;
        let mut cursor = start;
        let mut inclusive = true;
        // A fixed-hour, every-second expression may walk one repeated hour of matches that
        // already fired; nothing legitimate needs more.
        for _ in 0..200_000 {
            let m = self.cron.find_next_occurrence(&cursor, inclusive).ok()?;
            cursor = m;
            inclusive = false;
            match self.tz.from_local_datetime(&m) {
                LocalResult::Single(dt) => {
                    let t = dt.timestamp_millis();
                    if t > lower {
                        return Some(t);
                    }
                }
                LocalResult::Ambiguous(first, second) => {
                    let (a, b) = (first.timestamp_millis(), second.timestamp_millis());
                    if a > lower {
                        return Some(a);
                    }
                    // The second occurrence belongs to this walk only once the clock has
                    // gone back; from the first pass, later wall-clock times still come
                    // first, and the caller's restart at the transition reaches `b`.
                    if self.wildcard_hours
                        && b > lower
                        && second.offset().fix().local_minus_utc() == region_offset
                    {
                        return Some(b);
                    }
                }
                LocalResult::None => {
                    let (end_wall, end_instant) = self.gap_end(m)?;
                    if !self.wildcard_hours && end_instant > lower {
                        return Some(end_instant);
                    }
                    // The rest of the gap maps to the same instant or to nothing.
                    cursor = end_wall;
                    inclusive = true;
                }
            }
        }
        None
    }

    /// The first existing wall-clock time after `inside` (which lies in a gap) and its instant.
    fn gap_end(&self, inside: NaiveDateTime) -> Option<(NaiveDateTime, i64)> {
        let exists =
            |n: &NaiveDateTime| !matches!(self.tz.from_local_datetime(n), LocalResult::None);
        let minute = TimeDelta::minutes(1);
        let mut probe = inside;
        // Gaps are whole minutes in current tzdb data and at most a day (Samoa, 2011); walk
        // by minutes, then find the exact second within the last minute.
        let mut steps = 0;
        while !exists(&probe) {
            probe = probe.checked_add_signed(minute)?;
            steps += 1;
            if steps > 2 * 24 * 60 {
                return None;
            }
        }
        let mut end = probe;
        loop {
            let before = end.checked_sub_signed(TimeDelta::seconds(1))?;
            if before <= inside || !exists(&before) {
                break;
            }
            end = before;
        }
        let instant = self
            .tz
            .from_local_datetime(&end)
            .earliest()?
            .timestamp_millis();
        Some((end, instant))
    }
}

/// Resolves an IANA zone name, with an error a person can act on.
pub(crate) fn parse_zone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name).map_err(|_| {
        format!(
            "unknown time zone `{name}`; use an IANA name such as `UTC`, `Asia/Shanghai` or \
             `America/New_York` (names are case-sensitive)"
        )
    })
}

/// UTC offset in seconds at instant `ms`.
fn offset_at(tz: &Tz, ms: i64) -> Option<i32> {
    let dt = Utc.timestamp_millis_opt(ms).single()?;
    Some(
        tz.offset_from_utc_datetime(&dt.naive_utc())
            .fix()
            .local_minus_utc(),
    )
}

/// Offsets are sampled this far apart when looking for a transition; tzdb has no zone with
/// two transitions this close together.
const SAMPLE_STEP_MS: i64 = 6 * 3600 * 1000;

/// The first instant in `(from, to]` at which the zone's offset drops (the clock goes back).
fn first_fall_back(tz: &Tz, from: i64, to: i64) -> Option<i64> {
    let mut lo = from;
    let mut lo_offset = offset_at(tz, lo)?;
    while lo < to {
        let hi = lo.saturating_add(SAMPLE_STEP_MS).min(to);
        let hi_offset = offset_at(tz, hi)?;
        if hi_offset < lo_offset {
            // One transition lies in (lo, hi]: bisect to its first millisecond.
            let (mut a, mut b) = (lo, hi);
            while b - a > 1 {
                let mid = a + (b - a) / 2;
                if offset_at(tz, mid)? < lo_offset {
                    b = mid;
                } else {
                    a = mid;
                }
            }
            return Some(b);
        }
        lo = hi;
        lo_offset = hi_offset;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errs(expr: &str) -> Vec<String> {
        check_expr(expr).err().unwrap_or_default()
    }

    #[test]
    fn accepts_common_forms() {
        for e in [
            "* * * * *",
            "0 */5 * * * *",
            "30 2 * * *",
            "0 9-17/2 * * MON-FRI",
            "0 0 L * ?",
            "0 0 15W * *",
            "0 0 * * 5#2",
            "0 0 * * 5L",
            "0 0 1 * +MON",
            "0 0 1 JAN,jul *",
            "@daily",
            "@HOURLY",
            "0 0 * * 7",
        ] {
            assert!(check_expr(e).is_ok(), "{e}: {:?}", errs(e));
        }
        assert_eq!(
            check_expr("@hourly").map(|c| c.six_fields),
            Ok("0 0 * * * *".into())
        );
        assert_eq!(check_expr("5 4 * * *").map(|c| c.wildcard_hours), Ok(false));
        assert_eq!(
            check_expr("5 */4 * * *").map(|c| c.wildcard_hours),
            Ok(true)
        );
    }

    #[test]
    fn reports_precise_reasons() {
        assert_eq!(errs("61 * * * *"), vec!["minute 61 is out of range 0-59"]);
        assert_eq!(errs("0 61 * * * *"), vec!["minute 61 is out of range 0-59"]);
        assert_eq!(errs("0 0 24 * * *"), vec!["hour 24 is out of range 0-23"]);
        assert_eq!(
            errs("0 0 0 * *"),
            vec!["day-of-month 0 is out of range 1-31"]
        );
        assert_eq!(errs("0 0 1 13 *"), vec!["month 13 is out of range 1-12"]);
        assert_eq!(errs("0 0 * * 8"), vec!["day-of-week 8 is out of range 0-7"]);
        assert_eq!(
            errs("0 0 * FOO *"),
            vec!["`FOO` is not a valid month; use 1-12 or JAN-DEC"]
        );
        assert_eq!(
            errs("0 22-2 * * *"),
            vec!["hour range 22-2 runs backwards; ranges do not wrap, write 22-23,0-2"]
        );
        assert_eq!(
            errs("*/0 * * * *"),
            vec!["minute step in `*/0` must be at least 1"]
        );
        assert_eq!(
            errs("5/15 * * * *"),
            vec!["minute `5/15`: a step needs `*` or a range before it, e.g. `*/15` or `5-59/15`"]
        );
        assert_eq!(
            errs("* * * *"),
            vec![
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds \
                 first, found 4"
            ]
        );
        assert_eq!(errs("@often").len(), 1);
        assert!(errs("@often")[0].starts_with("unknown shortcut `@often`"));
        // Every problem at once.
        assert_eq!(errs("99 99 * * *").len(), 2);
        assert_eq!(
            errs("1,,2 * * * *"),
            vec!["empty item in the minute field `1,,2`"]
        );
        assert_eq!(
            errs("0 0 * * 1#6"),
            vec!["day-of-week `1#6`: the occurrence after `#` must be 1-5 or L"]
        );
        assert_eq!(
            errs("0 ? * * *"),
            vec!["`?` is only allowed in day-of-month and day-of-week, not hour"]
        );
    }

    #[test]
    fn rejects_expressions_that_never_match_and_unknown_zones() {
        let e = CronSchedule::new("0 0 30 2 *", "UTC")
            .err()
            .unwrap_or_default();
        assert_eq!(e.len(), 1);
        assert!(e[0].1.contains("never matches"), "{e:?}");
        let e = CronSchedule::new("0 0 * * *", "Mars/Base")
            .err()
            .unwrap_or_default();
        assert_eq!(e[0].0, "timezone");
        assert!(e[0].1.starts_with("unknown time zone `Mars/Base`"));
    }
}
