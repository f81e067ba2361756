//! The `retry` section: how often and how fast a failed attempt is tried again.
//!
//! Every field is optional and falls back to [`RetryPolicy::default`] one by one, so a
//! user can change one knob without restating the others. `max_elapsed` is the exception:
//! `null` there means "no limit", which is why it is read with `obj.get` and not `field`.

use serde_json::{Map, Value};

use super::checker::{field, kind, Checker};
use crate::options::{check_max_retries, check_retry};
use crate::task::RetryPolicy;

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
        let n = c.whole(v, "retry.max_retries")?;
        c.problem("retry.max_retries", check_max_retries(n))
            .then(|| u32::try_from(n).ok())
            .flatten()
    });
    let initial_interval = field(obj, "initial_interval").map_or(Some(d.initial_interval), |v| {
        c.duration(v, "retry.initial_interval")
    });
    let max_interval = field(obj, "max_interval").map_or(Some(d.max_interval), |v| {
        c.duration(v, "retry.max_interval")
    });
    let multiplier =
        field(obj, "multiplier").map_or(Some(d.multiplier), |v| c.number(v, "retry.multiplier"));
    let jitter = field(obj, "jitter").map_or(Some(d.jitter), |v| c.number(v, "retry.jitter"));
    // `null` means "no limit", so absence and null differ here.
    let max_elapsed = match obj.get("max_elapsed") {
        None => Some(d.max_elapsed),
        Some(Value::Null) => Some(None),
        Some(v) => c.duration(v, "retry.max_elapsed").map(Some),
    };
    // The bounds are the typed policy's (`check_retry`), applied to what was read. A field
    // that did not read stands in with a value that raises nothing of its own (and keeps the
    // two intervals in order), so the others are still checked and every problem shows.
    let probe = RetryPolicy {
        max_retries: max_retries.unwrap_or(d.max_retries),
        initial_interval: initial_interval
            .or(max_interval.map(|m| m.min(d.initial_interval)))
            .unwrap_or(d.initial_interval),
        max_interval: max_interval
            .or(initial_interval.map(|i| i.max(d.max_interval)))
            .unwrap_or(d.max_interval),
        multiplier: multiplier.unwrap_or(d.multiplier),
        jitter: jitter.unwrap_or(d.jitter),
        max_elapsed: max_elapsed.unwrap_or(d.max_elapsed),
    };
    let problems = check_retry(&probe);
    let clean = problems.is_empty();
    c.errors.extend(problems);
    let read = RetryPolicy {
        max_retries: max_retries?,
        initial_interval: initial_interval?,
        max_interval: max_interval?,
        multiplier: multiplier?,
        jitter: jitter?,
        max_elapsed: max_elapsed?,
    };
    clean.then_some(read)
}
