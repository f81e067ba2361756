//! The leader's scheduling state machine: which tasks are armed, what is due, what to enqueue.
//!
//! The engine feeds it registry changes, execution events and the time, and carries out what
//! it asks for (enqueue these fires, write these states, raise these alerts); it does no I/O
//! and reads no clock, so the whole fire-path logic runs on virtual time in tests. One
//! [`Dispatcher`] lives for one leadership term: a new leader builds a fresh one from the
//! registry and the recorded states, which is where missed fires are found
//! ([`crate::misfire`]).
//!
//! Fire path: the [`TimerWheel`] holds one entry per armed task (its next fire). When
//! [`Dispatcher::poll`] advances it, each due task is re-armed for its following fire at once
//! (so the schedule never drifts with dispatch delays) and the due fire goes to the
//! [`ReadyQueue`], which orders fires by priority with aging when the optional
//! [`TokenBucket`] holds them back. Fires leaving the ready queue pass the task's
//! [`CircuitBreaker`] and become [`Dispatch`]es.
//!
//! Overlap is decided here and enforced in Redis ([`crate::overlap`]): each dispatch carries
//! the mode its enqueue is to apply, and a `forbid` fire that comes back
//! [`EnqueueOutcome::Held`] is kept by its task (one held fire and one retry timer per task;
//! later fires merge into it) until the task's final execution event arrives or the retry
//! finds the previous execution gone. Dispatching a held fire again is not a new fire: it is
//! not counted and does not pass the breaker again.
//!
//! States are written lazily: changes mark a task dirty and [`Dispatcher::take_state_writes`]
//! hands the engine the latest state of each dirty task, so a busy leader writes each task at
//! most once per flush however often it fired. What a new leader needs in order to continue
//! (anchor, last and next fire) is in every write; a fire dispatched but not yet written is
//! dispatched again by the next leader and refused as a duplicate by the enqueue script.
//!
//! That refusal is also why a fire's own state change (RUNNING, the fire counted) waits:
//! it is written only if the execution is still running [`DispatcherConfig::running_write_delay`]
//! later, and otherwise goes in one write with the execution's end. A periodic task whose
//! executions are short costs one etcd write per execution, not two. A takeover writes only
//! the states it changed.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::breaker::{Admission, BreakerConfig, CircuitBreaker, Transition};
use crate::deadline::{judge, Expectation, Miss};
use crate::execution::{
    shown_error, AttemptOutcome, EnqueueOutcome, EventPosition, ExecutionEvent,
};
use crate::fanout::{fire_fanout_id, shard_of, FanoutProgress, Shard};
use crate::limiter::TokenBucket;
use crate::misfire::{plan_misfires, Progress, DEFAULT_CATCH_UP_WINDOW};
use crate::overlap::{dispatch_mode, merge_held};
use crate::ready::{ReadyConfig, ReadyQueue};
use crate::schedule::CompiledSchedule;
use crate::state::{TaskState, TaskStatus};
use crate::task::{Fanout, OverlapPolicy, Schedule, TaskSpec, MAX_SHARDS};
use crate::time::UtcMillis;
use crate::timer::{TimerConfig, TimerHandle, TimerWheel};
use crate::validate::FieldError;
use crate::workflow::{
    execution_id_text, parse_execution_id, step_execution_id, verdict, Graph, RunProgress,
    StepOutcome, Verdict, MAX_RUNS_IN_PROGRESS,
};

/// A task's identity: its namespace and id (the last two segments of its etcd key).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Task id within the namespace.
    pub id: Arc<str>,
}

impl TaskKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<Arc<str>>, id: impl Into<Arc<str>>) -> Self {
        TaskKey {
            namespace: namespace.into(),
            id: id.into(),
        }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.id)
    }
}

/// Settings of a [`Dispatcher`].
#[derive(Clone, Debug)]
pub struct DispatcherConfig {
    /// Timer shape (tick, levels).
    pub timer: TimerConfig,
    /// Ready-queue aging.
    pub ready: ReadyConfig,
    /// Missed fires older than this are not replayed by `fire_all` and raise an alert.
    pub catch_up_window: Duration,
    /// Per-task circuit breaker.
    pub breaker: BreakerConfig,
    /// Enqueue rate limit as (fires per second, burst); `None` (the default) for no limit.
    pub rate_limit: Option<(f64, f64)>,
    /// How often a held fire asks again whether the previous execution finished, in case
    /// its completion event was lost.
    pub hold_retry: Duration,
    /// A timer that comes due later than this means the leader stalled; the fires it missed
    /// follow the task's misfire policy.
    pub stall_threshold: Duration,
    /// How long after a fire its state (RUNNING) waits to be written on its own: an
    /// execution that ends sooner has its end written instead, in one write.
    pub running_write_delay: Duration,
}

/// Default [`DispatcherConfig::stall_threshold`]: far above any lateness of a working
/// leader (milliseconds), well below the outages it stands for (a backend down for minutes,
/// a clock stepped forward).
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_secs(5);

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            timer: TimerConfig::default(),
            ready: ReadyConfig::default(),
            catch_up_window: DEFAULT_CATCH_UP_WINDOW,
            breaker: BreakerConfig::default(),
            rate_limit: None,
            hold_retry: Duration::from_secs(5),
            stall_threshold: DEFAULT_STALL_THRESHOLD,
            running_write_delay: Duration::from_secs(5),
        }
    }
}

/// One execution to enqueue.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// The task.
    pub key: Arc<TaskKey>,
    /// Its spec as armed.
    pub spec: Arc<TaskSpec>,
    /// The due instant this execution is for; with the key, the dedupe identity.
    pub fire_at: UtcMillis,
    /// For a run-now request: its execution id (its own dedupe identity).
    pub run_now: Option<String>,
    /// What the enqueue does about the task's still-active previous execution, as this
    /// dispatcher decided it (see [`crate::overlap`]); Redis only enforces it.
    pub overlap: OverlapPolicy,
    /// The run (see [`crate::workflow`]) this execution is a step of.
    pub run_id: Option<String>,
    /// The execution starts a run: its task is the first of a chain. Its own execution id
    /// (its fan-out id, for a fanned-out fire) is the run's id.
    pub starts_run: bool,
    /// For a fanned-out fire: which shard this is (see [`crate::fanout`]).
    pub shard: Option<Shard>,
    /// A broadcast fire not addressed yet: never enqueued as it is. The shell lists the
    /// live workers of the task's queue and hands them to
    /// [`Dispatcher::address_broadcast`], which returns the executions to enqueue.
    pub broadcast: bool,
}

impl Dispatch {
    /// For a broadcast fire not addressed yet: its fan-out id (the run-now's execution id, or
    /// derived from the task and the fire instant), the same on every leader.
    pub fn broadcast_fanout_id(&self) -> Option<String> {
        self.broadcast.then(|| {
            self.run_now
                .clone()
                .unwrap_or_else(|| fire_fanout_id(&self.key, self.fire_at))
        })
    }
}

/// Something the engine should alert on or log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Missed fires were found: when the task was loaded (a takeover), or after a stall.
    Misfired {
        /// The task.
        key: Arc<TaskKey>,
        /// Fires missed in all.
        missed: u64,
        /// Fires not run (policy `skip`, `fire_once` folding, or beyond the window).
        skipped: u64,
        /// Missed fires older than the catch-up window.
        beyond_window: u64,
        /// The oldest missed fire.
        oldest: Option<UtcMillis>,
    },
    /// The task's breaker opened: dispatch is slowed.
    CircuitOpened {
        /// The task.
        key: Arc<TaskKey>,
        /// Failures in the window.
        failures: u32,
        /// Executions in the window.
        executions: u32,
    },
    /// The task's breaker closed again.
    CircuitClosed {
        /// The task.
        key: Arc<TaskKey>,
    },
    /// A fire was skipped because the breaker is open.
    BreakerSkipped {
        /// The task.
        key: Arc<TaskKey>,
        /// The skipped fire.
        fire_at: UtcMillis,
    },
    /// A dependent task's step in a run was skipped (and so are the steps after it).
    StepSkipped {
        /// The task.
        key: Arc<TaskKey>,
        /// The run.
        run: String,
        /// Why.
        reason: String,
    },
    /// An attempt failed (it may be retried, or it was the last and went to the dead-letter
    /// queue). Raised once per attempt end the dispatcher applies: an event read again, or
    /// an end read both from the history and from its event, raises nothing more, so the
    /// engine alerts on failures from here, whoever ended the attempt (a worker in any
    /// language, a job's completion report, a deadline).
    AttemptFailed {
        /// The task.
        key: Arc<TaskKey>,
        /// The execution (its id as a number).
        execution: u128,
        /// The attempt, 0 for the first.
        attempt: u32,
        /// When it ended.
        at: UtcMillis,
        /// How it ended, and the retry that follows, if any.
        end: crate::execution::AttemptEnd,
    },
    /// A broadcast fire found no live worker on its task's queue: it ended failed at once
    /// (its end is in the task's state; the shell records it in the history).
    NoLiveWorker {
        /// The task.
        key: Arc<TaskKey>,
        /// The fire's fan-out id, the id its end is recorded under.
        fanout: String,
        /// The fire.
        fire_at: UtcMillis,
        /// The dependency run the fire is a step of, if any.
        run: Option<String>,
        /// The task's queue.
        queue: Arc<str>,
        /// Why it failed, as recorded.
        reason: String,
    },
    /// Fires of a task with `expect_success_within` were not followed by a success in time
    /// (each missed fire is reported once; see [`crate::deadline`]).
    DeadlineMissed {
        /// The task.
        key: Arc<TaskKey>,
        /// Its window.
        within: Duration,
        /// What was missed, and why.
        miss: Miss,
    },
}

