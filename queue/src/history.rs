//! Execution history, kept twice for two ways of reading it: a capped list per task, newest
//! first (`ax task history`), and one stream of every attempt of every task (`ax history`,
//! `ax execution get`).
//!
//! The per-task list stays because the stream cannot serve it fast: the last 20 attempts of
//! a task that runs once a day sit among a week of everyone else's attempts, and finding
//! them would mean scanning the stream. The list is bounded without a cleanup job (LPUSH +
//! LTRIM), and each write renews its expiry ([`crate::QueueConfig::history_retention`]), so
//! the history of a task that no longer runs goes by itself; the leader also deletes it with
//! a deleted task's state. It leaves out the handler's output, which would multiply its
//! size by the cap.
//!
//! The stream is one key (`{prefix:x}:executions`, one slot on Redis Cluster): queries
//! across namespaces ("every failure of the last hour") read it in order rather than merge
//! one stream per namespace, and one node takes the writes of every worker, far above what
//! ax fires. Each write trims by age (`XADD ... MINID ~`) and each batch by count (`XTRIM
//! MAXLEN ~`); XADD takes one trim strategy only. Entries carry the namespace, task and
//! outcome as fields of their own, so the filters run inside Redis ([`Queue::executions`],
//! `history_page.lua`) with a bound on what one request scans. Stream ids are the time the
//! attempt was written, so a time range is an id range. Both are written in the pipeline
//! that carries the attempt's event: no round trip of their own.

use std::sync::LazyLock;

use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::{AttemptEnd, AttemptOutput, EventPosition, UtcMillis};
use redis::Script;
use serde::{Deserialize, Serialize};

use crate::error::{QueueError, Result};
use crate::queue::Queue;

/// `history_page.lua` (it puts nothing in the queued set: no order functions).
static HISTORY_PAGE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("history/history_page.lua")));

/// Most stream entries one history request scans (in one script call) before it answers with
/// a cursor, so a filter that matches rarely cannot make one request read the whole stream
/// while Redis waits.
pub const HISTORY_SCAN_MAX: usize = 10_000;

/// Stream entries `ax execution get` scans at most (over several script calls): past this the
/// story is returned as found, marked incomplete.
const STORY_SCAN_MAX: usize = 200_000;

/// How far before its id's time an execution's entries are looked for: the id is made by
/// one machine and the entries' ids by Redis's clock.
const STORY_CLOCK_SLACK_MS: i64 = 60_000;

/// A task's list is trimmed to its cap by one push in this many (chosen by the execution
/// id's random bits, see [`trims_list`]) rather than by each: a one-shot's list holds one
/// entry, and a busy task's grows a few entries past the cap between trims. Readers take
/// at most the cap, so what lies beyond it is never shown.
pub(crate) const HISTORY_TRIM_EVERY: u128 = 8;

/// Whether the push of `entry` trims its task's list: the low bits of a UUID v7 execution
/// id are random, so one push in [`HISTORY_TRIM_EVERY`] does, and a list is past its cap by
/// more than `n` entries with a chance of `(1 - 1 / HISTORY_TRIM_EVERY)^n` (7 in 10 000 for
/// 60 entries).
pub(crate) fn trims_list(entry: &HistoryEntry) -> bool {
    entry
        .execution_id
        .as_u128()
        .is_multiple_of(HISTORY_TRIM_EVERY)
}

