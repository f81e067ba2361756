//! Dead-letter requeue from the task's CURRENT spec.
//!
//! A dead letter holds the message of its last attempt: the URL, headers, command and args
//! the task had then. Replaying it would run a deleted task, or the old target of a task
//! re-pointed since (its old credentials included). So a requeue re-reads each task and
//! rebuilds the message's target and settings from the current spec (the execution's own
//! payload and lineage stay); it is refused with 409, before anything is requeued, when a
//! task is gone or its target (handler, URL, command or args) changed, unless the caller
//! asks for the stored message (`use_stored`).

use ax_queue::{DlqEntry, ExecutionMessage, Queue};
use ax_scheduler_core::{ExecutionId, TaskSpec, UtcMillis};

use super::{errors, Backend};
use crate::api::{ApiError, DlqRequeue};

/// Why a dead letter cannot be rebuilt from its task, if it cannot.
fn target_changed(
    entry: &DlqEntry,
    stored: &ExecutionMessage,
    current: &ExecutionMessage,
) -> Option<String> {
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
    (!changed.is_empty()).then(|| {
        format!(
            "dead letter {} of task {}/{}: the task's target changed since it ran ({})",
            entry.id,
            entry.namespace,
            entry.task_id,
            changed.join(", ")
        )
    })
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

impl Backend {
    pub(super) async fn requeue(&self, request: DlqRequeue) -> Result<u64, ApiError> {
        let q = self.queue().await?;
        let (found, use_stored) = match request {
            DlqRequeue::All {
                queue, use_stored, ..
            } => (self.all_dead_letters(q, queue).await?, use_stored),
            DlqRequeue::Ids { ids, use_stored } => {
                (self.named_dead_letters(q, &ids).await?, use_stored)
            }
        };
        // Every task first, so that one refusal changes nothing.
        let mut plan = Vec::with_capacity(found.len());
        let mut refused = Vec::new();
        let now = UtcMillis::now();
        for (name, entry) in found {
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
            plan.push((name, entry.id, current));
        }
        if !refused.is_empty() {
            return Err(ApiError::Conflict(format!(
                "{}; nothing was requeued. Requeue with `use_stored` (ax dlq requeue \
                 --use-stored) to run the stored message as it was, or leave these dead \
                 letters out",
                refused.join("; ")
            )));
        }
        let mut count = 0u64;
        for (name, id, current) in plan {
            let requeued = match current {
                Some(current) => {
                    q.dlq_requeue_as(&name, id, now, |m| rebuilt(m, &current))
                        .await
                }
                None => q.dlq_requeue(&name, id, now).await,
            };
            if requeued.map_err(errors::queue)?.is_some() {
                count += 1;
            }
        }
        Ok(count)
    }

    /// The message the task's current spec makes for `entry`, or why it cannot be rebuilt
    /// (the task is gone, or its target changed).
    async fn current_message(
        &self,
        entry: &DlqEntry,
        now: UtcMillis,
    ) -> Result<Result<ExecutionMessage, String>, ApiError> {
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
        Ok(match target_changed(entry, stored, &current) {
            Some(why) => Err(why),
            None => Ok(current),
        })
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

    /// The entries of the dead letters `ids` name; every one must exist.
    async fn named_dead_letters(
        &self,
        q: &Queue,
        ids: &[String],
    ) -> Result<Vec<(String, DlqEntry)>, ApiError> {
        let mut parsed = Vec::with_capacity(ids.len());
        let mut bad = Vec::new();
        for id in ids {
            match id.parse::<ExecutionId>() {
                Ok(u) => parsed.push(u),
                Err(_) => bad.push(format!("{id}: not an execution id (a UUID)")),
            }
        }
        if !bad.is_empty() {
            return Err(ApiError::Invalid {
                message: "invalid execution ids".into(),
                errors: bad,
            });
        }
        let queues = self.known_queues().await?;
        let mut found = Vec::with_capacity(parsed.len());
        let mut missing = Vec::new();
        'ids: for id in parsed {
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
}

/// The message the leader would build for a run of `spec` now.
fn current_of(spec: &TaskSpec, now: UtcMillis) -> ExecutionMessage {
    ExecutionMessage::run_now(spec, now, 0)
}
