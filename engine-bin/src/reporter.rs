//! What a worker on this replica tells the rest of ax about each execution.
//!
//! Three structured log lines per execution come from here and the leader: `enqueued` (with
//! lateness, by the leader), `started` and `finished` (with duration and outcome). Each
//! start and end also goes to the leader as an event (task states, overlap holds, breaker)
//! with the task's history entry, and to this replica's metrics; final failures raise
//! alerts. Nothing here fails an execution: a report that cannot be written is logged and
//! counted.
//!
//! Reports go through a publisher task that writes whatever has piled up in one pipeline
//! ([`Queue::report_many`]). Awaiting a Redis round trip per report inside the execution
//! held the worker's concurrency permit for two extra round trips per execution, which
//! bounded a replica at its default concurrency to about 4 000 no-op executions a second;
//! the leader reads events every 100 ms anyway, so a report a few milliseconds later changes
//! nothing for it. The channel is bounded, so a Redis outage slows executions down instead
//! of growing memory; a started report is always sent before the finished report of the
//! same execution, and the publisher writes in order.

use std::sync::Arc;

use ax_alerting::{Alert, AlertSender};
use ax_queue::{ExecutionEventRecord, ExecutionMessage, HistoryEntry, Queue};
use ax_scheduler_core::{AttemptOutcome, ExecutionEvent, UtcMillis};
use ax_worker::{ExecutionReport, ExecutionReporter, ReportFuture};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::metrics::{Metrics, BACKEND_REDIS};

/// The engine's [`ExecutionReporter`].
pub struct EngineReporter {
    reports: mpsc::Sender<Report>,
    metrics: Arc<Metrics>,
    alerts: Option<AlertSender>,
}

/// An event for the leader, with the history entry of a finished attempt.
type Report = (ExecutionEventRecord, Option<HistoryEntry>);

/// Reports waiting for the publisher at most; executions wait beyond that.
const REPORT_BUFFER: usize = 10_000;
/// Reports written in one pipeline at most.
const REPORT_BATCH: usize = 512;

impl EngineReporter {
    /// A reporter writing to `queue`, `metrics` and `alerts`. Its publisher runs on
    /// `tracker` until the reporter is dropped and everything sent before is written.
    pub fn new(
        queue: Queue,
        metrics: Arc<Metrics>,
        alerts: Option<AlertSender>,
        tracker: &TaskTracker,
    ) -> Self {
        let (reports, rx) = mpsc::channel(REPORT_BUFFER);
        tracker.spawn(publish(queue, Arc::clone(&metrics), rx));
        EngineReporter {
            reports,
            metrics,
            alerts,
        }
    }

    async fn send(&self, event: ExecutionEventRecord, history: Option<HistoryEntry>) {
        if self.reports.send((event, history)).await.is_err() {
            // Only after the publisher ended, which it does once this reporter is gone.
            warn!("execution report dropped: the publisher has stopped");
        }
    }
}

/// Writes reports in batches until every sender is gone and the channel is drained.
async fn publish(queue: Queue, metrics: Arc<Metrics>, mut rx: mpsc::Receiver<Report>) {
    let mut batch = Vec::with_capacity(REPORT_BATCH);
    while rx.recv_many(&mut batch, REPORT_BATCH).await > 0 {
        drop_superseded_starts(&mut batch);
        if let Err(e) = queue.report_many(&batch).await {
            metrics.backend_error(BACKEND_REDIS);
            warn!(reports = batch.len(), error = %e, "could not report executions");
        }
        batch.clear();
    }
}

/// Drops the `started` events whose attempt's end is in the same batch: the end settles the
/// task on its own (a start only marks a retry RUNNING, which its end replaces), and under
/// load most short executions start and end within one batch, so this halves the stream
/// entries Redis writes, and the leader reads and acknowledges, per execution.
fn drop_superseded_starts(batch: &mut Vec<Report>) {
    let ended: std::collections::HashSet<(uuid::Uuid, u32)> = batch
        .iter()
        .filter(|(e, _)| matches!(e.kind, ExecutionEvent::Finished { .. }))
        .map(|(e, _)| (e.execution_id, e.attempt))
        .collect();
    if !ended.is_empty() {
        batch.retain(|(e, _)| {
            !matches!(e.kind, ExecutionEvent::Started { .. })
                || !ended.contains(&(e.execution_id, e.attempt))
        });
    }
}

