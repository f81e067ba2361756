//! Operator control of executions and queues: kill an execution, pause and resume a queue.
//!
//! A kill works in two steps. [`Queue::kill_execution`] first finds the message, read-only:
//! a waiting one through the order hash (its score), anything else by reading the queue's
//! sets and lists in bounded chunks, never in one script that would hold Redis for the whole
//! backlog; then `kill.lua` removes it atomically from where it waited (clearing its task's active
//! marker, as a final settle does) or, when a worker holds it, leaves a kill order
//! ([`crate::keys::Keys::kill`]). The find must come first because the script may only touch
//! the keys it is given, and the active marker's key depends on the message's task. A
//! message that moved between the two steps (a retry settled, a take) is looked for again.
//!
//! Workers learn of kill orders by polling ([`Queue::stop_orders`]: one pipelined round trip
//! for everything a pool runs, which also reads the active markers an overlap `replace`
//! watches). Polling rather than pub/sub because a message published while a worker
//! reconnects is lost, and the order must also stop a message that comes back later (the
//! reaper gives back a dead worker's messages): it is kept with a TTL, checked when a message
//! is taken and when a failed attempt would be retried (`retry_later.lua`).
//!
//! An execution a kill ends itself (removed while waiting or retrying, or ended while it
//! waited for its completion) has no worker to report its end. The caller gives a
//! [`KillRecorder`] that builds the end's record from the message, and the kill's script
//! appends it to the queue's end log in the same step, as a worker's settle does; the caller
//! then relays it ([`Kill::end`], [`Queue::relay_ends`]), and if it dies first the sweeper
//! does. Without a recorder the end is the caller's to report.
//!
//! A pause is one flag per queue, read by `take.lua`, so it holds from the next take.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::OverlapPolicy;
use redis::{AsyncCommands, Script};

use crate::awaiting::{
    AwaitSettle, AwaitingRecord, AwaitingState, EndBy, EndResult, ReportedEnd, ReportedStatus,
};
use crate::ends::{EndRecord, PendingEnd};
use crate::error::{QueueError, Result};
use crate::message::ExecutionMessage;
use crate::queue::{check_queue, Queue};
use crate::scripts::ordered;

/// `kill.lua`, after the order functions (it finds where addressed messages wait).
static KILL: LazyLock<Script> = LazyLock::new(|| ordered(include_str!("control/kill.lua")));

/// Where a kill found an execution, and what it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillState {
    /// It waited to be taken: removed, it never runs.
    Waiting,
    /// Its retry waited in the delayed set: removed, it never runs again.
    RetryPending,
    /// A worker holds it: ordered to stop (within a second).
    Running,
    /// It waited for its completion (`http.async`): ended here, a later completion is
    /// refused.
    AwaitingCompletion,
    /// It was killed before and nothing was left to remove.
    AlreadyKilled,
    /// Not in this queue: finished, or never here.
    Gone,
}

impl KillState {
    /// The name shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            KillState::Waiting => "waiting",
            KillState::RetryPending => "retry_pending",
            KillState::Running => "running",
            KillState::AwaitingCompletion => "awaiting_completion",
            KillState::AlreadyKilled => "already_killed",
            KillState::Gone => "gone",
        }
    }

    /// Whether the kill removed the message itself: nobody will report its end, so the
    /// caller does (see [`Queue::report_many`]).
    pub fn removed(self) -> bool {
        matches!(
            self,
            KillState::Waiting | KillState::RetryPending | KillState::AwaitingCompletion
        )
    }
}

/// Builds the end record of an execution a kill ends itself, from its message and, for one
/// that waited for its completion, its awaiting record (who ran it, since when). The queue
/// knows how to keep an end, not how one is reported: the caller does.
pub type KillRecorder<'a> =
    &'a (dyn Fn(&ExecutionMessage, Option<&AwaitingRecord>) -> EndRecord + Send + Sync);

