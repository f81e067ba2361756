//! Keys of the etcd layout that more than one crate builds (see `docs/etcd-layout.md`).
//!
//! The registry (fenced state writes), the election (campaigns, observers) and the binary
//! (its connection probe) all name `{prefix}/leader` (and shard owner keys, its sharded form); they do not depend on each other, so
//! the one definition lives here, in the crate they all share. It is plain string building,
//! which keeps the core free of I/O. A trailing `/` on the prefix is dropped, so
//! `/scheduler` and `/scheduler/` name the same keys.

/// `{prefix}/leader`: the leader record, on the leader's lease. Its create revision is the
/// leader's fencing token.
pub fn leader(prefix: &str) -> String {
    format!("{}/leader", prefix.trim_end_matches('/'))
}

/// `{prefix}/shards/owners/{shard}`: a shard's owner (its instance id), on the owner's lease.
/// Its create revision is the shard's fencing token, as the leader key's is the leader's.
pub fn shard_owner(prefix: &str, shard: u32) -> String {
    format!("{}/shards/owners/{shard}", prefix.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_slash_is_ignored() {
        assert_eq!(leader("/scheduler"), "/scheduler/leader");
        assert_eq!(leader("/scheduler//"), "/scheduler/leader");
        assert_eq!(shard_owner("/s/", 7), "/s/shards/owners/7");
    }
}
