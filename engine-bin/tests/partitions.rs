//! Partitions, with the roles split (two scheduler replicas beside a worker, the chart's
//! `split` topology): the partition is the leader's alone, so what is measured is the
//! hand-over of firing, not the redelivery of what a cut worker held (the worker suite's
//! `partition` test covers that). A steady load of one-shots (registered while `s1` leads)
//! and a periodic task runs while `s2` stands by.
//!
//! For a cut, replica `s1` runs in a network namespace of its own ([`Net`]) with one veth
//! link to etcd's bridge and one to Redis's, and the test takes a link off its bridge:
//! frames vanish both ways, no reset, and `s1`'s kernel retransmits and its writes block as
//! behind a real partition. The servers are the test's own, listening on the bridges. These
//! tests need root (iproute2), as CI runs them. A slow link goes through a relay on loopback
//! instead ([`Link`]): the kernel here has no `netem` to delay packets.
//!
//! Each scenario reports how long until another replica led, how late the worst one-shot
//! ran, and checks after the heal that nothing was lost or run twice, that no periodic slot
//! ran twice and that every replica still runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::Duration;

use ax_testkit::link::Link;
use ax_testkit::netns::Net;
use ax_testkit::{EtcdServer, RedisServer};
use harness::{now_ms, Cluster, Roles, Workload, SERIAL};

/// `s1`'s two links through relays, to etcd and to Redis.
struct Links {
    etcd: Link,
    redis: Link,
}

/// How `s1` reaches etcd and Redis, kept until the scenario's end.
enum Paths {
    /// From namespace 0 of `net`: its link to bridge [`ETCD`] reaches `etcd`, to [`REDIS`]
    /// reaches `redis`.
    Namespace {
        net: Net,
        _etcd: EtcdServer,
        _redis: RedisServer,
    },
    /// Through relays on loopback, to the shared servers.
    Relays(Links),
}

/// The bridges of a namespace scenario.
const ETCD: usize = 0;
const REDIS: usize = 1;

/// Which of `s1`'s links a scenario cuts once the load runs.
enum Cut {
    /// Etcd only.
    Etcd,
    /// Redis only.
    Redis,
    /// Both.
    All,
    /// None: Redis's link is slowed by this much each way instead.
    Slow(Duration),
}

/// What a scenario measured.
struct Seen {
    /// Milliseconds from the fault until a replica other than `s1` led, if one did.
    handover_ms: Option<i64>,
    /// The latest one-shot, milliseconds after its due time.
    worst_ms: i64,
}

