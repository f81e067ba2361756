//! The term's seams to Redis and etcd: the calls a term, its fire path, its events, its
//! flusher and the feeds make, as two object-safe traits.
//!
//! A term is the one place where time, the lease and the backends' answers meet, and its
//! behaviour (fire on time, hold and release, flush, stop, lose the key) is what matters
//! most; behind [`TermQueue`] and [`TermStore`] it runs against in-memory stand-ins on
//! tokio's paused time, with no server. The traits use the backends' own types and errors,
//! so the real implementations here are plain delegations and nothing is translated on the
//! way. The registry watch and the election are not behind them: the role's loop keeps
//! those, and a term is built without them.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use ax_queue::{
    EventEntry, ExecutionMessage, Fence, HistoryEntry, Queue, QueueError, QueueStats, ServerInfo,
};
use ax_registry::{
    LedgerWriter, NamespacePause, PendingTrigger, Registry, RegistryError, StateFence, StateListing,
};
use ax_scheduler_core::{
    EnqueueOutcome, EventPosition, ExecutionId, TaskKey, TaskState, UtcMillis,
};

/// The future of a backend call.
pub type BackendFuture<'a, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>>;
/// The future of a [`TermQueue`] call.
pub type QueueFuture<'a, T> = BackendFuture<'a, T, QueueError>;
/// The future of a [`TermStore`] call.
pub type StoreFuture<'a, T> = BackendFuture<'a, T, RegistryError>;

/// What a term asks of Redis (see [`ax_queue::Queue`] for each call's meaning).
pub trait TermQueue: Send + Sync {
    /// [`Queue::enqueue_batch`].
    fn enqueue_batch<'a>(
        &'a self,
        msgs: &'a [ExecutionMessage],
    ) -> QueueFuture<'a, Vec<EnqueueOutcome>>;
    /// [`Queue::advance_fence`].
    fn advance_fence<'a>(
        &'a self,
        queue: &'a str,
        shard: Option<u32>,
        token: u64,
        cluster: &'a str,
    ) -> QueueFuture<'a, Fence>;
    /// [`Queue::run_id`].
    fn run_id(&self) -> QueueFuture<'_, String>;
    /// [`Queue::ping`].
    fn ping<'a>(&'a self, queue: Option<&'a str>) -> QueueFuture<'a, ()>;
    /// [`Queue::server_info`].
    fn server_info(&self) -> QueueFuture<'_, ServerInfo>;
    /// [`Queue::stats`].
    fn stats<'a>(&'a self, queue: &'a str, now: UtcMillis) -> QueueFuture<'a, QueueStats>;
    /// [`Queue::read_events`].
    fn read_events(&self, shard: Option<u32>, max: usize) -> QueueFuture<'_, Vec<EventEntry>>;
    /// [`Queue::claim_events`].
    fn claim_events<'a>(
        &'a self,
        shard: Option<u32>,
        min_idle: Duration,
        cursor: &'a str,
        max: usize,
    ) -> QueueFuture<'a, (String, Vec<EventEntry>)>;
    /// [`Queue::ack_events`].
    fn ack_events<'a>(
        &'a self,
        shard: Option<u32>,
        positions: &'a [EventPosition],
    ) -> QueueFuture<'a, ()>;
    /// [`Queue::history_many`].
    fn history_many<'a>(
        &'a self,
        tasks: &'a [(&'a str, &'a str)],
        limit: usize,
    ) -> QueueFuture<'a, Vec<Vec<HistoryEntry>>>;
    /// [`Queue::record_history`].
    fn record_history<'a>(
        &'a self,
        namespace: &'a str,
        task_id: &'a str,
        entry: &'a HistoryEntry,
    ) -> QueueFuture<'a, ()>;
    /// [`Queue::delete_histories`].
    fn delete_histories<'a>(&'a self, tasks: &'a [(&'a str, &'a str)]) -> QueueFuture<'a, ()>;
    /// [`Queue::live_workers`].
    fn live_workers<'a>(&'a self, queue: &'a str) -> QueueFuture<'a, Vec<String>>;
    /// [`Queue::tasks_with_work`].
    fn tasks_with_work<'a>(
        &'a self,
        queue: &'a str,
        tasks: &'a [(&'a str, &'a str)],
    ) -> QueueFuture<'a, HashSet<(String, String)>>;
    /// [`Queue::fix_fanout_workers`].
    fn fix_fanout_workers<'a>(
        &'a self,
        queue: &'a str,
        fanout_id: ExecutionId,
        workers: &'a [String],
    ) -> QueueFuture<'a, Vec<String>>;
}

