//! The alert value, its levels and kinds, and one constructor per engine trigger.
//!
//! Titles are deliberately stable per condition ("Task failed: ns/id", never the attempt number
//! or the current backlog) because de-duplication keys on `(title, task)`: the changing details
//! go into `message` and `fields`, so a task failing on every attempt is reported once per
//! window rather than once per attempt. Constructors take `now` from the caller, like the rest
//! of ax, so an alert carries the instant the engine observed the condition.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ax_scheduler_core::deadline::Miss;
use ax_scheduler_core::{TaskKey, UtcMillis};
use serde::{Deserialize, Serialize};

use crate::error::AlertError;

/// How urgent an alert is; ordered from least to most urgent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Worth knowing; no action needed.
    Info,
    /// Something degraded; look at it during working hours.
    Warn,
    /// Tasks are being lost or badly delayed; act now.
    Critical,
    /// The scheduler cannot do its job at all.
    Fatal,
}

impl Level {
    /// The lowercase name used in payloads and configuration: `info`, `warn`, `critical`, `fatal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Critical => "critical",
            Level::Fatal => "fatal",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Level {
    type Err = AlertError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "info" => Ok(Level::Info),
            "warn" | "warning" => Ok(Level::Warn),
            "critical" => Ok(Level::Critical),
            "fatal" => Ok(Level::Fatal),
            other => Err(AlertError::InvalidConfig {
                field: "level",
                reason: format!("unknown level {other:?}; expected info, warn, critical or fatal"),
            }),
        }
    }
}

/// Which condition raised the alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A task run failed (it may still be retried).
    TaskFailed,
    /// A task exhausted its retries and went to the dead-letter queue.
    TaskDeadLettered,
    /// A queue holds more entries than its threshold.
    QueueBacklog,
    /// Executions wait in a queue that no worker serves.
    QueueUnserved,
    /// Leadership moved (or was lost).
    LeaderChanged,
    /// A fire was dispatched later than the delay threshold after its scheduled instant.
    ScheduleDelay,
    /// Fires were skipped by a task's misfire policy.
    MisfireSkipped,
    /// A circuit breaker opened.
    CircuitOpen,
    /// The summary of alerts the rate limit deferred.
    #[serde(rename = "held_back_summary")]
    DeferredSummary,
    /// A backend (etcd, Redis) refuses the engine's writes: fires wait.
    BackendUnavailable,
    /// Redis restarted under the leader (its run id changed).
    BackendRestarted,
    /// A queue's fence refuses every leader of this installation (another installation, an
    /// etcd restore).
    FenceConflict,
    /// A task with `expect_success_within` did not succeed in time after a due fire.
    DeadlineMissed,
    /// Anything else.
    Other,
}

impl AlertKind {
    /// The snake_case name used in payloads, e.g. `task_dead_lettered`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::TaskFailed => "task_failed",
            AlertKind::TaskDeadLettered => "task_dead_lettered",
            AlertKind::QueueBacklog => "queue_backlog",
            AlertKind::QueueUnserved => "queue_unserved",
            AlertKind::LeaderChanged => "leader_changed",
            AlertKind::ScheduleDelay => "schedule_delay",
            AlertKind::MisfireSkipped => "misfire_skipped",
            AlertKind::CircuitOpen => "circuit_open",
            AlertKind::DeferredSummary => "held_back_summary",
            AlertKind::BackendUnavailable => "backend_unavailable",
            AlertKind::BackendRestarted => "backend_restarted",
            AlertKind::FenceConflict => "fence_conflict",
            AlertKind::DeadlineMissed => "deadline_missed",
            AlertKind::Other => "other",
        }
    }
}

impl fmt::Display for AlertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The key of the task a trigger names; the constructors take its parts as any string, as
/// callers hold them.
fn task_key(namespace: impl Into<String>, id: impl Into<String>) -> TaskKey {
    let (namespace, id): (String, String) = (namespace.into(), id.into());
    TaskKey::new(namespace, id)
}

