//! A key held on a lease: the one value behind leadership, task locks and shard ownership.
//!
//! [`crate::Leadership`], [`crate::LockGuard`] and [`crate::ShardGuard`] are each a key created
//! on a [`Session`] only if absent, and each is trusted by the same rules. [`KeyHold`] is that
//! key: its name, its create revision (the fencing token) and its validity, so the rules live
//! here once and code that only needs "may I still act under this key?" takes a `&KeyHold`
//! whichever of the three it was given. What differs stays with them: leadership also owns
//! its session and resigns by revoking it, a lock is released alone, a shard guard knows its
//! shard.
//!
//! A key adds one thing its lease cannot say: that the key is still the one this holder
//! created. Its guard task watches the key from the revision that created it; the key
//! deleted, or recreated by anyone (another create revision), ends that key alone. Its
//! validity (`validity.rs`) is a child of its lease's, so losing the session ends every key
//! on it, and it is checked against the session's deadline. The create revision only grows,
//! so it serves as the key's fencing token.
//!
//! Releasing a key deletes it only while its create revision is still ours, so a late release
//! never removes a successor's key. The key's lifecycle (release, abandon, drop) stays inside
//! the crate: callers end a key through the guard they were given, which knows what else to
//! end with it.

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

use crate::error::{timed, ElectionError};
use crate::hold::reconnect_backoff;
use crate::session::Session;
use crate::validity::{LossReason, Validity};

/// A key created on a session only if absent and still believed ours: the leader key, a
/// task lock or a shard's owner key.
///
/// Valid while its loss signal has not fired and its session's monotonic deadline has not
/// passed: check [`KeyHold::is_valid`] right before every action taken under the key, and
/// stop all such work when [`KeyHold::lost`] fires. The key deleted, recreated by anyone
/// (another create revision) or its session lost ends it. Dropping it deletes the key in the
/// background, only if it is still ours, so a late delete never removes a successor's key.
pub struct KeyHold {
    key: String,
    create_revision: i64,
    validity: Validity,
    client: Client,
    request_timeout: Duration,
    guard: JoinHandle<()>,
    done: bool,
}

impl std::fmt::Debug for KeyHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyHold")
            .field("key", &self.key)
            .field("fencing_token", &self.create_revision)
            .finish()
    }
}

impl KeyHold {
    /// Starts guarding `key`, which the transaction at `create_revision` created on
    /// `session`'s lease.
    pub(crate) fn start(session: &Session, key: String, create_revision: i64) -> KeyHold {
        let validity = session.validity().key();
        let guard = Guard {
            client: session.client().clone(),
            key: key.clone(),
            create_revision,
            validity: validity.clone(),
            request_timeout: session.request_timeout(),
        };
        let span = tracing::debug_span!("key_guard", key = %key, create_revision);
        let guard = tokio::spawn(guard.run().instrument(span));
        KeyHold {
            key,
            create_revision,
            validity,
            client: session.client().clone(),
            request_timeout: session.request_timeout(),
            guard,
            done: false,
        }
    }

    /// The key held.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key's create revision: it grows with every new holder of the key, so writes
    /// stamped with it can be refused when they come from an older holder.
    pub fn fencing_token(&self) -> i64 {
        self.create_revision
    }

    /// A token that fires the moment the key is lost or in doubt: a failed renewal, an
    /// expired lease, the key deleted or taken over, no renewal confirmed within
    /// TTL - TTL/3, or the key given up.
    pub fn lost(&self) -> CancellationToken {
        self.validity.lost()
    }

    /// Whether the key may be relied on right now: the loss signal has not fired and its
    /// session's monotonic safe deadline has not passed.
    ///
    /// After the process was paused (SIGSTOP, a frozen VM) the code that resumes first can
    /// run before the keep-alive task sees its overdue timers, so [`KeyHold::lost`] alone
    /// may still read "not cancelled" for a moment while another holder already has the
    /// key; the deadline check cannot be fooled that way because the monotonic clock kept
    /// running during the pause.
    pub fn is_valid(&self) -> bool {
        self.validity.is_valid()
    }

    /// The monotonic instant until which the key is trusted: its session's deadline, which
    /// moves forward with each confirmed renewal.
    pub fn valid_until(&self) -> Instant {
        self.validity.valid_until()
    }

    /// Why the key was lost, once it was: its own reason, or its session's when the session
    /// ended first.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.validity.loss_reason()
    }

    /// Fires the loss signal, then deletes the key if its create revision is still ours.
    pub(crate) async fn release(mut self, what: &'static str) -> Result<(), ElectionError> {
        self.done = true;
        self.validity.lose(LossReason::Released);
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
        self.validity.lose(LossReason::Dropped);
        self.guard.abort();
    }
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.validity.lose(LossReason::Dropped);
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
    validity: Validity,
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
        let lost = self.validity.lost();
        tokio::select! {
            biased;
            _ = lost.cancelled() => {}
            reason = self.watch_until_lost() => {
                tracing::warn!(key = %self.key, %reason, "held key lost");
                self.validity.lose(reason);
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

/// What creating a key found.
pub(crate) enum Created {
    /// The key was absent and is now ours.
    Held(Box<KeyHold>),
    /// Someone holds it: the transaction's revision and the value found.
    Taken { revision: i64, value: Vec<u8> },
}

// Key creation belongs with the keys it creates: the session only carries them.
impl Session {
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
        let t = self.request_timeout();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(self.lease_id())),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let mut kv = self.client().kv_client();
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
        Ok(Created::Held(Box::new(KeyHold::start(self, key, revision))))
    }
}