/// A state to write (`Some`) or delete (`None`).
pub type StateWrite = (Arc<TaskKey>, Option<TaskState>);

#[derive(Clone, Copy, Debug)]
enum TimerKind {
    /// The task's next scheduled fire.
    Scheduled,
    /// The task's held fire asks again (its completion event may have been lost).
    HeldRetry,
    /// The task's next deadline (`expect_success_within`) is to be judged.
    Deadline,
}

/// Why a fire is in the ready queue.
#[derive(Debug)]
enum FireKind {
    /// A schedule instant came due: a new fire (counted, passes the breaker).
    Scheduled,
    /// The held fire is dispatched again: the same fire, not a new one.
    HeldAgain,
    /// A run-now request with its execution id.
    RunNow(String),
    /// A dependent task's step in a run: its (derived) execution id, and the run.
    Step(Box<(String, String)>),
    /// The shards not ended of a fanned-out fire, sent again by a new leader (those already
    /// queued are refused as duplicates): the fan-out id.
    Resend(String),
}

#[derive(Clone, Debug)]
struct TimerEntry {
    key: Arc<TaskKey>,
    kind: TimerKind,
    generation: u64,
}

#[derive(Debug)]
struct ReadyFire {
    key: Arc<TaskKey>,
    fire_at: UtcMillis,
    kind: FireKind,
    generation: u64,
}

#[derive(Debug)]
struct Armed {
    key: Arc<TaskKey>,
    spec: Arc<TaskSpec>,
    schedule: CompiledSchedule,
    revision: i64,
    anchor: UtcMillis,
    /// Bumped on every re-arm so stale timer and ready entries are recognised.
    generation: u64,
    timer: Option<TimerHandle>,
    /// The held fire's one retry timer (the fire itself is the state's `held_fire_at`, so
    /// that it is written and a new leader finds it).
    held_timer: Option<TimerHandle>,
    /// When the task's deadline is judged next (tasks with `expect_success_within` only).
    deadline_timer: Option<TimerHandle>,
    /// Boxed: created at a task's first execution, and 80 bytes inline.
    breaker: Option<Box<CircuitBreaker>>,
    state: TaskState,
    /// The last execution attempt whose end was applied (from its event or from the
    /// history): the same end arriving again (its event after a reconciliation, the history
    /// after the event, or a finished execution run again after its worker died) is not
    /// counted a second time.
    last_end: Option<(u128, u32)>,
}

#[derive(Debug)]
enum Pending {
    /// Write the task's current state (read when the writes are taken, so the newest wins).
    WriteCurrent,
    /// Write the task's current state once this instant has passed, unless a change that
    /// must be written sooner comes first (a fire waits for its execution's end).
    WriteCurrentAfter(UtcMillis),
    /// Write this state (the task is no longer armed: invalid). Boxed: the map keeps up to
    /// half its slots empty and every slot is as large as the largest variant, so an inline
    /// state made each pending write cost about 450 bytes at a million tasks.
    Write(Box<TaskState>),
    /// Delete the state (the task is gone).
    Delete,
}

/// The scheduling state machine of one leadership term; see the [module notes](self).
#[derive(Debug)]
pub struct Dispatcher {
    config: DispatcherConfig,
    /// Boxed: a hash table keeps up to half its slots empty, and an empty slot of a large
    /// inline value costs as much as a full one (at a million tasks the table alone held
    /// about 900 bytes per task; boxed, a slot is 16 bytes).
    tasks: HashMap<Arc<TaskKey>, Box<Armed>>,
    timer: TimerWheel<TimerEntry>,
    ready: ReadyQueue<ReadyFire>,
    limiter: Option<TokenBucket>,
    pending: HashMap<Arc<TaskKey>, Pending>,
    notices: Vec<Notice>,
    due: Vec<(UtcMillis, TimerEntry)>,
    next_generation: u64,
    /// Namespaces whose tasks do not fire (an operator paused them).
    paused_namespaces: HashSet<Arc<str>>,
    /// Every task's place in the dependency graph.
    graph: Graph,
    /// Valid specs held back because of their place in the graph (a missing parent, a
    /// cycle): INVALID until the graph is mended, then armed from here.
    graph_held: HashMap<Arc<TaskKey>, (Arc<TaskSpec>, i64)>,
    /// Tasks whose state holds runs in progress (swept for parents that are too late).
    with_runs: HashSet<Arc<TaskKey>>,
    /// When those are swept next.
    next_run_sweep: UtcMillis,
    /// Tasks of paused namespaces whose scheduled fire came due: the first missed fire and
    /// the task's generation then. On resume the task's misfire policy decides what of
    /// them runs, as after a leader's stall.
    parked: HashMap<Arc<TaskKey>, (UtcMillis, u64)>,
    /// When this term began: a fire due before it and never sent was missed for want of a
    /// leader.
    term_start: UtcMillis,
}

impl Dispatcher {
    /// An empty dispatcher whose timer starts at `now`.
    pub fn new(config: DispatcherConfig, now: UtcMillis) -> Self {
        let limiter = config
            .rate_limit
            .map(|(rate, burst)| TokenBucket::new(rate, burst, now));
        Dispatcher {
            timer: TimerWheel::new(config.timer.clone(), now),
            ready: ReadyQueue::new(config.ready.clone()),
            config,
            tasks: HashMap::new(),
            limiter,
            pending: HashMap::new(),
            notices: Vec::new(),
            due: Vec::new(),
            next_generation: 0,
            paused_namespaces: HashSet::new(),
            parked: HashMap::new(),
            graph: Graph::default(),
            graph_held: HashMap::new(),
            with_runs: HashSet::new(),
            next_run_sweep: now,
            term_start: now,
        }
    }

    /// Stops the tasks of `namespace` from firing: each scheduled fire that comes due
    /// meanwhile is parked, one per task. Run-now requests still run (an operator asked).
    pub fn pause_namespace(&mut self, namespace: &str) {
        self.paused_namespaces.insert(Arc::from(namespace));
    }

    /// Lets the tasks of `namespace` fire again at `now`. The fires each task missed while
    /// paused follow its misfire policy (`fire_once` runs one, `fire_all` those within the
    /// catch-up window, `skip` none), and its schedule goes on from `now`.
    pub fn resume_namespace(&mut self, namespace: &str, now: UtcMillis) {
        if !self.paused_namespaces.remove(namespace) {
            return;
        }
        let parked: Vec<Arc<TaskKey>> = self
            .parked
            .keys()
            .filter(|k| &*k.namespace == namespace)
            .cloned()
            .collect();
        for key in parked {
            let Some((first_missed, generation)) = self.parked.remove(&key) else {
                continue;
            };
            let Some(mut task) = self.tasks.remove(&key) else {
                continue;
            };
            // A spec changed meanwhile armed its own next fire under a new generation.
            if task.generation == generation && task.timer.is_none() {
                self.replay_missed(&mut task, first_missed, now);
            }
            // The fires due while paused are not judged by the deadline.
            restart_deadlines(&mut task.state, &task.spec, now);
            self.judge_deadline(&mut task, now);
            self.tasks.insert(key, task);
        }
    }

    /// The paused namespaces.
    pub fn paused_namespaces(&self) -> impl Iterator<Item = &str> {
        self.paused_namespaces.iter().map(|n| &**n)
    }

