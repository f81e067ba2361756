//! In-memory stand-ins for a term's key, Redis and etcd, for the term's tests.
//!
//! Each answers as the real backend does only where a test looks: the queue enqueues once
//! per fire (or dedupe key), refuses a token older than its fence, holds a `forbid` fire
//! while an execution of its task is active, and can be told to refuse everything (Redis
//! down); the store keeps states in a map and logs every write. Everything else answers
//! "nothing there". No behaviour beyond that, so a test that passes says something about
//! the term, not about the stand-in.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ax_queue::{
    Dedupe, EventEntry, ExecutionEventRecord, ExecutionMessage, Fence, HistoryEntry, QueueError,
    QueueStats, ServerInfo,
};
use ax_registry::{NamespacePause, PendingTrigger, RegistryError, StateListing, StoredState};
use ax_scheduler_core::{
    AttemptEnd, EnqueueOutcome, EventPosition, ExecutionEvent, ExecutionId, OverlapPolicy, TaskKey,
    TaskState, UtcMillis,
};
use tokio_util::sync::CancellationToken;

use crate::backend::{QueueFuture, StoreFuture, TermQueue, TermStore, WriteFence};

/// A key a test holds and loses at will; clones share its state.
#[derive(Clone, Debug)]
pub(crate) struct FakeKey {
    /// The fencing token.
    pub(crate) token: i64,
    /// The shard it owns; `None`: the leader key.
    pub(crate) shard: Option<u32>,
    /// Cancelled when the key is lost.
    pub(crate) lost: CancellationToken,
    valid: Arc<AtomicBool>,
    gave_up: Arc<AtomicBool>,
}