impl TermQueue for Queue {
    fn enqueue_batch<'a>(
        &'a self,
        msgs: &'a [ExecutionMessage],
    ) -> QueueFuture<'a, Vec<EnqueueOutcome>> {
        Box::pin(Queue::enqueue_batch(self, msgs))
    }

    fn advance_fence<'a>(
        &'a self,
        queue: &'a str,
        shard: Option<u32>,
        token: u64,
        cluster: &'a str,
    ) -> QueueFuture<'a, Fence> {
        Box::pin(Queue::advance_fence(self, queue, shard, token, cluster))
    }

    fn run_id(&self) -> QueueFuture<'_, String> {
        Box::pin(Queue::run_id(self))
    }

    fn ping<'a>(&'a self, queue: Option<&'a str>) -> QueueFuture<'a, ()> {
        Box::pin(Queue::ping(self, queue))
    }

    fn server_info(&self) -> QueueFuture<'_, ServerInfo> {
        Box::pin(Queue::server_info(self))
    }

    fn stats<'a>(&'a self, queue: &'a str, now: UtcMillis) -> QueueFuture<'a, QueueStats> {
        Box::pin(Queue::stats(self, queue, now))
    }

    fn read_events(&self, shard: Option<u32>, max: usize) -> QueueFuture<'_, Vec<EventEntry>> {
        Box::pin(Queue::read_events(self, shard, max))
    }

    fn claim_events<'a>(
        &'a self,
        shard: Option<u32>,
        min_idle: Duration,
        cursor: &'a str,
        max: usize,
    ) -> QueueFuture<'a, (String, Vec<EventEntry>)> {
        Box::pin(Queue::claim_events(self, shard, min_idle, cursor, max))
    }

    fn ack_events<'a>(
        &'a self,
        shard: Option<u32>,
        positions: &'a [EventPosition],
    ) -> QueueFuture<'a, ()> {
        Box::pin(Queue::ack_events(self, shard, positions))
    }

    fn history_many<'a>(
        &'a self,
        tasks: &'a [(&'a str, &'a str)],
        limit: usize,
    ) -> QueueFuture<'a, Vec<Vec<HistoryEntry>>> {
        Box::pin(Queue::history_many(self, tasks, limit))
    }

    fn record_history<'a>(
        &'a self,
        namespace: &'a str,
        task_id: &'a str,
        entry: &'a HistoryEntry,
    ) -> QueueFuture<'a, ()> {
        Box::pin(Queue::record_history(self, namespace, task_id, entry))
    }

    fn delete_histories<'a>(&'a self, tasks: &'a [(&'a str, &'a str)]) -> QueueFuture<'a, ()> {
        Box::pin(Queue::delete_histories(self, tasks))
    }

    fn tasks_with_work<'a>(
        &'a self,
        queue: &'a str,
        tasks: &'a [(&'a str, &'a str)],
    ) -> QueueFuture<'a, HashSet<(String, String)>> {
        Box::pin(Queue::tasks_with_work(self, queue, tasks))
    }

    fn live_workers<'a>(&'a self, queue: &'a str) -> QueueFuture<'a, Vec<String>> {
        Box::pin(Queue::live_workers(self, queue))
    }

    fn fix_fanout_workers<'a>(
        &'a self,
        queue: &'a str,
        fanout_id: ExecutionId,
        workers: &'a [String],
    ) -> QueueFuture<'a, Vec<String>> {
        Box::pin(Queue::fix_fanout_workers(self, queue, fanout_id, workers))
    }
}

/// The fence of a term's state writes: the key it holds (the leader key, or its shard's
/// owner key) and that key's create revision. Plain data, so that a stand-in store needs no
/// etcd keys; the registry turns it into its [`StateFence`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteFence {
    /// The shard whose owner key fences the writes; `None`: the leader key.
    pub shard: Option<u32>,
    /// The key's create revision.
    pub token: i64,
}

impl WriteFence {
    /// The registry's fence for these writes.
    pub fn on(&self, registry: &Registry) -> StateFence {
        match self.shard {
            None => registry.leader_fence(self.token),
            Some(shard) => registry.shard_fence(shard, self.token),
        }
    }
}

