//! Dead-letter requeue onto the task's CURRENT spec.
//!
//! A dead letter holds the message of its last attempt: the URL, headers, command and args
//! the task had then. Replaying it would run a deleted task, or the old target of a task
//! re-pointed since (its old credentials included), and the usual reason to requeue is that
//! the task was fixed. So a requeue re-reads each task and rebuilds the message's target and
//! settings from the current spec (the execution's own payload and lineage stay), and says
//! per dead letter what of the target changed. It is refused with 409, before anything is
//! requeued, only when a task is gone, unless the caller asks for the stored message
//! (`use_stored`). Dead letters are named by id, or by the start or end of one, as
//! `execution get` takes them.

use ax_queue::{DlqEntry, ExecutionMessage, Queue};
use ax_scheduler_core::{ExecutionId, TaskSpec, UtcMillis};

use super::{errors, Backend};
use crate::api::{
    id_fragment, id_matches, ApiError, DlqRequeue, DlqRequeued, RequeueOnto, RequeuedLetter,
    REQUEUED_LISTED,
};

/// What of the target differs between the attempt that failed and the task's spec now.
fn target_changes(stored: &ExecutionMessage, current: &ExecutionMessage) -> Vec<String> {
    let mut changed = Vec::new();
    if stored.handler != current.handler {
        changed.push(format!("handler {} → {}", stored.handler, current.handler));
    }
    let url = |m: &ExecutionMessage| m.http.as_ref().map(|h| h.url.clone());
    if url(stored) != url(current) {
        changed.push("http.url".to_owned());
    }
    let command =
        |m: &ExecutionMessage| m.command.as_ref().map(|c| (c.name.clone(), c.args.clone()));
    if command(stored) != command(current) {
        changed.push("command name or args".to_owned());
    }
    changed
}

/// The stored message with the target and settings of `current` (the task's spec now).
fn rebuilt(mut stored: ExecutionMessage, current: &ExecutionMessage) -> ExecutionMessage {
    stored.handler = current.handler.clone();
    stored.http = current.http.clone();
    stored.command = current.command.clone();
    stored.timeout_ms = current.timeout_ms;
    stored.retry = current.retry.clone();
    stored.priority = current.priority;
    stored
}

/// One dead letter's plan: where it is, and the message it will run (`None`: as stored).
struct Planned {
    queue: String,
    entry: DlqEntry,
    current: Option<(ExecutionMessage, Vec<String>)>,
}

impl Backend {
    pub(super) async fn requeue(&self, request: DlqRequeue) -> Result<DlqRequeued, ApiError> {
        let q = self.queue().await?;
        let (found, use_stored, actor) = match request {
            DlqRequeue::All {
                queue,
                use_stored,
                requested_by,
                ..
            } => (
                self.all_dead_letters(q, queue).await?,
                use_stored,
                requested_by,
            ),
            DlqRequeue::Ids {
                ids,
                use_stored,
                requested_by,
            } => (
                self.named_dead_letters(q, &ids).await?,
                use_stored,
                requested_by,
            ),
        };
        // Every task first, so that one refusal changes nothing.
        let mut plan = Vec::with_capacity(found.len());
        let mut refused = Vec::new();
        let now = self.wall.now();
        for (queue, entry) in found {
            let current = if use_stored {
                None
            } else {
                match self.current_message(&entry, now).await? {
                    Ok(m) => Some(m),
                    Err(why) => {
                        refused.push(why);
                        continue;
                    }
                }
            };
            plan.push(Planned {
                queue,
                entry,
                current,
            });
        }
        if !refused.is_empty() {
            return Err(ApiError::Conflict(format!(
                "{}; nothing was requeued. Requeue with `use_stored` (ax dlq requeue \
                 --use-stored) to run the stored message as it was, or leave these dead \
                 letters out",
                refused.join("; ")
            )));
        }
        let mut done = DlqRequeued::default();
        for p in plan {
            let id = p.entry.id;
            let asked_by = |mut m: ExecutionMessage| {
                m.requested_by(actor.clone());
                m
            };
            let (requeued, onto, changed) = match p.current {
                Some((current, changed)) => (
                    q.dlq_requeue_as(&p.queue, id, now, |m| asked_by(rebuilt(m, &current)))
                        .await,
                    RequeueOnto::CurrentSpec,
                    changed,
                ),
                None => (
                    q.dlq_requeue_as(&p.queue, id, now, asked_by).await,
                    RequeueOnto::Stored,
                    Vec::new(),
                ),
            };
            if let Some(execution_id) = requeued.map_err(errors::queue)? {
                done.count += 1;
                if done.requeued.len() < REQUEUED_LISTED {
                    done.requeued.push(RequeuedLetter {
                        dead_letter: id,
                        execution_id,
                        namespace: p.entry.namespace,
                        task_id: p.entry.task_id,
                        onto,
                        changed,
                    });
                }
            }
        }
        Ok(done)
    }