impl FakeKey {
    /// A valid leader key with `token`.
    pub(crate) fn leader(token: i64) -> FakeKey {
        FakeKey {
            token,
            shard: None,
            lost: CancellationToken::new(),
            valid: Arc::new(AtomicBool::new(true)),
            gave_up: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether the key is still held by its deadline.
    pub(crate) fn is_valid(&self) -> bool {
        self.valid.load(Ordering::SeqCst)
    }

    /// The key's deadline passed (the lease ran out while the process was stopped); etcd
    /// has not said so yet.
    pub(crate) fn expire(&self) {
        self.valid.store(false, Ordering::SeqCst);
    }

    /// The key is lost and known to be.
    pub(crate) fn lose(&self) {
        self.expire();
        self.lost.cancel();
    }

    /// The term gave the key up.
    pub(crate) fn give_up(&self) {
        self.valid.store(false, Ordering::SeqCst);
        self.gave_up.store(true, Ordering::SeqCst);
    }

    /// Whether the term gave the key up.
    pub(crate) fn was_given_up(&self) -> bool {
        self.gave_up.load(Ordering::SeqCst)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn down(op: &'static str) -> QueueError {
    QueueError::Timeout {
        op,
        after: Duration::ZERO,
    }
}

type Task = (String, String);

fn task_of(m: &ExecutionMessage) -> Task {
    (m.namespace.to_string(), m.task_id.to_string())
}

#[derive(Default)]
struct QueueInner {
    pushed: Vec<ExecutionMessage>,
    /// The newest fire enqueued per task (the real queue's dedupe mark).
    marks: HashMap<Task, UtcMillis>,
    keys: HashSet<String>,
    /// The execution that holds each task's active marker (`forbid`, `replace`).
    active: HashMap<Task, ExecutionId>,
    fences: HashMap<(String, Option<u32>), u64>,
    events: Vec<EventEntry>,
    /// The positions acknowledged, in order.
    acked: Vec<EventPosition>,
    next_seq: u64,
    refusing: bool,
    /// Each task's execution history, newest first.
    history: HashMap<Task, Vec<HistoryEntry>>,
    /// Executions no longer in the queue: ended, or lost.
    gone: HashSet<ExecutionId>,
    /// A fault injected: the enqueue of this task's fire panics, once.
    panic_at: Option<(String, UtcMillis)>,
}

/// Redis, in memory.
#[derive(Default)]
pub(crate) struct FakeQueue {
    inner: Mutex<QueueInner>,
}

impl FakeQueue {
    /// Every message pushed, in order.
    pub(crate) fn pushed(&self) -> Vec<ExecutionMessage> {
        lock(&self.inner).pushed.clone()
    }

    /// The fires of task `id` pushed, in order.
    pub(crate) fn fires_of(&self, id: &str) -> Vec<UtcMillis> {
        self.pushed()
            .iter()
            .filter(|m| &*m.task_id == id)
            .map(|m| m.fire_at)
            .collect()
    }

    /// Fault injection: the enqueue that carries the fire of task `id` at `fire_at` panics
    /// (once, before anything is pushed), as a bug on the fire path would.
    pub(crate) fn panic_at_fire(&self, id: &str, fire_at: UtcMillis) {
        lock(&self.inner).panic_at = Some((id.to_owned(), fire_at));
    }

    /// Redis refuses every call from now (`true`) or answers again (`false`).
    pub(crate) fn refuse(&self, refusing: bool) {
        lock(&self.inner).refusing = refusing;
    }

    /// A fire of `ns/id` at `fire_at` is in the queue already (a dead leader sent it).
    pub(crate) fn mark_enqueued(&self, ns: &str, id: &str, fire_at: UtcMillis) {
        lock(&self.inner)
            .marks
            .insert((ns.into(), id.into()), fire_at);
    }

    /// `entry` is the newest attempt in the history of `ns/id`.
    pub(crate) fn record_end(&self, ns: &str, id: &str, entry: HistoryEntry) {
        lock(&self.inner)
            .history
            .entry((ns.into(), id.into()))
            .or_default()
            .insert(0, entry);
    }

    /// The event positions acknowledged so far.
    pub(crate) fn acked(&self) -> Vec<EventPosition> {
        lock(&self.inner).acked.clone()
    }

    /// The queue lost the execution of `message` (a Redis that restarted empty): no
    /// trace of it is left, no end will come.
    pub(crate) fn lose(&self, message: &ExecutionMessage) {
        lock(&self.inner).gone.insert(message.execution_id);
    }

    /// The execution of `message` ended successfully at `at`: its active marker goes and its
    /// final event waits in the stream.
    pub(crate) fn finish(&self, message: &ExecutionMessage, at: UtcMillis) {
        let mut inner = lock(&self.inner);
        inner.gone.insert(message.execution_id);
        let task = task_of(message);
        if inner.active.get(&task) == Some(&message.execution_id) {
            inner.active.remove(&task);
        }
        inner.next_seq += 1;
        let position = EventPosition {
            ms: u64::try_from(at.0).unwrap_or(0),
            seq: inner.next_seq,
        };
        inner.events.push(EventEntry {
            position,
            record: Some(ExecutionEventRecord {
                namespace: Arc::clone(&message.namespace),
                task_id: Arc::clone(&message.task_id),
                execution_id: message.execution_id,
                fire_at: message.fire_at,
                attempt: message.attempt,
                kind: ExecutionEvent::Finished {
                    at,
                    end: AttemptEnd::succeeded(),
                },
                shard: message.shard,
            }),
        });
    }

    fn enqueue_one(inner: &mut QueueInner, m: &ExecutionMessage) -> EnqueueOutcome {
        let newest = inner
            .fences
            .get(&(m.queue.to_string(), m.shard))
            .copied()
            .unwrap_or(0);
        if m.fencing_token < newest {
            return EnqueueOutcome::Fenced { newest };
        }
        let task = task_of(m);
        let dedupe = m.dedupe();
        let duplicate = match &dedupe {
            Dedupe::Fire(at) => inner.marks.get(&task).is_some_and(|mark| mark >= at),
            Dedupe::Key(key) => inner.keys.contains(key),
        };
        if duplicate {
            return EnqueueOutcome::Duplicate;
        }
        if m.overlap == OverlapPolicy::Forbid && inner.active.contains_key(&task) {
            return EnqueueOutcome::Held;
        }
        match dedupe {
            Dedupe::Fire(at) => {
                inner.marks.insert(task.clone(), at);
            }
            Dedupe::Key(key) => {
                inner.keys.insert(key);
            }
        }
        if m.overlap != OverlapPolicy::Allow {
            inner.active.insert(task, m.execution_id);
        }
        inner.pushed.push(m.clone());
        EnqueueOutcome::Enqueued
    }

    fn answer<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut QueueInner) -> T,
    ) -> QueueFuture<'_, T> {
        let mut inner = lock(&self.inner);
        let result = if inner.refusing {
            Err(down(op))
        } else {
            Ok(f(&mut inner))
        };
        Box::pin(std::future::ready(result))
    }
}

impl TermQueue for FakeQueue {
    fn enqueue_batch<'a>(
        &'a self,
        msgs: &'a [ExecutionMessage],
    ) -> QueueFuture<'a, Vec<EnqueueOutcome>> {
        let fault = {
            let mut inner = lock(&self.inner);
            let hit = inner.panic_at.as_ref().is_some_and(|(id, at)| {
                msgs.iter()
                    .any(|m| &*m.task_id == id.as_str() && m.fire_at == *at)
            });
            hit.then(|| inner.panic_at.take())
        };
        if let Some(Some((id, at))) = fault {
            panic!("injected fault: enqueue of {id} at {at}");
        }
        self.answer("enqueue", |inner| {
            msgs.iter().map(|m| Self::enqueue_one(inner, m)).collect()
        })
    }

    fn advance_fence<'a>(
        &'a self,
        queue: &'a str,
        shard: Option<u32>,
        token: u64,
        cluster: &'a str,
    ) -> QueueFuture<'a, Fence> {
        self.answer("advance_fence", |inner| {
            let newest = inner.fences.entry((queue.to_owned(), shard)).or_insert(0);
            *newest = (*newest).max(token);
            Fence {
                newest: *newest,
                token,
                owner: cluster.to_owned(),
                cluster: cluster.to_owned(),
            }
        })
    }

    fn run_id(&self) -> QueueFuture<'_, String> {
        self.answer("run_id", |_| "fake".to_owned())
    }

    fn ping<'a>(&'a self, _queue: Option<&'a str>) -> QueueFuture<'a, ()> {
        self.answer("ping", |_| ())
    }

    fn server_info(&self) -> QueueFuture<'_, ServerInfo> {
        Box::pin(std::future::ready(Err(down("server_info"))))
    }

    fn stats<'a>(&'a self, _: &'a str, _: UtcMillis) -> QueueFuture<'a, QueueStats> {
        Box::pin(std::future::ready(Err(down("stats"))))
    }

    fn read_events(&self, _: Option<u32>, max: usize) -> QueueFuture<'_, Vec<EventEntry>> {
        self.answer("read_events", |inner| {
            let n = inner.events.len().min(max);
            inner.events.drain(..n).collect()
        })
    }

    fn claim_events<'a>(
        &'a self,
        _: Option<u32>,
        _: Duration,
        _: &'a str,
        _: usize,
    ) -> QueueFuture<'a, (String, Vec<EventEntry>)> {
        self.answer("claim_events", |_| ("0-0".to_owned(), Vec::new()))
    }

    fn ack_events<'a>(
        &'a self,
        _: Option<u32>,
        positions: &'a [EventPosition],
    ) -> QueueFuture<'a, ()> {
        self.answer("ack_events", |inner| {
            inner.acked.extend_from_slice(positions)
        })
    }

    fn history_many<'a>(
        &'a self,
        tasks: &'a [(&'a str, &'a str)],
        _: usize,
    ) -> QueueFuture<'a, Vec<Vec<HistoryEntry>>> {
        self.answer("history_many", |inner| {
            tasks
                .iter()
                .map(|(ns, id)| {
                    let task = ((*ns).to_owned(), (*id).to_owned());
                    inner.history.get(&task).cloned().unwrap_or_default()
                })
                .collect()
        })
    }

    fn record_history<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a HistoryEntry,
    ) -> QueueFuture<'a, ()> {
        self.answer("record_history", |_| ())
    }

    fn delete_histories<'a>(&'a self, _: &'a [(&'a str, &'a str)]) -> QueueFuture<'a, ()> {
        self.answer("delete_histories", |_| ())
    }

    fn live_workers<'a>(&'a self, _: &'a str) -> QueueFuture<'a, Vec<String>> {
        self.answer("live_workers", |_| Vec::new())
    }

    fn tasks_with_work<'a>(
        &'a self,
        _: &'a str,
        tasks: &'a [(&'a str, &'a str)],
    ) -> QueueFuture<'a, HashSet<(String, String)>> {
        self.answer("tasks_with_work", |inner| {
            let asked: HashSet<Task> = tasks
                .iter()
                .map(|(ns, id)| ((*ns).to_owned(), (*id).to_owned()))
                .collect();
            inner
                .pushed
                .iter()
                .filter(|m| !inner.gone.contains(&m.execution_id))
                .map(task_of)
                .filter(|t| asked.contains(t))
                .collect()
        })
    }

    fn fix_fanout_workers<'a>(
        &'a self,
        _: &'a str,
        _: ExecutionId,
        workers: &'a [String],
    ) -> QueueFuture<'a, Vec<String>> {
        self.answer("fix_fanout_workers", |_| workers.to_vec())
    }
}

