//! The [`ExecutionReporter`] a worker of the cluster uses: what it tells the rest of ax
//! about each execution besides its end.
//!
//! One structured log line per execution comes from here at the default level: `finished`, with
//! lateness, duration and outcome (a warning when the attempt failed); `started` and the
//! leader's `enqueued` are debug. Each start goes to the leader as an event (a retry's start
//! marks its task RUNNING), and each start and end to the process's metrics
//! ([`WorkerMetrics`], which the process implements: this crate picks no metrics library).
//! An attempt's end is not written here: the pool settles its message with the end recorded
//! in the same step and relays it to the leader and the history itself, so an end cannot be
//! lost between the two. Nothing here alerts: the leader raises the failure alerts from the
//! end events, the one place every end reaches, whoever ended the attempt (see the
//! scheduler's `fire::failure_alerts`). Nothing here fails an execution: a report that
//! cannot be written is logged and counted.
//!
//! Starts go through a publisher task that writes whatever has piled up in one pipeline
//! ([`Queue::report_many`]), so an execution never waits on a Redis round trip for its
//! start; the channel is bounded, so a Redis outage slows executions down instead of
//! growing memory. A start waits [`START_DELAY`] in the publisher and is dropped if its end
//! comes meanwhile (see [`DelayedStarts`]); a start sent after its end is harmless, as the
//! leader ignores a start older than the task's last end.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ax_queue::{ExecutionEventRecord, ExecutionMessage, HistoryEntry, Queue};
use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, ExecutionEvent, UtcMillis};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::reporter::{ExecutionReport, ExecutionReporter, ReportFuture};

/// What the publisher reports to the process's metrics. Called on the execution path, so
/// each call must be cheap and must not block.
pub trait WorkerMetrics: Send + Sync {
    /// A write of reports to Redis failed.
    fn redis_error(&self);
    /// An attempt took a place of the pool (`delta` 1) or gave it back (`delta` -1).
    fn active_attempts(&self, delta: i64);
    /// A first, scheduled attempt on `queue` started `seconds` after its fire instant.
    fn start_lateness(&self, queue: &str, seconds: f64);
    /// An attempt on `queue` waited `seconds` for its concurrency key.
    fn concurrency_wait(&self, queue: &str, seconds: f64);
    /// An attempt of `handler` on `queue` ended with `end` after `seconds`.
    fn attempt(&self, queue: &str, handler: &str, end: &AttemptEnd, seconds: f64);
    /// The pool lets `limit` attempts run at once (its slow start, see
    /// [`crate::WorkerConfig::slow_start`]).
    fn concurrency_limit(&self, limit: usize);
    /// A background loop of the pool, `name`, panicked and starts again. Ignored unless
    /// implemented.
    fn loop_panicked(&self, name: &str) {
        let _ = name;
    }
    /// An attempt on `queue` was given up unsettled, Redis unreachable. Ignored unless
    /// implemented.
    fn attempt_abandoned(&self, queue: &str) {
        let _ = queue;
    }
}

/// Reports every execution to Redis: events for the leader, history, and metrics.
pub struct QueueReporter {
    reports: mpsc::Sender<Report>,
    metrics: Arc<dyn WorkerMetrics>,
}

/// What the publisher is told: a start to send, or that an attempt ended (so its start,
/// if still delayed, need not be).
enum Report {
    Started(ExecutionEventRecord),
    Ended((ExecutionId, u32)),
}

/// Reports waiting for the publisher at most; executions wait beyond that.
const REPORT_BUFFER: usize = 10_000;
/// Reports written in one pipeline at most.
const REPORT_BATCH: usize = 512;

impl QueueReporter {
    /// A reporter writing to `queue` and `metrics`. Its publisher runs on `tracker` until
    /// the reporter is dropped and everything sent before is written.
    pub fn new(queue: Queue, metrics: Arc<dyn WorkerMetrics>, tracker: &TaskTracker) -> Self {
        let (reports, rx) = mpsc::channel(REPORT_BUFFER);
        tracker.spawn(publish(queue, Arc::clone(&metrics), rx));
        QueueReporter { reports, metrics }
    }

    async fn send(&self, report: Report) {
        if self.reports.send(report).await.is_err() {
            // Only after the publisher ended, which it does once this reporter is gone.
            warn!("execution report dropped: the publisher has stopped");
        }
    }
}

