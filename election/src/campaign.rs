//! Campaigning for `{prefix}/leader` and the [`Leadership`] value a winner holds.
//!
//! Leadership is the leader key held on a [`Session`]: the session renews the lease and
//! bounds how long it is trusted, the held key adds the watch that notices the key deleted or
//! taken over, and the key's create revision is the fencing token.
//!
//! A campaign is a state machine ([`CampaignState`]) advanced by [`Candidate::step`]: open a
//! session and create the key on it in one transaction only if it does not exist
//! (`create_revision == 0`); when someone else holds it, close the session, watch the key
//! from the revision of that read + 1 (so a delete in between is not missed) and try again
//! once it is deleted or its lease expires. While waiting, the watch is asked for progress
//! every TTL/3 and given up when etcd does not answer within the hold's answer timeout
//! (`hold.rs`): a watch on a member that hangs would otherwise miss the key's deletion until
//! the connection's HTTP/2 keep-alive gave up (15 s), and the next attempt watches through
//! a member that answers. A fresh session per attempt keeps a waiting
//! candidate from renewing a lease it does not use. Failed attempts wait with the shared
//! jittered [`ReconnectBackoff`], so candidates that lost etcd together do not return in
//! lockstep.

use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::{Clock, ReconnectBackoff, SystemClock, UtcMillis};
use etcd_client::{Client, EventType, WatchOptions};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::hold::answer_timeout;
use crate::key_hold::Created;
use crate::key_hold::KeyHold;
use crate::keys::leader_key;
use crate::session::Session;
use crate::validity::LossReason;

/// The JSON stored at `{prefix}/leader`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct LeaderRecord {
    pub(crate) instance_id: String,
    pub(crate) since: UtcMillis,
    #[serde(default)]
    pub(crate) info: serde_json::Value,
}

/// A replica that wants to lead.
#[derive(Clone)]
pub struct Candidate {
    client: Client,
    config: ElectionConfig,
    instance_id: String,
    info: serde_json::Value,
    /// The wall clock of the leader record's and the shard map's instants.
    clock: Arc<dyn Clock>,
}

