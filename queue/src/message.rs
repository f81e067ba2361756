//! The execution message: one fire of one task, as it travels through Redis.
//!
//! It carries everything a worker needs (handler, payload, HTTP target or command call,
//! timeout, retry policy) so workers never read the task registry. It is stored as JSON, and
//! the exact stored string is what the worker settles with (LREM needs the same bytes), so a
//! [`crate::Delivery`] keeps the raw text beside the decoded message. A retry is a new message (attempt + 1, the error
//! appended) with the same execution id; a dead-letter requeue is a new execution id.

use std::time::Duration;

use std::sync::Arc;

use ax_scheduler_core::overlap::dispatch_mode;
use ax_scheduler_core::task::{CommandCall, HttpTarget};
use ax_scheduler_core::{
    Concurrency, Dispatch, ExecutionId, OverlapPolicy, RetryPolicy, TaskKey, TaskSpec, UtcMillis,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{QueueError, Result};
use crate::origin::{Origin, OriginKind};

/// A fresh execution id: a UUID v7, so ids sort by creation time. Drawn here, in the shell,
/// since the core reads no clock and draws no randomness.
pub fn new_execution_id() -> ExecutionId {
    ExecutionId::from(Uuid::now_v7())
}

/// One failed attempt, as kept on the message and in dead-letter entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// Attempt number (0 is the first).
    pub attempt: u32,
    /// When the attempt failed.
    pub at: UtcMillis,
    /// What went wrong.
    pub error: String,
}

/// One execution of a task, as enqueued for workers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutionMessage {
    /// Unique id of this execution (UUID v7, so ids sort by creation time).
    pub execution_id: ExecutionId,
    /// Task id.
    pub task_id: Arc<str>,
    /// Task namespace.
    pub namespace: Arc<str>,
    /// The schedule instant this execution stands for (for run-now, when it was asked for).
    pub fire_at: UtcMillis,
    /// The attempt's index in the queue's protocol, 0 for the first. Everything people and
    /// handlers read counts from 1 ([`ExecutionMessage::attempt_number`]).
    pub attempt: u32,
    /// Started by hand (`ax task run`) rather than by the schedule.
    #[serde(default)]
    pub run_now: bool,
    /// When the first attempt was enqueued; retries measure their total time from here.
    pub first_attempt_at: UtcMillis,
    /// When this attempt was enqueued.
    pub enqueued_at: UtcMillis,
    /// Handler name.
    pub handler: Arc<str>,
    /// Handler input.
    #[serde(default)]
    pub payload: serde_json::Value,
    /// Target of the `http` handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpTarget>,
    /// What the `command` handler runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<CommandCall>,
    /// Longest one attempt may run, in milliseconds.
    pub timeout_ms: u64,
    /// Retry settings of the task.
    pub retry: Arc<RetryPolicy>,
    /// Task priority, 0 ..= 9: the queue's order of waiting messages (priority with aging).
    pub priority: u8,
    /// Idempotency key of the task, if any: executions sharing it are enqueued once per
    /// dedupe window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Fencing token of the scheduler that enqueued it.
    pub fencing_token: u64,
    /// Queue name.
    pub queue: Arc<str>,
    /// What the enqueue does about the task's still-active previous execution, as the
    /// dispatcher decided it (`ax_scheduler_core::overlap`).
    #[serde(default = "no_overlap_check")]
    pub overlap: OverlapPolicy,
    /// Errors of earlier attempts, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_errors: Vec<AttemptError>,
    /// The task's concurrency limit with its key resolved for this execution (see
    /// `ax_scheduler_core::concurrency`): the queue runs at most `max` executions with this
    /// key at once, across all workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// For a backfill: the past fire of the schedule this execution stands for (ms since
    /// the epoch). It runs now, as a run-now does; this says which period it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_of: Option<UtcMillis>,
    /// Where it stands in a larger whole: a dependency run, a fanned-out fire.
    #[serde(flatten)]
    pub lineage: Lineage,
    /// The scheduling shard whose owner enqueued it (`None`: the one leader of an unsharded
    /// install). It selects the fence the enqueue checks and the event stream its attempts'
    /// events go to; retries and requeues keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u32>,
    /// Whether the reaper gave this message back after the worker holding it stopped
    /// mid-attempt, so the attempt may already have had its effect. Set only by the reaper's
    /// script (`reap.lua`); a retry or a requeue is a fresh delivery.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redelivered: bool,
}

