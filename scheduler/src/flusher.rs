//! Writes the leader's task states and consumed trigger keys to etcd, off the fire path, then
//! acknowledges the worker events whose effects those states hold. A deleted task's state
//! goes with its execution history.
//!
//! The leader loop hands over batches of coalesced states; while a write is in flight, newer
//! batches pile up in the channel and are merged (latest state per task wins) into the next
//! write, so the write rate adapts to what etcd sustains instead of queuing without bound.
//! The leader never waits for room in the channel: when it is full (etcd slow or stopped),
//! the changes stay in the dispatcher, which coalesces them, and go with a later flush, so a
//! slow etcd never delays a fire. Every state write is fenced on the leader key's (or the shard
//! owner key's) create
//! revision: a deposed leader's writes are refused, and that refusal ends its term.
//!
//! Events are acknowledged only after everything handed over with them (and before them) is
//! written: until then they stay pending in Redis, for this leader's successor if it dies.
//! A failed acknowledgement is only logged: the events are claimed again later and ignored
//! by position, since the states already hold them.
//!
//! The alerts of the failed attempts those events ended are sent here too, once the states
//! holding the ends are written, never before: a leader that dies (or is deposed) before
//! the write has sent none of them, and its successor applies the ends again and sends
//! them; one that wrote them has sent them, and its successor ignores the ends by position.
//! So through a failover each failed attempt is alerted once; an alert is lost only with
//! the process that wrote its state, in the moment before the alert manager delivered it.
//!
//! One-shots' finals go to the finals ledger ([`ax_scheduler_core::finals`]): a sheet per
//! bucket touched, in the same flush as the other states (so nothing waits longer for its
//! acknowledgement than before), and a bucket that gathered many sheets is compacted after
//! the flush. A flush's sheets go in slices of whole buckets, paced like the states: written
//! at once, the finals of 10 000 one-shots a second (about 2 MB a flush) cost the leader
//! and etcd a burst of CPU that the fire path felt as a lateness spike. A deleted task's
//! ledger entries are dropped before its state key is deleted, so that a delete either
//! happened whole or is done again by the next leader (the task is then an orphan of its
//! takeover).
//!
//! The flusher lives as long as its term's sender: it writes everything it was handed, the
//! term's last flush included, and ends when the term drops the sender. The term's
//! cancellation only cuts short the waits between failed attempts, so a shutdown is not held
//! up by an unreachable etcd.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use ax_alerting::{Alert, AlertSender};
use ax_registry::{LedgerWriter, PendingTrigger, RegistryError, MAX_TXN_OPS};
use ax_scheduler_core::dispatcher::StateWrite;
use ax_scheduler_core::finals;
use ax_scheduler_core::{Clock, EventPosition, ReconnectBackoff};
use ax_scheduler_core::{TaskKey, TaskState};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use crate::backend::{TermQueue, TermStore, WriteFence};

/// Pause between two state transactions of one flush.
const PACE: Duration = Duration::from_millis(2);

/// Work for the flusher.
pub(super) struct FlushRequest {
    /// Task states to write (`Some`) or delete (`None`).
    pub(super) writes: Vec<StateWrite>,
    /// One-shots' finals, for the ledger.
    pub(super) finals: Vec<(Arc<TaskKey>, TaskState)>,
    /// Consumed run-now triggers whose keys to delete.
    pub(super) triggers: Vec<PendingTrigger>,
    /// Worker events applied to these states, to acknowledge once they are written.
    pub(super) acks: Vec<EventPosition>,
    /// Alerts of the failed attempts those events (or the history) ended, to send once the
    /// states are written.
    pub(super) alerts: Vec<Alert>,
    /// Answered when these (and everything before them) are written.
    pub(super) done: Option<oneshot::Sender<()>>,
}

/// Where the flusher's alerts go, and the clock that dates them.
pub(super) struct Alerts {
    /// The alert manager, if alerts are configured.
    pub(super) sender: Option<AlertSender>,
    /// The role's clock.
    pub(super) clock: Arc<dyn Clock>,
}

