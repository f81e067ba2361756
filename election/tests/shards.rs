//! Shard ownership against a real etcd: several members in one process, each with an engine
//! stand-in that holds its guards and hands shards over when told.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_election::{own_shards, ElectionConfig, ShardEvent, ShardGuard, ShardSettings};
use ax_scheduler_core::placement::ShardMap;
use etcd_client::{Client, GetOptions};
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(2);

fn config(prefix: &str) -> ElectionConfig {
    ElectionConfig {
        prefix: prefix.to_owned(),
        ttl: TTL,
        request_timeout: Duration::from_secs(2),
    }
}

/// Shards each member holds, by member, with their fencing tokens: filled only while the
/// engine stand-in holds the guard (removed before a release starts).
type Owned = Arc<Mutex<BTreeMap<String, BTreeMap<u32, i64>>>>;

struct Member {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Starts a member that drains for `drain` before releasing a shard it must hand over.
fn member(
    client: &Client,
    prefix: &str,
    id: &str,
    shards: u32,
    drain: Duration,
    owned: &Owned,
) -> Member {
    member_in_layout(client, prefix, id, shards, "placement=task", drain, owned)
}

/// [`member`] with a layout of its own.
fn member_in_layout(
    client: &Client,
    prefix: &str,
    id: &str,
    shards: u32,
    layout: &str,
    drain: Duration,
    owned: &Owned,
) -> Member {
    let stop = CancellationToken::new();
    let mut owner = own_shards(
        client.clone(),
        config(prefix),
        ShardSettings {
            instance_id: id.to_owned(),
            shards,
            orphan_after: Duration::from_secs(5),
            layout: layout.to_owned(),
        },
        std::sync::Arc::new(ax_scheduler_core::SystemClock),
        // Not `stop`: a cancelled parent would close the session cleanly, and `stop` is a
        // crash here.
        &CancellationToken::new(),
    )
    .unwrap();
    let (id, owned, stop2) = (id.to_owned(), owned.clone(), stop.clone());
    let task = tokio::spawn(async move {
        let mut guards: BTreeMap<u32, ShardGuard> = BTreeMap::new();
        loop {
            let event = tokio::select! {
                e = owner.next() => e,
                _ = stop2.cancelled() => None,
            };
            match event {
                Some(ShardEvent::Acquired(g)) => {
                    let mut o = owned.lock().unwrap();
                    o.entry(id.clone())
                        .or_default()
                        .insert(g.shard(), g.revision());
                    guards.insert(g.shard(), g);
                }
                Some(ShardEvent::HandOver(s)) => {
                    if let Some(g) = guards.remove(&s) {
                        sleep(drain).await;
                        owned
                            .lock()
                            .unwrap()
                            .entry(id.clone())
                            .or_default()
                            .remove(&s);
                        g.into_lock().release().await.unwrap();
                    }
                }
                Some(ShardEvent::Map(_)) => {}
                None => break,
            }
        }
        // A crash: nothing is released, the lease takes the keys.
        owned.lock().unwrap().remove(&id);
        for (_, g) in guards {
            g.into_lock().abandon();
        }
        owner.abandon().await;
    });
    Member { stop, task }
}

/// Stops a member as a crash would (SIGKILL): its keys stay until its lease runs out.
async fn crash(m: Member) {
    m.stop.cancel();
    m.task.await.unwrap();
}

fn expected(shards: u32, members: &[&str]) -> Vec<(String, usize)> {
    ShardMap::assign(shards, members)
        .loads()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v as usize))
        .collect()
}

fn loads(owned: &Owned) -> BTreeMap<String, usize> {
    owned
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.len()))
        .collect()
}

/// No shard is held by two members at once, as the stand-ins see it.
fn assert_single_owners(owned: &Owned) {
    let o = owned.lock().unwrap();
    let mut seen = BTreeSet::new();
    for (id, shards) in o.iter() {
        for s in shards.keys() {
            assert!(
                seen.insert(*s),
                "shard {s} held twice (also by {id}): {o:?}"
            );
        }
    }
}

