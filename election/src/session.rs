//! Sessions: one kept-alive lease on which keys are created only if absent and released.
//!
//! This is the one lease building block of the crate, in the manner of etcd's Go
//! `concurrency.Session`: leadership is the leader key on a session, a task lock is a key
//! under `{prefix}/locks/` on a session, an instance record is a plain key on one. The session
//! renews its lease every TTL/3 and trusts it only until a monotonic deadline (`hold.rs`).
//!
//! A key held on a session ([`HeldKey`]) adds one thing the lease cannot say: that the key is
//! still the one this holder created. Its guard task watches the key from the revision that
//! created it; the key deleted, or recreated by anyone (another create revision), ends that key
//! alone. Its loss token is a child of the session's, so losing the session ends every key on
//! it, and its validity check includes the session's deadline. The create revision only grows,
//! so it serves as the key's fencing token.
//!
//! Releasing a key deletes it only while its create revision is still ours, so a late release
//! never removes a successor's key. Closing the session revokes the lease, which removes every
//! key still on it at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_scheduler_core::ReconnectBackoff;
use etcd_client::{
    Client, Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
    WatchStream,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::hold::{reconnect_backoff, HoldView, LeaseHold, LossReason};

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

/// What creating a key found.
pub(crate) enum Created {
    /// The key was absent and is now ours.
    Held(Box<HeldKey>),
    /// Someone holds it: the transaction's revision and the value found.
    Taken { revision: i64, value: Vec<u8> },
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
        self.hold.lost()
    }

    /// Whether the lease may be relied on right now (loss signal and monotonic deadline).
    pub fn is_valid(&self) -> bool {
        self.hold.is_valid()
    }

    /// The monotonic instant until which the lease is trusted (moves forward with each
    /// confirmed renewal).
    pub fn valid_until(&self) -> Instant {
        self.hold.safe_until()
    }

    /// Why the session ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.hold.loss_reason()
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

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Creates `key` with `value` on this session's lease if it does not exist
    /// (`create_revision == 0`), in one transaction that otherwise reads the holder's value.
    pub(crate) async fn create_if_absent(
        &self,
        key: String,
        value: Vec<u8>,
        what: &'static str,
    ) -> Result<Created, ElectionError> {
        if !self.is_valid() {
            return Err(ElectionError::SessionLost {
                reason: self.loss_reason().unwrap_or(LossReason::RenewalOverdue),
            });
        }
        let t = self.request_timeout;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(self.lease_id())),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let mut kv = self.client.kv_client();
        let resp = timed(what, t, kv.txn(txn)).await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        if !resp.succeeded() {
            let value = resp
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
                    _ => None,
                })
                .unwrap_or_default();
            return Ok(Created::Taken { revision, value });
        }
        Ok(Created::Held(Box::new(HeldKey::start(self, key, revision))))
    }
}

/// The loss signal and reason of one key, shared with its guard task.
struct KeyState {
    lost: CancellationToken,
    reason: Mutex<Option<LossReason>>,
}

impl KeyState {
    fn lose(&self, reason: LossReason) {
        // A key already lost (itself, or with its session) keeps the first reason.
        if !self.lost.is_cancelled() {
            if let Ok(mut r) = self.reason.lock() {
                if r.is_none() {
                    *r = Some(reason);
                }
            }
        }
        self.lost.cancel();
    }
}

/// A key created on a session and still believed ours; see the [module notes](self).
///
/// Dropping it deletes the key in the background (only if still ours); [`HeldKey::release`]
/// does it and waits; [`HeldKey::abandon`] leaves the key to the lease.
pub(crate) struct HeldKey {
    key: String,
    create_revision: i64,
    state: Arc<KeyState>,
    session: HoldView,
    client: Client,
    request_timeout: Duration,
    guard: JoinHandle<()>,
    done: bool,
}

impl HeldKey {
    fn start(session: &Session, key: String, create_revision: i64) -> HeldKey {
        let view = session.hold.view();
        let state = Arc::new(KeyState {
            lost: view.lost_token().child_token(),
            reason: Mutex::new(None),
        });
        let guard = Guard {
            client: session.client.clone(),
            key: key.clone(),
            create_revision,
            state: state.clone(),
            request_timeout: session.request_timeout,
        };
        let span = tracing::debug_span!("key_guard", key = %key, create_revision);
        let guard = tokio::spawn(guard.run().instrument(span));
        HeldKey {
            key,
            create_revision,
            state,
            session: view,
            client: session.client.clone(),
            request_timeout: session.request_timeout,
            guard,
            done: false,
        }
    }

    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    pub(crate) fn create_revision(&self) -> i64 {
        self.create_revision
    }

