//! A term's takeover: from an authority and a catalog slice to a term that fires.
//!
//! The steps run in a fixed order, each a function of its own, because the order is the
//! guarantee: every queue's fence is raised before anything can fire (a deposed leader
//! that still reaches Redis is refused everywhere, not only where this one pushed), the
//! paused namespaces are known before anything can fire, the recorded states are armed
//! before the events a dead leader read are replayed over them, and the authority is
//! checked once more before the term's helpers start. Any step that fails fails the
//! takeover; the role tries again after a pause.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ax_alerting::Alert;
use ax_queue::Fence;
use ax_scheduler_core::{Dispatcher, TaskKey, TaskState, TaskStatus};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, info_span, warn, Instrument};

use super::{Term, TermInput, REDIS_CHECK_INTERVAL, UNSERVED_CHECK_INTERVAL};
use crate::authority::{Authority, Scope};
use crate::catalog::{CatalogEntry, CatalogSlice};
use crate::clock::ticker;
use crate::deps::TermDeps;
use crate::feeds::Feeds;
use crate::flusher::{self, FlushRequest};
use crate::{direct_writes, events, supervise, Error, LeaderSettings};

/// How long a takeover waits for the first read of the paused namespaces.
const PAUSED_READ_TIMEOUT: Duration = Duration::from_secs(10);

