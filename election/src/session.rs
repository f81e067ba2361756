//! Sessions: one kept-alive lease on which keys are created only if absent and released.
//!
//! This is the one lease building block of the crate, in the manner of etcd's Go
//! `concurrency.Session`: leadership is the leader key on a session, a task lock is a key
//! under `{prefix}/locks/` on a session, an instance record is a plain key on one. The session
//! renews its lease every TTL/3 and trusts it only until a monotonic deadline (`hold.rs`).
//!
//! A key is created on a session only if absent, in one transaction that otherwise reads the
//! holder's value, so taking a key never overwrites someone else's. A key won that way is a
//! [`KeyHold`] (`key_hold.rs`): it adds what the lease cannot say, that the key is still the
//! one this holder created. The session's validity and each key's are one type
//! (`validity.rs`): a key is valid only while its lease is, so losing the session ends every
//! key on it. Closing the session revokes the lease, which removes every key still on it at
//! once.

use std::time::Duration;

use etcd_client::Client;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::hold::LeaseHold;
use crate::validity::{LossReason, Validity};

/// One etcd lease kept alive in the background, carrying any number of keys.
///
/// Validity follows the same rules as leadership: [`Session::lost`] fires when a renewal
/// fails, etcd reports the lease gone, or no renewal was confirmed within TTL - TTL/3;
/// [`Session::is_valid`] also checks that monotonic deadline directly. Dropping the session
/// revokes its lease in the background (every key on it vanishes); [`Session::close`] does it
/// and waits; [`Session::abandon`] stops renewing without revoking, as a crash would.
pub struct Session {
    hold: LeaseHold,
    client: Client,
    prefix: String,
    request_timeout: Duration,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("lease_id", &self.hold.lease_id())
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Session {
    /// Grants a lease with the config's TTL and starts keeping it alive. The config's prefix
    /// is where keys built from this session (task locks) live.
    pub async fn open(client: &Client, config: &ElectionConfig) -> Result<Session, ElectionError> {
        config.validate()?;
        let t = config.request_timeout;
        // The safe deadline counts from the grant's send: etcd starts the TTL no earlier.
        let sent_at = Instant::now();
        let mut lease = client.lease_client();
        let lease_id = timed("lease grant", t, lease.grant(config.ttl_secs(), None))
            .await?
            .id();
        let hold = LeaseHold::start(client.clone(), lease_id, config.effective_ttl(), t, sent_at);
        Ok(Session {
            hold,
            client: client.clone(),
            prefix: config.prefix.clone(),
            request_timeout: t,
        })
    }

    /// The lease every key of this session is attached to.
    pub fn lease_id(&self) -> i64 {
        self.hold.lease_id()
    }

    /// Fires the moment the lease is lost or in doubt; every key on it is lost with it.
    pub fn lost(&self) -> CancellationToken {
        self.validity().lost()
    }

    /// Whether the lease may be relied on right now (loss signal and monotonic deadline).
    pub fn is_valid(&self) -> bool {
        self.validity().is_valid()
    }

    /// The monotonic instant until which the lease is trusted (moves forward with each
    /// confirmed renewal).
    pub fn valid_until(&self) -> Instant {
        self.validity().valid_until()
    }

    /// Why the session ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.validity().loss_reason()
    }

    /// Ends the session: stops renewing and revokes the lease, so every key on it is deleted
    /// at once.
    pub async fn close(mut self) -> Result<(), ElectionError> {
        self.hold.stop_without_revoke(LossReason::Released).await;
        let mut lease = self.client.lease_client();
        timed(
            "lease revoke",
            self.request_timeout,
            lease.revoke(self.hold.lease_id()),
        )
        .await
        .map(|_| ())
    }

    /// Stops renewing without revoking, as a crashed process would: the keys stay until the
    /// lease's TTL runs out. For fault drills and tests.
    pub fn abandon(self) {
        self.hold.abandon();
    }

    /// The lease's validity, from which each key on it derives its own.
    pub(crate) fn validity(&self) -> &Validity {
        self.hold.validity()
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }
}
