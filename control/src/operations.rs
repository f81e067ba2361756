//! The changes to a cluster made for someone, each with its audit record: what the CLI, the
//! HTTP routes and the SDK call to change anything.
//!
//! [`ApiBackend`] makes a change; [`Operations`] makes it for an [`Actor`] and then writes the
//! record that says so. Each record (its action, target and detail) is built here, once per
//! operation, so the same change is recorded the same way whichever front end asked for it,
//! and a front end writes no record of its own. A record is written after the change
//! succeeded; one that cannot be written is logged with what it would have said, since the
//! change already stands. Details are bounded: a run-now's payload is recorded as its size
//! and SHA-256, never itself.
//!
//! ```no_run
//! # async fn pause(backend: &ax_control::backend::Backend) -> Result<(), ax_control::api::ApiError> {
//! use ax_control::audit::Actor;
//! use ax_control::operations::Operations;
//! use ax_control::api::TaskKey;
//!
//! let actor = Actor::cli("cli:alice");
//! Operations::new(backend, &actor)
//!     .pause(TaskKey::new("ops", "beat"))
//!     .await?;
//! # Ok(())
//! # }
//! ```

use ax_scheduler_core::ExecutionId;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api::{
    to_hex, ApiBackend, ApiError, BackfillParams, BackfillResult, DlqRequeue, DlqRequeued,
    KillResult, PutOptions, PutTaskResult, QueueState, TaskKey, TaskView, TriggerParams,
    TriggerResult,
};
use crate::audit::{Actor, AuditRecord};

/// The changes a cluster's [`ApiBackend`] makes, made for one [`Actor`] and recorded.
pub struct Operations<'a> {
    backend: &'a dyn ApiBackend,
    actor: &'a Actor,
}

impl<'a> Operations<'a> {
    /// Changes made through `backend` for `actor`.
    pub fn new(backend: &'a dyn ApiBackend, actor: &'a Actor) -> Self {
        Operations { backend, actor }
    }

    /// Validates and registers a task ([`ApiBackend::put_task`]); recorded as `task.put` with
    /// the spec's diff, unless nothing was written (a dry run, the same spec again).
    pub async fn put_task(&self, spec: Value, opts: PutOptions) -> Result<PutTaskResult, ApiError> {
        if !opts.dry_run {
            self.backend.write_room().await?;
        }
        let mut result = self.backend.put_task(spec, opts).await?;
        if let Some(change) = result.audit.take() {
            if result.written {
                let target = change
                    .target
                    .unwrap_or_else(|| format!("{}/{}", result.namespace, result.id));
                self.record("task.put", target, change.detail, change.revision)
                    .await;
            }
        }
        Ok(result)
    }

    /// Deletes a task; `task.delete`.
    pub async fn delete_task(&self, key: TaskKey) -> Result<(), ApiError> {
        let target = key.to_string();
        // No room check: a delete is how an operator makes room.
        self.backend.delete_task(key).await?;
        self.record("task.delete", target, None, None).await;
        Ok(())
    }

    /// Pauses a task; `task.pause`.
    pub async fn pause(&self, key: TaskKey) -> Result<TaskView, ApiError> {
        let target = key.to_string();
        self.backend.write_room().await?;
        let view = self.backend.pause(key).await?;
        self.record("task.pause", target, None, None).await;
        Ok(view)
    }

    /// Resumes a task; `task.resume`.
    pub async fn resume(&self, key: TaskKey) -> Result<TaskView, ApiError> {
        let target = key.to_string();
        self.backend.write_room().await?;
        let view = self.backend.resume(key).await?;
        self.record("task.resume", target, None, None).await;
        Ok(view)
    }

    /// Runs a task now; `task.trigger`, with the execution id, the idempotency key and the
    /// payload's size and SHA-256 (a payload may hold what the log must not).
    pub async fn trigger(
        &self,
        key: TaskKey,
        params: TriggerParams,
    ) -> Result<TriggerResult, ApiError> {
        let target = key.to_string();
        let mut detail = trigger_detail(&params);
        self.backend.write_room().await?;
        let params = TriggerParams {
            requested_by: Some(self.actor.name.clone()),
            ..params
        };
        let result = self.backend.trigger(key, params).await?;
        detail["execution_id"] = Value::String(result.execution_id.to_string());
        self.record("task.trigger", target, Some(detail), None)
            .await;
        Ok(result)
    }

    /// Runs a task's past fires; `task.backfill` with the request, when a fire was written.
    pub async fn backfill(
        &self,
        key: TaskKey,
        params: BackfillParams,
    ) -> Result<BackfillResult, ApiError> {
        let target = key.to_string();
        let detail = serde_json::to_value(&params).ok();
        if !params.dry_run {
            self.backend.write_room().await?;
        }
        let params = BackfillParams {
            requested_by: Some(self.actor.name.clone()),
            ..params
        };
        let result = self.backend.backfill(key, params).await?;
        if result.written {
            self.record("task.backfill", target, detail, None).await;
        }
        Ok(result)
    }

