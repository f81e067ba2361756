//! A task's identity. Every map of the dispatcher is keyed by it, shared as an `Arc` so a
//! task's timer, ready and pending entries cost a pointer each rather than two strings.
//!
//! It is the one key type of the workspace: the API, the CLI and alerts name a task by it
//! too. Its serde shape, `{"namespace": .., "id": ..}`, is what the HTTP API and alert
//! payloads show; nothing stored in etcd or Redis serializes it (they store the two fields of
//! their own records), so that shape is free to be the edge's.
//!
//! It is a module of its own, below the dispatcher, because the modules the dispatcher builds
//! on (fan-out, workflows, placement) name tasks too; the dispatcher re-exports it.
//!
//! The tables keyed by it ([`KeyMap`], [`KeySet`]) hash with foldhash rather than the
//! standard SipHash: a task's key is hashed several times on every fire, and SipHash was a
//! tenth of the fire path. Task ids come from users, so the hash must not be one an
//! adversary can predict to make keys collide: foldhash's [`RandomState`](TableHasher) is
//! seeded at random per process and per table, as the standard one is.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A task's identity: its namespace and id (the last two segments of its etcd key).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

/// The hasher of the scheduling tables: randomly seeded (see the module notes).
pub type TableHasher = foldhash::fast::RandomState;

/// A table by task key.
pub type KeyMap<V> = HashMap<Arc<TaskKey>, V, TableHasher>;

/// A set of task keys.
pub type KeySet = HashSet<Arc<TaskKey>, TableHasher>;

/// `namespace/id`, as logs, alert titles and the CLI write a task.
impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_namespace_and_id() {
        let key = TaskKey::new("ops", "nightly");
        let json = serde_json::to_string(&key).expect("serializes");
        assert_eq!(json, r#"{"namespace":"ops","id":"nightly"}"#);
        let back: TaskKey = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, key);
        assert_eq!(key.to_string(), "ops/nightly");
    }
}