/// Starts `s1` (leading) behind its paths, then `s2` and `w1` on the host.
async fn start(label: &str, cut: &Cut) -> (Cluster, Paths) {
    let log = std::env::var("PART_LOG").unwrap_or_else(|_| "warn".into());
    let (mut c, paths) = if let Cut::Slow(_) = cut {
        let mut c = Cluster::new(label).await;
        let links = Links {
            etcd: Link::to(c.etcd_endpoint.trim_start_matches("http://")).await,
            redis: Link::to(c.redis_url.trim_start_matches("redis://")).await,
        };
        c.env = vec![
            (
                "AX_ETCD_ENDPOINTS",
                format!("http://127.0.0.1:{}", links.etcd.port),
            ),
            (
                "AX_REDIS_URL",
                format!("redis://127.0.0.1:{}", links.redis.port),
            ),
        ];
        (c, Paths::Relays(links))
    } else {
        let mut net = Net::new(2);
        let etcd = EtcdServer::start_on(&net.host(ETCD));
        let redis = RedisServer::start_on(&net.host(REDIS));
        let addrs = net.add(0);
        let mut c = Cluster::on(label, etcd.endpoint(), redis.url()).await;
        c.place = Some((net.exec_in(0), addrs[ETCD].clone()));
        let paths = Paths::Namespace {
            net,
            _etcd: etcd,
            _redis: redis,
        };
        (c, paths)
    };
    c.env.push(("AX_LOG", log));
    c.start_replica("s1", Roles::Scheduler).await;
    assert_eq!(c.wait_for_leader(None, Duration::from_secs(10)).await, "s1");
    c.env.retain(|(k, _)| *k == "AX_LOG");
    c.place = None;
    c.start_replica("s2", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;
    (c, paths)
}

/// Cuts or slows `s1`'s paths as `cut` says (`heal`: undoes it).
fn apply(paths: &Paths, cut: &Cut, heal: bool) {
    match (paths, cut) {
        (Paths::Relays(links), Cut::Slow(d)) => {
            links.redis.slow(if heal { Duration::ZERO } else { *d })
        }
        (Paths::Namespace { net, .. }, cut) => {
            let bridges: &[usize] = match cut {
                Cut::Etcd => &[ETCD],
                Cut::Redis => &[REDIS],
                _ => &[ETCD, REDIS],
            };
            for b in bridges {
                if heal {
                    net.heal(0, *b);
                } else {
                    net.cut(0, *b);
                }
            }
        }
        (Paths::Relays(_), _) => unreachable!("cuts run in namespaces"),
    }
}

async fn scenario(label: &str, cut: Cut, lasts: Duration) -> (Cluster, Seen, Paths) {
    let (mut c, paths) = start(label, &cut).await;
    let first_due = now_ms() + 3000;
    let work = Workload::start(
        &c,
        "part",
        &["default"],
        60,
        first_due,
        Duration::from_secs(20),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(first_due + 3000 - now_ms()).unwrap_or(0),
    ))
    .await;

    let fault_at = now_ms();
    apply(&paths, &cut, false);
    let mut handover_ms = None;
    let until = tokio::time::Instant::now() + lasts;
    while tokio::time::Instant::now() < until {
        if handover_ms.is_none() && c.leader().await.is_some_and(|l| l != "s1") {
            handover_ms = Some(now_ms() - fault_at);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let heal_at = now_ms();
    apply(&paths, &cut, true);

    let figures = work.settle(&c, Duration::from_secs(20), heal_at).await;
    let worst_ms = c
        .receiver
        .executions()
        .iter()
        .filter(|r| r.task_id != "tick")
        .map(|r| r.arrived_at - r.fire_at)
        .max()
        .unwrap();
    eprintln!("partition {label}: handover {handover_ms:?} ms, worst one-shot {worst_ms} ms late, {figures:?}");
    // PART_LOG=debug PART_DEBUG=1 shows s1's whole log.
    if std::env::var("PART_DEBUG").is_ok() {
        eprintln!("{}", c.replica("s1").log_text());
    }
    figures.assert_clean(label);
    c.assert_running(&["s1", "s2", "w1"]);
    (
        c,
        Seen {
            handover_ms,
            worst_ms,
        },
        paths,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_from_redis_gives_way_to_a_replica_that_can_reach_it() {
    let _serial = SERIAL.lock().await;
    let (mut c, seen, _paths) = scenario("part-redis", Cut::Redis, Duration::from_secs(12)).await;
    // The limit (5 s), a check's period and its timeout, then one election.
    let handover = seen.handover_ms.expect("another replica led");
    assert!(handover < 10_000, "s2 led {handover} ms after the cut");
    assert!(
        seen.worst_ms < 15_000,
        "a one-shot ran {} ms late",
        seen.worst_ms
    );
    assert_eq!(
        c.metric(
            "s1",
            "scheduler_leader_step_downs_total{reason=\"redis_unreachable\"}"
        )
        .await,
        Some(1.0)
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_from_etcd_stops_and_another_leads_within_the_lease() {
    let _serial = SERIAL.lock().await;
    let (mut c, seen, _paths) = scenario("part-etcd", Cut::Etcd, Duration::from_secs(10)).await;
    // The lease's TTL (2 s here), then one election.
    let handover = seen.handover_ms.expect("another replica led");
    assert!(handover < 8_000, "s2 led {handover} ms after the cut");
    assert!(
        seen.worst_ms < 12_000,
        "a one-shot ran {} ms late",
        seen.worst_ms
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_from_everything_is_replaced_and_rejoins_after_the_heal() {
    let _serial = SERIAL.lock().await;
    let (mut c, seen, _paths) = scenario("part-all", Cut::All, Duration::from_secs(10)).await;
    let handover = seen.handover_ms.expect("another replica led");
    assert!(handover < 8_000, "s2 led {handover} ms after the cut");
    // Healed, s1 is ready again and stands by: s2 keeps leading.
    assert_eq!(c.leader().await.as_deref(), Some("s2"));
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_link_to_redis_slows_the_leader_but_does_not_depose_it() {
    let _serial = SERIAL.lock().await;
    // 150 ms each way: a round trip of 300 ms, three times the events' period.
    let slow = Cut::Slow(Duration::from_millis(150));
    let (mut c, seen, _paths) = scenario("part-slow", slow, Duration::from_secs(10)).await;
    assert_eq!(
        seen.handover_ms, None,
        "slow is not silent: s1 kept leading"
    );
    assert!(
        seen.worst_ms < 2_000,
        "a one-shot ran {} ms late",
        seen.worst_ms
    );
    assert_eq!(
        c.metric(
            "s1",
            "scheduler_leader_step_downs_total{reason=\"redis_unreachable\"}"
        )
        .await,
        Some(0.0)
    );
    c.clean_up().await;
}