    /// Kills a task's executions, or one of them; `task.kill` with what was killed (the first
    /// [`LISTED`]).
    pub async fn kill_task(
        &self,
        key: TaskKey,
        execution: Option<ExecutionId>,
    ) -> Result<KillResult, ApiError> {
        let target = key.to_string();
        self.backend.write_room().await?;
        let result = self.backend.kill_task(key, execution).await?;
        let detail = Some(listed("killed", &result.killed));
        self.record("task.kill", target, detail, None).await;
        Ok(result)
    }

    /// Schedules executions to run once at their instants, each recording the actor in its
    /// origin. Not recorded in the audit log: a submission is data (an order's timeout), as
    /// a fire is, and a shop makes thousands a second; cancels and moves are recorded.
    pub async fn schedule(
        &self,
        batch: crate::api::ScheduleBatch,
    ) -> Result<crate::api::ScheduleReply, ApiError> {
        self.backend
            .schedule(batch, Some(self.actor.name.clone()))
            .await
    }

    /// Cancels a scheduled execution; `scheduled.cancel`.
    pub async fn cancel_scheduled(
        &self,
        id: String,
    ) -> Result<crate::api::ScheduledView, ApiError> {
        let view = self.backend.cancel_scheduled(id).await?;
        let detail = json!({"due": view.due, "handler": view.handler});
        self.record("scheduled.cancel", view.id.clone(), Some(detail), None)
            .await;
        Ok(view)
    }

    /// Moves a scheduled execution; `scheduled.move`, with its new instant.
    pub async fn reschedule(
        &self,
        id: String,
        due: ax_scheduler_core::UtcMillis,
    ) -> Result<crate::api::ScheduledView, ApiError> {
        let view = self.backend.reschedule(id, due).await?;
        let detail = json!({"due": view.due});
        self.record("scheduled.move", view.id.clone(), Some(detail), None)
            .await;
        Ok(view)
    }

    /// Kills one execution; `execution.kill`.
    pub async fn kill_execution(&self, id: ExecutionId) -> Result<KillResult, ApiError> {
        self.backend.write_room().await?;
        let result = self.backend.kill_execution(id).await?;
        let detail = Some(listed("killed", &result.killed));
        self.record("execution.kill", id.to_string(), detail, None)
            .await;
        Ok(result)
    }

    /// Pauses a namespace in the actor's name; `namespace.pause`.
    pub async fn pause_namespace(&self, namespace: String) -> Result<(), ApiError> {
        let target = namespace.clone();
        self.backend.write_room().await?;
        self.backend
            .pause_namespace(namespace, self.actor.name.clone())
            .await?;
        self.record("namespace.pause", target, None, None).await;
        Ok(())
    }

    /// Resumes a namespace; `namespace.resume`.
    pub async fn resume_namespace(&self, namespace: String) -> Result<(), ApiError> {
        let target = namespace.clone();
        self.backend.write_room().await?;
        self.backend.resume_namespace(namespace).await?;
        self.record("namespace.resume", target, None, None).await;
        Ok(())
    }

    /// Puts dead letters back on their queues; `dlq.requeue` with the request and the new
    /// execution of each dead letter (the first [`LISTED`] of each).
    pub async fn dlq_requeue(&self, request: DlqRequeue) -> Result<DlqRequeued, ApiError> {
        let mut detail = requeue_detail(&request);
        self.backend.write_room().await?;
        let done = self
            .backend
            .dlq_requeue(request.requested_by(&self.actor.name))
            .await?;
        let pairs: Vec<String> = done
            .requeued
            .iter()
            .map(|r| format!("{} -> {}", r.dead_letter, r.execution_id))
            .collect();
        if let (Value::Object(d), Value::Object(p)) = (&mut detail, listed("requeued", &pairs)) {
            d.extend(p);
        }
        self.record("dlq.requeue", String::new(), Some(detail), None)
            .await;
        Ok(done)
    }

    /// Deletes dead letters, of one queue or of all; `dlq.purge`.
    pub async fn dlq_purge(&self, queue: Option<String>) -> Result<u64, ApiError> {
        let target = queue.clone().unwrap_or_default();
        // No room check, as for a delete.
        let count = self.backend.dlq_purge(queue).await?;
        self.record("dlq.purge", target, None, None).await;
        Ok(count)
    }

    /// Pauses a queue; `queue.pause`.
    pub async fn pause_queue(&self, name: String) -> Result<QueueState, ApiError> {
        self.backend.write_room().await?;
        let state = self.backend.pause_queue(name).await?;
        self.record("queue.pause", state.name.clone(), None, None)
            .await;
        Ok(state)
    }

