//! Placement: which shard a task belongs to, and which scheduler replica should own a shard.
//!
//! Tasks map to a fixed number of shards by a stable hash of `namespace/id` (the first 8
//! bytes of its SHA-256: the same on every replica, build and platform, which std's hasher
//! is not), or of the namespace alone ([`PlaceBy::Namespace`]): a shard is scheduled like a
//! whole installation by one leader, so a dependency chain works only inside one shard, and
//! placing by namespace keeps a namespace's chains together. The shard is a function of the
//! task's key alone, so every replica, the run-now path and the tools agree on it without
//! reading the spec. Shards map to the live scheduler replicas by [`ShardMap::assign`]: every replica
//! computes the same map from the same membership, so nobody publishes it. The map only says
//! who should ask for a shard; ownership itself is a key per shard on the owner's etcd lease,
//! taken only if absent, whose create revision fences the owner's writes.
//!
//! The map is fair and moves few shards when a replica joins or leaves. Each (shard, replica)
//! pair has a score (rendezvous hashing); pairs are taken best score first, and a shard goes
//! to the first replica that still has room under ⌈S/n⌉. Plain rendezvous hashing moves the
//! fewest shards but is lopsided (256 shards on 3 replicas commonly split 95/86/75); the cap
//! evens it out for some extra moves: a join or a leave moves at most twice the shards that
//! change hands by necessity with 16 or more shards per replica (three times with fewer),
//! checked in the tests below.
//!
//! [`ownership_step`] turns the map, the shards' current holders and this replica's view of
//! time into what this replica does: take a free shard that is its own, hand over one that
//! belongs to someone else (its dispatcher stops and flushes first, then the key is
//! released), and take a shard nobody has taken for a while whatever the map says, so a
//! replica that is listed but not acting (a hung process whose record has not expired yet)
//! cannot leave a shard unscheduled; the map's owner gets it back by a handover later.

use std::collections::BTreeMap;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::key::TaskKey;
use crate::task::TaskSpec;
use crate::time::UtcMillis;
use crate::validate::FieldError;

/// The most shards an installation may have.
pub const MAX_SHARDS: u32 = 4096;

fn hash64(parts: &[&[u8]]) -> u64 {
    let mut h = Sha256::new();
    for p in parts {
        // A separator no name contains keeps ("a", "bc") and ("ab", "c") apart.
        h.update(p);
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The shard of `key` among `shards` (at least 1).
pub fn shard_of(key: &TaskKey, shards: u32) -> u32 {
    bucket_of(&[key.namespace.as_bytes(), key.id.as_bytes()], shards)
}

/// The bucket of the name made of `parts` among `buckets` (at least 1), by the same stable
/// hash as [`shard_of`]: the same on every process and version, so it can place stored data
/// (a queue's partitions use it).
pub fn bucket_of(parts: &[&[u8]], buckets: u32) -> u32 {
    let h = hash64(parts);
    // `buckets.max(1)` keeps the modulo defined; the result is below `buckets`, so it fits.
    (h % u64::from(buckets.max(1))) as u32
}

/// What a task's shard is computed from (`scheduler.placement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceBy {
    /// `namespace/id`: tasks spread evenly; a dependency chain must fit in one shard.
    #[default]
    Task,
    /// The namespace: a namespace's tasks (and so its chains) share a shard.
    Namespace,
}

/// How an installation spreads its tasks over shards: the same on every replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Shards in the installation (1: one leader schedules everything).
    pub shards: u32,
    /// What a task's shard is computed from.
    pub by: PlaceBy,
}

impl Default for Placement {
    fn default() -> Self {
        Placement {
            shards: 1,
            by: PlaceBy::Task,
        }
    }
}

impl PlaceBy {
    /// Its name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            PlaceBy::Task => "task",
            PlaceBy::Namespace => "namespace",
        }
    }
}

impl Placement {
    /// What replicas sharing shards must agree on besides the count: the placement rule.
    pub fn layout(&self) -> String {
        format!("placement={}", self.by.as_str())
    }

    /// Whether scheduling is split over shard owners (more than one shard).
    pub fn is_sharded(&self) -> bool {
        self.shards > 1
    }

    /// The shard of `key`.
    pub fn shard_of(&self, key: &TaskKey) -> u32 {
        match self.by {
            PlaceBy::Task => shard_of(key, self.shards),
            // `shards.max(1)` keeps the modulo defined; the result is below `shards`.
            PlaceBy::Namespace => {
                (hash64(&[key.namespace.as_bytes()]) % u64::from(self.shards.max(1))) as u32
            }
        }
    }