/// What [`Queue::kill_execution`] did to one execution.
#[derive(Clone, Debug)]
pub struct Kill {
    /// The execution.
    pub execution_id: ExecutionId,
    /// What was done.
    pub state: KillState,
    /// The message as it was found; `None` when it was not found.
    pub message: Option<ExecutionMessage>,
    /// The end the kill recorded in the end log (with a recorder, for an execution it ended
    /// itself), for the caller to relay.
    pub end: Option<PendingEnd>,
}

impl Kill {
    fn gone(execution_id: ExecutionId) -> Kill {
        Kill {
            execution_id,
            state: KillState::Gone,
            message: None,
            end: None,
        }
    }
}

/// A running execution a worker asks about in [`Queue::stop_orders`].
#[derive(Clone, Debug)]
pub struct StopProbe {
    /// Its queue.
    pub queue: String,
    /// Its task.
    pub namespace: String,
    /// Its task.
    pub task_id: String,
    /// The execution.
    pub execution_id: ExecutionId,
    /// Its overlap policy: a `replace` execution also stops when its task's active marker
    /// names another execution.
    pub overlap: OverlapPolicy,
}

impl StopProbe {
    /// The probe of a message.
    pub fn of(message: &ExecutionMessage) -> Self {
        StopProbe {
            queue: message.queue.to_string(),
            namespace: message.namespace.to_string(),
            task_id: message.task_id.to_string(),
            execution_id: message.execution_id,
            overlap: message.overlap,
        }
    }
}

/// Why a running execution must stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopOrder {
    /// An operator killed it.
    Killed,
    /// A newer execution of its task took its place (overlap `replace`).
    Replaced,
}

impl StopOrder {
    /// The error recorded with the attempt.
    pub fn reason(self) -> &'static str {
        match self {
            StopOrder::Killed => "killed by an operator",
            StopOrder::Replaced => "replaced by a newer execution",
        }
    }
}

/// Most messages of one task a kill looks at.
const MAX_FOUND: usize = 1000;
/// Most entries one read of a find returns (one `ZRANGE` or `LRANGE`).
const FIND_CHUNK: isize = 1000;

/// Where a message waits or runs in its queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// In the backlog, to be taken (or gated on its concurrency key).
    Queued,
    /// Its next attempt waits for its retry time.
    RetryPending,
    /// Taken by this worker (or addressed to it, or orphaned by it).
    Held {
        /// The worker's id (empty for an orphaned message).
        worker: String,
    },
}

/// An execution found in its queue ([`Queue::locate_execution`]).
#[derive(Clone, Debug)]
pub struct Located {
    /// Where it is.
    pub place: Place,
    /// Its message, as stored.
    pub message: ExecutionMessage,
}

/// The messages a find has seen that contain its needle, with where it saw them.
struct Found<'a> {
    needle: &'a str,
    raws: Vec<(Place, String)>,
}

impl<'a> Found<'a> {
    fn new(needle: &'a str) -> Self {
        Found {
            needle,
            raws: Vec::new(),
        }
    }

    fn look(&mut self, place: &Place, items: Vec<String>) {
        for raw in items {
            if self.full() {
                return;
            }
            if raw.contains(self.needle) {
                self.raws.push((place.clone(), raw));
            }
        }
    }

    fn full(&self) -> bool {
        self.raws.len() >= MAX_FOUND
    }

    fn is_empty(&self) -> bool {
        self.raws.is_empty()
    }

    /// The messages, decoded. The needle is a substring: a payload may contain it too. Only
    /// the decoded field counts, and an undecodable message is the reconciliation's
    /// business, not a kill's.
    fn decoded(self) -> Vec<(Place, String, ExecutionMessage)> {
        self.raws
            .into_iter()
            .filter_map(|(place, raw)| {
                ExecutionMessage::from_json(&raw)
                    .ok()
                    .map(|m| (place, raw, m))
            })
            .collect()
    }
}
/// How often a kill looks again for a message that moved while it was being killed.
const KILL_ROUNDS: usize = 3;

