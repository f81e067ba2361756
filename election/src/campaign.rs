//! Campaigning for `{prefix}/leader` and the [`Leadership`] value a winner holds.
//!
//! A campaign is a state machine ([`CampaignState`]) advanced by [`Candidate::step`]: grant
//! a lease and create the key in one transaction only if it does not exist
//! (`create_revision == 0`); when someone else holds it, watch the key from the revision of
//! that read + 1 (so a delete in between is not missed) and try again once it is deleted or
//! its lease expires. A fresh lease per attempt keeps a waiting candidate from renewing a
//! lease it does not use.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ax_scheduler_core::UtcMillis;
use etcd_client::{Client, Compare, CompareOp, EventType, PutOptions, Txn, TxnOp, WatchOptions};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::hold::{Guarded, LeaseHold, LossReason};
use crate::keys::leader_key;

/// The JSON stored at `{prefix}/leader`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct LeaderRecord {
    pub(crate) instance_id: String,
    pub(crate) since: UtcMillis,
    #[serde(default)]
    pub(crate) info: serde_json::Value,
}

pub(crate) fn now_millis() -> UtcMillis {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    UtcMillis(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// A replica that wants to lead.
#[derive(Clone)]
pub struct Candidate {
    client: Client,
    config: ElectionConfig,
    instance_id: String,
    info: serde_json::Value,
}

/// The campaign's states.
enum CampaignState {
    /// Grant a lease and try to create the leader key.
    Attempt,
    /// Someone else leads; wait for the key to go.
    Waiting {
        watch: Box<etcd_client::WatchStream>,
        holder: String,
    },
    /// etcd failed; try again at `until`.
    Backoff { until: Instant, attempt: u32 },
    /// Won.
    Won(Box<Leadership>),
}

impl Candidate {
    /// A candidate named `instance_id`; `info` (any JSON: address, version) is published in
    /// the leader record for observers.
    pub fn new(
        client: Client,
        config: ElectionConfig,
        instance_id: impl Into<String>,
        info: serde_json::Value,
    ) -> Result<Self, ElectionError> {
        config.validate()?;
        Ok(Candidate {
            client,
            config,
            instance_id: instance_id.into(),
            info,
        })
    }

    /// This candidate's instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Campaigns until this candidate leads or `cancel` fires. etcd errors are retried with
    /// backoff; only cancellation ends the campaign without leadership.
    pub async fn campaign(&self, cancel: &CancellationToken) -> Result<Leadership, ElectionError> {
        let mut state = CampaignState::Attempt;
        loop {
            state = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(ElectionError::Cancelled),
                s = self.step(state) => s,
            };
            if let CampaignState::Won(leadership) = state {
                return Ok(*leadership);
            }
        }
    }

    /// One attempt: leadership if the key was free, `None` if someone else leads.
    pub async fn try_campaign(&self) -> Result<Option<Leadership>, ElectionError> {
        match self.attempt().await? {
            Ok(leadership) => Ok(Some(leadership)),
            Err(_) => Ok(None),
        }
    }

    async fn step(&self, state: CampaignState) -> CampaignState {
        match state {
            CampaignState::Won(l) => CampaignState::Won(l),
            CampaignState::Attempt => match self.attempt().await {
                Ok(Ok(leadership)) => CampaignState::Won(Box::new(leadership)),
                Ok(Err((watch, holder))) => CampaignState::Waiting {
                    watch: Box::new(watch),
                    holder,
                },
                Err(error) => {
                    tracing::warn!(instance_id = %self.instance_id, %error, "campaign attempt failed");
                    CampaignState::Backoff {
                        until: Instant::now() + backoff(0),
                        attempt: 1,
                    }
                }
            },
            CampaignState::Waiting { mut watch, holder } => match watch.message().await {
                Ok(Some(resp)) => {
                    if resp.canceled() {
                        return CampaignState::Attempt;
                    }
                    if resp
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete)
                    {
                        tracing::info!(instance_id = %self.instance_id, previous = %holder, "leader key released; campaigning");
                        CampaignState::Attempt
                    } else {
                        CampaignState::Waiting { watch, holder }
                    }
                }
                Ok(None) | Err(_) => CampaignState::Backoff {
                    until: Instant::now() + backoff(0),
                    attempt: 1,
                },
            },
            CampaignState::Backoff { until, attempt } => {
                tokio::time::sleep_until(until).await;
                match self.attempt().await {
                    Ok(Ok(leadership)) => CampaignState::Won(Box::new(leadership)),
                    Ok(Err((watch, holder))) => CampaignState::Waiting {
                        watch: Box::new(watch),
                        holder,
                    },
                    Err(error) => {
                        tracing::debug!(instance_id = %self.instance_id, %error, attempt, "campaign attempt failed");
                        CampaignState::Backoff {
                            until: Instant::now() + backoff(attempt),
                            attempt: attempt + 1,
                        }
                    }
                }
            }
        }
    }

    /// Grants a lease and creates the key if absent. On a taken key, returns a watch on it
    /// from just after the read, and the holder's instance id.
    #[allow(clippy::type_complexity)]
    async fn attempt(
        &self,
    ) -> Result<Result<Leadership, (etcd_client::WatchStream, String)>, ElectionError> {
        let t = self.config.request_timeout;
        let key = leader_key(&self.config.prefix);
        let sent_at = Instant::now();
        let mut lease = self.client.lease_client();
        let lease_id = timed("lease grant", t, lease.grant(self.config.ttl_secs(), None))
            .await?
            .id();
        let since = now_millis();
        let record = LeaderRecord {
            instance_id: self.instance_id.clone(),
            since,
            info: self.info.clone(),
        };
        // Serializing a struct of strings, integers and a JSON value cannot fail.
        let value = serde_json::to_vec(&record).unwrap_or_default();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease_id)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let mut kv = self.client.kv_client();
        let resp = match timed("leader txn", t, kv.txn(txn)).await {
            Ok(r) => r,
            Err(e) => {
                let _ = timed("lease revoke", t, lease.revoke(lease_id)).await;
                return Err(e);
            }
        };
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        if resp.succeeded() {
            let hold = LeaseHold::start(
                self.client.clone(),
                lease_id,
                self.config.effective_ttl(),
                t,
                Some(Guarded {
                    key: key.clone(),
                    create_revision: revision,
                }),
                sent_at,
            );
            tracing::info!(instance_id = %self.instance_id, fencing_token = revision, "elected leader");
            return Ok(Ok(Leadership {
                hold,
                client: self.client.clone(),
                key,
                fencing_token: revision,
                instance_id: self.instance_id.clone(),
                since,
                request_timeout: t,
            }));
        }
        let _ = timed("lease revoke", t, lease.revoke(lease_id)).await;
        let mut holder = String::new();
        for op in resp.op_responses() {
            if let etcd_client::TxnOpResponse::Get(get) = op {
                if let Some(kv) = get.kvs().first() {
                    holder = serde_json::from_slice::<LeaderRecord>(kv.value())
                        .map(|r| r.instance_id)
                        .unwrap_or_default();
                }
            }
        }
        let mut wc = self.client.watch_client();
        let watch = timed(
            "leader watch",
            t,
            wc.watch(
                key,
                Some(WatchOptions::new().with_start_revision(revision + 1)),
            ),
        )
        .await?;
        Ok(Err((watch, holder)))
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64 << attempt.min(4))
}