#[derive(Default)]
struct StoreInner {
    states: HashMap<TaskKey, TaskState>,
    /// Every state written, in order.
    writes: Vec<(TaskKey, TaskState)>,
    /// A fault injected: the next state write panics.
    panic_on_write: bool,
    /// The pending run-now requests.
    triggers: Vec<PendingTrigger>,
    /// A fault injected: the next read of the run-now requests panics.
    panic_on_trigger_read: bool,
}

/// etcd's task states, in memory.
#[derive(Default)]
pub(crate) struct FakeStore {
    inner: Mutex<StoreInner>,
}

impl FakeStore {
    /// A store holding `states`.
    pub(crate) fn with(states: impl IntoIterator<Item = (TaskKey, TaskState)>) -> FakeStore {
        let store = FakeStore::default();
        lock(&store.inner).states.extend(states);
        store
    }

    /// Fault injection: the next state write panics (before writing anything), as a bug in
    /// the state flusher would.
    pub(crate) fn panic_on_next_write(&self) {
        lock(&self.inner).panic_on_write = true;
    }

    /// A run-now request is pending (deleting it is not modelled: a term must not take it
    /// twice).
    pub(crate) fn add_trigger(&self, trigger: PendingTrigger) {
        lock(&self.inner).triggers.push(trigger);
    }

