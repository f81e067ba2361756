//! Scheduled executions: one-shot executions of a handler submitted to run at an instant,
//! kept in Redis alone (no etcd key, no leader memory per execution) until they are due.
//!
//! Each physical queue keeps a sorted set of execution ids scored by due time and a hash of
//! their messages (`schedule_many.lua` beside this file): adding, cancelling
//! (`cancel_scheduled.lua`) and moving one (`reschedule.lua`) cost O(log n) with no scan,
//! and a page of the soonest is a range of the set. The message stored is the one a worker
//! runs, so a scheduled execution is settled, retried, killed and recorded as any other.
//!
//! Every worker of the queue promotes what is due ([`Promoter`], `promote_scheduled.lua`):
//! one script moves a bounded batch from the set into the queued set, so each execution is
//! promoted once however many promoters run, and none waits for a leader. A promoter sleeps
//! until the set's head is due, blocked on the set's wake list, which an add or a move that
//! makes a new, earlier head pushes a token to: fire precision does not depend on a polling
//! interval or on the set's size.
//!
//! An execution goes to the partition its id hashes to (its idempotency key's, when it has
//! one), so a hot name spreads over a partitioned queue; the reference handed back ([`ScheduledRef`]) names that physical queue, so a
//! cancel goes straight to it. The idempotency key is checked in the same script as the add,
//! against the queue's dedupe markers: a second submission within the dedupe window answers
//! the first one's id. A cancel keeps the marker: the key stands for the request, which was
//! made.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use ax_scheduler_core::placement::bucket_of;
use ax_scheduler_core::task::DEFAULT_PRIORITY;
use ax_scheduler_core::{
    ExecutionId, FieldError, OverlapPolicy, TaskOptions, UtcMillis, ValidationErrors,
};
use redis::Script;

use crate::error::{QueueError, Result};
use crate::message::{ExecutionMessage, Lineage};
use crate::millis::ms;
use crate::origin::{Origin, OriginKind};
use crate::partitions::partition_name;
use crate::queue::{check_queue, Queue};
use crate::scripts::ordered;

mod promoter;

pub use promoter::{Promoter, PromoterConfig, PromoterState};

static SCHEDULE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scheduled/schedule_many.lua")));
/// After the order functions: it pushes into the queued set.
static PROMOTE_SCHEDULED: LazyLock<Script> =
    LazyLock::new(|| ordered(include_str!("scheduled/promote_scheduled.lua")));
static CANCEL_SCHEDULED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scheduled/cancel_scheduled.lua")));
/// [`defaults_fragment`], made once.
static DEFAULTS_FRAGMENT: LazyLock<Vec<String>> = LazyLock::new(defaults_fragment);
static RESCHEDULE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scheduled/reschedule.lua")));

/// Executions per script call of [`Queue::schedule_batch`]; the calls of a batch share one
/// pipeline.
pub const SCHEDULE_CHUNK: usize = 500;

/// The most executions one [`Queue::schedule_batch`] takes.
pub const SCHEDULE_BATCH_MAX: usize = 10_000;

/// The most entries one page of [`Queue::scheduled_page`] returns.
pub const SCHEDULED_PAGE_MAX: usize = 1_000;

/// The most executions due at one instant that a page reads past to go on within that
/// instant; past it, the page goes on from the next instant.
pub const PAGE_TIES_MAX: usize = 10_000;

/// The first character of a scheduled execution's task id. Task ids never hold it, so the
/// leader's dispatcher, which ignores executions of tasks it does not know, never mistakes
/// one for a task's.
pub const SCHEDULED_ID_MARK: char = '@';

/// A handler to run once at an instant, as submitted.
#[derive(Clone, Debug, PartialEq)]
pub struct Submission {
    /// The namespace it belongs to (as a task's does: history, kills, audit).
    pub namespace: String,
    /// What its executions are called in history and logs (`[A-Za-z0-9._-]`, 1 to 128):
    /// often the handler's name, or the business action (`close-unpaid-order`).
    pub name: String,
    /// The handler that runs it.
    pub handler: String,
    /// The handler's input, at most [`ax_scheduler_core::task::MAX_PAYLOAD_BYTES`]
    /// serialized.
    pub payload: serde_json::Value,
    /// The queue whose workers run it.
    pub queue: String,
    /// When it is due.
    pub due: UtcMillis,
    /// Priority, timeout, retry and idempotency key, as for a task (its misfire, overlap and
    /// success-deadline settings apply to schedules and are refused here).
    pub options: TaskOptions,
    /// Who asked: an API token's name, `cli:<user>@<host>`, a service's name.
    pub requested_by: Option<String>,
}

