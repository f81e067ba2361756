//! The term's repair of task states in doubt: executing for long, with no end coming.
//!
//! Every half of `scheduler.repair_after` the term takes the tasks whose state has said
//! `RUNNING` or `RETRYING` since a fire at least `repair_after` old (core
//! [`Dispatcher::executing_since`](ax_scheduler_core::Dispatcher::executing_since)). It reads
//! their ends from the execution history first, as a takeover does; those still without one
//! it looks for in their queues (a message, a retry, an awaiting execution or an unrelayed
//! end record, [`ax_queue::Queue::tasks_with_work`]). A task with no work left on two checks
//! in a row is ended as lost, so an end on its way (settled, relayed a moment later) is
//! never taken for missing: a state is repaired within about twice `repair_after` of its
//! fire. The checks cost one history read per task in doubt and one pass per queue, and only
//! while some state is in doubt.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_scheduler_core::{InDoubt, TaskKey, UtcMillis};
use tracing::{info, warn};

use super::Term;
use crate::deps::TermDeps;
use crate::events;
use crate::metrics::Backend;

/// The tasks found with no work left at the last check, with the fire they were executing.
pub(super) type NoWork = HashMap<Arc<TaskKey>, UtcMillis>;

impl Term {
    /// One check of the states in doubt (see the module notes).
    pub(super) async fn repair_states(
        &mut self,
        deps: &TermDeps,
        repair_after: std::time::Duration,
    ) {
        let now = deps.clock.now();
        let fired_by = UtcMillis(now.0.saturating_sub(millis(repair_after)));
        let doubt = self.dispatcher.executing_since(fired_by);
        if doubt.is_empty() {
            self.no_work.clear();
            return;
        }
        let fires: Vec<(Arc<TaskKey>, UtcMillis)> = doubt
            .iter()
            .map(|d| (Arc::clone(&d.key), d.fire_at))
            .collect();
        let from_history = events::reconcile(deps, &mut self.dispatcher, &fires).await;
        if from_history > 0 {
            info!(
                repaired = from_history,
                "task states in doubt corrected from the execution history"
            );
            deps.metrics
                .state_repairs("history", u64::try_from(from_history).unwrap_or(u64::MAX));
        }
        let still: Vec<InDoubt> = doubt
            .into_iter()
            .filter(|d| {
                self.dispatcher
                    .state(&d.key)
                    .is_some_and(|s| s.status.is_executing() && s.last_fire_at == Some(d.fire_at))
            })
            .collect();
        let Some(idle) = without_work(deps, &still).await else {
            return;
        };
        let mut lost = 0u64;
        let mut next = NoWork::new();
        for d in still.into_iter().filter(|d| idle.contains(&d.key)) {
            if self.no_work.get(&d.key) == Some(&d.fire_at) {
                if self.dispatcher.mark_lost(&d.key, d.fire_at, now) {
                    warn!(task_id = %d.key, fire_at = %d.fire_at, "execution lost: no end recorded and no work left in its queue; its state is repaired as failed");
                    lost += 1;
                }
            } else {
                next.insert(d.key, d.fire_at);
            }
        }
        self.no_work = next;
        if lost > 0 {
            deps.metrics.state_repairs("lost", lost);
        }
    }
}

/// Of the tasks `doubt` names, those whose queues hold no work of theirs; `None` when a
/// queue could not be asked (the check is skipped, not guessed).
async fn without_work(
    deps: &TermDeps,
    doubt: &[InDoubt],
) -> Option<std::collections::HashSet<Arc<TaskKey>>> {
    let mut by_queue: BTreeMap<&str, Vec<&InDoubt>> = BTreeMap::new();
    for d in doubt {
        by_queue.entry(&d.queue).or_default().push(d);
    }
    let mut idle = std::collections::HashSet::new();
    for (queue, tasks) in by_queue {
        let asked: Vec<(&str, &str)> = tasks
            .iter()
            .map(|d| (&*d.key.namespace, &*d.key.id))
            .collect();
        let live = match deps.queue.tasks_with_work(queue, &asked).await {
            Ok(live) => live,
            Err(e) => {
                deps.metrics.backend_error(Backend::Redis);
                warn!(queue, error = %e, "cannot look for the work of task states in doubt");
                return None;
            }
        };
        for d in tasks {
            if !live.contains(&(d.key.namespace.to_string(), d.key.id.to_string())) {
                idle.insert(Arc::clone(&d.key));
            }
        }
    }
    Some(idle)
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
