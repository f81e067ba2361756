//! A schedule in words: "every day at 02:30 Asia/Shanghai", for people reading a table.
//!
//! The text is built from the schedule as written, not from its compiled form, so it can
//! describe what a user meant even where the expression is unusual. Cron expressions are
//! first normalized by the same field check the compiler uses (aliases expanded, a 5-field
//! form given second 0); the common shapes (fixed times on every day, on weekdays, on days of
//! the month, steps of minutes or hours) get a sentence, and anything else falls back to the
//! expression itself with its zone, which is still exact. A description never fails: an
//! invalid expression is shown as written.

use std::time::Duration;

use crate::cron::check_expr;
use crate::task::Schedule;

const DAY_NAMES: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const DAY_ABBREVS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl Schedule {
    /// The schedule in words, e.g. `every day at 02:30 Asia/Shanghai`, `every 5m`,
    /// `once at 2030-01-01 00:00:00 UTC`.
    pub fn describe(&self) -> String {
        match self {
            Schedule::At(t) => format!("once at {}", utc_text(t.0)),
            Schedule::Delay(d) => format!("once, {} after it was registered", duration(*d)),
            Schedule::Every(d) => format!("every {}", duration(*d)),
            Schedule::Cron { expr, timezone } => describe_cron(expr, timezone),
            Schedule::Dependent => "after its parents (depends_on)".to_owned(),
        }
    }
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn utc_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || format!("{ms} ms since the epoch"),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

fn describe_cron(expr: &str, timezone: &str) -> String {
    let fallback = || format!("cron `{}` {timezone}", expr.trim());
    let Ok(checked) = check_expr(expr) else {
        return fallback();
    };
    let f: Vec<&str> = checked.six_fields.split_whitespace().collect();
    let [sec, min, hour, dom, month, dow] = f.as_slice() else {
        return fallback();
    };
    if *sec != "0" || *month != "*" {
        return fallback();
    }
    let when = match (number(min, 59), number(hour, 23)) {
        // A fixed time of day.
        (Some(m), Some(h)) => format!("at {h:02}:{m:02}"),
        // Every hour at a minute.
        (Some(m), None) if *hour == "*" => format!("every hour at minute {m}"),
        (Some(m), None) => match step(hour) {
            Some(n) => format!("every {n} hours at minute {m}"),
            None => return fallback(),
        },
        (None, None) if *hour == "*" => {
            if *min == "*" {
                "every minute".to_owned()
            } else if let Some(n) = step(min) {
                format!("every {n} minutes")
            } else {
                return fallback();
            }
        }
        _ => return fallback(),
    };
    let days = match (*dom, *dow) {
        ("*", "*") => None,
        ("*", d) => match weekdays(d) {
            Some(w) => Some(format!("on {w}")),
            None => return fallback(),
        },
        (d, "*") => match number(d, 31) {
            Some(n) if n >= 1 => Some(format!("on day {n} of every month")),
            _ => return fallback(),
        },
        _ => return fallback(),
    };
    let fixed_time = when.starts_with("at ");
    match (days, fixed_time) {
        (None, true) => format!("every day {when} {timezone}"),
        (None, false) => format!("{when} {timezone}"),
        (Some(d), true) => format!("{d} {when} {timezone}"),
        (Some(d), false) => format!("{when}, {d} {timezone}"),
    }
}

/// A plain number in 0..=max.
fn number(field: &str, max: u32) -> Option<u32> {
    field.parse::<u32>().ok().filter(|n| *n <= max)
}

/// `*/n` as n.
fn step(field: &str) -> Option<u32> {
    field
        .strip_prefix("*/")
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 1)
}

/// A day-of-week field of single days and ranges (`1-5`, `MON,WED`, `SAT-SUN`) in words.
fn weekdays(field: &str) -> Option<String> {
    let day = |s: &str| -> Option<usize> {
        let s = s.to_ascii_uppercase();
        match s.parse::<usize>() {
            Ok(7) => Some(0),
            Ok(n) if n < 7 => Some(n),
            Ok(_) => None,
            Err(_) => DAY_ABBREVS.iter().position(|d| *d == s),
        }
    };
    let mut parts = Vec::new();
    for part in field.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (day(a)?, day(b)?);
                if (a, b) == (1, 5) {
                    parts.push("weekdays".to_owned());
                } else {
                    parts.push(format!("{} to {}", DAY_NAMES[a], DAY_NAMES[b]));
                }
            }
            None => parts.push(format!("{}s", DAY_NAMES[day(part)?])),
        }
    }
    Some(match parts.as_slice() {
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
        [] => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::UtcMillis;

    fn cron(expr: &str, tz: &str) -> String {
        Schedule::Cron {
            expr: expr.into(),
            timezone: tz.into(),
        }
        .describe()
    }

    #[test]
    fn fixed_times_read_as_days_and_hours() {
        assert_eq!(
            cron("30 2 * * *", "Asia/Shanghai"),
            "every day at 02:30 Asia/Shanghai"
        );
        assert_eq!(cron("@daily", "UTC"), "every day at 00:00 UTC");
        assert_eq!(cron("0 0 9 * * *", "UTC"), "every day at 09:00 UTC");
        assert_eq!(
            cron("0 9 * * 1-5", "Europe/Paris"),
            "on weekdays at 09:00 Europe/Paris"
        );
        assert_eq!(
            cron("15 18 * * MON,fri", "UTC"),
            "on Mondays and Fridays at 18:15 UTC"
        );
        assert_eq!(
            cron("0 0 * * MON-WED", "UTC"),
            "on Monday to Wednesday at 00:00 UTC"
        );
        assert_eq!(cron("0 0 * * 7", "UTC"), "on Sundays at 00:00 UTC");
        assert_eq!(
            cron("@monthly", "UTC"),
            "on day 1 of every month at 00:00 UTC"
        );
    }

    #[test]
    fn steps_read_as_intervals() {
        assert_eq!(cron("* * * * *", "UTC"), "every minute UTC");
        assert_eq!(cron("*/5 * * * *", "UTC"), "every 5 minutes UTC");
        assert_eq!(cron("@hourly", "UTC"), "every hour at minute 0 UTC");
        assert_eq!(cron("7 */2 * * *", "UTC"), "every 2 hours at minute 7 UTC");
        assert_eq!(
            cron("*/10 * * * MON", "UTC"),
            "every 10 minutes, on Mondays UTC"
        );
    }

    #[test]
    fn anything_else_is_shown_as_written() {
        assert_eq!(cron("*/5 * * * * *", "UTC"), "cron `*/5 * * * * *` UTC");
        assert_eq!(cron("0 9-17/2 * * *", "UTC"), "cron `0 9-17/2 * * *` UTC");
        assert_eq!(cron("0 0 1 JAN *", "UTC"), "cron `0 0 1 JAN *` UTC");
        assert_eq!(cron("0 0 1 * MON", "UTC"), "cron `0 0 1 * MON` UTC");
        assert_eq!(cron("not cron", "UTC"), "cron `not cron` UTC");
    }

    #[test]
    fn one_shots_and_intervals_use_durations() {
        assert_eq!(
            Schedule::Every(Duration::from_secs(300)).describe(),
            "every 5m"
        );
        assert_eq!(
            Schedule::Every(Duration::from_secs(5400)).describe(),
            "every 1h 30m"
        );
        assert_eq!(
            Schedule::Delay(Duration::from_secs(600)).describe(),
            "once, 10m after it was registered"
        );
        assert_eq!(
            Schedule::At(UtcMillis(1_893_456_000_000)).describe(),
            "once at 2030-01-01 00:00:00 UTC"
        );
    }
}
