//! Run-now requests: `{prefix}/triggers/{namespace}/{id}/{execution_id}`.
//!
//! A run-now is asked for by whoever can reach etcd (the CLI, any replica's API) but acted on
//! by the leader alone, which is the only one allowed to enqueue. A key per request is the
//! hand-over: the requester picks the execution id (so it can report it at once), the leader
//! lists and watches the prefix, enqueues each execution with that id (its dedupe identity,
//! so a request seen twice across a failover still runs once) and deletes the key. A request
//! written while no leader acts waits in etcd for the next one.
//!
//! The request is written only if the task's spec key exists, checked in the same
//! transaction, so a trigger racing a delete never leaves a request for a task that is gone.

use std::collections::HashMap;

use ax_scheduler_core::{ExecutionId, UtcMillis};
use etcd_client::{Compare, CompareOp, DeleteOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use crate::error::{timed, RegistryError};
use crate::registry::Registry;

/// The value of a run-now request key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerRequest {
    /// Id of the execution to enqueue (a UUID v7, also the last key segment).
    pub execution_id: ExecutionId,
    /// When the run was asked for.
    pub requested_at: UtcMillis,
    /// The payload this execution runs with instead of the spec's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// A key that makes run-now requests of the task sharing it, within the dedupe window,
    /// run once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// For a backfill: the past fire this execution stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_of: Option<UtcMillis>,
    /// Who asked: the API token's name or `cli:<user>@<host>`, carried into the execution's
    /// origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

/// A pending run-now request as listed from etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTrigger {
    /// Task namespace (from the key).
    pub namespace: String,
    /// Task id (from the key).
    pub id: String,
    /// Execution id (from the key, which is authoritative).
    pub execution_id: ExecutionId,
    /// When it was asked for; `None` when the value cannot be decoded.
    pub requested_at: Option<UtcMillis>,
    /// The payload override, if the request has one.
    pub payload: Option<serde_json::Value>,
    /// The request's idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// The past fire a backfill request stands for.
    pub backfill_of: Option<UtcMillis>,
    /// Who asked for it, if the request says.
    pub requested_by: Option<String>,
    /// Revision of the request's write.
    pub mod_revision: i64,
}

impl Registry {
    /// Writes a run-now request for an existing task. [`RegistryError::NotFound`] when the
    /// task is not registered. Returns the write's revision.
    pub async fn request_trigger(
        &self,
        namespace: &str,
        id: &str,
        request: &TriggerRequest,
    ) -> Result<i64, RegistryError> {
        let revision = self
            .write_triggers(namespace, id, std::slice::from_ref(request))
            .await?;
        tracing::info!(task_id = id, namespace, execution_id = %request.execution_id, "run-now requested");
        Ok(revision)
    }

    /// Writes many run-now requests of one task (a backfill), in the order given. When the
    /// task is deleted midway, the ones written stay (the leader drops them) and
    /// [`RegistryError::NotFound`] says so.
    pub async fn request_triggers(
        &self,
        namespace: &str,
        id: &str,
        requests: &[TriggerRequest],
    ) -> Result<(), RegistryError> {
        self.write_triggers(namespace, id, requests).await?;
        tracing::info!(
            task_id = id,
            namespace,
            requests = requests.len(),
            "run-now requests written"
        );
        Ok(())
    }

