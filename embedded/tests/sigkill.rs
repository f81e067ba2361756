//! A real process using the durable store is SIGKILLed in the middle of a burst of submits,
//! then started again on the same file: every submit it acknowledged must run, and a job may
//! run twice only as the documented re-run of one that was running (or had ended without its
//! end on disk yet) at the kill, under the same execution id.
//!
//! The child is this test binary itself, run with `--exact child_process` and told its part
//! through environment variables: no other binary has to be built or found.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use ax_embedded::handler::{typed, Typed as Attempt};
use ax_embedded::{HandlerError, Job, Kernel, When};

const DIR: &str = "AX_EMBEDDED_CHILD_DIR";
const PART: &str = "AX_EMBEDDED_CHILD_PART";
/// Jobs the burst submits; the kill comes after about half are acknowledged.
const JOBS: u64 = 400;
const KILL_AFTER: u64 = 200;

/// The child's side: a kernel on the store, a handler that logs its starts and ends to a
/// file, and either a burst of submits ("burst") or nothing but the restart ("recover").
/// Without the variables (an ordinary test run) it does nothing.
#[test]
fn child_process() {
    let (Ok(dir), Ok(part)) = (std::env::var(DIR), std::env::var(PART)) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // A child that hangs ends by itself; the parent then sees its output end.
    let run = async {
        tokio::time::timeout(Duration::from_secs(90), child(Path::new(&dir), &part)).await
    };
    runtime.block_on(run).expect("the child took too long");
}

async fn child(dir: &Path, part: &str) {
    let log = dir.join("runs.log");
    let part_name = part.to_owned();
    let kernel = Kernel::builder()
        .workers(4)
        .store(dir.join("jobs.redb"))
        .handler(
            "record",
            typed(move |ctx: Attempt<u64>| {
                let (log, part) = (log.clone(), part_name.clone());
                async move {
                    let line = |what: &str| {
                        format!(
                            "{what} {} {} {} {} {part}\n",
                            ctx.payload,
                            ctx.execution_id(),
                            ctx.attempt(),
                            ctx.redelivered()
                        )
                    };
                    append(&log, &line("start"))?;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    append(&log, &line("done"))
                }
            }),
        )
        .build()
        .expect("kernel");
    if part == "burst" {
        // Submits in flight together, so that the store's batches hold many of them.
        let mut submits = tokio::task::JoinSet::new();
        for n in 0..JOBS {
            let kernel = kernel.clone();
            submits.spawn(async move {
                let when = When::After(Duration::from_millis(n % 20));
                let job = Job::named("record").payload(&n);
                kernel.submit(when, job).await.map(|_| n)
            });
        }
        let mut out = std::io::stdout();
        while let Some(done) = submits.join_next().await {
            let n = done.expect("submit task").expect("submit");
            writeln!(out, "ack {n}").expect("stdout");
            out.flush().expect("stdout");
        }
        // Waits for the kill.
        tokio::time::sleep(Duration::from_secs(60)).await;
    } else {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !kernel.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        kernel.shutdown(Duration::from_secs(5)).await;
    }
}

fn append(path: &Path, line: &str) -> Result<(), HandlerError> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| HandlerError::Retryable(e.to_string()))?;
    f.write_all(line.as_bytes())
        .map_err(|e| HandlerError::Retryable(e.to_string()))
}

fn child_command(dir: &Path, part: &str) -> Command {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(DIR, dir)
    .env(PART, part)
    .stdin(Stdio::null());
    cmd
}

#[test]
fn sigkill_mid_burst_loses_no_acknowledged_job() {
    if std::env::var(DIR).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let (mut burst, stdout) = spawn_burst(dir.path());
    let mut acked = BTreeSet::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if let Some(n) = line.strip_prefix("ack ") {
            acked.insert(n.parse::<u64>().expect("number"));
            if acked.len() as u64 >= KILL_AFTER {
                break;
            }
        }
    }
    // `kill` is SIGKILL on Unix: no destructor, no flush.
    burst.kill().expect("kill");
    burst.wait().expect("reaped");
    assert!(
        acked.len() as u64 >= KILL_AFTER,
        "the burst stopped early: {}",
        acked.len()
    );

    restart_and_check(dir.path(), &acked);
}

