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
use ax_scheduler_core::{Dispatcher, ExecutionId, TaskKey, UtcMillis};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Interval};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn, Instrument};

use super::authority::{Authority, Scope};
use super::catalog::{CatalogEntry, CatalogSlice, Change};
use super::feeds::Feeds;
use super::flusher::FlushRequest;
use super::{clock, events, LeaderSettings};
use crate::deps::TermDeps;
use crate::metrics::Backend;
use crate::supervise;
use ax_registry::PendingTrigger;

mod clock_watch;
#[cfg(test)]
pub(crate) mod fakes;
mod fire;
mod repair;
mod takeover;

use fire::send_alerts;
use takeover::raise_fence;
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
    /// Cancelled when the term must give its key up though it still holds it: its state
    /// flusher panicked (see [`crate::supervise`]).
    step_down: CancellationToken,
    /// Cancelled when the clock the term fires by is off etcd's by more than
    /// `max_clock_skew` ([`clock_watch`]): the term gives its key up ([`End::ClockSkew`]).
    clock_off: CancellationToken,
    /// Jumps of the clock between fire rounds ([`clock_watch::Jumps`]).
    clock_jumps: clock_watch::Jumps,
    pub(super) flush_tx: mpsc::Sender<FlushRequest>,
    /// Spec changes the watch delivered, for the check of direct etcd writes.
    direct_tx: mpsc::Sender<crate::audit::Observed>,
    changes: mpsc::Receiver<Change>,
    seen: Arc<AtomicI64>,
    /// The catalog revision of the slice the term was armed from.
    armed_at: i64,
    feeds: Feeds,
    /// Run-now requests already taken (by execution id), while they are pending.
    triggers_taken: HashSet<ExecutionId>,
    /// Triggers to delete once their run-now execution is enqueued, by execution id.
    pub(super) pending_triggers: HashMap<ExecutionId, PendingTrigger>,
    /// Consumed triggers whose keys go with the next flush.
    pub(super) consumed_triggers: Vec<PendingTrigger>,
    /// Run-now requests seen before their task's put reached the catalog.
    early_triggers: Vec<PendingTrigger>,
    /// Fires Redis refused as already enqueued, whose outcome is read from the execution
    /// history with the next events (off the fire path).
    pub(super) duplicates: Vec<(Arc<TaskKey>, UtcMillis)>,
    /// Worker events applied to the dispatcher and not yet acknowledged: they go with the
    /// flush that writes what they changed.
    unacked: events::Unacked,
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
    /// Since when Redis has not answered the leader's checks, if it has not.
    redis_silent_since: Option<Instant>,
    /// Cancelled when Redis has given no answer for `redis_unreachable_limit`
    /// ([`Term::redis_silent`]): the term gives its key up ([`End::RedisUnreachable`]).
    redis_gone: CancellationToken,
    redis_tick: Interval,
    queues: HashSet<Arc<str>>,
    unserved_tick: Interval,
    events_tick: Interval,
    pending_tick: Interval,
    flush_tick: Interval,
    /// Tasks with an open breaker as last reported to the metrics.
    throttled_reported: usize,
    /// The check of task states in doubt (`repair`), every half of `repair_after`.
    repair_tick: Interval,
    /// Tasks in doubt found with no work left at the last check.
    no_work: repair::NoWork,
    /// Fires were taken from the dispatcher and not yet accepted by Redis: the dispatcher's
    /// states count them as fired, so they must not be written (the next leader would
    /// think they ran).
    pub(super) unsent: bool,
}

/// How often the leader checks that Redis is the server it raised the fences on, and that
/// it answers at all.
const REDIS_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// The longest one check of Redis waits for its answer (a partition drops packets: no error
/// comes, only silence); also the campaign's check.
pub(crate) const REDIS_PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The `reason` of `scheduler_leader_step_downs_total` for a leader cut from Redis.
pub(crate) const STEP_DOWN_REDIS: &str = "redis_unreachable";