    /// Tasks known (armed, paused or done).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is known.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Fires due but not yet dispatched (held back by the rate limit).
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Timers pending.
    pub fn armed_len(&self) -> usize {
        self.timer.len()
    }

    /// The current state of a task.
    pub fn state(&self, key: &TaskKey) -> Option<&TaskState> {
        self.tasks.get(key).map(|t| &t.state)
    }

    /// Adds or updates a task from its spec at etcd `revision`, with the state recorded for it
    /// (`None` for a task never recorded). Missed fires are planned with the task's misfire
    /// policy when it is first loaded; an update re-arms from `now` without catch-up.
    pub fn upsert(
        &mut self,
        key: impl Into<Arc<TaskKey>>,
        spec: impl Into<Arc<TaskSpec>>,
        revision: i64,
        recorded: Option<TaskState>,
        now: UtcMillis,
    ) {
        // Shared, not copied: the engine's catalog holds the same spec.
        let spec: Arc<TaskSpec> = spec.into();
        let key: Arc<TaskKey> = key.into();
        self.graph.insert(&key, &spec.depends_on);
        self.place(key.clone(), spec, revision, recorded, now);
        self.recheck_downstream(&key, now);
    }

    /// Arms a task whose place in the graph is sound, or holds it INVALID with the reason.
    fn place(
        &mut self,
        key: Arc<TaskKey>,
        spec: Arc<TaskSpec>,
        revision: i64,
        recorded: Option<TaskState>,
        now: UtcMillis,
    ) {
        let problems = self.graph.problems(&key);
        if !problems.is_empty() {
            self.graph_held
                .insert(Arc::clone(&key), (Arc::clone(&spec), revision));
            self.invalidate(key, revision, problems, now);
            return;
        }
        self.graph_held.remove(&key);
        let schedule = match spec.schedule.compile() {
            Ok(s) => s,
            Err(e) => {
                let errors = vec![FieldError::new("schedule", e.to_string())];
                self.invalidate(key, revision, errors, now);
                return;
            }
        };
        match self.tasks.remove(&key) {
            Some(old) if old.revision == revision => {
                // The same spec again (a relist after reconnecting): nothing changes.
                self.tasks.insert(key, old);
            }
            Some(old) => self.update(old, spec, schedule, revision, now),
            None => self.load(key, spec, schedule, revision, recorded, now),
        }
    }

    /// Re-checks every task downstream of `key` after it changed: they may have become
    /// valid (their missing parent arrived) or not (a cycle closed through it).
    fn recheck_downstream(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        if !self.graph.has_children(key) {
            // Nothing downstream (almost every task): no walk, no allocation.
            return;
        }
        for other in self.graph.affected(key) {
            if other != *key {
                self.recheck(&other, now);
            }
        }
    }

    /// Re-checks a task downstream of a graph change: arms one whose problems are gone,
    /// holds one that has some now.
    fn recheck(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        let problems = self.graph.problems(key);
        if let Some((spec, revision)) = self.graph_held.get(key).cloned() {
            if problems.is_empty() {
                self.place(Arc::clone(key), spec, revision, None, now);
            } else {
                self.invalidate(Arc::clone(key), revision, problems, now);
            }
        } else if !problems.is_empty() {
            if let Some(task) = self.tasks.get(key) {
                let (spec, revision) = (Arc::clone(&task.spec), task.revision);
                self.graph_held.insert(Arc::clone(key), (spec, revision));
                self.invalidate(Arc::clone(key), revision, problems, now);
            }
        }
    }

    fn new_generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    fn load(
        &mut self,
        key: Arc<TaskKey>,
        spec: Arc<TaskSpec>,
        schedule: CompiledSchedule,
        revision: i64,
        recorded: Option<TaskState>,
        now: UtcMillis,
    ) {
        // What the last leader wrote: the state is written again only if loading changed it.
        let written = recorded.clone();
        // A state recorded for an older spec revision still carries the task's progress; the
        // countdown anchor is the one thing a changed spec may move (see `update`).
        let mut state = recorded.unwrap_or_else(|| {
            let anchor = match spec.schedule {
                Schedule::Delay(_) => spec.created_at.unwrap_or(now),
                _ => now,
            };
            TaskState::new(revision, anchor, now)
        });
        if state.status == TaskStatus::Invalid {
            // Time spent invalid is not missed time: the fixed spec starts afresh.
            set_status(&mut state, TaskStatus::Waiting, now);
            state.anchor_at = None;
        }
        let anchor = match (state.anchor_at, &spec.schedule, spec.created_at) {
            (Some(a), _, _) => a,
            (None, Schedule::Delay(_), Some(created)) => created,
            (None, _, _) => now,
        };
        state.anchor_at = Some(anchor);
        state.spec_revision = revision;
        let generation = self.new_generation();
        let mut task = Box::new(Armed {
            key: Arc::clone(&key),
            spec: Arc::clone(&spec),
            schedule,
            revision,
            anchor,
            generation,
            timer: None,
            held_timer: None,
            deadline_timer: None,
            breaker: None,
            last_end: None,
            state,
        });
        // A fire the previous leader held (forbid) is still owed: its retry timer sends it
        // once the previous execution is over.
        if task.state.held_fire_at.is_some() && !spec.paused {
            arm_held_retry(&mut self.timer, &mut task, Duration::ZERO, now);
        }
        if spec.paused {
            task.state.next_fire_at = None;
            set_status(&mut task.state, TaskStatus::Paused, now);
        } else {
            let progress = match task.state.last_fire_at {
                Some(last) => Some(Progress::LastFire(last)),
                None => task.schedule.first_fire(anchor).map(Progress::NextDue),
            };
            if let Some(progress) = progress {
                let plan = plan_misfires(
                    spec.misfire,
                    &task.schedule,
                    anchor,
                    progress,
                    now,
                    self.config.catch_up_window,
                );
                for fire_at in &plan.run_now {
                    push_fire(
                        &mut self.ready,
                        &key,
                        generation,
                        spec.priority,
                        *fire_at,
                        FireKind::Scheduled,
                        now,
                    );
                }
                if plan.skipped > 0 || plan.beyond_window > 0 {
                    self.notices.push(Notice::Misfired {
                        key: Arc::clone(&key),
                        missed: plan.missed,
                        skipped: plan.skipped,
                        beyond_window: plan.beyond_window,
                        oldest: plan.oldest_missed,
                    });
                }
                self.arm(&mut task, plan.next_fire, now);
            } else {
                self.arm(&mut task, None, now);
            }
        }
        self.judge_deadline(&mut task, now);
        // Steps a previous leader fired may not have reached the queue: send them again
        // under the same execution id (a duplicate if they had).
        for progress in &task.state.runs {
            if let Some(execution) = &progress.execution {
                push_fire(
                    &mut self.ready,
                    &key,
                    generation,
                    spec.priority,
                    now,
                    FireKind::Step(Box::new((execution.clone(), progress.run.clone()))),
                    now,
                );
            }
        }
        if !task.state.runs.is_empty() {
            self.with_runs.insert(Arc::clone(&key));
        }
        for progress in &task.state.fanouts {
            push_fire(
                &mut self.ready,
                &key,
                generation,
                spec.priority,
                now,
                FireKind::Resend(progress.id.clone()),
                now,
            );
        }
        let unchanged = written.is_some_and(|mut w| {
            // The time of the last write is not a change.
            w.updated_at = task.state.updated_at;
            w == task.state
        });
        if !unchanged {
            self.pending.insert(Arc::clone(&key), Pending::WriteCurrent);
        }
        self.tasks.insert(key, task);
    }