    /// Resumes a queue; `queue.resume`.
    pub async fn resume_queue(&self, name: String) -> Result<QueueState, ApiError> {
        self.backend.write_room().await?;
        let state = self.backend.resume_queue(name).await?;
        self.record("queue.resume", state.name.clone(), None, None)
            .await;
        Ok(state)
    }

    /// Records a change made outside the trait's operations (`fence.reseat`), in the same
    /// shape.
    pub async fn record(
        &self,
        action: &str,
        target: String,
        detail: Option<Value>,
        revision: Option<i64>,
    ) {
        let record = AuditRecord {
            at: self.backend.now(),
            actor: self.actor.name.clone(),
            via: self.actor.via.clone(),
            action: action.to_owned(),
            target,
            detail,
            revision,
        };
        if let Err(e) = self.backend.audit_record(record.clone()).await {
            tracing::error!(
                error = %e,
                action = %record.action,
                target = %record.target,
                actor = %record.actor,
                "cannot write the audit record of a change"
            );
        }
    }
}

/// Most items of a list an audit record keeps; the rest are counted. A request or an answer
/// may name thousands (a requeue of every id a body holds, a kill of a wide fan-out), and a
/// record is one etcd value.
pub const LISTED: usize = 20;

/// `{name: the first LISTED items}`, with `{name}_omitted` counting the rest when there are
/// more.
fn listed<T: serde::Serialize>(name: &str, items: &[T]) -> Value {
    let shown = &items[..items.len().min(LISTED)];
    let mut detail = json!({ name: shown });
    if items.len() > shown.len() {
        detail[format!("{name}_omitted")] = json!(items.len() - shown.len());
    }
    detail
}

/// A requeue's record: what it asked for, its ids bounded as [`listed`] bounds them.
fn requeue_detail(request: &DlqRequeue) -> Value {
    match request {
        DlqRequeue::Ids {
            ids, use_stored, ..
        } => {
            let mut detail = listed("ids", ids);
            if *use_stored {
                detail["use_stored"] = json!(true);
            }
            detail
        }
        all @ DlqRequeue::All { .. } => serde_json::to_value(all).unwrap_or(Value::Null),
    }
}

/// The SHA-256 of `bytes` in hex: what a record keeps of data it must not hold.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let hash: [u8; 32] = Sha256::digest(bytes).into();
    to_hex(&hash)
}

/// A run-now's record: its key, and its payload as size and hash.
fn trigger_detail(params: &TriggerParams) -> Value {
    let mut detail = json!({});
    if let Some(payload) = &params.payload {
        let bytes = serde_json::to_vec(payload).unwrap_or_default();
        detail["payload_bytes"] = json!(bytes.len());
        detail["payload_sha256"] = json!(sha256_hex(&bytes));
    }
    if let Some(key) = &params.idempotency_key {
        detail["idempotency_key"] = json!(key);
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_a_bounded_part_of_any_list() {
        let few: Vec<String> = (0..3).map(|i| format!("{i:032x}")).collect();
        let small = requeue_detail(&DlqRequeue::Ids {
            ids: few.clone(),
            use_stored: false,
            requested_by: None,
        });
        assert_eq!(small, json!({ "ids": few }), "a short list is kept whole");
        for n in [LISTED + 1, 1_000, 30_000] {
            let ids: Vec<String> = (0..n).map(|i| format!("{i:032x}")).collect();
            let detail = requeue_detail(&DlqRequeue::Ids {
                ids,
                use_stored: true,
                requested_by: None,
            });
            assert_eq!(detail["ids"].as_array().map(Vec::len), Some(LISTED));
            assert_eq!(detail["ids_omitted"], n - LISTED);
            assert_eq!(detail["use_stored"], true);
            let bytes = detail.to_string().len();
            assert!(bytes < 1_000, "{n} ids make a record of {bytes} bytes");
        }
    }

    #[test]
    fn a_trigger_records_its_payload_by_size_and_hash() {
        let params = TriggerParams {
            payload: Some(json!({"card": "4111 1111 1111 1111"})),
            idempotency_key: Some("k1".into()),
            requested_by: None,
        };
        let detail = trigger_detail(&params);
        let text = detail.to_string();
        assert!(!text.contains("4111"), "{text}");
        assert_eq!(
            detail["payload_bytes"],
            r#"{"card":"4111 1111 1111 1111"}"#.len()
        );
        assert_eq!(detail["payload_sha256"].as_str().map(str::len), Some(64));
        assert_eq!(detail["idempotency_key"], "k1");
        assert_eq!(trigger_detail(&TriggerParams::default()), json!({}));
    }
}
