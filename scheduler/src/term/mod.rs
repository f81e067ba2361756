//! One term: an authority (the leader key, or one shard's owner key), its dispatcher, its
//! helpers and its loop.
//!
//! A term starts when the role gets an authority ([`Term::start`]: load the recorded states
//! of its scope, raise its fence on every queue, arm a fresh [`Dispatcher`] from its slice
//! of the catalog, start the state flusher on a child of the key's `lost()` token) and ends
//! when that token fires, for any reason (lease lost, fenced), or when the role stops it
//! (shutdown, or a shard handed over: then it writes what it holds and gives the key up). [`Term::run`] is its loop; it
//! owns its tickers, and everything it does between fires is cheap (the fire path, one read
//! of worker events per interval, handing states to the flusher), so a slow etcd never
//! delays a fire.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ax_alerting::Alert;
use ax_queue::Fence;
use ax_scheduler_core::{Dispatcher, EventPosition, TaskKey, TaskState, UtcMillis};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, info_span, warn, Instrument};

use super::authority::{Authority, Scope};
use super::catalog::{CatalogEntry, CatalogSlice, Change};
use super::feeds::Feeds;
use super::flusher::{self, FlushRequest};
use super::{clock, direct_writes, events, Error, LeaderSettings};
use crate::clock::ticker;
use crate::deps::TermDeps;
use ax_registry::PendingTrigger;

#[cfg(test)]
pub(crate) mod fakes;
mod fire;
#[cfg(test)]
mod tests;

/// What the role gives a term besides its authority.
pub(super) struct TermInput {
    /// The catalog's entries in the term's scope.
    pub(super) slice: CatalogSlice,
    /// Registry changes in the term's scope, after the slice.
    pub(super) changes: mpsc::Receiver<Change>,
    /// The newest registry revision the role's catalog reflects (its changes in this
    /// term's scope are in `changes` by then).
    pub(super) seen: Arc<AtomicI64>,
    /// Run-now requests and paused namespaces.
    pub(super) feeds: Feeds,
}

/// The state of one term.
pub(super) struct Term {
    pub(super) authority: Authority,
    pub(super) token: u64,
    /// The tasks this term schedules.
    pub(super) scope: Scope,
    pub(super) dispatcher: Dispatcher,
    pub(super) cancel: CancellationToken,
    pub(super) flush_tx: mpsc::Sender<FlushRequest>,
    /// Spec changes the watch delivered, for the check of direct etcd writes.
    direct_tx: mpsc::Sender<crate::audit::Observed>,
    changes: mpsc::Receiver<Change>,
    seen: Arc<AtomicI64>,
    /// The catalog revision of the slice the term was armed from.
    armed_at: i64,
    feeds: Feeds,
    /// Run-now requests already taken (by execution id), while they are pending.
    triggers_taken: HashSet<String>,
    /// Triggers to delete once their run-now execution is enqueued, by execution id.
    pub(super) pending_triggers: HashMap<String, PendingTrigger>,
    /// Consumed triggers whose keys go with the next flush.
    pub(super) consumed_triggers: Vec<PendingTrigger>,
    /// Run-now requests seen before their task's put reached the catalog.
    early_triggers: Vec<PendingTrigger>,
    /// Fires Redis refused as already enqueued, whose outcome is read from the execution
    /// history with the next events (off the fire path).
    pub(super) duplicates: Vec<(Arc<TaskKey>, UtcMillis)>,
    /// Worker events applied to the dispatcher and not yet acknowledged: they go with the
    /// flush that writes what they changed.
    unacked: BTreeSet<EventPosition>,
    /// Alerts of failed attempts whose ends were applied: they go with the flush that writes
    /// the states holding those ends, and are sent once it is written.
    end_alerts: Vec<Alert>,
    /// Broadcast fires that found no live worker, whose history entries the next fire
    /// round writes.
    pub(super) unserved_fires: Vec<ax_scheduler_core::Notice>,
    /// The etcd cluster id the fences are bound to.
    cluster: String,
    /// The Redis server process the fences were raised on (its run id).
    redis_run_id: Option<String>,
    redis_tick: Interval,
    queues: HashSet<Arc<str>>,
    unserved_tick: Interval,
    events_tick: Interval,
    pending_tick: Interval,
    flush_tick: Interval,
    /// Fires were taken from the dispatcher and not yet accepted by Redis: the dispatcher's
    /// states count them as fired, so they must not be written (the next leader would
    /// think they ran).
    pub(super) unsent: bool,
}

