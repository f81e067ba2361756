//! The Redis Cluster suite: real `ax serve` processes whose queues live on a local Redis
//! Cluster (3 primaries, 1 replica each, a node timeout of 1 s), the one that
//! `AX_TEST_REDIS_CLUSTER` names. Run by `scripts/cluster.sh`, which starts that cluster (the
//! target has `test = false`: a plain `cargo test` neither runs nor skips it). Without the
//! variable the tests fail.
//!
//! The workload: one-shot tasks over four queues (so that the queues' keys, the event stream
//! and the histories land on different primaries) and a periodic task. Each scenario checks
//! that every one-shot ran exactly once, no execution ran twice and the periodic task keeps
//! running, and prints one `cluster:` line with its figures. One scenario puts the one-shots
//! on a partitioned queue instead, whose partitions spread over the primaries; another has
//! three replicas share the scheduling shards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::time::{Duration, Instant};

use harness::{now_ms, Cluster, Roles, Workload, SERIAL};

/// The queues the tasks are spread over (and every worker serves).
const QUEUES: [&str; 4] = ["default", "q1", "q2", "q3"];

fn nodes() -> Vec<String> {
    ax_testkit::redis_cluster_nodes().expect(
        "AX_TEST_REDIS_CLUSTER is not set: this suite needs a Redis Cluster; run it with \
         scripts/cluster.sh, which starts one",
    )
}

/// A test corner whose replicas use the cluster.
async fn on_the_cluster(label: &str) -> Cluster {
    let mut c = Cluster::new(label).await;
    c.env.push(("AX_REDIS_CLUSTER_NODES", nodes().join(",")));
    c.env.push(("AX_WORKER_QUEUES", QUEUES.join(",")));
    c
}

async fn redis(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// One line of `CLUSTER NODES`: a primary's address and the slot ranges it serves.
struct Primary {
    addr: String,
    ranges: Vec<(u16, u16)>,
}

/// The primaries the cluster's nodes agree on, as the node at `url` sees them (failed ones
/// left out).
async fn primaries(url: &str) -> Vec<Primary> {
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut redis(url).await)
        .await
        .unwrap();
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = *f.get(2)?;
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let addr = f.get(1)?.split('@').next()?.to_owned();
            let ranges = f[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .filter_map(|r| match r.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => r.parse().ok().map(|s| (s, s)),
                })
                .collect();
            Some(Primary { addr, ranges })
        })
        .collect()
}