impl Queue {
    /// Where execution `id` waits or runs in `queue` (any of its partitions), read-only;
    /// `None` when the queue does not hold it. Found as a kill finds it: through the order
    /// hash, else in bounded reads.
    pub async fn locate_execution(&self, queue: &str, id: ExecutionId) -> Result<Option<Located>> {
        check_queue(queue)?;
        let needle = format!("\"execution_id\":\"{id}\"");
        for q in self.physical_queues(queue) {
            let found = self.find(&q, &needle, Some(id)).await?;
            if let Some((place, _, message)) =
                found.into_iter().find(|(_, _, m)| m.execution_id == id)
            {
                return Ok(Some(Located { place, message }));
            }
        }
        Ok(None)
    }

    /// Kills execution `id` in `queue`: removes it when it waits (queued set or delayed set),
    /// orders its worker to stop it when it runs. [`KillState::Gone`] when the queue does not
    /// have it. A removed execution's end is the caller's to report.
    /// A partitioned queue's partitions are looked through in turn.
    pub async fn kill_execution(&self, queue: &str, id: ExecutionId) -> Result<Kill> {
        self.kill_execution_recorded(queue, id, None).await
    }

    /// [`Queue::kill_execution`], with the end of an execution the kill ends itself recorded
    /// by `recorder` in the end log in the same step ([`Kill::end`]).
    pub async fn kill_execution_recorded(
        &self,
        queue: &str,
        id: ExecutionId,
        recorder: Option<KillRecorder<'_>>,
    ) -> Result<Kill> {
        check_queue(queue)?;
        for q in self.physical_queues(queue) {
            let kill = self.kill_in(&q, id, recorder).await?;
            if kill.state != KillState::Gone {
                return Ok(kill);
            }
        }
        Ok(Kill::gone(id))
    }

    /// [`Queue::kill_execution`] in one physical queue.
    async fn kill_in(
        &self,
        queue: &str,
        id: ExecutionId,
        recorder: Option<KillRecorder<'_>>,
    ) -> Result<Kill> {
        if let Some(kill) = self.kill_awaiting(queue, id, recorder).await? {
            return Ok(kill);
        }
        let needle = format!("\"execution_id\":\"{id}\"");
        for _ in 0..KILL_ROUNDS {
            let found = self.find(queue, &needle, Some(id)).await?;
            let message = found
                .into_iter()
                .find(|(_, _, m)| m.execution_id == id)
                .map(|(_, raw, m)| (raw, m));
            let record = match (recorder, &message) {
                (Some(r), Some((_, m))) => Some(r(m, None)),
                _ => None,
            };
            let (state, logged) = self
                .kill_found(queue, id, message.as_ref(), record.as_ref())
                .await?;
            // Found and then gone: it moved in between (a failed attempt went to the delayed
            // set as its next attempt, which is another text): look again.
            if state == KillState::Gone && message.is_some() {
                continue;
            }
            let end = record.filter(|_| state.removed()).map(|record| PendingEnd {
                logged: logged.map(|id| (queue.to_owned(), id)),
                record,
            });
            return Ok(Kill {
                execution_id: id,
                state,
                message: message.map(|(_, m)| m),
                end,
            });
        }
        Ok(Kill::gone(id))
    }

    /// Kills every execution of a task `queue` holds (waiting, retrying or running; for
    /// overlap `allow` there can be several). Empty when there is none.
    pub async fn kill_task(
        &self,
        queue: &str,
        namespace: &str,
        task_id: &str,
    ) -> Result<Vec<Kill>> {
        self.kill_task_recorded(queue, namespace, task_id, None)
            .await
    }

    /// [`Queue::kill_task`], with the ends of the executions it ends itself recorded as
    /// [`Queue::kill_execution_recorded`] does.
    pub async fn kill_task_recorded(
        &self,
        queue: &str,
        namespace: &str,
        task_id: &str,
        recorder: Option<KillRecorder<'_>>,
    ) -> Result<Vec<Kill>> {
        check_queue(queue)?;
        let encoded = serde_json::to_string(task_id).map_err(|source| QueueError::Json {
            action: "encode",
            what: "task id",
            source,
        })?;
        let needle = format!("\"task_id\":{encoded}");
        let mut out = Vec::new();
        // A task's executions share a partition unless its concurrency key moved them
        // (a key from the payload), so every partition is looked through.
        for q in self.physical_queues(queue) {
            let mut ids: Vec<ExecutionId> = Vec::new();
            for (_, _, m) in self.find(&q, &needle, None).await? {
                if &*m.namespace == namespace
                    && &*m.task_id == task_id
                    && !ids.contains(&m.execution_id)
                {
                    ids.push(m.execution_id);
                }
            }
            for id in ids {
                out.push(self.kill_in(&q, id, recorder).await?);
            }
        }
        Ok(out)
    }

