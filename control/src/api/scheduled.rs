//! Scheduled executions in the API: a handler to run once at an instant or after a delay,
//! kept in Redis until due (see `ax_queue::Submission`), with no task in etcd.
//!
//! A request names the handler, its payload and queue, when it is due (`at`, an RFC 3339
//! instant or milliseconds since the epoch, or `after`, a delay such as `"30m"`) and a
//! task's per-execution options (priority, timeout, retry, idempotency key). A batch of
//! requests is checked whole, every problem of every request at once, before anything is
//! written. The id handed back (`QUEUE/EXECUTION_ID`) is what cancel, move and get take.

use std::time::Duration;

use ax_queue::{ScheduleOutcome, ScheduledEntry, ScheduledRef, Submission, SCHEDULED_ID_MARK};
use ax_scheduler_core::task::DEFAULT_QUEUE;
use ax_scheduler_core::{ExecutionId, RetryPolicy, TaskOptions, UtcMillis};
use serde::{Deserialize, Serialize};

use super::ApiError;

/// The most executions one schedule call takes.
pub const SCHEDULE_REQUEST_MAX: usize = 1000;

/// The longest delay, or the farthest instant, one may schedule for.
pub const SCHEDULE_HORIZON: Duration = Duration::from_secs(366 * 24 * 3600);

/// An instant as a request gives it: RFC 3339 text, or milliseconds since the epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Instant {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    Millis(i64),
    /// RFC 3339, e.g. `2026-12-08T09:30:00Z`.
    Text(String),
}

impl Instant {
    fn resolve(&self) -> Result<UtcMillis, String> {
        match self {
            Instant::Millis(ms) => Ok(UtcMillis(*ms)),
            Instant::Text(t) => chrono::DateTime::parse_from_rfc3339(t)
                .map(|dt| UtcMillis::from_datetime(&dt))
                .map_err(|e| format!("`{t}` is not an RFC 3339 instant: {e}")),
        }
    }
}

/// One execution to schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    /// Its namespace.
    pub namespace: String,
    /// What its executions are called (default: the handler's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The handler that runs it.
    pub handler: String,
    /// The handler's input.
    #[serde(default)]
    pub payload: serde_json::Value,
    /// The queue whose workers run it (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// When it is due; exactly one of `at` and `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Instant>,
    /// How long from now it is due (`"30m"`, `"1h 30m"`, or milliseconds).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    pub after: Option<Duration>,
    /// 0 ..= 9 (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Longest one attempt may run (default 30 s).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    pub timeout: Option<Duration>,
    /// How failed attempts are retried (a task's `retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Submissions sharing it within the dedupe window (24 h) run once: the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        d.map(|d| humantime::format_duration(d).to_string())
            .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "ax_scheduler_core::duration_serde")] Duration);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}

impl ScheduleRequest {
    /// The submission it asks for at `now`, for `actor`; every problem, each prefixed
    /// with `path`, when it has any.
    pub fn submission(
        &self,
        now: UtcMillis,
        actor: Option<String>,
        path: &str,
    ) -> Result<Submission, Vec<String>> {
        let mut problems = Vec::new();
        // The request as a whole: `executions[3]`, or `request` for a lone one.
        let whole = path.strip_suffix('.').unwrap_or("request");
        let due = match resolve_due(self.at.as_ref(), self.after, now) {
            Ok(due) => due,
            Err(Problem::At(e)) => {
                problems.push(format!("{path}at: {e}"));
                now
            }
            Err(Problem::Whole(e)) => {
                problems.push(format!("{whole}: {e}"));
                now
            }
        };
        let mut options = TaskOptions::new();
        if let Some(p) = self.priority {
            options.priority = p;
        }
        if let Some(t) = self.timeout {
            options.timeout = t;
        }
        if let Some(r) = &self.retry {
            options.retry = r.clone();
        }
        options.idempotency_key = self.idempotency_key.clone();
        let submission = Submission {
            namespace: self.namespace.clone(),
            name: self.name.clone().unwrap_or_else(|| self.handler.clone()),
            handler: self.handler.clone(),
            payload: self.payload.clone(),
            queue: self
                .queue
                .clone()
                .unwrap_or_else(|| DEFAULT_QUEUE.to_owned()),
            due,
            options,
            requested_by: actor,
        };
        problems.extend(submission.check().iter().map(|e| format!("{path}{e}")));
        if problems.is_empty() {
            Ok(submission)
        } else {
            Err(problems)
        }
    }
}

