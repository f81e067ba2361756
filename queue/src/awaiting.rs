//! Executions that wait for a completion reported later (`http.async`): the receiver answers
//! `202 Accepted`, the worker's slot is freed, and the job reports its end (or progress)
//! through the API with a per-attempt token.
//!
//! Each such execution has a record ([`crate::keys::Keys::awaiting`], a hash in the queue's
//! slot) and, while it waits, an entry in the queue's awaiting set scored by its deadline.
//! An attempt goes `pending` (opened before its request is sent, so a completion that
//! overtakes the 202 finds it and is kept for the worker) → `waiting` (awaiting: the message
//! left the worker's processing list) → `ended`. Every transition is one script, and the end
//! of a waiting attempt is one script for the three ways it can come (the completion, the
//! deadline, a kill), guarded by the attempt's state: exactly one of them wins, the others
//! learn what it did. The retry or dead letter that follows a failed end is written by the
//! same script, so a failover between the end and its settle cannot lose or repeat it.
//!
//! The token is made by the worker for one attempt of one execution; only its SHA-256 is
//! stored (per attempt, so a late call of an attempt that timed out is told so rather than
//! refused as a forgery) and it is compared in constant time. It names its attempt and queue
//! (the record is in the queue's slot, and an execution id says nothing of its queue); it is
//! random beyond that, and opaque to the job.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::{AttemptOutput, UtcMillis};
use redis::{AsyncCommands, Script};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::dlq::DlqEntry;
use crate::ends::EndRecord;
use crate::error::{QueueError, Result};
use crate::message::ExecutionMessage;
use crate::queue::{check_queue, Delivery, Queue};
use crate::scripts::ordered;

// The scripts of an awaiting attempt, each built and hashed once per process. Only the start
// of awaiting comes after the order functions: taking the message out of the worker's list frees its
// slots, which can let a gated message in; the others put nothing in the queued set.
static AWAITING_OPEN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("awaiting/awaiting_open.lua")));
static AWAITING_START: LazyLock<Script> =
    LazyLock::new(|| ordered(include_str!("awaiting/awaiting_start.lua")));
static AWAITING_CLOSE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("awaiting/awaiting_close.lua")));
static AWAITING_END: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("awaiting/awaiting_end.lua")));
static AWAITING_PROGRESS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("awaiting/awaiting_progress.lua")));

/// What every completion token starts with.
const TOKEN_PREFIX: &str = "axc";

/// The secret of one attempt's completion: `axc.<attempt>.<64 hex digits>.<queue>`. Its
/// `Debug` shows no secret, so it cannot reach a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct CompletionToken(String);

impl std::fmt::Debug for CompletionToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompletionToken(***)")
    }
}

impl CompletionToken {
    /// A new token for `attempt` of an execution in `queue`: 256 random bits from the OS's
    /// generator.
    pub fn issue(queue: &str, attempt: u32) -> Self {
        let bytes: [u8; 32] = rand::random();
        CompletionToken(format!("{TOKEN_PREFIX}.{attempt}.{}.{queue}", hex(&bytes)))
    }

    /// The token's text, to send to the receiver (and nowhere else).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The SHA-256 of the token, as stored.
    pub fn hash(&self) -> String {
        token_hash(&self.0)
    }
}

/// What a presented token claims: its attempt and queue. Nothing is proven until its hash
/// matches the record's ([`AwaitingRecord::token_matches`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenClaim {
    /// The attempt the token was made for.
    pub attempt: u32,
    /// The queue of the execution.
    pub queue: String,
}

impl TokenClaim {
    /// The claim of a presented token; `None` when it is not shaped like one.
    pub fn parse(token: &str) -> Option<Self> {
        let mut parts = token.splitn(4, '.');
        let (prefix, attempt, secret, queue) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let well_formed = prefix == TOKEN_PREFIX
            && secret.len() == 64
            && secret.bytes().all(|b| b.is_ascii_hexdigit())
            && crate::keys::validate_name(queue);
        let attempt = attempt.parse().ok()?;
        well_formed.then(|| TokenClaim {
            attempt,
            queue: queue.to_owned(),
        })
    }
}