/// The burst's child, with its standard output to read the acknowledgements from.
fn spawn_burst(dir: &Path) -> (Child, ChildStdout) {
    let mut burst = child_command(dir, "burst")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the burst");
    let stdout = burst.stdout.take().expect("stdout");
    (burst, stdout)
}

/// Runs the restart on the killed child's file and checks the runs of both.
fn restart_and_check(dir: &Path, acked: &BTreeSet<u64>) {
    let status = child_command(dir, "recover")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run the restart");
    assert!(status.success(), "the restart failed: {status}");
    let log = std::fs::read_to_string(dir.join("runs.log")).expect("log");
    check_runs(&log, acked);
}

/// A kill right after the first attempt starts: an attempt of a persisted job starts only
/// once the store holds it as running, so whatever started is found in flight at the restart
/// and runs again marked redelivered, never as a fresh fire it could not tell from a first.
/// Many rounds, since the kill must land within the millisecond an fsync takes.
#[test]
fn sigkill_right_after_a_start_reruns_it_as_redelivered() {
    if std::env::var(DIR).is_ok() {
        return;
    }
    for round in 0..25 {
        let dir = tempfile::tempdir().expect("dir");
        let log_path = dir.path().join("runs.log");
        let (mut burst, stdout) = spawn_burst(dir.path());
        let reader = std::thread::spawn(move || {
            let mut acked = BTreeSet::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("ack ") {
                    acked.insert(n.parse::<u64>().expect("number"));
                }
            }
            acked
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&log_path).is_ok_and(|l| l.contains("start")) {
            assert!(
                Instant::now() < deadline,
                "round {round}: no attempt started"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        burst.kill().expect("kill");
        burst.wait().expect("reaped");
        let acked = reader.join().expect("reader");
        restart_and_check(dir.path(), &acked);
    }
}

/// Every acknowledged job ended; a job that started twice did so under one execution id,
/// once before the kill and once after it as a re-run of what the store held in flight.
fn check_runs(log: &str, acked: &BTreeSet<u64>) {
    // job -> [(what, execution, part, recovered)]
    let mut runs: BTreeMap<u64, Vec<(String, String, String, bool)>> = BTreeMap::new();
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 6, "log line {line:?}");
        let n: u64 = f[1].parse().expect("job");
        runs.entry(n).or_default().push((
            f[0].to_owned(),
            f[2].to_owned(),
            f[5].to_owned(),
            f[4] == "true",
        ));
    }
    for n in acked {
        let r = runs.get(n).map(Vec::as_slice).unwrap_or(&[]);
        assert!(
            r.iter().any(|x| x.0 == "done"),
            "acknowledged job {n} never ended: {r:?}"
        );
    }
    let mut reruns = 0;
    for (n, r) in &runs {
        let starts: Vec<_> = r.iter().filter(|x| x.0 == "start").collect();
        let executions: BTreeSet<_> = starts.iter().map(|x| &x.1).collect();
        assert_eq!(executions.len(), 1, "job {n} ran as two executions: {r:?}");
        for part in ["burst", "recover"] {
            let here = starts.iter().filter(|x| x.2 == part).count();
            assert!(
                here <= 1,
                "job {n} started {here} times in one process: {r:?}"
            );
        }
        if starts.len() == 2 {
            reruns += 1;
            let again = starts[1];
            assert!(
                starts[0].2 == "burst" && again.2 == "recover" && again.3,
                "job {n} ran twice, not as a re-run of what was in flight: {r:?}"
            );
        }
    }
    let recovered = runs
        .values()
        .filter(|r| r.iter().any(|x| x.0 == "done" && x.2 == "recover"))
        .count();
    eprintln!(
        "acknowledged {}, logged {}, ended after the restart {recovered}, ran twice {reruns}",
        acked.len(),
        runs.len()
    );
}
