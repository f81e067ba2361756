//! Faults of the machine and of misbehaving peers rather than of a killed process: a full
//! disk under the logs, a wall clock stepped back, etcd at its space quota. Each scenario
//! runs the suite's workload through the fault and prints one `chaos:` line.

use std::fs::OpenOptions;
use std::time::Duration;

use super::harness::{now_ms, Cluster, Roles, SERIAL};
use super::{report, workload};

/// The replica's stdout and stderr go to `/dev/full`: every log line it writes fails with
/// `ENOSPC`, as on a node whose disk filled up under a file-backed log. Logging at `info`
/// so it writes lines all the time. It must go on leading, firing and running: a log write
/// error is dropped, never fatal. Already handled: the server's log writer thread drops a
/// batch it cannot write and goes on, nothing else in `ax serve` prints, and its shutdown
/// exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_disk_is_full() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("chaos-disk-full").await;
    c.env.push(("AX_LOG", "info".to_owned()));
    let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
    let no_log = std::env::temp_dir().join("ax-chaos-disk-full-has-no-log");
    c.start_replica_writing_to("r1", Roles::Both, full, no_log)
        .await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let started = now_ms();
    let w = workload(&c, 30, started + 1000, Duration::from_secs(8)).await;
    let f = w.settle(&c, Duration::from_secs(10), started + 2000).await;
    let ticks = c.receiver.executions_of("tick").len();
    c.assert_running(&["r1"]);
    // Its shutdown writes its last states and lines, and must not fail on them either.
    let status = c.replica("r1").terminate(Duration::from_secs(15));
    report(
        "a replica whose disk is full (stdout and stderr on /dev/full, logging at info)",
        &f,
        &format!(
            "it led, fired and ran every one-shot; the periodic task ran {ticks} times; SIGTERM then: exit {status:?}"
        ),
    );
    f.assert_clean("a replica whose disk is full");
    assert!(status.is_some_and(|s| s.success()), "exit: {status:?}");
    c.clean_up().await;
}

/// The leader's wall clock steps a minute back (an NTP step after the clock ran fast, a VM
/// restored), its monotonic clock not; a second replica's clock is right. One-shots are due
/// before, during and after the step, and the periodic task runs every second: none may run
/// twice (a slot the leader already fired comes round again by its clock) and none may be
/// lost or wait for the leader's clock to catch up a minute later.
///
/// A bug before the role read its clock through `SteadyClock`: the leader followed the step,
/// so every due instant lay a minute further off; it kept leading (the clock check runs only
/// before a campaign), and nothing fired for a minute (23 of 30 one-shots not run 10 s after
/// the last was due, the periodic task stopped). Now the step is absorbed at a tenth of real
/// time: fires go on, late by a tenth of the time since the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_clock_steps_back() {
    let _serial = SERIAL.lock().await;
    let clock = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(clock.path(), "+0\n").unwrap();
    let mut c = Cluster::new("chaos-clock-back").await;
    c.env.push((
        "LD_PRELOAD",
        ax_testkit::libfaketime().display().to_string(),
    ));
    c.env.push((
        "FAKETIME_TIMESTAMP_FILE",
        clock.path().display().to_string(),
    ));
    c.env.push(("FAKETIME_NO_CACHE", "1".to_owned()));
    c.env.push(("DONT_FAKE_MONOTONIC", "1".to_owned()));
    c.start_replica("r1", Roles::Both).await;
    let leader = c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.env.clear();
    c.start_replica("r2", Roles::Both).await;
    let w = workload(&c, 30, now_ms() + 1500, Duration::from_secs(12)).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stepped_at = now_ms();
    std::fs::write(clock.path(), "-60\n").unwrap();
    let f = w
        .settle(&c, Duration::from_secs(10), stepped_at + 2000)
        .await;
    let runs = c.receiver.executions();
    let late = runs
        .iter()
        .filter(|r| r.task_id.starts_with('o'))
        .map(|r| r.arrived_at - r.fire_at)
        .max()
        .unwrap_or(0);
    let after = c.leader().await;
    report(
        "the leader's clock steps 1 min back",
        &f,
        &format!(
            "leader before {leader}, after {after:?} (its steady clock still agrees with etcd); worst lateness of a one-shot {late} ms"
        ),
    );
    f.assert_clean("the leader's clock steps back");
    c.assert_running(&["r1", "r2"]);
    c.clean_up().await;
}

/// etcd's space quota for the out-of-space scenario: small, so junk fills it in a second.
const SMALL_QUOTA: u64 = 16 * 1024 * 1024;

