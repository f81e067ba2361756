//! Keys of the election layout (see `docs/etcd-layout.md`).
//!
//! Built in one place so the prefix is normalized the same way everywhere: a trailing `/`
//! is dropped, so `/scheduler` and `/scheduler/` name the same keys.

fn trim(prefix: &str) -> &str {
    prefix.trim_end_matches('/')
}

/// `{prefix}/leader`: the leader record, on the leader's lease. The layout's one definition
/// is [`ax_scheduler_core::etcd_keys::leader`]; this wrapper keeps it in the election API.
pub fn leader_key(prefix: &str) -> String {
    ax_scheduler_core::etcd_keys::leader(prefix)
}

/// `{prefix}/locks/{task_id}`: a task lock, on its holder's lease.
pub fn lock_key(prefix: &str, task_id: &str) -> String {
    format!("{}/locks/{task_id}", trim(prefix))
}

/// `{prefix}/instances/{instance_id}`: a live replica's record, on its lease.
pub fn instance_key(prefix: &str, instance_id: &str) -> String {
    format!("{}/instances/{instance_id}", trim(prefix))
}

/// `{prefix}/instances/`: the range of all instance records.
pub(crate) fn instances_prefix(prefix: &str) -> String {
    format!("{}/instances/", trim(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_slash_is_ignored() {
        assert_eq!(leader_key("/scheduler/"), "/scheduler/leader");
        assert_eq!(lock_key("/s", "t1"), "/s/locks/t1");
        assert_eq!(instance_key("/s", "i"), "/s/instances/i");
        assert_eq!(instances_prefix("/s//"), "/s/instances/");
    }
}
