//! Where the role records spec changes written to etcd without ax: the audit log, behind a
//! trait.
//!
//! The role only needs two things of the log: which task changes ax itself recorded since
//! an instant (to tell its own writes from direct ones), and a place to record a burst of
//! direct ones as one record.
//! How records are stored and shaped is the replica's business (`ax serve` keeps them in
//! etcd); a program without an audit log passes [`NoAudit`], which records nothing.

use std::future::Future;
use std::pin::Pin;

use ax_scheduler_core::UtcMillis;

/// Direct changes one record holds at most: a burst of them costs one etcd write per
/// thousand tasks.
pub const MAX_BATCH: usize = 1000;

/// Bytes of task names (`namespace/id`) one record holds at most, so a record of long names
/// stays a few tens of KiB and a page of records stays readable.
pub const MAX_BATCH_BYTES: usize = 64 * 1024;

/// A failed call to the audit log: logged, never fatal (the check is retried).
pub type AuditError = Box<dyn std::error::Error + Send + Sync>;

/// The future an [`AuditLog`] call returns.
pub type AuditFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, AuditError>> + Send + 'a>>;

/// A change to a task spec that ax made and recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedChange {
    /// When it was recorded.
    pub at: UtcMillis,
    /// `namespace/id`.
    pub target: String,
}

/// A change to a task spec the role saw in its watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// `namespace/id`.
    pub target: String,
    /// Whether the spec was deleted (else written).
    pub deleted: bool,
    /// When the role saw it.
    pub seen_at: UtcMillis,
}

/// The audit log as the role uses it.
pub trait AuditLog: Send + Sync {
    /// The task spec changes ax recorded at or after `since` (records of direct writes
    /// excluded), at most `limit` of them, oldest first or in any order.
    fn ax_changes_since(
        &self,
        since: UtcMillis,
        limit: usize,
    ) -> AuditFuture<'_, Vec<RecordedChange>>;

    /// Records `changes` as written to etcd without ax, in one record: at least one and at
    /// most [`MAX_BATCH`] changes, all writes or all deletes, oldest first.
    fn record_direct(&self, changes: &[Observed]) -> AuditFuture<'_, ()>;
}

/// Records nothing and knows of no change: direct writes are not looked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAudit;

impl AuditLog for NoAudit {
    fn ax_changes_since(&self, _: UtcMillis, _: usize) -> AuditFuture<'_, Vec<RecordedChange>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn record_direct(&self, _: &[Observed]) -> AuditFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}
