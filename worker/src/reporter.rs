//! How the pool tells the rest of ax what happened to each attempt.
//!
//! The engine implements [`ExecutionReporter`] (events for the leader, history, metrics), so
//! this crate needs no etcd. [`NoopReporter`] ignores everything; [`ChannelReporter`] sends
//! every event to a channel, for tests and simple embedding.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ax_queue::{ExecutionEventRecord, ExecutionMessage, HistoryEntry};
use ax_scheduler_core::ExecutionId;
use ax_scheduler_core::{AttemptEnd, AttemptOutput, UtcMillis};
use tokio::sync::mpsc;

/// One finished attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionReport {
    /// Execution id.
    pub execution_id: ExecutionId,
    /// Task namespace.
    pub namespace: std::sync::Arc<str>,
    /// Task id.
    pub task_id: std::sync::Arc<str>,
    /// Queue.
    pub queue: String,
    /// Handler name.
    pub handler: std::sync::Arc<str>,
    /// Worker id.
    pub worker_id: String,
    /// Attempt number, 0 for the first.
    pub attempt: u32,
    /// Schedule instant.
    pub fire_at: UtcMillis,
    /// When this attempt was due ([`ExecutionMessage::attempt_due`]): its lateness counts
    /// from here.
    pub due_at: UtcMillis,
    /// When the attempt started.
    pub started_at: UtcMillis,
    /// When it ended.
    pub finished_at: UtcMillis,
    /// How long it ran.
    pub duration: Duration,
    /// How it ended, and the retry that follows, if any.
    pub end: AttemptEnd,
    /// When the attempt was enqueued.
    pub enqueued_at: UtcMillis,
    /// When the execution's first attempt was enqueued.
    pub first_enqueued_at: UtcMillis,
    /// The start of the handler's answer, if it left one.
    pub output: Option<AttemptOutput>,
    /// The run and fan-out piece it belongs to, if any.
    pub lineage: ax_queue::Lineage,
    /// The attempt waited for its completion (`http.async`): its worker let go of it when
    /// it started awaiting ([`ExecutionReporter::on_awaiting`]), and it was ended elsewhere.
    pub awaited: bool,
    /// The scheduling shard of the message ([`ExecutionMessage::shard`]): whose owner hears
    /// of the end.
    pub shard: Option<u32>,
}

impl ExecutionReport {
    /// The report of an attempt of `message` (on `queue`) by `worker_id`, from `started_at`
    /// to `finished_at`, ended as `end`; not awaited, no output (set them after).
    pub fn of(
        message: &ax_queue::ExecutionMessage,
        queue: &str,
        worker_id: String,
        started_at: UtcMillis,
        finished_at: UtcMillis,
        end: AttemptEnd,
    ) -> Self {
        ExecutionReport {
            execution_id: message.execution_id,
            namespace: message.namespace.clone(),
            task_id: message.task_id.clone(),
            queue: queue.to_owned(),
            handler: message.handler.clone(),
            worker_id,
            attempt: message.attempt,
            fire_at: message.fire_at,
            due_at: message.attempt_due(),
            started_at,
            finished_at,
            duration: finished_at.since(started_at),
            end,
            enqueued_at: message.enqueued_at,
            first_enqueued_at: message.first_attempt_at,
            output: None,
            lineage: message.lineage.clone(),
            awaited: false,
            shard: message.shard,
        }
    }

    /// The attempt's end as the event the leader reads.
    pub fn finished_event(&self) -> ExecutionEventRecord {
        ExecutionEventRecord {
            namespace: self.namespace.clone(),
            task_id: self.task_id.clone(),
            execution_id: self.execution_id,
            fire_at: self.fire_at,
            attempt: self.attempt,
            kind: ax_scheduler_core::ExecutionEvent::Finished {
                at: self.finished_at,
                end: self.end.clone(),
            },
            shard: self.shard,
        }
    }

    /// The attempt as recorded in the task's history (written by the pool itself when
    /// `WorkerConfig::record_history` is set; a reporter that writes it can unset that).
    pub fn history(&self) -> HistoryEntry {
        HistoryEntry {
            unstarted: false,
            execution_id: self.execution_id,
            fire_at: self.fire_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            lateness_ms: self.started_at.0 - self.due_at.0,
            duration_ms: u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
            end: self.end.clone(),
            worker: self.worker_id.clone(),
            attempt: self.attempt,
            queue: self.queue.clone(),
            enqueued_at: Some(self.enqueued_at),
            first_enqueued_at: Some(self.first_enqueued_at),
            output: self.output.clone(),
            lineage: self.lineage.clone(),
        }
    }
}

