//! The real [`ApiBackend`]: the etcd task registry and the Redis queues.
//!
//! One implementation serves both the CLI (which talks to etcd and Redis directly, with the
//! same configuration as a replica) and `/api/v1` on every replica, so the two cannot drift
//! apart. Writes go through the libraries' guarded operations (compare-and-swap register,
//! optimistic update, transactional run-now request); nothing here caches, so any replica
//! answers with what etcd and Redis hold.
//!
//! Redis is connected on first use when the backend is built with [`Backend::connect_lazy`]:
//! the task commands need only etcd, and a Redis outage must not stop a user from pausing a
//! task.
//!
//! Submodules: [`audit_store`] (the audit log in etcd), `tasks` (views, put, pause, resume,
//! run now), `backfill` (past fires as run-now requests, bounded in count and etcd room),
//! `queues` (history per task and across tasks, one execution's story, dead letters,
//! status), `requeue` (dead letters rebuilt from their task's current spec), `find`
//! (executions by a fragment of their id), `cursor` (the task listing's continue token),
//! `control` (kill executions, pause queues), `completion` (a job's report on an
//! `http.async` execution), `errors` (library errors as API errors). The clients themselves
//! come from [`crate::connect`], which the clock check and the server share.

pub mod audit_store;
mod backfill;
mod completion;
mod contents;
mod control;
mod cursor;
mod errors;
mod find;
mod handlers;
mod queue_names;
mod queues;
mod requeue;
mod scheduled;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use ax_election::ElectionConfig;
use ax_queue::Queue;
use ax_registry::Registry;
use ax_scheduler_core::queue_set::QueueSet;
use ax_scheduler_core::{Clock, ExecutionId, SystemClock, UtcMillis};
use etcd_client::Client;
use tokio::sync::OnceCell;

use crate::connect::{connect_etcd, connect_queue, election_config, etcd_tls, registry_config};

pub use audit_store::{AuditStore, CapacityWatch};
pub use tasks::check_command;

use crate::api::{
    ApiBackend, ApiError, ApiFuture, BackfillParams, BackfillResult, ClockView, CompletionReply,
    CompletionRequest, DeadLetter, DlqRequeue, DlqRequeued, ExecutionList, ExecutionMatches,
    ExecutionQuery, ExecutionRecord, ExecutionStory, KillResult, PutOptions, PutTaskResult,
    QueueContents, QueueState, StatusView, TaskKey, TaskList, TaskQuery, TaskView, TriggerParams,
    TriggerResult,
};
use crate::audit::{AuditPage, AuditQuery, AuditRecord};
use crate::clock_check::ClockCheck;
use crate::config::ClusterConfig;
use crate::error::ControlError;

/// The etcd registry and Redis queues behind the CLI and `/api/v1`.
pub struct Backend {
    etcd: Client,
    registry: Registry,
    election: ElectionConfig,
    queue: OnceCell<Queue>,
    /// For connecting Redis on first use, through the same path as a replica.
    config: ClusterConfig,
    worker_queues: Vec<String>,
    request_timeout: Duration,
    etcd_quota_bytes: u64,
    /// `scheduler.shards`: how many shards the status should find owned.
    shards: u32,
    max_tasks_per_namespace: u64,
    max_backfill_fires: usize,
    max_list_scan: usize,
    audit: AuditStore,
    /// Built on the first status call; `None` inside when it cannot be (no endpoint, bad
    /// TLS files: the replica's own check says why at campaign time).
    clock_check: OnceCell<Option<ClockCheck>>,
    /// The wall clock of what the backend stamps (audit records, requests, views) and of a
    /// queue it connects on first use.
    wall: Arc<dyn Clock>,
    /// The queues the cluster uses, remembered between calls (see `queue_names`).
    queue_names: Arc<queue_names::QueueNames>,
    /// The queue names a scheduler role of this replica keeps as the registry changes; read
    /// before `queue_names` once published.
    live_queues: Option<QueueSet>,
    /// Where the secrets tasks name are read, to mask them in what jobs report.
    secrets: ax_worker::SecretSource,
}

impl Backend {
    /// Connects to etcd and Redis now; either failing is an error naming where it tried.
    pub async fn connect(config: &ClusterConfig) -> Result<Backend, ControlError> {
        let etcd = connect_etcd(config).await?;
        let queue = connect_queue(config, Arc::new(SystemClock)).await?;
        Ok(Backend::new(etcd, Some(queue), config))
    }

    /// Connects to etcd now and to Redis on the first call that needs it.
    pub async fn connect_lazy(config: &ClusterConfig) -> Result<Backend, ControlError> {
        let etcd = connect_etcd(config).await?;
        Ok(Backend::new(etcd, None, config))
    }

