//! A term on tokio's paused time against the in-memory key, queue and store of `fakes`:
//! a test starts a term the way the role does, lets virtual time run (`sleep` with the
//! runtime's auto-advance fires every timer in order; `advance` jumps) and looks at what
//! reached the queue and the store.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use ax_scheduler_core::placement::Placement;
use ax_scheduler_core::{DispatcherConfig, TaskKey, TaskSpec, TaskState, UtcMillis};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::fakes::{FakeKey, FakeQueue, FakeStore};
use super::{End, Term, TermInput};
use crate::audit::NoAudit;
use crate::authority::Authority;
use crate::catalog::{CatalogEntry, CatalogSlice, Change};
use crate::clock::TokioClock;
use crate::deps::TermDeps;
use crate::feeds::Feeds;
use crate::metrics::NoMetrics;
use crate::supervise::tests::Panics;
use crate::LeaderSettings;

/// The wall clock when each test starts (a whole minute).
const T0: i64 = 1_800_000_000_000;

fn at(ms: i64) -> UtcMillis {
    UtcMillis(T0 + ms)
}

fn settings() -> LeaderSettings {
    LeaderSettings {
        instance_id: "test".into(),
        placement: Placement::default(),
        shard_orphan_after: Duration::from_secs(30),
        dispatcher: DispatcherConfig::default(),
        events_interval: Duration::from_millis(100),
        flush_interval: Duration::from_millis(500),
        trigger_interval: Duration::from_millis(250),
        enqueue_stall_limit: Duration::from_secs(30),
        redis_unreachable_limit: Duration::from_secs(5),
        delay_alert_threshold: Duration::from_secs(5),
        max_clock_skew: Duration::from_secs(2),
        repair_after: Duration::from_secs(60),
    }
}

fn task(id: &str, json: &str) -> (Arc<TaskKey>, CatalogEntry) {
    let spec = TaskSpec::from_json(json.as_bytes(), "ns", id).unwrap();
    (
        Arc::new(TaskKey::new("ns", id)),
        CatalogEntry::Valid {
            spec: Arc::new(spec),
            revision: 1,
        },
    )
}

/// Overlap `allow`: its fires go whether or not the last execution ended (the default,
/// `forbid`, is tested on its own).
const EVERY_10S: &str = r#"{"handler":"log","schedule":{"every":"10s"},"overlap":"allow"}"#;

/// A running term and the handles a test drives it by.
struct Running {
    queue: Arc<FakeQueue>,
    store: Arc<FakeStore>,
    key: FakeKey,
    stop: CancellationToken,
    run: JoinHandle<End>,
    started: Instant,
    /// Held so that the term's inputs stay open.
    _changes: mpsc::Sender<Change>,
    _triggers: watch::Sender<Arc<Vec<ax_registry::PendingTrigger>>>,
    _paused: watch::Sender<Option<BTreeSet<String>>>,
}

impl Running {
    /// Sleeps until `ms` after the term started, every timer before it firing in order.
    async fn until(&self, ms: u64) {
        tokio::time::sleep_until(self.started + Duration::from_millis(ms)).await;
    }

    /// Whether the term's task has ended, once everything ready has run.
    async fn ended(&mut self) -> bool {
        self.end().await.is_some()
    }

    /// How the term ended, if it has (ask once: the answer is taken).
    async fn end(&mut self) -> Option<End> {
        tokio::time::timeout(Duration::from_millis(1), &mut self.run)
            .await
            .ok()
            .map(|joined| joined.expect("the term's task"))
    }
}

/// Takes over with `tasks` and the states in `store`, as the role does, at [`T0`], and runs
/// the term.
async fn start(
    settings: LeaderSettings,
    tasks: Vec<(Arc<TaskKey>, CatalogEntry)>,
    store: FakeStore,
) -> Running {
    start_with(settings, tasks, store, Arc::new(FakeQueue::default())).await
}

async fn start_with(
    settings: LeaderSettings,
    tasks: Vec<(Arc<TaskKey>, CatalogEntry)>,
    store: FakeStore,
    queue: Arc<FakeQueue>,
) -> Running {
    let clock = Arc::new(TokioClock::starting_at(at(0)));
    start_clocked(settings, tasks, store, queue, clock, None).await
}

