//! The fire path: poll the dispatcher, enqueue what is due, act on what the enqueue said.
//!
//! Split in two so the decisions run on virtual time in tests, as the dispatcher's do:
//! [`Term::fire`] is the thin I/O shell (read the clock, check the lease, one pipelined enqueue with
//! retries, then carry out the effects), and [`apply_outcomes`] is a synchronous step that applies the
//! enqueue outcomes to the dispatcher and returns what to do about them ([`FireEffects`]:
//! metrics, alerts, consumed triggers, stepping down). [`notice_alerts`] does the same for the
//! dispatcher's notices, [`failure_alerts`] for the failed attempts among them: the one place
//! an attempt's failure becomes an alert, whoever ended it (a Rust worker, a worker in another
//! language, a job's completion report, a deadline), since every end reaches the leader as
//! an event.

use std::collections::HashMap;
use std::time::Duration;

use ax_alerting::Alert;
use ax_queue::ExecutionMessage;
use ax_scheduler_core::deadline::Miss;
use ax_scheduler_core::{
    AttemptEnd, Dispatch, Dispatcher, EnqueueOutcome, ExecutionId, Notice, ReconnectBackoff,
    TaskKey, UtcMillis,
};
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::Term;
use crate::deps::TermDeps;
use crate::metrics::Backend;
use crate::LeaderSettings;
use ax_registry::PendingTrigger;

/// What the shell does after one round of enqueues.
#[derive(Debug, Default)]
pub(super) struct FireEffects {
    /// The queue of each fire that was enqueued (`scheduler_fires_total`).
    pub(super) scheduled: Vec<std::sync::Arc<str>>,
    /// Alerts to send (late enqueues).
    pub(super) alerts: Vec<Alert>,
    /// Run-now trigger keys whose execution is in the queue: delete them.
    pub(super) done_triggers: Vec<PendingTrigger>,
    /// A newer leader's fencing token was found in Redis: the term is over.
    pub(super) fenced: Option<u64>,
    /// Scheduled fires Redis refused as already enqueued (re-fires of what a dead leader
    /// sent): their end may be in the history only.
    pub(super) duplicates: Vec<(std::sync::Arc<ax_scheduler_core::TaskKey>, UtcMillis)>,
}

/// Applies the enqueue `outcomes` of `dispatches` (sent as `messages`) to the dispatcher and
/// returns the effects to carry out. Stops at the first fenced outcome: nothing after it
/// was pushed, and the term ends.
pub(super) fn apply_outcomes(
    dispatcher: &mut Dispatcher,
    dispatches: &[Dispatch],
    messages: &[ExecutionMessage],
    outcomes: &[EnqueueOutcome],
    pending_triggers: &mut HashMap<ExecutionId, PendingTrigger>,
    delay_alert_threshold: Duration,
    now: UtcMillis,
) -> FireEffects {
    let mut effects = FireEffects::default();
    for ((dispatch, message), outcome) in dispatches.iter().zip(messages).zip(outcomes) {
        let lateness = now.since(dispatch.fire_at);
        match outcome {
            EnqueueOutcome::Enqueued => {
                effects.scheduled.push(message.queue.clone());
                // Debug: at info, three lines per execution cost a third of the CPU of a
                // fire; the worker's `finished` line is the one kept at info.
                debug!(
                    task_id = %dispatch.key,
                    execution_id = %message.execution_id,
                    fire_at = %dispatch.fire_at,
                    lateness_ms = u64::try_from(lateness.as_millis()).unwrap_or(u64::MAX),
                    attempt = 1,
                    queue = %message.queue,
                    run_now = message.run_now,
                    "enqueued"
                );
                if lateness > delay_alert_threshold {
                    effects.alerts.push(Alert::schedule_delay(
                        &*dispatch.key.namespace,
                        &*dispatch.key.id,
                        dispatch.fire_at,
                        lateness,
                        now,
                    ));
                }
            }
            EnqueueOutcome::Duplicate => {
                debug!(task_id = %dispatch.key, fire_at = %dispatch.fire_at, "already enqueued (duplicate fire refused)");
                if dispatch.run_now.is_none() {
                    effects
                        .duplicates
                        .push((std::sync::Arc::clone(&dispatch.key), dispatch.fire_at));
                }
            }
            EnqueueOutcome::Held => {
                debug!(task_id = %dispatch.key, fire_at = %dispatch.fire_at, "previous execution still active; fire held");
            }
            EnqueueOutcome::Fenced { newest } => {
                warn!(
                    newest,
                    "a newer leader's fencing token is in Redis: stepping down"
                );
                effects.fenced = Some(*newest);
                return effects;
            }
        }
        if let Some(id) = &dispatch.run_now {
            if *outcome != EnqueueOutcome::Held {
                effects.done_triggers.extend(pending_triggers.remove(id));
            }
        }
        dispatcher.on_enqueued(dispatch, *outcome, now);
    }
    effects
}

