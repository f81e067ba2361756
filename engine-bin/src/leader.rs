//! The scheduler role: follow the registry, campaign, and while leading, fire every task.
//!
//! One task runs the role as an explicit state machine ([`Phase`]): `Following` keeps the
//! registry catalog warm (watching even when not leading, so a takeover starts from memory)
//! and waits for the campaign, which runs in its own task; `Leading` owns a [`Term`]: the
//! leadership, a fresh [`Dispatcher`] built from the catalog and the recorded states, and the
//! helpers of the term (state flusher, trigger poller). Losing the lease, for any reason,
//! drops the term at once: no fire is enqueued after the loss is known, and each enqueue first
//! checks [`Leadership::is_valid`] (a monotonic deadline, so a process resumed after SIGSTOP
//! stops before acting). A deposed leader that still reaches Redis is refused by the fencing
//! token in the enqueue script; a fire both leaders dispatched is enqueued once (dedupe key).
//!
//! The loop itself does only cheap work between fires: pipelined enqueues of what is due,
//! one `RPOP` of worker events per interval. etcd writes (coalesced task states, consumed
//! trigger keys) go to the [`flusher`](crate::flusher) task, so a slow etcd never delays a
//! fire.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ax_alerting::{Alert, AlertSender};
use ax_election::{Candidate, Leadership};
use ax_queue::{ExecutionEventKind, ExecutionEventRecord, ExecutionMessage, Queue};
use ax_registry::{Registry, RegistryEvent, TaskWatcher};
use ax_scheduler_core::dispatcher::Dispatch;
use ax_scheduler_core::{
    Dispatcher, DispatcherConfig, EnqueueOutcome, ExecutionEvent, FieldError, Notice, TaskKey,
    TaskSpec, TaskState, UtcMillis,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::clock;
use crate::flusher::{self, FlushRequest};
use crate::metrics::{Metrics, BACKEND_ETCD, BACKEND_REDIS};
use crate::triggers::{self, PendingTrigger};

/// Settings of the scheduler role, from the `[scheduler]` and `[election]` configuration.
#[derive(Clone, Debug)]
pub struct LeaderSettings {
    /// This replica's id.
    pub instance_id: String,
    /// The dispatcher's settings (tick, catch-up window, rate limit).
    pub dispatcher: DispatcherConfig,
    /// How often worker events are read from Redis.
    pub events_interval: Duration,
    /// How often coalesced states are written to etcd.
    pub flush_interval: Duration,
    /// How often `{prefix}/triggers/` is read.
    pub trigger_interval: Duration,
    /// Late enqueues beyond this raise a schedule-delay alert.
    pub delay_alert_threshold: Duration,
    /// The largest clock offset from etcd this replica leads with.
    pub max_clock_skew: Duration,
    /// The etcd endpoint whose clock is compared (HTTP `Date` of `/version`).
    pub skew_endpoint: Option<String>,
    /// Only these namespaces (empty: all).
    pub namespaces: Vec<String>,
}

/// What the role needs from the rest of the replica.
pub struct LeaderDeps {
    /// The etcd registry.
    pub registry: Registry,
    /// The Redis queue.
    pub queue: Queue,
    /// The election candidate.
    pub candidate: Candidate,
    /// Metrics of this replica.
    pub metrics: Arc<Metrics>,
    /// Alerts, when channels are configured.
    pub alerts: Option<AlertSender>,
    /// The tracker the role's helper tasks run on.
    pub tracker: TaskTracker,
}

#[derive(Clone, Debug)]
enum CatalogEntry {
    Valid {
        spec: Arc<TaskSpec>,
        revision: i64,
    },
    Invalid {
        errors: Vec<FieldError>,
        revision: i64,
    },
}

/// The registry as last seen: what a takeover starts from.
#[derive(Default)]
struct Catalog {
    entries: HashMap<TaskKey, CatalogEntry>,
    /// How many entries are invalid, kept as entries change: counting them on every event
    /// made loading N tasks cost O(N^2) (minutes at 100 000 tasks).
    invalid: usize,
    synced: bool,
}

enum Phase {
    Following {
        campaign: Option<oneshot::Receiver<anyhow::Result<Leadership>>>,
    },
    Leading(Box<Term>),
}

struct Term {
    leadership: Leadership,
    token: u64,
    dispatcher: Dispatcher,
    cancel: CancellationToken,
    flush_tx: mpsc::Sender<FlushRequest>,
    trigger_rx: mpsc::Receiver<PendingTrigger>,
    /// Triggers to delete once their run-now execution is enqueued, by execution id.
    pending_triggers: HashMap<String, PendingTrigger>,
    queues: HashSet<String>,
}

/// Runs the scheduler role until `cancel` fires.
pub async fn run(
    settings: LeaderSettings,
    deps: LeaderDeps,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let mut watcher = deps.registry.watch(cancel.child_token());
    let mut catalog = Catalog::default();
    let mut phase = Phase::Following { campaign: None };
    let mut events_tick = tokio::time::interval(settings.events_interval);
    events_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flush_tick = tokio::time::interval(settings.flush_interval);
    flush_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        phase = match phase {
            Phase::Following { campaign } => {
                follow(
                    &settings,
                    &deps,
                    &mut watcher,
                    &mut catalog,
                    campaign,
                    &cancel,
                )
                .await?
            }
            Phase::Leading(term) => {
                lead(
                    &settings,
                    &deps,
                    &mut watcher,
                    &mut catalog,
                    term,
                    &mut events_tick,
                    &mut flush_tick,
                    &cancel,
                )
                .await?
            }
        };
        if cancel.is_cancelled() {
            return Ok(());
        }
    }
}

