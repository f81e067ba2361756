//! The scheduler role: follow the registry, win authority (the leader key, or shards), and
//! fire the tasks it covers. This crate is the leader's I/O shell around the core's
//! [`Dispatcher`](ax_scheduler_core::Dispatcher): the core decides, this crate talks to
//! etcd and Redis and keeps time. A replica (`ax serve`) composes it from plain
//! [`LeaderSettings`] and [`LeaderDeps`]: the backends, an injected [`Clock`], a
//! [`RoleMetrics`] handle and an [`AuditLog`].
//!
//! | file | what it holds |
//! |---|---|
//! | `role.rs` | the role's loop: the catalog, the campaign or the shard ownership, a term per authority |
//! | `role/gates.rs` | what a replica checks before it seeks authority: Redis answers, its clock agrees with etcd's |
//! | `authority.rs` | what a term schedules under (leader key or shard owner key) and what it covers |
//! | `catalog.rs` | the registry as last seen, kept by every replica: what a takeover starts from |
//! | `feeds.rs` | run-now requests and paused namespaces, polled once per replica |
//! | `term/` | one term: takeover, the loop, the end (give up or loss); its tests on paused time against stand-ins |
//! | `backend.rs` | the term's seams to Redis and etcd ([`TermQueue`], [`TermStore`]) |
//! | `term/fire.rs` | the fire path: the enqueue I/O and the synchronous step that acts on its outcomes |
//! | `events.rs` | worker events into the dispatcher |
//! | `flusher.rs` | coalesced task states and consumed triggers to etcd, off the fire path |
//! | `clock.rs` | the injected clock, wall-clock deadlines, the clock check's seam |
//! | `metrics.rs` | the facts the role reports to the replica's metrics |
//! | `audit.rs` | the audit log's seam: ax's recorded changes, direct writes recorded |
//! | `direct_writes.rs` | spec changes written to etcd without ax, told from ax's own |
//! | `error.rs` | why a takeover failed |
//! | `supervise.rs` | the leader's loops after a panic: logged, counted, started again or stepped down (per loop) |
//! | `deps.rs` | what a term uses of the replica ([`LeaderDeps`] without the watch and the election) |
//!
//! With `scheduler.shards = 1` (the default) one replica leads and schedules everything; the
//! others stand by. With more, the task space is split into shards by a stable hash
//! ([`Placement`]), each owned by one replica at a time on its own etcd key, and every
//! replica schedules the shards it owns, each in a term of its own exactly as the one leader
//! would: its own dispatcher, fences, event stream and state writes.
//!
//! Losing the lease, for any reason, ends the term at once: no fire is enqueued after the
//! loss is known, and each enqueue first checks the authority's validity (a monotonic
//! deadline, so a process resumed after SIGSTOP stops before acting). A deposed owner that
//! still reaches Redis is refused by the fencing token in the enqueue script (per queue and
//! shard); a fire both owners dispatched is enqueued once (dedupe key).

use std::sync::Arc;
use std::time::Duration;

use ax_alerting::AlertSender;
use ax_election::Candidate;
use ax_registry::Registry;
use ax_scheduler_core::placement::Placement;
use ax_scheduler_core::queue_set::QueueSet;
use ax_scheduler_core::DispatcherConfig;
use tokio_util::task::TaskTracker;

pub mod audit;
mod authority;
pub mod backend;
mod catalog;
pub mod clock;
mod deps;
mod direct_writes;
mod error;
mod events;
mod feeds;
mod flusher;
pub mod metrics;
mod role;
pub mod supervise;
mod term;

pub use audit::AuditLog;
pub use backend::{TermQueue, TermStore};
pub use clock::{Clock, ClockProbe};
pub use error::Error;
pub use metrics::RoleMetrics;
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

/// Default [`LeaderSettings::redis_unreachable_limit`]: a leader cut from Redis gives its key
/// up after this, and a healthy replica leads after one election more.
pub const DEFAULT_REDIS_UNREACHABLE_LIMIT: Duration = Duration::from_secs(5);
/// How long after its fire a task still executing is in doubt, by default (see
/// [`LeaderSettings::repair_after`]): past any end on its way, and short enough that a lost
/// end is repaired within minutes.
pub const DEFAULT_REPAIR_AFTER: Duration = Duration::from_secs(60);
pub use ax_scheduler_core::time::DEFAULT_MAX_CLOCK_SKEW;

/// Settings of the scheduler role, from the `[scheduler]` and `[election]` configuration.
#[derive(Clone, Debug)]
pub struct LeaderSettings {
    /// This replica's id.
    pub instance_id: String,
    /// How tasks are spread over shards (one shard: one leader).
    pub placement: Placement,
    /// How long a shard may stay unowned before any replica takes it, whatever the map says.
    pub shard_orphan_after: Duration,
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
    /// How long a leader (or shard owner) that cannot reach Redis keeps its key before it
    /// gives it up, so that a replica that can reach Redis leads. Default
    /// [`DEFAULT_REDIS_UNREACHABLE_LIMIT`], well under the lease's TTL.
    pub redis_unreachable_limit: Duration,
    /// Late enqueues beyond this raise a schedule-delay alert.
    pub delay_alert_threshold: Duration,
    /// The largest clock offset from etcd this replica leads with.
    pub max_clock_skew: Duration,
    /// How long after its fire a task still executing is in doubt: its end is looked for in
    /// the history and its work in the queue, every half of this, and a task with neither on
    /// two checks in a row is repaired as lost. Default [`DEFAULT_REPAIR_AFTER`].
    pub repair_after: Duration,
}

/// What the role needs from the rest of the replica; cloned into each term's task.
#[derive(Clone)]
pub struct LeaderDeps {
    /// The etcd registry, whose watch the role follows.
    pub registry: Registry,
    /// Task states, run-now requests and paused namespaces: the registry, in a replica.
    pub store: Arc<dyn TermStore>,
    /// The Redis queue.
    pub queue: Arc<dyn TermQueue>,
    /// The election candidate.
    pub candidate: Candidate,
    /// The wall clock.
    pub clock: Arc<dyn Clock>,
    /// The check of this host's clock against etcd's, before the role schedules; `None`
    /// schedules without it.
    pub clock_check: Option<Arc<dyn ClockProbe>>,
    /// Where the role reports its metrics.
    pub metrics: Arc<dyn RoleMetrics>,
    /// Alerts, when channels are configured.
    pub alerts: Option<AlertSender>,
    /// The tracker the role's helper tasks run on.
    pub tracker: TaskTracker,
    /// The audit log, where the leader records spec changes written to etcd without ax.
    pub audit: Arc<dyn AuditLog>,
    /// Where the role's catalog publishes the names of the queues the tasks use (the
    /// replica's API reads them there).
    pub queue_names: QueueSet,
}
