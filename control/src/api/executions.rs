//! Executions as the API shows them: the history across tasks (query, page, one record),
//! one execution's whole story, and what a kill reached.
//!
//! [`ExecutionParams`] is the query as a caller wrote it and [`ExecutionQuery`] the checked
//! one a backend reads, so relative times and outcome names are resolved in one place and
//! a backend never sees input it would have to refuse.

use ax_scheduler_core::{ExecutionId, UtcMillis};
use serde::{Deserialize, Serialize};

use super::{ApiError, DeadLetter, MAX_LIST_LIMIT};

/// Attempts in a page of `GET /executions` when the request gives no `limit`.
pub const DEFAULT_EXECUTION_PAGE: usize = 50;

/// The outcome labels an attempt can end with, as the history shows them.
pub const OUTCOME_LABELS: [&str; 7] = [
    "succeeded",
    "retrying",
    "failed",
    "timed_out",
    "panicked",
    "dead_lettered",
    "killed",
];

/// How an attempt, or an execution, ended, as the history, the story and the API name it.
/// Serialized as its label (`"timed_out"`); a label this version does not know reads as
/// [`Outcome::Unknown`] rather than failing the whole answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The handler succeeded.
    Succeeded,
    /// The attempt failed and a retry is scheduled.
    Retrying,
    /// The attempt failed and no retry follows (dead-lettered, unless the task says not to).
    Failed,
    /// The attempt ran past its timeout and was stopped; no retry follows.
    TimedOut,
    /// The handler panicked; no retry follows.
    Panicked,
    /// The execution went to the dead-letter queue without running (an unknown handler).
    DeadLettered,
    /// Killed by an operator, or replaced by a newer execution of its task.
    Killed,
    /// Given back unfinished at a worker's shutdown; it runs again elsewhere.
    Released,
    /// An attempt waits for its completion (`http.async`); a story's outcome only.
    Waiting,
    /// It waits in its queue to be taken; a story's outcome only.
    Queued,
    /// A worker holds its attempt now; a story's outcome only.
    Running,
    /// Nothing is recorded of it yet, or a label this version does not know.
    #[default]
    #[serde(other)]
    Unknown,
}

