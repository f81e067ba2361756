//! Per-task locks: `{prefix}/locks/{task_id}` created only if absent, on a [`Session`].
//!
//! A try-lock, not a queue: a replica asks for a task's lock when it is about to act on the
//! task and skips the task when another holder has it. A lock is a [`KeyHold`] on a session,
//! like the leader key, so its [`LockGuard::lost`] and [`LockGuard::is_valid`] carry the same
//! guarantee as leadership, and one session (one lease, one keep-alive stream) carries any number of
//! locks. Nothing in the engine takes task locks yet; shard ownership (`shards.rs`) holds its
//! keys through the same guard.

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::ElectionError;
use crate::key_hold::Created;
use crate::key_hold::KeyHold;
use crate::keys::lock_key;
use crate::session::Session;
use crate::validity::LossReason;

/// Entry point for task locks.
pub struct TaskLock;

impl TaskLock {
    /// Takes the lock of `task_id` for `holder` (stored as the key's value) on `session`'s
    /// lease, under the session's prefix, if no one holds it; `None` when it is taken.
    /// Refused with [`ElectionError::SessionLost`] when the session is no longer valid.
    pub async fn acquire(
        session: &Session,
        task_id: &str,
        holder: &str,
    ) -> Result<Option<LockGuard>, ElectionError> {
        let key = lock_key(session.prefix(), task_id);
        match session
            .create_if_absent(key, holder.as_bytes().to_vec(), "lock txn")
            .await?
        {
            Created::Held(held) => {
                tracing::debug!(
                    task_id,
                    holder,
                    revision = held.fencing_token(),
                    "task lock acquired"
                );
                Ok(Some(LockGuard::new(*held)))
            }
            Created::Taken { .. } => Ok(None),
        }
    }
}

/// A held task lock: a [`KeyHold`] ([`LockGuard::hold`]) whose validity methods are the
/// ones here. Dropping it releases the lock in the background; [`LockGuard::release`]
/// releases it and waits. Closing or losing its session ends it too.
pub struct LockGuard {
    hold: KeyHold,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.hold.key())
            .field("revision", &self.hold.fencing_token())
            .finish()
    }
}

impl LockGuard {
    /// Guards `hold` as a lock: also the guard of a shard's owner key.
    pub(crate) fn new(hold: KeyHold) -> LockGuard {
        LockGuard { hold }
    }

    /// The lock key, for code that acts under any held key alike.
    pub fn hold(&self) -> &KeyHold {
        &self.hold
    }

    /// The lock key's create revision, usable as a fencing token for the task.
    pub fn revision(&self) -> i64 {
        self.hold.fencing_token()
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        self.hold.key()
    }

    /// Fires the moment the lock is lost or in doubt (same rules as leadership).
    pub fn lost(&self) -> CancellationToken {
        self.hold.lost()
    }

    /// Whether the lock may be relied on right now (loss signal and monotonic deadline).
    pub fn is_valid(&self) -> bool {
        self.hold.is_valid()
    }

    /// The monotonic instant until which the lock is trusted (its session's deadline).
    pub fn valid_until(&self) -> Instant {
        self.hold.valid_until()
    }

    /// Why the lock ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.hold.loss_reason()
    }

    /// Releases the lock: deletes the key if still ours. The session stays open.
    pub async fn release(self) -> Result<(), ElectionError> {
        self.hold.release("lock delete").await
    }

    /// Stops guarding without deleting, as a crashed process would: the key stays until its
    /// lease runs out. For fault drills and tests.
    pub fn abandon(self) {
        self.hold.abandon();
    }
}
