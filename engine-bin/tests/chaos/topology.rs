//! Scenarios in the chart's default topology: every replica both a scheduler and a worker,
//! under a load of thousands of fires a second, so a killed leader takes its worker's
//! executions down with it, as it does in production.

use std::collections::BTreeMap;
use std::time::Duration;

use super::harness::{counts, now_ms, wait_until, Cluster, Roles, Workload, SERIAL};
use super::{report, workload};

/// One-shots of the load scenarios, and the span they are due over: 2 000 fires a second.
const LOAD: usize = 10_000;
const LOAD_SPAN: Duration = Duration::from_secs(5);

/// How long after every execution ran each task's state may take to say so: the relay of
/// an end a dead worker left in its queue's end log (5 s old, swept every second, the
/// sweeper key 3 s), plus the leader's read and flush.
const STATE_BOUND: Duration = Duration::from_secs(15);

/// The one-shots whose state is not `SUCCESS`, counted by the status they show.
async fn untrue_states(c: &Cluster, one_shots: &[String]) -> BTreeMap<String, usize> {
    let states = c.states("chaos").await;
    let mut wrong = BTreeMap::new();
    for id in one_shots {
        let status = states
            .get(id)
            .and_then(|s| s["status"].as_str())
            .unwrap_or("(none)");
        if status != "SUCCESS" {
            *wrong.entry(status.to_owned()).or_default() += 1;
        }
    }
    wrong
}

/// Waits up to [`STATE_BOUND`] for every one-shot's state to be `SUCCESS`; returns how long
/// it took and what was still wrong at the end.
async fn states_settle(c: &Cluster, one_shots: &[String]) -> (u128, BTreeMap<String, usize>) {
    let since = std::time::Instant::now();
    loop {
        let wrong = untrue_states(c, one_shots).await;
        if wrong.is_empty() || since.elapsed() > STATE_BOUND {
            return (since.elapsed().as_millis(), wrong);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Three replicas of both roles with `LOAD` one-shots written into etcd while they lead;
/// waits until a third of them ran. Returns the leader.
async fn loaded_default_topology(c: &mut Cluster) -> (String, Workload) {
    for id in ["r1", "r2", "r3"] {
        c.start_replica(id, Roles::Both).await;
    }
    let leader = c.wait_for_leader(None, Duration::from_secs(10)).await;
    let w = workload(c, LOAD, now_ms() + 3000, LOAD_SPAN).await;
    // Into the firing, with executions in every worker's hands: a third of them ran.
    wait_until(
        Duration::from_secs(60),
        "a third of the one-shots ran",
        || {
            let ran = c.receiver.executions().len();
            async move { ran >= LOAD / 3 }
        },
    )
    .await;
    (leader, w)
}

/// Three replicas of both roles, `LOAD` one-shots written into etcd while they lead, and
/// the leader SIGKILLed in the middle of the firing: none lost, every execution ran at
/// least once (twice only for what the killed worker held), and every state ends true.
/// Before each end was recorded with its settle, the ends a killed worker had settled but
/// not yet published were lost, and their one-shots stayed `RUNNING` for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkill_in_the_default_topology_under_load() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-both").await;
    let (leader, w) = loaded_default_topology(&mut c).await;
    let ran_before = c.receiver.executions().len();
    c.replica(&leader).kill();
    let next = c
        .wait_for_leader(Some(&leader), Duration::from_secs(10))
        .await;
    // What the killed worker held comes back after the visibility timeout (30 s).
    let f = w.settle(&c, Duration::from_secs(45), now_ms()).await;
    let (settled_in, wrong) = states_settle(&c, &w.one_shots).await;
    let runs = c.receiver.executions();
    let n = counts(&runs);
    report(
        "leader SIGKILL, default topology, 2 000 fires/s",
        &f,
        &format!(
            "{LOAD} one-shots; {ran_before} had run at the kill; {next} leads; {} ran twice (held by the killed worker); states true {settled_in} ms after the last ran, untrue: {wrong:?}",
            w.one_shots.iter().filter(|id| n.get(*id).is_some_and(|k| *k > 1)).count()
        ),
    );
    assert_eq!(f.lost, 0, "one-shots lost: {f:?}");
    assert!(f.ticks_after > 0, "the periodic task stopped: {f:?}");
    assert_eq!(f.tick_slots_twice, 0, "periodic slots twice: {f:?}");
    assert!(wrong.is_empty(), "one-shot states not SUCCESS: {wrong:?}");
    c.assert_running(&[
        ["r1", "r2", "r3"]
            .into_iter()
            .find(|r| *r != leader && *r != next)
            .unwrap(),
        next.as_str(),
    ]);
    c.clean_up().await;
}

/// As above, the leader SIGSTOPped past its lease instead (its worker stopped with it, the
/// executions it holds frozen), then resumed: a successor leads, the resumed process does
/// not act as leader, what its worker held finishes, and every state ends true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigstop_in_the_default_topology_under_load() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-both-stop").await;
    let (leader, w) = loaded_default_topology(&mut c).await;
    let ran_before = c.receiver.executions().len();
    let pid = c.replica(&leader).pid().unwrap();
    ax_testkit::signal(pid, "STOP");
    let next = c
        .wait_for_leader(Some(&leader), Duration::from_secs(10))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ax_testkit::signal(pid, "CONT");
    let f = w.settle(&c, Duration::from_secs(45), now_ms()).await;
    let (settled_in, wrong) = states_settle(&c, &w.one_shots).await;
    report(
        "leader SIGSTOP past its lease, default topology, 2 000 fires/s",
        &f,
        &format!(
            "{LOAD} one-shots; {ran_before} had run at the stop; {next} leads; states true {settled_in} ms after the last ran, untrue: {wrong:?}"
        ),
    );
    f.assert_clean("leader SIGSTOP, default topology");
    assert!(wrong.is_empty(), "one-shot states not SUCCESS: {wrong:?}");
    c.assert_running(&["r1", "r2", "r3"]);
    assert_eq!(c.leader().await.as_deref(), Some(next.as_str()));
    c.clean_up().await;
}
