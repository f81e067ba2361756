//! Redis-side operations: execution history, dead letters, and the cluster status.
//!
//! Dead letters are kept per queue and Redis is never scanned, so "every queue" means the
//! queues ax knows of: this process's `worker.queues` plus the queue of every registered task.
//! A dead letter of a queue no task uses any more is reached by naming the queue (`--queue`).

use std::collections::BTreeSet;

use ax_queue::{
    AwaitingRecord, AwaitingState, DlqEntry, ExecutionFilter, ExecutionItem, HistoryEntry,
    HISTORY_SCAN_MAX,
};

use super::{errors, tasks::not_found, Backend};
use crate::api::{
    ApiError, AttemptFailure, DeadLetter, EtcdDbView, ExecutionList, ExecutionQuery,
    ExecutionRecord, ExecutionStory, FireView, Outcome, PendingAttempt, QueueView, ReplicaState,
    ReplicaView, ShardsView, StatusView, TaskKey, WaitingAttempt,
};
use ax_scheduler_core::queue_set::QueueSet;
use ax_scheduler_core::{ExecutionId, UtcMillis};

/// How many of a task's recent attempts a story reads for the other executions of its fire.
const FIRE_HISTORY_SCAN: usize = 1000;

pub(super) fn record(e: &HistoryEntry) -> ExecutionRecord {
    let started = !e.unstarted;
    ExecutionRecord {
        execution_id: e.execution_id,
        // The queue counts attempts from 0, people from 1.
        attempt: e.attempt.saturating_add(1),
        due: e.attempt_due(),
        started: started.then_some(e.started_at),
        // From the attempt's own due instant, whenever the entry was written.
        lateness_ms: started
            .then(|| u64::try_from(e.started_at.0.saturating_sub(e.attempt_due().0)).unwrap_or(0)),
        duration_ms: started.then_some(e.duration_ms),
        outcome: Outcome::from_label(e.end.label()),
        error: e.end.error.clone(),
        worker: started.then(|| e.worker.clone()),
        namespace: None,
        task_id: None,
        queue: (!e.queue.is_empty()).then(|| e.queue.clone()),
        enqueued: e.enqueued_at,
        finished: Some(e.finished_at),
        retry_at: e.end.retry_at,
        output: e.output.clone(),
        lineage: e.lineage.clone(),
    }
}

/// An attempt of the history across tasks, with its task.
fn item_record(i: &ExecutionItem) -> ExecutionRecord {
    ExecutionRecord {
        namespace: Some(i.namespace.clone()),
        task_id: Some(i.task_id.clone()),
        ..record(&i.entry)
    }
}

pub(super) fn dead_letter(e: &DlqEntry) -> DeadLetter {
    DeadLetter {
        execution_id: e.id,
        namespace: e.namespace.clone(),
        task_id: e.task_id.clone(),
        queue: e.queue.clone(),
        attempts: u32::try_from(e.errors.len()).unwrap_or(u32::MAX),
        last_error: e.reason.clone(),
        dead_at: e.dead_lettered_at,
        errors: e
            .errors
            .iter()
            .map(|a| AttemptFailure {
                // The queue counts attempts from 0, people from 1.
                attempt: a.attempt.saturating_add(1),
                at: a.at,
                error: a.error.clone(),
            })
            .collect(),
        payload: e
            .message
            .as_ref()
            .map(|m| m.payload.clone())
            .unwrap_or_default(),
        raw: e.raw.as_deref().map(masked_raw),
    }
}

/// The stored text of an undecodable message as a reader may see it: it may still hold a
/// task's target, so headers and environment values are masked (when it is JSON at all) and
/// every URL in it is shown as a task's URL is.
fn masked_raw(raw: &str) -> String {
    use ax_scheduler_core::redact::{mask_spec, mask_urls_in};
    let text = match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(mut value) => {
            mask_spec(&mut value);
            value.to_string()
        }
        Err(_) => mask_after_schemes(raw),
    };
    mask_urls_in(&text)
}

/// `text` with the word after each `Bearer` or `Basic` masked: the credential of an
/// `Authorization` value in text that is not JSON.
fn mask_after_schemes(text: &str) -> String {
    let mut out = Vec::new();
    let mut masking = false;
    for word in text.split(' ') {
        if masking {
            out.push(ax_scheduler_core::redact::MASK.to_owned());
        } else {
            out.push(word.to_owned());
        }
        let tail: String = word
            .chars()
            .rev()
            .take_while(char::is_ascii_alphabetic)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        masking = tail.eq_ignore_ascii_case("bearer") || tail.eq_ignore_ascii_case("basic");
    }
    out.join(" ")
}

