//! The names of the queues the registered tasks use, kept as the registry changes.
//!
//! A replica with the scheduler role follows every spec change in its catalog; it counts the
//! tasks per queue there and publishes the set of names here whenever a queue appears or
//! loses its last task. The API reads the set from memory instead of reading every spec from
//! etcd (O(tasks): seconds at 200 000 tasks), and sees a queue another replica's put
//! introduced as soon as the watch delivers it. A set never published (a replica without the
//! scheduler role, or a catalog not yet synced) answers `None`, and the reader falls back to
//! reading the specs.
//!
//! [`QueueCounts`] is the counting side, [`QueueSet`] the shared, published side: a clone is
//! a handle on the same set.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

/// A set of queue names, shared once published.
pub type QueueNames = Arc<BTreeSet<Arc<str>>>;

/// The published set of queue names; cheap to clone, shared between the catalog that writes
/// it and the readers.
#[derive(Clone, Debug, Default)]
pub struct QueueSet {
    names: Arc<RwLock<Option<QueueNames>>>,
}

impl QueueSet {
    /// The names as last published, or `None` if nothing was published yet.
    pub fn names(&self) -> Option<QueueNames> {
        self.names
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the published names.
    pub fn publish(&self, names: BTreeSet<Arc<str>>) {
        *self
            .names
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(names));
    }
}

/// Tasks per queue name, kept as tasks come and go; tells when the set of names changed.
#[derive(Debug, Default)]
pub struct QueueCounts {
    counts: HashMap<Arc<str>, usize>,
}

impl QueueCounts {
    /// Counts one more task on `queue`; true when the queue is new to the set.
    pub fn add(&mut self, queue: &Arc<str>) -> bool {
        let count = self.counts.entry(Arc::clone(queue)).or_insert(0);
        *count += 1;
        *count == 1
    }

    /// Counts one task fewer on `queue`; true when that was its last task (the queue left
    /// the set). A queue not counted is left as it is.
    pub fn remove(&mut self, queue: &str) -> bool {
        let Some(count) = self.counts.get_mut(queue) else {
            return false;
        };
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.counts.remove(queue);
            return true;
        }
        false
    }

    /// The names of the queues with at least one task.
    pub fn names(&self) -> BTreeSet<Arc<str>> {
        self.counts.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_set_is_unknown_until_published_and_shared_by_its_clones() {
        let set = QueueSet::default();
        let reader = set.clone();
        assert!(reader.names().is_none());
        set.publish(BTreeSet::from([Arc::from("default")]));
        let names = reader.names().unwrap();
        assert_eq!(names.iter().map(|n| &**n).collect::<Vec<_>>(), ["default"]);
    }

    proptest! {
        /// Against a model that recounts every queue's tasks after each change: the names
        /// are those with a task, and `add`/`remove` say exactly when the set changed.
        #[test]
        fn counts_follow_a_model(ops in proptest::collection::vec((any::<bool>(), 0u8..4), 0..200)) {
            let mut counts = QueueCounts::default();
            let mut model: Vec<u8> = Vec::new();
            for (add, q) in ops {
                let name: Arc<str> = Arc::from(format!("q{q}"));
                let before: BTreeSet<u8> = model.iter().copied().collect();
                let changed = if add {
                    model.push(q);
                    counts.add(&name)
                } else {
                    if let Some(i) = model.iter().position(|m| *m == q) {
                        model.remove(i);
                    }
                    counts.remove(&name)
                };
                let after: BTreeSet<u8> = model.iter().copied().collect();
                prop_assert_eq!(changed, before != after);
                let expected: BTreeSet<Arc<str>> =
                    after.iter().map(|q| Arc::from(format!("q{q}"))).collect();
                prop_assert_eq!(counts.names(), expected);
            }
        }
    }
}