/// The campaign's states.
enum CampaignState {
    /// Grant a lease and try to create the leader key.
    Attempt,
    /// Someone else leads; wait for the key to go.
    Waiting {
        watch: Box<etcd_client::WatchStream>,
        holder: String,
        /// When to ask the watch for progress next.
        ask_at: Instant,
        /// When the unanswered progress request was sent, if one is out.
        asked_at: Option<Instant>,
    },
    /// etcd failed; try again at `until`.
    Backoff {
        until: Instant,
        backoff: ReconnectBackoff,
    },
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
            clock: Arc::new(SystemClock),
        })
    }

    /// Reads the wall clock through `clock` instead of the host's.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// This candidate's instance id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Takes part in shard ownership instead of campaigning for the one leader key: with
    /// this candidate's client, election settings and instance id, among `shards` shards
    /// laid out as `layout` says (see [`crate::own_shards`]).
    pub fn own_shards(
        &self,
        shards: u32,
        layout: String,
        orphan_after: Duration,
        cancel: &CancellationToken,
    ) -> Result<crate::ShardOwner, ElectionError> {
        crate::own_shards(
            self.client.clone(),
            self.config.clone(),
            crate::ShardSettings {
                instance_id: self.instance_id.clone(),
                shards,
                orphan_after,
                layout,
            },
            Arc::clone(&self.clock),
            cancel,
        )
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
                Ok(Err((watch, holder))) => self.waiting(watch, holder),
                Err(error) => {
                    tracing::warn!(instance_id = %self.instance_id, %error, "campaign attempt failed");
                    retry_later(campaign_backoff())
                }
            },
            CampaignState::Waiting {
                mut watch,
                holder,
                ask_at,
                asked_at,
            } => {
                let answer_by = asked_at.map(|at| {
                    at + answer_timeout(self.config.effective_ttl(), self.config.request_timeout)
                });
                tokio::select! {
                    message = watch.message() => match message {
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
                                return CampaignState::Attempt;
                            }
                            // Any answer (an event, a progress report) shows the watch alive.
                            CampaignState::Waiting { watch, holder, ask_at, asked_at: None }
                        }
                        Ok(None) | Err(_) => retry_later(campaign_backoff()),
                    },
                    // `unwrap_or` is never awaited: the branch is off without a request out.
                    _ = tokio::time::sleep_until(answer_by.unwrap_or(ask_at)), if answer_by.is_some() => {
                        tracing::info!(instance_id = %self.instance_id, "leader watch unanswered; watching anew");
                        retry_later(campaign_backoff())
                    }
                    _ = tokio::time::sleep_until(ask_at), if asked_at.is_none() => {
                        let now = Instant::now();
                        match watch.request_progress().await {
                            Ok(()) => CampaignState::Waiting {
                                watch,
                                holder,
                                ask_at: now + self.config.effective_ttl() / 3,
                                asked_at: Some(now),
                            },
                            Err(_) => retry_later(campaign_backoff()),
                        }
                    }
                }
            }
            CampaignState::Backoff { until, backoff } => {
                tokio::time::sleep_until(until).await;
                match self.attempt().await {
                    Ok(Ok(leadership)) => CampaignState::Won(Box::new(leadership)),
                    Ok(Err((watch, holder))) => self.waiting(watch, holder),
                    Err(error) => {
                        tracing::debug!(instance_id = %self.instance_id, %error, failures = backoff.failures(), "campaign attempt failed");
                        retry_later(backoff)
                    }
                }
            }
        }
    }

    /// Opens a session and creates the key on it if absent. On a taken key, closes the
    /// session and returns a watch on the key from just after the read, and the holder's
    /// instance id.
    #[allow(clippy::type_complexity)]
    async fn attempt(
        &self,
    ) -> Result<Result<Leadership, (etcd_client::WatchStream, String)>, ElectionError> {
        let t = self.config.request_timeout;
        let key = leader_key(&self.config.prefix);
        let session = Session::open(&self.client, &self.config).await?;
        let since = self.clock.now();
        let record = LeaderRecord {
            instance_id: self.instance_id.clone(),
            since,
            info: self.info.clone(),
        };
        // Serializing a struct of strings, integers and a JSON value cannot fail.
        let value = serde_json::to_vec(&record).unwrap_or_default();
        let created = match session
            .create_if_absent(key.clone(), value, "leader txn")
            .await
        {
            Ok(c) => c,
            Err(e) => {
                let _ = session.close().await;
                return Err(e);
            }
        };
        let (revision, value) = match created {
            Created::Held(held) => {
                let fencing_token = held.fencing_token();
                tracing::info!(instance_id = %self.instance_id, fencing_token, "elected leader");
                return Ok(Ok(Leadership {
                    hold: *held,
                    session,
                    instance_id: self.instance_id.clone(),
                    since,
                }));
            }
            Created::Taken { revision, value } => (revision, value),
        };
        let _ = session.close().await;
        let holder = serde_json::from_slice::<LeaderRecord>(&value)
            .map(|r| r.instance_id)
            .unwrap_or_default();
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

impl Candidate {
    /// The waiting state on `watch`, its first progress request due in TTL/3.
    fn waiting(&self, watch: etcd_client::WatchStream, holder: String) -> CampaignState {
        CampaignState::Waiting {
            watch: Box::new(watch),
            holder,
            ask_at: Instant::now() + self.config.effective_ttl() / 3,
            asked_at: None,
        }
    }
}

/// Waits between failed campaign attempts: from 100 ms doubling to 1.6 s, jittered.
fn campaign_backoff() -> ReconnectBackoff {
    ReconnectBackoff::new(Duration::from_millis(100), Duration::from_millis(1600))
}

/// Records a failure on `backoff` and schedules the next attempt after its wait.
fn retry_later(mut backoff: ReconnectBackoff) -> CampaignState {
    let wait = backoff.next_delay(&mut rand::rng());
    CampaignState::Backoff {
        until: Instant::now() + wait,
        backoff,
    }
}

/// Leadership won by a campaign: valid until [`Leadership::lost`] fires.
///
/// The leader key is a [`KeyHold`] ([`Leadership::hold`]), trusted by the same rules as a
/// task lock or a shard's owner key; the validity methods here are that key's. Dropping it
/// revokes the lease in the background (a successor takes over at once);
/// [`Leadership::resign`] does the same and waits for it.
pub struct Leadership {
    hold: KeyHold,
    session: Session,
    instance_id: String,
    since: UtcMillis,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("instance_id", &self.instance_id)
            .field("fencing_token", &self.hold.fencing_token())
            .field("lease_id", &self.session.lease_id())
            .finish()
    }
}

impl Leadership {
    /// The leader key, for code that acts under any held key alike.
    pub fn hold(&self) -> &KeyHold {
        &self.hold
    }

    /// The leader key's create revision: grows with every new leadership, so writes
    /// stamped with it can be refused when they come from an older leader.
    pub fn fencing_token(&self) -> i64 {
        self.hold.fencing_token()
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
        self.session.lease_id()
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
        self.hold.valid_until()
    }

    /// Why leadership ended, once it has.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.hold.loss_reason()
    }

    /// Gives leadership up: fires [`Leadership::lost`], deletes the leader key if it is
    /// still ours and revokes the lease, so a successor takes over at once.
    pub async fn resign(self) -> Result<(), ElectionError> {
        let Leadership {
            hold,
            session,
            instance_id,
            ..
        } = self;
        let fencing_token = hold.fencing_token();
        let deleted = hold.release("leader delete").await;
        let revoked = session.close().await;
        tracing::info!(%instance_id, fencing_token, "resigned leadership");
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
        self.session.abandon();
    }
}
