//! The API backend of a replica that is still connecting.
//!
//! `ax serve` opens its HTTP port before etcd and Redis answer, so that probes and metrics
//! work during a slow start; `/api/v1` calls made meanwhile get 503 `backend_unavailable`,
//! and the real [`ApiBackend`] answers from the moment it is [`set`](LateApi::set).

use std::sync::{Arc, OnceLock};

use ax_scheduler_core::ExecutionId;

use crate::api::{
    ApiBackend, ApiError, ApiFuture, BackfillParams, BackfillResult, CompletionReply,
    CompletionRequest, DeadLetter, DlqRequeue, DlqRequeued, ExecutionList, ExecutionMatches,
    ExecutionQuery, ExecutionRecord, ExecutionStory, KillResult, PutOptions, PutTaskResult,
    QueueContents, QueueState, StatusView, TaskKey, TaskList, TaskQuery, TaskView, TriggerParams,
    TriggerResult,
};
use crate::audit::{AuditPage, AuditQuery, AuditRecord};

/// An [`ApiBackend`] that is unavailable until set.
#[derive(Default)]
pub struct LateApi {
    inner: OnceLock<Arc<dyn ApiBackend>>,
}

impl LateApi {
    /// Installs the real backend (the first call wins).
    pub fn set(&self, backend: Arc<dyn ApiBackend>) {
        let _ = self.inner.set(backend);
    }

    fn get(&self) -> Result<&Arc<dyn ApiBackend>, ApiError> {
        self.inner.get().ok_or_else(|| {
            ApiError::Unavailable("this replica is still connecting to etcd and Redis".into())
        })
    }
}

macro_rules! delegate {
    ($self:ident, $call:ident ( $($arg:expr),* )) => {
        match $self.get() {
            Ok(backend) => backend.$call($($arg),*),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    };
}

impl ApiBackend for LateApi {
    fn now(&self) -> ax_scheduler_core::UtcMillis {
        match self.get() {
            Ok(backend) => backend.now(),
            Err(_) => ax_scheduler_core::UtcMillis::now(),
        }
    }
    fn list_tasks(&self, query: TaskQuery) -> ApiFuture<'_, TaskList> {
        delegate!(self, list_tasks(query))
    }
    fn get_task(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        delegate!(self, get_task(key))
    }
    fn put_task(&self, spec: serde_json::Value, opts: PutOptions) -> ApiFuture<'_, PutTaskResult> {
        delegate!(self, put_task(spec, opts))
    }
    fn delete_task(&self, key: TaskKey) -> ApiFuture<'_, ()> {
        delegate!(self, delete_task(key))
    }
    fn pause(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        delegate!(self, pause(key))
    }
    fn resume(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        delegate!(self, resume(key))
    }
    fn trigger(&self, key: TaskKey, params: TriggerParams) -> ApiFuture<'_, TriggerResult> {
        delegate!(self, trigger(key, params))
    }
    fn backfill(&self, key: TaskKey, params: BackfillParams) -> ApiFuture<'_, BackfillResult> {
        delegate!(self, backfill(key, params))
    }

    fn pause_namespace(&self, namespace: String, by: String) -> ApiFuture<'_, ()> {
        delegate!(self, pause_namespace(namespace, by))
    }

    fn resume_namespace(&self, namespace: String) -> ApiFuture<'_, ()> {
        delegate!(self, resume_namespace(namespace))
    }

    fn history(&self, key: TaskKey, limit: usize) -> ApiFuture<'_, Vec<ExecutionRecord>> {
        delegate!(self, history(key, limit))
    }
    fn executions(&self, query: ExecutionQuery) -> ApiFuture<'_, ExecutionList> {
        delegate!(self, executions(query))
    }
    fn execution(&self, id: ExecutionId) -> ApiFuture<'_, ExecutionStory> {
        delegate!(self, execution(id))
    }
    fn find_executions(&self, fragment: String) -> ApiFuture<'_, ExecutionMatches> {
        delegate!(self, find_executions(fragment))
    }
    fn dlq_list(&self, queue: Option<String>, limit: usize) -> ApiFuture<'_, Vec<DeadLetter>> {
        delegate!(self, dlq_list(queue, limit))
    }
    fn dlq_requeue(&self, request: DlqRequeue) -> ApiFuture<'_, DlqRequeued> {
        delegate!(self, dlq_requeue(request))
    }
    fn dlq_purge(&self, queue: Option<String>) -> ApiFuture<'_, u64> {
        delegate!(self, dlq_purge(queue))
    }
    fn status(&self) -> ApiFuture<'_, StatusView> {
        delegate!(self, status())
    }

    fn audit_record(&self, record: AuditRecord) -> ApiFuture<'_, ()> {
        delegate!(self, audit_record(record))
    }

    fn write_room(&self) -> ApiFuture<'_, ()> {
        delegate!(self, write_room())
    }

    fn audit_list(&self, query: AuditQuery) -> ApiFuture<'_, AuditPage> {
        delegate!(self, audit_list(query))
    }

    fn kill_task(&self, key: TaskKey, execution: Option<ExecutionId>) -> ApiFuture<'_, KillResult> {
        delegate!(self, kill_task(key, execution))
    }
    fn kill_execution(&self, id: ExecutionId) -> ApiFuture<'_, KillResult> {
        delegate!(self, kill_execution(id))
    }
    fn queue_contents(&self, name: String, limit: usize) -> ApiFuture<'_, QueueContents> {
        delegate!(self, queue_contents(name, limit))
    }
    fn pause_queue(&self, name: String) -> ApiFuture<'_, QueueState> {
        delegate!(self, pause_queue(name))
    }
    fn resume_queue(&self, name: String) -> ApiFuture<'_, QueueState> {
        delegate!(self, resume_queue(name))
    }
    fn complete_execution(
        &self,
        id: ExecutionId,
        request: CompletionRequest,
    ) -> ApiFuture<'_, CompletionReply> {
        delegate!(self, complete_execution(id, request))
    }
    fn schedule(
        &self,
        batch: crate::api::ScheduleBatch,
        actor: Option<String>,
    ) -> ApiFuture<'_, crate::api::ScheduleReply> {
        delegate!(self, schedule(batch, actor))
    }
    fn scheduled(&self, id: String) -> ApiFuture<'_, crate::api::ScheduledView> {
        delegate!(self, scheduled(id))
    }
    fn cancel_scheduled(&self, id: String) -> ApiFuture<'_, crate::api::ScheduledView> {
        delegate!(self, cancel_scheduled(id))
    }
    fn reschedule(
        &self,
        id: String,
        due: ax_scheduler_core::UtcMillis,
    ) -> ApiFuture<'_, crate::api::ScheduledView> {
        delegate!(self, reschedule(id, due))
    }
    fn scheduled_page(
        &self,
        queue: String,
        after: Option<String>,
        limit: usize,
    ) -> ApiFuture<'_, crate::api::ScheduledPage> {
        delegate!(self, scheduled_page(queue, after, limit))
    }
}
