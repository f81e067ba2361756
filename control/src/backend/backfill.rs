//! Backfill: the past fires of a task's schedule in a range, written as run-now requests.
//!
//! Each fire is an etcd key until the leader takes it, and etcd stops every write of the
//! cluster once its database reaches its quota. So a backfill is bounded twice: by count
//! (`limits.max_backfill_fires`, forced or not) and by room, refused while etcd's database
//! plus the backfill's estimated size would pass [`QUOTA_FILL_PERCENT`] of the quota (the
//! smaller of `etcd.quota_backend_bytes` and what etcd reports). The estimate is high on
//! purpose: a refused backfill can be split, a full etcd stops the cluster. The fires are
//! computed on a blocking thread, at most the cap plus one of them, however long the range.
//! A fire an earlier backfill ran (its dedupe marker still in Redis) or requested (its request
//! still pending in etcd) is not requested again: the answer names that earlier execution, so
//! a repeated backfill neither prints ids that will never exist nor writes keys the leader
//! would only drop. The write is guarded by the revision of that read, so two backfills of one
//! task at the same instant cannot both request a fire: the later one reads again.

use ax_registry::TriggerRequest;
use ax_scheduler_core::{ExecutionId, UtcMillis};

use super::tasks::not_found;
use super::{errors, Backend};
use crate::api::{
    ApiError, BackfillParams, BackfillResult, LimitKind, TaskKey, DEFAULT_BACKFILL_MAX,
};

/// Bytes one run-now request is taken to add to etcd's database: its key and JSON value (a
/// few hundred bytes) and etcd's own bookkeeping of each revision, counted high.
pub(super) const BYTES_PER_REQUEST: u64 = 1024;

/// Rounds a backfill reads and writes before it gives up on writers that keep changing the
/// task's requests.
const BACKFILL_ROUNDS: usize = 5;

/// How full a backfill may make etcd's database, percent of its quota.
pub(super) const QUOTA_FILL_PERCENT: u64 = 90;

fn too_many(message: String) -> ApiError {
    ApiError::Limit {
        kind: LimitKind::Count,
        message,
        retry_after_s: None,
    }
}

impl Backend {
    /// The fires of the task's schedule in the range, written as run-now requests marked
    /// with the fire they stand for (unless a dry run); see [`BackfillParams`].
    pub(super) async fn backfill_range(
        &self,
        key: &TaskKey,
        params: BackfillParams,
    ) -> Result<BackfillResult, ApiError> {
        if params.to < params.from {
            return Err(ApiError::invalid("to: is before from"));
        }
        let cap = self.max_backfill_fires;
        let max = params.max.unwrap_or(DEFAULT_BACKFILL_MAX.min(cap));
        if max == 0 || max > cap {
            return Err(ApiError::invalid(format!(
                "max: {max} is outside 1 to {cap} (limits.max_backfill_fires)"
            )));
        }
        let stored = self
            .registry
            .get(&key.namespace, &key.id)
            .await
            .map_err(errors::registry)?
            .ok_or_else(|| not_found(key))?;
        let spec = stored.spec;
        let compiled = spec
            .schedule
            .compile()
            .map_err(|e| ApiError::invalid(format!("schedule: {e}")))?;
        let limit = if params.force { cap } else { max };
        let (from, to) = (params.from, params.to);
        let anchor = spec.created_at.unwrap_or(from);
        // At most `limit + 1` fires are computed whatever the range, but one fire of a
        // sparse cron can take a long search: off the runtime's worker threads, so a
        // backfill never stalls the requests and timers sharing them.
        let fires = tokio::task::spawn_blocking(move || {
            compiled.fires_between(from, to, anchor, limit + 1)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("the backfill's fire computation failed: {e}")))?;
        if fires.len() > limit {
            return Err(too_many(if params.force {
                format!(
                    "the range holds more than {cap} fires, the most one backfill enqueues \
                     (limits.max_backfill_fires): split it"
                )
            } else {
                format!(
                    "the range holds more than {max} fires (max); raise --max, or add --force \
                     to enqueue them all, up to {cap} (limits.max_backfill_fires)"
                )
            }));
        }
        if params.dry_run {
            return Ok(BackfillResult {
                fires,
                execution_ids: Vec::new(),
                already_run: Vec::new(),
                pending: Vec::new(),
                written: false,
            });
        }
        let q = self.queue().await?;
        for _ in 0..BACKFILL_ROUNDS {
            let who = params.requested_by.as_ref();
            if let Some(done) = self
                .request_missing(q, key, &spec.queue, &fires, who)
                .await?
            {
                return Ok(done);
            }
        }
        Err(ApiError::Conflict(format!(
            "other backfills or run-nows of {}/{} kept changing its requests while this one \
             was written; nothing more was requested: run it again",
            key.namespace, key.id
        )))
    }

