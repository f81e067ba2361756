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
//! partition; a worker serves the physical queues [`crate::Queue::physical_queues`] lists. Every
//! process must be given the same partition counts: a different count sends a task's fires
//! to another partition, where its dedupe marks are not.

use ax_scheduler_core::placement::bucket_of;

use crate::message::ExecutionMessage;

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