fn in_scope(settings: &LeaderSettings, namespace: &str) -> bool {
    settings.namespaces.is_empty() || settings.namespaces.iter().any(|n| n == namespace)
}

/// Applies a registry event to the catalog; returns the key and entry it changed (`None`
/// entry for a delete), or nothing for bookkeeping events.
fn apply_event(
    settings: &LeaderSettings,
    catalog: &mut Catalog,
    metrics: &Metrics,
    event: RegistryEvent,
) -> Option<(TaskKey, Option<CatalogEntry>)> {
    let changed = match event {
        RegistryEvent::Put {
            namespace,
            id,
            spec,
            mod_revision,
            ..
        } => {
            let key = TaskKey::new(namespace, id);
            let entry = CatalogEntry::Valid {
                spec: Arc::new(spec),
                revision: mod_revision,
            };
            Some((key, Some(entry)))
        }
        RegistryEvent::Invalid {
            namespace,
            id,
            errors,
            mod_revision,
            ..
        } => {
            warn!(
                task_id = %format!("{namespace}/{id}"),
                errors = %errors,
                "invalid task spec; the task is INVALID until it is fixed"
            );
            let key = TaskKey::new(namespace, id);
            let entry = CatalogEntry::Invalid {
                errors: errors.errors,
                revision: mod_revision,
            };
            Some((key, Some(entry)))
        }
        RegistryEvent::Delete { namespace, id, .. } => Some((TaskKey::new(namespace, id), None)),
        RegistryEvent::Synced { revision } => {
            debug!(revision, tasks = catalog.entries.len(), "registry synced");
            catalog.synced = true;
            None
        }
        RegistryEvent::Reconnecting { error, attempt } => {
            metrics
                .backend_errors_total
                .with_label_values(&[BACKEND_ETCD])
                .inc();
            warn!(%error, attempt, "registry watch reconnecting");
            None
        }
    };
    let (key, entry) = changed?;
    if !in_scope(settings, &key.namespace) {
        return None;
    }
    let old = match &entry {
        Some(e) => catalog.entries.insert(key.clone(), e.clone()),
        None => catalog.entries.remove(&key),
    };
    let is_invalid = |e: &CatalogEntry| matches!(e, CatalogEntry::Invalid { .. });
    if old.as_ref().is_some_and(is_invalid) {
        catalog.invalid -= 1;
    }
    if entry.as_ref().is_some_and(is_invalid) {
        catalog.invalid += 1;
    }
    metrics
        .invalid_specs
        .set(i64::try_from(catalog.invalid).unwrap_or(i64::MAX));
    Some((key, entry))
}

