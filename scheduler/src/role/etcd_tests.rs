//! The role against a real etcd: the election, the shard ownership, the registry's watch and
//! the state store are the ones a replica runs; Redis is the term tests' in-memory queue,
//! which can panic on a fire as a bug on the fire path would, or refuse everything as a
//! Redis out of reach does.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ax_election::{Candidate, ElectionConfig};
use ax_registry::{Registry, RegistryConfig};
use ax_scheduler_core::placement::{PlaceBy, Placement};
use ax_scheduler_core::queue_set::QueueSet;
use ax_scheduler_core::{DispatcherConfig, SystemClock, UtcMillis};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::audit::NoAudit;
use crate::metrics::NoMetrics;
use crate::term::fakes::FakeQueue;
use crate::{LeaderDeps, LeaderSettings};

fn settings(instance: &str) -> LeaderSettings {
    LeaderSettings {
        instance_id: instance.to_owned(),
        placement: Placement::default(),
        shard_orphan_after: Duration::from_secs(30),
        dispatcher: DispatcherConfig::default(),
        events_interval: Duration::from_millis(100),
        flush_interval: Duration::from_millis(100),
        trigger_interval: Duration::from_millis(500),
        enqueue_stall_limit: Duration::from_secs(30),
        redis_unreachable_limit: crate::DEFAULT_REDIS_UNREACHABLE_LIMIT,
        delay_alert_threshold: Duration::from_secs(30),
        max_clock_skew: crate::DEFAULT_MAX_CLOCK_SKEW,
        repair_after: crate::DEFAULT_REPAIR_AFTER,
    }
}