/// One attempt of one execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Execution id.
    pub execution_id: ExecutionId,
    /// Schedule instant.
    pub fire_at: UtcMillis,
    /// When the handler started.
    pub started_at: UtcMillis,
    /// When it finished.
    pub finished_at: UtcMillis,
    /// `started_at - fire_at` in ms (negative if it started early).
    pub lateness_ms: i64,
    /// `finished_at - started_at` in ms.
    pub duration_ms: u64,
    /// How it ended, its error and the retry that follows, if any.
    #[serde(flatten)]
    pub end: AttemptEnd,
    /// Worker id.
    pub worker: String,
    /// The attempt ended before any worker started it (an operator's kill of a waiting
    /// execution or of a pending retry): its start, lateness, duration and worker mean
    /// nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unstarted: bool,
    /// Attempt number, 0 for the first.
    pub attempt: u32,
    /// Queue the attempt ran on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub queue: String,
    /// When the attempt was enqueued (a retry: when it became due).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued_at: Option<UtcMillis>,
    /// When the execution's first attempt was enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_enqueued_at: Option<UtcMillis>,
    /// The start of the handler's answer, when it gave one (only in the stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<AttemptOutput>,
    /// The run and fan-out piece it belongs to, if any.
    #[serde(flatten)]
    pub lineage: crate::message::Lineage,
}

impl HistoryEntry {
    /// When this attempt was due, as [`crate::ExecutionMessage::attempt_due`] says: the fire
    /// for the first attempt of a scheduled run, else when it was enqueued. (A run-now's fire
    /// is when it was asked for, so an entry without an origin reads right too.)
    pub fn attempt_due(&self) -> UtcMillis {
        let scheduled = self
            .lineage
            .origin
            .as_ref()
            .is_none_or(|o| o.is_scheduled());
        match self.enqueued_at {
            Some(enqueued) if self.attempt > 0 || !scheduled => enqueued,
            _ => self.fire_at,
        }
    }
}

/// One attempt read from the history across tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionItem {
    /// Its stream id: when it was written, and the cursor to page on from.
    pub position: EventPosition,
    /// Task namespace.
    pub namespace: String,
    /// Task id.
    pub task_id: String,
    /// The attempt.
    pub entry: HistoryEntry,
}

/// Which attempts [`Queue::executions`] returns; every part optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this task (with `namespace`).
    pub task_id: Option<String>,
    /// Only attempts that ended with one of these labels ([`AttemptEnd::label`]); empty: all.
    pub outcomes: Vec<String>,
    /// Only attempts written at or after this instant.
    pub since: Option<UtcMillis>,
    /// Only attempts written at or before this instant.
    pub until: Option<UtcMillis>,
}

/// One page of [`Queue::executions`], newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionPage {
    /// The attempts found.
    pub items: Vec<ExecutionItem>,
    /// Where the next page starts (the last entry scanned); `None` when the range is done.
    /// A page can be short, even empty, with a cursor: the scan bound was reached.
    pub next: Option<EventPosition>,
}

impl Queue {
    /// Records `entry` in the task's history (keeping the newest
    /// [`crate::QueueConfig::history_cap`] entries) and in the history across tasks.
    pub async fn record_history(
        &self,
        namespace: &str,
        task_id: &str,
        entry: &HistoryEntry,
    ) -> Result<()> {
        let mut conn = self.conn();
        let mut pipe = redis::pipe();
        self.push_history(&mut pipe, namespace, task_id, entry)?;
        self.trim_executions(&mut pipe);
        self.run("record_history", pipe.query_async::<()>(&mut conn))
            .await
    }

    /// One page of the attempts of every task `filter` selects, newest first, starting
    /// after `cursor` (a previous page's [`ExecutionPage::next`]), at most `limit`, scanning
    /// at most `scan_max` entries (capped at [`HISTORY_SCAN_MAX`]).
    pub async fn executions(
        &self,
        filter: &ExecutionFilter,
        cursor: Option<EventPosition>,
        limit: usize,
        scan_max: usize,
    ) -> Result<ExecutionPage> {
        let from = match (cursor, filter.until) {
            (Some(c), _) => format!("({c}"),
            (None, Some(until)) => format!("{}-{}", until.0.max(0), u64::MAX),
            (None, None) => "+".to_owned(),
        };
        let to = filter
            .since
            .map_or_else(|| "-".to_owned(), |s| format!("{}-0", s.0.max(0)));
        let outcomes = if filter.outcomes.is_empty() {
            String::new()
        } else {
            format!(",{},", filter.outcomes.join(","))
        };
        let args = PageArgs {
            forward: false,
            from: &from,
            to: &to,
            limit,
            scan_max: scan_max.clamp(1, HISTORY_SCAN_MAX),
            namespace: filter.namespace.as_deref().unwrap_or(""),
            task_id: filter.task_id.as_deref().unwrap_or(""),
            outcomes: &outcomes,
            execution: "",
        };
        self.history_page(&args).await
    }

