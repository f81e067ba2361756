//! Per-task locks: `{prefix}/locks/{task_id}` created only if absent, on the holder's lease.
//!
//! A try-lock, not a queue: the engine asks for a task's lock when it is about to act on
//! the task and skips the task when another replica holds it. The guard renews and watches
//! exactly like leadership does, so its [`LockGuard::lost`] and [`LockGuard::is_valid`]
//! carry the same guarantee.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::hold::{Guarded, LeaseHold, LossReason};
use crate::keys::lock_key;

/// Entry point for task locks.
pub struct TaskLock;

impl TaskLock {
    /// Takes the lock of `task_id` for `holder` (stored as the key's value) if no one holds
    /// it; `None` when it is taken. Uses the config's prefix, TTL and request timeout.
    pub async fn acquire(
        client: &Client,
        config: &ElectionConfig,
        task_id: &str,
        holder: &str,
    ) -> Result<Option<LockGuard>, ElectionError> {
        config.validate()?;
        let t = config.request_timeout;
        let key = lock_key(&config.prefix, task_id);
        let sent_at = Instant::now();
        let mut lease = client.lease_client();
        let lease_id = timed("lease grant", t, lease.grant(config.ttl_secs(), None))
            .await?
            .id();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                holder,
                Some(PutOptions::new().with_lease(lease_id)),
            )]);
        let mut kv = client.kv_client();
        let resp = match timed("lock txn", t, kv.txn(txn)).await {
            Ok(r) => r,
            Err(e) => {
                let _ = timed("lease revoke", t, lease.revoke(lease_id)).await;
                return Err(e);
            }
        };
        if !resp.succeeded() {
            let _ = timed("lease revoke", t, lease.revoke(lease_id)).await;
            return Ok(None);
        }
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let hold = LeaseHold::start(
            client.clone(),
            lease_id,
            config.effective_ttl(),
            t,
            Some(Guarded {
                key: key.clone(),
                create_revision: revision,
            }),
            sent_at,
        );
        tracing::debug!(task_id, holder, revision, "task lock acquired");
        Ok(Some(LockGuard {
            hold,
            client: client.clone(),
            key,
            revision,
            request_timeout: t,
        }))
    }
}

/// A held task lock. Dropping it releases the lock in the background; [`LockGuard::release`]
/// releases it and waits.
pub struct LockGuard {
    hold: LeaseHold,
    client: Client,
    key: String,
    revision: i64,
    request_timeout: Duration,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("revision", &self.revision)
            .finish()
    }
}

impl LockGuard {
    /// The lock key's create revision, usable as a fencing token for the task.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Fires the moment the lock is lost or in doubt (same rules as leadership).
    pub fn lost(&self) -> CancellationToken {
        self.hold.lost()
    }

    /// Whether the lock may be relied on right now (loss signal and monotonic deadline).
    pub fn is_valid(&self) -> bool {
        self.hold.is_valid()
    }

    /// Why the lock ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.hold.loss_reason()
    }

    /// Releases the lock: deletes the key if still ours and revokes the lease.
    pub async fn release(mut self) -> Result<(), ElectionError> {
        let (deleted, _revoked) = self
            .hold
            .release_key(
                &self.client,
                &self.key,
                self.revision,
                self.request_timeout,
                "lock delete",
            )
            .await;
        deleted
    }
}