impl Submission {
    /// Every problem of the submission at once; empty when it can be scheduled.
    pub fn check(&self) -> ValidationErrors {
        let mut errors: Vec<FieldError> = Vec::new();
        for (path, value) in [("namespace", &self.namespace), ("name", &self.name)] {
            if let Err(e) = ax_scheduler_core::validate::check_name(value) {
                errors.push(FieldError::new(path, e));
            }
        }
        if self.handler.is_empty() || self.handler.len() > 128 {
            errors.push(FieldError::new("handler", "must be 1 to 128 bytes"));
        }
        if !crate::keys::validate_name(&self.queue) {
            errors.push(FieldError::new("queue", "is not a valid queue name"));
        }
        let size = ax_scheduler_core::options::payload_bytes(&self.payload);
        if let Some(e) = ax_scheduler_core::options::check_payload_size(size) {
            errors.push(FieldError::new("payload", e));
        }
        if let Err(e) = self.options.check() {
            errors.extend(e.errors);
        }
        if self.options.sets_schedule_only() {
            errors.push(FieldError::new(
                "options",
                "misfire, overlap and expect_success_within apply to a task's schedule, not to one execution",
            ));
        }
        errors.into()
    }

    /// The message a worker runs for it, under `execution_id`, submitted at `now`.
    pub fn message(&self, execution_id: ExecutionId, now: UtcMillis) -> ExecutionMessage {
        let o = &self.options;
        let mut origin = Origin::of(OriginKind::Submitted);
        origin.actor = self.requested_by.clone();
        ExecutionMessage {
            execution_id,
            task_id: Arc::from(format!("{SCHEDULED_ID_MARK}{}", self.name)),
            namespace: Arc::from(self.namespace.as_str()),
            fire_at: self.due,
            attempt: 0,
            run_now: false,
            first_attempt_at: now,
            enqueued_at: now,
            handler: Arc::from(self.handler.as_str()),
            payload: self.payload.clone(),
            http: None,
            command: None,
            timeout_ms: u64::try_from(o.timeout.as_millis()).unwrap_or(u64::MAX),
            retry: Arc::new(o.retry.clone()),
            priority: o.priority,
            idempotency_key: o.idempotency_key.clone(),
            fencing_token: 0,
            queue: Arc::from(self.queue.as_str()),
            overlap: OverlapPolicy::Allow,
            previous_errors: Vec::new(),
            concurrency: None,
            backfill_of: None,
            lineage: Lineage {
                origin: Some(origin),
                ..Lineage::default()
            },
            shard: None,
            redelivered: false,
        }
    }
}

/// Where a scheduled execution waits: its physical queue and its id, written `QUEUE/ID`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScheduledRef {
    /// The physical queue (a partition's name on a partitioned queue).
    pub queue: String,
    /// The execution's id, which it keeps when it runs.
    pub execution_id: ExecutionId,
}

impl fmt::Display for ScheduledRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.queue, self.execution_id)
    }
}

impl FromStr for ScheduledRef {
    type Err = QueueError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || QueueError::InvalidConfig(format!("`{s}` is not QUEUE/EXECUTION_ID"));
        let (queue, id) = s.rsplit_once('/').ok_or_else(bad)?;
        check_queue(queue)?;
        let execution_id = id.parse().map_err(|_| bad())?;
        Ok(ScheduledRef {
            queue: queue.to_owned(),
            execution_id,
        })
    }
}

/// What became of one submission of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleOutcome {
    /// Added, under this reference.
    Added(ScheduledRef),
    /// Its idempotency key was used within the dedupe window: this is the execution that
    /// used it. Nothing was added.
    Duplicate(ScheduledRef),
}