/// Runs until the channel closes (the term dropped its sender), or a write is refused or
/// fails after `cancel` fired. `fence` is the term's (leader or shard owner); a refused write
/// cancels `cancel` (the term is over).
pub(super) async fn run(
    registry: Arc<dyn TermStore>,
    queue: Arc<dyn TermQueue>,
    fence: WriteFence,
    shard: Option<u32>,
    mut rx: mpsc::Receiver<FlushRequest>,
    alerts: Alerts,
    cancel: CancellationToken,
) {
    let flusher = Flusher {
        ledger: tokio::sync::Mutex::new(Ledger {
            writer: registry.ledger_writer(&fence),
            appended: HashMap::new(),
        }),
        registry,
        queue,
        fence,
        shard,
        alerts: alerts.sender,
        clock: alerts.clock,
        cancel,
    };
    let mut batch = Batch::default();
    loop {
        // Not raced against the cancellation: a request handed over (the last flush of a
        // term that is ending) is written before the flusher ends.
        let Some(first) = rx.recv().await else { return };
        batch.take(first);
        batch.take_waiting(&mut rx);
        if flusher.flush(&mut batch, &mut rx).await.is_break() {
            return;
        }
    }
}

/// What one flush writes: the requests taken since the last written one, merged.
#[derive(Default)]
struct Batch {
    states: HashMap<TaskKey, Option<TaskState>>,
    /// Finals for the ledger; a task is in `states` or here, as its newest write says.
    finals: HashMap<TaskKey, TaskState>,
    keys: Vec<PendingTrigger>,
    acks: Vec<EventPosition>,
    alerts: Vec<Alert>,
    waiters: Vec<oneshot::Sender<()>>,
}

impl Batch {
    fn take(&mut self, request: FlushRequest) {
        for (key, state) in request.writes {
            self.finals.remove(&*key);
            self.states.insert((*key).clone(), state);
        }
        for (key, state) in request.finals {
            self.states.remove(&*key);
            self.finals.insert((*key).clone(), state);
        }
        self.keys.extend(request.triggers);
        self.acks.extend(request.acks);
        self.alerts.extend(request.alerts);
        self.waiters.extend(request.done);
    }

    /// Merges what is already in the channel, without waiting for more.
    fn take_waiting(&mut self, rx: &mut mpsc::Receiver<FlushRequest>) {
        while let Ok(more) = rx.try_recv() {
            self.take(more);
        }
    }
}

/// What stays the same across the flushes of one term.
struct Flusher {
    /// The ledger's writer and how many sheets each bucket gained since it was compacted.
    ledger: tokio::sync::Mutex<Ledger>,
    registry: Arc<dyn TermStore>,
    queue: Arc<dyn TermQueue>,
    fence: WriteFence,
    shard: Option<u32>,
    alerts: Option<AlertSender>,
    clock: Arc<dyn Clock>,
    cancel: CancellationToken,
}

impl Flusher {
    /// Writes `batch`, retrying until it is written, then releases what waited on it.
    /// Breaks when the flusher ends: the write was refused, or `cancel` fired between
    /// attempts.
    async fn flush(
        &self,
        batch: &mut Batch,
        rx: &mut mpsc::Receiver<FlushRequest>,
    ) -> ControlFlow<()> {
        let mut backoff = ReconnectBackoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut alerted = false;
        loop {
            let mut ledger = self.ledger.lock().await;
            match write(
                &*self.registry,
                &*self.queue,
                &self.fence,
                batch,
                &mut ledger,
            )
            .await
            {
                Ok(()) => {
                    self.release(batch).await;
                    if let Err(e) = compact(&*self.registry, &mut ledger).await {
                        // Not worth failing over: the bucket is compacted at a later flush.
                        warn!(error = %e, "cannot compact the finals ledger");
                        if matches!(e, RegistryError::Fenced { .. }) {
                            self.cancel.cancel();
                            return ControlFlow::Break(());
                        }
                    }
                    return ControlFlow::Continue(());
                }
                Err(RegistryError::Fenced { .. }) => {
                    warn!(
                        alerts = batch.alerts.len(),
                        "state write refused: another replica leads now (and applies these ends, and alerts, again)"
                    );
                    self.cancel.cancel();
                    return ControlFlow::Break(());
                }
                Err(e) => {
                    if e.is_out_of_space() && !alerted {
                        alerted = true;
                        self.alert_out_of_space(&e, batch.states.len());
                    }
                    self.after_failure(e, &mut backoff, batch).await?;
                    // Merge what arrived meanwhile, so the retry writes the newest states.
                    batch.take_waiting(rx);
                }
            }
        }
    }