    /// Puts `requests` up to 128 per transaction (etcd's default `--max-txn-ops`), each
    /// transaction only while the task's spec key exists, so a request racing a delete never
    /// outlives its task. Returns the last write's revision.
    async fn write_triggers(
        &self,
        namespace: &str,
        id: &str,
        requests: &[TriggerRequest],
    ) -> Result<i64, RegistryError> {
        let task = self.keys().task(namespace, id);
        let mut revision = 0;
        for chunk in requests.chunks(128) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|r| {
                    let key = self.keys().trigger(namespace, id, r.execution_id);
                    // Strings, integers and a JSON value always serialize.
                    TxnOp::put(key, serde_json::to_vec(r).unwrap_or_default(), None)
                })
                .collect();
            let txn = Txn::new()
                .when([Compare::create_revision(
                    task.clone(),
                    CompareOp::Greater,
                    0,
                )])
                .and_then(ops);
            let mut kv = self.client().kv_client();
            let resp = timed("trigger put", self.config().request_timeout, kv.txn(txn)).await?;
            if !resp.succeeded() {
                return Err(RegistryError::NotFound {
                    namespace: namespace.to_string(),
                    id: id.to_string(),
                });
            }
            revision = resp.header().map_or(0, |h| h.revision());
        }
        Ok(revision)
    }

    /// Every pending run-now request, in key order, with the revision of the listing (watch
    /// from the next one). Keys without the three segments, or whose last is not an execution
    /// id, are skipped with a warning.
    pub async fn list_triggers(&self) -> Result<(i64, Vec<PendingTrigger>), RegistryError> {
        let (revision, kvs) = self.list_range(&self.keys().triggers_prefix()).await?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in &kvs {
            let key = String::from_utf8_lossy(kv.key());
            let Some((namespace, id, execution_id)) = self.keys().parse_trigger_key(&key) else {
                tracing::warn!(key = %key, "ignoring a malformed run-now request key");
                continue;
            };
            let request = serde_json::from_slice::<TriggerRequest>(kv.value()).ok();
            out.push(PendingTrigger {
                namespace,
                id,
                execution_id,
                requested_at: request.as_ref().map(|r| r.requested_at),
                payload: request.as_ref().and_then(|r| r.payload.clone()),
                idempotency_key: request.as_ref().and_then(|r| r.idempotency_key.clone()),
                backfill_of: request.as_ref().and_then(|r| r.backfill_of),
                requested_by: request.and_then(|r| r.requested_by),
                mod_revision: kv.mod_revision(),
            });
        }
        Ok((revision, out))
    }

    /// One task's pending backfill requests, fire to execution id, with the revision they
    /// were read at: what [`Registry::request_triggers_since`] guards against.
    pub async fn pending_backfills(
        &self,
        namespace: &str,
        id: &str,
    ) -> Result<(i64, HashMap<UtcMillis, ExecutionId>), RegistryError> {
        let prefix = self.keys().task_triggers_prefix(namespace, id);
        let (revision, kvs) = self.list_range(&prefix).await?;
        let pending = kvs
            .iter()
            .filter_map(|kv| {
                let request = serde_json::from_slice::<TriggerRequest>(kv.value()).ok()?;
                Some((request.backfill_of?, request.execution_id))
            })
            .collect();
        Ok((revision, pending))
    }

    /// Writes run-now requests of one task (a backfill) only while none of the task's
    /// requests changed since revision `seen`, so that two backfills of the same range never
    /// both request a fire. Each transaction of 127 is guarded the same way against the
    /// revision of the one before it. `Ok(false)` when another writer came first (some
    /// requests may be written then: read the pending ones again).
    pub async fn request_triggers_since(
        &self,
        namespace: &str,
        id: &str,
        requests: &[TriggerRequest],
        seen: i64,
    ) -> Result<bool, RegistryError> {
        let task = self.keys().task(namespace, id);
        let prefix = self.keys().task_triggers_prefix(namespace, id);
        let end = crate::registry::prefix_end(prefix.as_bytes());
        let mut seen = seen;
        // etcd counts the failure branch's operation against `--max-txn-ops` (128) too.
        for chunk in requests.chunks(127) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|r| {
                    let key = self.keys().trigger(namespace, id, r.execution_id);
                    // Strings, integers and a JSON value always serialize.
                    TxnOp::put(key, serde_json::to_vec(r).unwrap_or_default(), None)
                })
                .collect();
            let exists = Compare::create_revision(task.clone(), CompareOp::Greater, 0);
            // Every key of the range at or below `seen`: none written since (an empty range
            // compares as revision 0).
            let unchanged = Compare::mod_revision(prefix.clone(), CompareOp::Less, seen + 1)
                .with_range(end.clone());
            let txn = Txn::new()
                .when([exists.clone(), unchanged])
                .and_then(ops)
                .or_else([TxnOp::txn(Txn::new().when([exists]))]);
            let mut kv = self.client().kv_client();
            let resp = timed("trigger put", self.config().request_timeout, kv.txn(txn)).await?;
            if !resp.succeeded() {
                let task_exists = resp
                    .op_responses()
                    .into_iter()
                    .any(|op| matches!(op, etcd_client::TxnOpResponse::Txn(t) if t.succeeded()));
                if !task_exists {
                    return Err(RegistryError::NotFound {
                        namespace: namespace.to_string(),
                        id: id.to_string(),
                    });
                }
                return Ok(false);
            }
            seen = resp.header().map_or(seen, |h| h.revision());
        }
        tracing::info!(
            task_id = id,
            namespace,
            requests = requests.len(),
            "backfill requests written"
        );
        Ok(true)
    }

    /// Deletes a run-now request (once its execution is enqueued).
    pub async fn delete_trigger(
        &self,
        namespace: &str,
        id: &str,
        execution_id: ExecutionId,
    ) -> Result<(), RegistryError> {
        let mut kv = self.client().kv_client();
        timed(
            "trigger delete",
            self.config().request_timeout,
            kv.delete(
                self.keys().trigger(namespace, id, execution_id),
                Some(DeleteOptions::new()),
            ),
        )
        .await?;
        Ok(())
    }
}