/// [`start_with`] on `clock`, checked against etcd's by `clock_check`.
async fn start_clocked(
    settings: LeaderSettings,
    tasks: Vec<(Arc<TaskKey>, CatalogEntry)>,
    store: FakeStore,
    queue: Arc<FakeQueue>,
    clock: Arc<dyn crate::clock::Clock>,
    clock_check: Option<Arc<dyn crate::clock::ClockProbe>>,
) -> Running {
    let store = Arc::new(store);
    let deps = TermDeps {
        store: Arc::clone(&store) as _,
        queue: Arc::clone(&queue) as _,
        clock,
        metrics: Arc::new(NoMetrics),
        alerts: None,
        tracker: TaskTracker::new(),
        audit: Arc::new(NoAudit),
        clock_check,
    };
    let (changes_tx, changes) = mpsc::channel(16);
    let (triggers_tx, triggers) = watch::channel(Arc::new(Vec::new()));
    let (paused_tx, paused) = watch::channel(Some(BTreeSet::new()));
    let input = TermInput {
        slice: CatalogSlice {
            entries: tasks,
            revision: 1,
        },
        changes,
        seen: Arc::new(AtomicI64::new(1)),
        feeds: Feeds { triggers, paused },
    };
    let key = FakeKey::leader(7);
    let started = Instant::now();
    let term = Term::start(&settings, &deps, input, Authority::Test(key.clone()))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let run = tokio::spawn({
        let stop = stop.clone();
        async move { term.run(&settings, &deps, &stop).await }
    });
    Running {
        queue,
        store,
        key,
        stop,
        run,
        started,
        _changes: changes_tx,
        _triggers: triggers_tx,
        _paused: paused_tx,
    }
}