/// One alert, as raised by the engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alert {
    /// Urgency.
    pub level: Level,
    /// The condition that raised it.
    pub kind: AlertKind,
    /// Short, stable headline; part of the de-duplication key.
    pub title: String,
    /// Details for a person (may change between repeats of the same condition).
    pub message: String,
    /// The task concerned, if any; part of the de-duplication key.
    pub task: Option<TaskKey>,
    /// Structured details (ordered, so payloads are deterministic).
    pub fields: BTreeMap<String, String>,
    /// When the engine observed the condition.
    pub at: UtcMillis,
}

/// Default threshold for [`AlertKind::ScheduleDelay`]: dispatches later than this alert.
pub const DEFAULT_SCHEDULE_DELAY_THRESHOLD: Duration = Duration::from_secs(30);
/// Default threshold for [`AlertKind::QueueBacklog`], in queued entries. The one definition
/// of this default: the engine's `scheduler.backlog_alert_threshold` defaults to it.
pub const DEFAULT_QUEUE_BACKLOG_THRESHOLD: u64 = 1000;

impl Alert {
    /// The alert with every URL in its title, message and fields masked (user info and
    /// query values): alerts quote errors, and errors quote the URLs they failed on, which
    /// may carry credentials. The manager applies it to every alert it takes in.
    pub fn redacted(mut self) -> Alert {
        use ax_scheduler_core::redact::mask_urls_in;
        self.title = mask_urls_in(&self.title);
        self.message = mask_urls_in(&self.message);
        for value in self.fields.values_mut() {
            *value = mask_urls_in(value);
        }
        self
    }

    /// A free-form alert; prefer the trigger constructors below where one fits.
    pub fn new(
        level: Level,
        kind: AlertKind,
        title: impl Into<String>,
        message: impl Into<String>,
        now: UtcMillis,
    ) -> Self {
        Alert {
            level,
            kind,
            title: title.into(),
            message: message.into(),
            task: None,
            fields: BTreeMap::new(),
            at: now,
        }
    }

    /// Sets the task the alert is about.
    pub fn with_task(mut self, task: TaskKey) -> Self {
        self.task = Some(task);
        self
    }

    /// Adds (or replaces) a structured field.
    pub fn with_field(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.fields.insert(key.into(), value.to_string());
        self
    }

    /// Overrides the level (e.g. to page on a failure of a critical task).
    pub fn with_level(mut self, level: Level) -> Self {
        self.level = level;
        self
    }

    /// Trigger: a task run failed (warn). `attempt` is 1-based.
    pub fn task_failed(
        namespace: impl Into<String>,
        id: impl Into<String>,
        attempt: u32,
        error: impl Into<String>,
        now: UtcMillis,
    ) -> Self {
        let (task, error) = (task_key(namespace, id), error.into());
        Alert::new(
            Level::Warn,
            AlertKind::TaskFailed,
            format!("Task failed: {task}"),
            format!("Attempt {attempt} failed: {error}"),
            now,
        )
        .with_task(task)
        .with_field("attempt", attempt)
    }

    /// Trigger: a task exhausted its retries and was dead-lettered (critical).
    pub fn task_dead_lettered(
        namespace: impl Into<String>,
        id: impl Into<String>,
        attempts: u32,
        error: impl Into<String>,
        now: UtcMillis,
    ) -> Self {
        let (task, error) = (task_key(namespace, id), error.into());
        Alert::new(
            Level::Critical,
            AlertKind::TaskDeadLettered,
            format!("Task dead-lettered: {task}"),
            format!("Gave up after {attempts} attempts; last error: {error}"),
            now,
        )
        .with_task(task)
        .with_field("attempts", attempts)
    }

    /// Trigger: `queue` holds `depth` entries, over `threshold` (critical).
    pub fn queue_backlog(
        queue: impl Into<String>,
        depth: u64,
        threshold: u64,
        now: UtcMillis,
    ) -> Self {
        let queue = queue.into();
        Alert::new(
            Level::Critical,
            AlertKind::QueueBacklog,
            format!("Queue backlog: {queue}"),
            format!("{depth} entries waiting, threshold {threshold}; workers are not keeping up"),
            now,
        )
        .with_field("queue", queue)
        .with_field("depth", depth)
        .with_field("threshold", threshold)
    }

