//! Shard ownership: which scheduler replica schedules which shard of the task space.
//!
//! Every replica that schedules runs one [`own_shards`] loop. It opens a [`Session`] and
//! registers itself as a member (`{prefix}/shards/members/{id}` on that lease), follows the
//! members and the owner keys (`{prefix}/shards/owners/{shard}`) with one watch over
//! `{prefix}/shards/`, computes the same [`ShardMap`] as every other member from the same
//! membership, and applies [`ownership_step`]: it takes its own free shards, asks the engine
//! to hand over the shards the map now gives to someone else, and takes a shard nobody took
//! for `orphan_after` whatever the map says.
//!
//! Ownership is a key on the session, created only if absent, like a task lock: its
//! [`ShardGuard`] carries the same validity rules as leadership, and its create revision is
//! the shard's fencing token. A handover is graceful by construction: the old owner is only
//! told ([`ShardEvent::HandOver`]); it stops the shard's dispatcher, writes what it holds,
//! and only then releases the guard, and the new owner can take the key only once it is
//! deleted. A dead owner's keys go with its lease (one TTL), and the map's owner takes them
//! the moment the deletes arrive. Losing the session ends every guard at once; the loop
//! then opens a new session and registers again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::placement::{ownership_step, Holder, ShardAction, ShardMap};
use ax_scheduler_core::{Clock, UtcMillis};
use etcd_client::{Client, EventType, GetOptions, KeyValue, WatchOptions, WatchStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::ElectionConfig;
use crate::error::{timed, ElectionError};
use crate::key_hold::Created;
use crate::key_hold::KeyHold;
use crate::keys::{shard_member_key, shard_owner_key, shards_prefix, ShardKey};
use crate::lock::LockGuard;
use crate::session::Session;

/// How a replica takes part in shard ownership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSettings {
    /// This replica's id (the member key and the owner keys' value).
    pub instance_id: String,
    /// Shards in the installation; the same on every replica.
    pub shards: u32,
    /// How long a shard may stay free before any member takes it, whatever the map says: a
    /// member that is listed but does not act (a hung process whose lease has not run out)
    /// must not leave its shards unscheduled. The map's owner gets it back by a handover.
    pub orphan_after: Duration,
    /// What a shard means to this replica beyond its number (the engine's placement rule):
    /// published in the member key. Members must agree on it and on `shards`, since a shard
    /// number names other tasks under another layout: a member that finds an earlier member
    /// with another layout does not take part (it logs why), and the earlier members leave
    /// it out of their map.
    pub layout: String,
}

impl ShardSettings {
    /// The member key's value: the shard count and the layout.
    fn member_value(&self) -> String {
        format!("shards={} {}", self.shards, self.layout)
    }
}

/// What the ownership loop tells the engine.
#[derive(Debug)]
pub enum ShardEvent {
    /// This replica owns the shard now: schedule it, fencing its writes with the guard.
    Acquired(ShardGuard),
    /// The map gives this held shard to another member: stop scheduling it, write what it
    /// holds, then release its guard. Told once per handover.
    HandOver(u32),
    /// The shard map changed (membership changed).
    Map(ShardMap),
}

/// A held shard: the lock guard of its owner key (its revision is the shard's fencing token,
/// its `lost()`/`is_valid()` say whether ownership holds, its [`LockGuard::hold`] is the
/// owner key itself), with the shard it is for. Dropping it releases the shard in the
/// background; [`LockGuard::release`] releases it and waits. Losing the session ends it too.
#[derive(Debug)]
pub struct ShardGuard {
    shard: u32,
    /// Boxed: a held key carries its etcd client, which is large.
    lock: Box<LockGuard>,
}

impl ShardGuard {
    /// The shard.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// Gives up the shard's guard, to release or abandon it.
    pub fn into_lock(self) -> LockGuard {
        *self.lock
    }
}

impl std::ops::Deref for ShardGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.lock
    }
}