/// Waits until the loads are `want`, checking single ownership all along; returns how long.
async fn settle(owned: &Owned, want: &[(String, usize)], within: Duration) -> Duration {
    let want: BTreeMap<String, usize> = want.iter().cloned().collect();
    let start = Instant::now();
    loop {
        assert_single_owners(owned);
        let now: BTreeMap<String, usize> =
            loads(owned).into_iter().filter(|(_, v)| *v > 0).collect();
        if now == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "loads {now:?}, want {want:?} within {within:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

async fn owner_keys(client: &Client, prefix: &str) -> BTreeMap<String, (String, i64)> {
    let mut kv = client.kv_client();
    let resp = kv
        .get(
            format!("{prefix}/shards/owners/"),
            Some(GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_owned(),
                (kv.value_str().unwrap().to_owned(), kv.create_revision()),
            )
        })
        .collect()
}

#[tokio::test]
async fn members_share_the_shards_and_a_joiner_gets_its_share_by_handover() {
    let client = Client::connect([ax_testkit::etcd_endpoint()], None)
        .await
        .unwrap();
    let prefix = format!("/{}", ax_testkit::unique_name("shards-join"));
    let owned: Owned = Arc::default();
    let drain = Duration::from_millis(200);
    let a = member(&client, &prefix, "a", 12, drain, &owned);
    let b = member(&client, &prefix, "b", 12, drain, &owned);
    settle(&owned, &expected(12, &["a", "b"]), Duration::from_secs(5)).await;
    let keys = owner_keys(&client, &prefix).await;
    assert_eq!(keys.len(), 12);
    let before = owned.lock().unwrap().clone();
    for (key, (holder, revision)) in &keys {
        let s: u32 = key.rsplit('/').next().unwrap().parse().unwrap();
        assert_eq!(before[holder].get(&s), Some(revision), "{key}");
    }

    let c = member(&client, &prefix, "c", 12, drain, &owned);
    let took = settle(
        &owned,
        &expected(12, &["a", "b", "c"]),
        Duration::from_secs(5),
    )
    .await;
    eprintln!("the joiner owned its share after {took:?}");
    // Every shard that moved has a new fencing token above the old one.
    let after = owned.lock().unwrap().clone();
    for (s, token) in &after["c"] {
        let old = before.values().find_map(|m| m.get(s)).unwrap();
        assert!(token > old, "shard {s}: {token} after {old}");
    }
    for m in [a, b, c] {
        m.stop.cancel();
        m.task.await.unwrap();
    }
}

#[tokio::test]
async fn a_member_with_another_layout_stands_aside_and_the_others_keep_their_shards() {
    let client = Client::connect([ax_testkit::etcd_endpoint()], None)
        .await
        .unwrap();
    let prefix = format!("/{}", ax_testkit::unique_name("shards-layout"));
    let owned: Owned = Arc::default();
    let drain = Duration::from_millis(100);
    let a = member(&client, &prefix, "a", 12, drain, &owned);
    let b = member(&client, &prefix, "b", 12, drain, &owned);
    settle(&owned, &expected(12, &["a", "b"]), Duration::from_secs(5)).await;
    // Another shard count, then another placement: neither takes a shard, and nothing is
    // handed to them.
    let c = member(&client, &prefix, "c", 16, drain, &owned);
    let d = member_in_layout(
        &client,
        &prefix,
        "d",
        12,
        "placement=namespace",
        drain,
        &owned,
    );
    sleep(Duration::from_secs(3)).await;
    let now = owned.lock().unwrap().clone();
    for stranger in ["c", "d"] {
        assert!(
            now.get(stranger).is_none_or(|s| s.is_empty()),
            "{stranger} took shards: {now:?}"
        );
    }
    settle(&owned, &expected(12, &["a", "b"]), Duration::from_secs(1)).await;
    assert_eq!(owner_keys(&client, &prefix).await.len(), 12);
    for m in [a, b, c, d] {
        m.stop.cancel();
        m.task.await.unwrap();
    }
}

#[tokio::test]
async fn a_crashed_members_shards_move_within_ttl_and_a_second() {
    let client = Client::connect([ax_testkit::etcd_endpoint()], None)
        .await
        .unwrap();
    let prefix = format!("/{}", ax_testkit::unique_name("shards-crash"));
    let owned: Owned = Arc::default();
    let drain = Duration::ZERO;
    let a = member(&client, &prefix, "a", 9, drain, &owned);
    let b = member(&client, &prefix, "b", 9, drain, &owned);
    let c = member(&client, &prefix, "c", 9, drain, &owned);
    settle(
        &owned,
        &expected(9, &["a", "b", "c"]),
        Duration::from_secs(5),
    )
    .await;
    let theirs: BTreeSet<u32> = owned.lock().unwrap()["c"].keys().copied().collect();
    crash(c).await;
    let gap = settle(
        &owned,
        &expected(9, &["a", "b"]),
        TTL + Duration::from_secs(3),
    )
    .await;
    eprintln!("a crashed member's shards moved after {gap:?}");
    assert!(gap <= TTL + Duration::from_secs(1), "{gap:?}");
    // Not before its lease ran out (renewed every TTL/3): its keys still held the shards.
    assert!(gap >= TTL - TTL / 3 - Duration::from_millis(200), "{gap:?}");
    let now = owned.lock().unwrap().clone();
    for s in theirs {
        assert!(now["a"].contains_key(&s) || now["b"].contains_key(&s));
    }
    for m in [a, b] {
        m.stop.cancel();
        m.task.await.unwrap();
    }
}