    /// Ends execution `id` killed if it waits for its completion in `queue`; `None` when it
    /// does not (it may still be pending at its worker, which the kill order stops).
    async fn kill_awaiting(
        &self,
        queue: &str,
        id: ExecutionId,
        recorder: Option<KillRecorder<'_>>,
    ) -> Result<Option<Kill>> {
        let Some(rec) = self.awaiting_record(queue, id).await? else {
            return Ok(None);
        };
        let Some((_, message)) = rec
            .message
            .as_ref()
            .filter(|_| rec.state == AwaitingState::Waiting)
        else {
            return Ok(None);
        };
        let record = recorder.map(|r| r(message, Some(&rec)));
        let now = self.config().clock.now();
        let outcome = ReportedEnd {
            status: ReportedStatus::Failed,
            message: Some(StopOrder::Killed.reason().to_owned()),
            output: None,
            retryable: false,
            at: now,
        };
        let (ended, logged) = self
            .end_awaiting(
                message,
                rec.attempt,
                EndBy::Kill,
                ax_scheduler_core::AttemptOutcome::Killed.as_str(),
                &AwaitSettle::Done,
                &outcome,
                record.as_ref(),
                now,
            )
            .await?;
        Ok((ended == EndResult::Ended).then(|| Kill {
            execution_id: id,
            state: KillState::AwaitingCompletion,
            message: Some(message.clone()),
            // The end log the script wrote to is the message's queue's.
            end: record.map(|record| PendingEnd {
                logged: logged.map(|id| (message.queue.to_string(), id)),
                record,
            }),
        }))
    }

    /// The messages of `queue` whose stored text contains `needle`, with the text as stored
    /// (at most [`MAX_FOUND`]). An execution waiting in the queued set is found through the
    /// order hash, which holds its score: two reads, whatever the backlog. Anything else is
    /// looked for in reads of at most [`FIND_CHUNK`] entries each, one command at a time, so
    /// Redis serves its other clients between them however long the queue is: a find is
    /// read-only, and the kill that follows checks the message is still where it was found.
    async fn find(
        &self,
        queue: &str,
        needle: &str,
        id: Option<ExecutionId>,
    ) -> Result<Vec<(Place, String, ExecutionMessage)>> {
        let k = self.keys();
        let mut conn = self.conn();
        let mut found = Found::new(needle);
        if let Some(id) = id {
            let score: Option<String> = self
                .run("kill (order)", conn.hget(k.order(queue), id.to_string()))
                .await?;
            if let Some(score) = score {
                let at: Vec<String> = self
                    .run(
                        "kill (queued)",
                        conn.zrangebyscore(k.queued(queue), &score, &score),
                    )
                    .await?;
                found.look(&Place::Queued, at);
                if !found.is_empty() {
                    return Ok(found.decoded());
                }
            }
        }
        // Where an execution is found fastest, for a kill by id: the short lists first (the
        // workers' own, the gated ones), then the delayed set, then the backlog.
        let workers: Vec<String> = self
            .run("kill (workers)", conn.zrange(k.workers(queue), 0, -1))
            .await?;
        let held: Vec<String> = self
            .run("kill (held)", conn.smembers(k.held_keys(queue)))
            .await?;
        let mut lists = Vec::new();
        for w in &workers {
            let held_by = Place::Held { worker: w.clone() };
            lists.push((k.processing(queue, w), held_by.clone()));
            lists.push((k.addressed(queue, w), held_by));
        }
        let orphaned = Place::Held {
            worker: String::new(),
        };
        lists.push((k.orphaned(queue), orphaned));
        lists.push((k.legacy_ready(queue), Place::Queued));
        lists.extend(held.iter().map(|key| (k.held(queue, key), Place::Queued)));
        for (list, place) in lists {
            self.read_chunks(&mut conn, &list, false, &place, &mut found)
                .await?;
            if id.is_some() && !found.is_empty() {
                return Ok(found.decoded());
            }
        }
        for (set, place) in [
            (k.delayed(queue), Place::RetryPending),
            (k.queued(queue), Place::Queued),
        ] {
            self.read_chunks(&mut conn, &set, true, &place, &mut found)
                .await?;
            if id.is_some() && !found.is_empty() {
                return Ok(found.decoded());
            }
        }
        Ok(found.decoded())
    }