fn start_campaign(
    settings: &LeaderSettings,
    deps: &LeaderDeps,
    cancel: &CancellationToken,
) -> oneshot::Receiver<anyhow::Result<Leadership>> {
    let (tx, rx) = oneshot::channel();
    let candidate = deps.candidate.clone();
    let cancel = cancel.clone();
    let max_skew = settings.max_clock_skew;
    let skew_endpoint = settings.skew_endpoint.clone();
    deps.tracker.spawn(
        async move {
            // A replica whose clock disagrees with etcd's would fire early or late for
            // everyone: it does not lead until the clocks agree.
            if let Some(endpoint) = skew_endpoint {
                loop {
                    match clock::skew_against(&endpoint).await {
                        Ok(skew) if skew.abs() <= max_skew.as_secs_f64() => break,
                        Ok(skew) => warn!(
                            skew_seconds = skew,
                            max_seconds = max_skew.as_secs_f64(),
                            "clock skew against etcd is too large: refusing to lead; fix NTP on this host"
                        ),
                        Err(e) => {
                            debug!(error = %format!("{e:#}"), "clock skew check failed; campaigning anyway");
                            break;
                        }
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                    }
                }
            }
            let result = candidate.campaign(&cancel).await.context("campaign failed");
            let _ = tx.send(result);
        }
        .instrument(info_span!("campaign")),
    );
    rx
}