    /// Every attempt of one execution recorded in the history across tasks, oldest first,
    /// and whether the search saw its end (its final attempt, or the end of the stream)
    /// rather than stopping at its scan bound. The search starts at the time in the id (a
    /// UUID v7) and jumps ahead to each retry's due time, so it reads little beyond the
    /// execution's own entries unless an attempt ran long under heavy traffic.
    ///
    /// One end comes before its retry's due time: an operator's kill of the pending retry.
    /// The jump passes over it, so when the stream's last attempt is followed by a retry,
    /// the task's own list (its recent attempts, one read) supplies the ends recorded after it.
    pub async fn execution_attempts(&self, id: ExecutionId) -> Result<(Vec<ExecutionItem>, bool)> {
        let (mut items, complete) = self.scan_story(id).await?;
        self.add_ends_before_retry(id, &mut items).await?;
        Ok((items, complete))
    }

    /// The attempts of execution `id` in the task's list after the last of `items`, when that
    /// one is followed by a retry (see [`Queue::execution_attempts`]).
    async fn add_ends_before_retry(
        &self,
        id: ExecutionId,
        items: &mut Vec<ExecutionItem>,
    ) -> Result<()> {
        let Some(last) = items.last() else {
            return Ok(());
        };
        if last.entry.end.retry_at.is_none() {
            return Ok(());
        }
        let (namespace, task_id, position) =
            (last.namespace.clone(), last.task_id.clone(), last.position);
        let after = last.entry.attempt;
        let mut later: Vec<HistoryEntry> = self
            .history(&namespace, &task_id, self.config().history_cap)
            .await?
            .into_iter()
            .filter(|e| e.execution_id == id && e.attempt > after)
            .collect();
        later.sort_by_key(|e| e.attempt);
        items.extend(later.into_iter().map(|entry| ExecutionItem {
            position,
            namespace: namespace.clone(),
            task_id: task_id.clone(),
            entry,
        }));
        Ok(())
    }

    async fn scan_story(&self, id: ExecutionId) -> Result<(Vec<ExecutionItem>, bool)> {
        let born = id
            .as_uuid()
            .get_timestamp()
            .map(|t| {
                let (secs, nanos) = t.to_unix();
                i64::try_from(secs)
                    .unwrap_or(0)
                    .saturating_mul(1000)
                    .saturating_add(i64::from(nanos / 1_000_000))
            })
            .unwrap_or(0);
        let mut from = format!("{}-0", born.saturating_sub(STORY_CLOCK_SLACK_MS).max(0));
        let needle = id.to_string();
        let mut items = Vec::new();
        let mut scanned = 0;
        while scanned < STORY_SCAN_MAX {
            let args = PageArgs {
                forward: true,
                from: &from,
                to: "+",
                limit: 1000,
                scan_max: HISTORY_SCAN_MAX,
                namespace: "",
                task_id: "",
                outcomes: "",
                execution: &needle,
            };
            let page = self.history_page(&args).await?;
            items.extend(page.items);
            match page.next {
                None => return Ok((items, true)),
                Some(next) => from = format!("({next}"),
            }
            scanned += HISTORY_SCAN_MAX;
        }
        Ok((items, false))
    }