/// Where an execution stands in a larger whole, carried from its message into its history
/// entries: the run of a dependency chain (see `ax_scheduler_core::workflow`) and the piece
/// of a fanned-out fire (see `ax_scheduler_core::fanout`). Empty for a lone execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    /// The run of a chain of dependent tasks (the id of the chain's first execution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<ExecutionId>,
    /// For a fanned-out fire: the id its pieces share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fanout_id: Option<ExecutionId>,
    /// For a fanned-out fire: this execution's piece, 0-based.
    #[serde(
        default,
        rename = "shard_index",
        skip_serializing_if = "Option::is_none"
    )]
    pub piece_index: Option<u32>,
    /// For a fanned-out fire: how many pieces it has.
    #[serde(
        default,
        rename = "shard_total",
        skip_serializing_if = "Option::is_none"
    )]
    pub piece_total: Option<u32>,
    /// For a broadcast fire: the worker this piece is addressed to. Only that worker takes
    /// it (its retries too); if the worker is gone it ends failed, never runs elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_worker: Option<String>,
    /// How the execution started; absent in messages written before origins were kept (see
    /// [`ExecutionMessage::origin`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::Origin>,
}

/// How the enqueue recognises a message that was enqueued before (a fire dispatched by two
/// leaders, a run-now request read twice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dedupe {
    /// A scheduled fire, enqueued once per (task, fire instant). The queue keeps one mark per
    /// task, the newest fire instant enqueued, instead of one key per fire: a task's fires
    /// are dispatched in time order, so a fire at or before the mark was enqueued already,
    /// and the queue holds O(tasks) marks rather than O(fires) keys.
    Fire(UtcMillis),
    /// An identity enqueued once within the dedupe window: a run-now execution's id, or a
    /// one-shot task's idempotency key (scoped to its namespace).
    Key(String),
}

fn no_overlap_check() -> OverlapPolicy {
    OverlapPolicy::Allow
}

/// Slack added to an active marker's lifetime beyond the longest the execution can take.
const ACTIVE_MARKER_SLACK: Duration = Duration::from_secs(300);
/// Retry time assumed for a policy without `max_elapsed`.
const ACTIVE_MARKER_RETRY_ALLOWANCE: Duration = Duration::from_secs(3600);

/// The dedupe identity of the backfilled fire `fire_at` of a task: each runs once, however
/// often its range is backfilled (within the dedupe window).
pub(crate) fn backfill_identity(namespace: &str, task_id: &str, fire_at: UtcMillis) -> String {
    format!("backfill:{namespace}/{task_id}:{}", fire_at.0)
}

impl ExecutionMessage {
    /// The attempt as people and handlers count it, 1 for the first: in logs, the CLI, the
    /// console, the API, `X-Ax-Attempt` and `AX_ATTEMPT`.
    pub fn attempt_number(&self) -> u32 {
        self.attempt.saturating_add(1)
    }