/// The running ownership loop; dropping it stops the loop (held guards stay with the engine
/// until their session ends, which the loop's end causes).
pub struct ShardOwner {
    events: mpsc::UnboundedReceiver<ShardEvent>,
    stop: CancellationToken,
    /// Cancelled before `stop` by [`ShardOwner::abandon`].
    abandon: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl ShardOwner {
    /// The next event; `None` once the loop has stopped.
    pub async fn next(&mut self) -> Option<ShardEvent> {
        self.events.recv().await
    }

    /// The next event if one is waiting: several shards acquired at once are armed in one
    /// pass over the catalog instead of one pass each.
    pub fn try_next(&mut self) -> Option<ShardEvent> {
        self.events.try_recv().ok()
    }

    /// Stops the loop and waits for it: the session is closed, so every shard still held is
    /// released at once (release what you can first, after flushing).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl ShardOwner {
    /// Stops the loop without revoking its lease, as a crashed process would: the member and
    /// owner keys stay until the lease runs out. For fault drills and tests.
    pub async fn abandon(mut self) {
        self.abandon.cancel();
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ShardOwner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One shard's owner as recorded in etcd.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardOwnerRecord {
    /// The shard.
    pub shard: u32,
    /// The owning replica's instance id.
    pub owner: String,
    /// The owner's fencing token for the shard (its key's create revision).
    pub token: i64,
}

/// The recorded owner of each owned shard, in shard order (a shard without an owner is
/// missing), for `ax status`.
pub async fn list_shard_owners(
    client: &Client,
    config: &ElectionConfig,
) -> Result<Vec<ShardOwnerRecord>, ElectionError> {
    let mut kv = client.kv_client();
    let resp = timed(
        "shard owners list",
        config.request_timeout,
        kv.get(
            format!("{}owners/", shards_prefix(&config.prefix)),
            Some(GetOptions::new().with_prefix()),
        ),
    )
    .await?;
    let mut owners: Vec<ShardOwnerRecord> = resp
        .kvs()
        .iter()
        .filter_map(|kv| match ShardKey::parse(&config.prefix, kv.key()) {
            Some(ShardKey::Owner(shard)) => Some(ShardOwnerRecord {
                shard,
                owner: String::from_utf8_lossy(kv.value()).into_owned(),
                token: kv.create_revision(),
            }),
            _ => None,
        })
        .collect();
    owners.sort_by_key(|o| o.shard);
    Ok(owners)
}

/// Starts taking part in shard ownership; see the module notes. The loop runs until
/// the owner is stopped or dropped, or `cancel` fires.
pub fn own_shards(
    client: Client,
    config: ElectionConfig,
    settings: ShardSettings,
    clock: Arc<dyn Clock>,
    cancel: &CancellationToken,
) -> Result<ShardOwner, ElectionError> {
    config.validate()?;
    if settings.shards == 0 || settings.shards > ax_scheduler_core::placement::MAX_SHARDS {
        return Err(ElectionError::InvalidConfig(format!(
            "shards must be from 1 to {}, not {}",
            ax_scheduler_core::placement::MAX_SHARDS,
            settings.shards
        )));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let stop = cancel.child_token();
    let span = tracing::info_span!("shards", instance_id = %settings.instance_id);
    let abandon = CancellationToken::new();
    let looper = OwnLoop {
        client,
        config,
        settings,
        clock,
        tx,
        abandon: abandon.clone(),
    };
    let task = tokio::spawn(looper.run(stop.clone()).instrument(span));
    Ok(ShardOwner {
        events: rx,
        stop,
        abandon,
        task: Some(task),
    })
}

/// This member's view while its session lives.
struct Member {
    session: Session,
    /// Our member key; its loss (deleted by hand) ends the membership like a lost session.
    _member: KeyHold,
    /// Members with this member's layout: the map's members.
    members: BTreeSet<String>,
    /// Members with another layout, with their member key's create revision and value.
    strangers: BTreeMap<String, (i64, String)>,
    /// Whether this member stands aside (an earlier member has another layout), as last
    /// logged.
    aside: bool,
    holders: Vec<Holder>,
    /// Shards the engine was told to hand over and still holds.
    handing: BTreeSet<u32>,
    map: ShardMap,
}

enum OwnState {
    /// Open a session and register as a member.
    Open,
    /// Read the members and owners, then watch from there.
    Sync(Box<Member>),
    Watching(Box<Member>, Box<WatchStream>),
    /// Wait before opening again (attempt number).
    Backoff(u32),
    /// Stopped.
    Done,
}

struct OwnLoop {
    client: Client,
    config: ElectionConfig,
    settings: ShardSettings,
    /// The wall clock a free shard's age is measured on.
    clock: Arc<dyn Clock>,
    tx: mpsc::UnboundedSender<ShardEvent>,
    abandon: CancellationToken,
}

/// How often a watching member re-applies the step without news: the orphan grace is
/// counted by it.
const RECHECK: Duration = Duration::from_millis(500);

impl OwnLoop {
    async fn run(self, stop: CancellationToken) {
        let mut state = OwnState::Open;
        loop {
            state = match state {
                OwnState::Watching(m, watch) => self.watching(m, watch, &stop).await,
                // Stopped meanwhile: a session being opened or listed is dropped, which
                // revokes its lease in the background.
                other => tokio::select! {
                    biased;
                    _ = stop.cancelled() => OwnState::Done,
                    s = self.step(other) => s,
                },
            };
            if let OwnState::Done = state {
                return;
            }
        }
    }

    async fn step(&self, state: OwnState) -> OwnState {
        match state {
            OwnState::Open => match self.open().await {
                Ok(m) => OwnState::Sync(Box::new(m)),
                Err(error) => {
                    tracing::warn!(%error, "cannot join shard ownership; retrying");
                    OwnState::Backoff(0)
                }
            },
            OwnState::Backoff(attempt) => {
                tokio::time::sleep(Duration::from_millis(200u64 << attempt.min(4))).await;
                match self.open().await {
                    Ok(m) => OwnState::Sync(Box::new(m)),
                    Err(error) => {
                        tracing::debug!(%error, "cannot join shard ownership; retrying");
                        OwnState::Backoff(attempt + 1)
                    }
                }
            }
            OwnState::Sync(mut m) => match self.sync(&mut m).await {
                Ok(watch) => {
                    self.act(&mut m).await;
                    OwnState::Watching(m, Box::new(watch))
                }
                Err(error) => {
                    tracing::debug!(%error, "shard listing failed; retrying");
                    tokio::time::sleep(RECHECK).await;
                    self.still_member(m)
                }
            },
            OwnState::Watching(..) | OwnState::Done => state,
        }
    }

    async fn watching(
        &self,
        mut m: Box<Member>,
        mut watch: Box<WatchStream>,
        stop: &CancellationToken,
    ) -> OwnState {
        let lost = m.session.lost();
        tokio::select! {
            biased;
            _ = stop.cancelled() => {
                let Member { session, _member: member, .. } = *m;
                if self.abandon.is_cancelled() {
                    member.abandon();
                    session.abandon();
                    return OwnState::Done;
                }
                // Revoking the lease deletes every key still on it (the member key and any
                // shard the engine did not release) at once, for the others to take.
                drop(member);
                if let Err(error) = session.close().await {
                    tracing::debug!(%error, "closing the shard session failed; its keys expire with the lease");
                }
                OwnState::Done
            }
            _ = lost.cancelled() => {
                tracing::warn!(reason = ?m.session.loss_reason(), "shard session lost: every held shard with it");
                OwnState::Backoff(0)
            }
            _ = tokio::time::sleep(RECHECK) => {
                self.act(&mut m).await;
                OwnState::Watching(m, watch)
            }
            msg = watch.message() => match msg {
                Ok(Some(resp)) if !resp.canceled() && resp.compact_revision() == 0 => {
                    let now = self.clock.now();
                    let mut members_changed = false;
                    for event in resp.events() {
                        let Some(kv) = event.kv() else { continue };
                        members_changed |= match event.event_type() {
                            EventType::Put => self.seen(&mut m, kv),
                            EventType::Delete => self.gone(&mut m, kv, now),
                        };
                    }
                    // Owner keys come and go with every handover; the map only with members.
                    if members_changed {
                        self.remap(&mut m);
                    }
                    self.act(&mut m).await;
                    OwnState::Watching(m, watch)
                }
                _ => self.still_member(m),
            },
        }
    }

    /// Back to a fresh listing if the session still holds, else open a new one.
    fn still_member(&self, m: Box<Member>) -> OwnState {
        if m.session.is_valid() {
            OwnState::Sync(m)
        } else {
            OwnState::Backoff(0)
        }
    }

    async fn open(&self) -> Result<Member, ElectionError> {
        let session = Session::open(&self.client, &self.config).await?;
        let key = shard_member_key(&self.config.prefix, &self.settings.instance_id);
        let member = match session
            .create_if_absent(
                key,
                self.settings.member_value().into_bytes(),
                "shard member txn",
            )
            .await?
        {
            Created::Held(held) => *held,
            // A previous process under this id: its lease has not run out yet.
            Created::Taken { .. } => {
                let _ = session.close().await;
                return Err(ElectionError::InvalidConfig(format!(
                    "shard member {} is still registered by an earlier process; waiting for its lease",
                    self.settings.instance_id
                )));
            }
        };
        let now = self.clock.now();
        Ok(Member {
            session,
            _member: member,
            members: BTreeSet::new(),
            strangers: BTreeMap::new(),
            aside: false,
            holders: vec![Holder::Free(now); self.settings.shards as usize],
            handing: BTreeSet::new(),
            map: ShardMap::assign(self.settings.shards, &[self.settings.instance_id.as_str()]),
        })
    }

    /// Reads every member and owner key, then watches from the revision read.
    async fn sync(&self, m: &mut Member) -> Result<WatchStream, ElectionError> {
        let t = self.config.request_timeout;
        let prefix = shards_prefix(&self.config.prefix);
        let mut kv = self.client.kv_client();
        let resp = timed(
            "shards list",
            t,
            kv.get(prefix.clone(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let now = self.clock.now();
        // The listing says who holds what; a shard free before it stays free since when it
        // was first seen free.
        for h in &mut m.holders {
            if !matches!(h, Holder::Free(_)) {
                *h = Holder::Free(now);
            }
        }
        m.members.clear();
        m.strangers.clear();
        for kv in resp.kvs() {
            self.seen(m, kv);
        }
        self.remap(m);
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        let mut wc = self.client.watch_client();
        timed(
            "shards watch",
            t,
            wc.watch(
                prefix,
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1),
                ),
            ),
        )
        .await
    }

    /// Applies a put; whether it added a member.
    fn seen(&self, m: &mut Member, kv: &KeyValue) -> bool {
        match ShardKey::parse(&self.config.prefix, kv.key()) {
            Some(ShardKey::Member(id)) => {
                let value = String::from_utf8_lossy(kv.value()).into_owned();
                if value == self.settings.member_value() {
                    m.strangers.remove(&id);
                    m.members.insert(id)
                } else {
                    m.strangers
                        .insert(id.clone(), (kv.create_revision(), value));
                    m.members.remove(&id)
                }
            }
            Some(ShardKey::Owner(s)) if s < self.settings.shards => {
                let holder = String::from_utf8_lossy(kv.value()).into_owned();
                // Our id on another lease is an earlier process of ours: someone else.
                m.holders[s as usize] =
                    if holder == self.settings.instance_id && kv.lease() == m.session.lease_id() {
                        Holder::Me
                    } else {
                        m.handing.remove(&s);
                        Holder::Other(holder)
                    };
                false
            }
            _ => false,
        }
    }

    /// Applies a delete; whether it removed a member.
    fn gone(&self, m: &mut Member, kv: &KeyValue, now: UtcMillis) -> bool {
        match ShardKey::parse(&self.config.prefix, kv.key()) {
            Some(ShardKey::Member(id)) => {
                m.strangers.remove(&id);
                m.members.remove(&id)
            }
            Some(ShardKey::Owner(s)) if s < self.settings.shards => {
                m.handing.remove(&s);
                m.holders[s as usize] = Holder::Free(now);
                false
            }
            _ => false,
        }
    }

    fn remap(&self, m: &mut Member) {
        let members: Vec<&str> = m.members.iter().map(String::as_str).collect();
        let map = ShardMap::assign(self.settings.shards, &members);
        if map != m.map {
            let loads: BTreeMap<&str, u32> = map.loads();
            tracing::info!(members = members.len(), ?loads, "shard map changed");
            m.map = map;
            let _ = self.tx.send(ShardEvent::Map(m.map.clone()));
        }
    }

    /// Applies the ownership step to the current view.
    async fn act(&self, m: &mut Member) {
        if !m.members.contains(&self.settings.instance_id) {
            // Our member key is not listed yet (the watch lags the create): acting on a map
            // without us would hand everything away.
            return;
        }
        // Create revisions order the members by when they joined.
        let ours = m._member.fencing_token();
        let elder = m
            .strangers
            .iter()
            .find(|(_, (revision, _))| *revision < ours)
            .map(|(id, (_, value))| (id.clone(), value.clone()));
        if let Some((id, theirs)) = &elder {
            if !m.aside {
                tracing::error!(
                    member = %id,
                    theirs = %theirs,
                    ours = %self.settings.member_value(),
                    "a running scheduler replica has another shard layout (scheduler.shards, \
                     scheduler.placement): this replica schedules nothing until every replica \
                     has the same; change the layout only with every scheduler stopped"
                );
            }
        }
        m.aside = elder.is_some();
        if m.aside {
            return;
        }
        let actions = ownership_step(
            &self.settings.instance_id,
            &m.map,
            &m.holders,
            self.settings.orphan_after,
            self.clock.now(),
        );
        for action in actions {
            match action {
                ShardAction::Acquire(s) => self.acquire(m, s).await,
                ShardAction::HandOver(s) => {
                    if m.handing.insert(s) {
                        tracing::info!(shard = s, to = ?m.map.owner(s), "handing over shard");
                        let _ = self.tx.send(ShardEvent::HandOver(s));
                    }
                }
            }
        }
    }

    async fn acquire(&self, m: &mut Member, s: u32) {
        let key = shard_owner_key(&self.config.prefix, s);
        let value = self.settings.instance_id.as_bytes().to_vec();
        match m.session.create_if_absent(key, value, "shard txn").await {
            Ok(Created::Held(held)) => {
                tracing::info!(
                    shard = s,
                    fencing_token = held.fencing_token(),
                    "shard acquired"
                );
                m.holders[s as usize] = Holder::Me;
                let guard = ShardGuard {
                    shard: s,
                    lock: Box::new(LockGuard::new(*held)),
                };
                if let Err(mpsc::error::SendError(ShardEvent::Acquired(guard))) =
                    self.tx.send(ShardEvent::Acquired(guard))
                {
                    // Nobody listens: give the shard back rather than hold it unscheduled.
                    let _ = guard.into_lock().release().await;
                }
            }
            Ok(Created::Taken { value, .. }) => {
                m.holders[s as usize] = Holder::Other(String::from_utf8_lossy(&value).into_owned());
            }
            Err(error) => tracing::debug!(shard = s, %error, "shard acquire failed; retrying"),
        }
    }
}