async fn follow(
    settings: &LeaderSettings,
    deps: &LeaderDeps,
    watcher: &mut TaskWatcher,
    catalog: &mut Catalog,
    campaign: Option<oneshot::Receiver<anyhow::Result<Leadership>>>,
    cancel: &CancellationToken,
) -> anyhow::Result<Phase> {
    deps.metrics.set_leader(false);
    let mut campaign = campaign;
    loop {
        if campaign.is_none() && catalog.synced {
            campaign = Some(start_campaign(settings, deps, cancel));
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(Phase::Following { campaign: None }),
            event = watcher.next() => match event {
                Some(event) => { apply_event(settings, catalog, &deps.metrics, event); }
                None => return Ok(Phase::Following { campaign: None }),
            },
            won = async { match campaign.as_mut() { Some(rx) => rx.await, None => std::future::pending().await } } => {
                campaign = None;
                match won {
                    Ok(Ok(leadership)) => {
                        match Term::start(settings, deps, catalog, leadership, cancel).await {
                            Ok(term) => return Ok(Phase::Leading(Box::new(term))),
                            Err(e) => warn!(error = %format!("{e:#}"), "could not take over; campaigning again"),
                        }
                    }
                    Ok(Err(e)) => {
                        if cancel.is_cancelled() {
                            return Ok(Phase::Following { campaign: None });
                        }
                        warn!(error = %format!("{e:#}"), "campaign ended with an error; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

impl Term {
    async fn start(
        settings: &LeaderSettings,
        deps: &LeaderDeps,
        catalog: &Catalog,
        leadership: Leadership,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Term> {
        let token = u64::try_from(leadership.fencing_token()).unwrap_or(0);
        let span = info_span!("takeover", fencing_token = token);
        async {
            info!(
                tasks = catalog.entries.len(),
                "became leader; loading task states"
            );
            let states: HashMap<TaskKey, TaskState> = deps
                .registry
                .list_states(None)
                .await
                .context("cannot load task states")?
                .into_iter()
                .map(|s| (TaskKey::new(s.namespace, s.id), s.state))
                .collect();
            // Raise every queue's fence before the first fire, so a deposed leader that still
            // reaches Redis is refused on all of them, not only where this leader pushed.
            let mut queues: HashSet<String> = catalog
                .entries
                .values()
                .filter_map(|e| match e {
                    CatalogEntry::Valid { spec, .. } => Some(spec.queue.clone()),
                    CatalogEntry::Invalid { .. } => None,
                })
                .collect();
            queues.insert(ax_scheduler_core::task::DEFAULT_QUEUE.to_owned());
            for q in &queues {
                deps.queue
                    .advance_fence(q, token)
                    .await
                    .with_context(|| format!("cannot raise the fence of queue {q}"))?;
            }
            let now = clock::now();
            let mut dispatcher = Dispatcher::new(settings.dispatcher.clone(), now);
            let mut states = states;
            for (key, entry) in &catalog.entries {
                match entry {
                    CatalogEntry::Valid { spec, revision } => dispatcher.upsert(
                        key.clone(),
                        Arc::clone(spec),
                        *revision,
                        states.remove(key),
                        now,
                    ),
                    CatalogEntry::Invalid { errors, revision } => {
                        let already = states.get(key).is_some_and(|s| {
                            s.spec_revision == *revision
                                && s.status == ax_scheduler_core::TaskStatus::Invalid
                        });
                        if !already {
                            dispatcher.mark_invalid(key.clone(), *revision, errors.clone(), now);
                        }
                    }
                }
            }
            if !leadership.is_valid() {
                anyhow::bail!("leadership lost while taking over");
            }
            let term_cancel = leadership.lost().child_token();
            // The role's own cancellation ends the term too.
            let role_cancel = cancel.clone();
            let tc = term_cancel.clone();
            deps.tracker.spawn(async move {
                tokio::select! {
                    _ = role_cancel.cancelled() => tc.cancel(),
                    _ = tc.cancelled() => {}
                }
            });
            let (flush_tx, flush_rx) = mpsc::channel(64);
            deps.tracker.spawn(
                flusher::run(
                    deps.registry.clone(),
                    leadership.fencing_token(),
                    flush_rx,
                    term_cancel.clone(),
                )
                .instrument(info_span!("state_flusher")),
            );
            let (trigger_tx, trigger_rx) = mpsc::channel(256);
            deps.tracker.spawn(
                triggers::poll(
                    deps.registry.clone(),
                    settings.trigger_interval,
                    trigger_tx,
                    term_cancel.clone(),
                )
                .instrument(info_span!("triggers")),
            );
            deps.metrics.set_leader(true);
            if let Some(alerts) = &deps.alerts {
                alerts.send(Alert::leader_changed(
                    None,
                    Some(&settings.instance_id),
                    now,
                ));
            }
            info!(
                armed = dispatcher.armed_len(),
                due_now = dispatcher.ready_len(),
                "leading"
            );
            Ok(Term {
                leadership,
                token,
                dispatcher,
                cancel: term_cancel,
                flush_tx,
                trigger_rx,
                pending_triggers: HashMap::new(),
                queues,
            })
        }
        .instrument(span)
        .await
    }
}

#[allow(clippy::too_many_arguments)]
async fn lead(
    settings: &LeaderSettings,
    deps: &LeaderDeps,
    watcher: &mut TaskWatcher,
    catalog: &mut Catalog,
    mut term: Box<Term>,
    events_tick: &mut tokio::time::Interval,
    flush_tick: &mut tokio::time::Interval,
    cancel: &CancellationToken,
) -> anyhow::Result<Phase> {
    loop {
        let wake = term
            .dispatcher
            .next_wakeup(clock::now())
            .map(clock::instant_at)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            biased;
            _ = term.cancel.cancelled() => {
                let reason = term.leadership.loss_reason();
                deps.metrics.set_leader(false);
                if cancel.is_cancelled() {
                    // Shutting down: hand over at once instead of after the lease's TTL.
                    flush(&mut term, true).await;
                    let Term { leadership, .. } = *term;
                    if let Err(e) = leadership.resign().await {
                        warn!(error = %e, "resign failed; the lease will expire instead");
                    }
                    info!("resigned leadership");
                    return Ok(Phase::Following { campaign: None });
                }
                warn!(reason = ?reason, "leadership lost; stopped firing");
                if let Some(alerts) = &deps.alerts {
                    alerts.send(Alert::leader_changed(Some(&settings.instance_id), None, clock::now()));
                }
                return Ok(Phase::Following { campaign: None });
            }
            _ = tokio::time::sleep_until(wake) => {
                fire(settings, deps, &mut term).await?;
            }
            event = watcher.next() => {
                let Some(event) = event else { return Ok(Phase::Following { campaign: None }) };
                if let Some((key, entry)) = apply_event(settings, catalog, &deps.metrics, event) {
                    let now = clock::now();
                    match entry {
                        Some(CatalogEntry::Valid { spec, revision }) => {
                            if term.queues.insert(spec.queue.clone()) {
                                if let Err(e) = deps.queue.advance_fence(&spec.queue, term.token).await {
                                    warn!(error = %e, queue = %spec.queue, "cannot raise the queue's fence");
                                }
                            }
                            term.dispatcher.upsert(key, spec, revision, None, now);
                        }
                        Some(CatalogEntry::Invalid { errors, revision }) => {
                            term.dispatcher.mark_invalid(key, revision, errors, now);
                        }
                        None => term.dispatcher.remove(&key),
                    }
                    // A change takes effect now, not at the next tick.
                    fire(settings, deps, &mut term).await?;
                }
            }
            Some(request) = term.trigger_rx.recv() => {
                let key = TaskKey::new(request.namespace.clone(), request.id.clone());
                if term.dispatcher.trigger(&key, request.execution_id.clone(), clock::now()) {
                    term.pending_triggers.insert(request.execution_id.clone(), request);
                    fire(settings, deps, &mut term).await?;
                } else {
                    warn!(task_id = %key, execution_id = %request.execution_id, "run-now for an unknown task; dropped");
                    let _ = term.flush_tx.send(FlushRequest::DeleteTriggers(vec![request])).await;
                }
            }
            _ = events_tick.tick() => {
                consume_events(deps, &mut term).await;
            }
            _ = flush_tick.tick() => {
                flush(&mut term, false).await;
            }
        }
    }
}

/// Polls the dispatcher and enqueues what is due, in one pipeline.
async fn fire(settings: &LeaderSettings, deps: &LeaderDeps, term: &mut Term) -> anyhow::Result<()> {
    let now = clock::now();
    let dispatches = term.dispatcher.poll(now);
    notices(settings, deps, term, now);
    if dispatches.is_empty() {
        return Ok(());
    }
    if !term.leadership.is_valid() {
        // The lease may have expired while this process was stopped: act as leader no more.
        warn!(
            pending = dispatches.len(),
            "leadership not valid any more; not enqueuing"
        );
        term.cancel.cancel();
        return Ok(());
    }
    let messages: Vec<ExecutionMessage> = dispatches
        .iter()
        .map(|d| message_for(d, now, term.token))
        .collect();
    let outcomes = loop {
        match deps.queue.enqueue_batch(&messages).await {
            Ok(outcomes) => break outcomes,
            Err(e) if e.is_retryable() && term.leadership.is_valid() => {
                deps.metrics
                    .backend_errors_total
                    .with_label_values(&[BACKEND_REDIS])
                    .inc();
                warn!(error = %e, pending = messages.len(), "enqueue failed; retrying");
                // Safe to repeat: every message is deduplicated by its fire.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                deps.metrics
                    .backend_errors_total
                    .with_label_values(&[BACKEND_REDIS])
                    .inc();
                return Err(e).context("enqueue failed");
            }
        }
    };
    for ((dispatch, message), outcome) in dispatches.iter().zip(&messages).zip(outcomes) {
        let lateness = now.since(dispatch.fire_at);
        let outcome = match outcome {
            ax_queue::EnqueueOutcome::Enqueued => {
                deps.metrics
                    .tasks_scheduled_total
                    .with_label_values(&[&message.queue])
                    .inc();
                info!(
                    task_id = %dispatch.key,
                    execution_id = %message.execution_id,
                    fire_at = %dispatch.fire_at,
                    lateness_ms = lateness.as_millis() as u64,
                    attempt = 0,
                    queue = %message.queue,
                    run_now = message.run_now,
                    "enqueued"
                );
                if lateness > settings.delay_alert_threshold {
                    if let Some(alerts) = &deps.alerts {
                        alerts.send(Alert::schedule_delay(
                            dispatch.key.namespace.clone(),
                            dispatch.key.id.clone(),
                            dispatch.fire_at,
                            lateness,
                            now,
                        ));
                    }
                }
                EnqueueOutcome::Enqueued
            }
            ax_queue::EnqueueOutcome::Duplicate => {
                debug!(task_id = %dispatch.key, fire_at = %dispatch.fire_at, "already enqueued (duplicate fire refused)");
                EnqueueOutcome::Duplicate
            }
            ax_queue::EnqueueOutcome::Held => {
                debug!(task_id = %dispatch.key, fire_at = %dispatch.fire_at, "previous execution still active; fire held");
                EnqueueOutcome::Held
            }
            ax_queue::EnqueueOutcome::Fenced { newest } => {
                warn!(
                    token = term.token,
                    newest, "a newer leader's fencing token is in Redis: stepping down"
                );
                term.cancel.cancel();
                return Ok(());
            }
        };
        if let Some(id) = &dispatch.run_now {
            if outcome != EnqueueOutcome::Held {
                if let Some(t) = term.pending_triggers.remove(id) {
                    let _ = term
                        .flush_tx
                        .send(FlushRequest::DeleteTriggers(vec![t]))
                        .await;
                }
            }
        }
        term.dispatcher.on_enqueued(dispatch, outcome, now);
    }
    Ok(())
}

fn message_for(dispatch: &Dispatch, now: UtcMillis, token: u64) -> ExecutionMessage {
    let mut message = match &dispatch.run_now {
        Some(id) => {
            let mut m = ExecutionMessage::run_now(&dispatch.spec, now, token);
            if let Ok(uuid) = id.parse() {
                m.execution_id = uuid;
            }
            m
        }
        None => ExecutionMessage::for_fire(&dispatch.spec, dispatch.fire_at, now, token),
    };
    // The key is authoritative: a spec's own id and namespace fields may be empty.
    message.namespace = dispatch.key.namespace.clone();
    message.task_id = dispatch.key.id.clone();
    message
}

fn notices(settings: &LeaderSettings, deps: &LeaderDeps, term: &mut Term, now: UtcMillis) {
    for notice in term.dispatcher.take_notices() {
        match notice {
            Notice::Misfired {
                key,
                missed,
                skipped,
                beyond_window,
                oldest,
            } => {
                warn!(
                    task_id = %key,
                    missed,
                    skipped,
                    beyond_window,
                    oldest = ?oldest.map(|o| o.to_rfc3339()),
                    "missed fires found on takeover"
                );
                if let Some(alerts) = &deps.alerts {
                    if skipped > 0 {
                        alerts.send(Alert::misfire_skipped(
                            key.namespace.clone(),
                            key.id.clone(),
                            skipped,
                            now,
                        ));
                    }
                    if beyond_window > 0 {
                        if let Some(oldest) = oldest {
                            alerts.send(Alert::schedule_delay(
                                key.namespace.clone(),
                                key.id.clone(),
                                oldest,
                                now.since(oldest),
                                now,
                            ));
                        }
                    }
                }
            }
            Notice::CircuitOpened {
                key,
                failures,
                executions,
            } => {
                warn!(task_id = %key, failures, executions, "circuit breaker open: dispatch slowed to a tenth");
                if let Some(alerts) = &deps.alerts {
                    alerts.send(Alert::circuit_open(
                        key.to_string(),
                        failures,
                        settings.dispatcher.breaker.window,
                        now,
                    ));
                }
            }
            Notice::CircuitClosed { key } => info!(task_id = %key, "circuit breaker closed"),
            Notice::BreakerSkipped { key, fire_at } => {
                debug!(task_id = %key, fire_at = %fire_at, "fire skipped: circuit breaker open");
            }
        }
    }
}

async fn consume_events(deps: &LeaderDeps, term: &mut Term) {
    loop {
        let events = match deps.queue.take_events(1000).await {
            Ok(events) => events,
            Err(e) => {
                deps.metrics
                    .backend_errors_total
                    .with_label_values(&[BACKEND_REDIS])
                    .inc();
                warn!(error = %e, "cannot read execution events");
                return;
            }
        };
        let n = events.len();
        let now = clock::now();
        for record in events {
            apply_execution_event(&mut term.dispatcher, record, now);
        }
        if n < 1000 {
            return;
        }
    }
}

fn apply_execution_event(
    dispatcher: &mut Dispatcher,
    record: ExecutionEventRecord,
    now: UtcMillis,
) {
    let key = TaskKey::new(record.namespace, record.task_id);
    let event = match record.kind {
        ExecutionEventKind::Started { at } => ExecutionEvent::Started { started_at: at },
        ExecutionEventKind::Finished {
            succeeded,
            last,
            killed,
            error,
            ..
        } => ExecutionEvent::Finished {
            succeeded,
            last,
            killed,
            error,
        },
    };
    dispatcher.on_execution(&key, event, now);
}

async fn flush(term: &mut Term, wait: bool) {
    if !term.dispatcher.has_state_writes() {
        return;
    }
    let writes = term.dispatcher.take_state_writes();
    let (done_tx, done_rx) = oneshot::channel();
    let request = FlushRequest::States {
        writes,
        done: wait.then_some(done_tx),
    };
    if term.flush_tx.send(request).await.is_err() {
        return;
    }
    if wait {
        let _ = tokio::time::timeout(Duration::from_secs(5), done_rx).await;
    }
}