    /// The first attempt of what the dispatcher asked to enqueue, at `now`, by a scheduler
    /// holding `fencing_token`. The dispatch's key names the task (a spec's own id and
    /// namespace fields may be empty), and its overlap mode is carried as decided.
    pub fn for_dispatch(dispatch: &Dispatch, now: UtcMillis, fencing_token: u64) -> Self {
        let spec = &dispatch.spec;
        let (execution_id, run_now) = match (&dispatch.piece, dispatch.run_now) {
            // Derived from the fire: the same on every leader (a duplicate when sent again).
            (Some(piece), run_now) => (piece.execution_id(), run_now.is_some()),
            // A run-now request names its execution id (its trigger key).
            (None, Some(id)) => (id, true),
            (None, None) => (new_execution_id(), false),
        };
        let run_of_its_own = dispatch
            .piece
            .as_ref()
            .map_or(execution_id, |piece| piece.fanout);
        let mut m = ExecutionMessage {
            execution_id,
            task_id: dispatch.key.id.clone(),
            namespace: dispatch.key.namespace.clone(),
            fire_at: dispatch.fire_at,
            attempt: 0,
            run_now,
            first_attempt_at: now,
            enqueued_at: now,
            handler: spec.handler.clone(),
            payload: spec.payload.clone(),
            http: spec.http.clone(),
            command: spec.command.clone(),
            timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
            retry: spec.retry.clone(),
            priority: spec.priority,
            // A spec's key makes its scheduled fire run once; a run-now is a run of its own
            // (its request may bring a key of its own, see `with_run_now_request`).
            idempotency_key: if run_now {
                None
            } else {
                spec.idempotency_key.clone()
            },
            fencing_token,
            queue: spec.queue.clone(),
            overlap: dispatch.overlap,
            previous_errors: Vec::new(),
            concurrency: None,
            backfill_of: None,
            lineage: Lineage {
                run_id: dispatch
                    .run_id
                    .or_else(|| dispatch.starts_run.then_some(run_of_its_own)),
                fanout_id: dispatch.piece.as_ref().map(|s| s.fanout),
                piece_index: dispatch.piece.as_ref().map(|s| s.index),
                piece_total: dispatch.piece.as_ref().map(|s| s.total),
                target_worker: dispatch.piece.as_ref().and_then(|s| s.worker.clone()),
                origin: Some(Origin::of(if run_now {
                    OriginKind::Manual
                } else if dispatch.run_id.is_some() {
                    // A later step of a chain: its upstream task's success started it.
                    OriginKind::Parent
                } else {
                    OriginKind::Schedule
                })),
            },
            // Set by the engine, which knows which scheduling shard owns the task.
            shard: None,
            redelivered: false,
        };
        m.resolve_concurrency(spec.concurrency.as_ref());
        m
    }

    /// Sets the concurrency key of this execution from the task's `limit` (resolved against
    /// this message's namespace, task id and payload; call it again after the payload
    /// changes, as a run-now request with a payload of its own does).
    pub fn resolve_concurrency(&mut self, limit: Option<&Concurrency>) {
        self.concurrency = limit.map(|l| Concurrency {
            key: l.resolve(&self.namespace, &self.task_id, &self.payload),
            max: l.max,
        });
    }

    /// The first attempt of the scheduled fire of `spec` at `fire_at` (tools and tests):
    /// the message the leader enqueues for that fire.
    pub fn for_fire(
        spec: &TaskSpec,
        fire_at: UtcMillis,
        now: UtcMillis,
        fencing_token: u64,
    ) -> Self {
        Self::for_dispatch(&standalone(spec, fire_at, None), now, fencing_token)
    }

    /// A run started by hand at `now`: deduplicated by its own execution id only.
    pub fn run_now(spec: &TaskSpec, now: UtcMillis, fencing_token: u64) -> Self {
        let id = new_execution_id();
        Self::for_dispatch(&standalone(spec, now, Some(id)), now, fencing_token)
    }