    /// One round: what earlier backfills requested (pending in etcd) or ran (their dedupe
    /// markers in Redis), then the rest requested, unless another writer changed the task's
    /// requests meanwhile (`None`: read again). etcd is read before Redis: the leader writes
    /// a fire's marker before it deletes its request, so a fire is seen in one or the other.
    async fn request_missing(
        &self,
        q: &ax_queue::Queue,
        key: &TaskKey,
        queue: &str,
        fires: &[UtcMillis],
        requested_by: Option<&String>,
    ) -> Result<Option<BackfillResult>, ApiError> {
        let (seen, pending) = self
            .registry
            .pending_backfills(&key.namespace, &key.id)
            .await
            .map_err(errors::registry)?;
        let ran = q
            .backfilled(&key.namespace, &key.id, queue, fires)
            .await
            .map_err(errors::queue)?;
        let ran: Vec<Option<ExecutionId>> = ran
            .into_iter()
            .map(|id| id.and_then(|s| s.parse().ok()))
            .collect();
        let now = self.wall.now();
        let mut result = BackfillResult {
            fires: fires.to_vec(),
            execution_ids: Vec::with_capacity(fires.len()),
            already_run: Vec::with_capacity(fires.len()),
            pending: Vec::with_capacity(fires.len()),
            written: true,
        };
        // UUID v7 ids in fire order: the requests' keys sort as the fires, so the leader
        // takes them oldest first.
        let mut requests = Vec::new();
        for (t, ran) in fires.iter().zip(&ran) {
            let waiting = pending.get(t).copied();
            result.already_run.push(ran.is_some());
            result.pending.push(ran.is_none() && waiting.is_some());
            match ran.or(waiting) {
                Some(id) => result.execution_ids.push(id),
                None => {
                    let id = ax_queue::new_execution_id();
                    result.execution_ids.push(id);
                    requests.push(TriggerRequest {
                        execution_id: id,
                        requested_at: now,
                        payload: None,
                        idempotency_key: None,
                        backfill_of: Some(*t),
                        requested_by: requested_by.cloned(),
                    });
                }
            }
        }
        if requests.is_empty() {
            return Ok(Some(result));
        }
        self.check_quota_room(requests.len()).await?;
        let written = self
            .registry
            .request_triggers_since(&key.namespace, &key.id, &requests, seen)
            .await
            .map_err(errors::registry)?;
        Ok(written.then_some(result))
    }

    /// Refuses a backfill of `fires` requests that would fill etcd's database past
    /// [`QUOTA_FILL_PERCENT`] of its quota.
    async fn check_quota_room(&self, fires: usize) -> Result<(), ApiError> {
        let adds = u64::try_from(fires)
            .unwrap_or(u64::MAX)
            .saturating_mul(BYTES_PER_REQUEST);
        let Some((db, quota)) = self.etcd_past_fill(adds).await? else {
            return Ok(());
        };
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        Err(too_many(format!(
            "etcd's database holds {:.1} MiB of its {:.1} MiB quota (etcd.quota_backend_bytes, \
             or the quota etcd reports); these {fires} fires would add about {:.1} MiB, past \
             {QUOTA_FILL_PERCENT} % of it, where etcd would soon refuse every write: compact \
             and defragment etcd, raise its quota, or backfill a shorter range",
            mib(db),
            mib(quota),
            mib(adds)
        )))
    }

    /// `(database bytes, quota bytes)` when adding `adds` bytes would pass
    /// [`QUOTA_FILL_PERCENT`] of etcd's quota (the smaller of `etcd.quota_backend_bytes`
    /// and what etcd reports); `None` when there is room.
    pub(super) async fn etcd_past_fill(&self, adds: u64) -> Result<Option<(u64, u64)>, ApiError> {
        let usage = ax_registry::store_usage(&self.etcd, self.request_timeout)
            .await
            .map_err(errors::registry)?;
        let quota = usage
            .quota_bytes
            .and_then(|q| u64::try_from(q).ok())
            .map_or(self.etcd_quota_bytes, |q| q.min(self.etcd_quota_bytes));
        let db = u64::try_from(usage.db_bytes).unwrap_or(0);
        let ceiling = quota / 100 * QUOTA_FILL_PERCENT;
        Ok((db.saturating_add(adds) > ceiling).then_some((db, quota)))
    }

    /// Refuses a change while etcd's database is past [`QUOTA_FILL_PERCENT`] of its quota
    /// or the audit log is over its count (503): every change through the API writes at
    /// least its audit record to etcd, and a full etcd refuses the cluster's own writes
    /// (states, leases, fences), not only the caller's.
    pub(super) async fn check_write_room(&self) -> Result<(), ApiError> {
        self.audit.check_room().await?;
        let Some((db, quota)) = self.etcd_past_fill(BYTES_PER_REQUEST).await? else {
            return Ok(());
        };
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        Err(ApiError::Unavailable(format!(
            "etcd's database holds {:.1} MiB of its {:.1} MiB quota (etcd.quota_backend_bytes, \
             or the quota etcd reports), past {QUOTA_FILL_PERCENT} %: changes through ax are \
             refused so that the cluster's own writes go on; compact and defragment etcd, or \
             raise its quota",
            mib(db),
            mib(quota),
        )))
    }
}