/// The address of the primary serving `slot`, as the node at `url` sees it.
async fn primary_of(url: &str, slot: u16) -> Option<String> {
    primaries(url)
        .await
        .into_iter()
        .find(|p| p.ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
        .map(|p| p.addr)
}

/// A node that answers (an earlier scenario may have killed one).
async fn live_node() -> String {
    for url in nodes() {
        if let Ok(client) = redis::Client::open(url.as_str()) {
            if client.get_multiplexed_async_connection().await.is_ok() {
                return url;
            }
        }
    }
    panic!("no node of the Redis Cluster answers");
}

/// How many primaries hold keys under `prefix`.
async fn primaries_holding(prefix: &str) -> usize {
    let mut n = 0;
    for p in primaries(&live_node().await).await {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{prefix}*"))
            .query_async(&mut redis(&format!("redis://{}", p.addr)).await)
            .await
            .unwrap();
        n += usize::from(!keys.is_empty());
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_over_four_queues_run_exactly_once_on_a_cluster() {
    let _serial = SERIAL.lock().await;
    let mut c = on_the_cluster("cluster-once").await;
    for id in ["r1", "r2"] {
        c.start_replica(id, Roles::Both).await;
    }
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let f = two_hundred_one_shots(&c).await;
    let spread = primaries_holding(&c.redis_prefix).await;
    println!(
        "cluster: 200 one-shots over 4 queues, 2 replicas: lost {}, duplicated {}, repeated \
         executions {}; keys on {spread} of 3 primaries",
        f.lost, f.duplicated, f.repeated_ids
    );
    f.assert_clean("exactly once on a cluster");
    assert!(spread >= 2, "the keys are on {spread} primary: not spread");
    // The history the workers wrote (a task's list and the stream across tasks, each in a
    // slot of its own) reads back through the cluster.
    let cfg = ax_queue::QueueConfig {
        prefix: c.redis_prefix.clone(),
        ..ax_queue::QueueConfig::default()
    };
    let q = ax_queue::Queue::connect_cluster(&nodes(), cfg)
        .await
        .unwrap();
    assert_eq!(q.history("cluster", "o000", 10).await.unwrap().len(), 1);
    let page = q
        .executions(&ax_queue::ExecutionFilter::default(), None, 500, 10_000)
        .await
        .unwrap();
    assert!(
        page.items.len() >= 200,
        "{} attempts in the history",
        page.items.len()
    );
    c.assert_running(&["r1", "r2"]);
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_scheduling_on_a_cluster_runs_each_fire_once() {
    let _serial = SERIAL.lock().await;
    let mut c = on_the_cluster("cluster-shards").await;
    c.env.push(("AX_SHARDS", "8".to_owned()));
    for id in ["r1", "r2", "r3"] {
        c.start_replica(id, Roles::Both).await;
    }
    c.wait_for_shards(8, &["r1", "r2", "r3"], Duration::from_secs(15))
        .await;
    let f = two_hundred_one_shots(&c).await;
    // Each shard's fences sit with its queues; its event stream has a slot of its own.
    let streams: std::collections::BTreeSet<String> = {
        let keys = ax_queue::Keys::new(c.redis_prefix.clone());
        let node = live_node().await;
        let mut primaries = std::collections::BTreeSet::new();
        for shard in 0..8 {
            let slot = ax_queue::slot(keys.events(Some(shard)).as_bytes());
            primaries.insert(primary_of(&node, slot).await.unwrap());
        }
        primaries
    };
    println!(
        "cluster: 200 one-shots over 4 queues, 3 replicas sharing 8 shards: lost {}, duplicated \
         {}, repeated executions {}; the shards' event streams on {} of 3 primaries",
        f.lost,
        f.duplicated,
        f.repeated_ids,
        streams.len()
    );
    f.assert_clean("sharded scheduling on a cluster");
    assert!(streams.len() >= 2, "the shards' streams are on one primary");
    c.assert_running(&["r1", "r2", "r3"]);
    c.clean_up().await;
}

/// 200 one-shots over [`QUEUES`] due within 6 s, and the periodic task: their figures once
/// settled.
async fn two_hundred_one_shots(c: &Cluster) -> harness::Figures {
    let started = now_ms();
    let w = Workload::start(
        c,
        "cluster",
        &QUEUES,
        200,
        started + 1500,
        Duration::from_secs(6),
    )
    .await;
    w.settle(c, Duration::from_secs(15), started).await
}

/// A partitioned queue on the cluster: `hot` in eight partitions, each in a slot of its own,
/// spread over the primaries; every one-shot on it runs exactly once with two replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_spreads_over_the_primaries_and_runs_exactly_once() {
    const PARTS: u32 = 8;
    let _serial = SERIAL.lock().await;
    let mut c = on_the_cluster("cluster-part").await;
    c.env
        .push(("AX_REDIS_QUEUE_PARTITIONS", format!("hot={PARTS}")));
    c.env.push(("AX_WORKER_QUEUES", "default,hot".to_owned()));
    for id in ["r1", "r2"] {
        c.start_replica(id, Roles::Both).await;
    }
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let started = now_ms();
    let w = Workload::start(
        &c,
        "part",
        &["hot"],
        200,
        started + 1500,
        Duration::from_secs(6),
    )
    .await;
    let f = w.settle(&c, Duration::from_secs(15), started).await;
    let cfg = ax_queue::QueueConfig {
        prefix: c.redis_prefix.clone(),
        partitions: std::collections::BTreeMap::from([("hot".to_owned(), PARTS)]),
        ..ax_queue::QueueConfig::default()
    };
    let q = ax_queue::Queue::connect_cluster(&nodes(), cfg)
        .await
        .unwrap();
    // The leader raised every partition's fence; the partitions' primaries.
    let node = live_node().await;
    let mut on = std::collections::BTreeSet::new();
    for p in q.physical_queues("hot") {
        assert!(q.fence(&p, None).await.unwrap() > 0, "{p} has no fence");
        let slot = ax_queue::slot(q.keys().queued(&p).as_bytes());
        on.insert(primary_of(&node, slot).await.unwrap());
    }
    println!(
        "cluster: 200 one-shots on a queue of {PARTS} partitions, 2 replicas: lost {}, \
         duplicated {}, repeated executions {}; partitions on {} of 3 primaries",
        f.lost,
        f.duplicated,
        f.repeated_ids,
        on.len()
    );
    f.assert_clean("exactly once on a partitioned queue");
    // Eight partitions on one primary of three: a chance of 3 in 6561.
    assert!(on.len() >= 2, "every partition on one primary");
    let stats = q
        .stats("hot", ax_scheduler_core::UtcMillis::now())
        .await
        .unwrap();
    assert_eq!((stats.ready, stats.dead), (0, 0));
    c.assert_running(&["r1", "r2"]);
    c.clean_up().await;
}

/// A Redis node's process id and config file (`scripts/servers.sh` starts each node from a
/// file of its own, so it can be started again as it was).
async fn node_process(addr: &str) -> (u32, String) {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut redis(&format!("redis://{addr}")).await)
        .await
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {name} in INFO server"))
            .trim()
            .to_owned()
    };
    let config = field("config_file");
    assert!(
        !config.is_empty(),
        "node {addr} was not started from a config file"
    );
    (field("process_id").parse().unwrap(), config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_sigkilled_mid_run_fails_over_and_ax_keeps_going() {
    let _serial = SERIAL.lock().await;
    let mut c = on_the_cluster("cluster-failover").await;
    // Each enqueue and settle waits until the replica has it: what the failover may lose
    // is then only what had not been acknowledged (see docs/deploy.md).
    c.env.push(("AX_REDIS_REPLICA_ACKS", "1".to_owned()));
    for id in ["r1", "r2", "r3"] {
        c.start_replica(id, Roles::Both).await;
    }
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let w = Workload::start(
        &c,
        "cluster",
        &QUEUES,
        120,
        now_ms() + 1500,
        Duration::from_secs(12),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;

    // The primary of the busiest queue (the periodic task's, and a quarter of the rest).
    let queued = ax_queue::Keys::new(c.redis_prefix.clone()).queued("default");
    let slot = ax_queue::slot(queued.as_bytes());
    let victim = primary_of(&live_node().await, slot).await.unwrap();
    let (pid, config) = node_process(&victim).await;
    let killed_at = now_ms();
    assert!(std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    // Asked of a node that is not the victim: its view names the promoted replica.
    let witness = nodes().into_iter().find(|n| !n.ends_with(&victim)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let promoted = loop {
        match primary_of(&witness, slot).await {
            Some(addr) if addr != victim => break addr,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no replica promoted for slot {slot}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failover_ms = now_ms() - killed_at;

    let f = w.settle(&c, Duration::from_secs(20), now_ms()).await;
    println!(
        "cluster: primary {victim} SIGKILLed (replica_acks 1): {promoted} promoted after \
         {failover_ms} ms; lost {}, duplicated {}, repeated executions {}, periodic runs \
         after {}",
        f.lost, f.duplicated, f.repeated_ids, f.ticks_after
    );
    // The killed node comes back (it rejoins as a replica of the promoted one), so the
    // cluster is whole again for whatever runs next.
    // Daemonized, so it outlives this test like the other nodes (the cluster suite's script
    // stops every node by its port).
    let pidfile = std::path::Path::new(&config).with_file_name("redis.pid");
    let restarted = std::process::Command::new("redis-server")
        .arg(&config)
        .args(["--daemonize", "yes", "--pidfile"])
        .arg(pidfile)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(restarted.success(), "cannot start {victim} again");
    f.assert_clean("primary SIGKILL");
    c.assert_running(&["r1", "r2", "r3"]);
    // A new primary may lack the newest fence: the leader saw the cluster's run id change
    // and raised the fences again.
    assert!(
        c.receiver.has_alert("backend_restarted"),
        "no backend_restarted alert after the failover"
    );
    c.clean_up().await;
}