/// The alerts the dispatcher's notices raise, by when they may go.
#[derive(Debug, Default)]
pub(super) struct NoticeAlerts {
    /// To send at once.
    pub(super) now: Vec<Alert>,
    /// Alerts of failed attempts, to send once the task states holding those ends are
    /// written (they go to the flusher with those states): a leader that dies before
    /// that has sent none of them, and its successor applies the ends again and sends them;
    /// one that wrote the states has sent them, and its successor applies nothing again.
    pub(super) after_write: Vec<Alert>,
}

/// The alerts of a failed attempt (`attempt` counted from 0, as the queue counts): every
/// failed attempt is a (warn) failure alert, which the alert manager de-duplicates per task;
/// the last one, with no retry after it, is also a (critical) dead-letter alert. The alerts
/// count attempts from 1, as people and the history do, and name the execution.
pub(super) fn failure_alerts(
    key: &TaskKey,
    execution: ExecutionId,
    attempt: u32,
    end: &AttemptEnd,
    at: UtcMillis,
) -> Vec<Alert> {
    if !end.outcome.is_failure() {
        return Vec::new();
    }
    let attempt = attempt.saturating_add(1);
    let reason = end.error.as_deref().unwrap_or_default();
    let execution_id = execution.to_string();
    let mut alerts = vec![
        Alert::task_failed(&*key.namespace, &*key.id, attempt, reason, at)
            .with_field("execution_id", &execution_id),
    ];
    if end.is_dead_lettered() {
        alerts.push(
            Alert::task_dead_lettered(&*key.namespace, &*key.id, attempt, reason, at)
                .with_field("execution_id", &execution_id),
        );
    }
    alerts
}

/// Logs the dispatcher's notices and returns the alerts they raise.
pub(super) fn notice_alerts(
    notices: Vec<Notice>,
    breaker_window: Duration,
    now: UtcMillis,
) -> NoticeAlerts {
    let mut out = NoticeAlerts::default();
    for notice in notices {
        match notice {
            Notice::AttemptFailed {
                key,
                execution,
                attempt,
                at,
                end,
            } => {
                out.after_write
                    .extend(failure_alerts(&key, execution, attempt, &end, at));
            }
            Notice::Misfired {
                key,
                missed,
                skipped,
                beyond_window,
                oldest,
            } => misfire_alerts(
                &key,
                missed,
                skipped,
                beyond_window,
                oldest,
                now,
                &mut out.now,
            ),
            Notice::CircuitOpened {
                key,
                failures,
                executions,
            } => out.now.push(circuit_open_alert(
                &key,
                failures,
                executions,
                breaker_window,
                now,
            )),
            Notice::CircuitClosed { key } => info!(task_id = %key, "circuit breaker closed"),
            Notice::BreakerSkipped { key, fire_at } => {
                debug!(task_id = %key, fire_at = %fire_at, "fire skipped: circuit breaker open");
            }
            Notice::NoLiveWorker {
                key,
                fanout,
                fire_at,
                reason,
                ..
            } => out
                .now
                .push(no_live_worker_alert(&key, fanout, fire_at, reason, now)),
            Notice::StepSkipped { key, run, reason } => {
                info!(task_id = %key, run_id = %run, "step skipped: {reason}");
            }
            Notice::DeadlineMissed { key, within, miss } => {
                out.now.push(deadline_alert(&key, within, &miss, now));
            }
        }
    }
    out
}

