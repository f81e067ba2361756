//! Every key of the etcd layout, built from the prefix in one place.
//!
//! The prefix is normalized (a trailing `/` dropped), and task keys are parsed strictly:
//! exactly `{prefix}/tasks/{namespace}/{id}`. A key with extra or missing segments is not
//! silently skipped, because a user who wrote it expects a task; the watch reports it as
//! invalid with the reason from [`Keys::parse_task_key`].

use ax_scheduler_core::ExecutionId;

/// The layout under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

/// A task key that does not have the `{prefix}/tasks/{namespace}/{id}` shape, with the best
/// guess at its namespace and id (for reporting).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadTaskKey {
    /// The segment after `tasks/`, or empty.
    pub namespace: String,
    /// The rest after the namespace, or empty.
    pub id: String,
    /// What is wrong, for the person who wrote the key.
    pub reason: String,
}

impl Keys {
    /// The layout under `prefix` (`/scheduler` by default).
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// The normalized prefix (no trailing `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `{prefix}/tasks/`: the range of all task specs.
    pub fn tasks_prefix(&self) -> String {
        format!("{}/tasks/", self.prefix)
    }

    /// `{prefix}/tasks/{namespace}/`: the range of one namespace's specs.
    pub fn namespace_prefix(&self, namespace: &str) -> String {
        format!("{}/tasks/{namespace}/", self.prefix)
    }

    /// `{prefix}/tasks/{namespace}/{id}`: a task spec.
    pub fn task(&self, namespace: &str, id: &str) -> String {
        format!("{}/tasks/{namespace}/{id}", self.prefix)
    }

    /// `{prefix}/state/`: the range of all state records.
    pub fn states_prefix(&self) -> String {
        format!("{}/state/", self.prefix)
    }

    /// `{prefix}/state/{namespace}/`: one namespace's state records.
    pub fn namespace_states_prefix(&self, namespace: &str) -> String {
        format!("{}/state/{namespace}/", self.prefix)
    }

    /// `{prefix}/state/{namespace}/{id}`: a task's runtime state.
    pub fn state(&self, namespace: &str, id: &str) -> String {
        format!("{}/state/{namespace}/{id}", self.prefix)
    }

    /// `{prefix}/finals/`: the finals ledger, one-shots' final states many to a key (see
    /// [`ax_scheduler_core::finals`]).
    pub fn finals_prefix(&self) -> String {
        format!("{}/finals/", self.prefix)
    }

    /// `{prefix}/finals/{bucket}/`: the ledger's sheets of one bucket (two hex digits).
    pub fn finals_bucket(&self, bucket: u32) -> String {
        format!("{}/finals/{bucket:02x}/", self.prefix)
    }

    /// `{prefix}/finals/{bucket}/{token}-{seq}`: one sheet, named by the writer's fencing
    /// token and its own count, so no two writers (nor two writes of one) share a name.
    pub fn finals_sheet(&self, bucket: u32, token: i64, seq: u64) -> String {
        format!("{}/finals/{bucket:02x}/{token:016x}-{seq:08x}", self.prefix)
    }

    /// `{prefix}/leader`: the leader record ([`ax_scheduler_core::etcd_keys::leader`]).
    pub fn leader(&self) -> String {
        ax_scheduler_core::etcd_keys::leader(&self.prefix)
    }

    /// `{prefix}/shards/owners/{shard}`: a shard's owner record
    /// ([`ax_scheduler_core::etcd_keys::shard_owner`]).
    pub fn shard_owner(&self, shard: u32) -> String {
        ax_scheduler_core::etcd_keys::shard_owner(&self.prefix, shard)
    }

    /// `{prefix}/locks/{namespace}/{id}`: a task's lock (the lock name is
    /// `{namespace}/{id}`, so ids in different namespaces do not collide).
    pub fn lock(&self, namespace: &str, id: &str) -> String {
        format!("{}/locks/{namespace}/{id}", self.prefix)
    }

    /// `{prefix}/instances/{instance_id}`: a live replica's record.
    pub fn instance(&self, instance_id: &str) -> String {
        format!("{}/instances/{instance_id}", self.prefix)
    }

    /// `{prefix}/instances/`: the range of instance records.
    pub fn instances_prefix(&self) -> String {
        format!("{}/instances/", self.prefix)
    }

    /// `{prefix}/paused/`: the range of paused namespaces.
    pub fn paused_prefix(&self) -> String {
        format!("{}/paused/", self.prefix)
    }

    /// `{prefix}/paused/{namespace}`: a namespace whose tasks do not fire while the key
    /// exists; its value says who paused it and when.
    pub fn paused_namespace(&self, namespace: &str) -> String {
        format!("{}/paused/{namespace}", self.prefix)
    }

    /// `{prefix}/triggers/`: the range of pending run-now requests.
    pub fn triggers_prefix(&self) -> String {
        format!("{}/triggers/", self.prefix)
    }