    /// Once `batch` is written: sends its alerts, acknowledges its events, answers its
    /// waiters, and empties it for the next flush.
    async fn release(&self, batch: &mut Batch) {
        debug!(
            states = batch.states.len(),
            finals = batch.finals.len(),
            keys = batch.keys.len(),
            events = batch.acks.len(),
            alerts = batch.alerts.len(),
            "flushed"
        );
        // The states hold the ends: no successor applies them again.
        for alert in batch.alerts.drain(..) {
            if let Some(sender) = &self.alerts {
                sender.send(alert);
            }
        }
        if let Err(e) = self.queue.ack_events(self.shard, &batch.acks).await {
            warn!(error = %e, events = batch.acks.len(), "cannot acknowledge execution events; they will be read again and ignored");
        }
        // Emptied and given back past a small size: the first flush of a term
        // holds every task's state, and a table keeps its largest capacity
        // (about 500 bytes a task at a million tasks) for as long as it lives.
        batch.states.clear();
        batch.states.shrink_to(KEPT_CAPACITY);
        batch.finals.clear();
        batch.finals.shrink_to(KEPT_CAPACITY);
        batch.keys.clear();
        batch.keys.shrink_to(KEPT_CAPACITY);
        batch.acks.clear();
        batch.acks.shrink_to(KEPT_CAPACITY);
        for w in batch.waiters.drain(..) {
            let _ = w.send(());
        }
    }

    /// Tells a person that etcd is at its space quota, once for each batch it refuses: what
    /// waits for it, and how to give it space again.
    fn alert_out_of_space(&self, e: &RegistryError, waiting: usize) {
        error!(error = %e, states = waiting, "etcd is at its space quota (NOSPACE alarm): task states wait in memory until it takes writes again; compact and defragment etcd, then disarm the alarm");
        if let Some(sender) = &self.alerts {
            sender.send(Alert::etcd_out_of_space(
                &e.to_string(),
                waiting,
                self.clock.now(),
            ));
        }
    }

    /// After a failed write (not a refusal): reports it, isolates a refused record once
    /// the failures repeat, and waits before the next attempt. Breaks when the flusher
    /// ends: a newer leader refused a write, or `cancel` fired during the wait.
    async fn after_failure(
        &self,
        e: RegistryError,
        backoff: &mut ReconnectBackoff,
        batch: &mut Batch,
    ) -> ControlFlow<()> {
        let states = &mut batch.states;
        let wait = backoff.next_delay(&mut rand::rng());
        let attempt = backoff.failures();
        warn!(error = %e, attempt, states = states.len(), "cannot write task states; retrying");
        if attempt >= ISOLATE_AFTER
            && matches!(e, RegistryError::Etcd { .. })
            && !e.is_out_of_space()
        {
            // etcd answers and still refuses: find the record it refuses. Not when it is out
            // of space: then it refuses every record alike, and each would be dropped. The
            // finals go to their state keys then, one by one like the rest (a sheet refused
            // would otherwise hold up every flush).
            for (key, state) in batch.finals.drain() {
                states.insert(key, Some(state));
            }
            match isolate(&*self.registry, &self.fence, states).await {
                Err(RegistryError::Fenced { .. }) => {
                    warn!("state write refused: another replica leads now");
                    self.cancel.cancel();
                    return ControlFlow::Break(());
                }
                Err(e) => warn!(error = %e, "cannot write task states one by one"),
                Ok(()) => {}
            }
        }
        tokio::select! {
            _ = self.cancel.cancelled() => ControlFlow::Break(()),
            _ = tokio::time::sleep(wait) => ControlFlow::Continue(()),
        }
    }
}

/// About how many finals one ledger write carries (whole buckets, so it may be more).
const FINALS_PER_WRITE: usize = 512;

/// Pause between two ledger writes of one flush.
const FINALS_PACE: Duration = Duration::from_millis(5);