    fn update(
        &mut self,
        mut task: Box<Armed>,
        spec: Arc<TaskSpec>,
        schedule: CompiledSchedule,
        revision: i64,
        now: UtcMillis,
    ) {
        let schedule_changed = task.spec.schedule != spec.schedule;
        if schedule_changed {
            if let Schedule::Every(_) = spec.schedule {
                // A new interval counts from the change, not from the old anchor.
                task.anchor = now;
            }
            if let (Schedule::Delay(_), Some(created)) = (&spec.schedule, spec.created_at) {
                task.anchor = created;
            }
        }
        if let Some(handle) = task.timer.take() {
            self.timer.cancel(handle);
        }
        task.generation = self.new_generation();
        task.spec = Arc::clone(&spec);
        task.schedule = schedule;
        task.revision = revision;
        task.state.spec_revision = revision;
        task.state.anchor_at = Some(task.anchor);
        if let Some(handle) = task.held_timer.take() {
            self.timer.cancel(handle);
        }
        // Deadlines start afresh from a spec change: the fires of the old spec (or of the
        // pause this change may end) are not judged by the new one.
        restart_deadlines(&mut task.state, &spec, now);
        if spec.paused {
            task.state.held_fire_at = None;
            task.state.next_fire_at = None;
            set_status(&mut task.state, TaskStatus::Paused, now);
        } else {
            let next = if !spec.schedule.is_periodic() && task.state.last_fire_at.is_none() {
                // A one-shot that has not fired (perhaps paused past its time) fires now if
                // its instant passed, under its misfire policy.
                task.schedule
                    .first_fire(task.anchor)
                    .map(|first| {
                        let plan = plan_misfires(
                            spec.misfire,
                            &task.schedule,
                            task.anchor,
                            Progress::NextDue(first),
                            now,
                            self.config.catch_up_window,
                        );
                        for fire_at in plan.run_now {
                            push_fire(
                                &mut self.ready,
                                &task.key,
                                task.generation,
                                spec.priority,
                                fire_at,
                                FireKind::Scheduled,
                                now,
                            );
                        }
                        plan.next_fire
                    })
                    .unwrap_or(None)
            } else {
                task.schedule.next_after(now, task.anchor)
            };
            if task.state.status == TaskStatus::Paused {
                set_status(&mut task.state, TaskStatus::Waiting, now);
            }
            self.arm(&mut task, next, now);
            if task.state.held_fire_at.is_some() {
                // The held fire keeps its retry, under the new generation.
                arm_held_retry(&mut self.timer, &mut task, self.config.hold_retry, now);
            }
        }
        self.judge_deadline(&mut task, now);
        self.pending
            .insert(Arc::clone(&task.key), Pending::WriteCurrent);
        self.tasks.insert(Arc::clone(&task.key), task);
    }

    /// Judges the task's deadline at `now` (see [`crate::deadline`]): raises the miss,
    /// records how far its fires are accounted for, and arms the next judgement.
    fn judge_deadline(&mut self, task: &mut Armed, now: UtcMillis) {
        if let Some(handle) = task.deadline_timer.take() {
            self.timer.cancel(handle);
        }
        let Some(within) = task.spec.expect_success_within else {
            return;
        };
        let expectation = Expectation {
            schedule: &task.schedule,
            anchor: task.anchor,
            within,
            paused: task.spec.paused || self.paused_namespaces.contains(&task.key.namespace),
            leader_since: self.term_start,
        };
        let judgement = judge(&expectation, &task.state, now);
        if let Some(mark) = judgement
            .mark
            .filter(|m| task.state.deadline_mark != Some(*m))
        {
            task.state.deadline_mark = Some(mark);
            self.pending
                .insert(Arc::clone(&task.key), Pending::WriteCurrent);
        }
        if let Some(miss) = judgement.miss {
            self.notices.push(Notice::DeadlineMissed {
                key: Arc::clone(&task.key),
                within,
                miss,
            });
        }
        if let Some(at) = judgement.check_at {
            task.deadline_timer = Some(self.timer.insert(
                at,
                TimerEntry {
                    key: Arc::clone(&task.key),
                    kind: TimerKind::Deadline,
                    generation: task.generation,
                },
            ));
        }
    }

    fn arm(&mut self, task: &mut Armed, next: Option<UtcMillis>, now: UtcMillis) {
        self.set_next(task, next);
        if next.is_some() && !task.state.status.is_executing() {
            set_status(&mut task.state, TaskStatus::Scheduled, now);
        }
    }

    /// Records the task's next fire and arms its timer for it (none for `None`).
    fn set_next(&mut self, task: &mut Armed, next: Option<UtcMillis>) {
        task.state.next_fire_at = next;
        if let Some(due) = next {
            task.timer = Some(self.timer.insert(
                due,
                TimerEntry {
                    key: Arc::clone(&task.key),
                    kind: TimerKind::Scheduled,
                    generation: task.generation,
                },
            ));
        }
    }

    /// Records a spec that does not validate: the task stops firing and its state becomes
    /// INVALID with the errors. It still exists for the graph (its children wait; they do
    /// not name a missing parent).
    pub fn mark_invalid(
        &mut self,
        key: impl Into<Arc<TaskKey>>,
        revision: i64,
        errors: Vec<FieldError>,
        now: UtcMillis,
    ) {
        let key: Arc<TaskKey> = key.into();
        self.graph.insert(&key, &[]);
        self.graph_held.remove(&key);
        self.invalidate(Arc::clone(&key), revision, errors, now);
        self.recheck_downstream(&key, now);
    }

    fn invalidate(
        &mut self,
        key: Arc<TaskKey>,
        revision: i64,
        errors: Vec<FieldError>,
        now: UtcMillis,
    ) {
        self.with_runs.remove(&key);
        let state = match self.tasks.remove(&key) {
            Some(task) => {
                for handle in [task.timer, task.held_timer, task.deadline_timer]
                    .into_iter()
                    .flatten()
                {
                    self.timer.cancel(handle);
                }
                let mut state = task.state;
                state.spec_revision = revision;
                state.next_fire_at = None;
                set_status(&mut state, TaskStatus::Invalid, now);
                state.validation_errors = errors;
                state
            }
            None => TaskState::invalid(revision, errors, now),
        };
        self.pending.insert(key, Pending::Write(Box::new(state)));
    }

    /// Forgets a deleted task: nothing more fires and its state is deleted. Tasks that
    /// depend on it become INVALID (a missing parent).
    pub fn remove(&mut self, key: &TaskKey, now: UtcMillis) {
        self.graph.remove(key);
        self.graph_held.remove(key);
        self.with_runs.remove(key);
        let key = match self.tasks.remove_entry(key) {
            Some((key, task)) => {
                for handle in [task.timer, task.held_timer, task.deadline_timer]
                    .into_iter()
                    .flatten()
                {
                    self.timer.cancel(handle);
                }
                key
            }
            None => Arc::new(key.clone()),
        };
        self.parked.remove(&key);
        // Ready entries of the task are dropped when they come up (the task is gone).
        self.pending.insert(Arc::clone(&key), Pending::Delete);
        // Its children keep their edges to it, now to a missing parent.
        self.recheck_downstream(&key, now);
    }

    /// Queues a run-now execution with its own id; the periodic schedule is not disturbed.
    /// Returns false for an unknown task.
    pub fn trigger(&mut self, key: &TaskKey, execution_id: String, now: UtcMillis) -> bool {
        let Some(task) = self.tasks.get(key) else {
            return false;
        };
        push_fire(
            &mut self.ready,
            &task.key,
            task.generation,
            task.spec.priority,
            now,
            FireKind::RunNow(execution_id),
            now,
        );
        true
    }

