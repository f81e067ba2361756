//! The scheduler role: follow the registry, campaign, and while leading, fire every task.
//!
//! | file | what it holds |
//! |---|---|
//! | `role.rs` | the role's state machine: `Following` (catalog warm, campaign running) and `Leading` |
//! | `catalog.rs` | the registry as last seen, kept by every replica: what a takeover starts from |
//! | `term.rs` | one leadership term: takeover, the loop, the end (resign or loss) |
//! | `fire.rs` | the fire path: the enqueue I/O and the synchronous step that acts on its outcomes |
//! | `events.rs` | worker events into the dispatcher |
//! | `flusher.rs` | coalesced task states and consumed triggers to etcd, off the fire path |
//! | `triggers.rs` | run-now requests read from etcd |
//! | `clock.rs` | wall-clock deadlines and the clock check against etcd |
//!
//! Losing the lease, for any reason, ends the term at once: no fire is enqueued after the
//! loss is known, and each enqueue first checks `Leadership::is_valid` (a monotonic
//! deadline, so a process resumed after SIGSTOP stops before acting). A deposed leader that
//! still reaches Redis is refused by the fencing token in the enqueue script; a fire both
//! leaders dispatched is enqueued once (dedupe key).

use std::sync::Arc;
use std::time::Duration;

use ax_alerting::AlertSender;
use ax_election::Candidate;
use ax_queue::Queue;
use ax_registry::Registry;
use ax_scheduler_core::DispatcherConfig;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;

mod catalog;
pub mod clock;
mod direct_writes;
mod events;
mod fire;
mod flusher;
mod namespaces;
mod role;
mod term;
mod triggers;

pub use role::run;

/// How often the leader reads worker events, by default.
pub const DEFAULT_EVENTS_INTERVAL: Duration = Duration::from_millis(100);
/// How often the leader hands changed task states to the flusher, by default.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// How often the leader reads run-now requests, by default (well within the promise that a
/// trigger runs within a second).
pub const DEFAULT_TRIGGER_INTERVAL: Duration = Duration::from_millis(250);
/// How long the leader keeps retrying enqueues that Redis refuses before it steps down, by
/// default.
pub const DEFAULT_ENQUEUE_STALL_LIMIT: Duration = Duration::from_secs(30);
/// The largest clock offset from etcd a replica leads with, by default.
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(2);

/// Settings of the scheduler role, from the `[scheduler]` and `[election]` configuration.
#[derive(Clone, Debug)]
pub struct LeaderSettings {
    /// This replica's id.
    pub instance_id: String,
    /// The dispatcher's settings (tick, catch-up window, rate limit).
    pub dispatcher: DispatcherConfig,
    /// How often worker events are read from Redis.
    pub events_interval: Duration,
    /// How often coalesced states are written to etcd.
    pub flush_interval: Duration,
    /// How often `{prefix}/triggers/` is read.
    pub trigger_interval: Duration,
    /// How long refused enqueues are retried before the leader steps down.
    pub enqueue_stall_limit: Duration,
    /// Late enqueues beyond this raise a schedule-delay alert.
    pub delay_alert_threshold: Duration,
    /// The largest clock offset from etcd this replica leads with.
    pub max_clock_skew: Duration,
    /// The check of this host's clock against etcd's (HTTP `Date` of `/version`); `None`
    /// only in tests.
    pub clock_check: Option<clock::ClockCheck>,
}

/// What the role needs from the rest of the replica.
pub struct LeaderDeps {
    /// The etcd registry.
    pub registry: Registry,
    /// The Redis queue.
    pub queue: Queue,
    /// The election candidate.
    pub candidate: Candidate,
    /// Metrics of this replica.
    pub metrics: Arc<Metrics>,
    /// Alerts, when channels are configured.
    pub alerts: Option<AlertSender>,
    /// The tracker the role's helper tasks run on.
    pub tracker: TaskTracker,
    /// The audit log, where the leader records spec changes written to etcd without ax.
    pub audit: crate::audit_store::AuditStore,
}