/// Runs `etcdctl` against `endpoint`; fails the test unless it succeeds.
fn etcdctl(endpoint: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(endpoint)
        .args(args)
        .output()
        .expect("etcdctl (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes 1 MiB junk values outside ax's prefix until etcd refuses one for space (the
/// NOSPACE alarm is raised then); returns how many it took.
async fn fill(etcd: &etcd_client::Client) -> usize {
    let junk = vec![b'x'; 1024 * 1024];
    for i in 0..64 {
        match etcd
            .clone()
            .put(format!("/junk/{i}"), junk.clone(), None)
            .await
        {
            Ok(_) => {}
            Err(e) if e.to_string().contains("database space exceeded") => return i,
            Err(e) => panic!("junk write {i}: {e}"),
        }
    }
    panic!("etcd took 64 MiB of junk under a {SMALL_QUOTA} byte quota");
}

/// etcd reaches its space quota (`--quota-backend-bytes`, 16 MiB here) and raises the
/// NOSPACE alarm: it refuses every write (deletes aside) until an operator frees space and
/// disarms the alarm. Registered tasks must keep firing (enqueues go to Redis), the states
/// etcd refuses must wait in memory, an alert must name the cause and the fix, and once
/// space is back every state must be written: nothing lost, nothing twice.
///
/// Fires went on already. Two bugs: no alert said why the states were not written, and the
/// flusher, after three refused batches, wrote each state alone to find "the record etcd
/// refuses", was refused alike for each and dropped them all (every one-shot's state stayed
/// untrue after space came back). Now a refusal for space is not blamed on a record, and it
/// is alerted once for each batch it holds back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_at_its_space_quota() {
    let _serial = SERIAL.lock().await;
    let quota = format!("--quota-backend-bytes={SMALL_QUOTA}");
    let etcd = ax_testkit::EtcdServer::start_with(&[&quota]);
    let mut c = Cluster::on("chaos-etcd-full", etcd.endpoint(), ax_testkit::redis_url()).await;
    for id in ["r1", "r2"] {
        c.start_replica(id, Roles::Both).await;
    }
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let w = workload(&c, 30, now_ms() + 4000, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let junk = fill(&c.etcd).await;
    let full_at = now_ms();
    let alarms = etcdctl(&etcd.endpoint(), &["alarm", "list"]);
    assert!(alarms.contains("NOSPACE"), "no NOSPACE alarm: {alarms}");
    // Every one-shot comes due while etcd is full.
    let during = w.settle(&c, Duration::from_secs(5), full_at).await;
    let alert = c
        .receiver
        .alerts()
        .into_iter()
        .find(|a| a.to_string().contains("NOSPACE"));
    c.assert_running(&["r1", "r2"]);
    // Space comes back: the junk deleted, the history compacted, the file defragmented, the
    // alarm disarmed.
    let freed_at = now_ms();
    c.etcd
        .clone()
        .delete(
            "/junk/",
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let revision = c.etcd.clone().get("/junk/", None).await.unwrap();
    let revision = revision.header().unwrap().revision().to_string();
    etcdctl(&etcd.endpoint(), &["compact", &revision, "--physical"]);
    etcdctl(&etcd.endpoint(), &["defrag"]);
    etcdctl(&etcd.endpoint(), &["alarm", "disarm"]);
    let after = w.settle(&c, Duration::from_secs(3), freed_at).await;
    // Every one-shot's state says it ran once and succeeded.
    let mut wrong = Vec::new();
    let mut written_after = None;
    let settled = std::time::Instant::now();
    while settled.elapsed() < Duration::from_secs(15) {
        let states = c.states("chaos").await;
        wrong = w
            .one_shots
            .iter()
            .filter(|id| {
                states
                    .get(*id)
                    .is_none_or(|s| s["status"] != "SUCCESS" || s["success_count"] != 1)
            })
            .cloned()
            .collect();
        if wrong.is_empty() {
            written_after = Some(now_ms() - freed_at);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    report(
        "etcd at its space quota (NOSPACE alarm, 16 MiB quota)",
        &after,
        &format!(
            "{junk} MiB of junk filled it; while full: lost {}, periodic runs {}; alert: {}; states true {} ms after space came back, wrong {}",
            during.lost,
            during.ticks_after,
            alert.as_ref().map_or("none".to_owned(), |a| a["title"].to_string()),
            written_after.map_or("never".to_owned(), |ms| ms.to_string()),
            wrong.len()
        ),
    );
    during.assert_clean("etcd at its space quota");
    after.assert_clean("etcd at its space quota, after space came back");
    let alert = alert.expect("an alert naming the cause");
    let text = alert.to_string();
    for fix in ["compact", "defrag", "alarm disarm", "quota-backend-bytes"] {
        assert!(text.contains(fix), "the alert does not say `{fix}`: {text}");
    }
    assert!(wrong.is_empty(), "one-shot states not true: {wrong:?}");
    c.assert_running(&["r1", "r2"]);
    c.clean_up().await;
}