/// What is wrong with a queue's fence for this leader, if anything, in words an operator can
/// act on. Either way every enqueue of this leader to the queue would be refused, and taking
/// over again would change nothing: the fence has to be reseated by hand.
fn fence_problem(queue: &str, fence: &Fence) -> Option<String> {
    if fence.is_foreign() {
        Some(format!(
            "the fence of queue {queue} belongs to etcd cluster {}, this leader's cluster is {}: \
             two installations share the Redis key prefix, or etcd was rebuilt. Give each \
             installation its own redis.key_prefix; if this one is the only user of the prefix, \
             run `ax fence reseat` (docs/runbook.md)",
            fence.owner, fence.cluster
        ))
    } else if fence.is_ahead() {
        Some(format!(
            "the fence of queue {queue} is {}, above this leader's token {}: etcd was restored \
             or rebuilt and its revisions start lower. If no older installation still writes to \
             this Redis prefix, run `ax fence reseat` (docs/runbook.md)",
            fence.newest, fence.token
        ))
    } else {
        None
    }
}

/// Raises `queue`'s fence (that of `shard`, if the term has one) to `token` for `cluster`. A fence that refuses this leader (see
/// [`fence_problem`]) is an error, reported where people look (log and alert).
async fn raise_fence(
    deps: &TermDeps,
    queue: &str,
    shard: Option<u32>,
    token: u64,
    cluster: &str,
) -> Result<(), Error> {
    let fence = deps
        .queue
        .advance_fence(queue, shard, token, cluster)
        .await
        .map_err(|source| Error::Fence {
            queue: queue.to_owned(),
            source,
        })?;
    if let Some(problem) = fence_problem(queue, &fence) {
        error!(%problem, "cannot lead: enqueues would be refused");
        if let Some(alerts) = &deps.alerts {
            alerts.send(Alert::fence_conflict(&problem, deps.clock.now()));
        }
        return Err(Error::FenceRefused(problem));
    }
    Ok(())
}

