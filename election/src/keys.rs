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

/// `{prefix}/roster/{instance_id}`: a replica's record with no lease, kept after it dies.
pub(crate) fn roster_key(prefix: &str, instance_id: &str) -> String {
    format!("{}/roster/{instance_id}", trim(prefix))
}

/// `{prefix}/roster/`: the range of all roster entries.
pub(crate) fn roster_prefix(prefix: &str) -> String {
    format!("{}/roster/", trim(prefix))
}

/// `{prefix}/shards/`: the range of shard members and owners, watched as one.
pub(crate) fn shards_prefix(prefix: &str) -> String {
    format!("{}/shards/", trim(prefix))
}

/// `{prefix}/shards/members/{instance_id}`: a replica taking part in shard ownership, on its
/// shard session's lease.
pub(crate) fn shard_member_key(prefix: &str, instance_id: &str) -> String {
    format!("{}/shards/members/{instance_id}", trim(prefix))
}

/// `{prefix}/shards/owners/{shard}`: see [`ax_scheduler_core::etcd_keys::shard_owner`].
pub fn shard_owner_key(prefix: &str, shard: u32) -> String {
    ax_scheduler_core::etcd_keys::shard_owner(prefix, shard)
}

/// A key under [`shards_prefix`], parsed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ShardKey {
    /// A member, by instance id.
    Member(String),
    /// A shard's owner key.
    Owner(u32),
}

impl ShardKey {
    pub(crate) fn parse(prefix: &str, key: &[u8]) -> Option<ShardKey> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&shards_prefix(prefix))?;
        if let Some(id) = rest.strip_prefix("members/") {
            return (!id.is_empty()).then(|| ShardKey::Member(id.to_owned()));
        }
        rest.strip_prefix("owners/")?
            .parse()
            .ok()
            .map(ShardKey::Owner)
    }
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

    #[test]
    fn shard_keys_parse_back() {
        let m = shard_member_key("/s/", "ax-0");
        assert_eq!(
            ShardKey::parse("/s", m.as_bytes()),
            Some(ShardKey::Member("ax-0".into()))
        );
        let o = shard_owner_key("/s", 12);
        assert_eq!(
            ShardKey::parse("/s", o.as_bytes()),
            Some(ShardKey::Owner(12))
        );
        assert_eq!(ShardKey::parse("/s", b"/s/shards/owners/x"), None);
        assert_eq!(ShardKey::parse("/s", b"/s/leader"), None);
    }
}