    /// When [`poll`](Self::poll) next has work: the earliest timer, or the next rate-limit
    /// token while fires wait.
    pub fn next_wakeup(&mut self, now: UtcMillis) -> Option<UtcMillis> {
        let ready = if self.ready.is_empty() {
            None
        } else {
            Some(match &mut self.limiter {
                Some(bucket) => bucket.next_token_at(now),
                None => now,
            })
        };
        match (self.timer.next_due(), ready) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Advances to `now` and returns the executions to enqueue, in dispatch order.
    pub fn poll(&mut self, now: UtcMillis) -> Vec<Dispatch> {
        let mut due = std::mem::take(&mut self.due);
        self.timer.advance_into(now, &mut due);
        for (fire_at, entry) in due.drain(..) {
            self.on_timer(fire_at, entry, now);
        }
        self.due = due;
        self.sweep_runs(now);

        let mut out = Vec::new();
        loop {
            if let Some(bucket) = &mut self.limiter {
                if self.ready.is_empty() || bucket.next_token_at(now) > now {
                    break;
                }
            }
            let Some(item) = self.ready.pop(now) else {
                break;
            };
            let Some(task) = self.tasks.get_mut(&item.key) else {
                continue;
            };
            let (run_now, run_id) = match &item.kind {
                FireKind::Resend(id) => {
                    if let Some(progress) = task.state.fanouts.iter().find(|f| f.id == *id) {
                        let starts_run =
                            progress.run.is_none() && self.graph.starts_runs(&task.key, &task.spec);
                        let fire = ShardedFire::of(
                            progress,
                            progress.fire_at,
                            None,
                            progress.run.clone(),
                            starts_run,
                        );
                        out.extend(fire.open(task, progress));
                    }
                    continue;
                }
                FireKind::RunNow(id) => (Some(id.clone()), None),
                FireKind::Step(step) => {
                    let (execution, run) = &**step;
                    // Stale: the step ended (its end was replayed) or was dropped meanwhile.
                    if !task
                        .state
                        .runs
                        .iter()
                        .any(|r| r.execution.as_deref() == Some(execution.as_str()))
                    {
                        continue;
                    }
                    (Some(execution.clone()), Some(run.clone()))
                }
                FireKind::Scheduled | FireKind::HeldAgain => (None, None),
            };
            if run_now.is_none() {
                // Queued before the spec changed or the task was paused: stale.
                if item.generation != task.generation || task.spec.paused {
                    continue;
                }
            }
            let fire_at = match item.kind {
                FireKind::HeldAgain => match task.state.held_fire_at {
                    // The held fire may have merged newer fires meanwhile: send the newest.
                    Some(held) => held,
                    // Released since (enqueued, or superseded by a newer fire).
                    None => continue,
                },
                FireKind::Scheduled
                | FireKind::RunNow(_)
                | FireKind::Step(_)
                | FireKind::Resend(_) => item.fire_at,
            };
            if matches!(item.kind, FireKind::Scheduled)
                && self.paused_namespaces.contains(&task.key.namespace)
            {
                // A fire queued without its timer (a takeover's missed fires) or before the
                // pause: parked like one whose timer came due.
                self.parked
                    .entry(Arc::clone(&task.key))
                    .or_insert((fire_at, task.generation));
                continue;
            }
            if matches!(item.kind, FireKind::Scheduled) {
                // Only new fires pass the breaker; a held fire was admitted when it first came.
                let breaker = task.breaker.get_or_insert_with(|| {
                    Box::new(CircuitBreaker::new(self.config.breaker.clone()))
                });
                let (admission, transition) = breaker.admit(now);
                if let Some(t) = transition {
                    self.notices.push(breaker_notice(&task.key, t));
                }
                if admission == Admission::Skip {
                    self.notices.push(Notice::BreakerSkipped {
                        key: Arc::clone(&task.key),
                        fire_at,
                    });
                    continue;
                }
                task.state.record_fire(fire_at, now);
            }
            if let Some(bucket) = &mut self.limiter {
                // Checked non-empty with a token above; taking cannot fail in between.
                bucket.try_take(now);
            }
            set_status(&mut task.state, TaskStatus::Running, now);
            write_running(&mut self.pending, &task.key, &self.config, now);
            let starts_run = run_id.is_none() && self.graph.starts_runs(&task.key, &task.spec);
            if let Some(fanout) = task.spec.fanout {
                let id = run_now
                    .clone()
                    .unwrap_or_else(|| fire_fanout_id(&task.key, fire_at));
                let total = match fanout {
                    Fanout::Shards(total) => total,
                    Fanout::Broadcast => match task.state.fanouts.iter().find(|f| f.id == id) {
                        Some(progress) => {
                            // Addressed before (a fire replayed after a failover): its shards
                            // not ended go to the workers they were addressed to.
                            let fire =
                                ShardedFire::of(progress, fire_at, run_now, run_id, starts_run);
                            out.extend(fire.open(task, progress));
                            continue;
                        }
                        None => {
                            out.push(Dispatch {
                                key: Arc::clone(&task.key),
                                spec: Arc::clone(&task.spec),
                                fire_at,
                                overlap: OverlapPolicy::Allow,
                                run_now,
                                run_id,
                                starts_run,
                                shard: None,
                                broadcast: true,
                            });
                            continue;
                        }
                    },
                };
                if !task.state.fanouts.iter().any(|f| f.id == id) {
                    task.state.fanouts.push(FanoutProgress::new(
                        id.clone(),
                        fire_at,
                        total,
                        run_id.clone(),
                    ));
                }
                let fire = ShardedFire {
                    fire_at,
                    run_now,
                    run_id,
                    starts_run,
                    fanout: &id,
                    total,
                    workers: &[],
                };
                out.extend((0..total).map(|index| fire.shard(task, index)));
                continue;
            }
            out.push(Dispatch {
                key: Arc::clone(&task.key),
                spec: Arc::clone(&task.spec),
                fire_at,
                overlap: dispatch_mode(&task.spec, run_now.is_some()),
                run_now,
                run_id,
                starts_run,
                shard: None,
                broadcast: false,
            });
        }
        out
    }

    /// Addresses a broadcast fire `poll` returned (its `broadcast` set) to `workers`, the
    /// live workers of the task's queue the shell found: one shard each, in sorted order,
    /// at most [`MAX_SHARDS`]. The fire's progress keeps the list (written at once: a new
    /// leader sends what is not ended to the same workers). With no worker the fire ends
    /// failed here, with a [`Notice::NoLiveWorker`]. Returns the executions to enqueue;
    /// a fire addressed already gets its shards not ended, as addressed then.
    pub fn address_broadcast(
        &mut self,
        dispatch: &Dispatch,
        mut workers: Vec<String>,
        now: UtcMillis,
    ) -> Vec<Dispatch> {
        let Some(task) = self.tasks.get_mut(&dispatch.key) else {
            return Vec::new();
        };
        let Some(id) = dispatch.broadcast_fanout_id() else {
            return Vec::new();
        };
        if !task.state.fanouts.iter().any(|f| f.id == id) {
            workers.sort();
            workers.dedup();
            workers.truncate(MAX_SHARDS as usize);
            if workers.is_empty() {
                let reason = format!("no live worker serves queue {}", task.spec.queue);
                task.state.last_error = Some(reason.clone());
                let key = Arc::clone(&task.key);
                self.notices.push(Notice::NoLiveWorker {
                    key: Arc::clone(&key),
                    fanout: id.clone(),
                    fire_at: dispatch.fire_at,
                    run: dispatch.run_id.clone(),
                    queue: Arc::clone(&task.spec.queue),
                    reason: reason.clone(),
                });
                let end = crate::execution::AttemptEnd::new(AttemptOutcome::Failed, Some(reason));
                if let Some(execution) = parse_execution_id(&id) {
                    self.apply_to_state(
                        &key,
                        None,
                        execution,
                        0,
                        &ExecutionEvent::Finished {
                            at: now,
                            end: end.clone(),
                        },
                        false,
                        now,
                    );
                    self.on_step_end(&key, execution, StepOutcome::of(&end), now);
                }
                return Vec::new();
            }
            task.state.fanouts.push(FanoutProgress::broadcast(
                id.clone(),
                dispatch.fire_at,
                workers,
                dispatch.run_id.clone(),
            ));
            self.pending
                .insert(Arc::clone(&task.key), Pending::WriteCurrent);
        }
        let Some(progress) = task.state.fanouts.iter().find(|f| f.id == id) else {
            return Vec::new();
        };
        ShardedFire::of(
            progress,
            dispatch.fire_at,
            dispatch.run_now.clone(),
            dispatch.run_id.clone(),
            dispatch.starts_run,
        )
        .open(task, progress)
    }

    fn on_timer(&mut self, fire_at: UtcMillis, entry: TimerEntry, now: UtcMillis) {
        let Some(mut task) = self.tasks.remove(&entry.key) else {
            return;
        };
        if task.generation == entry.generation {
            match entry.kind {
                TimerKind::Scheduled if self.paused_namespaces.contains(&task.key.namespace) => {
                    // Parked, not re-armed: the resume arms it again.
                    task.timer = None;
                    self.parked
                        .entry(Arc::clone(&task.key))
                        .or_insert((fire_at, task.generation));
                }
                TimerKind::Scheduled => {
                    task.timer = None;
                    if now.since(fire_at) > self.config.stall_threshold {
                        // The leader stalled (a backend it waited on, a paused process, a
                        // forward clock step): the fires missed meanwhile follow the task's
                        // misfire policy, exactly as at a takeover, instead of all running.
                        self.replay_missed(&mut task, fire_at, now);
                    } else {
                        let next = task.schedule.next_after(fire_at, task.anchor);
                        self.rearm_and_push(&mut task, next, vec![fire_at], now);
                    }
                }
                TimerKind::Deadline => {
                    task.deadline_timer = None;
                    self.judge_deadline(&mut task, now);
                }
                TimerKind::HeldRetry => {
                    task.held_timer = None;
                    if let Some(held) = task.state.held_fire_at {
                        push_fire(
                            &mut self.ready,
                            &task.key,
                            task.generation,
                            task.spec.priority,
                            held,
                            FireKind::HeldAgain,
                            now,
                        );
                    }
                }
            }
        }
        self.tasks.insert(Arc::clone(&task.key), task);
    }

    /// Runs what the task's misfire policy keeps of the fires from `first_missed` to `now`
    /// (a stall, a paused namespace), with a notice of what it dropped, and re-arms.
    fn replay_missed(&mut self, task: &mut Armed, first_missed: UtcMillis, now: UtcMillis) {
        let plan = plan_misfires(
            task.spec.misfire,
            &task.schedule,
            task.anchor,
            Progress::NextDue(first_missed),
            now,
            self.config.catch_up_window,
        );
        if plan.skipped > 0 || plan.beyond_window > 0 {
            self.notices.push(Notice::Misfired {
                key: Arc::clone(&task.key),
                missed: plan.missed,
                skipped: plan.skipped,
                beyond_window: plan.beyond_window,
                oldest: plan.oldest_missed,
            });
        }
        self.rearm_and_push(task, plan.next_fire, plan.run_now, now);
    }

    /// Arms the task's next fire, then queues `fires`: re-armed before dispatching, so the
    /// schedule keeps its cadence.
    fn rearm_and_push(
        &mut self,
        task: &mut Armed,
        next: Option<UtcMillis>,
        fires: Vec<UtcMillis>,
        now: UtcMillis,
    ) {
        self.set_next(task, next);
        for fire_at in fires {
            push_fire(
                &mut self.ready,
                &task.key,
                task.generation,
                task.spec.priority,
                fire_at,
                FireKind::Scheduled,
                now,
            );
        }
    }

    /// Takes what the enqueue of `dispatch` came to.
    pub fn on_enqueued(&mut self, dispatch: &Dispatch, outcome: EnqueueOutcome, now: UtcMillis) {
        let Some(task) = self.tasks.get_mut(&dispatch.key) else {
            return;
        };
        match outcome {
            EnqueueOutcome::Enqueued | EnqueueOutcome::Duplicate => {
                // A scheduled fire at or after the held one is in the queue: the held fire
                // is that one, or merged into it.
                if dispatch.run_now.is_none()
                    && task
                        .state
                        .held_fire_at
                        .is_some_and(|h| h <= dispatch.fire_at)
                {
                    task.state.held_fire_at = None;
                    self.pending
                        .insert(Arc::clone(&task.key), Pending::WriteCurrent);
                    if let Some(handle) = task.held_timer.take() {
                        self.timer.cancel(handle);
                    }
                }
            }
            EnqueueOutcome::Held => {
                task.state.held_fire_at =
                    Some(merge_held(task.state.held_fire_at, dispatch.fire_at));
                self.pending
                    .insert(Arc::clone(&task.key), Pending::WriteCurrent);
                if task.held_timer.is_none() {
                    arm_held_retry(&mut self.timer, task, self.config.hold_retry, now);
                }
            }
            // The sender was deposed; the engine ends the term.
            EnqueueOutcome::Fenced { .. } => {}
        }
    }

    /// Takes a worker event read from the event log at `position`. An event at or before the
    /// last one applied to the task's state is already in it (read again because the leader
    /// that read it first died before acknowledging it) and is ignored; the position goes
    /// into the state with the event's effects, so the two are written together.
    pub fn on_event(
        &mut self,
        key: &TaskKey,
        position: EventPosition,
        execution: u128,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) {
        self.apply_execution(key, Some(position), execution, attempt, event, now);
    }

    /// Takes an execution event reported by a worker.
    /// `execution` and `attempt` name the attempt (the execution id as a number).
    pub fn on_execution(
        &mut self,
        key: &TaskKey,
        execution: u128,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) {
        self.apply_execution(key, None, execution, attempt, event, now);
    }

    /// Both of the above: an event from the event log carries its `position`.
    fn apply_execution(
        &mut self,
        key: &TaskKey,
        position: Option<EventPosition>,
        execution: u128,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) {
        if let Some(task) = self.tasks.get(key) {
            // A fanned-out task's executions are shards: a final end that matches no fire in
            // progress is one already counted (read again), not an execution of its own.
            if task.spec.fanout.is_some() {
                if let Some((step, outcome)) =
                    self.apply_shard(key, position, execution, attempt, event, now)
                {
                    self.on_step_end(key, step, outcome, now);
                }
                return;
            }
        }
        self.apply_to_state(key, position, execution, attempt, event, true, now);
        if let ExecutionEvent::Finished { end, .. } = event {
            if end.is_last() {
                // Even when the state says the event was applied: the children's states are
                // other records, and may not have been written with it (see `on_step_end`).
                self.on_step_end(key, execution, StepOutcome::of(end), now);
            }
        }
    }

    /// A shard's event: a start or a retry as for any execution; a final end counted in its
    /// fire's progress. The fire's one end (all succeeded, or how many failed) is applied
    /// once the last shard has ended, and returned (its fan-out id as an execution, and the
    /// outcome) for the dependency chain.
    fn apply_shard(
        &mut self,
        key: &TaskKey,
        position: Option<EventPosition>,
        execution: u128,
        attempt: u32,
        event: &ExecutionEvent,
        now: UtcMillis,
    ) -> Option<(u128, StepOutcome)> {
        let ExecutionEvent::Finished { at, end } = event else {
            self.apply_to_state(key, position, execution, attempt, event, true, now);
            return None;
        };
        if !end.is_last() {
            self.apply_to_state(key, position, execution, attempt, event, true, now);
            return None;
        }
        let task = self.tasks.get_mut(key)?;
        let (slot, index) = task
            .state
            .fanouts
            .iter()
            .enumerate()
            .find_map(|(slot, f)| Some((slot, shard_of(&f.id, execution, f.total)?)))?;
        if let Some(p) = position {
            if task.state.last_event.is_some_and(|applied| applied >= p) {
                return None;
            }
            task.state.last_event = Some(p);
        }
        let progress = &mut task.state.fanouts[slot];
        if !progress.record(index, end.is_success()) {
            return None;
        }
        // The shard's own last attempt; the fire's end below is not an attempt of its own.
        self.notices
            .extend(failure_notice(&task.key, execution, attempt, event));
        if let Some(e) = &end.error {
            task.state.last_error = Some(shown_error(e.clone()));
        }
        self.pending
            .insert(Arc::clone(&task.key), Pending::WriteCurrent);
        if !progress.complete() {
            return None;
        }
        let done = task.state.fanouts.remove(slot);
        let failures = done.failures();
        let whole = crate::execution::AttemptEnd::new(
            if failures == 0 {
                AttemptOutcome::Succeeded
            } else {
                AttemptOutcome::Failed
            },
            (failures > 0).then(|| {
                format!(
                    "{failures} of {} shards failed; last error: {}",
                    done.total,
                    task.state.last_error.clone().unwrap_or_default()
                )
            }),
        );
        let fanout = parse_execution_id(&done.id)?;
        // The fire's end, as one execution's: counted, settled, a held fire released.
        self.apply_to_state(
            key,
            None,
            fanout,
            0,
            &ExecutionEvent::Finished {
                at: *at,
                end: whole.clone(),
            },
            false,
            now,
        );
        Some((fanout, StepOutcome::of(&whole)))
    }

    /// Applies an execution's event to its task's state. `attempt` is false for the made-up
    /// end of a fanned-out fire as a whole, which is no attempt of its own (its shards' are)
    /// and so raises no failure notice.
    #[allow(clippy::too_many_arguments)]
    fn apply_to_state(
        &mut self,
        key: &TaskKey,
        position: Option<EventPosition>,
        execution: u128,
        attempt: u32,
        event: &ExecutionEvent,
        is_attempt: bool,
        now: UtcMillis,
    ) {
        let Some(task) = self.tasks.get_mut(key) else {
            return;
        };
        if let Some(position) = position {
            if task
                .state
                .last_event
                .is_some_and(|applied| applied >= position)
            {
                return;
            }
            task.state.last_event = Some(position);
        }
        if matches!(event, ExecutionEvent::Finished { .. })
            && task.last_end == Some((execution, attempt))
        {
            return;
        }
        match event {
            ExecutionEvent::Started { at } => {
                // Events of different attempts come from different workers; a start older
                // than the last recorded end belongs to an attempt already over.
                if task.state.last_finished_at.is_none_or(|end| *at >= end)
                    && task.state.status != TaskStatus::Running
                {
                    // A retry's start: like a fire, written with its end unless it runs long.
                    set_status(&mut task.state, TaskStatus::Running, now);
                    write_running(&mut self.pending, &task.key, &self.config, now);
                }
            }
            ExecutionEvent::Finished { end, .. } => {
                if end.outcome == AttemptOutcome::Released {
                    // Given back unfinished: it runs again elsewhere; nothing ended.
                    return;
                }
                task.last_end = Some((execution, attempt));
                if is_attempt {
                    self.notices
                        .extend(failure_notice(&task.key, execution, attempt, event));
                }
                let breaker = task.breaker.get_or_insert_with(|| {
                    Box::new(CircuitBreaker::new(self.config.breaker.clone()))
                });
                if let Some(t) = breaker.record(!end.outcome.is_failure(), now) {
                    self.notices.push(breaker_notice(&task.key, t));
                }
                if !end.is_last() {
                    task.state.last_error = end.error.clone().map(shown_error);
                } else {
                    task.state.record_outcome(
                        if end.is_success() {
                            Ok(())
                        } else {
                            Err(end.error.clone().unwrap_or_else(|| "failed".to_owned()))
                        },
                        now,
                    );
                }
                settle_status(task, end, now);
                if end.is_last() {
                    if let Some(held) = task.state.held_fire_at {
                        push_fire(
                            &mut self.ready,
                            &task.key,
                            task.generation,
                            task.spec.priority,
                            held,
                            FireKind::HeldAgain,
                            now,
                        );
                    }
                }
                self.pending
                    .insert(Arc::clone(&task.key), Pending::WriteCurrent);
            }
        }
    }

    /// A task's execution ended for good: its part of a run is over, and its children learn
    /// it. A first task (no parents) starts a run named after the execution; a dependent
    /// task ends the step its execution was fired for (its other executions, run by hand,
    /// belong to no run). Idempotent: the same end again records nothing new, a step fired
    /// again keeps its execution id, and runs a child finished are remembered.
    fn on_step_end(
        &mut self,
        key: &TaskKey,
        execution: u128,
        outcome: StepOutcome,
        now: UtcMillis,
    ) {
        let Some(task) = self.tasks.get_mut(key) else {
            return;
        };
        if task.spec.depends_on.is_empty() && !self.graph.has_children(key) {
            // Neither a step nor the first task of a chain: the common case, kept free.
            return;
        }
        let execution = execution_id_text(execution);
        let run = if task.spec.depends_on.is_empty() {
            execution
        } else {
            let Some(i) = task
                .state
                .runs
                .iter()
                .position(|r| r.execution.as_deref() == Some(&execution))
            else {
                return;
            };
            let done = task.state.runs.remove(i);
            remember_done(&mut task.state, &done.run);
            if task.state.runs.is_empty() {
                self.with_runs.remove(key);
            }
            self.pending
                .insert(Arc::clone(&task.key), Pending::WriteCurrent);
            done.run
        };
        let parent = Arc::clone(&task.key);
        self.propagate(parent, &run, outcome, now);
    }

    /// Hands `parent`'s outcome in `run` to its children, and a skip on down the chain.
    fn propagate(&mut self, parent: Arc<TaskKey>, run: &str, outcome: StepOutcome, now: UtcMillis) {
        let mut work = vec![(parent, outcome)];
        while let Some((parent, outcome)) = work.pop() {
            let parent_text = parent.to_string();
            for child in self.graph.children(&parent).to_vec() {
                let Some(task) = self.tasks.get_mut(&child) else {
                    // INVALID or held: its step does not run, and nothing runs after it.
                    work.push((child, StepOutcome::Skipped));
                    continue;
                };
                if task.state.runs_done.iter().any(|r| r == run) {
                    continue;
                }
                let i = match task.state.runs.iter().position(|r| r.run == run) {
                    Some(i) => i,
                    None => {
                        if task.state.runs.len() >= MAX_RUNS_IN_PROGRESS {
                            self.drop_oldest_run(&child, now);
                        }
                        let Some(task) = self.tasks.get_mut(&child) else {
                            continue;
                        };
                        task.state.runs.push(RunProgress::new(run, now));
                        task.state.runs.len() - 1
                    }
                };
                let Some(task) = self.tasks.get_mut(&child) else {
                    continue;
                };
                self.with_runs.insert(Arc::clone(&child));
                self.pending
                    .insert(Arc::clone(&child), Pending::WriteCurrent);
                let progress = &mut task.state.runs[i];
                if progress.execution.is_some() {
                    continue;
                }
                progress.done.insert(parent_text.clone(), outcome);
                if let Some(skip) = self.decide_step(&child, i, now) {
                    work.push((child, skip));
                }
            }
        }
    }

    /// Makes room for a new run in `key`'s state: the oldest run gives way, its step
    /// skipped (and the steps after it, if it had not fired).
    fn drop_oldest_run(&mut self, key: &Arc<TaskKey>, now: UtcMillis) {
        let Some(task) = self.tasks.get_mut(key) else {
            return;
        };
        if task.state.runs.is_empty() {
            return;
        }
        let oldest = task.state.runs.remove(0);
        remember_done(&mut task.state, &oldest.run);
        self.notices.push(Notice::StepSkipped {
            key: Arc::clone(key),
            run: oldest.run.clone(),
            reason: format!("more than {MAX_RUNS_IN_PROGRESS} runs in progress"),
        });
        if oldest.execution.is_none() {
            self.propagate(Arc::clone(key), &oldest.run, StepOutcome::Skipped, now);
        }
    }

    /// Fires the step at `runs[i]` of `key` if its parents allow it now, or skips it.
    /// Returns `Some(Skipped)` when the step was skipped (to hand on to its children).
    fn decide_step(&mut self, key: &Arc<TaskKey>, i: usize, now: UtcMillis) -> Option<StepOutcome> {
        let paused = self.paused_namespaces.contains(&key.namespace);
        let task = self.tasks.get_mut(key)?;
        let progress = task.state.runs.get(i)?;
        let mut decided = verdict(&task.spec.depends_on, progress, now);
        if decided == Verdict::Fire && (task.spec.paused || paused) {
            decided = Verdict::Skip("the task is paused".to_owned());
        }
        match decided {
            Verdict::Wait => None,
            Verdict::Fire => {
                let run = progress.run.clone();
                let execution = step_execution_id(&run, key);
                task.state.runs[i].execution = Some(execution.clone());
                push_fire(
                    &mut self.ready,
                    &task.key,
                    task.generation,
                    task.spec.priority,
                    now,
                    FireKind::Step(Box::new((execution, run))),
                    now,
                );
                None
            }
            Verdict::Skip(reason) => {
                let done = task.state.runs.remove(i);
                remember_done(&mut task.state, &done.run);
                self.notices.push(Notice::StepSkipped {
                    key: Arc::clone(key),
                    run: done.run,
                    reason,
                });
                Some(StepOutcome::Skipped)
            }
        }
    }

    /// Skips the steps whose parents are too late, once a second at most.
    fn sweep_runs(&mut self, now: UtcMillis) {
        if now < self.next_run_sweep || self.with_runs.is_empty() {
            return;
        }
        self.next_run_sweep = now.add(Duration::from_secs(1));
        let keys: Vec<Arc<TaskKey>> = self.with_runs.iter().cloned().collect();
        for key in keys {
            let mut i = 0;
            while let Some(task) = self.tasks.get(&key) {
                let Some(progress) = task.state.runs.get(i) else {
                    if task.state.runs.is_empty() {
                        self.with_runs.remove(&key);
                    }
                    break;
                };
                if progress.execution.is_some() {
                    i += 1;
                    continue;
                }
                let run = progress.run.clone();
                match self.decide_step(&key, i, now) {
                    Some(skipped) => {
                        self.pending.insert(Arc::clone(&key), Pending::WriteCurrent);
                        self.propagate(Arc::clone(&key), &run, skipped, now);
                    }
                    None => i += 1,
                }
            }
        }
    }

    /// Tasks whose state says an execution is in flight (RUNNING, RETRYING), with the fire
    /// it is for. A new leader checks them against the execution history: their end may
    /// have been heard by a leader that died before writing it.
    pub fn in_flight(&self) -> Vec<(Arc<TaskKey>, UtcMillis)> {
        self.tasks
            .values()
            .filter(|t| t.state.status.is_executing())
            .filter_map(|t| t.state.last_fire_at.map(|f| (Arc::clone(&t.key), f)))
            .collect()
    }

    /// Applies the end of an attempt read from the execution history (see
    /// [`in_flight`](Self::in_flight)), as if its event had arrived; the event itself, if it
    /// still comes, is then ignored.
    ///
    /// An end already applied (its event came first) is not counted again, but still settles
    /// the status: the history is read for a fire sent again and refused as a duplicate (its
    /// first dispatch was not in the state a new leader loaded), and that re-dispatch moved
    /// the status back to RUNNING.
    pub fn reconcile(
        &mut self,
        key: &TaskKey,
        execution: u128,
        attempt: u32,
        finished_at: UtcMillis,
        end: &crate::execution::AttemptEnd,
        now: UtcMillis,
    ) {
        if let Some(task) = self.tasks.get_mut(key) {
            if task.last_end == Some((execution, attempt)) {
                if task.state.status.is_executing() {
                    settle_status(task, end, now);
                    self.pending
                        .insert(Arc::clone(&task.key), Pending::WriteCurrent);
                }
                return;
            }
        }
        let event = ExecutionEvent::Finished {
            at: finished_at,
            end: end.clone(),
        };
        self.on_execution(key, execution, attempt, &event, now);
    }

    /// The states to write at `now`, newest version of each: `Some` to write, `None` to
    /// delete. A fire's state whose write waits (see the module notes) stays until its time;
    /// [`UtcMillis::MAX`] takes everything (the last flush of a term).
    pub fn take_state_writes(&mut self, now: UtcMillis) -> Vec<StateWrite> {
        let mut out = Vec::with_capacity(self.pending.len());
        let tasks = &self.tasks;
        self.pending.retain(|key, pending| {
            let write = match pending {
                Pending::WriteCurrentAfter(at) if *at > now => return true,
                Pending::WriteCurrent | Pending::WriteCurrentAfter(_) => {
                    tasks.get(key).map(|t| Some(t.state.clone()))
                }
                Pending::Write(state) => Some(Some(TaskState::clone(state))),
                Pending::Delete => Some(None),
            };
            if let Some(w) = write {
                out.push((Arc::clone(key), w));
            }
            false
        });
        // A takeover marks every task; the table keeps that capacity (tens of bytes a task)
        // long after the writes went unless it is given back.
        if self.pending.capacity() > 4 * self.pending.len() + 1024 {
            self.pending.shrink_to(2 * self.pending.len());
        }
        out
    }

    /// Notices raised since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }
}

/// The notice of an attempt that failed, if `event` ends one that did.
fn failure_notice(
    key: &Arc<TaskKey>,
    execution: u128,
    attempt: u32,
    event: &ExecutionEvent,
) -> Option<Notice> {
    match event {
        ExecutionEvent::Finished { at, end } if end.outcome.is_failure() => {
            Some(Notice::AttemptFailed {
                key: Arc::clone(key),
                execution,
                attempt,
                at: *at,
                end: end.clone(),
            })
        }
        _ => None,
    }
}

/// Deadlines start afresh at `now` (a spec change, a resume): fires due before are not
/// judged. Only for a task with a deadline: the mark is read by nothing else.
fn restart_deadlines(state: &mut TaskState, spec: &TaskSpec, now: UtcMillis) {
    if spec.expect_success_within.is_some() {
        state.deadline_mark = state.deadline_mark.max(Some(now));
    }
}

/// The shards of one fanned-out fire, to dispatch (see [`crate::fanout`]).
struct ShardedFire<'a> {
    fire_at: UtcMillis,
    run_now: Option<String>,
    run_id: Option<String>,
    starts_run: bool,
    fanout: &'a str,
    total: u32,
    /// A broadcast fire's workers, by shard (empty for `shards`).
    workers: &'a [String],
}