/// How often the leader looks for queues its tasks use that no worker serves.
const UNSERVED_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl Term {
    /// Runs the term until it ends: its key lost, or `stop` (shutdown, or a handover), after
    /// which it writes what it holds and gives the key up.
    pub(super) async fn run(
        mut self,
        settings: &LeaderSettings,
        deps: &TermDeps,
        stop: &CancellationToken,
    ) -> End {
        loop {
            let wake = self.next_wake(deps);
            // While a fire is due the events are not read: a read over a slow link takes
            // longer than the events' period, so their tick would be ready at every turn and,
            // placed before it, win over the fire timer (a new timer whose instant has passed
            // may wait for the timer driver's next turn) until Redis got fast again.
            let fire_due = wake <= Instant::now();
            tokio::select! {
                biased;
                // Stopping first: the changes end with the role too, and a term that stopped on
                // that instead would skip its last flush and giving its key up.
                _ = stop.cancelled() => {
                    return self.end(settings, deps, End::Stop).await;
                }
                _ = self.cancel.cancelled() => {
                    return self.end(settings, deps, End::lost_or_stopped(stop)).await;
                }
                _ = self.step_down.cancelled() => {
                    return self.end(settings, deps, End::StepDown).await;
                }
                _ = self.redis_gone.cancelled() => {
                    return self.end(settings, deps, End::RedisUnreachable).await;
                }
                _ = self.clock_off.cancelled() => {
                    return self.end(settings, deps, End::ClockSkew).await;
                }
                _ = tokio::time::sleep_until(wake) => {
                    self.fire(settings, deps).await;
                }
                change = self.changes.recv() => {
                    let Some(change) = change else {
                        return self.end(settings, deps, End::lost_or_stopped(stop)).await;
                    };
                    self.on_registry_change(deps, change).await;
                    // A change takes effect now, not at the next tick.
                    self.fire(settings, deps).await;
                }
                Ok(()) = self.feeds.paused.changed() => {
                    self.on_paused_changed(deps);
                    self.fire(settings, deps).await;
                }
                Ok(()) = self.feeds.triggers.changed() => {
                    if self.take_triggers(deps).await {
                        self.fire(settings, deps).await;
                    }
                }
                _ = self.events_tick.tick(), if !fire_due => {
                    self.on_events_tick(settings, deps).await;
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
                    self.check_redis(settings, deps).await;
                }
                _ = self.unserved_tick.tick() => {
                    self.check_unserved(deps).await;
                }
                _ = self.repair_tick.tick() => {
                    if self.authority.is_valid() {
                        self.repair_states(deps, settings.repair_after).await;
                    }
                }
            }
        }
    }

    /// When the dispatcher next has something due, on the runtime's clock; an hour ahead
    /// when nothing is armed.
    fn next_wake(&mut self, deps: &TermDeps) -> Instant {
        self.dispatcher
            .next_wakeup(deps.clock.now())
            .map(|at| clock::instant_at(&*deps.clock, at))
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
    }

    /// Pauses the namespaces newly paused and resumes those no longer paused.
    fn on_paused_changed(&mut self, deps: &TermDeps) {
        let paused = self
            .feeds
            .paused
            .borrow_and_update()
            .clone()
            .unwrap_or_default();
        let was: BTreeSet<String> = self
            .dispatcher
            .paused_namespaces()
            .map(str::to_owned)
            .collect();
        for ns in paused.difference(&was) {
            info!(namespace = %ns, "namespace paused: its tasks do not fire");
            self.dispatcher.pause_namespace(ns);
        }
        for ns in was.difference(&paused) {
            info!(namespace = %ns, "namespace resumed: missed fires follow each task's misfire policy");
            self.dispatcher.resume_namespace(ns, deps.clock.now());
        }
    }

    /// Reads worker events and the outcomes of duplicate fires, and retries the run-now
    /// requests that came before their task.
    async fn on_events_tick(&mut self, settings: &LeaderSettings, deps: &TermDeps) {
        // A leader resumed after its lease ran out must not take events its
        // successor would then never see (it cannot write what they change).
        if self.authority.is_valid() {
            events::consume(
                deps,
                self.scope.shard(),
                &mut self.dispatcher,
                &mut self.unacked,
            )
            .await;
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

    /// Redis answered: the count of its silence starts again.
    pub(super) fn redis_answered(&mut self) {
        if let Some(since) = self.redis_silent_since.take() {
            info!(
                silent_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
                "Redis answers the leader again"
            );
        }
    }

    /// Redis gave no answer to a call made at `asked_at` (the fire path's or the check's):
    /// past `redis_unreachable_limit` of silence, counted from the first unanswered call,
    /// the term gives its key up at the loop's next turn ([`End::RedisUnreachable`]), since
    /// a leader that cannot enqueue holds up every fire while replicas that can reach Redis
    /// stand by. Whether it did.
    pub(super) fn redis_silent(
        &mut self,
        settings: &LeaderSettings,
        deps: &TermDeps,
        asked_at: Instant,
        error: &str,
    ) -> bool {
        let since = *self.redis_silent_since.get_or_insert(asked_at);
        let silent = since.elapsed();
        let silent_ms = u64::try_from(silent.as_millis()).unwrap_or(u64::MAX);
        if silent < settings.redis_unreachable_limit {
            warn!(%error, silent_ms, "Redis does not answer the leader");
            return false;
        }
        error!(
            %error,
            silent_ms,
            limit_ms = u64::try_from(settings.redis_unreachable_limit.as_millis()).unwrap_or(u64::MAX),
            "Redis has not answered for scheduler.redis_unreachable_limit: giving the key up so that a replica that can reach it leads"
        );
        deps.metrics.stepped_down(STEP_DOWN_REDIS);
        send_alerts(
            deps,
            vec![Alert::backend_unavailable(
                Backend::Redis.label(),
                &format!("{error}; this leader gave its key up after {silent:?}"),
                0,
                silent,
                deps.clock.now(),
            )],
        );
        self.redis_gone.cancel();
        true
    }

    /// Notices a Redis restart (a new run id): the fences are gone with a server that does
    /// not persist, so a deposed leader could enqueue again; raise them at once, and alert.
    /// First, one round trip to the node holding a queue's keys (any node without one) says
    /// whether Redis answers at all ([`Term::redis_silent`]).
    async fn check_redis(&mut self, settings: &LeaderSettings, deps: &TermDeps) {
        let probe = settings
            .redis_unreachable_limit
            .min(REDIS_PROBE_TIMEOUT)
            .max(Duration::from_millis(100));
        let queue = self.queues.iter().next().map(|q| q.to_string());
        let asked_at = Instant::now();
        match tokio::time::timeout(probe, deps.queue.ping(queue.as_deref())).await {
            Ok(Ok(())) => self.redis_answered(),
            answer => {
                let error = match answer {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {probe:?}"),
                };
                deps.metrics.backend_error(Backend::Redis);
                self.redis_silent(settings, deps, asked_at, &error);
                return;
            }
        }
        // The server (every primary of a cluster) it raised the fences on: a run id that
        // cannot be read now (a cluster node down) is read again at the next check.
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
        let present: HashSet<ExecutionId> = pending.iter().map(|t| t.execution_id).collect();
        self.triggers_taken.retain(|id| present.contains(id));
        let mut queued = false;
        for request in pending.iter() {
            let key = TaskKey::new(request.namespace.clone(), request.id.clone());
            if !self.scope.contains(&key) || !self.triggers_taken.insert(request.execution_id) {
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
            .trigger(&key, request.execution_id, deps.clock.now())
        {
            self.pending_triggers.insert(request.execution_id, request);
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
    /// the key up at once (instead of after the lease's TTL); when stepping down, give it up
    /// without writing (the flusher is gone: the next term starts from what was written);
    /// otherwise report the loss.
    async fn end(mut self, settings: &LeaderSettings, deps: &TermDeps, how: End) -> End {
        if self.scope.shard().is_none() {
            deps.metrics.set_unserved_queues(0);
        }
        deps.metrics
            .throttled_tasks_changed(gauge_delta(0, self.throttled_reported));
        if self.unsent {
            warn!("fires taken for enqueue were not accepted: leaving the task states as last written, so the next leader replays them");
        } else if matches!(how, End::Stop | End::RedisUnreachable | End::ClockSkew) {
            self.flush(settings, deps, true).await;
        }
        let is_leader = matches!(self.authority, Authority::Leader(_));
        if how == End::StepDown {
            error!(
                leader = is_leader,
                "the state flusher panicked: giving the key up without a last write, so that the next term takes over from the states written"
            );
        }
        if how != End::Lost {
            if let Err(e) = self.authority.give_up().await {
                warn!(error = %e, "giving the key up failed; its lease will expire instead");
            }
            info!(leader = is_leader, "gave the key up");
            if how == End::Stop {
                return how;
            }
        } else {
            warn!(reason = ?self.authority.loss_reason(), "key lost; stopped firing");
        }
        if let (true, Some(alerts)) = (is_leader, &deps.alerts) {
            alerts.send(Alert::leader_changed(
                Some(&settings.instance_id),
                None,
                deps.clock.now(),
            ));
        }
        how
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
                        .extend(self.pending_triggers.remove(fanout));
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
        // Held events near the stream's cap: the writes they wait for are made now.
        let due = if wait || self.unacked.too_many_held() {
            UtcMillis::MAX
        } else {
            deps.clock.now()
        };
        // Every end applied so far has its alert in this flush, with its state.
        self.take_notices(settings, deps, deps.clock.now());
        let throttled = self.dispatcher.throttled_len();
        if throttled != self.throttled_reported {
            deps.metrics
                .throttled_tasks_changed(gauge_delta(throttled, self.throttled_reported));
            self.throttled_reported = throttled;
        }
        // Reserved before anything is taken: a full channel leaves the changes where they
        // are, and a closed one means the term is over.
        let Ok(permit) = self.flush_tx.try_reserve() else {
            debug!("state flusher behind (etcd slow?); changes kept for a later flush");
            return;
        };
        let writes = self.dispatcher.take_writes(due);
        self.unacked.release(&self.dispatcher);
        if writes.is_empty()
            && self.consumed_triggers.is_empty()
            && self.unacked.nothing_ready()
            && self.end_alerts.is_empty()
        {
            // Nothing to hand over: the permit goes back unused.
            return;
        }
        let (done_tx, done_rx) = oneshot::channel();
        permit.send(FlushRequest {
            writes: writes.states,
            finals: writes.finals,
            triggers: std::mem::take(&mut self.consumed_triggers),
            acks: self.unacked.take_ready(),
            alerts: std::mem::take(&mut self.end_alerts),
            done: wait.then_some(done_tx),
        });
        if wait {
            let _ = tokio::time::timeout(Duration::from_secs(5), done_rx).await;
        }
    }
}

/// `to - from` as a gauge change (task counts are far below `i64::MAX`).
fn gauge_delta(to: usize, from: usize) -> i64 {
    let signed = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    signed(to) - signed(from)
}

/// How a term ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// Stopped (shutdown, handover): write what it holds, give the key up.
    Stop,
    /// The key is lost: nothing more to write or give up.
    Lost,
    /// Its state flusher panicked: give the key up without writing.
    StepDown,
    /// Redis has not answered for `redis_unreachable_limit`: write the last states (etcd
    /// answers) unless fires are unsent, and give the key up for a replica that can reach
    /// Redis.
    RedisUnreachable,
    /// Its clock is off etcd's by more than `max_clock_skew`: write the last states and give
    /// the key up for a replica with a right clock.
    ClockSkew,
}

impl End {
    /// The key's loss, or a stop when `stop` was cancelled meanwhile.
    fn lost_or_stopped(stop: &CancellationToken) -> End {
        if stop.is_cancelled() {
            End::Stop
        } else {
            End::Lost
        }
    }
}

/// How a term's task ended, for the role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TermEnd {
    /// It ran and ended (its key lost or given up).
    Ended,
    /// It ran and gave its key up because Redis did not answer: a shard owner leaves the
    /// ownership until Redis answers again, so its shards go to replicas that reach it.
    RedisUnreachable,
    /// Its takeover failed (a backend refused).
    NotStarted,
    /// It panicked (in its takeover or its loop): the unwind dropped its key, which gives
    /// the key up (a leader's lease is revoked, a shard's key deleted).
    Panicked,
}

/// Runs a term in a task of its own: takes over with `authority`, calls `started` once the
/// term fires, and runs it until it ends. A panic in its takeover or its loop
/// ([`supervise::TERM`]) is logged and counted, and the term is over: the role takes the
/// authority again after a pause, from what etcd and Redis hold, as after any failover.
pub(super) async fn serve(
    settings: LeaderSettings,
    deps: TermDeps,
    input: TermInput,
    authority: Authority,
    stop: CancellationToken,
    started: impl FnOnce() + Send + 'static,
) -> TermEnd {
    let (metrics, tracker) = (Arc::clone(&deps.metrics), deps.tracker.clone());
    let term = async move {
        match Term::start(&settings, &deps, input, authority).await {
            Ok(term) => {
                started();
                match term.run(&settings, &deps, &stop).await {
                    End::RedisUnreachable => TermEnd::RedisUnreachable,
                    _ => TermEnd::Ended,
                }
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "could not take over");
                TermEnd::NotStarted
            }
        }
    }
    .instrument(tracing::Span::current());
    supervise::watch(supervise::TERM, &*metrics, &tracker, term)
        .await
        .unwrap_or(TermEnd::Panicked)
}
