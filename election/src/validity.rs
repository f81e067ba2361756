//! The validity rules every hold shares: a lease's, and each key's on that lease.
//!
//! A hold is valid while its loss signal has not fired and the monotonic clock is before its
//! lease's safe deadline (`hold.rs` says how the keep-alive loop moves that deadline). Both
//! checks are needed: the signal is what tasks wait on, the deadline is what a caller can
//! trust right after the process was paused, before the keep-alive task ran again.
//!
//! One [`Validity`] type serves the lease and the keys on it, so the rules are written once.
//! A key's validity shares its lease's deadline and adds its own loss signal, a child of the
//! lease's: losing the lease ends every key on it, losing a key ends that key alone. A loss
//! keeps the first reason given; a key ended by its lease keeps no reason of its own and
//! reports the lease's, so it says why it was really lost (`RenewalOverdue`, `LeaseExpired`)
//! rather than whatever the key's own teardown said later (`Dropped`).

use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why a hold (leadership, lock, instance record) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// No renewal was confirmed within TTL - TTL/3 of the last confirmed one, so the lease
    /// may be about to expire (etcd unreachable, process paused, overloaded loop).
    RenewalOverdue,
    /// etcd reports the lease expired or unknown.
    LeaseExpired,
    /// The guarded key was deleted.
    KeyDeleted,
    /// The guarded key now belongs to another holder (another create revision).
    KeyTakenOver {
        /// Create revision of the key found.
        create_revision: i64,
    },
    /// The holder resigned or released it.
    Released,
    /// The holder was dropped or abandoned.
    Dropped,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossReason::RenewalOverdue => f.write_str("no lease renewal confirmed in time"),
            LossReason::LeaseExpired => f.write_str("lease expired"),
            LossReason::KeyDeleted => f.write_str("key deleted"),
            LossReason::KeyTakenOver { create_revision } => {
                write!(f, "key taken over (create revision {create_revision})")
            }
            LossReason::Released => f.write_str("released"),
            LossReason::Dropped => f.write_str("dropped"),
        }
    }
}

/// A loss signal: a token that fires once, and the reason it first fired for.
struct Loss {
    token: CancellationToken,
    reason: Mutex<Option<LossReason>>,
}

impl Loss {
    fn new(token: CancellationToken) -> Loss {
        Loss {
            token,
            reason: Mutex::new(None),
        }
    }

    fn lose(&self, reason: LossReason) {
        // A token already fired (by this loss, or by a parent's) keeps the first reason.
        if !self.token.is_cancelled() {
            if let Ok(mut r) = self.reason.lock() {
                if r.is_none() {
                    *r = Some(reason);
                }
            }
        }
        self.token.cancel();
    }

    fn reason(&self) -> Option<LossReason> {
        self.reason.lock().ok().and_then(|r| r.clone())
    }
}

/// What a lease's keys share: its loss signal and its safe deadline.
struct Lease {
    loss: Loss,
    safe_until: Mutex<Instant>,
}

impl Lease {
    fn safe_until(&self) -> Instant {
        // A poisoned lock only means another thread panicked mid-update; an Instant is
        // always whole, so reading through the poison is sound.
        match self.safe_until.lock() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        }
    }
}

/// Whether a lease, or a key on it, may be relied on; see the [module notes](self).
///
/// Clones share the same state: the keep-alive loop and a key's guard task each hold one.
#[derive(Clone)]
pub(crate) struct Validity {
    lease: Arc<Lease>,
    /// A key's own loss, its token a child of the lease's; `None` for the lease itself.
    key: Option<Arc<Loss>>,
}

impl Validity {
    /// A lease's validity, trusted until `safe_until` unless renewed.
    pub(crate) fn lease(safe_until: Instant) -> Validity {
        Validity {
            lease: Arc::new(Lease {
                loss: Loss::new(CancellationToken::new()),
                safe_until: Mutex::new(safe_until),
            }),
            key: None,
        }
    }

    /// The validity of a new key on this validity's lease.
    pub(crate) fn key(&self) -> Validity {
        Validity {
            lease: self.lease.clone(),
            key: Some(Arc::new(Loss::new(self.lease.loss.token.child_token()))),
        }
    }

    fn own(&self) -> &Loss {
        self.key.as_deref().unwrap_or(&self.lease.loss)
    }

    /// A token that fires the moment this hold is lost or in doubt.
    pub(crate) fn lost(&self) -> CancellationToken {
        // A child, so a caller cancelling its copy cannot end the hold.
        self.own().token.child_token()
    }

