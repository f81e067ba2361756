//! What a term uses of the replica: the role's dependencies without the watch and the
//! election, which stay with the role.
//!
//! Kept apart from the term so that the modules a term runs (events, feeds, the flusher)
//! take their share of the replica without importing the term, and so a term is built, in
//! tests, from stand-ins alone.

use std::sync::Arc;

use ax_alerting::AlertSender;
use tokio_util::task::TaskTracker;

use crate::audit::AuditLog;
use crate::backend::{TermQueue, TermStore};
use crate::clock::{Clock, ClockProbe};
use crate::metrics::RoleMetrics;
use crate::LeaderDeps;

/// What a term uses of the replica: the role's dependencies without the watch and the
/// election, which stay with the role. So a term is built, in tests, from stand-ins alone.
#[derive(Clone)]
pub(crate) struct TermDeps {
    /// Task states, run-now requests and paused namespaces (etcd).
    pub(crate) store: Arc<dyn TermStore>,
    /// Enqueues, fences, worker events and the execution history (Redis).
    pub(crate) queue: Arc<dyn TermQueue>,
    /// The wall clock.
    pub(crate) clock: Arc<dyn Clock>,
    /// Where the term reports its metrics.
    pub(crate) metrics: Arc<dyn RoleMetrics>,
    /// Alerts, when channels are configured.
    pub(crate) alerts: Option<AlertSender>,
    /// The tracker the term's helper tasks run on.
    pub(crate) tracker: TaskTracker,
    /// The audit log, for spec changes written to etcd without ax.
    pub(crate) audit: Arc<dyn AuditLog>,
    /// The check of the clock against etcd's, which a leader repeats while it leads.
    pub(crate) clock_check: Option<Arc<dyn ClockProbe>>,
}

impl TermDeps {
    /// A term's share of the role's dependencies.
    pub(crate) fn of(deps: &LeaderDeps) -> TermDeps {
        TermDeps {
            store: Arc::clone(&deps.store),
            queue: Arc::clone(&deps.queue),
            clock: Arc::clone(&deps.clock),
            metrics: Arc::clone(&deps.metrics),
            alerts: deps.alerts.clone(),
            tracker: deps.tracker.clone(),
            audit: Arc::clone(&deps.audit),
            clock_check: deps.clock_check.clone(),
        }
    }
}