/// How long a takeover waits for the first read of the paused namespaces.
const PAUSED_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the leader checks that Redis is the server it raised the fences on.
const REDIS_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// How often the leader looks for queues its tasks use that no worker serves.
const UNSERVED_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl Term {
    /// Takes over: loads the recorded states, raises every queue's fence, builds the
    /// dispatcher from the catalog slice and starts the term's helpers.
    pub(super) async fn start(
        settings: &LeaderSettings,
        deps: &TermDeps,
        input: TermInput,
        authority: Authority,
    ) -> Result<Term, Error> {
        let token = authority.token();
        let scope = authority.scope(settings.placement);
        let span = info_span!("takeover", fencing_token = token);
        let TermInput {
            slice,
            changes,
            seen,
            mut feeds,
        } = input;
        async {
            info!(tasks = slice.entries.len(), "taking over; loading task states");
            // The one leader lists every state (and finds the orphans among them); a shard's
            // owner reads its own tasks' states by key, since listing them all would cost
            // each shard's takeover the whole installation.
            let listing = match scope.shard() {
                None => deps.store.list_states(None).await,
                Some(_) => {
                    let keys: Vec<TaskKey> =
                        slice.entries.iter().map(|(k, _)| TaskKey::clone(k)).collect();
                    deps.store.get_states(&keys).await
                }
            }
            .map_err(|source| Error::Registry {
                what: "cannot load task states",
                source,
            })?;
            // One unreadable record must not stop the takeover (and so all firing): its task
            // is armed as if nothing was recorded, and the next state write replaces it.
            for bad in &listing.undecodable {
                warn!(
                    task_id = %format!("{}/{}", bad.namespace, bad.id),
                    error = %bad.error,
                    "task state record cannot be decoded; the task is armed afresh and the record rewritten"
                );
            }
            deps.metrics.set_undecodable_states(listing.undecodable.len());
            let mut states: HashMap<TaskKey, TaskState> = listing
                .states
                .into_iter()
                .map(|s| (TaskKey::new(s.namespace, s.id), s.state))
                .collect();
            // The server the fences go on: a restart of it (a new run id) takes them away.
            let redis_run_id = deps.queue.run_id().await.ok();
            // Raise every queue's fence before the first fire, so a deposed leader that still
            // reaches Redis is refused on all of them, not only where this leader pushed.
            let mut queues: HashSet<Arc<str>> = slice
                .entries
                .iter()
                .filter_map(|(_, e)| match e {
                    CatalogEntry::Valid { spec, .. } => Some(spec.queue.clone()),
                    CatalogEntry::Invalid { .. } => None,
                })
                .collect();
            queues.insert(ax_scheduler_core::task::DEFAULT_QUEUE.into());
            let cluster = deps
                .store
                .cluster()
                .await
                .map_err(|source| Error::Registry {
                    what: "cannot read etcd's cluster id",
                    source,
                })?
                .0
                .to_string();
            for q in &queues {
                raise_fence(deps, q, scope.shard(), token, &cluster).await?;
            }
            // Known before anything can fire: a paused namespace must not fire in the first
            // second of a term.
            let paused = tokio::time::timeout(
                PAUSED_READ_TIMEOUT,
                feeds.paused.wait_for(Option::is_some),
            )
            .await
            .ok()
            .and_then(|r| r.ok().map(|p| p.clone().unwrap_or_default()))
            .ok_or(Error::PausedUnknown)?;
            feeds.paused.borrow_and_update();
            let now = deps.clock.now();
            let mut dispatcher = Dispatcher::new(settings.dispatcher.clone(), now);
            for p in &paused {
                dispatcher.pause_namespace(p);
            }
            for (key, entry) in &slice.entries {
                // Arming a million tasks is seconds of work: yield now and then so the
                // runtime keeps serving the lease keep-alive meanwhile (it lost the lease
                // it had just won, and campaigned again, over and over).
                tokio::task::coop::consume_budget().await;
                match entry {
                    CatalogEntry::Valid { spec, revision } => dispatcher.upsert(
                        key.clone(),
                        Arc::clone(spec),
                        *revision,
                        states.remove(key),
                        now,
                    ),
                    CatalogEntry::Invalid { errors, revision } => {
                        let already = states.remove(key).is_some_and(|s| {
                            s.spec_revision == *revision
                                && s.status == ax_scheduler_core::TaskStatus::Invalid
                        });
                        if !already {
                            dispatcher.mark_invalid(key.clone(), *revision, errors.clone(), now);
                        }
                    }
                }
            }
            // What is left are states of tasks the catalog does not hold: deleted while no
            // replica led, so no leader saw the delete. Nothing else would ever remove them
            // (or their history). A state the catalog may not have caught up with (its spec
            // is newer than what this replica has seen) is left alone.
            let mut orphans = 0;
            for (key, state) in states {
                tokio::task::coop::consume_budget().await;
                if !slice.may_not_have_seen(state.spec_revision) {
                    dispatcher.remove(&key, now);
                    orphans += 1;
                }
            }
            if orphans > 0 {
                info!(orphans, "deleting the states of tasks deleted while no replica led");
            }
            if !authority.is_valid() {
                return Err(Error::AuthorityLost);
            }
            // Events a leader read and died before writing: claim them first (they are older
            // than any unread one), then read what still waits, then take the ends that no
            // event brings any more from the history.
            let mut unacked = BTreeSet::new();
            let replayed =
                events::replay(deps, scope.shard(), &mut dispatcher, &mut unacked, Duration::ZERO).await;
            if replayed > 0 {
                info!(replayed, "applied the execution events an earlier leader read and did not write");
            }
            events::consume(deps, scope.shard(), &mut dispatcher, &mut unacked).await;
            let in_flight = dispatcher.in_flight();
            let reconciled = events::reconcile(deps, &mut dispatcher, &in_flight).await;
            if reconciled > 0 {
                info!(reconciled, in_flight = in_flight.len(), "task states corrected from the execution history");
            }
            let term_cancel = authority.lost().child_token();
            let (flush_tx, flush_rx) = mpsc::channel(64);
            deps.tracker.spawn(
                flusher::run(
                    Arc::clone(&deps.store),
                    Arc::clone(&deps.queue),
                    authority.state_fence(),
                    scope.shard(),
                    flush_rx,
                    deps.alerts.clone(),
                    term_cancel.clone(),
                )
                .instrument(info_span!("state_flusher")),
            );
            let (direct_tx, direct_rx) = mpsc::channel(1024);
            deps.tracker.spawn(
                direct_writes::run(
                    Arc::clone(&deps.audit),
                    Arc::clone(&deps.clock),
                    direct_rx,
                    term_cancel.clone(),
                )
                    .instrument(info_span!("direct_writes")),
            );
            // A shard changing hands is routine (every join and leave moves some); only the
            // one leader's change is news.
            if let (Authority::Leader(_), Some(alerts)) = (&authority, &deps.alerts) {
                alerts.send(Alert::leader_changed(
                    None,
                    Some(&settings.instance_id),
                    now,
                ));
            }
            info!(
                armed = dispatcher.armed_len(),
                due_now = dispatcher.ready_len(),
                "scheduling"
            );
            Ok(Term {
                authority,
                token,
                scope,
                dispatcher,
                cancel: term_cancel,
                flush_tx,
                direct_tx,
                changes,
                seen,
                armed_at: slice.revision,
                feeds,
                triggers_taken: HashSet::new(),
                pending_triggers: HashMap::new(),
                consumed_triggers: Vec::new(),
                early_triggers: Vec::new(),
                duplicates: Vec::new(),
                unacked,
                end_alerts: Vec::new(),
                unserved_fires: Vec::new(),
                cluster,
                redis_run_id,
                redis_tick: ticker(REDIS_CHECK_INTERVAL),
                queues,
                unserved_tick: ticker(UNSERVED_CHECK_INTERVAL),
                events_tick: ticker(settings.events_interval),
                pending_tick: ticker(events::PENDING_CHECK_INTERVAL),
                flush_tick: ticker(settings.flush_interval),
                unsent: false,
            })
        }
        .instrument(span)
        .await
    }

    /// Runs the term until it ends: its key lost, or `stop` (shutdown, or a handover), after
    /// which it writes what it holds and gives the key up.
    pub(super) async fn run(
        mut self,
        settings: &LeaderSettings,
        deps: &TermDeps,
        stop: &CancellationToken,
    ) {
        loop {
            let wake = self
                .dispatcher
                .next_wakeup(deps.clock.now())
                .map(|at| clock::instant_at(&*deps.clock, at))
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                biased;
                // Stopping first: the changes end with the role too, and a term that stopped on
                // that instead would skip its last flush and giving its key up.
                _ = stop.cancelled() => {
                    self.end(settings, deps, true).await;
                    return;
                }
                _ = self.cancel.cancelled() => {
                    self.end(settings, deps, stop.is_cancelled()).await;
                    return;
                }
                _ = tokio::time::sleep_until(wake) => {
                    self.fire(settings, deps).await;
                }
                change = self.changes.recv() => {
                    let Some(change) = change else {
                        self.end(settings, deps, stop.is_cancelled()).await;
                        return;
                    };
                    self.on_registry_change(deps, change).await;
                    // A change takes effect now, not at the next tick.
                    self.fire(settings, deps).await;
                }
                Ok(()) = self.feeds.paused.changed() => {
                    let paused = self.feeds.paused.borrow_and_update().clone().unwrap_or_default();
                    let was: BTreeSet<String> =
                        self.dispatcher.paused_namespaces().map(str::to_owned).collect();
                    for ns in paused.difference(&was) {
                        info!(namespace = %ns, "namespace paused: its tasks do not fire");
                        self.dispatcher.pause_namespace(ns);
                    }
                    for ns in was.difference(&paused) {
                        info!(namespace = %ns, "namespace resumed: missed fires follow each task's misfire policy");
                        self.dispatcher.resume_namespace(ns, deps.clock.now());
                    }
                    self.fire(settings, deps).await;
                }
                Ok(()) = self.feeds.triggers.changed() => {
                    if self.take_triggers(deps).await {
                        self.fire(settings, deps).await;
                    }
                }
                _ = self.events_tick.tick() => {
                    // A leader resumed after its lease ran out must not take events its
                    // successor would then never see (it cannot write what they change).
                    if self.authority.is_valid() {
                        events::consume(deps, self.scope.shard(), &mut self.dispatcher, &mut self.unacked).await;
                    }
                    if !self.duplicates.is_empty() {
                        let duplicates = std::mem::take(&mut self.duplicates);
                        events::reconcile(deps, &mut self.dispatcher, &duplicates).await;
                    }
                    // Requests that came before their task's put: try again.
                    let waiting = std::mem::take(&mut self.early_triggers);
                    let mut queued = false;
                    for request in waiting {
                        queued |= self.take_trigger(deps, request).await;
                    }
                    if queued {
                        self.fire(settings, deps).await;
                    }
                }
                _ = self.pending_tick.tick() => {
                    if self.authority.is_valid() {
                        events::replay(deps, self.scope.shard(), &mut self.dispatcher, &mut self.unacked, events::STALE_PENDING).await;
                    }
                }
                _ = self.flush_tick.tick() => {
                    self.flush(settings, deps, false).await;
                }
                _ = self.redis_tick.tick() => {
                    self.check_redis(deps).await;
                }
                _ = self.unserved_tick.tick() => {
                    self.check_unserved(deps).await;
                }
            }
        }
    }

    /// Notices a Redis restart (a new run id): the fences are gone with a server that does
    /// not persist, so a deposed leader could enqueue again; raise them at once, and alert.
    async fn check_redis(&mut self, deps: &TermDeps) {
        let Ok(run_id) = deps.queue.run_id().await else {
            return;
        };
        let restarted = self
            .redis_run_id
            .as_ref()
            .is_some_and(|seen| *seen != run_id);
        self.redis_run_id = Some(run_id);
        if !restarted {
            return;
        }
        // Only now is it worth asking what the server keeps (for the alert).
        let persistent = deps
            .queue
            .server_info()
            .await
            .ok()
            .and_then(|i| i.persistent);
        warn!(
            ?persistent,
            "Redis restarted under this leader; raising the fences again"
        );
        for q in &self.queues {
            if let Err(e) =
                raise_fence(deps, q, self.scope.shard(), self.token, &self.cluster).await
            {
                warn!(error = %format!("{e:#}"), "cannot raise a queue's fence");
            }
        }
        if let Some(alerts) = &deps.alerts {
            alerts.send(Alert::redis_restarted(persistent, deps.clock.now()));
        }
    }

    /// Finds the queues its tasks use where executions wait and no worker serves them (a
    /// queue name no worker is configured for, every worker of it gone): sets the gauge and
    /// alerts for each (the alert manager de-duplicates repeats, also across shards).
    async fn check_unserved(&mut self, deps: &TermDeps) {
        let now = deps.clock.now();
        let mut unserved = 0;
        for q in &self.queues {
            let stats = match deps.queue.stats(q, now).await {
                Ok(s) => s,
                Err(e) => {
                    debug!(queue = %q, error = %e, "cannot read queue figures");
                    return;
                }
            };
            if stats.is_unserved() {
                unserved += 1;
                warn!(queue = %q, depth = stats.ready, "executions wait in a queue no worker serves");
                if let Some(alerts) = &deps.alerts {
                    alerts.send(Alert::queue_unserved(
                        &**q,
                        stats.ready,
                        stats.last_worker_beat,
                        now,
                    ));
                }
            }
        }
        // A shard's term sees only its tasks' queues: the replica's gauge is the one
        // leader's alone, and with shards the alert (de-duplicated across terms) tells.
        if self.scope.shard().is_none() {
            deps.metrics.set_unserved_queues(unserved);
        }
    }

    /// Takes the new run-now requests in this term's scope from the published list; true
    /// when one was queued.
    async fn take_triggers(&mut self, deps: &TermDeps) -> bool {
        let pending = Arc::clone(&self.feeds.triggers.borrow_and_update());
        let present: HashSet<&str> = pending.iter().map(|t| t.execution_id.as_str()).collect();
        self.triggers_taken
            .retain(|id| present.contains(id.as_str()));
        let mut queued = false;
        for request in pending.iter() {
            let key = TaskKey::new(request.namespace.clone(), request.id.clone());
            if !self.scope.contains(&key)
                || !self.triggers_taken.insert(request.execution_id.clone())
            {
                continue;
            }
            queued |= self.take_trigger(deps, request.clone()).await;
        }
        queued
    }

    /// Queues a run-now request; true when it was queued. A request for a task the catalog
    /// has not seen yet (the watch lags the trigger poll) waits for it; one for a task that
    /// is gone is dropped.
    async fn take_trigger(&mut self, deps: &TermDeps, request: PendingTrigger) -> bool {
        let key = TaskKey::new(request.namespace.clone(), request.id.clone());
        // What the role's catalog has seen, read before taking the changes waiting for this
        // term: every change up to it is then applied (the role hands a change on before it
        // publishes its revision), so an unknown task past it is really gone.
        let seen = self.seen.load(Ordering::Acquire).max(self.armed_at);
        while let Ok(change) = self.changes.try_recv() {
            self.on_registry_change(deps, change).await;
        }
        if self
            .dispatcher
            .trigger(&key, request.execution_id.clone(), deps.clock.now())
        {
            self.pending_triggers
                .insert(request.execution_id.clone(), request);
            return true;
        }
        if seen < request.mod_revision {
            debug!(task_id = %key, execution_id = %request.execution_id, "run-now before its task reached this leader; waiting for it");
            self.early_triggers.push(request);
        } else {
            warn!(task_id = %key, execution_id = %request.execution_id, "run-now for a task that no longer exists; dropped");
            self.consumed_triggers.push(request);
        }
        false
    }

    async fn on_registry_change(&mut self, deps: &TermDeps, change: Change) {
        let Change { key, entry } = change;
        // Full only under a burst the checker cannot keep up with: those changes go
        // unchecked rather than stall the term.
        let _ = self.direct_tx.try_send(crate::audit::Observed {
            target: format!("{}/{}", key.namespace, key.id),
            deleted: entry.is_none(),
            seen_at: deps.clock.now(),
        });
        let now = deps.clock.now();
        match entry {
            Some(CatalogEntry::Valid { spec, revision }) => {
                if self.queues.insert(spec.queue.clone()) {
                    if let Err(e) = raise_fence(
                        deps,
                        &spec.queue,
                        self.scope.shard(),
                        self.token,
                        &self.cluster,
                    )
                    .await
                    {
                        warn!(error = %format!("{e:#}"), "cannot raise a queue's fence");
                    }
                }
                self.dispatcher.upsert(key, spec, revision, None, now);
            }
            Some(CatalogEntry::Invalid { errors, revision }) => {
                self.dispatcher.mark_invalid(key, revision, errors, now);
            }
            None => self.dispatcher.remove(&key, now),
        }
    }

    /// The term is over: when stopped (shutdown, handover), write the last states and give
    /// the key up at once (instead of after the lease's TTL); otherwise report the loss.
    async fn end(mut self, settings: &LeaderSettings, deps: &TermDeps, shutting_down: bool) {
        if self.scope.shard().is_none() {
            deps.metrics.set_unserved_queues(0);
        }
        if self.unsent {
            warn!("fires taken for enqueue were not accepted: leaving the task states as last written, so the next leader replays them");
        } else if shutting_down {
            self.flush(settings, deps, true).await;
        }
        if shutting_down {
            let is_leader = matches!(self.authority, Authority::Leader(_));
            if let Err(e) = self.authority.give_up().await {
                warn!(error = %e, "giving the key up failed; its lease will expire instead");
            }
            info!(leader = is_leader, "gave the key up");
            return;
        }
        warn!(reason = ?self.authority.loss_reason(), "key lost; stopped firing");
        if let (Authority::Leader(_), Some(alerts)) = (&self.authority, &deps.alerts) {
            alerts.send(Alert::leader_changed(
                Some(&settings.instance_id),
                None,
                deps.clock.now(),
            ));
        }
    }

    /// Takes the dispatcher's notices: logs them, sends the alerts they raise, and keeps
    /// those of failed attempts for the next flush (see [`fire::NoticeAlerts`]).
    pub(super) fn take_notices(
        &mut self,
        settings: &LeaderSettings,
        deps: &TermDeps,
        now: UtcMillis,
    ) {
        let notices = self.dispatcher.take_notices();
        if notices.is_empty() {
            return;
        }
        for notice in &notices {
            match notice {
                ax_scheduler_core::Notice::DeadlineMissed { miss, .. } => deps
                    .metrics
                    .deadline_misses(miss.reason.as_str(), miss.missed),
                // A run-now broadcast that found no worker ended: its trigger is done with,
                // and its history entry is written by the fire path (it needs Redis).
                ax_scheduler_core::Notice::NoLiveWorker { fanout, .. } => {
                    self.consumed_triggers
                        .extend(self.pending_triggers.remove(fanout.as_str()));
                    self.unserved_fires.push(notice.clone());
                }
                _ => {}
            }
        }
        let alerts = fire::notice_alerts(notices, settings.dispatcher.breaker.window, now);
        fire::send_alerts(deps, alerts.now);
        if deps.alerts.is_some() {
            self.end_alerts.extend(alerts.after_write);
        }
    }

    /// Hands the changed states, consumed triggers, applied events and the alerts of the
    /// failed attempts among them to the flusher; with `wait` (the last flush of a term),
    /// every state, those whose write waits included, and until they are written (at most a
    /// few seconds). Never waits for room: when the flusher is behind (etcd slow), the
    /// changes stay in the dispatcher, coalesced, for a later flush, and the alerts here.
    async fn flush(&mut self, settings: &LeaderSettings, deps: &TermDeps, wait: bool) {
        let due = if wait {
            UtcMillis::MAX
        } else {
            deps.clock.now()
        };
        // Every end applied so far has its alert in this flush, with its state.
        self.take_notices(settings, deps, deps.clock.now());
        // Reserved before anything is taken: a full channel leaves the changes where they
        // are, and a closed one means the term is over.
        let Ok(permit) = self.flush_tx.try_reserve() else {
            debug!("state flusher behind (etcd slow?); changes kept for a later flush");
            return;
        };
        let writes = self.dispatcher.take_state_writes(due);
        if writes.is_empty()
            && self.consumed_triggers.is_empty()
            && self.unacked.is_empty()
            && self.end_alerts.is_empty()
        {
            // Nothing to hand over: the permit goes back unused.
            return;
        }
        let (done_tx, done_rx) = oneshot::channel();
        permit.send(FlushRequest {
            writes,
            triggers: std::mem::take(&mut self.consumed_triggers),
            acks: std::mem::take(&mut self.unacked).into_iter().collect(),
            alerts: std::mem::take(&mut self.end_alerts),
            done: wait.then_some(done_tx),
        });
        if wait {
            let _ = tokio::time::timeout(Duration::from_secs(5), done_rx).await;
        }
    }
}