    /// `{prefix}/triggers/{namespace}/{id}/{execution_id}`: one run-now request, written by
    /// the CLI or the API and deleted by the leader once it has enqueued the execution.
    pub fn trigger(&self, namespace: &str, id: &str, execution_id: ExecutionId) -> String {
        format!("{}/triggers/{namespace}/{id}/{execution_id}", self.prefix)
    }

    /// `{prefix}/triggers/{namespace}/{id}/`: every run-now request of one task.
    pub fn task_triggers_prefix(&self, namespace: &str, id: &str) -> String {
        format!("{}/triggers/{namespace}/{id}/", self.prefix)
    }

    /// Splits a key under [`Keys::triggers_prefix`] into `(namespace, id, execution_id)`;
    /// `None` when it does not have exactly those three segments, the last an execution id.
    pub fn parse_trigger_key(&self, key: &str) -> Option<(String, String, ExecutionId)> {
        let rest = key.strip_prefix(&self.triggers_prefix())?;
        let mut parts = rest.split('/');
        let (ns, id, exec) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || ns.is_empty() || id.is_empty() {
            return None;
        }
        Some((ns.to_string(), id.to_string(), exec.parse().ok()?))
    }

    /// Splits a key under [`Keys::tasks_prefix`] into `(namespace, id)`.
    pub fn parse_task_key(&self, key: &str) -> Result<(String, String), BadTaskKey> {
        let tasks = self.tasks_prefix();
        let Some(rest) = key.strip_prefix(&tasks) else {
            return Err(BadTaskKey {
                namespace: String::new(),
                id: String::new(),
                reason: format!("key {key:?} is not under {tasks}"),
            });
        };
        let (namespace, id) = rest.split_once('/').unwrap_or(("", rest));
        let bad = |reason: String| BadTaskKey {
            namespace: namespace.to_string(),
            id: id.to_string(),
            reason,
        };
        if namespace.is_empty() || id.is_empty() {
            return Err(bad(format!(
                "key {key:?} must be {tasks}{{namespace}}/{{id}}: namespace or id is missing"
            )));
        }
        if id.contains('/') {
            return Err(bad(format!(
                "key {key:?} must be {tasks}{{namespace}}/{{id}}: it has extra segments after the id"
            )));
        }
        Ok((namespace.to_string(), id.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_parses_keys() {
        let k = Keys::new("/scheduler/");
        assert_eq!(
            k.task("default", "report"),
            "/scheduler/tasks/default/report"
        );
        assert_eq!(k.state("ns", "a"), "/scheduler/state/ns/a");
        assert_eq!(k.leader(), "/scheduler/leader");
        assert_eq!(k.lock("ns", "a"), "/scheduler/locks/ns/a");
        assert_eq!(k.instance("i1"), "/scheduler/instances/i1");
        assert_eq!(
            k.finals_sheet(10, 255, 3),
            "/scheduler/finals/0a/00000000000000ff-00000003"
        );
        assert!(k.finals_sheet(10, 255, 3).starts_with(&k.finals_bucket(10)));
        assert_eq!(
            k.parse_task_key("/scheduler/tasks/default/report"),
            Ok(("default".into(), "report".into()))
        );
        let extra = k.parse_task_key("/scheduler/tasks/a/b/c").unwrap_err();
        assert_eq!((extra.namespace.as_str(), extra.id.as_str()), ("a", "b/c"));
        assert!(extra.reason.contains("extra segments"));
        let short = k.parse_task_key("/scheduler/tasks/lonely").unwrap_err();
        assert_eq!(short.id, "lonely");
        assert!(k.parse_task_key("/scheduler/tasks/ns/").is_err());
        assert!(k.parse_task_key("/other/tasks/ns/x").is_err());
    }

    #[test]
    fn trigger_keys_round_trip() {
        let k = Keys::new("/scheduler");
        assert_eq!(k.triggers_prefix(), "/scheduler/triggers/");
        let exec: ExecutionId = "0190a0b0-0000-7000-8000-000000000000".parse().unwrap();
        let key = k.trigger("ops", "nightly", exec);
        assert_eq!(
            key,
            "/scheduler/triggers/ops/nightly/0190a0b0-0000-7000-8000-000000000000"
        );
        assert_eq!(
            k.parse_trigger_key(&key),
            Some(("ops".into(), "nightly".into(), exec))
        );
        assert_eq!(
            k.parse_trigger_key("/scheduler/triggers/ops/nightly/not-an-id"),
            None
        );
        assert_eq!(k.parse_trigger_key("/scheduler/triggers/ops/nightly"), None);
        assert_eq!(k.parse_trigger_key("/scheduler/triggers/a/b/c/d"), None);
        assert_eq!(k.parse_trigger_key("/scheduler/tasks/a/b/c"), None);
    }
}