/// SHA-256 of a token, as 64 lowercase hex digits.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where an awaiting attempt is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AwaitingState {
    /// Its request is being sent; the message is still the worker's.
    Pending,
    /// The receiver accepted it: it waits for the completion, the worker is free.
    Waiting,
    /// It ended (see [`AwaitingRecord::end_of`]).
    Ended,
}

/// How a job reported its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportedStatus {
    /// The job did its work.
    Succeeded,
    /// The job failed.
    Failed,
}

impl ReportedStatus {
    /// The end label recorded for the attempt (an [`ax_scheduler_core::AttemptOutcome`]
    /// name).
    pub fn label(self) -> &'static str {
        match self {
            ReportedStatus::Succeeded => "succeeded",
            ReportedStatus::Failed => "failed",
        }
    }
}

/// A job's report of its end, as kept with the record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedEnd {
    /// How it ended.
    pub status: ReportedStatus,
    /// Its message (the error of a failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The start of its output, for the history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<AttemptOutput>,
    /// A failure the retry policy may retry (default); `false` dead-letters it at once.
    #[serde(default = "yes")]
    pub retryable: bool,
    /// When it was reported.
    pub at: UtcMillis,
}

fn yes() -> bool {
    true
}

/// A job's last progress report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// How far it is, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// What it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it was reported.
    pub at: UtcMillis,
}

/// An execution's awaiting record, as read.
#[derive(Clone, Debug)]
pub struct AwaitingRecord {
    /// Its queue.
    pub queue: String,
    /// The execution.
    pub execution_id: ExecutionId,
    /// The newest attempt opened.
    pub attempt: u32,
    /// Where that attempt is.
    pub state: AwaitingState,
    /// The awaiting message, as stored (while it waits, and after its end).
    pub message: Option<(String, ExecutionMessage)>,
    /// The worker that sent the request.
    pub worker: String,
    /// When the attempt started.
    pub started_at: UtcMillis,
    /// When a completion or progress report must come by, while it waits.
    pub deadline: Option<UtcMillis>,
    /// The last progress report.
    pub progress: Option<Progress>,
    token_hashes: BTreeMap<u32, String>,
    ends: BTreeMap<u32, String>,
}

impl AwaitingRecord {
    /// Whether `token` is the one issued for `attempt`, compared in constant time.
    pub fn token_matches(&self, attempt: u32, token: &str) -> bool {
        let presented = token_hash(token);
        let stored = self.token_hashes.get(&attempt).map_or("", String::as_str);
        // Equal lengths are compared in constant time; a missing hash is the empty string,
        // and the length of a hash is no secret.
        bool::from(presented.as_bytes().ct_eq(stored.as_bytes()))
    }

    /// How `attempt` ended (`succeeded`, `failed`, `timed_out`, `killed`, or `answered`
    /// when its receiver answered without a 202), if it did.
    pub fn end_of(&self, attempt: u32) -> Option<&str> {
        self.ends.get(&attempt).map(String::as_str)
    }

    fn from_fields(queue: &str, id: ExecutionId, fields: BTreeMap<String, String>) -> Option<Self> {
        let attempt = fields.get("attempt")?.parse().ok()?;
        let state = match fields.get("state").map(String::as_str) {
            Some("pending") => AwaitingState::Pending,
            Some("waiting") => AwaitingState::Waiting,
            _ => AwaitingState::Ended,
        };
        let message = fields
            .get("msg")
            .and_then(|raw| Some((raw.clone(), ExecutionMessage::from_json(raw).ok()?)));
        let mut token_hashes = BTreeMap::new();
        let mut ends = BTreeMap::new();
        for (k, v) in &fields {
            if let Some(n) = k.strip_prefix("t:").and_then(|n| n.parse().ok()) {
                token_hashes.insert(n, v.clone());
            } else if let Some(n) = k.strip_prefix("end:").and_then(|n| n.parse().ok()) {
                ends.insert(n, v.clone());
            }
        }
        let ms = |k: &str| fields.get(k).and_then(|v| v.parse().ok()).map(UtcMillis);
        Some(AwaitingRecord {
            queue: queue.to_owned(),
            execution_id: id,
            attempt,
            state,
            message,
            worker: fields.get("worker").cloned().unwrap_or_default(),
            started_at: ms("started").unwrap_or(UtcMillis(0)),
            deadline: ms("deadline"),
            progress: fields
                .get("progress")
                .and_then(|p| serde_json::from_str(p).ok()),
            token_hashes,
            ends,
        })
    }
}