/// Writes reports in batches until every sender is gone and the channel is drained.
async fn publish(queue: Queue, metrics: Arc<dyn WorkerMetrics>, mut rx: mpsc::Receiver<Report>) {
    let mut incoming = Vec::with_capacity(REPORT_BATCH);
    let mut delayed = DelayedStarts::default();
    let mut out = Vec::with_capacity(REPORT_BATCH);
    loop {
        // Woken by reports, or by the oldest delayed start coming due.
        let closed = match delayed.next_due() {
            Some(due) => tokio::select! {
                n = rx.recv_many(&mut incoming, REPORT_BATCH) => n == 0,
                _ = tokio::time::sleep_until(due) => false,
            },
            None => rx.recv_many(&mut incoming, REPORT_BATCH).await == 0,
        };
        delayed.take(incoming.drain(..), Instant::now(), &mut out);
        if closed {
            delayed.release_all(&mut out);
        }
        if !out.is_empty() {
            if let Err(e) = queue.report_many(&out).await {
                metrics.redis_error();
                warn!(reports = out.len(), error = %e, "could not report executions");
            }
            out.clear();
        }
        if closed {
            return;
        }
    }
}

/// How long a `started` event waits for its attempt's end before it is sent.
const START_DELAY: Duration = Duration::from_millis(200);

/// `started` events delayed for [`START_DELAY`]: an end that comes meanwhile replaces its
/// start, since the end settles the task on its own (a start only marks a retry RUNNING,
/// which the leader writes no sooner than `running_write_delay` anyway). Most executions are
/// shorter than that, so most send one stream entry instead of two, which Redis writes and
/// the leader reads and acknowledges. A pure step: reports and the time in, reports out.
#[derive(Default)]
struct DelayedStarts {
    by_attempt: HashMap<(ExecutionId, u32), ExecutionEventRecord>,
    /// Delayed starts in arrival order; an entry whose start was replaced is passed over.
    order: VecDeque<(Instant, (ExecutionId, u32))>,
}

/// A start to write, as [`Queue::report_many`] takes it.
type Outgoing = (ExecutionEventRecord, Option<HistoryEntry>);

impl DelayedStarts {
    /// Takes new reports and appends to `out` what is to be sent at `now`: the starts delayed
    /// long enough, minus those whose attempts ended.
    fn take(
        &mut self,
        reports: impl Iterator<Item = Report>,
        now: Instant,
        out: &mut Vec<Outgoing>,
    ) {
        for report in reports {
            match report {
                Report::Started(event) => {
                    let attempt = (event.execution_id, event.attempt);
                    self.order.push_back((now, attempt));
                    self.by_attempt.insert(attempt, event);
                }
                Report::Ended(attempt) => {
                    self.by_attempt.remove(&attempt);
                }
            }
        }
        while let Some((since, attempt)) = self.order.front().copied() {
            if now < since + START_DELAY && self.by_attempt.contains_key(&attempt) {
                break;
            }
            self.order.pop_front();
            if let Some(start) = self.by_attempt.remove(&attempt) {
                out.push((start, None));
            }
        }
    }

    /// When the oldest delayed start is due.
    fn next_due(&self) -> Option<Instant> {
        self.order.front().map(|(since, _)| *since + START_DELAY)
    }

    /// Appends every delayed start to `out` (the publisher is stopping).
    fn release_all(&mut self, out: &mut Vec<Outgoing>) {
        for (_, attempt) in self.order.drain(..) {
            if let Some(start) = self.by_attempt.remove(&attempt) {
                out.push((start, None));
            }
        }
    }
}

impl ExecutionReporter for QueueReporter {
    fn on_concurrency_wait(&self, queue: &str, wait: std::time::Duration) {
        self.metrics.concurrency_wait(queue, wait.as_secs_f64());
    }

    fn on_concurrency_limit(&self, limit: usize) {
        self.metrics.concurrency_limit(limit);
    }

    fn on_loop_panic(&self, name: &str) {
        self.metrics.loop_panicked(name);
    }

    fn on_abandoned(&self, exec: &ExecutionMessage, queue: &str) {
        let _ = exec;
        self.metrics.attempt_abandoned(queue);
    }