/// Logs missed fires found at a takeover or after a stall; alerts the fires the policy
/// skipped, and the delay of those older than the misfire window.
fn misfire_alerts(
    key: &TaskKey,
    missed: u64,
    skipped: u64,
    beyond_window: u64,
    oldest: Option<UtcMillis>,
    now: UtcMillis,
    alerts: &mut Vec<Alert>,
) {
    warn!(
        task_id = %key,
        missed,
        skipped,
        beyond_window,
        oldest = ?oldest.map(|o| o.to_rfc3339()),
        "missed fires found (takeover or stall); the misfire policy applied"
    );
    if skipped > 0 {
        alerts.push(Alert::misfire_skipped(
            &*key.namespace,
            &*key.id,
            skipped,
            now,
        ));
    }
    if let (true, Some(oldest)) = (beyond_window > 0, oldest) {
        alerts.push(Alert::schedule_delay(
            &*key.namespace,
            &*key.id,
            oldest,
            now.since(oldest),
            now,
        ));
    }
}

/// Logs and alerts a task whose circuit breaker opened.
fn circuit_open_alert(
    key: &TaskKey,
    failures: u32,
    executions: u32,
    breaker_window: Duration,
    now: UtcMillis,
) -> Alert {
    warn!(task_id = %key, failures, executions, "circuit breaker open: dispatch slowed to a tenth");
    Alert::circuit_open(key.to_string(), failures, breaker_window, now)
}

/// Logs and alerts a broadcast fire that found no live worker.
fn no_live_worker_alert(
    key: &TaskKey,
    fanout: ExecutionId,
    fire_at: UtcMillis,
    reason: String,
    now: UtcMillis,
) -> Alert {
    warn!(task_id = %key, fanout_id = %fanout, fire_at = %fire_at, "broadcast fire failed: {reason}");
    Alert::task_failed(&*key.namespace, &*key.id, 1, reason, now)
}

/// Logs and alerts a missed deadline.
fn deadline_alert(key: &TaskKey, within: Duration, miss: &Miss, now: UtcMillis) -> Alert {
    warn!(
        task_id = %key,
        fire_at = %miss.first_fire,
        missed = miss.missed,
        reason = miss.reason.as_str(),
        "deadline missed: {}",
        miss.reason
    );
    Alert::deadline_missed(&*key.namespace, &*key.id, within, miss, now)
}

impl Term {
    /// Whether this round must not fire for the clock: it jumped ahead since a check last
    /// said it agrees with etcd's, and a check now finds it off (the term gives its key up,
    /// [`super::clock_watch`]) or cannot be made (the round waits a moment and holds: what
    /// the jump made due would fire early if the clock is wrong).
    async fn clock_went_off(
        &mut self,
        settings: &LeaderSettings,
        deps: &TermDeps,
        now: UtcMillis,
    ) -> bool {
        let Some(probe) = &deps.clock_check else {
            return false;
        };
        if self.clock_off.is_cancelled() {
            return true;
        }
        let fresh = self.clock_jumps.jumped(now, tokio::time::Instant::now());
        self.clock_jumps.unverified |= fresh;
        if !self.clock_jumps.unverified {
            return false;
        }
        use super::clock_watch::{check_now, Checked, JUMP_POLL};
        match check_now(
            &**probe,
            deps,
            settings.max_clock_skew,
            &self.clock_off,
            true,
        )
        .await
        {
            Checked::Agrees => {
                self.clock_jumps.unverified = false;
                false
            }
            Checked::Off => true,
            Checked::Unknown => {
                if fresh {
                    warn!("the clock jumped ahead and cannot be checked against etcd's: holding the fires it made due until it can");
                }
                tokio::time::sleep(JUMP_POLL).await;
                true
            }
        }
    }