/// What [`Queue::open_awaiting`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The attempt is open: send the request.
    Opened,
    /// The job reported this attempt's end before (the worker that sent the request died
    /// before settling it): settle it so, without sending the request again.
    Early(ReportedEnd),
}

/// What [`Queue::start_awaiting`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AwaitStart {
    /// The message waits for its completion; the worker is done with it.
    Awaiting,
    /// The job's completion overtook its 202: the worker settles the attempt with it.
    Early(ReportedEnd),
    /// An operator killed the execution while its request was sent.
    Killed,
    /// The record is not this attempt's pending one (it expired): settle as a plain end.
    Gone,
    /// The message was no longer taken (the reaper gave it back).
    NotTaken,
}

/// The arguments of one `awaiting_end.lua` call.
struct EndScript<'a> {
    queue: &'a str,
    id: ExecutionId,
    active: &'a str,
    how: &'a str,
    attempt: u32,
    hash: &'a str,
    label: &'a str,
    /// The settle written with the end: kind (`ack`, `retry`, `dlq`), its payload, retry due.
    settle: (&'a str, &'a str, i64),
    /// The attempt's end record (JSON) for the end log, or empty.
    record: &'a str,
}

/// Who ends a waiting attempt in [`Queue::end_awaiting`].
#[derive(Clone, Copy, Debug)]
pub enum EndBy<'a> {
    /// The job, with this SHA-256 of its token.
    Completion(&'a str),
    /// The deadline, which must have passed.
    Deadline,
    /// An operator.
    Kill,
}

/// What follows the end of a waiting attempt, written with it.
#[derive(Clone, Debug)]
pub enum AwaitSettle {
    /// Nothing: it succeeded, or was killed.
    Done,
    /// The next attempt, due then.
    Retry {
        /// The next attempt's message.
        next: ExecutionMessage,
        /// When it is due.
        due: UtcMillis,
    },
    /// The dead-letter queue.
    DeadLetter(DlqEntry),
}

/// What [`Queue::end_awaiting`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndResult {
    /// This call ended the attempt: its report is the caller's to make.
    Ended,
    /// The attempt is still pending (its 202 not yet seen by the worker): the completion is
    /// kept and the worker settles it.
    Early,
    /// A newer attempt is current; this one ended so (empty when unknown).
    Stale {
        /// The current attempt.
        current: u32,
        /// How the presented attempt ended.
        end: String,
    },
    /// The attempt ended before, so.
    Done(String),
    /// The token is not the attempt's.
    Forbidden,
    /// The deadline moved (a progress report came first).
    Alive,
    /// An `EndBy::Early` found the attempt awaiting meanwhile: read the record again.
    Moved,
    /// No record, or the attempt is not waiting.
    Gone,
}

/// What [`Queue::progress_awaiting`] came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressResult {
    /// Kept; the deadline moved.
    Recorded,
    /// A newer attempt is current.
    Stale {
        /// The current attempt.
        current: u32,
        /// How the presented attempt ended.
        end: String,
    },
    /// The attempt ended, so.
    Done(String),
    /// The token is not the attempt's.
    Forbidden,
    /// No record.
    Gone,
}

/// A TTL in milliseconds: at least 1, which Redis requires of `PX`/`PEXPIRE`.
fn ttl_ms(d: std::time::Duration) -> u64 {
    crate::millis::ms(d).max(1)
}

fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| QueueError::Json {
        action: "encode",
        what,
        source,
    })
}

fn reported(op: &'static str, json: Option<&String>) -> Result<ReportedEnd> {
    let json = json.ok_or_else(|| QueueError::UnexpectedReply {
        op,
        detail: "no completion with `early`".into(),
    })?;
    serde_json::from_str(json).map_err(|source| QueueError::Json {
        action: "decode",
        what: "reported end",
        source,
    })
}