    /// The overlap mode argument of the enqueue script.
    pub(crate) fn overlap_mode(&self) -> &'static str {
        match self.overlap {
            OverlapPolicy::Allow => "a",
            OverlapPolicy::Forbid => "f",
            OverlapPolicy::Replace => "r",
        }
    }

    /// Lifetime of the task's active marker: a safety net for an execution whose final
    /// settle never happens (its worker and the reaper both gone), long enough to cover every
    /// attempt, its timeouts and its retry waits.
    pub(crate) fn active_ttl_ms(&self) -> u64 {
        let attempts = u64::from(self.retry.max_retries) + 1;
        let running = self.timeout_ms.saturating_mul(attempts);
        let waiting = self
            .retry
            .max_elapsed
            .unwrap_or(ACTIVE_MARKER_RETRY_ALLOWANCE);
        let total = Duration::from_millis(running)
            .saturating_add(waiting)
            .saturating_add(ACTIVE_MARKER_SLACK);
        u64::try_from(total.as_millis()).unwrap_or(u64::MAX)
    }

    /// The attempt timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// A run-now execution as its request asked: with `payload` instead of the spec's,
    /// deduplicated by the request's `idempotency_key` (scoped to the task) instead of its
    /// execution id, and for a backfill by the past fire it stands for (so a range
    /// backfilled twice runs each fire once). A spec's own idempotency key never applies to
    /// a run-now.
    pub fn with_run_now_request(
        &mut self,
        payload: Option<serde_json::Value>,
        idempotency_key: Option<String>,
        backfill_of: Option<UtcMillis>,
    ) {
        let kind = if backfill_of.is_some() {
            OriginKind::Backfill
        } else {
            OriginKind::Manual
        };
        let mut origin = Origin::of(kind);
        if let Some(payload) = payload {
            origin = origin.with_payload(&payload);
            self.payload = payload;
        }
        self.lineage.origin = Some(origin);
        self.idempotency_key = idempotency_key;
        self.backfill_of = backfill_of;
    }

    /// Names who asked for this run (a run-now, a backfill, a requeue).
    pub fn requested_by(&mut self, actor: Option<String>) {
        if let Some(origin) = &mut self.lineage.origin {
            origin.actor = actor;
        }
    }

    /// How the execution started: as recorded, or, for a message written before origins
    /// were kept, from its flags.
    pub fn origin(&self) -> Origin {
        self.lineage.origin.clone().unwrap_or_else(|| {
            Origin::of(match (self.run_now, self.backfill_of) {
                (true, Some(_)) => OriginKind::Backfill,
                (true, None) => OriginKind::Manual,
                (false, _) if self.lineage.run_id.is_some_and(|r| r != self.execution_id) => {
                    OriginKind::Parent
                }
                (false, _) => OriginKind::Schedule,
            })
        })
    }

    /// The instant this attempt was due, which its lateness counts from: the fire for the
    /// first attempt of a scheduled run, else when it was enqueued (a retry when its wait
    /// ended, a run by hand when it was asked for).
    pub fn attempt_due(&self) -> UtcMillis {
        if self.attempt == 0 && self.origin().is_scheduled() {
            self.fire_at
        } else {
            self.enqueued_at
        }
    }

    /// How the enqueue recognises this message if it was enqueued before.
    pub fn dedupe(&self) -> Dedupe {
        if self.lineage.piece_index.is_some() {
            // Each piece of a fire once: by its derived execution id (the key's `shard:`
            // prefix is part of the stored layout).
            Dedupe::Key(format!("shard:{}", self.execution_id))
        } else if self.run_now {
            match (&self.idempotency_key, self.backfill_of) {
                (Some(key), _) => {
                    Dedupe::Key(format!("run-key:{}/{}:{key}", self.namespace, self.task_id))
                }
                (None, Some(t)) => {
                    Dedupe::Key(backfill_identity(&self.namespace, &self.task_id, t))
                }
                (None, None) => Dedupe::Key(format!("run:{}", self.execution_id)),
            }
        } else if let Some(key) = &self.idempotency_key {
            Dedupe::Key(format!("key:{}:{key}", self.namespace))
        } else {
            Dedupe::Fire(self.fire_at)
        }
    }

    /// The next attempt after `error` failed this one at `now`: same execution id, attempt + 1,
    /// the error appended.
    pub fn next_attempt(&self, error: impl Into<String>, now: UtcMillis) -> Self {
        let mut next = self.clone();
        next.previous_errors.push(AttemptError {
            attempt: self.attempt,
            at: now,
            error: error.into(),
        });
        next.attempt = self.attempt.saturating_add(1);
        next.enqueued_at = now;
        next.redelivered = false;
        next
    }

    /// A fresh execution of the same work (a dead-letter requeue): new id, attempt 0, no
    /// errors, its origin a requeue of this one.
    pub fn fresh_copy(&self, now: UtcMillis) -> Self {
        let mut m = self.clone();
        m.execution_id = new_execution_id();
        m.lineage.origin = Some(Origin {
            requeue_of: Some(self.execution_id),
            ..Origin::of(OriginKind::Requeue)
        });
        m.attempt = 0;
        m.first_attempt_at = now;
        m.enqueued_at = now;
        m.previous_errors.clear();
        m.redelivered = false;
        // A requeue is an operator's decision: it must not collide with the original fire's
        // dedupe key nor be refused by a newer scheduler's fence.
        m.run_now = true;
        m.idempotency_key = None;
        m.overlap = OverlapPolicy::Allow;
        // The worker it was addressed to may be gone: a requeue runs on any worker.
        m.lineage.target_worker = None;
        m
    }

    /// JSON text as stored in Redis.
    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|source| QueueError::Json {
            action: "encode",
            what: "execution message",
            source,
        })
    }

    /// Decodes the stored JSON text, and checks the options it carries against the bounds
    /// a task spec is held to: a message is input from Redis, and a worker does arithmetic
    /// on its timeout and retry policy.
    pub fn from_json(text: &str) -> Result<Self> {
        let message: ExecutionMessage =
            serde_json::from_str(text).map_err(|source| QueueError::Json {
                action: "decode",
                what: "execution message",
                source,
            })?;
        message.check()?;
        Ok(message)
    }

    /// The options' bounds ([`ax_scheduler_core::options`]).
    fn check(&self) -> Result<()> {
        use ax_scheduler_core::options::{check_priority, check_retry, check_timeout};
        let mut problems: Vec<String> = check_retry(&self.retry)
            .into_iter()
            .map(|e| e.to_string())
            .collect();
        let timeout = check_timeout(Duration::from_millis(self.timeout_ms));
        let priority = check_priority(i128::from(self.priority));
        problems.extend(timeout.map(|p| format!("timeout: {p}")));
        problems.extend(priority.map(|p| format!("priority: {p}")));
        if problems.is_empty() {
            Ok(())
        } else {
            Err(QueueError::InvalidMessage(problems.join("; ")))
        }
    }
}

