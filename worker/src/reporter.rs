//! How the pool tells the rest of ax what happened to each attempt.
//!
//! The engine implements [`ExecutionReporter`] (execution state in etcd, metrics, alerts), so
//! this crate needs no etcd. [`NoopReporter`] ignores everything; [`ChannelReporter`] sends
//! every event to a channel, for tests and simple embedding.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ax_queue::{ExecutionMessage, HistoryEntry};
use ax_scheduler_core::UtcMillis;
use tokio::sync::mpsc;
use uuid::Uuid;

/// How an attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handler succeeded; the message is acked.
    Succeeded,
    /// The handler returned an error. `retrying`: a next attempt waits in the delayed set;
    /// otherwise the execution went to the dead-letter queue.
    Failed {
        /// The handler's error.
        error: String,
        /// Whether a retry is scheduled.
        retrying: bool,
    },
    /// The attempt ran past its timeout and was stopped.
    TimedOut {
        /// Whether a retry is scheduled.
        retrying: bool,
    },
    /// The handler panicked.
    Panicked {
        /// The panic message.
        message: String,
        /// Whether a retry is scheduled.
        retrying: bool,
    },
    /// The execution went to the dead-letter queue without running (e.g. unknown handler).
    DeadLettered {
        /// Why.
        reason: String,
    },
    /// Stopped because a newer execution of the task replaced it (overlap `replace`); the
    /// message is settled, not retried.
    Killed,
    /// The worker stopped before the attempt finished; the message went back to the queue.
    Released,
}

impl Outcome {
    /// Whether this outcome put the execution in the dead-letter queue.
    pub fn is_dead_lettered(&self) -> bool {
        match self {
            Outcome::DeadLettered { .. } => true,
            Outcome::Failed { retrying, .. }
            | Outcome::TimedOut { retrying }
            | Outcome::Panicked { retrying, .. } => !retrying,
            Outcome::Succeeded | Outcome::Released | Outcome::Killed => false,
        }
    }
}

/// One finished attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionReport {
    /// Execution id.
    pub execution_id: Uuid,
    /// Task namespace.
    pub namespace: String,
    /// Task id.
    pub task_id: String,
    /// Queue.
    pub queue: String,
    /// Handler name.
    pub handler: String,
    /// Worker id.
    pub worker_id: String,
    /// Attempt number, 0 for the first.
    pub attempt: u32,
    /// Schedule instant.
    pub fire_at: UtcMillis,
    /// When the attempt started.
    pub started_at: UtcMillis,
    /// When it ended.
    pub finished_at: UtcMillis,
    /// How long it ran.
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// When the retry is due, if one was scheduled.
    pub retry_at: Option<UtcMillis>,
    /// The attempt as recorded in the task's history (written by the pool itself when
    /// `WorkerConfig::record_history` is set; a reporter that writes it can unset that).
    pub history: HistoryEntry,
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