    /// Why `spec` (the task at `key`) cannot be scheduled under this placement, if so: a
    /// parent (`depends_on`) in another shard, whose ends its owner never sees. Without this
    /// the task would look like it waits on a parent that does not exist.
    pub fn chain_error(&self, key: &TaskKey, spec: &TaskSpec) -> Option<FieldError> {
        if !self.is_sharded() {
            return None;
        }
        let own = self.shard_of(key);
        spec.depends_on.iter().enumerate().find_map(|(i, dep)| {
            let theirs = self.shard_of(&crate::workflow::parse_key(&dep.task));
            (theirs != own).then(|| FieldError {
                path: format!("depends_on[{i}].task"),
                reason: format!(
                    "parent {} is scheduled in shard {theirs} and this task in shard {own} \
                     (scheduler.shards = {}): a chain runs only within one shard. Put the \
                     chain's tasks in one namespace and set scheduler.placement = \"namespace\"",
                    dep.task, self.shards
                ),
            })
        })
    }
}

fn score(shard: u32, replica: &str) -> u64 {
    hash64(&[&shard.to_be_bytes(), replica.as_bytes()])
}

/// Which replica should own each shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMap {
    replicas: Vec<String>,
    /// Per shard, an index into `replicas`; empty when there is no replica.
    owner: Vec<u32>,
}

impl ShardMap {
    /// The map of `shards` shards over `replicas` (ids; order and repeats do not matter).
    pub fn assign<S: AsRef<str>>(shards: u32, replicas: &[S]) -> ShardMap {
        let mut ids: Vec<String> = replicas.iter().map(|r| r.as_ref().to_owned()).collect();
        ids.sort();
        ids.dedup();
        let shards = shards.max(1);
        if ids.is_empty() {
            return ShardMap {
                replicas: ids,
                owner: Vec::new(),
            };
        }
        let n = ids.len() as u32;
        let cap = shards.div_ceil(n);
        let mut pairs: Vec<(u64, u32, u32)> = Vec::with_capacity((shards * n) as usize);
        for s in 0..shards {
            for (r, id) in ids.iter().enumerate() {
                pairs.push((score(s, id), s, r as u32));
            }
        }
        // Best score first; ties (astronomically rare) broken by shard then replica so every
        // replica sorts the same way.
        pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut owner = vec![u32::MAX; shards as usize];
        let mut load = vec![0u32; ids.len()];
        let mut left = shards;
        for (_, s, r) in pairs {
            if left == 0 {
                break;
            }
            if owner[s as usize] == u32::MAX && load[r as usize] < cap {
                owner[s as usize] = r;
                load[r as usize] += 1;
                left -= 1;
            }
        }
        ShardMap {
            replicas: ids,
            owner,
        }
    }

    /// How many shards the map covers.
    pub fn shards(&self) -> u32 {
        self.owner.len() as u32
    }

    /// The replica that should own `shard`; `None` with no replica (or no such shard).
    pub fn owner(&self, shard: u32) -> Option<&str> {
        let r = *self.owner.get(shard as usize)?;
        self.replicas.get(r as usize).map(String::as_str)
    }

    /// The shards `replica` should own, ascending.
    pub fn shards_of<'a>(&'a self, replica: &'a str) -> impl Iterator<Item = u32> + 'a {
        let index = self.replicas.iter().position(|r| r == replica);
        self.owner
            .iter()
            .enumerate()
            .filter(move |(_, &o)| Some(o as usize) == index)
            .map(|(s, _)| s as u32)
    }

    /// Shards per replica, for display.
    pub fn loads(&self) -> BTreeMap<&str, u32> {
        let mut loads: BTreeMap<&str, u32> =
            self.replicas.iter().map(|r| (r.as_str(), 0)).collect();
        for &o in &self.owner {
            if let Some(l) = self
                .replicas
                .get(o as usize)
                .and_then(|r| loads.get_mut(r.as_str()))
            {
                *l += 1;
            }
        }
        loads
    }
}

/// Who holds a shard's ownership key, as this replica last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// Nobody, since the instant given (when this replica saw the key go, or started).
    Free(UtcMillis),
    /// This replica.
    Me,
    /// Another replica.
    Other(String),
}

/// What a replica does about one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardAction {
    /// Take the shard's key (only if absent).
    Acquire(u32),
    /// Stop the shard's dispatcher, flush its states, then delete the key: the map gives the
    /// shard to another replica, which waits for it.
    HandOver(u32),
}