    /// Reads the sorted set (`zset`) or list `key` in chunks of [`FIND_CHUNK`] into `found`.
    async fn read_chunks(
        &self,
        conn: &mut crate::conn::Connection,
        key: &str,
        zset: bool,
        place: &Place,
        found: &mut Found<'_>,
    ) -> Result<()> {
        let mut from = 0isize;
        while !found.full() {
            let to = from + FIND_CHUNK - 1;
            let chunk: Vec<String> = if zset {
                self.run("kill (scan)", conn.zrange(key, from, to)).await?
            } else {
                self.run("kill (scan)", conn.lrange(key, from, to)).await?
            };
            let last = chunk.len() < usize::try_from(FIND_CHUNK).unwrap_or(usize::MAX);
            found.look(place, chunk);
            if last {
                return Ok(());
            }
            from += FIND_CHUNK;
        }
        Ok(())
    }

    async fn kill_found(
        &self,
        queue: &str,
        id: ExecutionId,
        found: Option<&(String, ExecutionMessage)>,
        record: Option<&EndRecord>,
    ) -> Result<(KillState, Option<String>)> {
        let k = self.keys();
        let id_text = id.to_string();
        // Without a message there is no task: a marker key that is never set, in the slot.
        let active = match found {
            Some((_, m)) => k.active(queue, &m.namespace, &m.task_id),
            None => k.active(queue, "-", "-"),
        };
        let ttl = u64::try_from(self.config().dedupe_ttl.as_millis()).unwrap_or(u64::MAX);
        let mut inv = KILL.prepare_invoke();
        inv.key(k.queued(queue))
            .key(k.delayed(queue))
            .key(k.monitor(queue))
            .key(k.kill(queue, id))
            .key(active)
            .key(k.legacy_ready(queue))
            .key(k.order(queue))
            .key(k.orphaned(queue))
            .key(k.ends(queue))
            .arg(found.map_or("", |(raw, _)| raw.as_str()))
            .arg(&id_text)
            .arg(ttl.max(1))
            .arg(
                record
                    .map(EndRecord::to_json)
                    .transpose()?
                    .unwrap_or_default(),
            );
        let mut conn = self.conn();
        let (state, logged): (String, String) =
            self.run("kill", inv.invoke_async(&mut conn)).await?;
        let state = match state.as_str() {
            "waiting" => KillState::Waiting,
            "retry_pending" => KillState::RetryPending,
            "running" => KillState::Running,
            "already" => KillState::AlreadyKilled,
            "gone" => KillState::Gone,
            other => {
                return Err(QueueError::UnexpectedReply {
                    op: "kill",
                    detail: format!("state `{other}`"),
                })
            }
        };
        Ok((state, Some(logged).filter(|id| !id.is_empty())))
    }