    /// Trigger: executions wait in `queue` and no worker has taken from it for
    /// `idle` (`None`: no worker ever registered for it) (critical: they will never run).
    pub fn queue_unserved(
        queue: impl Into<String>,
        depth: u64,
        idle: Option<Duration>,
        now: UtcMillis,
    ) -> Self {
        let queue = queue.into();
        let why = match idle {
            Some(d) => format!("its last worker stopped {} s ago", d.as_secs()),
            None => "no worker was ever configured for it".to_owned(),
        };
        Alert::new(
            Level::Critical,
            AlertKind::QueueUnserved,
            format!("Queue unserved: {queue}"),
            format!(
                "{depth} execution(s) wait in queue {queue} and {why}: add {queue} to a worker's \
                 worker.queues, or move the tasks to a served queue"
            ),
            now,
        )
        .with_field("queue", queue)
        .with_field("depth", depth)
    }

    /// Trigger: leadership moved from `previous` to `current` (`None`: no leader) (warn; critical
    /// when nobody holds it).
    pub fn leader_changed(previous: Option<&str>, current: Option<&str>, now: UtcMillis) -> Self {
        let shown = |who: Option<&str>| who.unwrap_or("none").to_owned();
        let level = if current.is_some() {
            Level::Warn
        } else {
            Level::Critical
        };
        Alert::new(
            level,
            AlertKind::LeaderChanged,
            "Leader changed",
            format!("Leader is now {} (was {})", shown(current), shown(previous)),
            now,
        )
        .with_field("previous", shown(previous))
        .with_field("current", shown(current))
    }

    /// Trigger: the fire of `fire_at` was dispatched `lateness` late (warn). The engine raises it
    /// when `lateness` exceeds its threshold ([`DEFAULT_SCHEDULE_DELAY_THRESHOLD`] by default).
    pub fn schedule_delay(
        namespace: impl Into<String>,
        id: impl Into<String>,
        fire_at: UtcMillis,
        lateness: Duration,
        now: UtcMillis,
    ) -> Self {
        let task = task_key(namespace, id);
        Alert::new(
            Level::Warn,
            AlertKind::ScheduleDelay,
            format!("Schedule delay: {task}"),
            format!(
                "Fire of {fire_at} dispatched {:.1} s late",
                lateness.as_secs_f64()
            ),
            now,
        )
        .with_task(task)
        .with_field("fire_at", fire_at)
        .with_field("lateness_ms", lateness.as_millis())
    }

    /// Trigger: the misfire policy skipped `skipped` fires of a task (warn).
    pub fn misfire_skipped(
        namespace: impl Into<String>,
        id: impl Into<String>,
        skipped: u64,
        now: UtcMillis,
    ) -> Self {
        let task = task_key(namespace, id);
        Alert::new(
            Level::Warn,
            AlertKind::MisfireSkipped,
            format!("Fires skipped: {task}"),
            format!("Misfire policy skipped {skipped} missed fire(s)"),
            now,
        )
        .with_task(task)
        .with_field("skipped", skipped)
    }

    /// Trigger: the circuit breaker `circuit` opened after `failures` consecutive failures and
    /// rejects calls for `open_for` (critical).
    pub fn circuit_open(
        circuit: impl Into<String>,
        failures: u32,
        open_for: Duration,
        now: UtcMillis,
    ) -> Self {
        let circuit = circuit.into();
        Alert::new(
            Level::Critical,
            AlertKind::CircuitOpen,
            format!("Circuit open: {circuit}"),
            format!(
                "Opened after {failures} consecutive failures; calls rejected for {} s",
                open_for.as_secs()
            ),
            now,
        )
        .with_field("circuit", circuit)
        .with_field("failures", failures)
        .with_field("open_for_ms", open_for.as_millis())
    }

