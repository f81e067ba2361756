//! Operator control: kill executions, pause and resume queues.
//!
//! The queue library does the atomic part (remove a waiting execution, or leave a kill order
//! its worker polls for; see `ax_queue`'s `control` module). What is left here is finding the
//! queue and telling the leader: an execution the kill ends itself (removed before it ran,
//! or waiting for its completion) has no worker to report its end, so its `killed` record
//! ([`killed_record`]) goes into the queue's end log in the kill's own script and is relayed
//! from there to the event stream and the history, as a worker's settle is; if this replica
//! dies before the relay, the log's sweeper relays it. The leader then settles the task
//! (overlap holds, status) as for a worker's report. A running execution's end is reported
//! by its worker once it stopped.
//!
//! An execution id says nothing of its queue, so a kill by id tries the queues ax knows of
//! (as the dead-letter commands do); a kill of a task looks only in the task's queue.

use ax_queue::{AwaitingRecord, EndRecord, ExecutionMessage, Kill, KillState, StopOrder};
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, ExecutionId, UtcMillis};

use super::{errors, tasks::not_found, Backend};
use crate::api::{ApiError, KillResult, KilledExecution, QueueState, TaskKey};

/// The worker name recorded for an execution killed before any worker took it.
const NO_WORKER: &str = "-";

fn killed(queue: &str, k: &Kill) -> KilledExecution {
    KilledExecution {
        execution_id: k.execution_id,
        namespace: k.message.as_ref().map(|m| m.namespace.to_string()),
        task_id: k.message.as_ref().map(|m| m.task_id.to_string()),
        queue: queue.to_owned(),
        state: k.state.as_str().to_owned(),
    }
}

impl Backend {
    pub(super) async fn kill_of_task(
        &self,
        key: &TaskKey,
        execution: Option<ExecutionId>,
    ) -> Result<KillResult, ApiError> {
        // An invalid spec has no queue one can trust: look in every queue ax knows of.
        let queues = match self.registry.get(&key.namespace, &key.id).await {
            Ok(Some(t)) => vec![t.spec.queue.to_string()],
            Ok(None) => return Err(not_found(key)),
            Err(ax_registry::RegistryError::Invalid { .. }) => self.known_queues().await?,
            Err(e) => return Err(errors::registry(e)),
        };
        let q = self.queue().await?;
        let now = self.wall.now();
        let recorder = |m: &ExecutionMessage, a: Option<&AwaitingRecord>| killed_record(m, a, now);
        let mut out = KillResult::default();
        for name in &queues {
            let kills = match execution {
                Some(id) => vec![q
                    .kill_execution_recorded(name, id, Some(&recorder))
                    .await
                    .map_err(errors::queue)?],
                None => q
                    .kill_task_recorded(name, &key.namespace, &key.id, Some(&recorder))
                    .await
                    .map_err(errors::queue)?,
            };
            for k in kills.iter().filter(|k| k.state != KillState::Gone) {
                self.report_removed(k).await;
                out.killed.push(killed(name, k));
            }
        }
        if out.killed.is_empty() {
            return Err(ApiError::NotFound(match execution {
                Some(id) => format!(
                    "execution {id} of task {key} is not waiting, retrying or running (it finished, or never existed)"
                ),
                None => format!("task {key} has no execution waiting, retrying or running"),
            }));
        }
        Ok(out)
    }

    pub(super) async fn kill_by_id(&self, id: ExecutionId) -> Result<KillResult, ApiError> {
        let q = self.queue().await?;
        let queues = self.known_queues().await?;
        let now = self.wall.now();
        let recorder = |m: &ExecutionMessage, a: Option<&AwaitingRecord>| killed_record(m, a, now);
        for name in &queues {
            let k = q
                .kill_execution_recorded(name, id, Some(&recorder))
                .await
                .map_err(errors::queue)?;
            if k.state != KillState::Gone {
                self.report_removed(&k).await;
                return Ok(KillResult {
                    killed: vec![killed(name, &k)],
                });
            }
        }
        Err(ApiError::NotFound(format!(
            "execution {id} is not waiting, retrying or running in queues {} (it finished, or never existed)",
            queues.join(", ")
        )))
    }

    /// Relays the `killed` end of an execution the kill ended itself from the end log, where
    /// the kill's script put it. The kill itself is done: a failure here is logged, and the
    /// log's sweeper relays the end a few seconds later.
    async fn report_removed(&self, k: &Kill) {
        let Some(end) = k.end.clone() else {
            return;
        };
        let Ok(q) = self.queue().await else { return };
        if let Err(e) = q.relay_ends(&[end]).await {
            tracing::warn!(execution_id = %k.execution_id, error = %e, "killed; its end is in the queue's end log, whose sweeper tells the leader");
        }
    }

    /// `name` if ax knows the queue, else not found (a typo must not pause nothing).
    pub(super) async fn known_queue(&self, name: &str) -> Result<(), ApiError> {
        let queues = self.known_queues().await?;
        if queues.iter().any(|q| q == name) {
            return Ok(());
        }
        Err(ApiError::NotFound(format!(
            "queue {name} is not used by any task nor served by this configuration's workers (known: {})",
            queues.join(", ")
        )))
    }

    pub(super) async fn set_queue_paused(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<QueueState, ApiError> {
        self.known_queue(name).await?;
        let q = self.queue().await?;
        let changed = if paused {
            q.pause_queue(name).await
        } else {
            q.resume_queue(name).await
        }
        .map_err(errors::queue)?;
        tracing::info!(queue = name, paused, changed, "queue pause state set");
        Ok(QueueState {
            name: name.to_owned(),
            paused,
        })
    }
}

/// The end record of an execution a kill ends itself: `killed`, as the history and the
/// leader read a worker's end. One removed before it ran never started (no worker); one that
/// waited for its completion started on the worker its awaiting record names.
fn killed_record(
    m: &ExecutionMessage,
    awaiting: Option<&AwaitingRecord>,
    now: UtcMillis,
) -> EndRecord {
    let end = AttemptEnd::new(
        AttemptOutcome::Killed,
        Some(StopOrder::Killed.reason().to_owned()),
    );
    let (worker, started) = match awaiting {
        Some(rec) => (rec.worker.clone(), rec.started_at),
        None => (NO_WORKER.to_owned(), now),
    };
    let report = ax_worker::ExecutionReport {
        awaited: awaiting.is_some(),
        ..ax_worker::ExecutionReport::of(m, &m.queue, worker, started, now, end)
    };
    let mut history = report.history();
    history.unstarted = awaiting.is_none();
    EndRecord {
        event: report.finished_event(),
        history: Some(history),
    }
}