    /// For each running execution, whether it must stop: killed by an operator, or (overlap
    /// `replace`) replaced by a newer one. One pipelined round trip for all, with one
    /// `EXISTS` over the kill orders of each queue (its keys share the queue's slot): kill
    /// orders are rare, so the common answer, none, costs one command per queue rather than
    /// one per execution. A queue that has some is asked again per execution.
    pub async fn stop_orders(&self, probes: &[StopProbe]) -> Result<Vec<Option<StopOrder>>> {
        if probes.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.keys();
        let mut by_queue: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, p) in probes.iter().enumerate() {
            by_queue.entry(p.queue.as_str()).or_default().push(i);
        }
        let mut pipe = redis::pipe();
        for (queue, group) in &by_queue {
            let keys: Vec<String> = group
                .iter()
                .map(|&i| k.kill(queue, probes[i].execution_id))
                .collect();
            pipe.exists(keys);
        }
        // Only a `replace` execution can be replaced: the others ask one question.
        let replace: Vec<usize> = (0..probes.len())
            .filter(|&i| probes[i].overlap == OverlapPolicy::Replace)
            .collect();
        for &i in &replace {
            let p = &probes[i];
            pipe.get(k.active(&p.queue, &p.namespace, &p.task_id));
        }
        let mut conn = self.conn();
        let (counts, holders) = {
            let replies: Vec<redis::Value> =
                self.run("stop_orders", pipe.query_async(&mut conn)).await?;
            let (counts, holders) = replies.split_at(by_queue.len().min(replies.len()));
            let counts: Vec<u64> = decode_all(counts)?;
            let holders: Vec<Option<String>> = decode_all(holders)?;
            if counts.len() != by_queue.len() || holders.len() != replace.len() {
                return Err(stop_orders_reply("fewer replies than questions".into()));
            }
            (counts, holders)
        };
        let mut killed = vec![false; probes.len()];
        let ordered: Vec<usize> = by_queue
            .values()
            .zip(&counts)
            .filter(|(_, &n)| n > 0)
            .flat_map(|(group, _)| group.iter().copied())
            .collect();
        if !ordered.is_empty() {
            let mut pipe = redis::pipe();
            for &i in &ordered {
                pipe.exists(k.kill(&probes[i].queue, probes[i].execution_id));
            }
            let each: Vec<bool> = self.run("stop_orders", pipe.query_async(&mut conn)).await?;
            for (&i, is) in ordered.iter().zip(each) {
                killed[i] = is;
            }
        }
        let mut replaced = vec![false; probes.len()];
        for (&i, holder) in replace.iter().zip(holders) {
            replaced[i] = holder.is_some_and(|h| h != probes[i].execution_id.to_string());
        }
        Ok((0..probes.len())
            .map(|i| {
                if killed[i] {
                    Some(StopOrder::Killed)
                } else if replaced[i] {
                    Some(StopOrder::Replaced)
                } else {
                    None
                }
            })
            .collect())
    }

    /// Pauses `queue`: workers take nothing from it from their next take on (running
    /// executions go on). `false` when it was paused already.
    /// A partitioned queue: every partition; `false` when all were paused already.
    pub async fn pause_queue(&self, queue: &str) -> Result<bool> {
        check_queue(queue)?;
        let mut conn = self.conn();
        let now = self.config().clock.now().0;
        let mut changed = false;
        for q in self.physical_queues(queue) {
            let set: bool = self
                .run("pause_queue", conn.set_nx(self.keys().paused(&q), now))
                .await?;
            changed |= set;
        }
        Ok(changed)
    }

    /// Resumes a paused `queue` (every partition of a partitioned one). `false` when it was
    /// not paused.
    pub async fn resume_queue(&self, queue: &str) -> Result<bool> {
        check_queue(queue)?;
        let mut conn = self.conn();
        let mut changed = false;
        for q in self.physical_queues(queue) {
            let n: i64 = self
                .run("resume_queue", conn.del(self.keys().paused(&q)))
                .await?;
            changed |= n > 0;
        }
        Ok(changed)
    }

    /// Whether `queue` is paused (any partition of a partitioned one).
    pub async fn is_paused(&self, queue: &str) -> Result<bool> {
        check_queue(queue)?;
        let mut conn = self.conn();
        for q in self.physical_queues(queue) {
            let paused: bool = self
                .run("is_paused", conn.exists(self.keys().paused(&q)))
                .await?;
            if paused {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn stop_orders_reply(detail: String) -> QueueError {
    QueueError::UnexpectedReply {
        op: "stop_orders",
        detail,
    }
}

fn decode_all<T: redis::FromRedisValue>(values: &[redis::Value]) -> Result<Vec<T>> {
    values
        .iter()
        .map(|v| redis::from_redis_value(v).map_err(|e| stop_orders_reply(e.to_string())))
        .collect()
}
