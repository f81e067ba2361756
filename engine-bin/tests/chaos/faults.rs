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