/// The alerts a finished attempt raises. Every failed attempt is a (warn) failure alert,
/// de-duplicated per task by the alert manager; the end of the line is a (critical)
/// dead-letter alert. Attempts are counted from 1 here, as people (and the history) count
/// them; the queue counts from 0.
fn failure_alerts(report: &ExecutionReport) -> Vec<Alert> {
    // A run stopped because a newer one replaced it (overlap `replace`) did not fail.
    if !report.end.outcome.is_failure() {
        return Vec::new();
    }
    let attempt = report.attempt.saturating_add(1);
    let reason = report.end.error.as_deref().unwrap_or_default();
    let mut alerts = vec![Alert::task_failed(
        &*report.namespace,
        &*report.task_id,
        attempt,
        reason,
        report.finished_at,
    )];
    if report.end.is_dead_lettered() {
        alerts.push(Alert::task_dead_lettered(
            &*report.namespace,
            &*report.task_id,
            attempt,
            reason,
            report.finished_at,
        ));
    }
    alerts
}

impl ExecutionReporter for EngineReporter {
    fn on_started<'a>(
        &'a self,
        exec: &'a ExecutionMessage,
        worker_id: &'a str,
        at: UtcMillis,
    ) -> ReportFuture<'a> {
        Box::pin(async move {
            let lateness_ms = at.0 - exec.fire_at.0;
            self.metrics.active_workers.inc();
            if exec.attempt == 0 && !exec.run_now {
                self.metrics
                    .record_start_lateness(&exec.queue, lateness_ms.max(0) as f64 / 1000.0);
            }
            // Debug, as the leader's `enqueued`: one line per execution at info (`finished`,
            // with the start's lateness), since each line costs CPU on the fire path.
            debug!(
                task_id = %format!("{}/{}", exec.namespace, exec.task_id),
                execution_id = %exec.execution_id,
                fire_at = %exec.fire_at,
                lateness_ms,
                attempt = exec.attempt,
                worker = worker_id,
                handler = %exec.handler,
                "started"
            );
            let event = ExecutionEventRecord {
                namespace: exec.namespace.clone(),
                task_id: exec.task_id.clone(),
                execution_id: exec.execution_id,
                fire_at: exec.fire_at,
                attempt: exec.attempt,
                kind: ExecutionEvent::Started { at },
            };
            self.send(event, None).await;
        })
    }

    fn on_finished<'a>(&'a self, report: &'a ExecutionReport) -> ReportFuture<'a> {
        Box::pin(async move {
            self.metrics.active_workers.dec();
            let end = &report.end;
            let task = format!("{}/{}", report.namespace, report.task_id);
            if end.outcome == AttemptOutcome::Released {
                info!(task_id = %task, execution_id = %report.execution_id, attempt = report.attempt, "released unfinished (shutdown); it runs elsewhere");
                return;
            }
            self.metrics.record_attempt(
                &report.queue,
                &report.handler,
                end,
                report.duration.as_secs_f64(),
            );
            let lateness_ms = report.started_at.0 - report.fire_at.0;
            let duration_ms = u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX);
            let retry_at = end.retry_at.map(|t| t.to_rfc3339());
            let error = end.error.as_deref().unwrap_or("");
            // The one line per execution at the default level; a failure is a warning.
            if end.outcome.is_failure() {
                warn!(
                    task_id = %task,
                    execution_id = %report.execution_id,
                    fire_at = %report.fire_at,
                    lateness_ms,
                    attempt = report.attempt,
                    duration_ms,
                    outcome = end.label(),
                    retry_at = ?retry_at,
                    error,
                    "finished"
                );
            } else {
                info!(
                    task_id = %task,
                    execution_id = %report.execution_id,
                    fire_at = %report.fire_at,
                    lateness_ms,
                    attempt = report.attempt,
                    duration_ms,
                    outcome = end.label(),
                    "finished"
                );
            }
            if let Some(alerts) = &self.alerts {
                for alert in failure_alerts(report) {
                    alerts.send(alert);
                }
            }
            let event = ExecutionEventRecord {
                namespace: report.namespace.clone(),
                task_id: report.task_id.clone(),
                execution_id: report.execution_id,
                fire_at: report.fire_at,
                attempt: report.attempt,
                kind: ExecutionEvent::Finished {
                    at: report.finished_at,
                    end: end.clone(),
                },
            };
            self.send(event, Some(report.history())).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ax_alerting::AlertKind;
    use ax_scheduler_core::AttemptEnd;

    use super::*;

    fn event(id: u128, attempt: u32, finished: bool) -> Report {
        let kind = if finished {
            ExecutionEvent::Finished {
                at: UtcMillis(3),
                end: AttemptEnd::new(AttemptOutcome::Succeeded, None),
            }
        } else {
            ExecutionEvent::Started { at: UtcMillis(2) }
        };
        let record = ExecutionEventRecord {
            namespace: "ns".into(),
            task_id: "t".into(),
            execution_id: uuid::Uuid::from_u128(id),
            fire_at: UtcMillis(1),
            attempt,
            kind,
        };
        (record, None)
    }

    #[test]
    fn a_start_whose_end_is_in_the_same_batch_is_not_sent() {
        let mut batch = vec![
            event(1, 0, false),
            event(2, 0, false),
            event(1, 0, true),
            // Another attempt of the same execution: its start stays.
            event(3, 0, true),
            event(3, 1, false),
        ];
        drop_superseded_starts(&mut batch);
        let left: Vec<(u128, u32, bool)> = batch
            .iter()
            .map(|(e, _)| {
                let finished = matches!(e.kind, ExecutionEvent::Finished { .. });
                (e.execution_id.as_u128(), e.attempt, finished)
            })
            .collect();
        assert_eq!(
            left,
            [(2, 0, false), (1, 0, true), (3, 0, true), (3, 1, false)]
        );
    }

    fn report(attempt: u32, end: AttemptEnd) -> ExecutionReport {
        ExecutionReport {
            execution_id: uuid::Uuid::nil(),
            namespace: "ns".into(),
            task_id: "t".into(),
            queue: "default".into(),
            handler: "http".into(),
            worker_id: "w".into(),
            attempt,
            fire_at: UtcMillis(1_000),
            started_at: UtcMillis(2_000),
            finished_at: UtcMillis(3_000),
            duration: Duration::from_secs(1),
            end,
        }
    }

    #[test]
    fn alerts_count_attempts_from_one() {
        let mut failed = AttemptEnd::new(AttemptOutcome::Failed, Some("HTTP 500".into()));
        failed.retry_at = Some(UtcMillis(9_000));
        let alerts = failure_alerts(&report(0, failed));
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].kind, AlertKind::TaskFailed);
        assert_eq!(alerts[0].message, "Attempt 1 failed: HTTP 500");
        assert_eq!(alerts[0].fields["attempt"], "1");

        let exhausted = AttemptEnd::new(AttemptOutcome::Failed, Some("HTTP 500".into()));
        let alerts = failure_alerts(&report(2, exhausted));
        assert_eq!(alerts.len(), 2);
        assert_eq!(alerts[0].fields["attempt"], "3");
        assert_eq!(alerts[1].kind, AlertKind::TaskDeadLettered);
        assert_eq!(alerts[1].fields["attempts"], "3");
        assert_eq!(
            alerts[1].message,
            "Gave up after 3 attempts; last error: HTTP 500"
        );

        assert!(failure_alerts(&report(0, AttemptEnd::succeeded())).is_empty());
        let killed = AttemptEnd::new(AttemptOutcome::Killed, Some("replaced".into()));
        assert!(
            failure_alerts(&report(0, killed)).is_empty(),
            "a replaced run is not a failure"
        );
    }
}
