//! The etcd-cluster suite: two `ax serve` replicas against a 3-member etcd cluster, one
//! member failure at a time, while every-second tasks fire. Run by `scripts/etcd-cluster.sh`,
//! which starts a fresh cluster for each scenario (`ax_start_etcd_cluster` in
//! `scripts/servers.sh`) and hands it over as `AX_TEST_ETCD_CLUSTER` (the client URLs) and
//! `AX_TEST_ETCD_CLUSTER_PIDS` (the members' process ids, same order); the target has
//! `test = false`, so a plain `cargo test` neither runs nor skips it.
//!
//! Every scenario checks that each due slot of each task ran exactly once between the fault
//! and the end (the tasks use `misfire: fire_all`, so a slot a stalled leader missed is still
//! owed), that no execution id ran twice, and that both replicas still run; it prints one
//! `etcd-cluster:` line with the longest gap between two executions around the fault.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use etcd_client::Client;
use harness::{now_ms, Cluster, Execution, Roles, SERIAL};
use serde_json::json;

/// The every-second tasks of each scenario.
const TASKS: [&str; 3] = ["t0", "t1", "t2"];

/// How long the tasks fire before the fault, and after it.
const BEFORE: Duration = Duration::from_secs(5);
const AFTER: Duration = Duration::from_secs(15);

/// How long each member stays stopped: past the safe window of the default lease (10 s TTL,
/// trusted for 6.7 s after a renewal).
const STOPPED: Duration = Duration::from_secs(10);

/// The cluster the script started.
struct Members {
    endpoints: Vec<String>,
    pids: Vec<u32>,
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
        Members { endpoints, pids }
    }

    /// The index of the member that leads the etcd cluster.
    async fn leader(&self) -> usize {
        for (i, endpoint) in self.endpoints.iter().enumerate() {
            let mut client = Client::connect([endpoint], None).await.unwrap();
            let status = client.status().await.unwrap();
            if status.header().map(|h| h.member_id()) == Some(status.leader()) {
                return i;
            }
        }
        panic!("no member leads the etcd cluster");
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

/// Which member a scenario fails, and how.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL the member that leads the etcd cluster.
    KillEtcdLeader,
    /// SIGKILL the member first in the leading replica's endpoints.
    KillFirstEndpoint,
    /// SIGSTOP each member in turn (hung, not dead), each for `STOPPED`: whichever members
    /// carry the replicas' lease keep-alive and watch streams, each hangs once.
    StopEachMember,
}

async fn scenario(name: &str, fault: Fault) {
    let _serial = SERIAL.lock().await;
    let members = Members::from_env();
    let etcd_leader = members.leader().await;
    // The member to fail comes first in every replica's endpoints.
    let victim = match fault {
        Fault::KillEtcdLeader => etcd_leader,
        // A follower: the leader's own failure is the first scenario.
        Fault::KillFirstEndpoint | Fault::StopEachMember => (etcd_leader + 1) % 3,
    };
    let endpoints = members.with_first(victim);
    let mut c = Cluster::on("etcd-cluster", endpoints, ax_testkit::redis_url()).await;
    // The default lease: what a deployment runs with.
    c.env.push(("AX_LEASE_TTL", "10s".to_owned()));
    c.start_replica("r1", Roles::Both).await;
    c.start_replica("r2", Roles::Both).await;
    let ax_leader = c.wait_for_leader(None, Duration::from_secs(15)).await;
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
        Fault::KillEtcdLeader | Fault::KillFirstEndpoint => {
            ax_testkit::signal(pid, "KILL");
            tokio::time::sleep(AFTER).await;
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
    let after = c.leader().await;
    println!(
        "etcd-cluster: {name}: ran {}, lost {}, doubled {}, repeated executions {}; longest gap \
         between executions {} ms, worst lateness {} ms; ax leader {ax_leader} before, {after:?} after",
        f.ran, f.lost, f.doubled, f.repeated_ids, f.gap_ms, f.worst_late_ms
    );
    assert_eq!(f.lost, 0, "{name}: slots lost: {f:?}");
    assert_eq!(f.doubled, 0, "{name}: slots run twice: {f:?}");
    assert_eq!(f.repeated_ids, 0, "{name}: executions run twice: {f:?}");
    c.assert_running(&["r1", "r2"]);
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_leader_sigkill() {
    scenario("etcd leader SIGKILL", Fault::KillEtcdLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_endpoint_sigkill() {
    scenario("first endpoint SIGKILL", Fault::KillFirstEndpoint).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_sigstop() {
    scenario("each member SIGSTOP in turn", Fault::StopEachMember).await;
}