    /// Trigger: a queue's fence refuses this installation's leaders (fatal: nothing fires
    /// until an operator acts); `problem` says why and what to do.
    pub fn fence_conflict(problem: &str, now: UtcMillis) -> Self {
        Alert::new(
            Level::Fatal,
            AlertKind::FenceConflict,
            "Queue fence refuses this installation",
            problem,
            now,
        )
    }

    /// Trigger: fires of a task were not followed by a successful execution within
    /// `within` (critical: the task's own promise to its users broke). One alert per
    /// judgement, however many fires it counts; the reason is the earliest one's.
    pub fn deadline_missed(
        namespace: impl Into<String>,
        id: impl Into<String>,
        within: Duration,
        miss: &Miss,
        now: UtcMillis,
    ) -> Self {
        let task = task_key(namespace, id);
        let window = humantime::format_duration(within);
        let fires = if miss.missed == 1 {
            format!("the fire of {}", miss.first_fire)
        } else {
            format!(
                "{} fires from {} to {}",
                miss.missed, miss.first_fire, miss.last_fire
            )
        };
        Alert::new(
            Level::Critical,
            AlertKind::DeadlineMissed,
            format!("Deadline missed: {task}"),
            format!(
                "No execution succeeded within {window} of {fires} (deadline {}): {}",
                miss.deadline, miss.reason
            ),
            now,
        )
        .with_task(task)
        .with_field("fire_at", miss.first_fire)
        .with_field("missed", miss.missed)
        .with_field("within", window)
        .with_field("reason", miss.reason.as_str())
    }

    /// Trigger: Redis restarted under the leader (critical). Without persistence
    /// (`persistent` false or unknown) whatever was queued, running or waiting for a retry is
    /// gone; the leader has raised the fences again.
    pub fn redis_restarted(persistent: Option<bool>, now: UtcMillis) -> Self {
        let message = match persistent {
            Some(true) => "Redis restarted; it persists its data, so queued executions were \
                           reloaded. Fences raised again."
                .to_owned(),
            Some(false) => "Redis restarted WITHOUT persistence: every queued, running and \
                            delayed execution is lost (etcd still counts those fires as made). \
                            Fences raised again. Turn on appendonly."
                .to_owned(),
            None => "Redis restarted; whether it persists is unknown (CONFIG not allowed): \
                     queued executions may be lost. Fences raised again."
                .to_owned(),
        };
        Alert::new(
            Level::Critical,
            AlertKind::BackendRestarted,
            "Redis restarted",
            message,
            now,
        )
        .with_field("backend", "redis")
        .with_field(
            "persistent",
            persistent.map_or("unknown".to_owned(), |p| p.to_string()),
        )
    }

    /// Trigger: `backend` refuses the leader's writes, so due fires wait (critical);
    /// `waiting` fires are kept and retried, `for_how_long` since the first refusal.
    pub fn backend_unavailable(
        backend: &str,
        error: &str,
        waiting: usize,
        for_how_long: Duration,
        now: UtcMillis,
    ) -> Self {
        Alert::new(
            Level::Critical,
            AlertKind::BackendUnavailable,
            format!("{backend} refuses enqueues"),
            format!(
                "{waiting} due fire(s) wait; retrying for {} s so far: {error}",
                for_how_long.as_secs()
            ),
            now,
        )
        .with_field("backend", backend)
        .with_field("error", error)
        .with_field("waiting", waiting)
    }
}