    /// Polls the dispatcher and enqueues what is due, in one pipeline. Nothing here fails
    /// the term: what cannot be done ends it (`self.cancel`) or waits.
    pub(super) async fn fire(&mut self, settings: &LeaderSettings, deps: &TermDeps) {
        let now = deps.clock.now();
        if self.clock_went_off(settings, deps, now).await {
            return;
        }
        let polled = self.dispatcher.poll(now);
        let dispatches = if polled.iter().any(|d| d.broadcast) {
            match address_broadcasts(settings, deps, self, polled, now).await {
                Some(addressed) => addressed,
                // The term is over; the fires taken were not recorded anywhere.
                None => return,
            }
        } else {
            polled
        };
        self.take_notices(settings, deps, now);
        let unserved = std::mem::take(&mut self.unserved_fires);
        record_unserved_fires(deps, &unserved).await;
        if dispatches.is_empty() {
            return;
        }
        if !self.authority.is_valid() {
            // The lease may have expired while this process was stopped: act as leader no more.
            warn!(
                pending = dispatches.len(),
                "leadership not valid any more; not enqueuing"
            );
            self.cancel.cancel();
            return;
        }
        let messages: Vec<ExecutionMessage> = dispatches
            .iter()
            .map(|d| {
                let mut m = ExecutionMessage::for_dispatch(d, now, self.token);
                // Checked against the shard's fence; its events go to the shard's stream.
                m.shard = self.scope.shard();
                if let Some(request) = d
                    .run_now
                    .as_ref()
                    .and_then(|id| self.pending_triggers.get(id))
                {
                    m.with_run_now_request(
                        request.payload.clone(),
                        request.idempotency_key.clone(),
                        request.backfill_of,
                    );
                    m.requested_by(request.requested_by.clone());
                    m.resolve_concurrency(d.spec.concurrency.as_ref());
                }
                m
            })
            .collect();
        let Some(outcomes) = enqueue_until_accepted(settings, deps, self, &messages).await else {
            // The term is over; the fires taken for this batch were not recorded anywhere.
            return;
        };
        let effects = apply_outcomes(
            &mut self.dispatcher,
            &dispatches,
            &messages,
            &outcomes,
            &mut self.pending_triggers,
            settings.delay_alert_threshold,
            now,
        );
        for queue in &effects.scheduled {
            deps.metrics.scheduled(queue);
        }
        send_alerts(deps, effects.alerts);
        // Their keys go with the next flush, and the duplicates' outcomes are looked up with the
        // next events: the fire path waits for neither etcd nor a history read.
        self.consumed_triggers.extend(effects.done_triggers);
        self.duplicates.extend(effects.duplicates);
        if effects.fenced.is_some() {
            self.cancel.cancel();
        }
    }
}

/// Addresses the broadcast fires among `dispatches` (see `ax_scheduler_core::fanout`): the
/// live workers of each one's queue, listed once per queue and round and fixed per fire in
/// Redis (a fire sent by a leader that died before writing its progress keeps the workers
/// it was sent to), go to the dispatcher, which returns a piece per worker (or ends the
/// fire failed when there is none). Each call is retried as an enqueue is; `None` when the
/// term ends first.
async fn address_broadcasts(
    settings: &LeaderSettings,
    deps: &TermDeps,
    term: &mut Term,
    dispatches: Vec<Dispatch>,
    now: UtcMillis,
) -> Option<Vec<Dispatch>> {
    let mut listed: HashMap<std::sync::Arc<str>, Vec<String>> = HashMap::new();
    let mut out = Vec::with_capacity(dispatches.len());
    for d in dispatches {
        if !d.broadcast {
            out.push(d);
            continue;
        }
        let Some(fanout) = d.broadcast_fanout_id() else {
            continue;
        };
        let queue = std::sync::Arc::clone(&d.spec.queue);
        let mut live = match listed.get(&queue) {
            Some(workers) => workers.clone(),
            None => {
                let workers = until_redis_answers(settings, deps, term, 1, || {
                    deps.queue.live_workers(&queue)
                })
                .await?;
                listed.insert(std::sync::Arc::clone(&queue), workers.clone());
                workers
            }
        };
        live.sort();
        let workers = until_redis_answers(settings, deps, term, 1, || {
            deps.queue.fix_fanout_workers(&queue, fanout, &live)
        })
        .await?;
        out.extend(term.dispatcher.address_broadcast(&d, workers, now));
    }
    Some(out)
}