impl Outcome {
    /// The label: `succeeded`, `retrying`, `failed`, `timed_out`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Retrying => "retrying",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Panicked => "panicked",
            Outcome::DeadLettered => "dead_lettered",
            Outcome::Killed => "killed",
            Outcome::Released => "released",
            Outcome::Waiting => "waiting",
            Outcome::Queued => "queued",
            Outcome::Running => "running",
            Outcome::Unknown => "unknown",
        }
    }

    /// The outcome a label names; [`Outcome::Unknown`] for any other text.
    pub fn from_label(label: &str) -> Outcome {
        [
            Outcome::Succeeded,
            Outcome::Retrying,
            Outcome::Failed,
            Outcome::TimedOut,
            Outcome::Panicked,
            Outcome::DeadLettered,
            Outcome::Killed,
            Outcome::Released,
            Outcome::Waiting,
            Outcome::Queued,
            Outcome::Running,
        ]
        .into_iter()
        .find(|o| o.as_str() == label)
        .unwrap_or(Outcome::Unknown)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Outcome {
    fn from(label: &str) -> Self {
        Outcome::from_label(label)
    }
}

impl PartialEq<&str> for Outcome {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The labels of failed attempts (`failed=true`, `ax history --failed`): a retried failure
/// is a failure too.
pub const FAILED_LABELS: [&str; 5] = [
    "retrying",
    "failed",
    "timed_out",
    "panicked",
    "dead_lettered",
];

/// The query string of `GET /executions`, as written; [`ExecutionParams::resolve`] checks it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionParams {
    /// Only this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Only this task: `NS/ID`, or `ID` in `namespace` (else `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Only these outcomes, comma separated ([`OUTCOME_LABELS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Only failed attempts ([`FAILED_LABELS`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Only attempts written at or after: milliseconds since the epoch, or a duration
    /// before now (`1h`, `30m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only attempts written at or before, as `since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Most attempts in the page, 1 to [`MAX_LIST_LIMIT`]; default
    /// [`DEFAULT_EXECUTION_PAGE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The previous page's `continue`.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// Which attempts [`ApiBackend::executions`](super::ApiBackend::executions) returns, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this task id (in `namespace`).
    pub task_id: Option<String>,
    /// Only these outcome labels; empty: all.
    pub outcomes: Vec<String>,
    /// Only attempts written at or after.
    pub since: Option<UtcMillis>,
    /// Only attempts written at or before.
    pub until: Option<UtcMillis>,
    /// Most attempts in the page.
    pub limit: usize,
    /// Where the page starts (a previous page's `continue`).
    pub continue_token: Option<String>,
}

impl ExecutionParams {
    /// The checked query, relative times taken back from `now`; [`ApiError::Invalid`]
    /// names each problem.
    pub fn resolve(&self, now: UtcMillis) -> Result<ExecutionQuery, ApiError> {
        let mut problems = Vec::new();
        let limit = self.page_limit(&mut problems);
        let since = instant("since", &self.since, now, &mut problems);
        let until = instant("until", &self.until, now, &mut problems);
        let outcomes = self.outcomes(&mut problems);
        let (namespace, task_id) = self.task_filter();
        if let Some(c) = &self.continue_token {
            if c.parse::<ax_scheduler_core::EventPosition>().is_err() {
                problems.push(format!("continue: `{c}` is not a continue token"));
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::Invalid {
                message: format!("invalid execution query: {}", problems.join("; ")),
                errors: problems,
            });
        }
        Ok(ExecutionQuery {
            namespace,
            task_id,
            outcomes,
            since,
            until,
            limit,
            continue_token: self.continue_token.clone(),
        })
    }

    /// The page size: the default if none or an invalid one is asked.
    fn page_limit(&self, problems: &mut Vec<String>) -> usize {
        match self.limit {
            None => DEFAULT_EXECUTION_PAGE,
            Some(n) if (1..=MAX_LIST_LIMIT).contains(&n) => n,
            Some(n) => {
                problems.push(format!("limit: {n} is outside 1 to {MAX_LIST_LIMIT}"));
                DEFAULT_EXECUTION_PAGE
            }
        }
    }

    /// The outcome labels asked for (comma-separated, any case), narrowed to the failed
    /// ones with `failed`; empty: all.
    fn outcomes(&self, problems: &mut Vec<String>) -> Vec<String> {
        let mut outcomes: Vec<String> = Vec::new();
        for o in self.outcome.iter().flat_map(|o| o.split(',')) {
            let o = o.trim().to_ascii_lowercase();
            if o.is_empty() {
                continue;
            }
            if OUTCOME_LABELS.contains(&o.as_str()) {
                outcomes.push(o);
            } else {
                problems.push(format!(
                    "outcome: `{o}` is not one of {}",
                    OUTCOME_LABELS.join(", ")
                ));
            }
        }
        if self.failed {
            if outcomes.is_empty() {
                outcomes = FAILED_LABELS.iter().map(|s| (*s).to_owned()).collect();
            } else {
                outcomes.retain(|o| FAILED_LABELS.contains(&o.as_str()));
                if outcomes.is_empty() {
                    problems.push("outcome: no failed outcome named, and failed=true".into());
                }
            }
        }
        outcomes
    }

    /// The namespace and task id asked for: `task` may be `namespace/id`, or an id in
    /// `namespace` (`default` if none is named).
    fn task_filter(&self) -> (Option<String>, Option<String>) {
        match (&self.namespace, &self.task) {
            (ns, Some(t)) => match t.split_once('/') {
                Some((n, id)) => (Some(n.to_owned()), Some(id.to_owned())),
                None => (
                    Some(ns.clone().unwrap_or_else(|| "default".to_owned())),
                    Some(t.clone()),
                ),
            },
            (ns, None) => (ns.clone(), None),
        }
    }
}

/// A time bound of the query: milliseconds since the epoch, or a duration before `now`.
fn instant(
    name: &str,
    v: &Option<String>,
    now: UtcMillis,
    problems: &mut Vec<String>,
) -> Option<UtcMillis> {
    let v = v.as_deref()?.trim();
    if let Ok(ms) = v.parse::<i64>() {
        return Some(UtcMillis(ms));
    }
    match ax_scheduler_core::duration_serde::parse(v) {
        Ok(d) => Some(UtcMillis(
            now.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )),
        Err(e) => {
            problems.push(format!(
                "{name}: `{v}` is neither milliseconds since the epoch nor a duration \
                 before now: {e}"
            ));
            None
        }
    }
}

/// One page of `GET /executions`, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionList {
    /// The attempts.
    pub items: Vec<ExecutionRecord>,
    /// Pass as `continue` for the next page; absent when the range is done. A page may be
    /// short, even empty, and still have one: each request scans a bounded part of the
    /// history.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
}

