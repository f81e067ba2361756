//! Repairing a state whose execution's end will never come.
//!
//! A task's state says `RUNNING` (or `RETRYING`) from its fire until its execution's end
//! arrives. Almost always the end does arrive (recorded with the settle, relayed, read), but
//! an end written after its settle by a process that died, or an execution a Redis without
//! persistence lost, leaves the state saying so for good; for a one-shot nothing else ever
//! corrects it. The shell asks for the tasks that have been executing since long before now
//! ([`Dispatcher::executing_since`]), looks for their ends in the history and for their work
//! in the queue, and ends those with neither as lost ([`Dispatcher::mark_lost`]): a failed,
//! final attempt whose error says what happened, so the state, the failure alert and the
//! breaker all show it. Fanned-out tasks are left out: each piece's end counts in its fire's
//! progress, which a made-up end cannot stand for.

use std::sync::Arc;

use crate::execution::{AttemptEnd, AttemptOutcome, ExecutionEvent};
use crate::execution_id::ExecutionId;
use crate::key::TaskKey;
use crate::time::UtcMillis;

use super::Dispatcher;

/// The error of an execution ended as lost.
pub const LOST_END_ERROR: &str = "execution lost: its end was never recorded and the queue \
     no longer holds it (a Redis that lost data, or an end written by a process that died); \
     the task's state was repaired as failed";

/// A task whose state has said it is executing for long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InDoubt {
    /// The task.
    pub key: Arc<TaskKey>,
    /// The fire its state is executing.
    pub fire_at: UtcMillis,
    /// The task's queue.
    pub queue: Arc<str>,
}

impl Dispatcher {
    /// The tasks executing (`RUNNING`, `RETRYING`) for a fire at or before `fired_by`, fanned-out
    /// tasks aside.
    pub fn executing_since(&self, fired_by: UtcMillis) -> Vec<InDoubt> {
        self.tasks
            .values()
            .filter(|t| t.state.status.is_executing() && t.spec.fanout.is_none())
            .filter_map(|t| {
                let fire_at = t.state.last_fire_at.filter(|f| *f <= fired_by)?;
                Some(InDoubt {
                    key: Arc::clone(&t.key),
                    fire_at,
                    queue: t.spec.queue.clone(),
                })
            })
            .collect()
    }

    /// Ends `key`'s execution of the fire at `fire_at` as lost (see the module notes), if
    /// its state still says it is executing that fire. True when it did.
    pub fn mark_lost(&mut self, key: &TaskKey, fire_at: UtcMillis, now: UtcMillis) -> bool {
        let executing = self.tasks.get(key).is_some_and(|t| {
            t.state.status.is_executing() && t.state.last_fire_at == Some(fire_at)
        });
        if !executing {
            return false;
        }
        let end = AttemptEnd::new(AttemptOutcome::Failed, Some(LOST_END_ERROR.to_owned()));
        let event = ExecutionEvent::Finished { at: now, end };
        // No real execution id is known: one made of the fire instant, unique per fire of
        // the task, so a second repair of a later fire is not taken for this one.
        let made_up = ExecutionId::from_u128(u128::from(fire_at.0.unsigned_abs()));
        self.on_execution(key, made_up, 0, &event, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::TaskStatus;
    use crate::task::TaskSpec;
    use crate::DispatcherConfig;

    const T0: i64 = 1_800_000_000_000;

    fn at(ms: i64) -> UtcMillis {
        UtcMillis(T0 + ms)
    }

    fn dispatcher_with(ids: &[(&str, &str)]) -> Dispatcher {
        let mut d = Dispatcher::new(DispatcherConfig::default(), at(0));
        for (id, schedule) in ids {
            let json = format!(r#"{{"handler":"log","schedule":{schedule}}}"#);
            let spec = TaskSpec::from_json(json.as_bytes(), "default", id).unwrap();
            d.upsert(TaskKey::new("default", *id), spec, 1, None, at(0));
        }
        d
    }

    fn status(d: &Dispatcher, id: &str) -> TaskStatus {
        d.state(&TaskKey::new("default", id)).unwrap().status
    }

    #[test]
    fn a_one_shot_executing_for_long_is_in_doubt_and_is_repaired_as_failed_once() {
        let fire = at(1000);
        let mut d = dispatcher_with(&[("one", &format!(r#"{{"at":"{}"}}"#, fire.to_rfc3339()))]);
        assert_eq!(d.poll(at(1000)).len(), 1);
        assert_eq!(status(&d, "one"), TaskStatus::Running);
        // Not in doubt while its fire is recent.
        assert!(d.executing_since(at(500)).is_empty());
        let doubt = d.executing_since(at(60_000));
        assert_eq!(doubt.len(), 1);
        assert_eq!(doubt[0].fire_at, fire);
        assert_eq!(&*doubt[0].queue, "default");

        // A repair for another fire does nothing.
        let key = TaskKey::new("default", "one");
        assert!(!d.mark_lost(&key, at(999), at(70_000)));
        assert!(d.mark_lost(&key, fire, at(70_000)));
        let state = d.state(&key).unwrap();
        assert_eq!(state.status, TaskStatus::Failed);
        assert_eq!(state.failure_count, 1);
        assert_eq!(state.last_error.as_deref(), Some(LOST_END_ERROR));
        assert!(d
            .take_notices()
            .iter()
            .any(|n| matches!(n, crate::Notice::AttemptFailed { .. })));
        // Repaired once: no longer in doubt, and a second repair changes nothing.
        assert!(d.executing_since(at(60_000)).is_empty());
        assert!(!d.mark_lost(&key, fire, at(71_000)));
        assert_eq!(d.state(&key).unwrap().failure_count, 1);
    }

    #[test]
    fn the_real_end_arriving_first_leaves_nothing_to_repair() {
        let fire = at(1000);
        let mut d = dispatcher_with(&[("one", &format!(r#"{{"at":"{}"}}"#, fire.to_rfc3339()))]);
        d.poll(at(1000));
        let key = TaskKey::new("default", "one");
        let end = ExecutionEvent::Finished {
            at: at(1500),
            end: AttemptEnd::succeeded(),
        };
        d.on_execution(&key, ExecutionId::from_u128(7), 0, &end, at(1500));
        assert!(d.executing_since(at(60_000)).is_empty());
        assert!(!d.mark_lost(&key, fire, at(70_000)));
        assert_eq!(status(&d, "one"), TaskStatus::Success);
    }
}
