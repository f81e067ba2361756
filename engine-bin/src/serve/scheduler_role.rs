//! How a replica plugs into the scheduler role ([`ax_scheduler`]): its metrics and its audit
//! log behind the role's seams.
//!
//! The role states facts; this module turns them into this replica's metric series and
//! audit records, so the role's crate knows neither Prometheus nor the audit log's layout.

use ax_scheduler::audit::{AuditFuture, AuditLog, Observed, RecordedChange};
use ax_scheduler::metrics::{Backend, RoleMetrics};
use ax_scheduler_core::UtcMillis;

use crate::http::metrics::Metrics;
use ax_control::audit::{AuditQuery, AuditRecord, VIA_ETCD};
use ax_control::backend::AuditStore;
use ax_control::clock_check::ClockCheck;

fn gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

impl RoleMetrics for Metrics {
    fn backend_error(&self, backend: Backend) {
        Metrics::backend_error(self, backend.label());
    }

    fn loop_panicked(&self, name: &str) {
        Metrics::loop_panicked(self, name);
    }

    fn scheduled(&self, queue: &str) {
        self.record_scheduled(queue);
    }

    fn set_leader(&self, leading: bool) {
        Metrics::set_leader(self, leading);
    }

    fn set_shards_owned(&self, owned: usize) {
        Metrics::set_shards_owned(self, owned);
    }

    fn set_invalid_specs(&self, count: usize) {
        self.scheduler.invalid_specs.set(gauge(count));
    }

    fn set_paused_tasks(&self, count: usize) {
        self.scheduler.tasks_paused.set(gauge(count));
    }

    fn set_paused_namespaces(&self, count: usize) {
        self.scheduler.namespaces_paused.set(gauge(count));
    }

    fn throttled_tasks_changed(&self, delta: i64) {
        self.scheduler.tasks_throttled.add(delta);
    }

    fn set_undecodable_states(&self, count: usize) {
        self.scheduler.undecodable_states.set(gauge(count));
    }

    fn set_unserved_queues(&self, count: usize) {
        self.scheduler.unserved_queues.set(gauge(count));
    }

    fn deadline_misses(&self, reason: &str, missed: u64) {
        self.record_deadline_misses(reason, missed);
    }

    fn stepped_down(&self, reason: &str) {
        self.scheduler
            .leader_step_downs_total
            .with_label_values(&[reason])
            .inc();
    }

    fn state_repairs(&self, how: &str, count: u64) {
        self.scheduler
            .state_repairs_total
            .with_label_values(&[how])
            .inc_by(count);
    }
}

/// Records read per page of the audit log.
const PAGE: usize = 1000;

/// The change ax made that `record` is, if it is one: a `task.*` action through the API or
/// the CLI. A record of a direct write is not ax's, so it accounts for no later change.
fn recorded_change(record: AuditRecord) -> Option<RecordedChange> {
    (record.via != VIA_ETCD && record.action.starts_with("task.")).then_some(RecordedChange {
        at: record.at,
        target: record.target,
    })
}

/// The audit log as the leader reads it: the changes ax made, to tell them from direct writes.
pub struct AuditChanges(pub AuditStore);

impl AuditLog for AuditChanges {
    fn ax_changes_since(
        &self,
        since: UtcMillis,
        limit: usize,
    ) -> AuditFuture<'_, Vec<RecordedChange>> {
        Box::pin(async move {
            let mut changes = Vec::new();
            let mut query = AuditQuery {
                since: Some(since),
                limit: Some(PAGE),
                ..AuditQuery::default()
            };
            for _ in 0..limit.div_ceil(PAGE) {
                let page = self.0.page(&query).await?;
                changes.extend(page.items.into_iter().filter_map(recorded_change));
                match page.continue_token {
                    Some(token) => query.continue_token = Some(token),
                    None => break,
                }
            }
            Ok(changes)
        })
    }

    fn record_direct(&self, changes: &[Observed]) -> AuditFuture<'_, ()> {
        let record = direct_record(changes);
        Box::pin(async move {
            match record {
                Some(record) => Ok(self.0.write(&record).await?),
                None => Ok(()),
            }
        })
    }
}

/// The one record of `changes` written to etcd without ax (all writes or all deletes): a
/// single change names its task as the target, as any change does; a burst is "<n> tasks"
/// with the tasks in `detail.tasks`, oldest first, at the instant the first was seen.
fn direct_record(changes: &[Observed]) -> Option<AuditRecord> {
    let first = changes.first()?;
    let (target, detail) = match changes {
        [one] => (one.target.clone(), None),
        many => (
            format!("{} tasks", many.len()),
            Some(serde_json::json!({
                "tasks": many.iter().map(|c| c.target.as_str()).collect::<Vec<_>>()
            })),
        ),
    };
    Some(AuditRecord {
        at: first.seen_at,
        actor: VIA_ETCD.to_owned(),
        via: VIA_ETCD.to_owned(),
        action: if first.deleted {
            "task.delete"
        } else {
            "task.put"
        }
        .to_owned(),
        target,
        detail,
        revision: None,
    })
}

/// This host's clock against etcd's, as the leader's clock probe.
pub struct EtcdClock(pub ClockCheck);

impl ax_scheduler::clock::ClockProbe for EtcdClock {
    fn skew<'a>(
        &'a self,
        clock: &'a dyn ax_scheduler::Clock,
    ) -> ax_scheduler::clock::SkewFuture<'a> {
        Box::pin(async move {
            self.0
                .skew_of(&|| clock.now())
                .await
                .map_err(|e| e.to_string().into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(via: &str, action: &str) -> AuditRecord {
        AuditRecord {
            at: UtcMillis(99_000),
            actor: "ops".into(),
            via: via.into(),
            action: action.into(),
            target: "ns/a".into(),
            detail: None,
            revision: None,
        }
    }

    #[test]
    fn the_roles_backends_are_the_replicas_labels() {
        assert_eq!(Backend::Etcd.label(), crate::http::metrics::BACKEND_ETCD);
        assert_eq!(Backend::Redis.label(), crate::http::metrics::BACKEND_REDIS);
    }

    fn observed(target: &str, at: i64) -> Observed {
        Observed {
            target: target.into(),
            deleted: false,
            seen_at: UtcMillis(at),
        }
    }

    #[test]
    fn a_burst_of_direct_writes_is_one_record_naming_every_task() {
        assert_eq!(direct_record(&[]), None);
        let one = direct_record(&[observed("ns/a", 5)]).unwrap();
        assert_eq!(
            (one.actor.as_str(), one.action.as_str(), one.target.as_str()),
            (VIA_ETCD, "task.put", "ns/a")
        );
        assert_eq!(one.detail, None);
        let burst = direct_record(&[observed("ns/a", 5), observed("ns/b", 9)]).unwrap();
        assert_eq!((burst.at, burst.target.as_str()), (UtcMillis(5), "2 tasks"));
        assert_eq!(
            burst.detail,
            Some(serde_json::json!({ "tasks": ["ns/a", "ns/b"] }))
        );
        assert_eq!(burst.via, VIA_ETCD);
    }

    #[test]
    fn a_direct_record_does_not_account_for_a_later_change() {
        assert_eq!(recorded_change(record(VIA_ETCD, "task.put")), None);
        assert_eq!(recorded_change(record("api", "dlq.purge")), None);
        assert_eq!(
            recorded_change(record("api", "task.pause")),
            Some(RecordedChange {
                at: UtcMillis(99_000),
                target: "ns/a".into()
            })
        );
    }
}