    /// The newest attempts whose entry's text contains `needle` (a fragment of an execution
    /// id: the caller checks which id it is part of), at most `limit`, scanning at most
    /// `scan_max` entries newest first over as many script calls as that takes, each bounded
    /// by [`HISTORY_SCAN_MAX`]. Also returns whether the scan reached the stream's start, so
    /// a caller can tell "none" from "none among the newest `scan_max`".
    pub async fn attempts_containing(
        &self,
        needle: &str,
        limit: usize,
        scan_max: usize,
    ) -> Result<(Vec<ExecutionItem>, bool)> {
        let mut from = "+".to_owned();
        let mut items = Vec::new();
        let mut budget = scan_max.max(1);
        while budget > 0 && items.len() < limit {
            let args = PageArgs {
                forward: false,
                from: &from,
                to: "-",
                limit: limit - items.len(),
                scan_max: budget.min(HISTORY_SCAN_MAX),
                namespace: "",
                task_id: "",
                outcomes: "",
                execution: needle,
            };
            let page = self.history_page(&args).await?;
            items.extend(page.items);
            match page.next {
                None => return Ok((items, true)),
                Some(next) => from = format!("({next}"),
            }
            budget = budget.saturating_sub(HISTORY_SCAN_MAX);
        }
        Ok((items, false))
    }

    async fn history_page(&self, a: &PageArgs<'_>) -> Result<ExecutionPage> {
        const OP: &str = "history_page";
        let mut inv = HISTORY_PAGE.prepare_invoke();
        inv.key(self.keys().executions())
            .arg(if a.forward { "fwd" } else { "rev" })
            .arg(a.from)
            .arg(a.to)
            .arg(a.limit.max(1))
            .arg(a.scan_max.max(1))
            .arg(a.namespace)
            .arg(a.task_id)
            .arg(a.outcomes)
            .arg(a.execution);
        let mut conn = self.conn();
        let reply: Vec<String> = self.run(OP, inv.invoke_async(&mut conn)).await?;
        let mut parts = reply.into_iter();
        let cursor = parts.next().ok_or_else(|| QueueError::UnexpectedReply {
            op: OP,
            detail: "empty reply".into(),
        })?;
        let next = if cursor.is_empty() {
            None
        } else {
            Some(
                cursor
                    .parse()
                    .map_err(|detail| QueueError::UnexpectedReply { op: OP, detail })?,
            )
        };
        let mut items = Vec::new();
        while let (Some(id), Some(namespace), Some(task_id), Some(json)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        {
            let position = id
                .parse()
                .map_err(|detail| QueueError::UnexpectedReply { op: OP, detail })?;
            // An entry another version wrote differently is passed over, not an error for
            // the whole page.
            match serde_json::from_str(&json) {
                Ok(entry) => items.push(ExecutionItem {
                    position,
                    namespace,
                    task_id,
                    entry,
                }),
                Err(e) => tracing::debug!(error = %e, %position, "undecodable history entry"),
            }
        }
        Ok(ExecutionPage { items, next })
    }

    /// Deletes the history of each task in `tasks` (namespace, id): they were deleted.
    pub async fn delete_histories(&self, tasks: &[(&str, &str)]) -> Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (namespace, id) in tasks {
            pipe.del(self.keys().history(namespace, id)).ignore();
        }
        let mut conn = self.conn();
        self.run("delete_histories", pipe.query_async::<()>(&mut conn))
            .await
    }

    /// The newest `limit` history entries of each task of `tasks` (namespace, id), newest
    /// first, in one round trip; an entry that cannot be decoded is passed over.
    pub async fn history_many(
        &self,
        tasks: &[(&str, &str)],
        limit: usize,
    ) -> Result<Vec<Vec<HistoryEntry>>> {
        if tasks.is_empty() || limit == 0 {
            return Ok(vec![Vec::new(); tasks.len()]);
        }
        let stop =
            isize::try_from(limit.min(self.config().history_cap).max(1) - 1).unwrap_or(isize::MAX);
        let mut pipe = redis::pipe();
        for (namespace, task_id) in tasks {
            pipe.lrange(self.keys().history(namespace, task_id), 0, stop);
        }
        let mut conn = self.conn();
        let lists: Vec<Vec<String>> = self
            .run("history_many", pipe.query_async(&mut conn))
            .await?;
        Ok(lists
            .into_iter()
            .map(|list| {
                list.iter()
                    .filter_map(|j| serde_json::from_str(j).ok())
                    .collect()
            })
            .collect())
    }