impl<'a> ShardedFire<'a> {
    /// The fire `progress` records, to send its shards not ended again (after a failover,
    /// or to the workers a broadcast was addressed to).
    fn of(
        progress: &'a FanoutProgress,
        fire_at: UtcMillis,
        run_now: Option<String>,
        run_id: Option<String>,
        starts_run: bool,
    ) -> Self {
        ShardedFire {
            fire_at,
            run_now,
            run_id,
            starts_run,
            fanout: &progress.id,
            total: progress.total,
            workers: &progress.workers,
        }
    }

    /// Its shards `progress` shows open.
    fn open(&self, task: &Armed, progress: &FanoutProgress) -> Vec<Dispatch> {
        progress
            .open()
            .map(|index| self.shard(task, index))
            .collect()
    }

    /// Shard `index`: side by side with the others, so overlap `allow`.
    fn shard(&self, task: &Armed, index: u32) -> Dispatch {
        Dispatch {
            key: Arc::clone(&task.key),
            spec: Arc::clone(&task.spec),
            fire_at: self.fire_at,
            overlap: OverlapPolicy::Allow,
            run_now: self.run_now.clone(),
            run_id: self.run_id.clone(),
            starts_run: self.starts_run,
            shard: Some(Shard {
                index,
                total: self.total,
                fanout: self.fanout.to_owned(),
                worker: self.workers.get(index as usize).cloned(),
            }),
            broadcast: false,
        }
    }
}