/// An attempt of an `http.async` task that its receiver accepted (`202`) and that waits
/// for the job's completion report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitingAttempt {
    /// The attempt, counted from 1.
    pub attempt: u32,
    /// The worker that sent its request.
    pub worker: String,
    /// When it started.
    pub started: UtcMillis,
    /// When the completion or the next progress report must come by: it times out then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<UtcMillis>,
    /// The job's last progress report (`percent`, `message` as stored, and `at`, when it
    /// came), if it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ax_queue::Progress>,
}

/// One execution's whole story (`GET /executions/{id}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutionStory {
    /// Execution id.
    pub execution_id: ExecutionId,
    /// The task.
    pub namespace: String,
    /// The task.
    pub task_id: String,
    /// Queue it ran on.
    pub queue: String,
    /// The fire it stands for (for a run-now execution, when it was asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<UtcMillis>,
    /// When its first attempt was enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<UtcMillis>,
    /// How it started: the schedule, an upstream task, or a person (a run-now, a backfill,
    /// a requeue) with who and the payload given; absent for executions recorded before
    /// origins were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<ax_queue::Origin>,
    /// Every recorded attempt, oldest first.
    pub attempts: Vec<ExecutionRecord>,
    /// The attempt that waits for its completion now (`http.async`), with the job's last
    /// progress report; it has no record in `attempts` before it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingAttempt>,
    /// The attempt in its queue now, not ended: queued, waiting for its retry, or held by
    /// a worker. It has no record in `attempts` before it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingAttempt>,
    /// How it ended: the last attempt's outcome (`retrying` while a retry is pending,
    /// `waiting` while an attempt waits for its completion).
    pub outcome: Outcome,
    /// Its dead-letter entry, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
    /// The execution it was requeued as, once dead-lettered and put back (`origin` of that
    /// one names this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeued_as: Option<ExecutionId>,
    /// False when the search for its attempts stopped at its bound before their end.
    pub complete: bool,
    /// For an execution of a fanned-out fire (`shards`, or a broadcast's one per worker):
    /// that fire with all its executions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire: Option<FireView>,
}

/// An attempt that has not ended, as its queue holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAttempt {
    /// The attempt, from 1.
    pub attempt: u32,
    /// `queued`, `retrying` (its retry time not come) or `running`.
    pub state: Outcome,
    /// The worker holding it, while one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// When this attempt was enqueued.
    pub enqueued: UtcMillis,
}

/// A fanned-out fire and its executions, in an execution's story.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FireView {
    /// The fan-out id its executions share.
    pub fanout_id: ExecutionId,
    /// How many executions it has (`shards`, or workers of a broadcast).
    pub total: u32,
    /// The last recorded attempt of each of its executions, by piece index (from the task's
    /// recent history: executions not recorded yet, or no longer kept, are missing).
    pub executions: Vec<ExecutionRecord>,
}

/// One execution of a task, as kept in its history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRecord {
    /// Execution id.
    pub execution_id: ExecutionId,
    /// Attempt number, 1 for the first.
    pub attempt: u32,
    /// When it was due.
    pub due: UtcMillis,
    /// When a worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<UtcMillis>,
    /// Start minus due, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lateness_ms: Option<u64>,
    /// Run time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// How the attempt ended.
    pub outcome: Outcome,
    /// Error message of a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Instance id of the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The task (in the history across tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The task (in the history across tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Queue it ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// When the attempt was enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<UtcMillis>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<UtcMillis>,
    /// When the retry that follows is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<UtcMillis>,
    /// The start of the handler's answer: `{"status", "body", "truncated"}`, the body's
    /// first KiB at most (in the history across tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ax_scheduler_core::AttemptOutput>,
    /// The dependency run and the piece of a fanned-out fire it belongs to (`run_id`,
    /// `fanout_id`, `shard_index`, `shard_total`, and for a broadcast fire the worker it is
    /// addressed to, `target_worker`), when it does.
    #[serde(flatten)]
    pub lineage: ax_queue::Lineage,
}