    /// Whether the loss signal is unfired and the lease's deadline not passed.
    pub(crate) fn is_valid(&self) -> bool {
        !self.own().token.is_cancelled() && Instant::now() < self.valid_until()
    }

    /// The lease's safe deadline.
    pub(crate) fn valid_until(&self) -> Instant {
        self.lease.safe_until()
    }

    /// This hold's own reason, else its lease's; `None` while neither was lost.
    pub(crate) fn loss_reason(&self) -> Option<LossReason> {
        let own = self.key.as_ref().and_then(|k| k.reason());
        own.or_else(|| self.lease.loss.reason())
    }

    /// Ends this hold (a lease: every key on it too), keeping an earlier reason if any.
    pub(crate) fn lose(&self, reason: LossReason) {
        self.own().lose(reason);
    }

    /// Moves the lease's deadline forward to `until`; a later deadline already set stays.
    pub(crate) fn renewed(&self, until: Instant) {
        if let Ok(mut g) = self.lease.safe_until.lock() {
            if until > *g {
                *g = until;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_valid_until_its_deadline() {
        let lease = Validity::lease(Instant::now() + 2 * SECOND);
        assert!(lease.is_valid());
        tokio::time::advance(2 * SECOND - Duration::from_millis(1)).await;
        assert!(lease.is_valid());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!lease.is_valid(), "the deadline itself is past trust");
        // Past the deadline nothing has fired: only the keep-alive loop fires the signal.
        assert!(!lease.lost().is_cancelled());
        assert_eq!(lease.loss_reason(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_only_move_the_deadline_forward() {
        let start = Instant::now();
        let lease = Validity::lease(start + 2 * SECOND);
        lease.renewed(start + 3 * SECOND);
        assert_eq!(lease.valid_until(), start + 3 * SECOND);
        // A late answer to an older renewal must not shorten the trust a newer one gave.
        lease.renewed(start + SECOND);
        assert_eq!(lease.valid_until(), start + 3 * SECOND);
        tokio::time::advance(2 * SECOND + Duration::from_millis(500)).await;
        assert!(lease.is_valid());
    }

    #[tokio::test(start_paused = true)]
    async fn a_loss_fires_at_once_and_keeps_its_first_reason() {
        let lease = Validity::lease(Instant::now() + 2 * SECOND);
        let lost = lease.lost();
        lease.lose(LossReason::LeaseExpired);
        lease.lose(LossReason::Dropped);
        assert!(lost.is_cancelled());
        assert!(!lease.is_valid(), "lost before the deadline");
        assert_eq!(lease.loss_reason(), Some(LossReason::LeaseExpired));
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_cancelling_its_token_does_not_end_the_hold() {
        let lease = Validity::lease(Instant::now() + 2 * SECOND);
        lease.lost().cancel();
        assert!(lease.is_valid());
        assert!(!lease.lost().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_shares_its_lease_deadline() {
        let start = Instant::now();
        let lease = Validity::lease(start + 2 * SECOND);
        let key = lease.key();
        lease.renewed(start + 3 * SECOND);
        assert_eq!(key.valid_until(), start + 3 * SECOND);
        tokio::time::advance(3 * SECOND).await;
        assert!(!key.is_valid());
    }

    #[tokio::test(start_paused = true)]
    async fn losing_a_key_leaves_its_lease_and_other_keys() {
        let lease = Validity::lease(Instant::now() + 2 * SECOND);
        let (key, other) = (lease.key(), lease.key());
        key.lose(LossReason::KeyDeleted);
        assert!(!key.is_valid());
        assert!(key.lost().is_cancelled());
        assert_eq!(key.loss_reason(), Some(LossReason::KeyDeleted));
        assert!(lease.is_valid() && other.is_valid());
        assert_eq!(lease.loss_reason(), None);
        assert_eq!(other.loss_reason(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_lease_ends_its_keys_with_its_reason() {
        let lease = Validity::lease(Instant::now() + 2 * SECOND);
        let key = lease.key();
        let lost = key.lost();
        lease.lose(LossReason::RenewalOverdue);
        assert!(lost.is_cancelled());
        assert!(!key.is_valid());
        // The key's own teardown afterwards does not hide why it was lost.
        key.lose(LossReason::Dropped);
        assert_eq!(key.loss_reason(), Some(LossReason::RenewalOverdue));
    }
}