/// `finals`, sorted by their `buckets`, cut into slices of at least `per` entries (the last
/// one fewer) that each hold whole buckets.
fn bucket_slices<'a, T>(buckets: &[u32], finals: &'a [T], per: usize) -> Vec<&'a [T]> {
    let mut slices = Vec::new();
    let mut start = 0;
    for i in 1..=finals.len() {
        let ends_bucket = i == finals.len() || buckets[i] != buckets[i - 1];
        if ends_bucket && (i - start >= per || i == finals.len()) {
            slices.push(&finals[start..i]);
            start = i;
        }
    }
    slices
}

/// Entries the flusher's buffers keep room for between flushes.
const KEPT_CAPACITY: usize = 4096;

/// Failed writes of a batch before its states are written one by one.
const ISOLATE_AFTER: u32 = 3;

/// Writes each state alone. One that etcd refuses even alone (too large, say) is reported
/// and dropped, to be written again at the task's next change, so that one bad record cannot
/// stop every other task's state from being written for the rest of the term. Stops at an
/// error that is not about the record (etcd not answering, a newer leader).
async fn isolate(
    registry: &dyn TermStore,
    fence: &WriteFence,
    states: &mut HashMap<TaskKey, Option<TaskState>>,
) -> Result<(), RegistryError> {
    let puts: Vec<(TaskKey, TaskState)> = states
        .iter()
        .filter_map(|(k, s)| s.as_ref().map(|s| (k.clone(), s.clone())))
        .collect();
    for (key, state) in puts {
        let one = [(key.clone(), state)];
        match registry.put_states(&one, fence).await {
            Ok(_) => {
                states.remove(&key);
            }
            Err(e @ (RegistryError::Fenced { .. } | RegistryError::Timeout { .. })) => {
                return Err(e)
            }
            // Not about this record: every write fails alike until etcd has space again.
            Err(e) if e.is_out_of_space() => return Err(e),
            Err(e) => {
                error!(task_id = %key, error = %e, "task state cannot be written; dropped until the task changes again");
                states.remove(&key);
            }
        }
    }
    Ok(())
}

/// The ledger's side of a term's flusher.
struct Ledger {
    writer: LedgerWriter,
    /// Sheets written to each bucket since the flusher last compacted it.
    appended: HashMap<u32, usize>,
}

/// Compacts the buckets that gained enough sheets since they were last compacted.
async fn compact(registry: &dyn TermStore, ledger: &mut Ledger) -> Result<(), RegistryError> {
    let due: Vec<u32> = ledger
        .appended
        .iter()
        .filter(|(_, n)| **n >= finals::COMPACT_SHEETS)
        .map(|(b, _)| *b)
        .collect();
    for bucket in due {
        let compacted = registry.compact_finals(bucket, &mut ledger.writer).await?;
        debug!(bucket, compacted, "finals ledger bucket checked");
        ledger.appended.remove(&bucket);
    }
    Ok(())
}