/// What a kill did, per execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillResult {
    /// The executions killed (or found killed already).
    pub killed: Vec<KilledExecution>,
}

/// One execution a kill reached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KilledExecution {
    /// Execution id.
    pub execution_id: ExecutionId,
    /// Its task's namespace, when known (not for one killed before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its task's id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Its queue.
    pub queue: String,
    /// Where it was: `waiting` or `retry_pending` (removed: it never runs), `running` (its
    /// worker stops it within a second), `already_killed`.
    pub state: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn outcomes_travel_as_their_labels_and_a_new_label_is_unknown() {
        for label in OUTCOME_LABELS.iter().chain(["released", "waiting"].iter()) {
            let outcome = Outcome::from_label(label);
            assert_ne!(outcome, Outcome::Unknown, "{label}");
            assert_eq!(serde_json::to_value(outcome).unwrap(), *label);
            assert_eq!(
                serde_json::from_value::<Outcome>(json!(label)).unwrap(),
                outcome
            );
        }
        assert_eq!(
            serde_json::from_value::<Outcome>(json!("vanished")).unwrap(),
            Outcome::Unknown
        );
        for core in [
            ax_scheduler_core::AttemptOutcome::Succeeded,
            ax_scheduler_core::AttemptOutcome::Failed,
            ax_scheduler_core::AttemptOutcome::TimedOut,
            ax_scheduler_core::AttemptOutcome::Panicked,
            ax_scheduler_core::AttemptOutcome::DeadLettered,
            ax_scheduler_core::AttemptOutcome::Killed,
            ax_scheduler_core::AttemptOutcome::Released,
        ] {
            assert_ne!(
                Outcome::from_label(core.as_str()),
                Outcome::Unknown,
                "{core:?}"
            );
        }
    }

    const NOW: UtcMillis = UtcMillis(1_800_000_000_000);

    #[test]
    fn a_query_is_resolved_parameter_by_parameter() {
        let params = ExecutionParams {
            task: Some("beat".into()),
            outcome: Some("Failed, succeeded,".into()),
            failed: true,
            since: Some("1h".into()),
            until: Some("1700000000000".into()),
            ..ExecutionParams::default()
        };
        let q = params.resolve(NOW).unwrap();
        assert_eq!(
            (q.namespace.as_deref(), q.task_id.as_deref()),
            (Some("default"), Some("beat"))
        );
        assert_eq!(q.outcomes, ["failed"], "failed=true keeps the failed ones");
        assert_eq!(q.since, Some(UtcMillis(NOW.0 - 3_600_000)));
        assert_eq!(q.until, Some(UtcMillis(1_700_000_000_000)));
        assert_eq!(q.limit, DEFAULT_EXECUTION_PAGE);
        let all_failed = ExecutionParams {
            task: Some("ops/beat".into()),
            failed: true,
            ..ExecutionParams::default()
        }
        .resolve(NOW)
        .unwrap();
        assert_eq!(all_failed.namespace.as_deref(), Some("ops"));
        assert_eq!(all_failed.outcomes.len(), FAILED_LABELS.len());
    }

    #[test]
    fn every_problem_of_a_query_is_named_in_order() {
        let params = ExecutionParams {
            outcome: Some("nope".into()),
            since: Some("soon".into()),
            limit: Some(0),
            continue_token: Some("x".into()),
            ..ExecutionParams::default()
        };
        let Err(ApiError::Invalid { errors, .. }) = params.resolve(NOW) else {
            panic!("an invalid query resolved")
        };
        let fields: Vec<&str> = errors
            .iter()
            .filter_map(|e| e.split_once(':').map(|(f, _)| f))
            .collect();
        assert_eq!(fields, ["limit", "since", "outcome", "continue"]);
    }
}