/// Each fire of `id` at most once, sorted; and the fencing tokens they went under.
fn once_each(queue: &FakeQueue, id: &str) -> (Vec<UtcMillis>, BTreeSet<u64>) {
    let pushed: Vec<_> = queue
        .pushed()
        .into_iter()
        .filter(|m| &*m.task_id == id)
        .collect();
    let fires: BTreeSet<UtcMillis> = pushed.iter().map(|m| m.fire_at).collect();
    assert_eq!(fires.len(), pushed.len(), "a fire went twice");
    let tokens = pushed.iter().map(|m| m.fencing_token).collect();
    (fires.into_iter().collect(), tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_that_panics_gives_its_key_up_and_the_role_leads_again_firing_each_fire_once() {
    let client = etcd_client::Client::connect([ax_testkit::etcd_endpoint()], None)
        .await
        .unwrap();
    let prefix = format!("/{}", ax_testkit::unique_name("role-panic"));
    let registry = Registry::new(
        client.clone(),
        RegistryConfig {
            prefix: prefix.clone(),
            ..RegistryConfig::default()
        },
    );
    // A task every second whose executions never end here (nothing runs them): `allow`
    // lets each fire go all the same. `fire_all`: the next term runs every fire it finds
    // missed, so the one whose enqueue panicked runs however long the re-campaign takes
    // (with `fire_once`, one more second of pause would fold it into the next fire).
    let spec =
        r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow","misfire":"fire_all"}"#;
    client
        .kv_client()
        .put(format!("{prefix}/tasks/ns/a"), spec, None)
        .await
        .unwrap();
    let queue = Arc::new(FakeQueue::default());
    let candidate = Candidate::new(
        client.clone(),
        ElectionConfig {
            prefix: prefix.clone(),
            ..ElectionConfig::default()
        },
        "r1",
        Default::default(),
    )
    .unwrap();
    let deps = LeaderDeps {
        store: Arc::new(registry.clone()),
        registry,
        queue: Arc::clone(&queue) as _,
        candidate,
        clock: Arc::new(SystemClock),
        clock_check: None,
        metrics: Arc::new(NoMetrics),
        alerts: None,
        tracker: TaskTracker::new(),
        audit: Arc::new(NoAudit),
        queue_names: QueueSet::default(),
    };
    let cancel = CancellationToken::new();
    let role = tokio::spawn(crate::run(settings("r1"), deps, cancel.clone()));

    // The third fire from the first one seen panics on its way into the queue.
    let first = loop {
        if let Some(first) = queue.fires_of("a").first() {
            break *first;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let panic_at = UtcMillis(first.0 + 3_000);
    queue.panic_at_fire("a", panic_at);
    // Past the panic, the role's pause before it campaigns again, and a few fires more.
    let until = panic_at.0 + 8_000;
    while UtcMillis::now().0 < until {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(10), role)
        .await
        .expect("the role stops when cancelled")
        .unwrap();
    let (fires, tokens) = once_each(&queue, "a");
    assert!(
        fires.contains(&panic_at),
        "the fire whose enqueue panicked runs in the next term: {fires:?}"
    );
    assert!(
        fires.iter().any(|f| f.0 >= panic_at.0 + 3_000),
        "fires go on after the panic: {fires:?}"
    );
    assert!(
        tokens.len() >= 2,
        "the fires after the panic go under a new term's token: {tokens:?}"
    );
    client
        .kv_client()
        .delete(
            prefix.as_str(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
}

/// A replica of the role on `prefix` with its own queue; stops with `cancel`.
async fn replica(
    client: &etcd_client::Client,
    prefix: &str,
    instance: &str,
    settings: LeaderSettings,
    cancel: &CancellationToken,
) -> (Arc<FakeQueue>, tokio::task::JoinHandle<()>) {
    let registry = Registry::new(
        client.clone(),
        RegistryConfig {
            prefix: prefix.to_owned(),
            ..RegistryConfig::default()
        },
    );
    let queue = Arc::new(FakeQueue::default());
    let candidate = Candidate::new(
        client.clone(),
        ElectionConfig {
            prefix: prefix.to_owned(),
            ttl: Duration::from_secs(2),
            ..ElectionConfig::default()
        },
        instance,
        Default::default(),
    )
    .unwrap();
    let deps = LeaderDeps {
        store: Arc::new(registry.clone()),
        registry,
        queue: Arc::clone(&queue) as _,
        candidate,
        clock: Arc::new(SystemClock),
        clock_check: None,
        metrics: Arc::new(NoMetrics),
        alerts: None,
        tracker: TaskTracker::new(),
        audit: Arc::new(NoAudit),
        queue_names: QueueSet::default(),
    };
    (
        queue,
        tokio::spawn(crate::run(settings, deps, cancel.clone())),
    )
}

/// The tasks with a fire pushed into `queue` at or after `from`.
fn firing_in(queue: &FakeQueue, ids: &[String], from: i64) -> BTreeSet<String> {
    ids.iter()
        .filter(|id| queue.fires_of(id).iter().any(|f| f.0 >= from))
        .cloned()
        .collect()
}

async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_owner_cut_from_redis_leaves_the_ownership_and_joins_again_once_it_answers() {
    let client = etcd_client::Client::connect([ax_testkit::etcd_endpoint()], None)
        .await
        .unwrap();
    let prefix = format!("/{}", ax_testkit::unique_name("role-shards-redis"));
    let ids: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    for id in &ids {
        let spec = r#"{"handler":"log","schedule":{"every":"1s"},"overlap":"allow"}"#;
        client
            .kv_client()
            .put(format!("{prefix}/tasks/ns/{id}"), spec, None)
            .await
            .unwrap();
    }
    let sharded = |instance: &str| LeaderSettings {
        placement: Placement {
            shards: 4,
            by: PlaceBy::Task,
        },
        redis_unreachable_limit: Duration::from_secs(2),
        ..settings(instance)
    };
    let cancel = CancellationToken::new();
    let (q1, r1) = replica(&client, &prefix, "r1", sharded("r1"), &cancel).await;
    let (q2, r2) = replica(&client, &prefix, "r2", sharded("r2"), &cancel).await;
    // Both own shards: each queue gets fires of some tasks, together of every task.
    wait_for("both replicas fire", Duration::from_secs(20), || {
        let now = UtcMillis::now().0;
        let (a, b) = (
            firing_in(&q1, &ids, now - 1_500),
            firing_in(&q2, &ids, now - 1_500),
        );
        !a.is_empty() && !b.is_empty() && a.union(&b).count() == ids.len()
    })
    .await;

    // r1 is cut from Redis: its terms give their shards up after the limit, and it leaves
    // the ownership, so r2 takes every shard instead of r1 taking them back.
    q1.refuse(true);
    let cut = UtcMillis::now().0;
    wait_for("r2 fires every task", Duration::from_secs(15), || {
        firing_in(&q2, &ids, UtcMillis::now().0 - 1_500).len() == ids.len()
    })
    .await;
    let moved = UtcMillis::now().0 - cut;
    // It stays that way while r1 is cut (r1 does not join again and take shards back).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        firing_in(&q2, &ids, UtcMillis::now().0 - 1_500).len(),
        ids.len(),
        "r2 keeps every shard while r1 cannot reach Redis"
    );

    // Healed: r1 joins again and takes its share back.
    q1.refuse(false);
    wait_for("r1 fires again", Duration::from_secs(20), || {
        !firing_in(&q1, &ids, UtcMillis::now().0 - 1_500).is_empty()
    })
    .await;
    cancel.cancel();
    for role in [r1, r2] {
        tokio::time::timeout(Duration::from_secs(10), role)
            .await
            .expect("the role stops when cancelled")
            .unwrap();
    }
    // No fire went twice, across both replicas.
    for id in &ids {
        let mut fires = q1.fires_of(id);
        fires.extend(q2.fires_of(id));
        let unique: BTreeSet<_> = fires.iter().collect();
        assert_eq!(unique.len(), fires.len(), "{id}: a fire went twice");
    }
    eprintln!("role: shards moved off the replica cut from Redis {moved} ms after the cut");
    assert!(moved < 12_000, "shards moved {moved} ms after the cut");
    client
        .kv_client()
        .delete(
            prefix.as_str(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
}