impl ScheduleOutcome {
    /// The execution it stands for (the new one, or the one it duplicates).
    pub fn reference(&self) -> &ScheduledRef {
        match self {
            ScheduleOutcome::Added(r) | ScheduleOutcome::Duplicate(r) => r,
        }
    }
}

/// A scheduled execution as it waits.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduledEntry {
    /// Where it waits.
    pub reference: ScheduledRef,
    /// When it is due.
    pub due: UtcMillis,
    /// What will run.
    pub message: ExecutionMessage,
}

/// The fields of a scheduled message its stored form leaves out, each known when it is
/// promoted (`promote_scheduled.lua` writes them back in front): the id is the hash's field,
/// the due instant the set's score, enqueue instants the promotion's, the rest constant.
const FILLED_AT_PROMOTION: [&str; 8] = [
    "execution_id",
    "fire_at",
    "attempt",
    "run_now",
    "first_attempt_at",
    "enqueued_at",
    "fencing_token",
    "overlap",
];

/// The fields a stored form leaves out when they hold the defaults, and the promotion
/// writes back (with [`defaults_fragment`]): most submissions keep them.
const DEFAULTED: [&str; 3] = ["retry", "timeout_ms", "priority"];

/// The default values of [`DEFAULTED`], as the JSON an execution message has them.
fn defaults() -> serde_json::Map<String, serde_json::Value> {
    let defaults = TaskOptions::default();
    let mut map = serde_json::Map::new();
    map.insert(
        "retry".into(),
        serde_json::to_value(&defaults.retry).unwrap_or_default(),
    );
    map.insert(
        "timeout_ms".into(),
        u64::try_from(defaults.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .into(),
    );
    map.insert("priority".into(), defaults.priority.into());
    map
}

/// `"retry":...,"timeout_ms":...,"priority":...` for `promote_scheduled.lua`, each as a
/// separate `key:value` text.
fn defaults_fragment() -> Vec<String> {
    let defaults = defaults();
    DEFAULTED
        .iter()
        .map(|k| {
            let v = defaults.get(*k).cloned().unwrap_or_default();
            format!("{}:{v}", serde_json::Value::String((*k).to_owned()))
        })
        .collect()
}

/// The stored form of a scheduled message: its JSON without [`FILLED_AT_PROMOTION`], and
/// without [`DEFAULTED`] fields that hold their defaults (about 340 bytes less a pending
/// execution).
fn stored_form(m: &ExecutionMessage) -> Result<String> {
    let json = |source| QueueError::Json {
        action: "encode",
        what: "scheduled execution",
        source,
    };
    let mut value = serde_json::to_value(m).map_err(json)?;
    if let Some(fields) = value.as_object_mut() {
        for f in FILLED_AT_PROMOTION {
            fields.remove(f);
        }
        for (k, v) in defaults() {
            if fields.get(&k) == Some(&v) {
                fields.remove(&k);
            }
        }
    }
    serde_json::to_string(&value).map_err(json)
}

/// The message a stored form stands for, as the promotion at `now` would make it.
fn from_stored(
    stored: &str,
    id: ExecutionId,
    due: UtcMillis,
    now: UtcMillis,
) -> Result<ExecutionMessage> {
    let json = |source| QueueError::Json {
        action: "decode",
        what: "scheduled execution",
        source,
    };
    let mut value: serde_json::Value = serde_json::from_str(stored).map_err(json)?;
    let Some(fields) = value.as_object_mut() else {
        return Err(QueueError::InvalidMessage(
            "a scheduled execution is not an object".into(),
        ));
    };
    fields.insert("execution_id".into(), id.to_string().into());
    fields.insert("fire_at".into(), due.0.into());
    fields.insert("attempt".into(), 0.into());
    fields.insert("first_attempt_at".into(), now.0.into());
    fields.insert("enqueued_at".into(), now.0.into());
    fields.insert("fencing_token".into(), 0.into());
    for (k, v) in defaults() {
        fields.entry(k).or_insert(v);
    }
    ExecutionMessage::from_json(&value.to_string())
}

impl Queue {
    /// The physical queue scheduled message `m` waits in: on a partitioned queue, the
    /// partition its idempotency key hashes to (so the key's marker is where a second
    /// submission looks), else the one its id hashes to.
    pub fn scheduled_queue_of(&self, m: &ExecutionMessage) -> String {
        match self.partitions(&m.queue) {
            1 => m.queue.to_string(),
            n => {
                let bucket = match &m.idempotency_key {
                    Some(key) => bucket_of(&[b"k", m.namespace.as_bytes(), key.as_bytes()], n),
                    None => bucket_of(&[b"s", m.execution_id.to_string().as_bytes()], n),
                };
                partition_name(&m.queue, bucket)
            }
        }
    }

    /// Schedules each message to run at its `fire_at` (at most [`SCHEDULE_BATCH_MAX`]; see
    /// [`Submission::message`]): one pipeline of script calls, each atomic per execution.
    /// Answers in the order given.
    pub async fn schedule_batch(&self, msgs: &[ExecutionMessage]) -> Result<Vec<ScheduleOutcome>> {
        if msgs.len() > SCHEDULE_BATCH_MAX {
            return Err(QueueError::InvalidConfig(format!(
                "{} executions in one call; at most {SCHEDULE_BATCH_MAX}",
                msgs.len()
            )));
        }
        // Grouped by physical queue (a script touches one slot), in order within each.
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            check_queue(&m.queue)?;
            let physical = self.scheduled_queue_of(m);
            match groups.iter_mut().find(|(q, _)| *q == physical) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((physical, vec![i])),
            }
        }
        let k = &self.inner.keys;
        let ttl = ms(self.inner.cfg.dedupe_ttl);
        let script: &Script = &SCHEDULE_MANY;
        let mut calls: Vec<(&str, &[usize])> = Vec::new();
        let mut invocations = Vec::new();
        for (physical, idx) in &groups {
            for chunk in idx.chunks(SCHEDULE_CHUNK) {
                let mut inv = script.prepare_invoke();
                inv.key(k.scheduled(physical))
                    .key(k.scheduled_jobs(physical))
                    .key(k.scheduled_wake(physical))
                    .arg(ttl);
                for &i in chunk {
                    let m = &msgs[i];
                    let identity = m
                        .idempotency_key
                        .as_ref()
                        .map(|key| format!("key:{}:{key}", m.namespace));
                    inv.key(match &identity {
                        Some(identity) => k.dedupe(physical, identity),
                        None => k.scheduled(physical),
                    })
                    .arg(m.execution_id.to_string())
                    .arg(m.fire_at.0)
                    .arg(stored_form(m)?)
                    .arg(if identity.is_some() { "1" } else { "" });
                }
                invocations.push(inv);
                calls.push((physical, chunk));
            }
        }
        let replies: Vec<Vec<String>> =
            crate::scripts::pipelined(self, "schedule", script, &invocations).await?;
        let mut out: Vec<Option<ScheduleOutcome>> = vec![None; msgs.len()];
        for ((physical, chunk), reply) in calls.iter().zip(replies) {
            if reply.len() != chunk.len() {
                return Err(QueueError::UnexpectedReply {
                    op: "schedule",
                    detail: format!("{} answers for {} executions", reply.len(), chunk.len()),
                });
            }
            for (&i, answer) in chunk.iter().zip(reply) {
                let reference = |execution_id| ScheduledRef {
                    queue: (*physical).to_owned(),
                    execution_id,
                };
                out[i] = Some(if answer.is_empty() {
                    ScheduleOutcome::Added(reference(msgs[i].execution_id))
                } else {
                    let id = answer.parse().map_err(|_| QueueError::UnexpectedReply {
                        op: "schedule",
                        detail: format!("`{answer}` is not an execution id"),
                    })?;
                    ScheduleOutcome::Duplicate(reference(id))
                });
            }
        }
        for (physical, _) in &groups {
            self.replicated(&k.scheduled(physical)).await?;
        }
        // Due already: promoted now rather than at a promoter's next look (a promoter
        // sleeping out the end of its wait would not see it for up to 150 ms).
        let now = self.inner.cfg.clock.now();
        for (physical, idx) in &groups {
            if idx.iter().any(|&i| msgs[i].fire_at <= now) {
                self.promote_scheduled(physical, now, SCHEDULE_CHUNK)
                    .await?;
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// Takes a scheduled execution out before it is due; the message it held, or `None` when
    /// it is not scheduled (unknown, cancelled, or promoted already: see
    /// [`crate::Queue::kill_execution`] for one that runs).
    pub async fn cancel_scheduled(&self, r: &ScheduledRef) -> Result<Option<ExecutionMessage>> {
        check_queue(&r.queue)?;
        let k = &self.inner.keys;
        let mut inv = CANCEL_SCHEDULED.prepare_invoke();
        inv.key(k.scheduled(&r.queue))
            .key(k.scheduled_jobs(&r.queue))
            .arg(r.execution_id.to_string());
        let mut conn = self.conn();
        let raw: Option<(String, f64)> = self
            .run("cancel scheduled", inv.invoke_async(&mut conn))
            .await?;
        self.replicated(&k.scheduled(&r.queue)).await?;
        let now = self.inner.cfg.clock.now();
        raw.map(|(raw, due)| from_stored(&raw, r.execution_id, UtcMillis(due as i64), now))
            .transpose()
    }

    /// Moves a scheduled execution to `due`; `false` when it is no longer scheduled.
    pub async fn reschedule(&self, r: &ScheduledRef, due: UtcMillis) -> Result<bool> {
        check_queue(&r.queue)?;
        let k = &self.inner.keys;
        let mut inv = RESCHEDULE.prepare_invoke();
        inv.key(k.scheduled(&r.queue))
            .key(k.scheduled_jobs(&r.queue))
            .key(k.scheduled_wake(&r.queue))
            .arg(r.execution_id.to_string())
            .arg(due.0);
        let mut conn = self.conn();
        let moved: i64 = self.run("reschedule", inv.invoke_async(&mut conn)).await?;
        self.replicated(&k.scheduled(&r.queue)).await?;
        Ok(moved == 1)
    }

    /// A scheduled execution as it waits; `None` when it is not scheduled.
    pub async fn scheduled(&self, r: &ScheduledRef) -> Result<Option<ScheduledEntry>> {
        check_queue(&r.queue)?;
        let k = &self.inner.keys;
        let id = r.execution_id.to_string();
        let mut pipe = redis::pipe();
        pipe.hget(k.scheduled_jobs(&r.queue), &id)
            .zscore(k.scheduled(&r.queue), &id);
        let mut conn = self.conn();
        let (raw, due): (Option<String>, Option<f64>) = self
            .run("scheduled get", pipe.query_async(&mut conn))
            .await?;
        match (raw, due) {
            (Some(raw), Some(due)) => {
                let due = UtcMillis(due as i64);
                let now = self.inner.cfg.clock.now();
                Ok(Some(ScheduledEntry {
                    reference: r.clone(),
                    due,
                    message: from_stored(&raw, r.execution_id, due, now)?,
                }))
            }
            _ => Ok(None),
        }
    }

    /// How many executions of `queue` (every partition) are scheduled.
    pub async fn scheduled_count(&self, queue: &str) -> Result<u64> {
        check_queue(queue)?;
        let mut total = 0u64;
        for physical in self.physical_queues(queue) {
            let mut conn = self.conn();
            let n: u64 = self
                .run(
                    "scheduled count",
                    redis::cmd("ZCARD")
                        .arg(self.inner.keys.scheduled(&physical))
                        .query_async(&mut conn),
                )
                .await?;
            total = total.saturating_add(n);
        }
        Ok(total)
    }

    /// A page of `queue`'s scheduled executions, soonest first, from those due after
    /// `after` (exclusive: the last entry of the page before, as due and id), at most
    /// `limit` (capped at [`SCHEDULED_PAGE_MAX`]). Each partition is read from the cursor,
    /// so a page costs O(partitions × (limit + ties at the cursor's instant)), whatever the
    /// backlog.
    pub async fn scheduled_page(
        &self,
        queue: &str,
        after: Option<(UtcMillis, ExecutionId)>,
        limit: usize,
    ) -> Result<Vec<ScheduledEntry>> {
        check_queue(queue)?;
        let limit = limit.clamp(1, SCHEDULED_PAGE_MAX);
        let mut all: Vec<(i64, String, String)> = Vec::new();
        for physical in self.physical_queues(queue) {
            let window = self.page_window(&physical, after, limit).await?;
            for (id, due) in window {
                let due = due as i64;
                if let Some((a_due, a_id)) = after {
                    if (due, id.as_str()) <= (a_due.0, a_id.to_string().as_str()) {
                        continue;
                    }
                }
                all.push((due, id, physical.clone()));
            }
        }
        all.sort();
        all.truncate(limit);
        // The page's messages in one round trip: one HMGET per partition, pipelined.
        let mut pipe = redis::pipe();
        for (_, id, physical) in &all {
            pipe.hget(self.inner.keys.scheduled_jobs(physical), id);
        }
        let mut conn = self.conn();
        let stored: Vec<Option<String>> = self
            .run("scheduled page", pipe.query_async(&mut conn))
            .await?;
        let now = self.inner.cfg.clock.now();
        let mut out = Vec::with_capacity(all.len());
        for ((due, id, physical), stored) in all.into_iter().zip(stored) {
            // Gone in between (promoted or cancelled), or not an id: not listed.
            let (Some(stored), Ok(execution_id)) = (stored, id.parse::<ExecutionId>()) else {
                continue;
            };
            let due = UtcMillis(due);
            out.push(ScheduledEntry {
                message: from_stored(&stored, execution_id, due, now)?,
                reference: ScheduledRef {
                    queue: physical,
                    execution_id,
                },
                due,
            });
        }
        Ok(out)
    }

    /// The entries of physical queue `physical` a page after `after` may hold: its first
    /// `limit` past the cursor. A sorted set orders ties on a score by member, so the window
    /// starts at the cursor's instant and is widened by that instant's ties (counted in
    /// O(log n)), which it must read past; an instant holding more than
    /// [`PAGE_TIES_MAX`] executions is passed over whole instead (listed in part).
    async fn page_window(
        &self,
        physical: &str,
        after: Option<(UtcMillis, ExecutionId)>,
        limit: usize,
    ) -> Result<Vec<(String, f64)>> {
        let key = self.inner.keys.scheduled(physical);
        let (min, skip) = match after {
            None => ("-inf".to_owned(), 0),
            Some((due, _)) => {
                let mut conn = self.conn();
                let ties: usize = self
                    .run(
                        "scheduled page",
                        redis::cmd("ZCOUNT")
                            .arg(&key)
                            .arg(due.0)
                            .arg(due.0)
                            .query_async(&mut conn),
                    )
                    .await?;
                if ties > PAGE_TIES_MAX {
                    (format!("({}", due.0), 0)
                } else {
                    (due.0.to_string(), ties)
                }
            }
        };
        let mut conn = self.conn();
        self.run(
            "scheduled page",
            redis::cmd("ZRANGE")
                .arg(&key)
                .arg(&min)
                .arg("+inf")
                .arg("BYSCORE")
                .arg("LIMIT")
                .arg(0)
                .arg(limit.saturating_add(skip))
                .arg("WITHSCORES")
                .query_async(&mut conn),
        )
        .await
    }

    /// Moves up to `batch` scheduled executions of physical queue `queue` due at `now` into
    /// its queued set; how many moved, and when the next one is due.
    pub async fn promote_scheduled(
        &self,
        queue: &str,
        now: UtcMillis,
        batch: usize,
    ) -> Result<(usize, Option<UtcMillis>)> {
        check_queue(queue)?;
        let k = &self.inner.keys;
        let mut inv = PROMOTE_SCHEDULED.prepare_invoke();
        inv.key(k.scheduled(queue))
            .key(k.scheduled_jobs(queue))
            .key(k.queued(queue))
            .key(k.monitor(queue))
            .key(k.order(queue))
            .key(k.clock(queue))
            .key(k.wake(queue))
            .arg(now.0)
            .arg(batch.clamp(1, SCHEDULE_CHUNK))
            .arg(self.inner.cfg.aging_step_us())
            .arg(DEFAULT_PRIORITY)
            .arg(&*DEFAULTS_FRAGMENT);
        let mut conn = self.conn();
        let (moved, head): (usize, i64) = self
            .run("promote scheduled", inv.invoke_async(&mut conn))
            .await?;
        if moved > 0 {
            self.replicated(&k.queued(queue)).await?;
        }
        Ok((moved, (head >= 0).then_some(UtcMillis(head))))
    }
}

#[cfg(test)]
mod tests;
