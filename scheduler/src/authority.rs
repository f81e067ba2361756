//! What entitles a term to schedule: the one leader key, or one shard's owner key.
//!
//! Both are keys on an etcd lease whose create revision is the fencing token, with the same
//! validity rules (a monotonic deadline, a `lost()` token), so a term runs the same way under
//! either. What differs is what the term covers (every task, or the tasks of its shard:
//! [`Scope`]), which fences its writes check (the leader's, or its shard's), and how it gives
//! the key up (resign, or release after a handover).

use ax_election::{ElectionError, Leadership, LossReason, ShardGuard};
use ax_scheduler_core::placement::Placement;
use ax_scheduler_core::TaskKey;
use tokio_util::sync::CancellationToken;

use crate::backend::WriteFence;

/// The key a term schedules under.
pub(super) enum Authority {
    /// The one leader: every task. Boxed: a leadership carries its etcd client.
    Leader(Box<Leadership>),
    /// The owner of one shard: that shard's tasks.
    Shard(ShardGuard),
    /// A stand-in key, held and lost as a test says.
    #[cfg(test)]
    Test(crate::term::fakes::FakeKey),
}

impl Authority {
    /// The fencing token (the key's create revision).
    pub(super) fn token(&self) -> u64 {
        let revision = match self {
            Authority::Leader(l) => l.fencing_token(),
            Authority::Shard(g) => g.revision(),
            #[cfg(test)]
            Authority::Test(k) => k.token,
        };
        u64::try_from(revision).unwrap_or(0)
    }

    /// The shard this authority covers; `None` for the one leader.
    pub(super) fn shard(&self) -> Option<u32> {
        match self {
            Authority::Leader(_) => None,
            Authority::Shard(g) => Some(g.shard()),
            #[cfg(test)]
            Authority::Test(k) => k.shard,
        }
    }

    /// Whether the key is still held, by the monotonic clock (false past the lease's
    /// deadline even before etcd says so).
    pub(super) fn is_valid(&self) -> bool {
        match self {
            Authority::Leader(l) => l.is_valid(),
            Authority::Shard(g) => g.is_valid(),
            #[cfg(test)]
            Authority::Test(k) => k.is_valid(),
        }
    }

    /// Cancelled when the key is lost, for any reason.
    pub(super) fn lost(&self) -> CancellationToken {
        match self {
            Authority::Leader(l) => l.lost(),
            Authority::Shard(g) => g.lost(),
            #[cfg(test)]
            Authority::Test(k) => k.lost.clone(),
        }
    }

    /// Why the key was lost, once it was.
    pub(super) fn loss_reason(&self) -> Option<LossReason> {
        match self {
            Authority::Leader(l) => l.loss_reason(),
            Authority::Shard(g) => g.loss_reason(),
            #[cfg(test)]
            Authority::Test(_) => None,
        }
    }

    /// The fence of this term's etcd state writes.
    pub(super) fn state_fence(&self) -> WriteFence {
        WriteFence {
            shard: self.shard(),
            token: i64::try_from(self.token()).unwrap_or(i64::MAX),
        }
    }

    /// Gives the key up at once (after the term wrote what it holds), so the next holder
    /// need not wait for the lease to run out.
    pub(super) async fn give_up(self) -> Result<(), ElectionError> {
        match self {
            Authority::Leader(l) => l.resign().await,
            Authority::Shard(g) => g.into_lock().release().await,
            #[cfg(test)]
            Authority::Test(k) => {
                k.give_up();
                Ok(())
            }
        }
    }

    /// What the term covers.
    pub(super) fn scope(&self, placement: Placement) -> Scope {
        Scope::new(placement, self.shard())
    }
}

/// The tasks one term schedules: all of them, or one shard's.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scope {
    placement: Placement,
    shard: Option<u32>,
}

impl Scope {
    /// The tasks of `shard` under `placement`; all of them with `None`.
    pub(super) fn new(placement: Placement, shard: Option<u32>) -> Scope {
        Scope { placement, shard }
    }

    /// The shard covered; `None` for all.
    pub(super) fn shard(&self) -> Option<u32> {
        self.shard
    }

    /// Whether `key` is this term's to schedule.
    pub(super) fn contains(&self, key: &TaskKey) -> bool {
        self.shard.is_none_or(|s| self.placement.shard_of(key) == s)
    }
}