    /// The message the task's current spec makes for `entry` with what of its target
    /// changed, or why it cannot be rebuilt (the task is gone, the message unreadable).
    async fn current_message(
        &self,
        entry: &DlqEntry,
        now: UtcMillis,
    ) -> Result<Result<(ExecutionMessage, Vec<String>), String>, ApiError> {
        let Some(stored) = &entry.message else {
            return Ok(Err(format!(
                "dead letter {} holds no readable message to rebuild",
                entry.id
            )));
        };
        let Some(task) = self
            .registry
            .get(&entry.namespace, &entry.task_id)
            .await
            .map_err(errors::registry)?
        else {
            return Ok(Err(format!(
                "dead letter {}: task {}/{} is no longer registered",
                entry.id, entry.namespace, entry.task_id
            )));
        };
        let current = current_of(&task.spec, now);
        let changed = target_changes(stored, &current);
        Ok(Ok((current, changed)))
    }

    /// The entries of every dead letter (of one queue), with the queue holding each.
    async fn all_dead_letters(
        &self,
        q: &Queue,
        queue: Option<String>,
    ) -> Result<Vec<(String, DlqEntry)>, ApiError> {
        let mut found = Vec::new();
        for name in self.queues_or(queue).await? {
            let size = q.dlq_size(&name).await.map_err(errors::queue)?;
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            let entries = q.dlq_list(&name, 0, size).await.map_err(errors::queue)?;
            found.extend(entries.into_iter().map(|e| (name.clone(), e)));
        }
        Ok(found)
    }

    /// The entries of the dead letters `ids` name (whole ids, or the start or end of one);
    /// every one must name exactly one.
    async fn named_dead_letters(
        &self,
        q: &Queue,
        ids: &[String],
    ) -> Result<Vec<(String, DlqEntry)>, ApiError> {
        let mut whole = Vec::with_capacity(ids.len());
        let mut fragments = Vec::new();
        let mut bad = Vec::new();
        for id in ids {
            match id.parse::<ExecutionId>() {
                Ok(u) => whole.push(u),
                Err(_) => match id_fragment(id) {
                    Ok(f) => fragments.push(f),
                    Err(e) => bad.push(e.to_string()),
                },
            }
        }
        if fragments.len() > DLQ_FRAGMENTS_MAX {
            bad.push(format!(
                "{} ids given by a part only; at most {DLQ_FRAGMENTS_MAX} in one requeue \
                 (each is searched for among the dead letters' ids): give whole ids",
                fragments.len()
            ));
        }
        if !bad.is_empty() {
            return Err(ApiError::Invalid {
                message: "invalid execution ids".into(),
                errors: bad,
            });
        }
        let queues = self.known_queues().await?;
        if !fragments.is_empty() {
            whole.extend(self.resolve_fragments(q, &queues, &fragments).await?);
        }
        let mut found = Vec::with_capacity(whole.len());
        let mut missing = Vec::new();
        'ids: for id in whole {
            for name in &queues {
                if let Some(entry) = q.dlq_get(name, id).await.map_err(errors::queue)? {
                    found.push((name.clone(), entry));
                    continue 'ids;
                }
            }
            missing.push(id.to_string());
        }
        if !missing.is_empty() {
            return Err(ApiError::NotFound(format!(
                "no dead letter with id {} in queues {}",
                missing.join(", "),
                queues.join(", ")
            )));
        }
        Ok(found)
    }

    /// The dead letter each fragment names: the one id among the first
    /// [`DLQ_FRAGMENT_SCAN`] dead letters of each queue (partition) that starts or ends with
    /// it.
    async fn resolve_fragments(
        &self,
        q: &Queue,
        queues: &[String],
        fragments: &[String],
    ) -> Result<Vec<ExecutionId>, ApiError> {
        let mut ids = Vec::new();
        for name in queues {
            ids.extend(
                q.dlq_ids(name, DLQ_FRAGMENT_SCAN)
                    .await
                    .map_err(errors::queue)?,
            );
        }
        let mut resolved = Vec::with_capacity(fragments.len());
        let mut problems = Vec::new();
        for fragment in fragments {
            let matching: Vec<ExecutionId> = ids
                .iter()
                .copied()
                .filter(|id| id_matches(*id, fragment))
                .collect();
            match matching.as_slice() {
                [one] => resolved.push(*one),
                [] => problems.push(format!(
                    "{fragment}: no dead letter's id starts or ends with it"
                )),
                many => problems.push(format!(
                    "{fragment}: names {} dead letters ({}); give more of the id",
                    many.len(),
                    many.iter()
                        .take(5)
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        if !problems.is_empty() {
            return Err(ApiError::Invalid {
                message: "execution ids that do not name one dead letter".into(),
                errors: problems,
            });
        }
        Ok(resolved)
    }
}

/// Most ids given by a part in one requeue: each is compared with every id read.
const DLQ_FRAGMENTS_MAX: usize = 100;

/// Most dead letters of a queue (partition) searched for an id fragment: ids only, about
/// 40 bytes each.
const DLQ_FRAGMENT_SCAN: usize = 100_000;

/// The message the leader would build for a run of `spec` now.
fn current_of(spec: &TaskSpec, now: UtcMillis) -> ExecutionMessage {
    ExecutionMessage::run_now(spec, now, 0)
}