/// A boxed reporter future.
pub type ReportFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Receives attempt events. Calls are awaited inline, so keep them quick (hand heavy work to
/// a task of your own).
pub trait ExecutionReporter: Send + Sync + 'static {
    /// An attempt is starting.
    fn on_started<'a>(
        &'a self,
        exec: &'a ExecutionMessage,
        worker_id: &'a str,
        at: UtcMillis,
    ) -> ReportFuture<'a>;
    /// An attempt ended.
    fn on_finished<'a>(&'a self, report: &'a ExecutionReport) -> ReportFuture<'a>;
    /// An attempt's receiver took it on (`http.async`): the worker let go of it, and its end
    /// comes later, possibly on another replica, as an [`ExecutionReport`] marked `awaited`.
    fn on_awaiting<'a>(
        &'a self,
        _exec: &'a ExecutionMessage,
        _worker_id: &'a str,
    ) -> ReportFuture<'a> {
        Box::pin(async {})
    }

    /// An execution of `queue` was taken after waiting `wait` for a slot of its concurrency
    /// key (called before its `on_started`). Ignored unless implemented.
    fn on_concurrency_wait(&self, queue: &str, wait: Duration) {
        let _ = (queue, wait);
    }

    /// The pool's slow start now lets `limit` attempts run at once (see
    /// [`crate::WorkerConfig::slow_start`]). Ignored unless implemented.
    fn on_concurrency_limit(&self, limit: usize) {
        let _ = limit;
    }

    /// The pool's background loop `name` panicked and starts again. Ignored unless
    /// implemented.
    fn on_loop_panic(&self, name: &str) {
        let _ = name;
    }

    /// The pool gave up an attempt of `exec` it held on `queue` without settling it: it could
    /// not reach Redis for most of the visibility timeout, so the reaper gives the message to
    /// another worker, and this one stopped the handler (or never started it) rather than
    /// run it twice. Ignored unless implemented.
    fn on_abandoned(&self, exec: &ExecutionMessage, queue: &str) {
        let _ = (exec, queue);
    }
}

/// Ignores every event.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopReporter;

impl ExecutionReporter for NoopReporter {
    fn on_started<'a>(
        &'a self,
        _: &'a ExecutionMessage,
        _: &'a str,
        _: UtcMillis,
    ) -> ReportFuture<'a> {
        Box::pin(async {})
    }
    fn on_finished<'a>(&'a self, _: &'a ExecutionReport) -> ReportFuture<'a> {
        Box::pin(async {})
    }
}

/// An event sent by [`ChannelReporter`].
#[derive(Clone, Debug)]
pub enum ReportEvent {
    /// An attempt started.
    Started {
        /// The message.
        exec: Box<ExecutionMessage>,
        /// Worker id.
        worker_id: String,
        /// When.
        at: UtcMillis,
    },
    /// An attempt ended.
    Finished(Box<ExecutionReport>),
}

/// Sends every event to an unbounded channel (events are dropped once the receiver is gone).
#[derive(Clone, Debug)]
pub struct ChannelReporter {
    tx: mpsc::UnboundedSender<ReportEvent>,
}

impl ChannelReporter {
    /// A reporter and the receiving end of its channel.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<ReportEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ChannelReporter { tx }, rx)
    }
}

impl ExecutionReporter for ChannelReporter {
    fn on_started<'a>(
        &'a self,
        exec: &'a ExecutionMessage,
        worker_id: &'a str,
        at: UtcMillis,
    ) -> ReportFuture<'a> {
        let _ = self.tx.send(ReportEvent::Started {
            exec: Box::new(exec.clone()),
            worker_id: worker_id.to_string(),
            at,
        });
        Box::pin(async {})
    }
    fn on_finished<'a>(&'a self, report: &'a ExecutionReport) -> ReportFuture<'a> {
        let _ = self
            .tx
            .send(ReportEvent::Finished(Box::new(report.clone())));
        Box::pin(async {})
    }
}