    pub(crate) fn lost(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    pub(crate) fn is_valid(&self) -> bool {
        !self.state.lost.is_cancelled() && Instant::now() < self.session.safe_until()
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.session.safe_until()
    }

    pub(crate) fn loss_reason(&self) -> Option<LossReason> {
        let own = self.state.reason.lock().ok().and_then(|r| r.clone());
        own.or_else(|| self.session.loss_reason())
    }

    /// Fires the loss signal, then deletes the key if its create revision is still ours.
    pub(crate) async fn release(mut self, what: &'static str) -> Result<(), ElectionError> {
        self.done = true;
        self.state.lose(LossReason::Released);
        self.guard.abort();
        let mut kv = self.client.kv_client();
        timed(
            what,
            self.request_timeout,
            kv.txn(delete_if_ours(&self.key, self.create_revision)),
        )
        .await
        .map(|_| ())
    }

    /// Fires the loss signal and stops guarding, leaving the key to expire with the lease.
    pub(crate) fn abandon(mut self) {
        self.done = true;
        self.state.lose(LossReason::Dropped);
        self.guard.abort();
    }
}

impl Drop for HeldKey {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.state.lose(LossReason::Dropped);
        self.guard.abort();
        // Drop cannot wait: delete in the background when a runtime is there to run it;
        // otherwise the key goes with its lease.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut kv = self.client.kv_client();
            let txn = delete_if_ours(&self.key, self.create_revision);
            let t = self.request_timeout;
            rt.spawn(async move {
                if let Err(error) = timed("key delete", t, kv.txn(txn)).await {
                    tracing::debug!(%error, "deleting a dropped key failed; it goes with its lease");
                }
            });
        }
    }
}

fn delete_if_ours(key: &str, create_revision: i64) -> Txn {
    Txn::new()
        .when([Compare::create_revision(
            key.to_owned(),
            CompareOp::Equal,
            create_revision,
        )])
        .and_then([TxnOp::delete(key.to_owned(), None)])
}

/// Watches one held key until it is deleted, recreated by someone else, or the key's loss
/// token fires (released, dropped, or its session lost).
struct Guard {
    client: Client,
    key: String,
    create_revision: i64,
    state: Arc<KeyState>,
    request_timeout: Duration,
}

/// What a look at the key found.
enum Check {
    /// Still ours; watch from this revision on.
    Ours { watch_from: i64 },
    /// Gone or someone else's.
    Lost(LossReason),
}

impl Guard {
    async fn run(self) {
        let lost = self.state.lost.clone();
        tokio::select! {
            biased;
            _ = lost.cancelled() => {}
            reason = self.watch_until_lost() => {
                tracing::warn!(key = %self.key, %reason, "held key lost");
                self.state.lose(reason);
            }
        }
    }

    /// Returns only when the key is no longer ours. Transient failures are retried with the
    /// shared backoff; the session's deadline, not this loop, bounds how long the key is
    /// trusted while etcd cannot be reached.
    async fn watch_until_lost(&self) -> LossReason {
        let mut backoff: ReconnectBackoff = reconnect_backoff();
        // The creating transaction proved the key ours at its revision.
        let mut watch_from = self.create_revision + 1;
        loop {
            match self.follow(watch_from).await {
                Ok(reason) => return reason,
                Err(error) => {
                    tracing::debug!(key = %self.key, %error, "key watch broke; checking again");
                }
            }
            loop {
                let wait = backoff.next_delay(&mut rand::rng());
                tokio::time::sleep(wait).await;
                match self.check().await {
                    Ok(Check::Lost(reason)) => return reason,
                    Ok(Check::Ours { watch_from: from }) => {
                        backoff.reset();
                        watch_from = from;
                        break;
                    }
                    Err(error) => tracing::debug!(key = %self.key, %error, "key check failed"),
                }
            }
        }
    }

    /// Follows the key's events from `from`: `Ok` with the reason once it is not ours, `Err`
    /// when the watch broke (or fell behind compaction) and the key must be checked again.
    async fn follow(&self, from: i64) -> Result<LossReason, ElectionError> {
        let mut wc = self.client.watch_client();
        let mut stream: WatchStream = timed(
            "key watch",
            self.request_timeout,
            wc.watch(
                self.key.clone(),
                Some(WatchOptions::new().with_start_revision(from)),
            ),
        )
        .await?;
        loop {
            let resp = match stream.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => return Err(broken("watch stream ended")),
                Err(source) => {
                    return Err(ElectionError::Etcd {
                        op: "key watch",
                        source,
                    })
                }
            };
            if resp.canceled() || resp.compact_revision() > 0 {
                return Err(broken("watch cancelled"));
            }
            for event in resp.events() {
                match event.event_type() {
                    EventType::Delete => return Ok(LossReason::KeyDeleted),
                    EventType::Put => {
                        let rev = event.kv().map(|kv| kv.create_revision()).unwrap_or(0);
                        if rev != self.create_revision {
                            return Ok(LossReason::KeyTakenOver {
                                create_revision: rev,
                            });
                        }
                    }
                }
            }
        }
    }

    async fn check(&self) -> Result<Check, ElectionError> {
        let mut kv = self.client.kv_client();
        let resp = timed(
            "key get",
            self.request_timeout,
            kv.get(self.key.clone(), None),
        )
        .await?;
        Ok(match resp.kvs().first() {
            None => Check::Lost(LossReason::KeyDeleted),
            Some(kv) if kv.create_revision() != self.create_revision => {
                Check::Lost(LossReason::KeyTakenOver {
                    create_revision: kv.create_revision(),
                })
            }
            Some(_) => Check::Ours {
                watch_from: resp.header().map(|h| h.revision()).unwrap_or(0) + 1,
            },
        })
    }
}

fn broken(what: &str) -> ElectionError {
    ElectionError::Etcd {
        op: "key watch",
        source: etcd_client::Error::WatchError(what.to_string()),
    }
}