/// What a term asks of etcd besides the watch (see [`ax_registry::Registry`] for each
/// call's meaning).
pub trait TermStore: Send + Sync {
    /// [`Registry::list_states`].
    fn list_states<'a>(&'a self, namespace: Option<&'a str>) -> StoreFuture<'a, StateListing>;
    /// [`Registry::get_states`].
    fn get_states<'a>(&'a self, keys: &'a [TaskKey]) -> StoreFuture<'a, StateListing>;
    /// [`Registry::cluster`].
    fn cluster(&self) -> StoreFuture<'_, (u64, i64)>;
    /// [`Registry::put_states`], fenced on `fence`.
    fn put_states<'a>(
        &'a self,
        states: &'a [(TaskKey, TaskState)],
        fence: &'a WriteFence,
    ) -> StoreFuture<'a, i64>;
    /// [`Registry::delete_state`].
    fn delete_state<'a>(&'a self, namespace: &'a str, id: &'a str) -> StoreFuture<'a, ()>;
    /// The finals ledger's writer for `fence` ([`LedgerWriter`]).
    fn ledger_writer(&self, fence: &WriteFence) -> LedgerWriter;
    /// [`Registry::put_finals`].
    fn put_finals<'a>(
        &'a self,
        finals: &'a [(TaskKey, TaskState)],
        writer: &'a mut LedgerWriter,
    ) -> StoreFuture<'a, Vec<u32>>;
    /// [`Registry::drop_finals`].
    fn drop_finals<'a>(
        &'a self,
        deleted: &'a [TaskKey],
        writer: &'a mut LedgerWriter,
    ) -> StoreFuture<'a, ()>;
    /// [`Registry::compact_finals`].
    fn compact_finals<'a>(
        &'a self,
        bucket: u32,
        writer: &'a mut LedgerWriter,
    ) -> StoreFuture<'a, bool>;
    /// [`Registry::list_triggers`].
    fn list_triggers(&self) -> StoreFuture<'_, (i64, Vec<PendingTrigger>)>;
    /// [`Registry::delete_trigger`].
    fn delete_trigger<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        execution_id: ExecutionId,
    ) -> StoreFuture<'a, ()>;
    /// [`Registry::paused_namespaces`].
    fn paused_namespaces(&self) -> StoreFuture<'_, Vec<NamespacePause>>;
}

impl TermStore for Registry {
    fn list_states<'a>(&'a self, namespace: Option<&'a str>) -> StoreFuture<'a, StateListing> {
        Box::pin(Registry::list_states(self, namespace))
    }

    fn get_states<'a>(&'a self, keys: &'a [TaskKey]) -> StoreFuture<'a, StateListing> {
        Box::pin(Registry::get_states(self, keys))
    }

    fn cluster(&self) -> StoreFuture<'_, (u64, i64)> {
        Box::pin(Registry::cluster(self))
    }

    fn put_states<'a>(
        &'a self,
        states: &'a [(TaskKey, TaskState)],
        fence: &'a WriteFence,
    ) -> StoreFuture<'a, i64> {
        let fence = fence.on(self);
        Box::pin(async move { Registry::put_states(self, states, Some(&fence)).await })
    }

    fn delete_state<'a>(&'a self, namespace: &'a str, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(Registry::delete_state(self, namespace, id))
    }

    fn ledger_writer(&self, fence: &WriteFence) -> LedgerWriter {
        LedgerWriter::new(Some(fence.on(self)))
    }

    fn put_finals<'a>(
        &'a self,
        finals: &'a [(TaskKey, TaskState)],
        writer: &'a mut LedgerWriter,
    ) -> StoreFuture<'a, Vec<u32>> {
        Box::pin(Registry::put_finals(self, finals, writer))
    }

    fn drop_finals<'a>(
        &'a self,
        deleted: &'a [TaskKey],
        writer: &'a mut LedgerWriter,
    ) -> StoreFuture<'a, ()> {
        Box::pin(Registry::drop_finals(self, deleted, writer))
    }

    fn compact_finals<'a>(
        &'a self,
        bucket: u32,
        writer: &'a mut LedgerWriter,
    ) -> StoreFuture<'a, bool> {
        Box::pin(Registry::compact_finals(self, bucket, writer))
    }

    fn list_triggers(&self) -> StoreFuture<'_, (i64, Vec<PendingTrigger>)> {
        Box::pin(Registry::list_triggers(self))
    }

    fn delete_trigger<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        execution_id: ExecutionId,
    ) -> StoreFuture<'a, ()> {
        Box::pin(Registry::delete_trigger(self, namespace, id, execution_id))
    }

    fn paused_namespaces(&self) -> StoreFuture<'_, Vec<NamespacePause>> {
        Box::pin(Registry::paused_namespaces(self))
    }
}