/// This replica's actions for every shard: see the [module notes](self). `holders` has one
/// entry per shard of `map`; a free shard whose map owner has not taken it within
/// `orphan_after` is taken by any replica.
pub fn ownership_step(
    me: &str,
    map: &ShardMap,
    holders: &[Holder],
    orphan_after: Duration,
    now: UtcMillis,
) -> Vec<ShardAction> {
    let mut actions = Vec::new();
    for (s, holder) in holders.iter().enumerate() {
        let s = s as u32;
        let mine = map.owner(s) == Some(me);
        match holder {
            Holder::Free(since) => {
                if mine || now.since(*since) >= orphan_after {
                    actions.push(ShardAction::Acquire(s));
                }
            }
            Holder::Me => {
                // Handed over only to a replica the map names: with no map owner (an empty
                // membership, which includes this replica only while it is listed) keep it.
                if !mine && map.owner(s).is_some() {
                    actions.push(ShardAction::HandOver(s));
                }
            }
            Holder::Other(_) => {}
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("ax-{i}")).collect()
    }

    fn child(ns: &str, id: &str, parent: &str) -> TaskSpec {
        let json = format!(r#"{{"handler":"log","depends_on":[{{"task":"{parent}"}}]}}"#);
        TaskSpec::from_json(json.as_bytes(), ns, id).unwrap()
    }

    #[test]
    fn a_chain_across_shards_is_refused_and_placing_by_namespace_keeps_it_whole() {
        let by_task = Placement {
            shards: 16,
            by: PlaceBy::Task,
        };
        let key = TaskKey::new("etl", "load");
        // Some parent in etl lands in another shard than etl/load.
        let other = (0..100)
            .map(|i| format!("extract-{i}"))
            .find(|id| {
                by_task.shard_of(&TaskKey::new("etl", id.as_str())) != by_task.shard_of(&key)
            })
            .unwrap();
        let spec = child("etl", "load", &format!("etl/{other}"));
        let err = by_task
            .chain_error(&key, &spec)
            .expect("parent in another shard");
        assert_eq!(err.path, "depends_on[0].task");
        assert!(err.reason.contains("scheduler.placement"), "{}", err.reason);
        let by_ns = Placement {
            shards: 16,
            by: PlaceBy::Namespace,
        };
        assert_eq!(by_ns.chain_error(&key, &spec), None);
        assert_eq!(
            by_ns.shard_of(&key),
            by_ns.shard_of(&TaskKey::new("etl", other.as_str()))
        );
        // One shard: nothing to refuse.
        assert_eq!(Placement::default().chain_error(&key, &spec), None);
    }

    #[test]
    fn a_key_has_one_stable_shard() {
        let k = TaskKey::new("billing", "invoice-7");
        // Fixed across builds and platforms: a changed value would move every task of an
        // installation to another shard on upgrade.
        assert_eq!(shard_of(&k, 256), shard_of(&k, 256));
        assert_eq!(shard_of(&k, 1), 0);
        assert_eq!(shard_of(&TaskKey::new("a", "bc"), 1 << 20), 397_689);
        assert_ne!(
            shard_of(&TaskKey::new("a", "bc"), 1 << 20),
            shard_of(&TaskKey::new("ab", "c"), 1 << 20)
        );
    }

    #[test]
    fn keys_spread_evenly_over_shards() {
        let mut counts = vec![0u32; 16];
        for i in 0..16_000 {
            counts[shard_of(&TaskKey::new("ns", format!("t{i}")), 16) as usize] += 1;
        }
        for c in counts {
            assert!((850..1150).contains(&c), "{c}");
        }
    }

    #[test]
    fn no_replica_owns_nothing_and_one_owns_all() {
        let empty: [&str; 0] = [];
        let m = ShardMap::assign(8, &empty);
        assert_eq!(m.owner(0), None);
        let m = ShardMap::assign(8, &["solo"]);
        assert!((0..8).all(|s| m.owner(s) == Some("solo")));
        assert_eq!(m.shards_of("solo").count(), 8);
        assert_eq!(m.owner(8), None);
    }

    #[test]
    fn the_map_does_not_depend_on_the_order_replicas_are_listed() {
        let a = ShardMap::assign(256, &["c", "a", "b"]);
        let b = ShardMap::assign(256, &["a", "b", "c", "a"]);
        assert_eq!(a, b);
    }

    fn moved(a: &ShardMap, b: &ShardMap) -> u32 {
        (0..a.shards())
            .filter(|&s| a.owner(s) != b.owner(s))
            .count() as u32
    }

    proptest! {
        // Each case sorts up to 7 000 scores three times; fewer cases keep the suite quick.
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_shard_has_one_owner_and_loads_are_capped(shards in 1u32..600, n in 1usize..12) {
            let ids = names(n);
            let m = ShardMap::assign(shards, &ids);
            let cap = shards.div_ceil(n as u32);
            let mut total = 0;
            for (_, load) in m.loads() {
                prop_assert!(load <= cap);
                total += load;
            }
            prop_assert_eq!(total, shards);
            for s in 0..shards {
                prop_assert!(m.owner(s).is_some());
            }
        }

        #[test]
        fn a_join_or_a_leave_moves_few_shards(shards in 16u32..512, n in 1usize..10) {
            let before = ShardMap::assign(shards, &names(n));
            let after = ShardMap::assign(shards, &names(n + 1));
            // The newcomer's share has to move; the lower cap moves some more: at most as many
            // again with 16 or more shards per replica, twice as many with fewer.
            let factor = if shards >= 16 * (n as u32 + 1) { 2 } else { 3 };
            let share = after.shards_of(&format!("ax-{n}")).count() as u32;
            let m = moved(&before, &after);
            prop_assert!(m <= factor * share, "{m} > {factor} x {share}");
            // A leave moves the leaver's shards, and as few more.
            let gone: Vec<String> = names(n + 1).into_iter().filter(|r| r != "ax-0").collect();
            let left = ShardMap::assign(shards, &gone);
            let theirs = after.shards_of("ax-0").count() as u32;
            let m = moved(&after, &left);
            prop_assert!(m <= factor * theirs, "{m} > {factor} x {theirs}");
        }
    }

    fn holders(map: &ShardMap, me: &str, free_since: UtcMillis) -> Vec<Holder> {
        (0..map.shards())
            .map(|s| match map.owner(s) {
                Some(o) if o == me => Holder::Me,
                Some(o) => Holder::Other(o.to_owned()),
                None => Holder::Free(free_since),
            })
            .collect()
    }

    const ORPHAN: Duration = Duration::from_secs(5);

    #[test]
    fn a_settled_cluster_does_nothing() {
        let map = ShardMap::assign(64, &names(3));
        let h = holders(&map, "ax-1", UtcMillis(0));
        assert!(ownership_step("ax-1", &map, &h, ORPHAN, UtcMillis(1_000)).is_empty());
    }

    #[test]
    fn a_joiner_is_handed_its_share_and_takes_each_shard_once_free() {
        let old = ShardMap::assign(64, &names(2));
        let new = ShardMap::assign(64, &names(3));
        let joiner_share: BTreeSet<u32> = new.shards_of("ax-2").collect();
        // The old owners hand over exactly the joiner's shards.
        let mut handed = BTreeSet::new();
        for me in ["ax-0", "ax-1"] {
            for a in ownership_step(
                me,
                &new,
                &holders(&old, me, UtcMillis(0)),
                ORPHAN,
                UtcMillis(0),
            ) {
                match a {
                    ShardAction::HandOver(s) => assert!(handed.insert(s)),
                    other => panic!("{me}: {other:?}"),
                }
            }
        }
        assert_eq!(handed, joiner_share);
        // The joiner waits while they are held, and asks for each as it is released.
        let held = holders(&old, "ax-2", UtcMillis(0));
        assert!(ownership_step("ax-2", &new, &held, ORPHAN, UtcMillis(0)).is_empty());
        let released: Vec<Holder> = held
            .into_iter()
            .enumerate()
            .map(|(s, h)| {
                if joiner_share.contains(&(s as u32)) {
                    Holder::Free(UtcMillis(10))
                } else {
                    h
                }
            })
            .collect();
        let asks: BTreeSet<u32> = ownership_step("ax-2", &new, &released, ORPHAN, UtcMillis(10))
            .into_iter()
            .map(|a| match a {
                ShardAction::Acquire(s) => s,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(asks, joiner_share);
    }

    #[test]
    fn a_free_shard_left_by_its_owner_is_taken_by_anyone_after_the_grace() {
        let map = ShardMap::assign(4, &["a", "b"]);
        let theirs = map.shards_of("b").next().unwrap();
        let mut h = holders(&map, "a", UtcMillis(0));
        h[theirs as usize] = Holder::Free(UtcMillis(1_000));
        assert!(ownership_step("a", &map, &h, ORPHAN, UtcMillis(5_999)).is_empty());
        assert_eq!(
            ownership_step("a", &map, &h, ORPHAN, UtcMillis(6_000)),
            [ShardAction::Acquire(theirs)]
        );
        // Held by the wrong replica afterwards: handed back to the map's owner.
        h[theirs as usize] = Holder::Me;
        assert_eq!(
            ownership_step("a", &map, &h, ORPHAN, UtcMillis(7_000)),
            [ShardAction::HandOver(theirs)]
        );
    }
}