    /// The newest `limit` history entries of a task, newest first.
    pub async fn history(
        &self,
        namespace: &str,
        task_id: &str,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = self.keys().history(namespace, task_id);
        let stop =
            isize::try_from(limit.min(self.config().history_cap).max(1) - 1).unwrap_or(isize::MAX);
        let mut conn = self.conn();
        let jsons: Vec<String> = self
            .run(
                "history",
                redis::AsyncCommands::lrange(&mut conn, key, 0, stop),
            )
            .await?;
        jsons
            .iter()
            .map(|j| {
                serde_json::from_str(j).map_err(|source| QueueError::Json {
                    action: "decode",
                    what: "history entry",
                    source,
                })
            })
            .collect()
    }
}

/// The arguments of `history_page.lua`.
struct PageArgs<'a> {
    forward: bool,
    from: &'a str,
    to: &'a str,
    limit: usize,
    scan_max: usize,
    namespace: &'a str,
    task_id: &'a str,
    outcomes: &'a str,
    execution: &'a str,
}

impl Queue {
    /// Adds one attempt's history writes to `pipe`: into the task's list (without the
    /// output; pushed, cut to its cap, its expiry renewed) and onto the stream across tasks
    /// (trimmed by age). The one way history is written (alone, or with a report's event);
    /// the stream's count trim is [`Queue::trim_executions`], once per pipeline.
    pub(crate) fn push_history(
        &self,
        pipe: &mut redis::Pipeline,
        namespace: &str,
        task_id: &str,
        entry: &HistoryEntry,
    ) -> Result<()> {
        let encode = |e: &HistoryEntry| {
            serde_json::to_string(e).map_err(|source| QueueError::Json {
                action: "encode",
                what: "history entry",
                source,
            })
        };
        let full = encode(entry)?;
        let listed = if entry.output.is_some() {
            encode(&HistoryEntry {
                output: None,
                ..entry.clone()
            })?
        } else {
            full.clone()
        };
        let cfg = self.config();
        let key = self.keys().history(namespace, task_id);
        let cap = isize::try_from(cfg.history_cap).unwrap_or(isize::MAX);
        let retention = i64::try_from(cfg.history_retention.as_millis()).unwrap_or(i64::MAX);
        pipe.lpush(&key, listed).ignore();
        if trims_list(entry) {
            pipe.ltrim(&key, 0, cap - 1).ignore();
        }
        pipe.pexpire(&key, retention).ignore();
        let keep = i64::try_from(cfg.execution_history_retention.as_millis()).unwrap_or(i64::MAX);
        let cutoff = cfg.clock.now().0.saturating_sub(keep).max(0);
        pipe.cmd("XADD")
            .arg(self.keys().executions())
            .arg("MINID")
            .arg("~")
            .arg(cutoff)
            .arg("*")
            .arg("ns")
            .arg(namespace)
            .arg("task")
            .arg(task_id)
            .arg("out")
            .arg(entry.end.label())
            .arg("e")
            .arg(full)
            .ignore();
        Ok(())
    }

    /// Adds the count trim of the stream across tasks to `pipe`.
    pub(crate) fn trim_executions(&self, pipe: &mut redis::Pipeline) {
        pipe.cmd("XTRIM")
            .arg(self.keys().executions())
            .arg("MAXLEN")
            .arg("~")
            .arg(self.config().execution_history_max_entries)
            .ignore();
    }
}
