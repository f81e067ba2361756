//! The `schedule` section: exactly one kind (`at`, `delay`, `every`, `cron`), then compiled.
//!
//! A task with `depends_on` has no clock of its own, so whether `schedule` may be given at
//! all is decided here from that, before its contents are read. Compiling the schedule (the
//! cron expression, the time zone) is `crate::schedule`'s job; its problems are added to the
//! list as they come so the user sees the cron parser's own words.

use serde_json::{Map, Value};

use super::checker::{field, kind, Checker};
use crate::task::{Schedule, DEFAULT_TIMEZONE};

const SCHEDULE_FIELDS: &[&str] = &["at", "delay", "every", "cron", "timezone"];
const SCHEDULE_KINDS: &[&str] = &["at", "delay", "every", "cron"];

/// The top-level `schedule`: required, unless `dependent` (the task lists parents), where
/// it must be absent and the task fires when its parents finish.
pub(super) fn read_schedule(
    c: &mut Checker,
    obj: &Map<String, Value>,
    dependent: bool,
) -> Option<Schedule> {
    match field(obj, "schedule") {
        Some(_) if dependent => {
            c.err(
                "schedule",
                "a task with depends_on fires when its parents finish, not by the clock; remove schedule (or depends_on)",
            );
            None
        }
        Some(v) => parse_schedule(c, v),
        None if dependent => Some(Schedule::Dependent),
        None => {
            c.err(
                "schedule",
                "missing; give one of {\"at\": ...}, {\"delay\": ...}, {\"every\": ...}, {\"cron\": ...}",
            );
            None
        }
    }
}

fn parse_schedule(c: &mut Checker, v: &Value) -> Option<Schedule> {
    let Value::Object(obj) = v else {
        c.err(
            "schedule",
            format!(
                "must be an object such as {{\"every\": \"30s\"}}, found {}",
                kind(v)
            ),
        );
        return None;
    };
    c.unknown_fields(obj, "schedule", SCHEDULE_FIELDS);
    let kinds: Vec<&str> = SCHEDULE_KINDS
        .iter()
        .copied()
        .filter(|k| field(obj, k).is_some())
        .collect();
    if field(obj, "timezone").is_some() && !kinds.contains(&"cron") {
        c.err("schedule.timezone", "only applies to a cron schedule");
    }
    let kind_name = match kinds.as_slice() {
        [] => {
            c.err(
                "schedule",
                "no schedule kind; give exactly one of at, delay, every, cron",
            );
            return None;
        }
        [one] => *one,
        many => {
            c.err(
                "schedule",
                format!(
                    "more than one schedule kind ({}); give exactly one",
                    many.join(", ")
                ),
            );
            return None;
        }
    };
    let value = field(obj, kind_name)?;
    let path = format!("schedule.{kind_name}");
    let schedule = match kind_name {
        "at" => Schedule::At(c.instant(value, &path)?),
        "delay" => Schedule::Delay(c.duration(value, &path)?),
        "every" => Schedule::Every(c.duration(value, &path)?),
        _ => {
            let expr = c.string(value, &path)?;
            let timezone = match field(obj, "timezone") {
                Some(tz) => c.string(tz, "schedule.timezone")?,
                None => DEFAULT_TIMEZONE.to_string(),
            };
            Schedule::Cron { expr, timezone }
        }
    };
    match schedule.compile_checked() {
        Ok(_) => Some(schedule),
        Err(errors) => {
            c.errors.extend(errors);
            None
        }
    }
}
