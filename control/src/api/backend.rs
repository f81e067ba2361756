//! The operations behind the API, as one trait that the HTTP routes and the CLI both call.
//!
//! The trait uses boxed futures rather than `async fn` so it can be used as
//! `dyn ApiBackend`: the server swaps in its backend once connected, and tests put an
//! in-memory one behind the same routes.

use std::future::Future;
use std::pin::Pin;

use ax_scheduler_core::ExecutionId;

use super::{
    ApiError, BackfillParams, BackfillResult, CompletionReply, CompletionRequest, DeadLetter,
    DlqRequeue, DlqRequeued, ExecutionList, ExecutionMatches, ExecutionQuery, ExecutionRecord,
    ExecutionStory, KillResult, PutOptions, PutTaskResult, QueueContents, QueueState,
    ScheduleBatch, ScheduleReply, ScheduledPage, ScheduledView, StatusView, TaskKey, TaskList,
    TaskQuery, TaskView, TriggerParams, TriggerResult,
};
use crate::audit::{AuditPage, AuditQuery, AuditRecord};

/// What a backend call returns.
pub type ApiFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// The operations behind `/api/v1`. Implemented over etcd and Redis by the engine.
pub trait ApiBackend: Send + Sync {
    /// One page of the tasks `query` selects, in key order (namespace, then id).
    fn list_tasks(&self, query: TaskQuery) -> ApiFuture<'_, TaskList>;
    /// One task; [`ApiError::NotFound`] if it does not exist.
    fn get_task(&self, key: TaskKey) -> ApiFuture<'_, TaskView>;
    /// Validates `spec` (the JSON a user wrote) and, unless `opts.dry_run`, registers it.
    /// [`ApiError::Invalid`] lists every problem (a handler no live worker serves among
    /// them, unless `opts.allow_unserved_handler`); [`ApiError::Conflict`] when a newer
    /// version is registered.
    fn put_task(&self, spec: serde_json::Value, opts: PutOptions) -> ApiFuture<'_, PutTaskResult>;
    /// Deletes a task.
    fn delete_task(&self, key: TaskKey) -> ApiFuture<'_, ()>;
    /// Pauses a task.
    fn pause(&self, key: TaskKey) -> ApiFuture<'_, TaskView>;
    /// Resumes a task.
    fn resume(&self, key: TaskKey) -> ApiFuture<'_, TaskView>;
    /// Runs a task now, outside its schedule, as `params` ask.
    fn trigger(&self, key: TaskKey, params: TriggerParams) -> ApiFuture<'_, TriggerResult>;
    /// Runs the task's fires in a past range now, oldest first, each once.
    fn backfill(&self, key: TaskKey, params: BackfillParams) -> ApiFuture<'_, BackfillResult>;
    /// Pauses a namespace: none of its tasks fires until it is resumed. `by` names who.
    fn pause_namespace(&self, namespace: String, by: String) -> ApiFuture<'_, ()>;
    /// Resumes a namespace; [`ApiError::NotFound`] when it was not paused.
    fn resume_namespace(&self, namespace: String) -> ApiFuture<'_, ()>;
    /// The last `limit` executions of a task, newest first.
    fn history(&self, key: TaskKey, limit: usize) -> ApiFuture<'_, Vec<ExecutionRecord>>;
    /// One page of the attempts of every task `query` selects, newest first.
    fn executions(&self, query: ExecutionQuery) -> ApiFuture<'_, ExecutionList>;
    /// One execution's story; [`ApiError::NotFound`] when nothing of it is recorded.
    fn execution(&self, id: ExecutionId) -> ApiFuture<'_, ExecutionStory>;
    /// The executions whose id starts or ends with `fragment`, newest first, from a bounded
    /// search of the history across tasks; [`ApiError::Invalid`] for a fragment too short or
    /// not hex.
    fn find_executions(&self, fragment: String) -> ApiFuture<'_, ExecutionMatches>;
    /// Dead-lettered executions, newest first.
    fn dlq_list(&self, queue: Option<String>, limit: usize) -> ApiFuture<'_, Vec<DeadLetter>>;
    /// Puts dead-lettered executions back on their queues as new executions, rebuilt from
    /// their tasks' current specs unless `use_stored`; says which and onto what.
    fn dlq_requeue(&self, request: DlqRequeue) -> ApiFuture<'_, DlqRequeued>;
    /// Deletes dead-lettered executions; returns how many.
    fn dlq_purge(&self, queue: Option<String>) -> ApiFuture<'_, u64>;
    /// The cluster at a glance.
    fn status(&self) -> ApiFuture<'_, StatusView>;
    /// Records a change in the audit log.
    fn audit_record(&self, record: AuditRecord) -> ApiFuture<'_, ()>;
    /// The wall clock the backend stamps its changes by: the host's unless the backend runs
    /// on a clock of its own ([`Backend::with_clock`](crate::backend::Backend::with_clock)).
    fn now(&self) -> ax_scheduler_core::UtcMillis {
        ax_scheduler_core::UtcMillis::now()
    }
    /// Whether a change may be made now: [`ApiError::Unavailable`] while the audit log is
    /// over its count or etcd's database is nearly full. Asked before each change by
    /// [`Operations`](crate::operations::Operations); a transport that forwards changes to a
    /// replica leaves it to the replica.
    fn write_room(&self) -> ApiFuture<'_, ()>;
    /// A page of the audit log, newest first.
    fn audit_list(&self, query: AuditQuery) -> ApiFuture<'_, AuditPage>;
    /// Kills a task's current executions (waiting, retrying or running), or only
    /// `execution`; [`ApiError::NotFound`] when there is none.
    fn kill_task(&self, key: TaskKey, execution: Option<ExecutionId>) -> ApiFuture<'_, KillResult>;
    /// Kills one execution, whatever its task; [`ApiError::NotFound`] when no queue has it
    /// (finished, or unknown).
    fn kill_execution(&self, id: ExecutionId) -> ApiFuture<'_, KillResult>;
    /// What a queue holds now: up to `limit` waiting, retrying and running executions.
    fn queue_contents(&self, name: String, limit: usize) -> ApiFuture<'_, QueueContents>;
    /// Pauses a queue: workers take nothing from it until it is resumed.
    fn pause_queue(&self, name: String) -> ApiFuture<'_, QueueState>;
    /// Resumes a paused queue.
    fn resume_queue(&self, name: String) -> ApiFuture<'_, QueueState>;
    /// A job's report on an execution of an `http.async` task (its end, or progress),
    /// authenticated by the completion token its request carried: [`ApiError::Unauthorized`]
    /// without a token shaped like one, [`ApiError::Forbidden`] when it is not the
    /// execution's, [`ApiError::Conflict`] when the attempt ended otherwise (timed out,
    /// killed, completed with another outcome, superseded by a retry).
    fn complete_execution(
        &self,
        id: ExecutionId,
        request: CompletionRequest,
    ) -> ApiFuture<'_, CompletionReply>;
    /// Schedules each execution of `batch` to run once at its instant, for `actor` (recorded
    /// in each execution's origin): checked whole first, every problem at once; nothing is
    /// written to etcd. A backend without Redis answers [`ApiError::Unavailable`].
    fn schedule(
        &self,
        batch: ScheduleBatch,
        actor: Option<String>,
    ) -> ApiFuture<'_, ScheduleReply> {
        let _ = (batch, actor);
        unavailable("scheduling executions")
    }
    /// A scheduled execution as it waits (`QUEUE/EXECUTION_ID`); [`ApiError::NotFound`] once
    /// it is promoted, cancelled or unknown.
    fn scheduled(&self, id: String) -> ApiFuture<'_, ScheduledView> {
        let _ = id;
        unavailable("reading scheduled executions")
    }
    /// Takes a scheduled execution out before it runs; what it was.
    fn cancel_scheduled(&self, id: String) -> ApiFuture<'_, ScheduledView> {
        let _ = id;
        unavailable("cancelling scheduled executions")
    }
    /// Moves a scheduled execution to `due`; what it is now.
    fn reschedule(
        &self,
        id: String,
        due: ax_scheduler_core::UtcMillis,
    ) -> ApiFuture<'_, ScheduledView> {
        let _ = (id, due);
        unavailable("moving scheduled executions")
    }
    /// A page of `queue`'s scheduled executions, soonest first, after the cursor `after`.
    fn scheduled_page(
        &self,
        queue: String,
        after: Option<String>,
        limit: usize,
    ) -> ApiFuture<'_, ScheduledPage> {
        let _ = (queue, after, limit);
        unavailable("listing scheduled executions")
    }
}

fn unavailable<T: Send + 'static>(what: &str) -> ApiFuture<'static, T> {
    let e = ApiError::Unavailable(format!("{what} needs a backend with Redis"));
    Box::pin(async move { Err(e) })
}