/// A batch of executions to schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleBatch {
    /// 1 to [`SCHEDULE_REQUEST_MAX`] executions.
    pub executions: Vec<ScheduleRequest>,
}

impl ScheduleBatch {
    /// Every submission, or [`ApiError::Invalid`] listing every problem of every request.
    pub fn submissions(
        &self,
        now: UtcMillis,
        actor: Option<&str>,
    ) -> Result<Vec<Submission>, ApiError> {
        let n = self.executions.len();
        if n == 0 || n > SCHEDULE_REQUEST_MAX {
            return Err(ApiError::invalid(format!(
                "executions: {n} given; 1 to {SCHEDULE_REQUEST_MAX} per call"
            )));
        }
        let mut out = Vec::with_capacity(n);
        let mut problems = Vec::new();
        for (i, r) in self.executions.iter().enumerate() {
            let path = if n == 1 {
                String::new()
            } else {
                format!("executions[{i}].")
            };
            match r.submission(now, actor.map(str::to_owned), &path) {
                Ok(s) => out.push(s),
                Err(p) => problems.extend(p),
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(ApiError::Invalid {
                message: format!(
                    "{} problem(s) in the executions to schedule",
                    problems.len()
                ),
                errors: problems,
            })
        }
    }
}

/// What became of one scheduled execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleResult {
    /// Its id, `QUEUE/EXECUTION_ID`: what cancel, move and get take.
    pub id: String,
    /// The execution's id, which its history and story are found by.
    pub execution_id: ExecutionId,
    /// When it is due (ms since the epoch).
    pub due: UtcMillis,
    /// Its idempotency key was used within the dedupe window: this is that submission's
    /// execution, and nothing was added.
    #[serde(default)]
    pub duplicate: bool,
}

impl ScheduleResult {
    /// The result of `outcome` for a submission due at `due`.
    pub fn of(outcome: &ScheduleOutcome, due: UtcMillis) -> Self {
        let r = outcome.reference();
        ScheduleResult {
            id: r.to_string(),
            execution_id: r.execution_id,
            due,
            duplicate: matches!(outcome, ScheduleOutcome::Duplicate(_)),
        }
    }
}

/// The answer to a schedule call, in the order of the request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleReply {
    /// One per execution asked for.
    pub scheduled: Vec<ScheduleResult>,
}

/// A scheduled execution as it waits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduledView {
    /// `QUEUE/EXECUTION_ID`.
    pub id: String,
    /// The execution's id.
    pub execution_id: ExecutionId,
    /// When it is due (ms since the epoch).
    pub due: UtcMillis,
    /// Its namespace.
    pub namespace: String,
    /// What its executions are called.
    pub name: String,
    /// The handler that will run it.
    pub handler: String,
    /// Its queue (the logical name).
    pub queue: String,
    /// Its priority.
    pub priority: u8,
    /// Its payload.
    pub payload: serde_json::Value,
    /// Who asked for it, when that was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

impl ScheduledView {
    /// The view of a waiting entry.
    pub fn of(entry: &ScheduledEntry) -> Self {
        let m = &entry.message;
        ScheduledView {
            id: entry.reference.to_string(),
            execution_id: entry.reference.execution_id,
            due: entry.due,
            namespace: m.namespace.to_string(),
            name: m
                .task_id
                .strip_prefix(SCHEDULED_ID_MARK)
                .unwrap_or(&m.task_id)
                .to_owned(),
            handler: m.handler.to_string(),
            queue: m.queue.to_string(),
            priority: m.priority,
            payload: m.payload.clone(),
            requested_by: m.origin().actor,
        }
    }
}

/// One page of a queue's scheduled executions, soonest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScheduledPage {
    /// How many the queue holds in all (every partition).
    pub total: u64,
    /// The page.
    pub items: Vec<ScheduledView>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// The cursor of a [`ScheduledPage`]: the last entry's due instant and id.
pub fn page_cursor(due: UtcMillis, id: ExecutionId) -> String {
    format!("{}.{id}", due.0)
}

/// Reads a cursor made by [`page_cursor`].
pub fn parse_page_cursor(text: &str) -> Result<(UtcMillis, ExecutionId), ApiError> {
    let bad = || ApiError::BadCursor(format!("`{text}` is not a scheduled listing's cursor"));
    let (due, id) = text.split_once('.').ok_or_else(bad)?;
    Ok((
        UtcMillis(due.parse().map_err(|_| bad())?),
        id.parse().map_err(|_| bad())?,
    ))
}

