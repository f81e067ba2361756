//! The `retry` section: how often and how fast a failed attempt is tried again.
//!
//! Every field is optional and falls back to [`RetryPolicy::default`] one by one, so a
//! user can change one knob without restating the others. `max_elapsed` is the exception:
//! `null` there means "no limit", which is why it is read with `obj.get` and not `field`.

use serde_json::{Map, Value};

use super::checker::{field, kind, Checker};
use crate::task::{RetryPolicy, MAX_MULTIPLIER, MAX_RETRIES};

const RETRY_FIELDS: &[&str] = &[
    "max_retries",
    "initial_interval",
    "max_interval",
    "multiplier",
    "jitter",
    "max_elapsed",
];

/// The top-level `retry`; absent means the default policy.
pub(super) fn read_retry(c: &mut Checker, obj: &Map<String, Value>) -> Option<RetryPolicy> {
    field(obj, "retry").map_or(Some(RetryPolicy::default()), |v| parse_retry(c, v))
}

fn parse_retry(c: &mut Checker, v: &Value) -> Option<RetryPolicy> {
    let Value::Object(obj) = v else {
        c.err("retry", format!("must be an object, found {}", kind(v)));
        return None;
    };
    c.unknown_fields(obj, "retry", RETRY_FIELDS);
    let d = RetryPolicy::default();
    let max_retries = field(obj, "max_retries").map_or(Some(d.max_retries), |v| {
        c.integer(
            v,
            "retry.max_retries",
            0,
            u64::from(MAX_RETRIES),
            "max_retries",
        )
        .and_then(|n| u32::try_from(n).ok())
    });
    let initial_interval = field(obj, "initial_interval").map_or(Some(d.initial_interval), |v| {
        c.duration(v, "retry.initial_interval")
    });
    let max_interval = field(obj, "max_interval").map_or(Some(d.max_interval), |v| {
        c.duration(v, "retry.max_interval")
    });
    let multiplier = field(obj, "multiplier").map_or(Some(d.multiplier), |v| {
        let m = c.number(v, "retry.multiplier")?;
        if !(1.0..=MAX_MULTIPLIER).contains(&m) {
            c.err(
                "retry.multiplier",
                format!("{m} is out of range 1-{MAX_MULTIPLIER}; 1 keeps the wait constant, 2 doubles it"),
            );
            return None;
        }
        Some(m)
    });
    let jitter = field(obj, "jitter").map_or(Some(d.jitter), |v| {
        let j = c.number(v, "retry.jitter")?;
        if !(0.0..=1.0).contains(&j) {
            c.err(
                "retry.jitter",
                format!("{j} is out of range 0-1 (0.2 spreads waits by +-20%)"),
            );
            return None;
        }
        Some(j)
    });
    // `null` means "no limit", so absence and null differ here.
    let max_elapsed = match obj.get("max_elapsed") {
        None => Some(d.max_elapsed),
        Some(Value::Null) => Some(None),
        Some(v) => c.duration(v, "retry.max_elapsed").map(Some),
    };
    if let (Some(i), Some(m)) = (initial_interval, max_interval) {
        if m < i {
            c.err(
                "retry.max_interval",
                format!(
                    "{} is below initial_interval {}",
                    humantime::format_duration(m),
                    humantime::format_duration(i)
                ),
            );
            return None;
        }
    }
    Some(RetryPolicy {
        max_retries: max_retries?,
        initial_interval: initial_interval?,
        max_interval: max_interval?,
        multiplier: multiplier?,
        jitter: jitter?,
        max_elapsed: max_elapsed?,
    })
}