/// Keeps the last runs a task finished its step of, so that a parent's end read again
/// (after a failover) does not start the step anew.
fn remember_done(state: &mut TaskState, run: &str) {
    if state.runs_done.len() >= RUNS_REMEMBERED {
        state.runs_done.remove(0);
    }
    state.runs_done.push(run.to_owned());
}

/// Finished runs a task remembers (see [`remember_done`]).
const RUNS_REMEMBERED: usize = 16;

/// Marks a task's RUNNING state for writing once `running_write_delay` has passed; a change
/// already waiting to be written goes as soon as it would have.
fn write_running(
    pending: &mut HashMap<Arc<TaskKey>, Pending>,
    key: &Arc<TaskKey>,
    config: &DispatcherConfig,
    now: UtcMillis,
) {
    pending
        .entry(Arc::clone(key))
        .or_insert(Pending::WriteCurrentAfter(
            now.add(config.running_write_delay),
        ));
}

/// The status `end` leaves `task` in: RETRYING when another attempt follows, else the
/// outcome's, then SCHEDULED (a next fire is armed) or PAUSED.
fn settle_status(task: &mut Armed, end: &crate::execution::AttemptEnd, now: UtcMillis) {
    if !end.is_last() {
        set_status(&mut task.state, TaskStatus::Retrying, now);
        return;
    }
    let status = match end.outcome {
        AttemptOutcome::Killed => TaskStatus::Killed,
        AttemptOutcome::Succeeded => TaskStatus::Success,
        _ => TaskStatus::Failed,
    };
    set_status(&mut task.state, status, now);
    if task.spec.paused {
        set_status(&mut task.state, TaskStatus::Paused, now);
    } else if task.state.next_fire_at.is_some() {
        set_status(&mut task.state, TaskStatus::Scheduled, now);
    }
}

