//! The etcd-cluster suite: two `ax serve` replicas against a 3-member etcd cluster, one
//! member failure at a time, while every-second tasks fire. Run by `scripts/etcd-cluster.sh`,
//! which starts a fresh cluster for each scenario (`ax_start_etcd_cluster` in
//! `scripts/servers.sh`) and hands it over as `AX_TEST_ETCD_CLUSTER` (the client URLs) and
//! `AX_TEST_ETCD_CLUSTER_PIDS` (the members' process ids, same order); the target has
//! `test = false`, so a plain `cargo test` neither runs nor skips it. For the partition
//! scenario the members run in network namespaces of their own, each joined to a bridge by a
//! veth link: `AX_TEST_ETCD_CLUSTER_LINKS` (the links, same order) and
//! `AX_TEST_ETCD_CLUSTER_BRIDGE` say where to cut and heal.
//!
//! Besides the scenarios with replicas, two tests drive the pieces alone on the cluster: the
//! member probes of a replica (`a_hung_member_gets_no_requests_once_noticed`) and a standby
//! candidate waiting through a hung member (`a_standby_watching_through_a_hung_member_...`).
//!
//! Every scenario checks that each due slot of each task ran exactly once between the fault
//! and the end (the tasks use `misfire: fire_all`, so a slot a stalled leader missed is still
//! owed), that no execution id ran twice, and that both replicas still run; it prints one
//! `etcd-cluster:` line with the longest gap between two executions around the fault, which
//! must stay near the tasks' one second. `AX_TEST_LOG=info AX_TEST_PRINT_LOGS=1` prints what
//! the replicas logged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ax::config::Config;
use ax_control::connect::{connect_etcd, etcd_connect_options};
use ax_control::endpoints::{endpoint_url, watch_endpoints};
use ax_election::{Candidate, ElectionConfig};
use etcd_client::{Client, GetOptions};
use harness::{now_ms, Cluster, Execution, Roles, SERIAL};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The every-second tasks of each scenario.
const TASKS: [&str; 3] = ["t0", "t1", "t2"];

/// How long the tasks fire before the fault, and after it.
const BEFORE: Duration = Duration::from_secs(5);
const AFTER: Duration = Duration::from_secs(15);

/// The longest gap between two executions a scenario accepts (ms).
const MAX_GAP_MS: i64 = 2500;

/// How long each member stays stopped: past the safe window of the default lease (10 s TTL,
/// trusted for 6.7 s after a renewal).
const STOPPED: Duration = Duration::from_secs(10);

/// The cluster the script started.
struct Members {
    endpoints: Vec<String>,
    pids: Vec<u32>,
    /// The members' links and the bridge they join, when they run in namespaces.
    links: Option<(Vec<String>, String)>,
}