#[cfg(test)]
mod raw_tests {
    #[test]
    fn the_raw_text_of_an_undecodable_letter_is_masked() {
        let raw = r#"{"http":{"url":"https://u:pw-s3cret@h/x?k=v-s3cret","headers":{"Authorization":"Bearer h-s3cret"}},"junk":1"#;
        let shown = super::masked_raw(raw);
        assert!(!shown.contains("s3cret"), "{shown}");
        let json = r#"{"http":{"url":"https://h/x","headers":{"Authorization":"Bearer h-s3cret"}},"attempt":"x"}"#;
        let shown = super::masked_raw(json);
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

fn not_in_history(id: ExecutionId) -> ApiError {
    ApiError::NotFound(format!(
        "execution {id} is not in the execution history (kept for \
         redis.execution_history_retention)"
    ))
}

/// What a story says of its execution before its attempts: whose it is, its queue and
/// times, from its first recorded attempt or else from the attempt waiting for its
/// completion.
fn story_head(
    id: ExecutionId,
    first: Option<&ExecutionItem>,
    waiting: Option<&AwaitingRecord>,
) -> Result<ExecutionStory, ApiError> {
    Ok(match (first, waiting) {
        (Some(first), _) => ExecutionStory {
            namespace: first.namespace.clone(),
            task_id: first.task_id.clone(),
            queue: first.entry.queue.clone(),
            due: Some(first.entry.fire_at),
            enqueued: first.entry.first_enqueued_at.or(first.entry.enqueued_at),
            origin: first.entry.lineage.origin.clone(),
            ..ExecutionStory::default()
        },
        (None, Some(rec)) => {
            let Some((_, m)) = &rec.message else {
                // The move to awaiting writes the message with the state; a record without one
                // says nothing of whose execution it is.
                return Err(not_in_history(id));
            };
            ExecutionStory {
                namespace: m.namespace.to_string(),
                task_id: m.task_id.to_string(),
                queue: rec.queue.clone(),
                due: Some(m.fire_at),
                enqueued: Some(m.first_attempt_at),
                origin: Some(m.origin()),
                ..ExecutionStory::default()
            }
        }
        (None, None) => return Err(not_in_history(id)),
    })
}

/// The story of an execution whose current attempt is in its queue: queued, waiting for its
/// retry, or held by a worker.
fn pending_story(
    id: ExecutionId,
    found: ax_queue::Located,
    first: Option<&ExecutionItem>,
    attempts: Vec<ExecutionRecord>,
    complete: bool,
) -> ExecutionStory {
    let m = &found.message;
    let (state, worker) = match found.place {
        ax_queue::Place::Queued => (Outcome::Queued, None),
        ax_queue::Place::RetryPending => (Outcome::Retrying, None),
        ax_queue::Place::Held { worker } => {
            (Outcome::Running, Some(worker).filter(|w| !w.is_empty()))
        }
    };
    ExecutionStory {
        execution_id: id,
        namespace: m.namespace.to_string(),
        task_id: m.task_id.to_string(),
        queue: m.queue.to_string(),
        due: Some(first.map_or(m.fire_at, |f| f.entry.fire_at)),
        enqueued: Some(m.first_attempt_at),
        origin: Some(m.origin()),
        attempts,
        outcome: state,
        pending: Some(PendingAttempt {
            // The queue counts attempts from 0, people from 1.
            attempt: m.attempt.saturating_add(1),
            state,
            worker,
            enqueued: m.enqueued_at,
        }),
        complete,
        ..ExecutionStory::default()
    }
}

/// The attempt of an awaiting record, as the API shows it.
fn waiting_attempt(r: AwaitingRecord) -> WaitingAttempt {
    WaitingAttempt {
        // The queue counts attempts from 0, people from 1.
        attempt: r.attempt.saturating_add(1),
        worker: r.worker,
        started: r.started_at,
        deadline: r.deadline,
        progress: r.progress,
    }
}

impl Backend {
    /// `worker.queues` plus every registered task's queue, sorted: from the scheduler
    /// role's catalog when this process has one, else remembered between calls (reading them
    /// costs a read of every spec, see `queue_names`).
    pub(super) async fn known_queues(&self) -> Result<Vec<String>, ApiError> {
        if let Some(names) = self.live_queues.as_ref().and_then(QueueSet::names) {
            let mut queues: BTreeSet<String> = self.worker_queues.iter().cloned().collect();
            queues.extend(names.iter().map(|n| n.to_string()));
            return Ok(queues.into_iter().collect());
        }
        let registry = self.registry.clone();
        let worker_queues = self.worker_queues.clone();
        self.queue_names
            .get(move || async move {
                let listing = registry.list(None).await.map_err(errors::registry)?;
                let mut queues: BTreeSet<String> = worker_queues.into_iter().collect();
                queues.extend(listing.tasks.into_iter().map(|t| t.spec.queue.to_string()));
                Ok(queues)
            })
            .await
    }

    pub(super) async fn queues_or(&self, queue: Option<String>) -> Result<Vec<String>, ApiError> {
        match queue {
            Some(q) => Ok(vec![q]),
            None => self.known_queues().await,
        }
    }

    pub(super) async fn history_of(
        &self,
        key: &TaskKey,
        limit: usize,
    ) -> Result<Vec<ExecutionRecord>, ApiError> {
        if !self.exists(key).await? {
            return Err(not_found(key));
        }
        let entries = self
            .queue()
            .await?
            .history(&key.namespace, &key.id, limit)
            .await
            .map_err(errors::queue)?;
        Ok(entries.iter().map(record).collect())
    }

    /// One page of the history across tasks. Unlike a task's own history, a task that no
    /// longer exists still shows: the history is of what ran.
    pub(super) async fn executions_page(
        &self,
        q: ExecutionQuery,
    ) -> Result<ExecutionList, ApiError> {
        let cursor = match &q.continue_token {
            Some(c) => Some(
                c.parse()
                    .map_err(|_| ApiError::invalid(format!("continue: `{c}` is not a token")))?,
            ),
            None => None,
        };
        let filter = ExecutionFilter {
            namespace: q.namespace,
            task_id: q.task_id,
            outcomes: q.outcomes,
            since: q.since,
            until: q.until,
        };
        let page = self
            .queue()
            .await?
            .executions(&filter, cursor, q.limit, HISTORY_SCAN_MAX)
            .await
            .map_err(errors::queue)?;
        Ok(ExecutionList {
            items: page.items.iter().map(item_record).collect(),
            continue_token: page.next.map(|p| p.to_string()),
        })
    }

    /// One execution's attempts from the history across tasks, its dead letter from its
    /// queue, and the attempt that waits for its completion (`http.async`) from its awaiting
    /// record: an execution whose first attempt waits is in no history yet, and is looked
    /// for in every known queue.
    pub(super) async fn execution_story(
        &self,
        id: ExecutionId,
    ) -> Result<ExecutionStory, ApiError> {
        let q = self.queue().await?;
        let (items, complete) = q.execution_attempts(id).await.map_err(errors::queue)?;
        let record = match items.first() {
            Some(first) if first.entry.queue.is_empty() => None,
            Some(first) => q
                .awaiting_record(&first.entry.queue, id)
                .await
                .map_err(errors::queue)?,
            None => self.find_awaiting(q, id).await?,
        };
        let recorded = items.last().map(|i| i.entry.attempt);
        let waiting = record.filter(|r| {
            r.state == AwaitingState::Waiting && recorded.is_none_or(|a| r.attempt > a)
        });
        let attempts: Vec<ExecutionRecord> = items.iter().map(item_record).collect();
        // Nothing ended yet, or a retry to come: the attempt in its queue tells where it is.
        let unsettled = attempts
            .last()
            .is_none_or(|a| a.outcome == Outcome::Retrying);
        if waiting.is_none() && unsettled {
            let queue = items.first().map(|i| i.entry.queue.clone());
            if let Some(found) = self.locate(q, id, queue).await? {
                return Ok(pending_story(id, found, items.first(), attempts, complete));
            }
        }
        let mut story = story_head(id, items.first(), waiting.as_ref())?;
        story.dead_letter = if story.queue.is_empty() {
            None
        } else {
            q.dlq_get(&story.queue, id)
                .await
                .map_err(errors::queue)?
                .as_ref()
                .map(dead_letter)
        };
        // A dead letter requeued since: its story names the execution it became.
        if story.dead_letter.is_none() && !story.queue.is_empty() {
            story.requeued_as = q
                .requeued_as(&story.queue, id)
                .await
                .map_err(errors::queue)?;
        }
        story.execution_id = id;
        story.outcome = match &waiting {
            Some(_) => Outcome::Waiting,
            None => attempts.last().map(|a| a.outcome).unwrap_or_default(),
        };
        story.waiting = waiting.map(waiting_attempt);
        story.fire = self.fire_of(q, items.first()).await?;
        story.attempts = attempts;
        story.complete = complete;
        Ok(story)
    }

    /// Where execution `id` is in `queue` (its recorded one), else in every known queue.
    async fn locate(
        &self,
        q: &ax_queue::Queue,
        id: ExecutionId,
        queue: Option<String>,
    ) -> Result<Option<ax_queue::Located>, ApiError> {
        let queues = match queue.filter(|q| !q.is_empty()) {
            Some(queue) => vec![queue],
            None => self.known_queues().await?,
        };
        for name in queues {
            if let Some(found) = q.locate_execution(&name, id).await.map_err(errors::queue)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The fire an execution is a piece of (a fan-out), with its other executions.
    async fn fire_of(
        &self,
        q: &ax_queue::Queue,
        first: Option<&ExecutionItem>,
    ) -> Result<Option<FireView>, ApiError> {
        let Some(first) = first else {
            return Ok(None);
        };
        let lineage = &first.entry.lineage;
        Ok(match (&lineage.fanout_id, lineage.piece_total) {
            (Some(fanout), Some(total)) => Some(FireView {
                fanout_id: *fanout,
                total,
                executions: self
                    .fire_executions(q, &first.namespace, &first.task_id, *fanout)
                    .await?,
            }),
            _ => None,
        })
    }

    /// The awaiting record of execution `id` in the first known queue that has one.
    async fn find_awaiting(
        &self,
        q: &ax_queue::Queue,
        id: ExecutionId,
    ) -> Result<Option<AwaitingRecord>, ApiError> {
        for name in self.known_queues().await? {
            if let Some(rec) = q.awaiting_record(&name, id).await.map_err(errors::queue)? {
                return Ok(Some(rec));
            }
        }
        Ok(None)
    }

    /// The last recorded attempt of each execution of fan-out `fanout`, by piece index, from
    /// its task's recent history.
    async fn fire_executions(
        &self,
        q: &ax_queue::Queue,
        namespace: &str,
        task_id: &str,
        fanout: ExecutionId,
    ) -> Result<Vec<ExecutionRecord>, ApiError> {
        let entries = q
            .history(namespace, task_id, FIRE_HISTORY_SCAN)
            .await
            .map_err(errors::queue)?;
        // Newest first: the first entry of an execution is its last attempt.
        let mut seen = std::collections::HashSet::new();
        let mut of_fire: Vec<&HistoryEntry> = entries
            .iter()
            .filter(|e| e.lineage.fanout_id == Some(fanout))
            .filter(|e| seen.insert(e.execution_id))
            .collect();
        of_fire.sort_by_key(|e| e.lineage.piece_index);
        Ok(of_fire.into_iter().map(record).collect())
    }

    pub(super) async fn dead_letters(
        &self,
        queue: Option<String>,
        limit: usize,
    ) -> Result<Vec<DeadLetter>, ApiError> {
        let q = self.queue().await?;
        let mut out = Vec::new();
        for name in self.queues_or(queue).await? {
            // Pages are oldest first: the newest `limit` are the last ones.
            let size = q.dlq_size(&name).await.map_err(errors::queue)?;
            let offset = usize::try_from(size)
                .unwrap_or(usize::MAX)
                .saturating_sub(limit);
            let page = q
                .dlq_list(&name, offset, limit)
                .await
                .map_err(errors::queue)?;
            out.extend(page.iter().map(dead_letter));
        }
        out.sort_by(|a, b| {
            b.dead_at
                .cmp(&a.dead_at)
                .then_with(|| b.execution_id.cmp(&a.execution_id))
        });
        out.truncate(limit);
        Ok(out)
    }

    pub(super) async fn purge(&self, queue: Option<String>) -> Result<u64, ApiError> {
        let q = self.queue().await?;
        let mut count = 0;
        for name in self.queues_or(queue).await? {
            count += q.dlq_purge(&name).await.map_err(errors::queue)?;
        }
        Ok(count)
    }

    /// `ax fence reseat`: binds each queue's fence (or `queue`'s) to this etcd cluster at the
    /// current leader's token, or, when no replica leads (they refuse to while the fence is
    /// wrong), at etcd's current revision, below any leader key created from now on. With
    /// sharded scheduling, each shard's fence of each queue the same way, at its owner's
    /// token or etcd's revision. Returns (queue, token) per fence reseated.
    pub async fn reseat_fences(
        &self,
        queue: Option<String>,
    ) -> Result<Vec<(String, u64)>, ApiError> {
        let (cluster, revision) = self.registry.cluster().await.map_err(errors::registry)?;
        let as_token = |t: i64| u64::try_from(t).unwrap_or(0);
        // (shard, token) per fence: the one leader's, or every shard's.
        let fences: Vec<(Option<u32>, u64)> = if self.shards > 1 {
            let owners = ax_election::list_shard_owners(&self.etcd, &self.election)
                .await
                .map_err(errors::election)?;
            (0..self.shards)
                .map(|s| {
                    let owner = owners.iter().find(|o| o.shard == s);
                    (Some(s), as_token(owner.map_or(revision, |o| o.token)))
                })
                .collect()
        } else {
            let leader = self.current_leader().await?;
            vec![(None, as_token(leader.map_or(revision, |l| l.fencing_token)))]
        };
        let cluster = cluster.to_string();
        let q = self.queue().await?;
        let mut done = Vec::new();
        for name in self.queues_or(queue).await? {
            for (shard, token) in &fences {
                q.reseat_fence(&name, *shard, *token, &cluster)
                    .await
                    .map_err(errors::queue)?;
                let label = match shard {
                    Some(s) => format!("{name} (shard {s})"),
                    None => name.clone(),
                };
                done.push((label, *token));
            }
        }
        Ok(done)
    }

    async fn current_leader(&self) -> Result<Option<ax_election::LeaderInfo>, ApiError> {
        ax_election::current_leader(
            &self.etcd,
            &self.election.prefix,
            self.election.request_timeout,
        )
        .await
        .map_err(errors::election)
    }

    pub(super) async fn cluster_status(&self) -> Result<StatusView, ApiError> {
        let leader = self.current_leader().await?;
        let replicas = self.replica_views().await?;
        let q = self.queue().await?;
        let (queues, dlq_size) = self.queue_views(q).await?;
        // Settings Redis will not tell (CONFIG disabled) are unknown, not wrong.
        let redis_warnings = q
            .server_info()
            .await
            .map(|info| info.warnings())
            .unwrap_or_default();
        let etcd_db = self.etcd_db_view().await;
        let paused_namespaces = self
            .registry
            .paused_namespaces()
            .await
            .map_err(errors::registry)?;
        let clock = self.clock_against_etcd().await;
        let shards = self.shards_view().await?;
        Ok(StatusView {
            shards,
            leader_since: leader.as_ref().map(|l| l.since),
            clock,
            leader: leader.map(|l| l.instance_id),
            replicas,
            queues,
            dlq_size,
            redis_warnings,
            etcd_db,
            paused_namespaces,
        })
    }

    /// The registered replicas, with the age of their last heartbeat, then those on the
    /// roster whose registration expired (gone), in instance id order.
    async fn replica_views(&self) -> Result<Vec<ReplicaView>, ApiError> {
        let ttl = self.election.ttl;
        let mut views: Vec<ReplicaView> =
            ax_election::list_instances_with_liveness(&self.etcd, &self.election)
                .await
                .map_err(errors::election)?
                .into_iter()
                .map(|r| {
                    let state = ReplicaState::of_heartbeat(r.heartbeat_age, ttl);
                    replica_view(r.record, r.heartbeat_age, state, None)
                })
                .collect();
        // The roster is informative: a status without it is still a status.
        let roster = ax_election::list_roster(&self.etcd, &self.election)
            .await
            .unwrap_or_default();
        for entry in roster {
            if views.iter().any(|v| v.id == entry.record.instance_id) {
                continue;
            }
            views.push(replica_view(
                entry.record,
                None,
                ReplicaState::Gone,
                entry.gone_at,
            ));
        }
        views.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(views)
    }

    /// Every known queue's view, and their dead letters in all.
    async fn queue_views(&self, q: &ax_queue::Queue) -> Result<(Vec<QueueView>, u64), ApiError> {
        let now = self.wall.now();
        let mut queues = Vec::new();
        let mut dlq_size = 0;
        for name in self.known_queues().await? {
            let stats = q.stats(&name, now).await.map_err(errors::queue)?;
            let workers = q.live_workers(&name).await.map_err(errors::queue)?;
            let partitions = q.partitions(&name);
            dlq_size += stats.dead;
            queues.push(QueueView {
                name,
                depth: stats.ready,
                oldest_age_ms: stats
                    .oldest_age
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                dlq_size: stats.dead,
                paused: stats.paused,
                workers,
                partitions,
            });
        }
        Ok((queues, dlq_size))
    }

    /// etcd's database size and quota. Not worth failing the status over: shown when etcd
    /// tells.
    async fn etcd_db_view(&self) -> Option<EtcdDbView> {
        ax_registry::store_usage(&self.etcd, self.request_timeout)
            .await
            .ok()
            .map(|u| EtcdDbView {
                bytes: u64::try_from(u.db_bytes).unwrap_or(0),
                quota_bytes: u
                    .quota_bytes
                    .and_then(|q| u64::try_from(q).ok())
                    .unwrap_or(self.etcd_quota_bytes),
            })
    }

    /// The shard owners, when the installation is sharded.
    async fn shards_view(&self) -> Result<Option<ShardsView>, ApiError> {
        let owners = ax_election::list_shard_owners(&self.etcd, &self.election)
            .await
            .map_err(errors::election)?;
        // Owners without shards configured here: the status was asked with another
        // configuration than the replicas'; show what etcd holds.
        Ok((self.shards > 1 || !owners.is_empty()).then(|| ShardsView {
            total: self
                .shards
                .max(owners.iter().map(|o| o.shard + 1).max().unwrap_or(0)),
            owners,
        }))
    }
}

#[cfg(test)]
mod tests {
    use ax_scheduler_core::UtcMillis;

    use super::*;

    fn history_entry() -> HistoryEntry {
        HistoryEntry {
            unstarted: false,
            execution_id: ExecutionId::from_u128(0),
            fire_at: UtcMillis(1_000),
            started_at: UtcMillis(990),
            finished_at: UtcMillis(1_500),
            lateness_ms: -10,
            duration_ms: 510,
            end: ax_scheduler_core::AttemptEnd::new(
                ax_scheduler_core::AttemptOutcome::TimedOut,
                Some("deadline".into()),
            ),
            worker: "w1".into(),
            attempt: 0,
            queue: String::new(),
            enqueued_at: None,
            first_enqueued_at: None,
            output: None,
            lineage: Default::default(),
        }
    }

    #[test]
    fn history_attempts_count_from_one_and_early_starts_are_not_late() {
        let e = history_entry();
        let r = record(&e);
        assert_eq!(r.attempt, 1);
        assert_eq!(r.lateness_ms, Some(0));
        assert_eq!(r.outcome, "timed_out");
        assert_eq!(r.worker.as_deref(), Some("w1"));
    }

    #[test]
    fn a_story_is_headed_by_its_first_attempt_or_not_found() {
        let id = ExecutionId::from_u128(0);
        let mut entry = history_entry();
        entry.queue = "jobs".into();
        entry.enqueued_at = Some(UtcMillis(900));
        let first = ExecutionItem {
            position: "1500-0".parse().unwrap(),
            namespace: "ops".into(),
            task_id: "beat".into(),
            entry,
        };
        let story = story_head(id, Some(&first), None).unwrap();
        assert_eq!(
            (story.namespace.as_str(), story.task_id.as_str()),
            ("ops", "beat")
        );
        assert_eq!(story.queue, "jobs");
        assert_eq!(story.due, Some(UtcMillis(1_000)));
        assert_eq!(story.enqueued, Some(UtcMillis(900)));
        assert!(matches!(
            story_head(id, None, None),
            Err(ApiError::NotFound(_))
        ));
    }
}

/// A replica's view from its record.
fn replica_view(
    record: ax_election::InstanceRecord,
    heartbeat_age: Option<std::time::Duration>,
    state: ReplicaState,
    gone_at: Option<UtcMillis>,
) -> ReplicaView {
    ReplicaView {
        id: record.instance_id,
        roles: record.roles,
        version: record.version,
        started_at: Some(record.started_at),
        heartbeat_age_ms: heartbeat_age.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        host: record.host,
        pid: record.pid,
        address: record.address,
        state,
        gone_at,
    }
}