#[tokio::test(start_paused = true)]
async fn a_task_fires_on_time_and_not_before() {
    let term = start(settings(), vec![task("a", EVERY_10S)], FakeStore::default()).await;
    term.until(9_999).await;
    assert!(term.queue.pushed().is_empty(), "nothing is due before 10 s");
    term.until(10_001).await;
    assert_eq!(term.queue.fires_of("a"), [at(10_000)]);
    let sent = &term.queue.pushed()[0];
    assert_eq!(sent.fencing_token, 7, "sent under the term's token");
    assert_eq!(sent.enqueued_at, at(10_000), "enqueued on the dot");
    term.until(30_001).await;
    assert_eq!(
        term.queue.fires_of("a"),
        [at(10_000), at(20_000), at(30_000)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_takeover_arms_from_the_recorded_states() {
    // The last leader fired `late` at -30 s and died: the fires at -20, -10 and 0 s were
    // missed, and the default misfire policy runs one of them at once. `fresh` was never
    // recorded: it starts on its schedule.
    let mut recorded = TaskState::new(1, at(-60_000), at(-30_000));
    recorded.last_fire_at = Some(at(-30_000));
    recorded.fire_count = 3;
    let store = FakeStore::with([(TaskKey::new("ns", "late"), recorded)]);
    let term = start(
        settings(),
        vec![task("late", EVERY_10S), task("fresh", EVERY_10S)],
        store,
    )
    .await;
    term.until(1).await;
    let caught_up = term.queue.fires_of("late");
    assert_eq!(
        caught_up.len(),
        1,
        "one run for the fires missed: {caught_up:?}"
    );
    assert!(caught_up[0] > at(-30_000) && caught_up[0] <= at(0));
    assert!(term.queue.fires_of("fresh").is_empty());
    // Its RUNNING is written once the running write delay (5 s) has passed.
    term.until(5_600).await;
    let written = term.store.state("ns", "late").unwrap();
    assert_eq!(written.fire_count, 4, "counted on from the recorded state");
}

#[tokio::test(start_paused = true)]
async fn the_states_of_tasks_deleted_while_no_one_led_are_deleted() {
    let store = FakeStore::with([
        (TaskKey::new("ns", "gone"), TaskState::new(1, at(0), at(0))),
        (TaskKey::new("ns", "kept"), TaskState::new(1, at(0), at(0))),
    ]);
    let term = start(settings(), vec![task("kept", EVERY_10S)], store).await;
    term.until(600).await;
    assert!(term.store.state("ns", "gone").is_none());
    assert!(term.store.state("ns", "kept").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_fire_a_dead_leader_enqueued_is_not_enqueued_again() {
    // The last leader sent the fire at 0 and died before writing that it had; its execution
    // ran and ended, and only the history holds that end (its event was never read).
    let mut recorded = TaskState::new(1, at(-60_000), at(-20_000));
    recorded.last_fire_at = Some(at(-20_000));
    let store = FakeStore::with([(TaskKey::new("ns", "a"), recorded)]);
    let queue = Arc::new(FakeQueue::default());
    queue.mark_enqueued("ns", "a", at(0));
    queue.record_end("ns", "a", succeeded(at(0), at(300)));
    let term = start_with(settings(), vec![task("a", EVERY_10S)], store, queue).await;
    term.until(1_000).await;
    assert!(
        term.queue.fires_of("a").is_empty(),
        "the replayed fire is a duplicate"
    );
    let state = term
        .store
        .state("ns", "a")
        .expect("written at the first flush");
    assert_eq!(
        (state.success_count, state.last_fire_at),
        (1, Some(at(0))),
        "the duplicate's end is taken from the history"
    );
    term.until(10_001).await;
    assert_eq!(term.queue.fires_of("a"), [at(10_000)], "the next fire goes");
}

/// The history entry of a first attempt of a fire at `fire_at` that succeeded at `end`.
fn succeeded(fire_at: UtcMillis, end: UtcMillis) -> ax_queue::HistoryEntry {
    ax_queue::HistoryEntry {
        unstarted: false,
        execution_id: ax_scheduler_core::ExecutionId::from_u128(7),
        fire_at,
        started_at: fire_at,
        finished_at: end,
        lateness_ms: 0,
        duration_ms: u64::try_from(end.0 - fire_at.0).unwrap_or(0),
        end: ax_scheduler_core::AttemptEnd::new(ax_scheduler_core::AttemptOutcome::Succeeded, None),
        worker: "w".into(),
        attempt: 0,
        queue: "default".into(),
        enqueued_at: None,
        first_enqueued_at: None,
        output: None,
        lineage: ax_queue::Lineage::default(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_held_forbid_fire_goes_when_the_running_execution_ends() {
    let forbid = r#"{"handler":"log","schedule":{"every":"10s"},"overlap":"forbid"}"#;
    let term = start(settings(), vec![task("a", forbid)], FakeStore::default()).await;
    term.until(20_001).await;
    // The 10 s execution still runs: the 20 s fire is held, nothing pushed.
    assert_eq!(term.queue.fires_of("a"), [at(10_000)]);
    term.until(21_000).await;
    assert_eq!(term.queue.fires_of("a"), [at(10_000)], "still held");
    let running = term.queue.pushed()[0].clone();
    term.queue.finish(&running, at(21_000));
    // Its end comes with the next read of events (100 ms), well before the hold's retry
    // timer (5 s): the held fire goes then.
    term.until(21_150).await;
    assert_eq!(term.queue.fires_of("a"), [at(10_000), at(20_000)]);
}

/// Ends the fire of task `a` of each of the first `seconds` seconds 50 ms after it, runs on
/// to `until` (ms) and returns the success counts its written states hold.
async fn end_each_second(term: &Running, seconds: u64, until: u64) -> Vec<u64> {
    for second in 1..=seconds {
        term.until(second * 1_000 + 50).await;
        let last = term.queue.pushed().last().cloned().unwrap();
        term.queue
            .finish(&last, at(i64::try_from(second).unwrap() * 1_000 + 50));
    }
    term.until(until).await;
    term.store
        .writes_of("ns", "a")
        .iter()
        .map(|s| s.success_count)
        .filter(|n| *n > 0)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn state_changes_between_flushes_are_written_once_at_their_newest() {
    let mut settings = settings();
    settings.flush_interval = Duration::from_millis(2_500);
    // Every run written, to see the flushes alone.
    settings.dispatcher.routine_write_delay = Duration::ZERO;
    let every_1s = r#"{"handler":"log","schedule":{"every":"1s"}}"#;
    let term = start(settings, vec![task("a", every_1s)], FakeStore::default()).await;
    // Each execution ends 50 ms after its fire: two ends before the flush at 2.5 s, two
    // more before the one at 5 s.
    let successes = end_each_second(&term, 4, 5_100).await;
    assert_eq!(
        successes,
        [2, 4],
        "one write per flush, holding every end before it"
    );
}

#[tokio::test(start_paused = true)]
async fn routine_runs_are_written_together_and_their_events_acknowledged_only_then() {
    let every_1s = r#"{"handler":"log","schedule":{"every":"1s"}}"#;
    let term = start(settings(), vec![task("a", every_1s)], FakeStore::default()).await;
    let successes = end_each_second(&term, 30, 30_600).await;
    // 30 runs, a write per 10 s of them (the default routine delay), not one per run.
    assert!(
        (2..=3).contains(&successes.len()),
        "writes of successes: {successes:?}"
    );
    // No event is acknowledged before a write holds its end.
    let written = successes.last().copied().unwrap_or(0);
    let acked = u64::try_from(term.queue.acked().len()).unwrap();
    assert!(acked >= 1, "events written are acknowledged");
    assert!(
        acked <= written,
        "{acked} events acknowledged, {written} ends written"
    );
}

#[tokio::test(start_paused = true)]
async fn stopping_writes_what_it_holds_and_gives_the_key_up() {
    let mut settings = settings();
    // No flush before the stop: what is written is the last flush's.
    settings.flush_interval = Duration::from_secs(3600);
    let mut term = start(settings, vec![task("a", EVERY_10S)], FakeStore::default()).await;
    term.until(10_050).await;
    let running = term.queue.pushed()[0].clone();
    term.queue.finish(&running, at(10_050));
    term.until(10_200).await;
    let before = term.store.state("ns", "a").map(|s| s.success_count);
    assert_ne!(before, Some(1), "not written yet");
    term.stop.cancel();
    term.until(10_300).await;
    assert!(term.ended().await);
    assert_eq!(term.store.state("ns", "a").unwrap().success_count, 1);
    assert!(term.key.was_given_up());
}

#[tokio::test(start_paused = true)]
async fn a_lost_key_ends_the_term_at_once_without_enqueuing() {
    let mut term = start(settings(), vec![task("a", EVERY_10S)], FakeStore::default()).await;
    term.until(9_000).await;
    term.key.lose();
    // A millisecond on, well before the next fire would have found the key invalid.
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(term.ended().await, "the term ends with the key");
    term.until(30_000).await;
    assert!(
        term.queue.pushed().is_empty(),
        "nothing enqueued after the loss"
    );
    assert!(!term.key.was_given_up(), "a lost key is not given up");
}

#[tokio::test(start_paused = true)]
async fn a_key_past_its_deadline_enqueues_nothing_and_ends_the_term() {
    // A process stopped past its lease: the deadline has passed, etcd has not said so.
    let mut term = start(settings(), vec![task("a", EVERY_10S)], FakeStore::default()).await;
    term.until(9_000).await;
    term.key.expire();
    term.until(10_001).await;
    assert!(term.queue.pushed().is_empty());
    assert!(term.ended().await);
}

#[tokio::test(start_paused = true)]
async fn refused_enqueues_are_retried_until_redis_answers() {
    let mut term = start(settings(), vec![task("a", EVERY_10S)], FakeStore::default()).await;
    term.until(9_000).await;
    term.queue.refuse(true);
    term.until(13_000).await;
    assert!(term.queue.pushed().is_empty());
    term.queue.refuse(false);
    term.until(19_000).await;
    assert_eq!(
        term.queue.fires_of("a"),
        [at(10_000)],
        "the fire waited, late, and went once"
    );
    assert!(!term.ended().await, "a blip does not end the term");
}

#[tokio::test(start_paused = true)]
async fn enqueues_refused_past_the_stall_limit_end_the_term() {
    let mut settings = settings();
    settings.enqueue_stall_limit = Duration::from_secs(5);
    // Refused, not silent (OOM, READONLY): only the stall limit applies.
    settings.redis_unreachable_limit = Duration::from_secs(60);
    let mut term = start(settings, vec![task("a", EVERY_10S)], FakeStore::default()).await;
    term.queue.refuse(true);
    term.until(14_000).await;
    assert!(!term.ended().await, "within the limit");
    // At the first refusal past the limit: the retries wait at most 5 s.
    term.until(21_000).await;
    assert!(term.ended().await, "stepped down");
    assert!(term.queue.pushed().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_leader_redis_does_not_answer_gives_its_key_up_within_the_limit() {
    // Nothing is due for an hour: no enqueue would ever notice that Redis is gone.
    let hourly = r#"{"handler":"log","schedule":{"every":"1h"}}"#;
    let mut term = start(settings(), vec![task("a", hourly)], FakeStore::default()).await;
    term.until(3_000).await;
    term.queue.refuse(true);
    // Within the limit (5 s of silence): the key is kept, a blip is only a warning.
    term.until(7_500).await;
    assert!(!term.ended().await, "a blip does not end the term");
    // Past it, at the next check: the key is given up, the states written.
    term.until(10_500).await;
    assert_eq!(
        term.end().await,
        Some(End::RedisUnreachable),
        "stepped down, saying why (a shard owner leaves the ownership on it)"
    );
    assert!(term.key.was_given_up(), "given up, not left to expire");
}

#[tokio::test(start_paused = true)]
async fn redis_answering_again_within_the_limit_keeps_the_term() {
    let hourly = r#"{"handler":"log","schedule":{"every":"1h"}}"#;
    let mut term = start(settings(), vec![task("a", hourly)], FakeStore::default()).await;
    for round in 0..3 {
        term.queue.refuse(true);
        term.until(4_000 + round * 8_000u64).await;
        term.queue.refuse(false);
        term.until(8_000 + round * 8_000).await;
    }
    assert!(
        !term.ended().await,
        "silences shorter than the limit, each forgiven"
    );
}

#[tokio::test(start_paused = true)]
async fn a_newer_token_in_redis_ends_the_term() {
    use crate::backend::TermQueue;
    let mut term = start(settings(), vec![task("a", EVERY_10S)], FakeStore::default()).await;
    term.until(5_000).await;
    // A newer leader took over and raised the fence.
    let queue: &dyn TermQueue = &*term.queue;
    queue
        .advance_fence(ax_scheduler_core::task::DEFAULT_QUEUE, None, 9, "1")
        .await
        .unwrap();
    term.until(10_001).await;
    assert!(term.queue.pushed().is_empty(), "refused by the fence");
    assert!(term.ended().await);
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_whose_execution_the_queue_lost_is_repaired_as_failed_and_no_sooner() {
    let one_shot = format!(
        r#"{{"handler":"log","schedule":{{"at":"{}"}}}}"#,
        at(1_000).to_rfc3339()
    );
    let lost = task("lost", &one_shot);
    let slow = task("slow", &one_shot);
    let term = start(settings(), vec![lost, slow], FakeStore::default()).await;
    term.until(1_100).await;
    let pushed = term.queue.pushed();
    assert_eq!(pushed.len(), 2);
    let of = |id: &str| pushed.iter().find(|m| &*m.task_id == id).unwrap().clone();
    // The queue loses one execution; the other keeps running for minutes.
    term.queue.lose(&of("lost"));
    let status = |id: &str| term.store.state("ns", id).map(|s| s.status);
    // In doubt from 61 s; found without work at the check after (90 s) and again at the one
    // after that (120 s): repaired then, written with the next flush.
    term.until(100_000).await;
    assert_eq!(status("lost"), Some(ax_scheduler_core::TaskStatus::Running));
    term.until(121_000).await;
    assert_eq!(status("lost"), Some(ax_scheduler_core::TaskStatus::Failed));
    let state = term.store.state("ns", "lost").unwrap();
    assert_eq!(state.failure_count, 1);
    assert_eq!(
        state.last_error.as_deref(),
        Some(ax_scheduler_core::LOST_END_ERROR)
    );
    // The long one still has work in its queue: left alone however long it runs.
    term.until(600_000).await;
    assert_eq!(status("slow"), Some(ax_scheduler_core::TaskStatus::Running));
    term.queue.finish(&of("slow"), at(600_000));
    term.until(601_000).await;
    assert_eq!(status("slow"), Some(ax_scheduler_core::TaskStatus::Success));
}

/// The handles of a term served as the role serves it ([`super::serve`]: a panic in it is
/// caught, counted and ends it).
struct Served {
    end: JoinHandle<super::TermEnd>,
    key: FakeKey,
    /// Held so that the term's inputs stay open.
    _changes: mpsc::Sender<Change>,
    _triggers: watch::Sender<Arc<Vec<ax_registry::PendingTrigger>>>,
    _paused: watch::Sender<Option<BTreeSet<String>>>,
}

/// Serves a term on `store` and `queue` under a leader key of `token`, taking over as the
/// role does (from the states in `store`) at the current virtual time; panics reported to
/// `metrics`.
fn serve(
    tasks: Vec<(Arc<TaskKey>, CatalogEntry)>,
    store: &Arc<FakeStore>,
    queue: &Arc<FakeQueue>,
    clock: &Arc<TokioClock>,
    token: i64,
    metrics: &Arc<Panics>,
) -> Served {
    let deps = TermDeps {
        store: Arc::clone(store) as _,
        queue: Arc::clone(queue) as _,
        clock: Arc::clone(clock) as _,
        metrics: Arc::clone(metrics) as _,
        alerts: None,
        tracker: TaskTracker::new(),
        audit: Arc::new(NoAudit),
        clock_check: None,
    };
    let (changes_tx, changes) = mpsc::channel(16);
    let (triggers_tx, triggers) = watch::channel(Arc::new(Vec::new()));
    let (paused_tx, paused) = watch::channel(Some(BTreeSet::new()));
    let input = TermInput {
        slice: CatalogSlice {
            entries: tasks,
            revision: 1,
        },
        changes,
        seen: Arc::new(AtomicI64::new(1)),
        feeds: Feeds { triggers, paused },
    };
    let key = FakeKey::leader(token);
    let authority = Authority::Test(key.clone());
    let end = tokio::spawn(super::serve(
        settings(),
        deps,
        input,
        authority,
        CancellationToken::new(),
        || {},
    ));
    Served {
        end,
        key,
        _changes: changes_tx,
        _triggers: triggers_tx,
        _paused: paused_tx,
    }
}

/// Each fire at most once, and the fires of `id` as a sorted list.
fn once_each(queue: &FakeQueue, id: &str) -> Vec<UtcMillis> {
    let fires = queue.fires_of(id);
    let distinct: BTreeSet<UtcMillis> = fires.iter().copied().collect();
    assert_eq!(distinct.len(), fires.len(), "a fire went twice: {fires:?}");
    distinct.into_iter().collect()
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_firing_loop_is_counted_and_the_next_term_fires_each_fire_once() {
    let started = Instant::now();
    let clock = Arc::new(TokioClock::starting_at(at(0)));
    let (store, queue) = (
        Arc::new(FakeStore::default()),
        Arc::new(FakeQueue::default()),
    );
    let metrics = Arc::new(Panics::default());
    // A bug on the fire path, at the fire of 20 s.
    queue.panic_at_fire("a", at(20_000));
    let first = serve(
        vec![task("a", EVERY_10S)],
        &store,
        &queue,
        &clock,
        7,
        &metrics,
    );
    tokio::time::sleep_until(started + Duration::from_millis(20_001)).await;
    assert_eq!(
        first.end.await.unwrap(),
        super::TermEnd::Panicked,
        "the term is over, its key dropped with it"
    );
    assert_eq!(metrics.loops(), [crate::supervise::TERM], "counted once");
    assert_eq!(once_each(&queue, "a"), [at(10_000)]);
    // The role takes the key again after its pause (or another replica does): a fresh
    // takeover from the written states.
    tokio::time::sleep_until(started + Duration::from_millis(21_000)).await;
    let _second = serve(
        vec![task("a", EVERY_10S)],
        &store,
        &queue,
        &clock,
        8,
        &metrics,
    );
    tokio::time::sleep_until(started + Duration::from_millis(40_001)).await;
    let fires = once_each(&queue, "a");
    // The fire of 20 s that was never enqueued runs once (the misfire policy), then the
    // schedule goes on.
    assert_eq!(
        fires,
        [at(10_000), at(20_000), at(30_000), at(40_000)],
        "fires go on after the panic, none twice"
    );
    assert_eq!(queue.pushed().last().unwrap().fencing_token, 8);
    assert_eq!(metrics.loops(), [crate::supervise::TERM]);
}

#[tokio::test(start_paused = true)]
async fn a_panic_in_the_state_flusher_gives_the_key_up_and_the_next_term_fires_each_fire_once() {
    let started = Instant::now();
    let clock = Arc::new(TokioClock::starting_at(at(0)));
    let (store, queue) = (
        Arc::new(FakeStore::default()),
        Arc::new(FakeQueue::default()),
    );
    let metrics = Arc::new(Panics::default());
    let first = serve(
        vec![task("a", EVERY_10S)],
        &store,
        &queue,
        &clock,
        7,
        &metrics,
    );
    // The next state write after the 10 s fire (its RUNNING, 5 s after it) panics.
    tokio::time::sleep_until(started + Duration::from_millis(10_001)).await;
    store.panic_on_next_write();
    tokio::time::sleep_until(started + Duration::from_millis(16_000)).await;
    assert_eq!(metrics.loops(), [crate::supervise::STATE_FLUSHER]);
    assert_eq!(first.end.await.unwrap(), super::TermEnd::Ended);
    assert!(
        first.key.was_given_up(),
        "stepped down: the key is given up"
    );
    tokio::time::sleep_until(started + Duration::from_millis(17_000)).await;
    let _second = serve(
        vec![task("a", EVERY_10S)],
        &store,
        &queue,
        &clock,
        8,
        &metrics,
    );
    tokio::time::sleep_until(started + Duration::from_millis(30_001)).await;
    // What the first term did not write is replayed by the next one and refused as a
    // duplicate; the schedule goes on.
    assert_eq!(
        once_each(&queue, "a"),
        [at(10_000), at(20_000), at(30_000)],
        "fires go on after the panic, none twice"
    );
    assert!(store.state("ns", "a").is_some(), "the next term writes");
}

#[tokio::test(start_paused = true)]
async fn a_trigger_poller_that_panicked_starts_again_and_its_run_now_fires_once() {
    let hourly = r#"{"handler":"log","schedule":{"every":"1h"}}"#;
    let store = Arc::new(FakeStore::default());
    store.add_trigger(ax_registry::PendingTrigger {
        namespace: "ns".into(),
        id: "a".into(),
        execution_id: ax_scheduler_core::ExecutionId::from_u128(42),
        requested_at: Some(at(0)),
        payload: None,
        idempotency_key: None,
        backfill_of: None,
        requested_by: None,
        mod_revision: 1,
    });
    // The poller's first read panics.
    store.panic_on_next_trigger_read();
    let queue = Arc::new(FakeQueue::default());
    let metrics = Arc::new(Panics::default());
    let deps = TermDeps {
        store: Arc::clone(&store) as _,
        queue: Arc::clone(&queue) as _,
        clock: Arc::new(TokioClock::starting_at(at(0))),
        metrics: Arc::clone(&metrics) as _,
        alerts: None,
        tracker: TaskTracker::new(),
        audit: Arc::new(NoAudit),
        clock_check: None,
    };
    let cancel = CancellationToken::new();
    let feeds = Feeds::start(&deps, settings().trigger_interval, &cancel);
    let (_changes, changes) = mpsc::channel(16);
    let input = TermInput {
        slice: CatalogSlice {
            entries: vec![task("a", hourly)],
            revision: 1,
        },
        changes,
        seen: Arc::new(AtomicI64::new(1)),
        feeds,
    };
    let term = Term::start(
        &settings(),
        &deps,
        input,
        Authority::Test(FakeKey::leader(7)),
    )
    .await
    .unwrap();
    let stop = cancel.clone();
    let _run = tokio::spawn(async move { term.run(&settings(), &deps, &stop).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metrics.loops(), [crate::supervise::TRIGGERS]);
    assert!(queue.pushed().is_empty(), "not read yet");
    // Started again a second later: the request is read and runs, once, though it stays
    // pending (its delete is not modelled).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let runs: Vec<_> = queue
        .pushed()
        .iter()
        .map(|m| (m.task_id.to_string(), m.execution_id))
        .collect();
    assert_eq!(
        runs,
        [(
            "a".to_owned(),
            ax_scheduler_core::ExecutionId::from_u128(42)
        )]
    );
    assert_eq!(metrics.loops(), [crate::supervise::TRIGGERS]);
    cancel.cancel();
}

/// A term firing `a` every second on a clock a test steps, checked against a reference
/// probe a test can make fail; both read the term's start as [`T0`].
async fn start_stepped() -> (
    Running,
    Arc<super::fakes::SteppedClock>,
    Arc<super::fakes::ReferenceProbe>,
) {
    let every_1s = r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow"}"#;
    let start = Instant::now();
    let clock = Arc::new(super::fakes::SteppedClock::new(start, at(0).0));
    let probe = Arc::new(super::fakes::ReferenceProbe::new(start, at(0).0));
    let term = start_clocked(
        settings(),
        vec![task("a", every_1s)],
        FakeStore::default(),
        Arc::new(FakeQueue::default()),
        clock.clone(),
        Some(probe.clone()),
    )
    .await;
    (term, clock, probe)
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_clock_jumps_past_the_bound_fires_nothing_early_and_gives_way() {
    // At 3.95 s the leader's clock steps 10 s ahead of etcd's, just before the fire round
    // of 4 s.
    let (mut term, clock, _probe) = start_stepped().await;
    term.until(3_950).await;
    assert_eq!(term.queue.fires_of("a"), [at(1_000), at(2_000), at(3_000)]);
    clock
        .step
        .store(10_000, std::sync::atomic::Ordering::SeqCst);
    term.until(6_000).await;
    // The fires the step made due (4 s to 13 s) did not go: the round that would have sent
    // them checked the clock first and ended the term.
    assert_eq!(term.queue.fires_of("a"), [at(1_000), at(2_000), at(3_000)]);
    assert!(term.ended().await, "stepped down");
    assert!(term.key.was_given_up(), "given up, not left to expire");
}

#[tokio::test(start_paused = true)]
async fn after_a_jump_fires_wait_for_a_check_that_can_be_made() {
    // The clock steps 1.5 s ahead (past half the bound, within it) while etcd's HTTP
    // listener does not answer: the fires it made due wait for a check; once one says the
    // clock agrees, they go, and the term keeps its key.
    let (mut term, clock, probe) = start_stepped().await;
    term.until(3_950).await;
    assert_eq!(term.queue.fires_of("a"), [at(1_000), at(2_000), at(3_000)]);
    probe
        .failing
        .store(true, std::sync::atomic::Ordering::SeqCst);
    clock.step.store(1_500, std::sync::atomic::Ordering::SeqCst);
    term.until(5_000).await;
    assert_eq!(
        term.queue.fires_of("a"),
        [at(1_000), at(2_000), at(3_000)],
        "held while the clock cannot be checked"
    );
    probe
        .failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    term.until(5_600).await;
    let fires = term.queue.fires_of("a");
    assert!(fires.len() > 3 && fires.contains(&at(5_000)), "{fires:?}");
    assert!(
        !term.ended().await,
        "a clock within the bound keeps the key"
    );
}