fn push_fire(
    ready: &mut ReadyQueue<ReadyFire>,
    key: &Arc<TaskKey>,
    generation: u64,
    priority: u8,
    fire_at: UtcMillis,
    kind: FireKind,
    now: UtcMillis,
) {
    let fire = ReadyFire {
        key: Arc::clone(key),
        fire_at,
        kind,
        generation,
    };
    ready.push(fire, priority, now);
}

/// Gives `task` its one held-fire retry timer, `after` from `now`.
fn arm_held_retry(
    timer: &mut TimerWheel<TimerEntry>,
    task: &mut Armed,
    after: Duration,
    now: UtcMillis,
) {
    task.held_timer = Some(timer.insert(
        now.add(after),
        TimerEntry {
            key: Arc::clone(&task.key),
            kind: TimerKind::HeldRetry,
            generation: task.generation,
        },
    ));
}

fn breaker_notice(key: &Arc<TaskKey>, transition: Transition) -> Notice {
    match transition {
        Transition::Opened {
            failures,
            executions,
        } => Notice::CircuitOpened {
            key: Arc::clone(key),
            failures,
            executions,
        },
        Transition::Closed => Notice::CircuitClosed {
            key: Arc::clone(key),
        },
    }
}

/// Moves `state` to `to` along the state machine. Worker events cross the network and may
/// arrive out of order (a retry's start after its end), so a move the machine does not allow
/// directly is tried through RUNNING, and otherwise the status is left as it is (counters
/// and times are still recorded by the caller).
fn set_status(state: &mut TaskState, to: TaskStatus, now: UtcMillis) {
    if state.transition(to, now).is_ok() {
        return;
    }
    if state.status.can_transition_to(TaskStatus::Running)
        && TaskStatus::Running.can_transition_to(to)
    {
        state.status = TaskStatus::Running;
        let _ = state.transition(to, now);
    }
}

#[cfg(test)]
mod tests;
