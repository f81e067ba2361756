//! A task's identity. Every map of the dispatcher is keyed by it, shared as an `Arc` so a
//! task's timer, ready and pending entries cost a pointer each rather than two strings.
//!
//! It is a module of its own, below the dispatcher, because the modules the dispatcher builds
//! on (fan-out, workflows, placement) name tasks too; the dispatcher re-exports it.

use std::fmt;
use std::sync::Arc;

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