fn parse_end(reply: &[String]) -> EndResult {
    match reply.first().map(String::as_str) {
        Some("ended") => EndResult::Ended,
        Some("early") => EndResult::Early,
        Some("stale") => {
            let (current, end) = stale(reply);
            EndResult::Stale { current, end }
        }
        Some("done") => EndResult::Done(reply.get(1).cloned().unwrap_or_default()),
        Some("forbidden") => EndResult::Forbidden,
        Some("alive") => EndResult::Alive,
        Some("moved") => EndResult::Moved,
        _ => EndResult::Gone,
    }
}

fn stale(reply: &[String]) -> (u32, String) {
    (
        reply.get(1).and_then(|a| a.parse().ok()).unwrap_or(0),
        reply.get(2).cloned().unwrap_or_default(),
    )
}

impl Queue {
    /// How long a record is kept past its deadline or end: repeats are recognised that long.
    fn awaiting_retention(&self) -> std::time::Duration {
        self.config().dedupe_ttl
    }

    /// Opens the attempt `d` is before its request is sent, with `token`'s hash.
    pub async fn open_awaiting(
        &self,
        d: &Delivery,
        token: &CompletionToken,
        started: UtcMillis,
    ) -> Result<Opened> {
        let m = &d.message;
        let k = self.keys();
        let ttl = m.timeout().saturating_mul(2) + self.awaiting_retention();
        let mut inv = AWAITING_OPEN.prepare_invoke();
        inv.key(k.awaiting(&d.queue, m.execution_id))
            .arg(m.attempt)
            .arg(token.hash())
            .arg(&d.worker_id)
            .arg(started.0)
            .arg(ttl_ms(ttl));
        let mut conn = self.conn();
        let reply: Vec<String> = self
            .run("open_awaiting", inv.invoke_async(&mut conn))
            .await?;
        match reply.first().map(String::as_str) {
            Some("opened") => Ok(Opened::Opened),
            Some("early") => Ok(Opened::Early(reported("open_awaiting", reply.get(1))?)),
            other => Err(QueueError::UnexpectedReply {
                op: "open_awaiting",
                detail: format!("{other:?}"),
            }),
        }
    }

    /// Moves `d` (its receiver answered 202) to awaiting its completion until `deadline`.
    pub async fn start_awaiting(&self, d: &Delivery, deadline: UtcMillis) -> Result<AwaitStart> {
        let m = &d.message;
        let id = m.execution_id.to_string();
        let k = self.keys();
        let left = deadline.since(self.config().clock.now());
        let mut inv = AWAITING_START.prepare_invoke();
        inv.key(k.processing(&d.queue, &d.worker_id))
            .key(k.awaiting(&d.queue, m.execution_id))
            .key(k.awaiting_due(&d.queue))
            .key(k.kill(&d.queue, m.execution_id))
            .key(k.monitor(&d.queue))
            .key(k.order(&d.queue))
            .key(k.queued(&d.queue))
            .key(k.wake(&d.queue))
            .arg(&d.raw)
            .arg(&id)
            .arg(m.attempt)
            .arg(deadline.0)
            .arg(ttl_ms(left + self.awaiting_retention()))
            .arg(crate::queue::concurrency_key(m));
        let mut conn = self.conn();
        let reply: Vec<String> = self
            .run("start_awaiting", inv.invoke_async(&mut conn))
            .await?;
        Ok(match reply.first().map(String::as_str) {
            Some("awaiting") => AwaitStart::Awaiting,
            Some("early") => AwaitStart::Early(reported("start_awaiting", reply.get(1))?),
            Some("killed") => AwaitStart::Killed,
            Some("not_taken") => AwaitStart::NotTaken,
            _ => AwaitStart::Gone,
        })
    }

    /// Closes an opened attempt that ended at its worker, recording `label` as its end.
    /// `false` when it was not pending.
    pub async fn close_awaiting(&self, d: &Delivery, label: &str) -> Result<bool> {
        let m = &d.message;
        let mut inv = AWAITING_CLOSE.prepare_invoke();
        inv.key(self.keys().awaiting(&d.queue, m.execution_id))
            .arg(m.attempt)
            .arg(label)
            .arg(ttl_ms(self.awaiting_retention()));
        let mut conn = self.conn();
        let n: i64 = self
            .run("close_awaiting", inv.invoke_async(&mut conn))
            .await?;
        Ok(n == 1)
    }

