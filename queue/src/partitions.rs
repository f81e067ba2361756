//! Queue partitions: one logical queue spread over several physical queues.
//!
//! Every key of a queue shares one hash tag, so on a Redis Cluster one queue lives on one
//! primary. A queue given partitions ([`crate::QueueConfig::partitions`]) is instead `N`
//! physical queues named `NAME#pP` ([`partition_name`]), each with a hash tag of its own, so
//! they land on different slots while every script still touches one slot. User queue names
//! cannot hold [`PARTITION_SEPARATOR`], so a physical name never meets a user's.
//!
//! A message goes to the partition of a stable hash ([`ax_scheduler_core::placement::bucket_of`])
//! of its concurrency key when it has one (so a limit shared by several tasks is enforced in
//! one place), else of `namespace/id` (so a task's fires, their dedupe marks and its overlap
//! marker stay together). The stored message names its physical queue, so everything that
//! settles it works on the partition as on any queue. Operations an operator names a queue in
//! (stats, pause, dead letters, kills, fences) take the logical name and cover every
//! partition; a worker serves the physical queues [`Queue::physical_queues`] lists. Every
//! process must be given the same partition counts: a different count sends a task's fires
//! to another partition, where its dedupe marks are not.

use std::borrow::Cow;

use ax_scheduler_core::placement::bucket_of;

use crate::message::ExecutionMessage;
use crate::queue::Queue;

/// The character that separates a queue's name from its partition's number: refused in the
/// names of user queues.
pub const PARTITION_SEPARATOR: char = '#';

/// The most partitions one queue may have.
pub const MAX_PARTITIONS: u32 = 256;

/// The physical queue of partition `p` of `queue`.
pub fn partition_name(queue: &str, p: u32) -> String {
    format!("{queue}{PARTITION_SEPARATOR}p{p}")
}

/// The logical queue a physical queue name belongs to, and its partition (`None` for a name
/// that is not a partition's).
pub fn split_partition(physical: &str) -> Option<(&str, u32)> {
    let (logical, rest) = physical.rsplit_once(PARTITION_SEPARATOR)?;
    let p = rest.strip_prefix('p')?.parse().ok()?;
    Some((logical, p))
}

/// The partition among `partitions` that `msg` belongs to.
pub fn partition_of(msg: &ExecutionMessage, partitions: u32) -> u32 {
    match &msg.concurrency {
        // Distinct leading parts keep a concurrency key apart from a task of the same text.
        Some(c) => bucket_of(&[b"c", c.key.as_bytes()], partitions),
        None => bucket_of(
            &[b"t", msg.namespace.as_bytes(), msg.task_id.as_bytes()],
            partitions,
        ),
    }
}

impl Queue {
    /// How many partitions `queue` has (1: it is one physical queue, by its own name).
    pub fn partitions(&self, queue: &str) -> u32 {
        self.inner
            .cfg
            .partitions
            .get(queue)
            .copied()
            .unwrap_or(1)
            .max(1)
    }

    /// The physical queues of `queue`: its partitions, or itself when it has none (or when it
    /// is a partition's name already). A worker of `queue` serves all of them.
    pub fn physical_queues(&self, queue: &str) -> Vec<String> {
        match self.partitions(queue) {
            1 => vec![queue.to_owned()],
            n => (0..n).map(|p| partition_name(queue, p)).collect(),
        }
    }

    /// [`Queue::physical_queues`] of each of `queues`, in order.
    pub fn physical_queues_of(&self, queues: &[String]) -> Vec<String> {
        queues
            .iter()
            .flat_map(|q| self.physical_queues(q))
            .collect()
    }

    /// The physical queue `msg` goes to: its own queue, or the partition it hashes to.
    pub(crate) fn physical_queue<'m>(&self, msg: &'m ExecutionMessage) -> Cow<'m, str> {
        match self.partitions(&msg.queue) {
            1 => Cow::Borrowed(&*msg.queue),
            n => Cow::Owned(partition_name(&msg.queue, partition_of(msg, n))),
        }
    }

    /// The configured name whose settings (limits) apply to physical queue `physical`.
    pub(crate) fn logical_queue<'a>(&self, physical: &'a str) -> &'a str {
        match split_partition(physical) {
            Some((logical, p)) if p < self.partitions(logical) => logical,
            _ => physical,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_round_trip() {
        assert_eq!(partition_name("hot", 3), "hot#p3");
        assert_eq!(split_partition("hot#p3"), Some(("hot", 3)));
        assert_eq!(split_partition("hot"), None);
        assert_eq!(split_partition("hot#x"), None);
        assert!(crate::keys::validate_name(&partition_name("hot", 255)));
    }
}