    /// Fault injection: the next read of the run-now requests panics, as a bug in the
    /// poller would.
    pub(crate) fn panic_on_next_trigger_read(&self) {
        lock(&self.inner).panic_on_trigger_read = true;
    }

    /// The state stored for `ns/id`.
    pub(crate) fn state(&self, ns: &str, id: &str) -> Option<TaskState> {
        lock(&self.inner).states.get(&TaskKey::new(ns, id)).cloned()
    }

    /// Every state of `ns/id` written, in order.
    pub(crate) fn writes_of(&self, ns: &str, id: &str) -> Vec<TaskState> {
        let key = TaskKey::new(ns, id);
        lock(&self.inner)
            .writes
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, s)| s.clone())
            .collect()
    }

    fn listing(&self, keep: impl Fn(&TaskKey) -> bool) -> StateListing {
        let inner = lock(&self.inner);
        StateListing {
            states: inner
                .states
                .iter()
                .filter(|(k, _)| keep(k))
                .map(|(k, s)| StoredState {
                    namespace: k.namespace.to_string(),
                    id: k.id.to_string(),
                    state: s.clone(),
                    mod_revision: 1,
                })
                .collect(),
            undecodable: Vec::new(),
        }
    }
}

fn ready<T: Send + 'static>(value: T) -> StoreFuture<'static, T> {
    Box::pin(std::future::ready(Ok::<T, RegistryError>(value)))
}

impl TermStore for FakeStore {
    fn list_states<'a>(&'a self, _: Option<&'a str>) -> StoreFuture<'a, StateListing> {
        ready(self.listing(|_| true))
    }

    fn get_states<'a>(&'a self, keys: &'a [TaskKey]) -> StoreFuture<'a, StateListing> {
        ready(self.listing(|k| keys.contains(k)))
    }