/// Reads an id given as `QUEUE/EXECUTION_ID`.
pub fn parse_scheduled_id(text: &str) -> Result<ScheduledRef, ApiError> {
    text.parse()
        .map_err(|e: ax_queue::QueueError| ApiError::invalid(format!("scheduled id: {e}")))
}

/// A move of a scheduled execution: exactly one of `at` and `after`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RescheduleRequest {
    /// The new instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Instant>,
    /// The new delay from now.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "optional_duration"
    )]
    pub after: Option<Duration>,
}

impl RescheduleRequest {
    /// The new due instant at `now`.
    pub fn due(&self, now: UtcMillis) -> Result<UtcMillis, ApiError> {
        resolve_due(self.at.as_ref(), self.after, now).map_err(|e| match e {
            Problem::At(e) => ApiError::invalid(format!("at: {e}")),
            Problem::Whole(e) => ApiError::invalid(e),
        })
    }
}

/// Why a due instant could not be resolved: the `at` given, or the request as a whole.
enum Problem {
    At(String),
    Whole(String),
}

/// The due instant of exactly one of `at` and `after` at `now`, within the
/// [`SCHEDULE_HORIZON`]: one rule for a new execution and for a move.
fn resolve_due(
    at: Option<&Instant>,
    after: Option<Duration>,
    now: UtcMillis,
) -> Result<UtcMillis, Problem> {
    let due = match (at, after) {
        (Some(at), None) => at.resolve().map_err(Problem::At)?,
        (None, Some(after)) => now.add(after),
        _ => {
            return Err(Problem::Whole(
                "give exactly one of `at` and `after`".into(),
            ))
        }
    };
    if due > now.add(SCHEDULE_HORIZON) {
        return Err(Problem::Whole(format!(
            "due {} is past the horizon of 366 days",
            due.to_rfc3339()
        )));
    }
    Ok(due)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn request(body: serde_json::Value) -> ScheduleRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_request_resolves_its_delay_and_defaults() {
        let r = request(
            json!({"namespace": "shop", "handler": "orders.close", "after": "30m",
            "payload": {"order": 1}, "idempotency_key": "o-1"}),
        );
        let s = r.submission(UtcMillis(1_000), None, "").unwrap();
        assert_eq!(s.due, UtcMillis(1_000 + 30 * 60_000));
        assert_eq!(
            (s.name.as_str(), s.queue.as_str()),
            ("orders.close", "default")
        );
        assert_eq!(s.options.idempotency_key.as_deref(), Some("o-1"));
        let at = request(json!({"namespace": "shop", "handler": "h",
            "at": "2026-12-08T09:30:00Z"}));
        assert_eq!(
            at.submission(UtcMillis(1_796_000_000_000), None, "")
                .unwrap()
                .due,
            UtcMillis(1_796_722_200_000)
        );
    }

    #[test]
    fn every_problem_of_every_request_is_told_at_once() {
        let batch = ScheduleBatch {
            executions: vec![
                request(json!({"namespace": "bad ns", "handler": "h", "after": "1m"})),
                request(json!({"namespace": "ns", "handler": "h"})),
                request(json!({"namespace": "ns", "handler": "h", "at": "yesterday",
                    "priority": 11})),
                request(json!({"namespace": "ns", "handler": "h", "after": "400 days"})),
            ],
        };
        let Err(ApiError::Invalid { errors, .. }) = batch.submissions(UtcMillis(0), None) else {
            panic!("accepted")
        };
        for needle in [
            "executions[0].namespace",
            "executions[1]: give exactly one",
            "executions[2].at",
            "executions[2].priority",
            "executions[3]: due",
        ] {
            assert!(
                errors.iter().any(|e| e.starts_with(needle)),
                "{needle} missing in {errors:?}"
            );
        }
        assert!(ScheduleBatch::default()
            .submissions(UtcMillis(0), None)
            .is_err());
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(serde_json::from_value::<ScheduleRequest>(
            json!({"namespace": "ns", "handler": "h", "after": "1m", "delay": "1m"})
        )
        .is_err());
    }

    proptest! {
        #[test]
        fn cursors_read_back(due in 0i64..i64::MAX, id: u128) {
            let id = ExecutionId::from_u128(id);
            prop_assert_eq!(
                parse_page_cursor(&page_cursor(UtcMillis(due), id)).unwrap(),
                (UtcMillis(due), id)
            );
        }

        #[test]
        fn any_request_body_is_refused_or_checked_without_panicking(body in ".{0,200}") {
            if let Ok(r) = serde_json::from_str::<ScheduleRequest>(&body) {
                let _ = r.submission(UtcMillis(0), None, "");
            }
        }
    }
}