async fn write(
    registry: &dyn TermStore,
    queue: &dyn TermQueue,
    fence: &WriteFence,
    batch: &Batch,
    ledger: &mut Ledger,
) -> Result<(), RegistryError> {
    let puts: Vec<(TaskKey, TaskState)> = batch
        .states
        .iter()
        .filter_map(|(k, s)| s.as_ref().map(|s| (k.clone(), s.clone())))
        .collect();
    // One transaction per chunk, paced: a flush of thousands of states sent back to back
    // takes the CPU etcd, Redis and the fire path share, and shows up as lateness spikes.
    let chunks = puts.chunks(MAX_TXN_OPS).count();
    for (i, chunk) in puts.chunks(MAX_TXN_OPS).enumerate() {
        registry.put_states(chunk, fence).await?;
        if i + 1 < chunks {
            tokio::time::sleep(PACE).await;
        }
    }
    if !batch.finals.is_empty() {
        let mut finals: Vec<(u32, TaskKey, TaskState)> = batch
            .finals
            .iter()
            .map(|(k, s)| (finals::bucket(k), k.clone(), s.clone()))
            .collect();
        finals.sort_unstable_by_key(|(bucket, _, _)| *bucket);
        let (buckets, finals): (Vec<u32>, Vec<(TaskKey, TaskState)>) =
            finals.into_iter().map(|(b, k, s)| (b, (k, s))).unzip();
        // Paced like the states, in slices of whole buckets (so a flush still writes one
        // sheet per bucket): at 10 000 one-shots a second a flush carries 5 000 finals,
        // about 2 MB that etcd, and the leader encoding them, would otherwise take in one
        // burst of CPU, which the fire path shares.
        let slices = bucket_slices(&buckets, &finals, FINALS_PER_WRITE);
        let count = slices.len();
        for (i, slice) in slices.into_iter().enumerate() {
            for bucket in registry.put_finals(slice, &mut ledger.writer).await? {
                *ledger.appended.entry(bucket).or_default() += 1;
            }
            if i + 1 < count {
                tokio::time::sleep(FINALS_PACE).await;
            }
        }
    }
    let gone: Vec<TaskKey> = batch
        .states
        .iter()
        .filter(|(_, s)| s.is_none())
        .map(|(k, _)| k.clone())
        .collect();
    if !gone.is_empty() {
        // Before the state keys: a delete cut short is found again as an orphan.
        registry.drop_finals(&gone, &mut ledger.writer).await?;
    }
    let mut deleted = Vec::new();
    for k in &gone {
        registry.delete_state(&k.namespace, &k.id).await?;
        deleted.push((&*k.namespace, &*k.id));
    }
    // The task is gone: its execution history goes too (else it would wait for the history
    // retention). Not worth failing the flush over: the retention removes it anyway.
    if let Err(e) = queue.delete_histories(&deleted).await {
        warn!(error = %e, tasks = deleted.len(), "cannot delete the execution history of deleted tasks");
    }
    for t in &batch.keys {
        registry
            .delete_trigger(&t.namespace, &t.id, t.execution_id)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use ax_queue::Queue;
    use ax_registry::{Registry, RegistryConfig};
    use ax_scheduler_core::UtcMillis;

    use super::*;

    #[test]
    fn bucket_slices_hold_whole_buckets() {
        let buckets = [0, 0, 0, 1, 2, 2, 3, 3, 3, 3, 5];
        let finals: Vec<usize> = (0..buckets.len()).collect();
        let slices = bucket_slices(&buckets, &finals, 3);
        assert_eq!(
            slices,
            vec![
                &finals[0..3],
                &finals[3..6],
                &finals[6..10],
                &finals[10..11]
            ]
        );
        assert!(bucket_slices(&[], &finals[..0], 3).is_empty());
    }

    /// How many keys etcd holds under `prefix`.
    async fn count_under(client: &etcd_client::Client, prefix: String) -> i64 {
        let options = etcd_client::GetOptions::new()
            .with_prefix()
            .with_count_only();
        client
            .kv_client()
            .get(prefix, Some(options))
            .await
            .unwrap()
            .count()
    }

    /// A registry under a fresh prefix whose leader key this test holds: the client, the
    /// prefix, the registry and the fence (on the leader key's create revision).
    async fn led_registry(label: &str) -> (etcd_client::Client, String, Registry, WriteFence) {
        let client = etcd_client::Client::connect([ax_testkit::etcd_endpoint()], None)
            .await
            .unwrap();
        let prefix = format!("/{}", ax_testkit::unique_name(label));
        let registry = Registry::new(
            client.clone(),
            RegistryConfig {
                prefix: prefix.clone(),
                ..RegistryConfig::default()
            },
        );
        let resp = client
            .kv_client()
            .put(registry.keys().leader(), "me", None)
            .await
            .unwrap();
        let fence = WriteFence {
            shard: None,
            token: resp.header().unwrap().revision(),
        };
        (client, prefix, registry, fence)
    }

    /// A flusher of `registry`'s states on the test Redis, fed by `rx`, sending alerts to
    /// `sender`.
    async fn start(
        registry: &Registry,
        fence: WriteFence,
        rx: mpsc::Receiver<FlushRequest>,
        sender: Option<AlertSender>,
        cancel: &CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let queue = Queue::connect(&ax_testkit::redis_url(), ax_queue::QueueConfig::default())
            .await
            .unwrap();
        tokio::spawn(run(
            Arc::new(registry.clone()),
            Arc::new(queue),
            fence,
            None,
            rx,
            Alerts {
                sender,
                clock: Arc::new(ax_scheduler_core::SystemClock),
            },
            cancel.clone(),
        ))
    }

    /// Removes the test's keys.
    async fn clean_up(client: &etcd_client::Client, prefix: &str) {
        client
            .kv_client()
            .delete(
                format!("{prefix}/"),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_state_etcd_refuses_is_isolated_and_the_others_are_written() {
        let (client, prefix, registry, fence) = led_registry("flusher").await;
        let now = UtcMillis(1_800_000_000_000);
        let good = TaskState::new(1, now, now);
        let mut huge = TaskState::new(1, now, now);
        // Larger than etcd accepts in one request (1.5 MiB by default).
        huge.last_error = Some("x".repeat(2 * 1024 * 1024));
        let (tx, rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        let flusher = start(&registry, fence, rx, None, &cancel).await;
        let (done_tx, done_rx) = oneshot::channel();
        tx.send(FlushRequest {
            triggers: Vec::new(),
            acks: Vec::new(),
            alerts: Vec::new(),
            // The same for one-shots' finals: a sheet etcd refuses holds up nothing.
            finals: vec![
                (Arc::new(TaskKey::new("ns", "good-final")), good.clone()),
                (Arc::new(TaskKey::new("ns", "huge-final")), huge.clone()),
            ],
            writes: vec![
                (Arc::new(TaskKey::new("ns", "good")), Some(good.clone())),
                (Arc::new(TaskKey::new("ns", "huge")), Some(huge)),
            ],
            done: Some(done_tx),
        })
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_secs(20), done_rx)
            .await
            .expect("the flush must not be wedged by one record")
            .unwrap();
        let written = registry.get_state("ns", "good").await.unwrap().unwrap();
        assert_eq!(written.state, good);
        assert!(registry.get_state("ns", "huge").await.unwrap().is_none());
        let written = registry.get_state("ns", "good-final").await.unwrap();
        assert_eq!(written.unwrap().state, good);
        assert!(registry
            .get_state("ns", "huge-final")
            .await
            .unwrap()
            .is_none());
        drop(tx);
        flusher.await.unwrap();
        clean_up(&client, &prefix).await;
    }

    /// A channel that records each alert it delivers, and whether the task's state was in
    /// etcd at that moment.
    struct Recorder {
        registry: Registry,
        seen: std::sync::Mutex<Vec<(String, bool)>>,
    }

    impl ax_alerting::Channel for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }

        fn send<'a>(&'a self, alert: &'a Alert) -> ax_alerting::SendFuture<'a> {
            Box::pin(async move {
                let task = alert.task.clone().unwrap();
                let written = self
                    .registry
                    .get_state(&task.namespace, &task.id)
                    .await
                    .unwrap()
                    .is_some();
                self.seen
                    .lock()
                    .unwrap()
                    .push((alert.title.clone(), written));
                Ok(())
            })
        }
    }

    /// Flushes one state of `id` with its failure alert under `fence`; what the alert
    /// channel saw once everything stopped.
    async fn flush_with_alert(
        registry: &Registry,
        fence: WriteFence,
        id: &str,
    ) -> Vec<(String, bool)> {
        let recorder = Arc::new(Recorder {
            registry: registry.clone(),
            seen: Default::default(),
        });
        let tracker = tokio_util::task::TaskTracker::new();
        let sender = ax_alerting::AlertManager::new(
            ax_alerting::AlertManagerConfig::default(),
            vec![recorder.clone() as Arc<dyn ax_alerting::Channel>],
        )
        .unwrap()
        .spawn(&tracker, CancellationToken::new());
        let (tx, rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        let flusher = start(registry, fence, rx, Some(sender), &cancel).await;
        let now = UtcMillis(1_800_000_000_000);
        tx.send(FlushRequest {
            writes: vec![(
                Arc::new(TaskKey::new("ns", id)),
                Some(TaskState::new(1, now, now)),
            )],
            triggers: Vec::new(),
            finals: Vec::new(),
            acks: Vec::new(),
            alerts: vec![Alert::task_failed("ns", id, 1, "boom", now)],
            done: None,
        })
        .await
        .unwrap();
        drop(tx);
        tokio::time::timeout(Duration::from_secs(20), flusher)
            .await
            .unwrap()
            .unwrap();
        // The flusher held the last sender: the manager delivers what it took and ends.
        tracker.close();
        tokio::time::timeout(Duration::from_secs(20), tracker.wait())
            .await
            .unwrap();
        let seen = recorder.seen.lock().unwrap().clone();
        seen
    }

    #[tokio::test]
    async fn failure_alerts_go_only_once_their_states_are_written() {
        let (client, prefix, registry, fence) = led_registry("flusher-alerts").await;
        // Written: the alert goes, after the state.
        let seen = flush_with_alert(&registry, fence, "written").await;
        assert_eq!(seen, [("Task failed: ns/written".to_owned(), true)]);
        // Refused (a newer leader): nothing written, nothing alerted; the successor applies
        // the end again and alerts it.
        let seen = flush_with_alert(
            &registry,
            WriteFence {
                shard: None,
                token: fence.token - 1,
            },
            "refused",
        )
        .await;
        assert_eq!(seen, []);
        assert!(registry.get_state("ns", "refused").await.unwrap().is_none());
        clean_up(&client, &prefix).await;
    }

    #[tokio::test]
    async fn a_new_leader_reads_finals_from_the_ledger_and_fires_none_again() {
        let (client, prefix, registry, fence) = led_registry("flusher-finals").await;
        let due = UtcMillis(1_800_000_000_000);
        let json = format!(r#"{{"handler":"log","schedule":{{"at":"{due}"}}}}"#);
        // More than one paced ledger write holds (`FINALS_PER_WRITE`).
        let keys: Vec<TaskKey> = (0..600)
            .map(|i| TaskKey::new("ns", format!("o{i}")))
            .collect();
        for k in &keys {
            let spec =
                ax_scheduler_core::TaskSpec::from_json(json.as_bytes(), "ns", &k.id).unwrap();
            registry.register(&spec).await.unwrap();
        }
        let specs = registry.list(None).await.unwrap().tasks;
        // The old leader ran them and flushed their finals.
        let mut ended = TaskState::new(0, due, due);
        ended.status = ax_scheduler_core::TaskStatus::Success;
        ended.last_fire_at = Some(due);
        ended.fire_count = 1;
        ended.success_count = 1;
        let finals = specs
            .iter()
            .map(|t| {
                let key = TaskKey::new(t.spec.namespace.clone(), t.spec.id.clone());
                let mut state = ended.clone();
                state.spec_revision = t.mod_revision;
                (Arc::new(key), state)
            })
            .collect();
        let (tx, rx) = mpsc::channel(4);
        let flusher = start(&registry, fence, rx, None, &CancellationToken::new()).await;
        tx.send(FlushRequest {
            writes: Vec::new(),
            finals,
            triggers: Vec::new(),
            acks: Vec::new(),
            alerts: Vec::new(),
            done: None,
        })
        .await
        .unwrap();
        drop(tx);
        flusher.await.unwrap();
        assert_eq!(
            count_under(&client, registry.keys().states_prefix()).await,
            0,
            "finals go to the ledger, not to state keys"
        );
        assert_eq!(
            count_under(&client, registry.keys().finals_prefix()).await,
            i64::from(ax_scheduler_core::finals::BUCKETS),
            "one sheet per bucket, however many writes the flush took"
        );
        // The one leader lists every state; a shard owner reads its tasks' by key.
        let listed = registry.list_states(None).await.unwrap().states;
        let read = registry.get_states(&keys).await.unwrap().states;
        for states in [listed, read] {
            let mut next = ax_scheduler_core::Dispatcher::new(
                Default::default(),
                due.add(Duration::from_secs(90_000)),
            );
            let now = due.add(Duration::from_secs(90_000));
            let mut states: HashMap<TaskKey, TaskState> = states
                .into_iter()
                .map(|s| (TaskKey::new(s.namespace, s.id), s.state))
                .collect();
            assert_eq!(states.len(), keys.len());
            for t in &specs {
                let key = TaskKey::new(t.spec.namespace.clone(), t.spec.id.clone());
                let state = states.remove(&key);
                next.upsert(key, t.spec.clone(), t.mod_revision, state, now);
            }
            // A day later (the fire marks' dedupe gone): nothing fires again, the finals
            // show, and the takeover writes nothing.
            assert!(next.poll(now).is_empty(), "no one-shot fires twice");
            for k in &keys {
                assert_eq!(
                    next.state(k).unwrap().status,
                    ax_scheduler_core::TaskStatus::Success
                );
            }
            assert!(next.take_writes(UtcMillis::MAX).is_empty());
        }
        clean_up(&client, &prefix).await;
    }
}