    fn cluster(&self) -> StoreFuture<'_, (u64, i64)> {
        ready((1, 1))
    }

    fn put_states<'a>(
        &'a self,
        states: &'a [(TaskKey, TaskState)],
        _: &'a WriteFence,
    ) -> StoreFuture<'a, i64> {
        let mut inner = lock(&self.inner);
        if std::mem::take(&mut inner.panic_on_write) {
            drop(inner);
            panic!("injected fault: a state write");
        }
        for (k, s) in states {
            inner.states.insert(k.clone(), s.clone());
            inner.writes.push((k.clone(), s.clone()));
        }
        ready(1)
    }

    fn delete_state<'a>(&'a self, namespace: &'a str, id: &'a str) -> StoreFuture<'a, ()> {
        lock(&self.inner)
            .states
            .remove(&TaskKey::new(namespace, id));
        ready(())
    }

    fn ledger_writer(&self, _: &WriteFence) -> ax_registry::LedgerWriter {
        ax_registry::LedgerWriter::new(None)
    }

    /// Finals are kept as states: the fake has no ledger to merge.
    fn put_finals<'a>(
        &'a self,
        finals: &'a [(TaskKey, TaskState)],
        _: &'a mut ax_registry::LedgerWriter,
    ) -> StoreFuture<'a, Vec<u32>> {
        let mut inner = lock(&self.inner);
        for (k, s) in finals {
            inner.states.insert(k.clone(), s.clone());
            inner.writes.push((k.clone(), s.clone()));
        }
        ready(Vec::new())
    }

    fn drop_finals<'a>(
        &'a self,
        _: &'a [TaskKey],
        _: &'a mut ax_registry::LedgerWriter,
    ) -> StoreFuture<'a, ()> {
        ready(())
    }

    fn compact_finals<'a>(
        &'a self,
        _: u32,
        _: &'a mut ax_registry::LedgerWriter,
    ) -> StoreFuture<'a, bool> {
        ready(false)
    }

    fn list_triggers(&self) -> StoreFuture<'_, (i64, Vec<PendingTrigger>)> {
        let mut inner = lock(&self.inner);
        if std::mem::take(&mut inner.panic_on_trigger_read) {
            drop(inner);
            panic!("injected fault: a read of the run-now requests");
        }
        ready((0, inner.triggers.clone()))
    }

    fn delete_trigger<'a>(&'a self, _: &'a str, _: &'a str, _: ExecutionId) -> StoreFuture<'a, ()> {
        ready(())
    }

    fn paused_namespaces(&self) -> StoreFuture<'_, Vec<NamespacePause>> {
        ready(Vec::new())
    }
}

/// A term's dependencies, all stand-ins: an empty store and queue, a clock on tokio's time,
/// no metrics, alerts, audit or clock check.
pub(crate) fn term_deps() -> crate::deps::TermDeps {
    crate::deps::TermDeps {
        store: Arc::new(FakeStore::with([])),
        queue: Arc::new(FakeQueue::default()),
        clock: Arc::new(crate::clock::TokioClock::starting_at(UtcMillis(0))),
        metrics: Arc::new(crate::metrics::NoMetrics),
        alerts: None,
        tracker: tokio_util::task::TaskTracker::new(),
        audit: Arc::new(crate::audit::NoAudit),
        clock_check: None,
    }
}

/// Tokio's time plus a step the test sets (`step`, ms): a host clock stepped by NTP.
#[derive(Debug)]
pub(crate) struct SteppedClock {
    start: tokio::time::Instant,
    base: i64,
    pub(crate) step: std::sync::atomic::AtomicI64,
}

impl SteppedClock {
    /// Reads `base` ms at `start`, then follows tokio's time.
    pub(crate) fn new(start: tokio::time::Instant, base: i64) -> Self {
        SteppedClock {
            start,
            base,
            step: std::sync::atomic::AtomicI64::new(0),
        }
    }
}

impl crate::clock::Clock for SteppedClock {
    fn now(&self) -> UtcMillis {
        let real = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        UtcMillis(self.base + real + self.step.load(Ordering::SeqCst))
    }
}

/// A clock probe that answers a clock's skew against a reference following tokio's time
/// (`base` ms at `start`), as etcd's `Date` would against a right clock.
#[derive(Debug)]
pub(crate) struct ReferenceProbe {
    start: tokio::time::Instant,
    base: i64,
    /// While set, every check fails (etcd's HTTP listener does not answer).
    pub(crate) failing: std::sync::atomic::AtomicBool,
}

impl ReferenceProbe {
    /// The reference reads `base` at `start`.
    pub(crate) fn new(start: tokio::time::Instant, base: i64) -> Self {
        ReferenceProbe {
            start,
            base,
            failing: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl crate::clock::ClockProbe for ReferenceProbe {
    fn skew<'a>(&'a self, clock: &'a dyn crate::clock::Clock) -> crate::clock::SkewFuture<'a> {
        Box::pin(async move {
            if self.failing.load(Ordering::SeqCst) {
                return Err("etcd's HTTP listener does not answer".into());
            }
            let real =
                self.base + i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
            #[allow(clippy::cast_precision_loss)]
            Ok((clock.now().0 - real) as f64 / 1000.0)
        })
    }
}