    fn on_started<'a>(
        &'a self,
        exec: &'a ExecutionMessage,
        worker_id: &'a str,
        at: UtcMillis,
    ) -> ReportFuture<'a> {
        Box::pin(async move {
            let lateness_ms = at.0 - exec.attempt_due().0;
            self.metrics.active_attempts(1);
            // The schedule's lateness only: a run by hand, a backfill or a requeue is due when
            // asked for, and a retry waits on purpose.
            if exec.attempt == 0 && exec.origin().is_scheduled() {
                self.metrics
                    .start_lateness(&exec.queue, lateness_ms.max(0) as f64 / 1000.0);
            }
            // Debug, as the leader's `enqueued`: one line per execution at info (`finished`,
            // with the start's lateness), since each line costs CPU on the fire path.
            debug!(
                task_id = %format!("{}/{}", exec.namespace, exec.task_id),
                execution_id = %exec.execution_id,
                fire_at = %exec.fire_at,
                lateness_ms,
                attempt = exec.attempt_number(),
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
                shard: exec.shard,
            };
            self.send(Report::Started(event)).await;
        })
    }

    fn on_finished<'a>(&'a self, report: &'a ExecutionReport) -> ReportFuture<'a> {
        Box::pin(async move {
            // An awaiting attempt gave its place back when it started awaiting (`on_awaiting`).
            if !report.awaited {
                self.metrics.active_attempts(-1);
            }
            let end = &report.end;
            let task = format!("{}/{}", report.namespace, report.task_id);
            self.send(Report::Ended((report.execution_id, report.attempt)))
                .await;
            if end.outcome == AttemptOutcome::Released {
                info!(task_id = %task, execution_id = %report.execution_id, attempt = report.attempt.saturating_add(1), "released unfinished (shutdown); it runs elsewhere");
                return;
            }
            self.metrics.attempt(
                &report.queue,
                &report.handler,
                end,
                report.duration.as_secs_f64(),
            );
            let lateness_ms = report.started_at.0 - report.due_at.0;
            let duration_ms = u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX);
            // The one line per execution at the default level; a failure is a warning.
            macro_rules! finished {
                ($level:expr) => {
                    tracing::event!(
                        $level,
                        task_id = %task,
                        execution_id = %report.execution_id,
                        fire_at = %report.fire_at,
                        lateness_ms,
                        attempt = report.attempt.saturating_add(1),
                        duration_ms,
                        outcome = end.label(),
                        retry_at = ?end.retry_at.map(|t| t.to_rfc3339()),
                        error = end.error.as_deref().unwrap_or(""),
                        "finished"
                    )
                };
            }
            if end.outcome.is_failure() {
                finished!(tracing::Level::WARN);
            } else {
                finished!(tracing::Level::INFO);
            }
        })
    }

    fn on_awaiting<'a>(
        &'a self,
        exec: &'a ExecutionMessage,
        worker_id: &'a str,
    ) -> ReportFuture<'a> {
        Box::pin(async move {
            self.metrics.active_attempts(-1);
            debug!(
                task_id = %format!("{}/{}", exec.namespace, exec.task_id),
                execution_id = %exec.execution_id,
                attempt = exec.attempt_number(),
                worker = worker_id,
                "accepted by its receiver; waiting for its completion"
            );
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn event(id: u128, attempt: u32, finished: bool) -> Report {
        let execution_id = ExecutionId::from_u128(id);
        if finished {
            return Report::Ended((execution_id, attempt));
        }
        Report::Started(ExecutionEventRecord {
            namespace: "ns".into(),
            task_id: "t".into(),
            execution_id,
            fire_at: UtcMillis(1),
            attempt,
            kind: ExecutionEvent::Started { at: UtcMillis(2) },
            shard: None,
        })
    }

    fn starts(out: &[Outgoing]) -> Vec<(u128, u32)> {
        out.iter()
            .map(|(e, _)| {
                assert!(matches!(e.kind, ExecutionEvent::Started { .. }));
                (e.execution_id.as_u128(), e.attempt)
            })
            .collect()
    }

    #[test]
    fn a_start_is_sent_only_when_its_end_does_not_follow_within_the_delay() {
        let t0 = Instant::now();
        let mut delayed = DelayedStarts::default();
        let mut out = Vec::new();
        // 1 ends in the same batch, 2 ends 100 ms later, 3 runs long, 4 is a retry whose
        // first attempt's end comes.
        delayed.take(
            [
                event(1, 0, false),
                event(2, 0, false),
                event(3, 0, false),
                event(1, 0, true),
            ]
            .into_iter(),
            t0,
            &mut out,
        );
        assert_eq!(starts(&out), []);
        assert_eq!(delayed.next_due(), Some(t0 + START_DELAY));
        let t1 = t0 + Duration::from_millis(100);
        delayed.take(
            [event(2, 0, true), event(4, 1, false), event(4, 0, true)].into_iter(),
            t1,
            &mut out,
        );
        assert_eq!(starts(&out), []);
        // At the delay's end the long one's start goes; the retry's start waits on.
        delayed.take(std::iter::empty(), t0 + START_DELAY, &mut out);
        assert_eq!(starts(&out), [(3, 0)]);
        assert_eq!(delayed.next_due(), Some(t1 + START_DELAY));
        out.clear();
        // Stopping sends what is still delayed.
        delayed.release_all(&mut out);
        assert_eq!(starts(&out), [(4, 1)]);
        assert_eq!(delayed.next_due(), None);
    }
}