impl Alert {
    /// Trigger: etcd refuses the leader's state writes because its database reached its space
    /// quota (the NOSPACE alarm; critical). Fires go on (they are sent to Redis); `waiting`
    /// task states are kept in memory and retried. The message says what frees the space.
    pub fn etcd_out_of_space(error: &str, waiting: usize, now: UtcMillis) -> Self {
        Alert::new(
            Level::Critical,
            AlertKind::BackendUnavailable,
            "etcd is out of space: it refuses task state writes",
            format!(
                "etcd's database reached its space quota and etcd raised the NOSPACE alarm; it \
                 refuses every write until space is freed and the alarm disarmed. Fires go on; \
                 {waiting} task state(s) wait in memory and are retried. Fix: compact etcd's \
                 history and defragment it (`etcdctl compact <revision>`, `etcdctl defrag`, or \
                 turn on `--auto-compaction-retention`), then `etcdctl alarm disarm`; or raise \
                 `--quota-backend-bytes` (and `etcd.quota_backend_bytes`). {error}"
            ),
            now,
        )
        .with_field("backend", "etcd")
        .with_field("cause", "nospace")
        .with_field("error", error)
        .with_field("waiting", waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_space_alert_names_the_cause_and_the_fix() {
        let a = Alert::etcd_out_of_space("database space exceeded", 7, UtcMillis(0));
        assert_eq!(a.level, Level::Critical);
        assert_eq!(a.kind, AlertKind::BackendUnavailable);
        for text in [
            "NOSPACE",
            "compact",
            "defrag",
            "alarm disarm",
            "quota-backend-bytes",
        ] {
            assert!(a.message.contains(text), "{text}: {}", a.message);
        }
        assert_eq!(a.fields["waiting"], "7");
    }

    #[test]
    fn levels_are_ordered_and_parse() {
        assert!(Level::Info < Level::Warn);
        assert!(Level::Warn < Level::Critical);
        assert!(Level::Critical < Level::Fatal);
        for level in [Level::Info, Level::Warn, Level::Critical, Level::Fatal] {
            assert_eq!(level.as_str().parse::<Level>().unwrap(), level);
            assert_eq!(
                serde_json::to_value(level).unwrap(),
                serde_json::json!(level.as_str())
            );
        }
        assert_eq!("WARNING".parse::<Level>().unwrap(), Level::Warn);
        assert!("loud".parse::<Level>().is_err());
    }

    #[test]
    fn kind_names_match_serde() {
        for kind in [
            AlertKind::TaskFailed,
            AlertKind::TaskDeadLettered,
            AlertKind::QueueBacklog,
            AlertKind::LeaderChanged,
            AlertKind::ScheduleDelay,
            AlertKind::MisfireSkipped,
            AlertKind::CircuitOpen,
            AlertKind::DeferredSummary,
            AlertKind::BackendUnavailable,
            AlertKind::BackendRestarted,
            AlertKind::FenceConflict,
            AlertKind::DeadlineMissed,
            AlertKind::Other,
        ] {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
        }
    }

    #[test]
    fn titles_do_not_change_between_attempts() {
        let now = UtcMillis(1_700_000_000_000);
        let a = Alert::task_failed("ns", "t", 1, "boom", now);
        let b = Alert::task_failed("ns", "t", 2, "bang", now);
        assert_eq!(a.title, b.title);
        assert_eq!(a.task, b.task);
        assert_ne!(a.message, b.message);
        assert_eq!(a.fields["attempt"], "1");
        assert_eq!(a.level, Level::Warn);
    }

    #[test]
    fn trigger_levels() {
        let now = UtcMillis(0);
        assert_eq!(
            Alert::task_dead_lettered("n", "t", 3, "e", now).level,
            Level::Critical
        );
        assert_eq!(
            Alert::queue_backlog("q", 20_000, 10_000, now).level,
            Level::Critical
        );
        assert_eq!(
            Alert::leader_changed(None, Some("a"), now).level,
            Level::Warn
        );
        assert_eq!(
            Alert::leader_changed(Some("a"), None, now).level,
            Level::Critical
        );
        let delay =
            Alert::schedule_delay("n", "t", UtcMillis(0), Duration::from_millis(31_500), now);
        assert_eq!(
            delay.message,
            "Fire of 1970-01-01T00:00:00.000Z dispatched 31.5 s late"
        );
        assert_eq!(delay.fields["lateness_ms"], "31500");
        assert_eq!(
            Alert::misfire_skipped("n", "t", 4, now).kind,
            AlertKind::MisfireSkipped
        );
        assert_eq!(
            Alert::circuit_open("redis", 5, Duration::from_secs(30), now).level,
            Level::Critical
        );
    }
}