/// The dispatch the leader would make for one fire of `spec` outside a dispatcher.
fn standalone(spec: &TaskSpec, fire_at: UtcMillis, run_now: Option<ExecutionId>) -> Dispatch {
    Dispatch {
        key: Arc::new(TaskKey::new(spec.namespace.clone(), spec.id.clone())),
        spec: Arc::new(spec.clone()),
        fire_at,
        overlap: dispatch_mode(spec, run_now.is_some()),
        run_now,
        run_id: None,
        starts_run: false,
        piece: None,
        broadcast: false,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn spec(id: &str, queue: &str) -> TaskSpec {
        ax_testkit::spec(id, queue, "log")
    }

    #[test]
    fn dedupe_by_fire_run_now_and_namespaced_key() {
        let s = spec("t", "default");
        let m = ExecutionMessage::for_fire(&s, UtcMillis(1000), UtcMillis(1001), 3);
        assert_eq!(m.dedupe(), Dedupe::Fire(UtcMillis(1000)));
        let r = ExecutionMessage::run_now(&s, UtcMillis(5), 3);
        assert_eq!(r.dedupe(), Dedupe::Key(format!("run:{}", r.execution_id)));
        let mut k = s.clone();
        k.idempotency_key = Some("order-7".into());
        let m = ExecutionMessage::for_fire(&k, UtcMillis(1000), UtcMillis(1001), 3);
        assert_eq!(
            m.dedupe(),
            Dedupe::Key(format!("key:{}:order-7", m.namespace))
        );
        // A run-now of a task with a key is its own run, not refused as the key's repeat.
        let mut r = ExecutionMessage::run_now(&k, UtcMillis(5), 3);
        assert_eq!(r.dedupe(), Dedupe::Key(format!("run:{}", r.execution_id)));
        // A run-now request's own key is scoped to the task, apart from the spec's keys.
        r.with_run_now_request(Some(serde_json::json!({"n": 2})), Some("once".into()), None);
        assert_eq!(
            r.dedupe(),
            Dedupe::Key(format!("run-key:{}/{}:once", r.namespace, r.task_id))
        );
        assert_eq!(r.payload, serde_json::json!({"n": 2}));
        r.with_run_now_request(None, None, Some(UtcMillis(60_000)));
        assert_eq!(
            r.dedupe(),
            Dedupe::Key(format!("backfill:{}/{}:60000", r.namespace, r.task_id))
        );
    }

    #[test]
    fn the_redirect_opt_in_travels_with_the_message() {
        let mut s = ax_testkit::spec("t", "default", "http");
        let mut m = ExecutionMessage::for_fire(&s, UtcMillis(1000), UtcMillis(1001), 3);
        let text = m.to_json().unwrap();
        // Off is left out, so messages of tasks that never opt in keep their bytes.
        assert!(!text.contains("follow_redirects"), "{text}");
        assert_eq!(ExecutionMessage::from_json(&text).unwrap(), m);
        if let Some(h) = s.http.as_mut() {
            h.follow_redirects = true;
        }
        m = ExecutionMessage::for_fire(&s, UtcMillis(1000), UtcMillis(1001), 3);
        let back = ExecutionMessage::from_json(&m.to_json().unwrap()).unwrap();
        assert_eq!(back.http.map(|h| h.follow_redirects), Some(true));
    }

    #[test]
    fn a_message_out_of_the_spec_bounds_does_not_decode() {
        let s = spec("t", "default");
        let m = ExecutionMessage::for_fire(&s, UtcMillis(1000), UtcMillis(1001), 3);
        let mut value: serde_json::Value = serde_json::from_str(&m.to_json().unwrap()).unwrap();
        value["retry"]["initial_interval"] = "18446744073709551615s".into();
        value["retry"]["max_interval"] = "18446744073709551615s".into();
        value["timeout_ms"] = u64::MAX.into();
        let err = ExecutionMessage::from_json(&value.to_string()).unwrap_err();
        assert!(!err.is_retryable());
        let text = err.to_string();
        for part in ["retry.initial_interval", "retry.max_interval", "timeout"] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }

    #[test]
    fn the_scheduling_shard_is_left_out_when_there_is_none() {
        let s = spec("t", "default");
        let mut m = ExecutionMessage::for_fire(&s, UtcMillis(1000), UtcMillis(1001), 3);
        assert_eq!(m.shard, None);
        // Unsharded messages keep the bytes of a one-leader install.
        let text = m.to_json().unwrap();
        assert!(!text.contains("\"shard\""), "{text}");
        // A message stored before shards existed decodes as unsharded.
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value.as_object_mut().unwrap().remove("shard");
        assert_eq!(
            ExecutionMessage::from_json(&value.to_string())
                .unwrap()
                .shard,
            None
        );
        m.shard = Some(2);
        let text = m.to_json().unwrap();
        assert!(text.contains("\"shard\":2"), "{text}");
        let back = ExecutionMessage::from_json(&text).unwrap();
        assert_eq!(back, m);
        // Its next attempt and a requeue stay with the shard.
        assert_eq!(back.next_attempt("boom", UtcMillis(2000)).shard, Some(2));
        assert_eq!(back.fresh_copy(UtcMillis(3000)).shard, Some(2));
    }

    #[test]
    fn a_piece_keeps_its_wire_names() {
        let s = spec("t", "default");
        let mut m = ExecutionMessage::for_fire(&s, UtcMillis(1000), UtcMillis(1001), 3);
        m.lineage.piece_index = Some(1);
        m.lineage.piece_total = Some(4);
        let text = m.to_json().unwrap();
        // Workers and stored messages know these fields by their wire names.
        assert!(text.contains("\"shard_index\":1"), "{text}");
        assert!(text.contains("\"shard_total\":4"), "{text}");
        assert!(!text.contains("piece"), "{text}");
        assert_eq!(ExecutionMessage::from_json(&text).unwrap(), m);
    }

    #[test]
    fn next_attempt_keeps_id_and_appends_error() {
        let s = spec("t", "default");
        let m = ExecutionMessage::for_fire(&s, UtcMillis(1000), UtcMillis(1001), 3);
        let n = m
            .next_attempt("boom", UtcMillis(2000))
            .next_attempt("bang", UtcMillis(3000));
        assert_eq!(n.execution_id, m.execution_id);
        assert_eq!(n.attempt, 2);
        assert_eq!(n.previous_errors.len(), 2);
        assert_eq!(n.previous_errors[1].error, "bang");
        assert_eq!(n.first_attempt_at, UtcMillis(1001));
        let back = ExecutionMessage::from_json(&n.to_json().unwrap()).unwrap();
        assert_eq!(back, n);
        let f = n.fresh_copy(UtcMillis(9));
        assert_ne!(f.execution_id, n.execution_id);
        assert_eq!((f.attempt, f.previous_errors.len()), (0, 0));
    }
}