/// Records in the history the broadcast fires that found no live worker (their end is in
/// the task's state already): the one attempt people see, failed, with the reason.
async fn record_unserved_fires(deps: &TermDeps, notices: &[Notice]) {
    for notice in notices {
        let Notice::NoLiveWorker {
            key,
            fanout,
            fire_at,
            run,
            queue,
            reason,
        } = notice
        else {
            continue;
        };
        let execution_id = *fanout;
        let now = deps.clock.now();
        let entry = ax_queue::HistoryEntry {
            unstarted: false,
            execution_id,
            fire_at: *fire_at,
            started_at: now,
            finished_at: now,
            lateness_ms: now.0 - fire_at.0,
            duration_ms: 0,
            end: ax_scheduler_core::AttemptEnd::new(
                ax_scheduler_core::AttemptOutcome::Failed,
                Some(reason.clone()),
            ),
            worker: String::new(),
            attempt: 0,
            queue: queue.to_string(),
            enqueued_at: None,
            first_enqueued_at: None,
            output: None,
            lineage: ax_queue::Lineage {
                run_id: *run,
                fanout_id: Some(*fanout),
                piece_index: None,
                piece_total: Some(0),
                target_worker: None,
                origin: None,
            },
        };
        if let Err(e) = deps
            .queue
            .record_history(&key.namespace, &key.id, &entry)
            .await
        {
            warn!(task_id = %key, error = %e, "cannot record a broadcast fire without workers in the history");
        }
    }
}

/// Enqueues `messages`, retrying whatever Redis answers (a refused write, `OOM`, `READONLY`,
/// `LOADING`, a lost connection: all the same here) with backoff, since every message is
/// deduplicated by its fire and a repeat is safe. No enqueue error ends the process. The
/// term is marked as holding unsent fires meanwhile, so nothing records them as fired.
/// `None` when the term ends first: leadership lost or shut down, or Redis refused for
/// longer than `enqueue_stall_limit`, in which case this leader steps down so that a
/// replica that can reach Redis leads and replays the fires by their misfire policy.
async fn enqueue_until_accepted(
    settings: &LeaderSettings,
    deps: &TermDeps,
    term: &mut Term,
    messages: &[ExecutionMessage],
) -> Option<Vec<EnqueueOutcome>> {
    until_redis_answers(settings, deps, term, messages.len(), || {
        deps.queue.enqueue_batch(messages)
    })
    .await
}

/// Runs `call` until Redis answers it, as [`enqueue_until_accepted`] says, for `pending`
/// fires waiting on it.
async fn until_redis_answers<T, F, Fut>(
    settings: &LeaderSettings,
    deps: &TermDeps,
    term: &mut Term,
    pending: usize,
    mut call: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ax_queue::Result<T>>,
{
    let mut backoff = ReconnectBackoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let started = Instant::now();
    let mut alerted = false;
    loop {
        let asked_at = Instant::now();
        let error = match call().await {
            Ok(answer) => {
                if alerted {
                    info!(
                        after_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "Redis accepts enqueues again"
                    );
                }
                term.unsent = false;
                term.redis_answered();
                return Some(answer);
            }
            Err(e) => e,
        };
        term.unsent = true;
        deps.metrics.backend_error(Backend::Redis);
        let stalled = started.elapsed();
        if !alerted && stalled >= ALERT_AFTER {
            alerted = true;
            send_alerts(
                deps,
                vec![Alert::backend_unavailable(
                    Backend::Redis.label(),
                    &error.to_string(),
                    pending,
                    stalled,
                    deps.clock.now(),
                )],
            );
        }
        // No answer at all (a partition), as against a refusal: given up on after
        // `redis_unreachable_limit` of silence, a refusal after `enqueue_stall_limit`.
        if error.is_unreachable() && term.redis_silent(settings, deps, asked_at, &error.to_string())
        {
            return None;
        }
        if stalled >= settings.enqueue_stall_limit {
            error!(
                error = %error,
                pending,
                stalled_ms = u64::try_from(stalled.as_millis()).unwrap_or(u64::MAX),
                "Redis refused enqueues for too long: stepping down so that a replica that can reach it leads"
            );
            term.cancel.cancel();
            return None;
        }
        let wait = backoff.next_delay(&mut rand::rng());
        warn!(error = %error, pending, retry_in = ?wait, "enqueue refused; the fires wait and are retried");
        tokio::select! {
            _ = term.cancel.cancelled() => return None,
            _ = tokio::time::sleep(wait) => {}
        }
        if !term.authority.is_valid() {
            warn!("leadership not valid any more; not enqueuing");
            term.cancel.cancel();
            return None;
        }
    }
}

/// How long refused enqueues go on before the alert (a blip is only logged).
const ALERT_AFTER: Duration = Duration::from_secs(2);

pub(super) fn send_alerts(deps: &TermDeps, alerts: Vec<Alert>) {
    if let Some(sender) = &deps.alerts {
        for alert in alerts {
            sender.send(alert);
        }
    }
}

#[cfg(test)]
mod tests;