    /// A backend over clients the caller already has (a replica shares its own); without a
    /// queue, Redis is connected on first use.
    pub fn new(etcd: Client, queue: Option<Queue>, config: &ClusterConfig) -> Backend {
        Backend {
            registry: Registry::new(etcd.clone(), registry_config(config)),
            audit: AuditStore::of(etcd.clone(), config),
            etcd,
            election: election_config(config),
            queue: OnceCell::new_with(queue),
            config: config.clone(),
            worker_queues: config.worker_queues.clone(),
            request_timeout: config.etcd.timeout,
            etcd_quota_bytes: config.etcd.quota_backend_bytes,
            shards: config.shards,
            max_tasks_per_namespace: config.limits.max_tasks_per_namespace,
            max_backfill_fires: config.limits.max_backfill_fires,
            max_list_scan: config.limits.max_list_scan,
            clock_check: OnceCell::new(),
            wall: Arc::new(SystemClock),
            queue_names: Arc::default(),
            live_queues: None,
            secrets: ax_worker::SecretSource::none(),
        }
    }

    /// The same backend on `clock` (tests run it on a clock of their own): what it stamps
    /// reads it, and so does a queue it connects on first use (a queue given to
    /// [`Backend::new`] keeps its own).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Backend {
        self.wall = clock;
        self
    }

    /// The same backend, reading the secrets tasks name from `secrets` (a worker's
    /// `worker.secrets_dir`), to mask their values in what `http.async` jobs report.
    pub fn with_secrets(mut self, secrets: ax_worker::SecretSource) -> Backend {
        self.secrets = secrets;
        self
    }

    /// The same backend, taking the names of the queues tasks use from `names` (the set a
    /// scheduler role of the same process keeps as the registry changes) once it is
    /// published, instead of reading every spec.
    pub fn with_live_queues(mut self, names: QueueSet) -> Backend {
        self.live_queues = Some(names);
        self
    }

    /// The same backend, its audit log telling `watch` after each write whether it is over
    /// its count.
    pub fn with_audit_capacity_watch(mut self, watch: CapacityWatch) -> Backend {
        self.audit = self.audit.with_capacity_watch(watch);
        self
    }

    /// This host's clock against etcd's, as a replica checks it before campaigning; `None`
    /// when it cannot be measured (shown as unknown, not as a failure of the status).
    async fn clock_against_etcd(&self) -> Option<ClockView> {
        let check = self
            .clock_check
            .get_or_init(|| async {
                let tls = etcd_tls(&self.config).ok()?;
                ClockCheck::new(&self.config.etcd.endpoints, tls.as_ref()).ok()
            })
            .await
            .as_ref()?;
        let skew = check.skew().await.ok()?;
        // Seconds as f64 to milliseconds: the measurement is good to about half a second.
        #[allow(clippy::cast_possible_truncation)]
        let skew_ms = (skew * 1000.0).round() as i64;
        Some(ClockView {
            skew_ms,
            max_skew_ms: u64::try_from(self.config.max_clock_skew.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// The task registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The etcd client.
    pub fn etcd(&self) -> &Client {
        &self.etcd
    }

    /// The queue client, connecting it on first use.
    async fn queue(&self) -> Result<&Queue, ApiError> {
        self.queue
            .get_or_try_init(|| async {
                connect_queue(&self.config, Arc::clone(&self.wall))
                    .await
                    .map_err(|e| ApiError::Unavailable(format!("{e:#}")))
            })
            .await
    }
}

impl ApiBackend for Backend {
    fn list_tasks(&self, query: TaskQuery) -> ApiFuture<'_, TaskList> {
        Box::pin(async move { self.list_page_views(&query).await })
    }

    fn get_task(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        Box::pin(async move { self.get_view(&key).await })
    }

    fn put_task(&self, spec: serde_json::Value, opts: PutOptions) -> ApiFuture<'_, PutTaskResult> {
        Box::pin(async move { self.put(spec, opts).await })
    }

    fn delete_task(&self, key: TaskKey) -> ApiFuture<'_, ()> {
        Box::pin(async move { self.delete(&key).await })
    }

    fn pause(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        Box::pin(async move { self.set_paused(&key, true).await })
    }

    fn resume(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        Box::pin(async move { self.set_paused(&key, false).await })
    }

    fn trigger(&self, key: TaskKey, params: TriggerParams) -> ApiFuture<'_, TriggerResult> {
        Box::pin(async move { self.run_now(&key, params).await })
    }

    fn backfill(&self, key: TaskKey, params: BackfillParams) -> ApiFuture<'_, BackfillResult> {
        Box::pin(async move { self.backfill_range(&key, params).await })
    }

    fn pause_namespace(&self, namespace: String, by: String) -> ApiFuture<'_, ()> {
        Box::pin(async move {
            crate::api::check_namespace(&namespace)?;
            let pause = ax_registry::NamespacePause {
                namespace,
                paused_at: self.now(),
                paused_by: by,
            };
            self.registry
                .pause_namespace(&pause)
                .await
                .map_err(errors::registry)
        })
    }

    fn resume_namespace(&self, namespace: String) -> ApiFuture<'_, ()> {
        Box::pin(async move {
            if self
                .registry
                .resume_namespace(&namespace)
                .await
                .map_err(errors::registry)?
            {
                Ok(())
            } else {
                Err(ApiError::NotFound(format!(
                    "namespace {namespace} is not paused"
                )))
            }
        })
    }

    fn history(&self, key: TaskKey, limit: usize) -> ApiFuture<'_, Vec<ExecutionRecord>> {
        Box::pin(async move { self.history_of(&key, limit).await })
    }

    fn executions(&self, query: ExecutionQuery) -> ApiFuture<'_, ExecutionList> {
        Box::pin(async move { self.executions_page(query).await })
    }

    fn execution(&self, id: ExecutionId) -> ApiFuture<'_, ExecutionStory> {
        Box::pin(async move { self.execution_story(id).await })
    }

    fn find_executions(&self, fragment: String) -> ApiFuture<'_, ExecutionMatches> {
        Box::pin(async move { self.find_by_fragment(&fragment).await })
    }

    fn dlq_list(&self, queue: Option<String>, limit: usize) -> ApiFuture<'_, Vec<DeadLetter>> {
        Box::pin(async move { self.dead_letters(queue, limit).await })
    }

    fn dlq_requeue(&self, request: DlqRequeue) -> ApiFuture<'_, DlqRequeued> {
        Box::pin(async move { self.requeue(request).await })
    }

    fn dlq_purge(&self, queue: Option<String>) -> ApiFuture<'_, u64> {
        Box::pin(async move { self.purge(queue).await })
    }

    fn status(&self) -> ApiFuture<'_, StatusView> {
        Box::pin(async move { self.cluster_status().await })
    }

    fn audit_record(&self, record: AuditRecord) -> ApiFuture<'_, ()> {
        Box::pin(async move { self.audit.write(&record).await })
    }

    fn now(&self) -> UtcMillis {
        self.wall.now()
    }

    fn write_room(&self) -> ApiFuture<'_, ()> {
        Box::pin(async move { self.check_write_room().await })
    }

    fn audit_list(&self, query: AuditQuery) -> ApiFuture<'_, AuditPage> {
        Box::pin(async move { self.audit.page(&query).await })
    }

    fn kill_task(&self, key: TaskKey, execution: Option<ExecutionId>) -> ApiFuture<'_, KillResult> {
        Box::pin(async move { self.kill_of_task(&key, execution).await })
    }

    fn kill_execution(&self, id: ExecutionId) -> ApiFuture<'_, KillResult> {
        Box::pin(async move { self.kill_by_id(id).await })
    }

    fn queue_contents(&self, name: String, limit: usize) -> ApiFuture<'_, QueueContents> {
        Box::pin(async move { self.contents_of(&name, limit).await })
    }

    fn pause_queue(&self, name: String) -> ApiFuture<'_, QueueState> {
        Box::pin(async move { self.set_queue_paused(&name, true).await })
    }

    fn resume_queue(&self, name: String) -> ApiFuture<'_, QueueState> {
        Box::pin(async move { self.set_queue_paused(&name, false).await })
    }
    fn complete_execution(
        &self,
        id: ExecutionId,
        request: CompletionRequest,
    ) -> ApiFuture<'_, CompletionReply> {
        Box::pin(async move { self.complete(id, request).await })
    }

    fn schedule(
        &self,
        batch: crate::api::ScheduleBatch,
        actor: Option<String>,
    ) -> ApiFuture<'_, crate::api::ScheduleReply> {
        Box::pin(async move { self.schedule_batch(batch, actor).await })
    }

    fn scheduled(&self, id: String) -> ApiFuture<'_, crate::api::ScheduledView> {
        Box::pin(async move { self.scheduled_view(&id).await })
    }

    fn cancel_scheduled(&self, id: String) -> ApiFuture<'_, crate::api::ScheduledView> {
        Box::pin(async move { self.cancel(&id).await })
    }

    fn reschedule(&self, id: String, due: UtcMillis) -> ApiFuture<'_, crate::api::ScheduledView> {
        Box::pin(async move { self.move_to(&id, due).await })
    }

    fn scheduled_page(
        &self,
        queue: String,
        after: Option<String>,
        limit: usize,
    ) -> ApiFuture<'_, crate::api::ScheduledPage> {
        Box::pin(async move { self.scheduled_listing(&queue, after, limit).await })
    }
}