impl Term {
    /// Takes over: loads the recorded states, raises every queue's fence, builds the
    /// dispatcher from the catalog slice and starts the term's helpers.
    #[tracing::instrument(name = "takeover", skip_all, fields(fencing_token = authority.token()))]
    pub(crate) async fn start(
        settings: &LeaderSettings,
        deps: &TermDeps,
        input: TermInput,
        authority: Authority,
    ) -> Result<Term, Error> {
        let token = authority.token();
        let scope = authority.scope(settings.placement);
        let TermInput {
            slice,
            changes,
            seen,
            mut feeds,
        } = input;
        info!(
            tasks = slice.entries.len(),
            "taking over; loading task states"
        );
        let states = load_states(deps, scope, &slice).await?;
        // The server the fences go on: a restart of it (a new run id) takes them away.
        let redis_run_id = deps.queue.run_id().await.ok();
        let (queues, cluster) = raise_fences(deps, scope, token, &slice).await?;
        let paused = read_paused(&mut feeds).await?;
        let mut dispatcher = arm(settings, deps, &slice, states, &paused).await;
        if !authority.is_valid() {
            return Err(Error::AuthorityLost);
        }
        let unacked = catch_up_events(deps, scope, &mut dispatcher).await;
        let helpers = Helpers::start(settings, deps, &authority, scope);
        // A shard changing hands is routine (every join and leave moves some); only the
        // one leader's change is news.
        if let (Authority::Leader(_), Some(alerts)) = (&authority, &deps.alerts) {
            alerts.send(Alert::leader_changed(
                None,
                Some(&settings.instance_id),
                deps.clock.now(),
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
            cancel: helpers.cancel,
            step_down: helpers.step_down,
            clock_off: helpers.clock_off,
            clock_jumps: super::clock_watch::Jumps::new(settings.max_clock_skew),
            flush_tx: helpers.flush_tx,
            direct_tx: helpers.direct_tx,
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
            throttled_reported: 0,
            unserved_fires: Vec::new(),
            cluster,
            redis_run_id,
            redis_silent_since: None,
            redis_gone: CancellationToken::new(),
            redis_tick: ticker(REDIS_CHECK_INTERVAL),
            queues,
            unserved_tick: ticker(UNSERVED_CHECK_INTERVAL),
            events_tick: ticker(settings.events_interval),
            pending_tick: ticker(events::PENDING_CHECK_INTERVAL),
            flush_tick: ticker(settings.flush_interval),
            repair_tick: ticker(settings.repair_after / 2),
            no_work: super::repair::NoWork::new(),
            unsent: false,
        })
    }
}

/// The recorded states of the scope's tasks. The one leader lists every state (and finds
/// the orphans among them); a shard's owner reads its own tasks' states by key, since
/// listing them all would cost each shard's takeover the whole installation.
async fn load_states(
    deps: &TermDeps,
    scope: Scope,
    slice: &CatalogSlice,
) -> Result<HashMap<TaskKey, TaskState>, Error> {
    let listing = match scope.shard() {
        None => deps.store.list_states(None).await,
        Some(_) => {
            let keys: Vec<TaskKey> = slice
                .entries
                .iter()
                .map(|(k, _)| TaskKey::clone(k))
                .collect();
            deps.store.get_states(&keys).await
        }
    }
    .map_err(|source| Error::Registry {
        what: "cannot load task states",
        source,
    })?;
    // One unreadable record must not stop the takeover (and so all firing): its task is
    // armed as if nothing was recorded, and the record deleted. It is not left for the next
    // state write to replace: a one-shot's final goes to the finals ledger, and an `at`
    // one-shot's first state is not written at all, so the record would stay unreadable.
    for bad in &listing.undecodable {
        warn!(
            task_id = %format!("{}/{}", bad.namespace, bad.id),
            error = %bad.error,
            "task state record cannot be decoded; the task is armed afresh and the record deleted"
        );
        if let Err(e) = deps.store.delete_state(&bad.namespace, &bad.id).await {
            warn!(error = %e, "cannot delete the undecodable state record; the next takeover tries again");
        }
    }
    deps.metrics
        .set_undecodable_states(listing.undecodable.len());
    Ok(listing
        .states
        .into_iter()
        .map(|s| (TaskKey::new(s.namespace, s.id), s.state))
        .collect())
}

/// Raises the fence of every queue the scope's tasks use (and the default queue) to
/// `token`, before the first fire; returns those queues and etcd's cluster id the fences
/// are bound to.
async fn raise_fences(
    deps: &TermDeps,
    scope: Scope,
    token: u64,
    slice: &CatalogSlice,
) -> Result<(HashSet<Arc<str>>, String), Error> {
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
    Ok((queues, cluster))
}

/// Raises `queue`'s fence (that of `shard`, if the term has one) to `token` for `cluster`.
/// A fence that refuses this leader (see [`fence_problem`]) is an error, reported where
/// people look (log and alert).
pub(super) async fn raise_fence(
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

/// The paused namespaces, known before anything can fire: a paused namespace must not fire
/// in the first second of a term.
async fn read_paused(feeds: &mut Feeds) -> Result<BTreeSet<String>, Error> {
    let paused = tokio::time::timeout(PAUSED_READ_TIMEOUT, feeds.paused.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(|r| r.ok().map(|p| p.clone().unwrap_or_default()))
        .ok_or(Error::PausedUnknown)?;
    feeds.paused.borrow_and_update();
    Ok(paused)
}

/// A fresh dispatcher armed with the slice's tasks and their recorded `states`; the states
/// of tasks the catalog does not hold are removed.
async fn arm(
    settings: &LeaderSettings,
    deps: &TermDeps,
    slice: &CatalogSlice,
    mut states: HashMap<TaskKey, TaskState>,
    paused: &BTreeSet<String>,
) -> Dispatcher {
    let now = deps.clock.now();
    let mut dispatcher = Dispatcher::new(settings.dispatcher.clone(), now);
    for p in paused {
        dispatcher.pause_namespace(p);
    }
    for (key, entry) in &slice.entries {
        // Arming a million tasks is seconds of work: yield now and then so the runtime keeps
        // serving the lease keep-alive meanwhile (it lost the lease it had just won, and
        // campaigned again, over and over).
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
                    s.spec_revision == *revision && s.status == TaskStatus::Invalid
                });
                if already {
                    dispatcher.keep_invalid(key.clone());
                } else {
                    dispatcher.mark_invalid(key.clone(), *revision, errors.clone(), now);
                }
            }
        }
    }
    // What is left are states of tasks the catalog does not hold: deleted while no replica
    // led, so no leader saw the delete. Nothing else would ever remove them (or their
    // history). A state the catalog may not have caught up with (its spec is newer than what
    // this replica has seen) is left alone.
    let mut orphans = 0;
    for (key, state) in states {
        tokio::task::coop::consume_budget().await;
        if !slice.may_not_have_seen(state.spec_revision) {
            dispatcher.remove(&key, now);
            orphans += 1;
        }
    }
    if orphans > 0 {
        info!(
            orphans,
            "deleting the states of tasks deleted while no replica led"
        );
    }
    dispatcher
}

/// Applies what happened while no term of this scope ran: events a leader read and died
/// before writing are claimed first (they are older than any unread one), then what still
/// waits is read, then the ends that no event brings any more are taken from the history.
/// Returns the events applied and not yet acknowledged.
async fn catch_up_events(
    deps: &TermDeps,
    scope: Scope,
    dispatcher: &mut Dispatcher,
) -> events::Unacked {
    let mut unacked = events::Unacked::default();
    let replayed = events::replay(
        deps,
        scope.shard(),
        dispatcher,
        &mut unacked,
        Duration::ZERO,
    )
    .await;
    if replayed > 0 {
        info!(
            replayed,
            "applied the execution events an earlier leader read and did not write"
        );
    }
    events::consume(deps, scope.shard(), dispatcher, &mut unacked).await;
    let in_flight = dispatcher.in_flight();
    let reconciled = events::reconcile(deps, dispatcher, &in_flight).await;
    if reconciled > 0 {
        info!(
            reconciled,
            in_flight = in_flight.len(),
            "task states corrected from the execution history"
        );
    }
    unacked
}