impl Members {
    fn from_env() -> Members {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run scripts/etcd-cluster.sh, which starts the cluster")
            })
        };
        let endpoints: Vec<String> = var("AX_TEST_ETCD_CLUSTER")
            .split(',')
            .map(str::to_owned)
            .collect();
        let pids: Vec<u32> = var("AX_TEST_ETCD_CLUSTER_PIDS")
            .split(',')
            .map(|p| p.parse().unwrap())
            .collect();
        assert_eq!(endpoints.len(), 3, "a 3-member cluster");
        assert_eq!(pids.len(), 3, "a 3-member cluster");
        let links = std::env::var("AX_TEST_ETCD_CLUSTER_LINKS")
            .ok()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let links: Vec<String> = l.split(',').map(str::to_owned).collect();
                assert_eq!(links.len(), 3, "a link per member");
                (links, var("AX_TEST_ETCD_CLUSTER_BRIDGE"))
            });
        Members {
            endpoints,
            pids,
            links,
        }
    }

    /// Cuts member `i` off the bridge (`heal: false`: from its peers and every client at
    /// once, frames dropped both ways, no reset) or joins it again.
    fn set_cut(&self, i: usize, cut: bool) {
        let (links, bridge) = self.links.as_ref().expect(
            "the members do not run in namespaces: scripts/etcd-cluster.sh starts them so for \
             a scenario named *partition*",
        );
        let args: Vec<&str> = if cut {
            vec!["link", "set", &links[i], "nomaster"]
        } else {
            vec!["link", "set", &links[i], "master", bridge]
        };
        let status = std::process::Command::new("ip")
            .args(&args)
            .status()
            .expect("run ip");
        assert!(status.success(), "ip {args:?} failed");
    }

    /// A client of the members other than `i`.
    async fn client_without(&self, i: usize) -> Client {
        let others: Vec<&str> = (0..3)
            .filter(|j| *j != i)
            .map(|j| self.endpoints[j].as_str())
            .collect();
        Client::connect(others, None).await.unwrap()
    }

    /// The index of the member that leads the etcd cluster. A member that refuses the
    /// connection is asked again for a while: the script's health check passes before every
    /// member accepts clients steadily (seen once: refused 0.1 s after a healthy cluster).
    async fn leader(&self) -> usize {
        for (i, endpoint) in self.endpoints.iter().enumerate() {
            let status = Self::status(endpoint).await;
            if status.header().map(|h| h.member_id()) == Some(status.leader()) {
                return i;
            }
        }
        panic!("no member leads the etcd cluster");
    }

    /// One member's status, retried for up to 10 s.
    async fn status(endpoint: &str) -> etcd_client::StatusResponse {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = match Client::connect([endpoint], None).await {
                Ok(mut client) => client.status().await,
                Err(e) => Err(e),
            };
            match answer {
                Ok(status) => return status,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    panic!("etcd member {endpoint} did not answer for 10 s: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Each member's open lease keep-alive and watch streams, from its `/metrics`.
    async fn open_streams(&self) -> Vec<i64> {
        let mut counts = Vec::new();
        for endpoint in &self.endpoints {
            let text = reqwest::get(format!("{endpoint}/metrics"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let mut open = 0i64;
            for line in text.lines() {
                let Some((series, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                if !(series.contains("grpc_method=\"LeaseKeepAlive\"")
                    || series.contains("grpc_service=\"etcdserverpb.Watch\""))
                {
                    continue;
                }
                // Counters of whole streams, printed as floats.
                let n = value.parse::<f64>().unwrap_or(0.0) as i64;
                if series.starts_with("grpc_server_started_total{") {
                    open += n;
                } else if series.starts_with("grpc_server_handled_total{") {
                    open -= n;
                }
            }
            counts.push(open);
        }
        counts
    }

    /// The endpoints, `first` in front (the others in their order).
    fn with_first(&self, first: usize) -> String {
        let mut list = vec![self.endpoints[first].clone()];
        list.extend(
            self.endpoints
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != first)
                .map(|(_, e)| e.clone()),
        );
        list.join(",")
    }
}

/// What a scenario measured.
#[derive(Debug)]
struct Figures {
    /// Slots due in the window that never ran.
    lost: usize,
    /// Slots that ran more than once.
    doubled: usize,
    /// Execution ids seen more than once.
    repeated_ids: usize,
    /// Slots run in the window.
    ran: usize,
    /// The longest time between two executions arriving, from the fault to the end (ms).
    gap_ms: i64,
    /// The latest arrival after its due time, from the fault to the end (ms).
    worst_late_ms: i64,
}

impl Figures {
    /// The slots due from `from` to `to` (ms), each task's slots a whole second apart.
    fn of(runs: &[Execution], from: i64, to: i64) -> Figures {
        let mut per_task: HashMap<&str, BTreeMap<i64, usize>> = HashMap::new();
        let mut ids: HashMap<&str, usize> = HashMap::new();
        for r in runs {
            *ids.entry(r.execution_id.as_str()).or_default() += 1;
            *per_task
                .entry(r.task_id.as_str())
                .or_default()
                .entry(r.fire_at)
                .or_default() += 1;
        }
        let (mut lost, mut doubled, mut ran) = (0, 0, 0);
        for task in TASKS {
            let slots = per_task.get(task).cloned().unwrap_or_default();
            // The task's phase: any slot it ran before the window.
            let phase = slots
                .keys()
                .next()
                .copied()
                .unwrap_or(from)
                .rem_euclid(1000);
            let mut due = from - from.rem_euclid(1000) + phase;
            if due < from {
                due += 1000;
            }
            while due <= to {
                match slots.get(&due) {
                    None => lost += 1,
                    Some(n) => {
                        ran += 1;
                        if *n > 1 {
                            doubled += 1;
                        }
                    }
                }
                due += 1000;
            }
        }
        let mut arrivals: Vec<i64> = runs
            .iter()
            .filter(|r| r.fire_at >= from - 1000 && r.fire_at <= to)
            .map(|r| r.arrived_at)
            .collect();
        arrivals.sort_unstable();
        let gap_ms = arrivals
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(i64::MAX);
        let worst_late_ms = runs
            .iter()
            .filter(|r| r.fire_at >= from && r.fire_at <= to)
            .map(|r| r.arrived_at - r.fire_at)
            .max()
            .unwrap_or(0);
        Figures {
            lost,
            doubled,
            repeated_ids: ids.values().filter(|n| **n > 1).count(),
            ran,
            gap_ms,
            worst_late_ms,
        }
    }
}

/// The leading replica, read by the test's own client: a plain etcd client sends some of
/// its requests to a dead member, which fail at once, so it tries a few times.
async fn leader_despite_the_fault(c: &Cluster) -> Option<String> {
    for _ in 0..20 {
        if let Ok(resp) = c
            .etcd
            .clone()
            .get(format!("{}/leader", c.prefix), None)
            .await
        {
            let kv = resp.kvs().first()?;
            let value: serde_json::Value = serde_json::from_slice(kv.value()).ok()?;
            return Some(value.get("instance_id")?.as_str()?.to_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("cannot read the leader key");
}

/// Which member a scenario fails, and how.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL the member that leads the etcd cluster.
    KillEtcdLeader,
    /// SIGKILL the member that carries most of the leading replica's streams (lease
    /// keep-alives and watches): the client spreads them over all endpoints at random, so the
    /// member is found from the members' own counts of open streams.
    KillLeadersMember,
    /// SIGSTOP each member in turn (hung, not dead), each for `STOPPED`: whichever members
    /// carry the replicas' lease keep-alive and watch streams, each hangs once.
    StopEachMember,
    /// Partition the member that leads the etcd cluster from its peers and from every client
    /// for `STOPPED`, then heal: unlike a stop it keeps running, believes it leads until it
    /// misses its quorum, and must catch up after. A one-shot is registered through the
    /// majority meanwhile.
    PartitionEtcdLeader,
}

async fn scenario(name: &str, fault: Fault) {
    let _serial = SERIAL.lock().await;
    let members = Members::from_env();
    let etcd_leader = members.leader().await;
    // The member to fail, when known before the replicas start, comes first in their
    // endpoints (all three are always listed).
    let first = match fault {
        Fault::KillEtcdLeader | Fault::PartitionEtcdLeader => etcd_leader,
        // A follower: the leader's own failure is the first scenario.
        Fault::StopEachMember => (etcd_leader + 1) % 3,
        Fault::KillLeadersMember => 0,
    };
    let mut c = Cluster::on(
        "etcd-cluster",
        members.with_first(first),
        ax_testkit::redis_url(),
    )
    .await;
    // The default lease: what a deployment runs with.
    c.env.push(("AX_LEASE_TTL", "10s".to_owned()));
    if let Ok(level) = std::env::var("AX_TEST_LOG") {
        c.env.push(("AX_LOG", level));
    }
    let streams_before = members.open_streams().await;
    // r1 alone first, so that it leads and the streams it opens are told apart.
    c.start_replica("r1", Roles::Both).await;
    let ax_leader = c.wait_for_leader(None, Duration::from_secs(15)).await;
    assert_eq!(ax_leader, "r1");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let streams_of_r1: Vec<i64> = members
        .open_streams()
        .await
        .iter()
        .zip(&streams_before)
        .map(|(after, before)| after - before)
        .collect();
    let victim = match fault {
        Fault::KillLeadersMember => (0..3).max_by_key(|i| streams_of_r1[*i]).unwrap(),
        _ => first,
    };
    c.start_replica("r2", Roles::Both).await;
    for task in TASKS {
        let spec = json!({
            "handler": "http",
            "schedule": { "every": "1s" },
            "misfire": "fire_all",
            "overlap": "allow",
            "http": { "url": c.receiver.exec_url() },
            "timeout": "20s",
            "retry": { "max_retries": 0 },
        });
        c.put_task("ec", task, &spec).await;
    }
    tokio::time::sleep(BEFORE).await;
    let pid = members.pids[victim];
    let at = now_ms();
    match fault {
        Fault::KillEtcdLeader | Fault::KillLeadersMember => {
            ax_testkit::signal(pid, "KILL");
            tokio::time::sleep(AFTER).await;
        }
        Fault::PartitionEtcdLeader => {
            partition(&mut c, &members, victim).await;
            tokio::time::sleep(AFTER - STOPPED).await;
        }
        Fault::StopEachMember => {
            for pid in &members.pids {
                ax_testkit::signal(*pid, "STOP");
                tokio::time::sleep(STOPPED).await;
                ax_testkit::signal(*pid, "CONT");
                // The cluster settles (a stopped leader is replaced) before the next stop.
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    let end = now_ms();
    // Slots due up to the end that run late (after a stall) still count.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs = c.receiver.executions();
    let f = Figures::of(&runs, at, end - 2000);
    let after = leader_despite_the_fault(&c).await;
    println!(
        "etcd-cluster: {name}: ran {}, lost {}, doubled {}, repeated executions {}; longest gap \
         between executions {} ms, worst lateness {} ms; ax leader {ax_leader} before, {after:?} \
         after; member {victim} failed, r1's streams per member {streams_of_r1:?}",
        f.ran, f.lost, f.doubled, f.repeated_ids, f.gap_ms, f.worst_late_ms
    );
    // The replicas' own account (failing tests print the tails of their logs anyway).
    if std::env::var_os("AX_TEST_PRINT_LOGS").is_some() {
        for id in ["r1", "r2"] {
            println!("---- log of {id} ----\n{}", c.replica(id).log_text());
        }
    }
    if matches!(fault, Fault::StopEachMember) {
        // Two members answered all along: no lease (leadership, instance record) may have
        // been given up for want of an answer from the hung one.
        for id in ["r1", "r2"] {
            let log = c.replica(id).log_text();
            assert!(
                !log.contains("no lease renewal confirmed in time"),
                "{name}: replica {id} gave up a lease renewed through a hung member"
            );
        }
    }
    assert_eq!(f.lost, 0, "{name}: slots lost: {f:?}");
    assert_eq!(f.doubled, 0, "{name}: slots run twice: {f:?}");
    assert_eq!(f.repeated_ids, 0, "{name}: executions run twice: {f:?}");
    // Firing goes through Redis: one member failing must not stall it (the tasks fire every
    // second, so gaps between executions are about a second).
    assert!(
        f.gap_ms <= MAX_GAP_MS,
        "{name}: firing stalled for {} ms: {f:?}",
        f.gap_ms
    );
    if matches!(fault, Fault::PartitionEtcdLeader) {
        after_the_heal(&mut c, &members, victim).await;
    }
    c.assert_running(&["r1", "r2"]);
    // The etcd cluster is this scenario's own, and goes with it: no keys to remove.
}

/// The one-shot registered while a member is partitioned.
const ONCE: &str = "once";

/// Cuts member `victim` for `STOPPED`, registering a one-shot through the majority meanwhile;
/// the test's own client then stays on the majority until the checks after the heal.
async fn partition(c: &mut Cluster, members: &Members, victim: usize) {
    members.set_cut(victim, true);
    c.etcd = members.client_without(victim).await;
    let due = now_ms() + 5000;
    let spec = json!({
        "handler": "http",
        "schedule": { "at": harness::rfc3339(due) },
        "http": { "url": c.receiver.exec_url() },
        "timeout": "20s",
        "retry": { "max_retries": 0 },
    });
    // The majority elects a leader of its own first: until then a put fails at once
    // ("leader changed") or waits, so it is tried again.
    let key = format!("{}/tasks/ec/{ONCE}", c.prefix);
    let mut tries = 0;
    loop {
        let put = c.etcd.put(key.as_str(), spec.to_string(), None);
        match tokio::time::timeout(Duration::from_secs(2), put).await {
            Ok(Ok(_)) => break,
            failed if tries >= 10 => panic!("cannot register through the majority: {failed:?}"),
            _ => tries += 1,
        }
    }
    tokio::time::sleep(STOPPED).await;
    members.set_cut(victim, false);
}

/// After a partition's heal: the one-shot registered meanwhile ran once, and the member that
/// was cut, asked alone, serves every task's state as the majority wrote it.
async fn after_the_heal(c: &mut Cluster, members: &Members, victim: usize) {
    let once = c.receiver.executions_of(ONCE);
    assert_eq!(
        once.len(),
        1,
        "the one-shot registered during the cut: {once:?}"
    );
    let majority: HashMap<String, serde_json::Value> = c.states("ec").await;
    assert_eq!(
        majority
            .get(ONCE)
            .and_then(|s| s.get("status"))
            .and_then(|s| s.as_str()),
        Some("SUCCESS"),
        "the one-shot's state: {majority:?}"
    );
    c.etcd = Client::connect([members.endpoints[victim].as_str()], None)
        .await
        .unwrap();
    harness::wait_until(
        Duration::from_secs(15),
        "the healed member's states",
        || async {
            // A member still catching up answers a linearizable read late or not at all.
            let read = tokio::time::timeout(Duration::from_secs(2), c.states("ec")).await;
            let Ok(states) = read else { return false };
            [ONCE]
                .iter()
                .chain(TASKS.iter())
                .all(|t| states.contains_key(*t))
                && states.get(ONCE) == majority.get(ONCE)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_partition() {
    scenario("etcd leader partitioned", Fault::PartitionEtcdLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_sigkill() {
    scenario("etcd leader SIGKILL", Fault::KillEtcdLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_member_sigkill() {
    scenario(
        "SIGKILL of the member with the ax leader's streams",
        Fault::KillLeadersMember,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_sigstop() {
    scenario("each member SIGSTOP in turn", Fault::StopEachMember).await;
}

/// The endpoint watch of a replica leaves a hung member out of the client's channel: once it
/// noticed (a probe round and its timeout), no request waits on that member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_member_gets_no_requests_once_noticed() {
    let _serial = SERIAL.lock().await;
    let members = Members::from_env();
    let mut config = Config::default();
    config.etcd.endpoints = members.endpoints.clone();
    let client = connect_etcd(&config.cluster()).await.unwrap();
    let key = "/etcd-cluster-probe".to_owned();
    let cancel = CancellationToken::new();
    let watch = tokio::spawn(watch_endpoints(
        client.clone(),
        members
            .endpoints
            .iter()
            .map(|e| endpoint_url(e, false))
            .collect(),
        etcd_connect_options(&config.cluster()).unwrap(),
        key.clone(),
        config.etcd.timeout,
        cancel.clone(),
    ));
    // A follower: the cluster keeps its leader, so every other member answers throughout.
    let victim = (members.leader().await + 1) % 3;
    ax_testkit::signal(members.pids[victim], "STOP");
    // A probe round (1 s) and its timeout (1 s), with room to spare.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut kv = client.kv_client();
    let requests = 30;
    let mut unanswered = 0;
    for _ in 0..requests {
        let get = kv.get(key.as_str(), Some(GetOptions::new().with_count_only()));
        if !matches!(
            tokio::time::timeout(Duration::from_secs(1), get).await,
            Ok(Ok(_))
        ) {
            unanswered += 1;
        }
    }
    ax_testkit::signal(members.pids[victim], "CONT");
    cancel.cancel();
    watch.await.unwrap();
    println!(
        "etcd-cluster: hung member: {unanswered} of {requests} requests unanswered within 1 s, \
         3 s after it stopped"
    );
    assert_eq!(unanswered, 0, "requests still sent to the hung member");
}

/// A standby whose wait on the leader key goes through a member that then hangs still
/// notices the leader resign: its watch is asked for progress and, unanswered, opened anew
/// through a member that answers (as the replica's probes leave the hung one out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_watching_through_a_hung_member_still_takes_over() {
    let _serial = SERIAL.lock().await;
    let members = Members::from_env();
    let election = ElectionConfig {
        prefix: "/etcd-cluster-standby".to_owned(),
        ttl: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
    };
    let options = etcd_connect_options(&Config::default().cluster()).unwrap();
    let holder_client = Client::connect(&members.endpoints, Some(options.clone()))
        .await
        .unwrap();
    let standby_client = Client::connect(&members.endpoints, Some(options))
        .await
        .unwrap();
    // A follower: the cluster keeps its leader, so the other members answer throughout.
    let hung = (members.leader().await + 1) % 3;
    let url = |i: usize| endpoint_url(&members.endpoints[i], false);
    let others: Vec<usize> = (0..3).filter(|i| *i != hung).collect();
    // The holder never uses the member that will hang; the standby uses it alone, so its
    // watch on the leader key goes through it.
    holder_client.remove_endpoint(url(hung)).await.unwrap();
    for i in &others {
        standby_client.remove_endpoint(url(*i)).await.unwrap();
    }
    let holder = Candidate::new(holder_client, election.clone(), "holder", json!({})).unwrap();
    let leadership = holder.campaign(&CancellationToken::new()).await.unwrap();
    let standby = Candidate::new(
        standby_client.clone(),
        election.clone(),
        "standby",
        json!({}),
    )
    .unwrap();
    let cancel = CancellationToken::new();
    let campaign = tokio::spawn({
        let cancel = cancel.clone();
        async move { standby.campaign(&cancel).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!campaign.is_finished(), "the standby waits");
    ax_testkit::signal(members.pids[hung], "STOP");
    for i in &others {
        standby_client.add_endpoint(url(*i)).await.unwrap();
    }
    standby_client.remove_endpoint(url(hung)).await.unwrap();
    let resigned = std::time::Instant::now();
    leadership.resign().await.unwrap();
    let won = tokio::time::timeout(Duration::from_secs(30), campaign).await;
    let took = resigned.elapsed();
    ax_testkit::signal(members.pids[hung], "CONT");
    cancel.cancel();
    println!(
        "etcd-cluster: a standby watching through a hung member led {} ms after the \
         resignation (lease TTL 2 s)",
        took.as_millis()
    );
    let lead = won
        .expect("the standby never led")
        .unwrap()
        .expect("campaign failed");
    assert_eq!(lead.instance_id(), "standby");
    // Progress asked every TTL/3 (667 ms) and given up after 500 ms, then a new attempt.
    assert!(
        took < Duration::from_secs(4),
        "the standby noticed the resignation only after {took:?}"
    );
}