    /// The record of execution `id` in `queue`, if there is one.
    /// Looked for in every partition of a partitioned queue; the record names the
    /// physical queue that holds it.
    pub async fn awaiting_record(
        &self,
        queue: &str,
        id: ExecutionId,
    ) -> Result<Option<AwaitingRecord>> {
        check_queue(queue)?;
        let mut conn = self.conn();
        for q in self.physical_queues(queue) {
            let fields: BTreeMap<String, String> = self
                .run(
                    "awaiting_record",
                    conn.hgetall(self.keys().awaiting(&q, id)),
                )
                .await?;
            if let Some(rec) = AwaitingRecord::from_fields(&q, id, fields) {
                return Ok(Some(rec));
            }
        }
        Ok(None)
    }

    /// Ends `attempt` of `message` (waiting for its completion) as `label` (an
    /// [`ax_scheduler_core::AttemptOutcome`] name), with `settle` written in the same
    /// script, if `by` may: see [`EndResult`]. `outcome` is kept with the record. When this
    /// call ends it, `record` (the attempt's end for the leader and the history) goes to the
    /// queue's end log in the same script, and its log id is returned: the caller relays it
    /// ([`Queue::relay_ends`]), or the sweeper does if the caller cannot.
    #[allow(clippy::too_many_arguments)]
    pub async fn end_awaiting(
        &self,
        message: &ExecutionMessage,
        attempt: u32,
        by: EndBy<'_>,
        label: &str,
        settle: &AwaitSettle,
        outcome: &ReportedEnd,
        record: Option<&EndRecord>,
        now: UtcMillis,
    ) -> Result<(EndResult, Option<String>)> {
        let q = &*message.queue;
        check_queue(q)?;
        let id = message.execution_id;
        let k = self.keys();
        let (how, hash) = match by {
            EndBy::Completion(hash) => ("complete", hash),
            EndBy::Deadline => ("deadline", ""),
            EndBy::Kill => ("kill", ""),
        };
        let (kind, payload, due) = match settle {
            AwaitSettle::Done => ("ack", String::new(), 0),
            AwaitSettle::Retry { next, due } => ("retry", next.to_json()?, due.0),
            AwaitSettle::DeadLetter(entry) => ("dlq", encode("dead-letter entry", entry)?, 0),
        };
        let active = k.active(q, &message.namespace, &message.task_id);
        let record = record.map(EndRecord::to_json).transpose()?;
        let script = EndScript {
            queue: q,
            id,
            active: &active,
            how,
            attempt,
            hash,
            label,
            settle: (kind, &payload, due),
            record: record.as_deref().unwrap_or(""),
        };
        self.invoke_end(&script, outcome, now).await
    }

    /// A completion of `attempt` of execution `id` in `queue` read as pending: kept for its
    /// worker ([`EndResult::Early`]), or [`EndResult::Moved`] when it moved to awaiting meanwhile.
    pub async fn end_awaiting_early(
        &self,
        queue: &str,
        id: ExecutionId,
        attempt: u32,
        token_hash: &str,
        outcome: &ReportedEnd,
        now: UtcMillis,
    ) -> Result<EndResult> {
        check_queue(queue)?;
        // The settle's keys are never touched on this path; they only keep the slot.
        let active = self.keys().active(queue, "-", "-");
        let script = EndScript {
            queue,
            id,
            active: &active,
            how: "early",
            attempt,
            hash: token_hash,
            label: outcome.status.label(),
            settle: ("ack", "", 0),
            record: "",
        };
        Ok(self.invoke_end(&script, outcome, now).await?.0)
    }

