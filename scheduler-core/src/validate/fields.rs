//! The plain top-level fields: one value each, no section of their own.
//!
//! Each reader takes the task object and returns the field's value, its default when it is
//! absent, or `None` when a problem was recorded. The few that depend on another field
//! (`idempotency_key` on the schedule) take that field's value as read, so the top-level
//! parser decides the order in which problems are reported.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::checker::{field, join, Checker};
use crate::options::{
    check_idempotency_key, check_payload_size, check_priority, check_timeout, payload_bytes,
};
use crate::task::{
    Schedule, DEFAULT_PRIORITY, DEFAULT_QUEUE, DEFAULT_TIMEOUT, DEFAULT_VERSION, MAX_LABELS,
    MAX_LABEL_BYTES,
};
use crate::time::UtcMillis;

/// `handler`: required.
pub(super) fn read_handler(c: &mut Checker, obj: &Map<String, Value>) -> Option<String> {
    match field(obj, "handler") {
        Some(v) => c.name(v, "handler"),
        None => {
            c.err(
                "handler",
                "missing; name the handler that runs the task, e.g. \"http\" or \"log\"",
            );
            None
        }
    }
}

/// `payload`: any JSON, bounded in size once serialized; absent is `null`.
pub(super) fn read_payload(c: &mut Checker, obj: &Map<String, Value>) -> Value {
    let payload = obj.get("payload").cloned().unwrap_or(Value::Null);
    c.problem("payload", check_payload_size(payload_bytes(&payload)));
    payload
}

/// `queue`: a name, [`DEFAULT_QUEUE`] when absent.
pub(super) fn read_queue(c: &mut Checker, obj: &Map<String, Value>) -> Option<String> {
    field(obj, "queue").map_or(Some(DEFAULT_QUEUE.to_string()), |v| c.name(v, "queue"))
}

/// `priority`: 0 to [`MAX_PRIORITY`](crate::task::MAX_PRIORITY), [`DEFAULT_PRIORITY`] when
/// absent.
pub(super) fn read_priority(c: &mut Checker, obj: &Map<String, Value>) -> Option<u64> {
    let Some(v) = field(obj, "priority") else {
        return Some(u64::from(DEFAULT_PRIORITY));
    };
    let p = c.whole(v, "priority")?;
    c.problem("priority", check_priority(p))
        .then(|| u64::try_from(p).ok())
        .flatten()
}

/// `timeout`: a duration, [`DEFAULT_TIMEOUT`] when absent.
pub(super) fn read_timeout(c: &mut Checker, obj: &Map<String, Value>) -> Option<Duration> {
    field(obj, "timeout").map_or(Some(DEFAULT_TIMEOUT), |v| {
        let timeout = c.duration(v, "timeout")?;
        c.problem("timeout", check_timeout(timeout))
            .then_some(timeout)
    })
}

/// `idempotency_key`: `Some(None)` when absent; only for a one-shot `schedule` (as read:
/// `None` when it had a problem).
pub(super) fn read_idempotency_key(
    c: &mut Checker,
    obj: &Map<String, Value>,
    schedule: Option<&Schedule>,
) -> Option<Option<String>> {
    let idempotency_key = match field(obj, "idempotency_key") {
        None => Some(None),
        Some(v) => c.string(v, "idempotency_key").and_then(|s| {
            c.problem("idempotency_key", check_idempotency_key(&s))
                .then_some(Some(s))
        }),
    };
    if let (Some(Some(_)), Some(Schedule::Every(_) | Schedule::Cron { .. } | Schedule::Dependent)) =
        (&idempotency_key, schedule)
    {
        c.err(
            "idempotency_key",
            "applies to one-shot tasks (schedule at or delay): each fire of a periodic task is enqueued once already, and one key shared by every fire would let the task run once per dedupe window (24 h); remove it",
        );
    }
    idempotency_key
}

/// `paused`: false when absent.
pub(super) fn read_paused(c: &mut Checker, obj: &Map<String, Value>) -> Option<bool> {
    field(obj, "paused").map_or(Some(false), |v| c.bool(v, "paused"))
}

/// `labels`: an object of strings, bounded in count and size.
pub(super) fn read_labels(
    c: &mut Checker,
    obj: &Map<String, Value>,
) -> Option<BTreeMap<String, String>> {
    let labels = field(obj, "labels").map_or(Some(BTreeMap::new()), |v| c.string_map(v, "labels"));
    if let Some(labels) = &labels {
        check_labels(c, labels);
    }
    labels
}

/// Label count and sizes.
fn check_labels(c: &mut Checker, labels: &BTreeMap<String, String>) {
    if labels.len() > MAX_LABELS {
        c.err(
            "labels",
            format!(
                "has {} labels; at most {MAX_LABELS} are allowed",
                labels.len()
            ),
        );
    }
    for (k, v) in labels {
        if k.len() > MAX_LABEL_BYTES || v.len() > MAX_LABEL_BYTES {
            c.err(
                &join("labels", k),
                format!("key and value may be at most {MAX_LABEL_BYTES} bytes each"),
            );
        }
    }
}

/// `version`: any whole number, [`DEFAULT_VERSION`] when absent.
pub(super) fn read_version(c: &mut Checker, obj: &Map<String, Value>) -> Option<u64> {
    field(obj, "version").map_or(Some(DEFAULT_VERSION), |v| {
        c.integer(v, "version", 0, u64::MAX, "version")
    })
}

/// `created_at`: an RFC 3339 instant, `Some(None)` when absent.
pub(super) fn read_created_at(
    c: &mut Checker,
    obj: &Map<String, Value>,
) -> Option<Option<UtcMillis>> {
    match field(obj, "created_at") {
        None => Some(None),
        Some(v) => c.instant(v, "created_at").map(Some),
    }
}