/// Leadership won by a campaign: valid until [`Leadership::lost`] fires.
///
/// Dropping it revokes the lease in the background (a successor takes over at once);
/// [`Leadership::resign`] does the same and waits for it.
pub struct Leadership {
    hold: LeaseHold,
    client: Client,
    key: String,
    fencing_token: i64,
    instance_id: String,
    since: UtcMillis,
    request_timeout: Duration,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("instance_id", &self.instance_id)
            .field("fencing_token", &self.fencing_token)
            .field("lease_id", &self.hold.lease_id())
            .finish()
    }
}

impl Leadership {
    /// The leader key's create revision: grows with every new leadership, so writes
    /// stamped with it can be refused when they come from an older leader.
    pub fn fencing_token(&self) -> i64 {
        self.fencing_token
    }

    /// The winning instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// When leadership was won.
    pub fn since(&self) -> UtcMillis {
        self.since
    }

    /// The lease the leader key is attached to.
    pub fn lease_id(&self) -> i64 {
        self.hold.lease_id()
    }

    /// A token that fires the moment leadership is lost or in doubt: a failed renewal,
    /// an expired lease, the key deleted or taken over, or no renewal confirmed within
    /// TTL - TTL/3. Stop all leader work when it fires.
    pub fn lost(&self) -> CancellationToken {
        self.hold.lost()
    }

    /// Whether this process may act as leader right now: the loss signal has not fired
    /// and the monotonic safe deadline has not passed.
    ///
    /// Check it right before every leader action. After the process was paused (SIGSTOP,
    /// a frozen VM) the code that resumes first can run before the keep-alive task sees
    /// its overdue timers, so [`Leadership::lost`] alone may still read "not cancelled"
    /// for a moment while another replica already leads; the deadline check cannot be
    /// fooled that way because the monotonic clock kept running during the pause.
    pub fn is_valid(&self) -> bool {
        self.hold.is_valid()
    }

    /// The monotonic instant until which this leadership is trusted (moves forward with
    /// each confirmed renewal).
    pub fn valid_until(&self) -> Instant {
        self.hold.safe_until()
    }

    /// Why leadership ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.hold.loss_reason()
    }

    /// Gives leadership up: fires [`Leadership::lost`], deletes the leader key if it is
    /// still ours and revokes the lease, so a successor takes over at once.
    pub async fn resign(mut self) -> Result<(), ElectionError> {
        let (deleted, revoked) = self
            .hold
            .release_key(
                &self.client,
                &self.key,
                self.fencing_token,
                self.request_timeout,
                "leader delete",
            )
            .await;
        tracing::info!(instance_id = %self.instance_id, fencing_token = self.fencing_token, "resigned leadership");
        deleted?;
        match revoked {
            Ok(_) => Ok(()),
            // The lease may already be gone (expired, or revoked by the key's deletion
            // racing); the key delete above is what hands over.
            Err(ElectionError::Etcd { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Stops renewing without deleting the key or revoking the lease, as a crashed process
    /// would: the lease expires after its TTL and only then can a successor win. For fault
    /// drills and tests.
    pub fn abandon(self) {
        self.hold.abandon();
    }
}