    /// Runs `awaiting_end.lua` (the one way an awaiting attempt ends).
    async fn invoke_end(
        &self,
        e: &EndScript<'_>,
        outcome: &ReportedEnd,
        now: UtcMillis,
    ) -> Result<(EndResult, Option<String>)> {
        let k = self.keys();
        let (kind, payload, due) = e.settle;
        let mut inv = AWAITING_END.prepare_invoke();
        inv.key(k.awaiting(e.queue, e.id))
            .key(k.awaiting_due(e.queue))
            .key(k.delayed(e.queue))
            .key(k.dlq(e.queue))
            .key(k.dlq_entries(e.queue))
            .key(e.active)
            .key(k.ends(e.queue))
            .arg(e.how)
            .arg(e.attempt)
            .arg(e.hash)
            .arg(now.0)
            .arg(e.label)
            .arg(kind)
            .arg(payload)
            .arg(due)
            .arg(e.id.to_string())
            .arg(encode("reported end", outcome)?)
            .arg(ttl_ms(self.awaiting_retention()))
            .arg(e.record);
        let mut conn = self.conn();
        let reply: Vec<String> = self
            .run("end_awaiting", inv.invoke_async(&mut conn))
            .await?;
        let result = parse_end(&reply);
        let logged = match (&result, reply.get(1)) {
            (EndResult::Ended, Some(id)) if !id.is_empty() => Some(id.clone()),
            _ => None,
        };
        Ok((result, logged))
    }

    /// Records a progress report of `attempt` of execution `id` in `queue` and moves its
    /// deadline to `deadline`, if `token_hash` is the attempt's.
    pub async fn progress_awaiting(
        &self,
        queue: &str,
        id: ExecutionId,
        attempt: u32,
        token_hash: &str,
        deadline: UtcMillis,
        progress: &Progress,
    ) -> Result<ProgressResult> {
        check_queue(queue)?;
        let id_text = id.to_string();
        let k = self.keys();
        let left = deadline.since(self.config().clock.now());
        let mut inv = AWAITING_PROGRESS.prepare_invoke();
        inv.key(k.awaiting(queue, id))
            .key(k.awaiting_due(queue))
            .arg(attempt)
            .arg(token_hash)
            .arg(deadline.0)
            .arg(encode("progress", progress)?)
            .arg(&id_text)
            .arg(ttl_ms(left + self.awaiting_retention()));
        let mut conn = self.conn();
        let reply: Vec<String> = self
            .run("progress_awaiting", inv.invoke_async(&mut conn))
            .await?;
        Ok(match reply.first().map(String::as_str) {
            Some("ok") => ProgressResult::Recorded,
            Some("stale") => {
                let (current, end) = stale(&reply);
                ProgressResult::Stale { current, end }
            }
            Some("done") => ProgressResult::Done(reply.get(1).cloned().unwrap_or_default()),
            Some("forbidden") => ProgressResult::Forbidden,
            _ => ProgressResult::Gone,
        })
    }

    /// Up to `max` executions of `queue` whose completion deadline passed by `now`.
    pub async fn due_awaiting(
        &self,
        queue: &str,
        now: UtcMillis,
        max: usize,
    ) -> Result<Vec<ExecutionId>> {
        check_queue(queue)?;
        let mut conn = self.conn();
        let ids: Vec<String> = self
            .run(
                "due_awaiting",
                redis::cmd("ZRANGEBYSCORE")
                    .arg(self.keys().awaiting_due(queue))
                    .arg("-inf")
                    .arg(now.0)
                    .arg("LIMIT")
                    .arg(0)
                    .arg(max.max(1))
                    .query_async(&mut conn),
            )
            .await?;
        Ok(ids.iter().filter_map(|i| i.parse().ok()).collect())
    }

    /// Drops `id` from `queue`'s awaiting set (its record is gone: nothing to end).
    pub async fn forget_awaiting(&self, queue: &str, id: ExecutionId) -> Result<()> {
        check_queue(queue)?;
        let mut conn = self.conn();
        let _: i64 = self
            .run(
                "forget_awaiting",
                conn.zrem(self.keys().awaiting_due(queue), id.to_string()),
            )
            .await?;
        Ok(())
    }

    /// Executions of `queue` waiting for their completion.
    pub async fn awaiting_len(&self, queue: &str) -> Result<u64> {
        check_queue(queue)?;
        let mut conn = self.conn();
        self.run("awaiting_len", conn.zcard(self.keys().awaiting_due(queue)))
            .await
    }
}

#[cfg(test)]
mod tests;