/// The term's helper tasks, on a child of the key's `lost()` token: the state flusher, the
/// check of direct etcd writes and the watch on the clock. Each is supervised
/// ([`crate::supervise`]): the check and the watch start again after a panic; the flusher
/// cannot (its batch went with it), so its panic cancels `step_down` and the term gives its
/// key up. The watch cancels `clock_off` when the clock drifted.
struct Helpers {
    cancel: CancellationToken,
    step_down: CancellationToken,
    clock_off: CancellationToken,
    flush_tx: mpsc::Sender<FlushRequest>,
    direct_tx: mpsc::Sender<crate::audit::Observed>,
}

impl Helpers {
    fn start(
        settings: &LeaderSettings,
        deps: &TermDeps,
        authority: &Authority,
        scope: Scope,
    ) -> Helpers {
        let cancel = authority.lost().child_token();
        let step_down = CancellationToken::new();
        let flush_tx = spawn_flusher(deps, authority, scope, &cancel, &step_down);
        let direct_tx = spawn_direct_writes(deps, &cancel);
        let clock_off = CancellationToken::new();
        if let Some(probe) = &deps.clock_check {
            spawn_clock_watch(settings, deps, probe, &clock_off, &cancel);
        }
        Helpers {
            cancel,
            step_down,
            clock_off,
            flush_tx,
            direct_tx,
        }
    }
}

/// Starts the term's state flusher; a panic in it steps the term down (`step_down`), since
/// the states it held are lost. Answers the flusher's intake.
fn spawn_flusher(
    deps: &TermDeps,
    authority: &Authority,
    scope: Scope,
    cancel: &CancellationToken,
    step_down: &CancellationToken,
) -> mpsc::Sender<FlushRequest> {
    let (flush_tx, flush_rx) = mpsc::channel(64);
    let flusher = flusher::run(
        Arc::clone(&deps.store),
        Arc::clone(&deps.queue),
        authority.state_fence(),
        scope.shard(),
        flush_rx,
        flusher::Alerts {
            sender: deps.alerts.clone(),
            clock: Arc::clone(&deps.clock),
        },
        cancel.clone(),
    )
    .instrument(info_span!("state_flusher"));
    let (metrics, tracker, panicked) = (
        Arc::clone(&deps.metrics),
        deps.tracker.clone(),
        step_down.clone(),
    );
    deps.tracker.spawn(async move {
        if supervise::watch(supervise::STATE_FLUSHER, &*metrics, &tracker, flusher)
            .await
            .is_none()
        {
            panicked.cancel();
        }
    });
    flush_tx
}

/// Runs the loop `make` builds on the term's tracker, supervised under `name`: a panic is
/// counted and the loop made again, until `cancel`.
fn spawn_supervised<F, Fut>(
    deps: &TermDeps,
    name: &'static str,
    cancel: &CancellationToken,
    make: F,
) where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    deps.tracker.spawn(supervise::supervise(
        name,
        Arc::clone(&deps.metrics),
        deps.tracker.clone(),
        cancel.clone(),
        make,
    ));
}

/// Starts the supervised audit of keys written straight into etcd; answers its intake.
fn spawn_direct_writes(
    deps: &TermDeps,
    cancel: &CancellationToken,
) -> mpsc::Sender<crate::audit::Observed> {
    let (direct_tx, direct_rx) = mpsc::channel(direct_writes::INTAKE);
    // Shared across restarts: a check that panicked leaves the intake to the next one.
    let direct_rx = Arc::new(tokio::sync::Mutex::new(direct_rx));
    let (audit, clock, stop) = (
        Arc::clone(&deps.audit),
        Arc::clone(&deps.clock),
        cancel.clone(),
    );
    spawn_supervised(deps, supervise::DIRECT_WRITES, cancel, move || {
        let (audit, clock, rx, stop) = (
            Arc::clone(&audit),
            Arc::clone(&clock),
            Arc::clone(&direct_rx),
            stop.clone(),
        );
        async move {
            let mut rx = rx.lock().await;
            direct_writes::run(audit, clock, &mut rx, stop).await;
        }
        .instrument(info_span!("direct_writes"))
    });
    direct_tx
}

/// Starts the supervised watch of the leader's own clock against `probe`; it cancels
/// `clock_off` when the clock is past the bound.
fn spawn_clock_watch(
    settings: &LeaderSettings,
    deps: &TermDeps,
    probe: &Arc<dyn crate::clock::ClockProbe>,
    clock_off: &CancellationToken,
    cancel: &CancellationToken,
) {
    let (probe, watched, off, stop) = (
        Arc::clone(probe),
        deps.clone(),
        clock_off.clone(),
        cancel.clone(),
    );
    let max_skew = settings.max_clock_skew;
    spawn_supervised(deps, supervise::CLOCK_WATCH, cancel, move || {
        super::clock_watch::run(
            Arc::clone(&probe),
            watched.clone(),
            max_skew,
            off.clone(),
            stop.clone(),
        )
        .instrument(info_span!("clock_watch"))
    });
}
