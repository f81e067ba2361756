//! End to end: real etcd, real Redis and real `ax serve` processes, driven the way a user
//! drives them (task keys written into etcd, the `ax` CLI) and observed from outside (what
//! the `http` handler and the alert webhook post to a local receiver, state keys, history,
//! the dead-letter list, metrics).
//!
//! Each test has its own etcd prefix and Redis key prefix; the tests run one at a time
//! because they measure timing on a small machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// Shared with the chaos suite, which uses parts of it this file does not.
#[path = "e2e/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use harness::{counts, now_ms, rfc3339, wait_until, Cluster, Execution, Roles, SERIAL};
use serde_json::{json, Value};

/// Waits until `task_id` has at least `n` executions at the receiver.
async fn wait_for_executions(c: &Cluster, task_id: &str, n: usize, within: Duration) {
    let what = format!("{n} execution(s) of {task_id}");
    wait_until(within, &what, || {
        let got = c.receiver.executions_of(task_id).len();
        async move { got >= n }
    })
    .await;
}

fn http_task(c: &Cluster, schedule: Value) -> Value {
    json!({
        "handler": "http",
        "schedule": schedule,
        "http": { "url": c.receiver.exec_url() },
    })
}

/// Registers `spec` as `NAMESPACE/ID` with `ax task put -`, which must succeed.
async fn cli_put(c: &Cluster, namespace: &str, id: &str, mut spec: Value) {
    spec["id"] = json!(id);
    spec["namespace"] = json!(namespace);
    let (code, out, err) = c.ax(&["task", "put", "-"], Some(&spec.to_string())).await;
    assert_eq!(code, 0, "task put {namespace}/{id}: {out} {err}");
}

/// Registers an `http` one-shot due at `due` (ms), as `etcdctl put` would.
async fn put_one_shot(c: &Cluster, namespace: &str, id: &str, due: i64) {
    c.put_task(namespace, id, &http_task(c, json!({ "at": rfc3339(due) })))
        .await;
}

/// The row of `ax status --output json` for replica `id` (null when absent).
fn replica_row(status: &Value, id: &str) -> Value {
    status["replicas"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["id"] == id))
        .cloned()
        .unwrap_or(Value::Null)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_put_into_etcd_runs_once_on_time() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-on-time").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    let due = now_ms() + 2000;
    put_one_shot(&c, "default", "report", due).await;
    wait_for_executions(&c, "report", 1, Duration::from_secs(6)).await;
    // Anything extra would come at once (a duplicate) or after a retry's backoff.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let runs = c.receiver.executions_of("report");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(
        (
            run.namespace.as_str(),
            run.fire_at,
            run.attempt,
            run.run_now
        ),
        ("default", due, 1, false)
    );
    let late = run.arrived_at - due;
    assert!(
        (0..1000).contains(&late),
        "posted {late} ms after its due time"
    );

    // The history records the same execution, started on time, succeeded.
    wait_until(Duration::from_secs(3), "history entry", || {
        let c = &c;
        async move {
            let h = c.ax_json(&["task", "history", "default/report"]).await;
            let done = h.as_array().is_some_and(|a| !a.is_empty());
            done
        }
    })
    .await;
    let history = c.ax_json(&["task", "history", "default/report"]).await;
    let records = history.as_array().unwrap();
    assert_eq!(records.len(), 1, "{history}");
    let r = &records[0];
    assert_eq!(r["execution_id"], run.execution_id.as_str());
    assert_eq!(r["attempt"], 1);
    assert_eq!(r["due"], due);
    assert_eq!(r["outcome"], "succeeded");
    assert_eq!(r["worker"], "r1");
    let lateness = r["lateness_ms"].as_u64().unwrap();
    assert!(lateness < 1000, "history lateness {lateness} ms");
    assert!(r["started"].as_i64().unwrap() <= run.arrived_at);

    // The leader's state record follows: one fire, one success.
    wait_until(Duration::from_secs(3), "state SUCCESS", || {
        let c = &c;
        async move {
            c.state("default", "report")
                .await
                .is_some_and(|s| s["status"] == "SUCCESS")
        }
    })
    .await;
    let state = c.state("default", "report").await.unwrap();
    assert_eq!(
        (
            &state["fire_count"],
            &state["success_count"],
            &state["failure_count"]
        ),
        (&json!(1), &json!(1), &json!(0)),
        "{state}"
    );
    assert_eq!(state["last_fire_at"], due, "{state}");
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_one_shot_tasks_each_run_exactly_once() {
    const N: usize = 2000;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-bulk").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    // Due from 2 s to 8 s from now, 3 ms apart.
    let first_due = now_ms() + 2000;
    let tasks: Vec<(String, String, Value)> = (0..N)
        .map(|i| {
            let due = first_due + 3 * i as i64;
            let id = format!("t{i:04}");
            (
                "bulk".to_owned(),
                id,
                http_task(&c, json!({ "at": rfc3339(due) })),
            )
        })
        .collect();
    let due_of: HashMap<String, i64> = tasks
        .iter()
        .enumerate()
        .map(|(i, (_, id, _))| (id.clone(), first_due + 3 * i as i64))
        .collect();
    let written = Instant::now();
    c.put_tasks(&tasks).await;
    let write_time = written.elapsed();
    let last_due = first_due + 3 * (N as i64 - 1);
    assert!(
        now_ms() < first_due,
        "writing {N} tasks took {write_time:?}: past the first due time"
    );

    let deadline = Duration::from_millis(u64::try_from(last_due - now_ms()).unwrap())
        + Duration::from_secs(10);
    wait_until(deadline, "every bulk task executed", || {
        let n = c.receiver.executions().len();
        async move { n >= N }
    })
    .await;
    let all_done = now_ms();
    // Room for duplicates to show up.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let runs = c.receiver.executions();
    let per_task = counts(&runs);
    let twice: Vec<_> = per_task.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");
    assert_eq!(runs.len(), N, "extra executions");
    assert_eq!(per_task.len(), N);
    let mut lateness: Vec<i64> = Vec::with_capacity(N);
    for run in &runs {
        let due = due_of
            .get(&run.task_id)
            .unwrap_or_else(|| panic!("unknown task {run:?}"));
        assert_eq!(
            (
                run.namespace.as_str(),
                run.fire_at,
                run.attempt,
                run.run_now
            ),
            ("bulk", *due, 1, false),
            "{run:?}"
        );
        lateness.push(run.arrived_at - due);
    }
    lateness.sort_unstable();
    assert!(lateness[0] >= 0, "a task ran {} ms early", -lateness[0]);
    eprintln!(
        "{N} tasks: written in {write_time:?}; received p50 {} ms, p99 {} ms, max {} ms after due; \
         last one {} ms after the last due time",
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness[N - 1],
        all_done - last_due,
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_trigger_and_delete_through_the_cli() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-cli").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    cli_put(&c, "ops", "tick", http_task(&c, json!({ "every": "1s" }))).await;
    wait_for_executions(&c, "tick", 2, Duration::from_secs(5)).await;

    // Pause: at most one execution already on its way, then nothing.
    let pause_start = now_ms();
    c.ax_ok(&["task", "pause", "ops/tick"]).await;
    let paused = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_pause: Vec<Execution> = c
        .receiver
        .executions_of("tick")
        .into_iter()
        .filter(|e| e.arrived_at > pause_start)
        .collect();
    assert!(after_pause.len() <= 1, "ran while paused: {after_pause:?}");
    assert!(
        after_pause.iter().all(|e| e.arrived_at <= paused + 1000),
        "ran more than a second after the pause: {after_pause:?}"
    );
    let task = c.ax_json(&["task", "get", "ops/tick"]).await;
    assert_eq!(task["status"], "PAUSED", "{task}");

    // Resume: it runs again, on its old phase.
    let before_resume = c.receiver.executions_of("tick").len();
    c.ax_ok(&["task", "resume", "ops/tick"]).await;
    let resumed = now_ms();
    wait_for_executions(&c, "tick", before_resume + 2, Duration::from_secs(4)).await;
    let first_after = &c.receiver.executions_of("tick")[before_resume];
    assert!(
        first_after.arrived_at - resumed < 1500,
        "first run {} ms after the resume",
        first_after.arrived_at - resumed
    );

    // Trigger: one extra run-now execution, promptly.
    let triggered = now_ms();
    let id = c.ax_ok(&["task", "trigger", "ops/tick"]).await;
    let id = id.trim().to_owned();
    wait_until(Duration::from_secs(2), "the run-now execution", || {
        let seen = c
            .receiver
            .executions_of("tick")
            .iter()
            .any(|e| e.execution_id == id);
        async move { seen }
    })
    .await;
    let run_now: Vec<Execution> = c
        .receiver
        .executions_of("tick")
        .into_iter()
        .filter(|e| e.run_now)
        .collect();
    assert_eq!(run_now.len(), 1, "{run_now:?}");
    assert_eq!(run_now[0].execution_id, id);
    assert_eq!(run_now[0].attempt, 1);
    assert!(run_now[0].arrived_at - triggered < 2000);
    // Two more periodic fires after the trigger, to see the cadence go on.
    let n = c.receiver.executions_of("tick").len();
    wait_for_executions(&c, "tick", n + 2, Duration::from_secs(4)).await;

    // The periodic fires since the resume are one second apart: the pause only skipped
    // fires, and the run-now neither moved nor replaced any.
    let periodic: Vec<i64> = c.receiver.executions_of("tick")[before_resume..]
        .iter()
        .filter(|e| !e.run_now)
        .map(|e| e.fire_at)
        .collect();
    assert!(periodic.len() >= 4, "{periodic:?}");
    assert!(
        periodic.windows(2).all(|w| w[1] - w[0] == 1000),
        "periodic fires not 1 s apart: {periodic:?}"
    );
    let old_phase = c.receiver.executions_of("tick")[0].fire_at;
    assert_eq!((periodic[0] - old_phase) % 1000, 0, "phase moved");

    // Delete: it stops.
    let delete_start = now_ms();
    c.ax_ok(&["task", "delete", "ops/tick"]).await;
    let deleted = now_ms();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_delete: Vec<Execution> = c
        .receiver
        .executions_of("tick")
        .into_iter()
        .filter(|e| e.arrived_at > delete_start)
        .collect();
    assert!(
        after_delete.len() <= 1,
        "ran after delete: {after_delete:?}"
    );
    assert!(
        after_delete.iter().all(|e| e.arrived_at <= deleted + 1000),
        "ran more than a second after the delete: {after_delete:?}"
    );
    let (code, _, err) = c.ax(&["task", "get", "ops/tick"], None).await;
    assert_eq!(code, 4, "{err}");
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_while_firing_loses_and_repeats_nothing() {
    const N: usize = 300;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-failover").await;
    // Three scheduler replicas and a separate worker: the process killed is a scheduler,
    // so what is checked is the hand-over of firing, not the redelivery of executions a
    // dead worker held (that waits for the visibility timeout, by design).
    for id in ["s1", "s2", "s3"] {
        c.start_replica(id, Roles::Scheduler).await;
    }
    c.start_replica("w1", Roles::Worker).await;
    let old = c.wait_for_leader(None, Duration::from_secs(10)).await;

    // Due over 8 s starting 1.5 s from now.
    let first_due = now_ms() + 1500;
    let step = 8000 / N as i64;
    let tasks: Vec<(String, String, Value)> = (0..N)
        .map(|i| {
            let due = first_due + step * i as i64;
            (
                "fo".to_owned(),
                format!("f{i:03}"),
                http_task(&c, json!({ "at": rfc3339(due) })),
            )
        })
        .collect();
    c.put_tasks(&tasks).await;
    let last_due = first_due + step * (N as i64 - 1);

    tokio::time::sleep(Duration::from_millis(
        u64::try_from(first_due + 3000 - now_ms()).unwrap(),
    ))
    .await;
    let old_pid = c.replica(&old).pid();
    let status = c.ax_json(&["status"]).await;
    let shown = replica_row(&status, &old);
    assert_eq!(shown["pid"].as_u64(), old_pid.map(u64::from), "{shown}");
    assert_eq!(shown["host"], "e2e-host", "{shown}");
    assert_eq!(shown["state"], "live", "{shown}");
    assert!(
        shown["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{shown}"
    );
    let killed_at = now_ms();
    c.replica(&old).kill();
    let new = c.wait_for_leader(Some(&old), Duration::from_secs(8)).await;
    let took_over = now_ms();

    let within = Duration::from_millis(u64::try_from(last_due - now_ms()).unwrap_or(0))
        + Duration::from_secs(10);
    wait_until(within, "every failover task executed", || {
        let n = c.receiver.executions().len();
        async move { n >= N }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let runs = c.receiver.executions();
    let per_task = counts(&runs);
    let twice: Vec<_> = per_task.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");
    assert_eq!(per_task.len(), N, "lost tasks");
    assert_eq!(runs.len(), N);
    for run in &runs {
        let i: i64 = run.task_id[1..].parse().unwrap();
        assert_eq!(run.fire_at, first_due + step * i, "{run:?}");
        assert_eq!(run.attempt, 1, "{run:?}");
    }
    // Both leaders fired: some tasks ran before the kill, some after the takeover.
    let before = runs.iter().filter(|r| r.arrived_at < killed_at).count();
    let after = runs.iter().filter(|r| r.arrived_at > took_over).count();
    assert!(before > 0 && after > 0, "before {before}, after {after}");
    let worst = runs.iter().map(|r| r.arrived_at - r.fire_at).max().unwrap();
    eprintln!(
        "failover: leader {old} killed at +{} ms, {new} leads {} ms later; {before} ran before, \
         {after} after; worst lateness {worst} ms",
        killed_at - first_due,
        took_over - killed_at
    );

    assert_eq!(
        c.metric(&new, "scheduler_leader_changes_total").await,
        Some(1.0)
    );
    assert_eq!(c.metric(&new, "scheduler_is_leader").await, Some(1.0));
    let status = c.ax_json(&["status"]).await;
    assert_eq!(status["leader"], new.as_str(), "{status}");
    // The killed leader stays on the list, shown gone, rather than dropping off it.
    let mut gone = Value::Null;
    for _ in 0..40 {
        let status = c.ax_json(&["status"]).await;
        gone = replica_row(&status, &old);
        if gone["state"] == "gone" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(gone["state"], "gone", "{gone}");
    assert!(
        gone["gone_at"].as_i64().is_some_and(|t| t >= killed_at),
        "{gone}"
    );
    let text = c.ax_ok(&["status"]).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with(old.as_str()) && l.contains("gone since")),
        "{text}"
    );
    // Every task shows its true state: none left RUNNING because the old leader died before
    // writing what it had heard, or because its re-fire was refused as a duplicate.
    let mut stuck = Vec::new();
    for _ in 0..20 {
        let list = c.ax_json(&["task", "list", "-n", "fo"]).await;
        stuck = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["status"] != "SUCCESS")
            .map(|t| format!("{}={}", t["id"], t["status"]))
            .collect();
        if stuck.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(stuck.is_empty(), "{} not SUCCESS: {stuck:?}", stuck.len());
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_marked_invalid_and_the_others_run() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-invalid").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    let due = now_ms() + 1500;
    c.put_task(
        "default",
        "bad",
        &http_task(&c, json!({ "cron": "61 * * * *" })),
    )
    .await;
    put_one_shot(&c, "default", "good", due).await;

    wait_until(Duration::from_secs(3), "state INVALID", || {
        let c = &c;
        async move {
            c.state("default", "bad")
                .await
                .is_some_and(|s| s["status"] == "INVALID")
        }
    })
    .await;
    let state = c.state("default", "bad").await.unwrap();
    assert_eq!(
        state["validation_errors"],
        json!([{ "path": "schedule.cron", "reason": "minute 61 is out of range 0-59" }]),
        "{state}"
    );
    let shown: Value = c.ax_json(&["task", "get", "default/bad"]).await;
    assert_eq!(shown["status"], "INVALID", "{shown}");
    assert_eq!(
        shown["errors"],
        json!(["schedule.cron: minute 61 is out of range 0-59"]),
        "{shown}"
    );
    assert_eq!(c.metric("r1", "scheduler_invalid_specs").await, Some(1.0));

    wait_for_executions(&c, "good", 1, Duration::from_secs(4)).await;
    let good = c.receiver.executions_of("good");
    assert_eq!(good[0].fire_at, due);

    // Fixing the value makes it valid again; it runs.
    let fixed_due = now_ms() + 1000;
    put_one_shot(&c, "default", "bad", fixed_due).await;
    wait_for_executions(&c, "bad", 1, Duration::from_secs(4)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let bad = c.receiver.executions_of("bad");
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0].fire_at, fixed_due);
    assert_eq!(c.receiver.executions_of("good").len(), 1);
    assert_eq!(c.metric("r1", "scheduler_invalid_specs").await, Some(0.0));
    c.clean_up().await;
}

/// A task whose breaker opened says so everywhere an operator looks, and paused tasks and
/// namespaces are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_task_is_shown_throttled_and_paused_tasks_are_counted() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-throttled").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let port = c.replica("r1").http_port;
    c.receiver.fail_task("flaky");
    let mut flaky = http_task(&c, json!({ "every": "1s" }));
    flaky["overlap"] = json!("allow");
    flaky["retry"] = json!({ "max_retries": 0 });
    c.put_task("default", "flaky", &flaky).await;
    let mut idle = http_task(&c, json!({ "every": "1h" }));
    idle["paused"] = json!(true);
    c.put_task("default", "idle", &idle).await;
    c.put_task("quiet", "sleeper", &http_task(&c, json!({ "every": "1h" })))
        .await;
    c.ax_ok(&["namespace", "pause", "quiet"]).await;

    // More than half of at least four executions failed: the breaker opens.
    wait_until(Duration::from_secs(30), "flaky listed THROTTLED", || {
        let c = &c;
        async move { c.ax_ok(&["task", "list"]).await.contains("THROTTLED") }
    })
    .await;
    let list = c.ax_ok(&["task", "list"]).await;
    let row = list.lines().find(|l| l.contains("default/flaky")).unwrap();
    assert!(
        row.contains("THROTTLED") && !row.contains("SCHEDULED"),
        "{list}"
    );
    assert!(list.contains("default/flaky is throttled since"), "{list}");
    for (series, want) in [
        ("scheduler_tasks_throttled", 1.0),
        ("scheduler_tasks_paused", 1.0),
        ("scheduler_namespaces_paused", 1.0),
    ] {
        wait_until(Duration::from_secs(5), series, || async move {
            harness::metric_at(port, series).await == Some(want)
        })
        .await;
    }

    // While most fires are skipped, what is shown ahead is ahead: the stored next fire
    // follows the skipped fires, and no listed fire is in the past.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = now_ms();
    let view = c.ax_json(&["task", "get", "default/flaky"]).await;
    assert_eq!(view["throttled"]["dispatch_every"], 10, "{view}");
    assert!(
        view["throttled"]["failures"].as_u64().unwrap() >= 3,
        "{view}"
    );
    let next = view["next_fire"].as_i64().unwrap();
    assert!(
        next >= before - 1500,
        "next fire {} ms in the past: {view}",
        before - next
    );
    let upcoming: Vec<i64> = view["upcoming_fires"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_i64().unwrap())
        .collect();
    assert!(
        !upcoming.is_empty() && upcoming.iter().all(|f| *f >= before),
        "{view}"
    );
    let sleeper = c.ax_json(&["task", "get", "quiet/sleeper"]).await;
    assert_eq!(
        (&sleeper["status"], &sleeper["namespace_paused"]),
        (&json!("PAUSED"), &json!(true)),
        "{sleeper}"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_http_task_retries_then_lands_in_the_dlq_with_an_alert() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-dlq").await;
    // Leader and worker in two processes, each with its own alert manager and the same
    // webhook: an end alerted by both would arrive twice.
    c.start_replica("s1", Roles::Scheduler).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.start_replica("w1", Roles::Worker).await;
    c.receiver.fail_task("flaky");

    let due = now_ms() + 1000;
    let mut spec = http_task(&c, json!({ "at": rfc3339(due) }));
    spec["retry"] = json!({
        "max_retries": 2,
        "initial_interval": "200ms",
        "max_interval": "1s",
        "multiplier": 2,
        "jitter": 0,
    });
    c.put_task("default", "flaky", &spec).await;

    wait_until(Duration::from_secs(8), "a dead letter", || {
        let c = &c;
        async move {
            c.ax_json(&["dlq", "list"])
                .await
                .as_array()
                .is_some_and(|a| !a.is_empty())
        }
    })
    .await;

    // Three attempts of the same execution, 200 ms then 400 ms apart.
    let runs = c.receiver.executions_of("flaky");
    assert_eq!(runs.len(), 3, "{runs:?}");
    let attempts: Vec<u32> = runs.iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(runs
        .iter()
        .all(|r| r.execution_id == runs[0].execution_id && r.fire_at == due));
    for (gap, want) in [
        (runs[1].arrived_at - runs[0].arrived_at, 200),
        (runs[2].arrived_at - runs[1].arrived_at, 400),
    ] {
        assert!(
            (want..want + 400).contains(&gap),
            "retry after {gap} ms, want {want} ms: {runs:?}"
        );
    }

    let dlq = c.ax_json(&["dlq", "list"]).await;
    let letters = dlq.as_array().unwrap();
    assert_eq!(letters.len(), 1, "{dlq}");
    let letter = &letters[0];
    assert_eq!(letter["execution_id"], runs[0].execution_id.as_str());
    assert_eq!(
        (
            &letter["namespace"],
            &letter["task_id"],
            &letter["queue"],
            &letter["attempts"]
        ),
        (
            &json!("default"),
            &json!("flaky"),
            &json!("default"),
            &json!(3)
        ),
        "{letter}"
    );
    assert_eq!(
        letter["last_error"],
        "HTTP 500 Internal Server Error (retries exhausted (2 of 2))"
    );

    // The webhook: one task_failed (repeats de-duplicated) and one task_dead_lettered,
    // raised by the leader from the end events, naming the execution.
    wait_until(Duration::from_secs(5), "the dead-letter alert", || {
        let seen = c
            .receiver
            .alerts()
            .iter()
            .any(|a| a["kind"] == "task_dead_lettered");
        async move { seen }
    })
    .await;
    let alerts = c.receiver.alerts();
    let of_kind = |kind: &str| -> Vec<Value> {
        alerts
            .iter()
            .filter(|a| a["kind"] == kind)
            .cloned()
            .collect()
    };
    let dead = of_kind("task_dead_lettered");
    assert_eq!(dead.len(), 1, "{alerts:?}");
    let dead = &dead[0];
    let at_ms = dead["at_ms"].as_i64().unwrap();
    assert!(
        at_ms >= runs[2].arrived_at && at_ms <= now_ms(),
        "observed at {at_ms}: {dead}"
    );
    assert_eq!(
        dead,
        &json!({
            "source": "ax",
            "version": 1,
            "level": "critical",
            "kind": "task_dead_lettered",
            "title": "Task dead-lettered: default/flaky",
            "message": "Gave up after 3 attempts; last error: HTTP 500 Internal Server Error",
            "task": { "namespace": "default", "id": "flaky" },
            "fields": { "attempts": "3", "execution_id": runs[0].execution_id },
            "at": rfc3339(at_ms),
            "at_ms": at_ms,
        })
    );
    let failed = of_kind("task_failed");
    assert_eq!(failed.len(), 1, "{alerts:?}");
    let failed = &failed[0];
    assert_eq!(
        (
            &failed["level"],
            &failed["title"],
            &failed["message"],
            &failed["task"],
            &failed["fields"]
        ),
        (
            &json!("warn"),
            &json!("Task failed: default/flaky"),
            &json!("Attempt 1 failed: HTTP 500 Internal Server Error"),
            &json!({ "namespace": "default", "id": "flaky" }),
            &json!({ "attempt": "1", "execution_id": runs[0].execution_id }),
        ),
        "{failed}"
    );

    // The worker said so in its log (at warn and above), as plain text for a file.
    let log = c.replica("w1").log_text();
    assert!(log.contains("dead-lettering"), "{log}");
    assert!(!log.contains('\x1b'), "colour codes in a log file: {log}");

    wait_until(Duration::from_secs(3), "state FAILED", || {
        let c = &c;
        async move {
            c.state("default", "flaky")
                .await
                .is_some_and(|s| s["status"] == "FAILED")
        }
    })
    .await;
    // Nothing more comes: the worker raised none of them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for kind in ["task_failed", "task_dead_lettered"] {
        let alerts = task_alerts(&c, kind, "flaky");
        assert_eq!(alerts.len(), 1, "{alerts:?}");
    }

    // Requeued by the end of its id: the answer names the new execution, and the two stories
    // name each other.
    let old = runs[0].execution_id.clone();
    let text = c.ax_ok(&["dlq", "requeue", &old[old.len() - 12..]]).await;
    let row = text.lines().last().unwrap();
    assert!(row.starts_with(&old), "{text}");
    let new = row.split_whitespace().nth(1).unwrap().to_owned();
    let old_story = c.ax_json(&["execution", "get", &old]).await;
    assert_eq!(old_story["requeued_as"], new.as_str(), "{old_story}");
    assert!(
        c.ax_ok(&["execution", "get", &old])
            .await
            .contains(&format!("requeued as execution {new}")),
        "the story in words"
    );
    let new_story = c.ax_json(&["execution", "get", &new]).await;
    assert_eq!(new_story["origin"]["kind"], "requeue", "{new_story}");
    assert_eq!(
        new_story["origin"]["requeue_of"],
        old.as_str(),
        "{new_story}"
    );
    c.clean_up().await;
}

/// Whether the leader has read every end event of `task_id` there is (at least one), and
/// acknowledged none: its effects are not written yet.
async fn ends_read_and_unwritten(c: &Cluster, task_id: &str) -> bool {
    let client = redis::Client::open(c.redis_url.as_str()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let stream = format!("{{{}:ev}}:stream", c.redis_prefix);
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query_async(&mut redis)
        .await
        .unwrap_or_default();
    // An entry holds one event (an object) or several (an array).
    let ends_of_task = |v: &str| {
        let events = match serde_json::from_str::<serde_json::Value>(v) {
            Ok(serde_json::Value::Array(events)) => events,
            Ok(event) => vec![event],
            Err(_) => Vec::new(),
        };
        events
            .iter()
            .any(|e| e["task_id"] == task_id && e["kind"]["type"] == "finished")
    };
    let ends: Vec<String> = entries
        .into_iter()
        .filter(|(_, fields)| fields.iter().any(|(_, v)| ends_of_task(v)))
        .map(|(id, _)| id)
        .collect();
    let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&stream)
        .arg("leader")
        .arg("-")
        .arg("+")
        .arg(1000)
        .query_async(&mut redis)
        .await
        .unwrap_or_default();
    !ends.is_empty() && ends.iter().all(|id| pending.iter().any(|p| &p.0 == id))
}

/// A leader sends the alerts of failed attempts only once the task states holding those
/// ends are written: one that dies before has sent none, and its successor applies the ends
/// again and alerts each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_read_by_a_leader_that_dies_before_writing_it_is_alerted_once_by_the_next() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-alert-failover").await;
    // The first leader writes states once an hour (after its takeover): it dies holding
    // what it read.
    c.env.push(("AX_FLUSH_INTERVAL", "1h".to_owned()));
    c.start_replica("s1", Roles::Scheduler).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.env.clear();
    c.start_replica("s2", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;
    c.receiver.fail_task("doomed");
    let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 500) }));
    spec["retry"] = json!({ "max_retries": 0 });
    c.put_task("default", "doomed", &spec).await;
    wait_until(
        Duration::from_secs(10),
        "the end read by the leader and not written",
        || ends_read_and_unwritten(&c, "doomed"),
    )
    .await;
    // Past a few reads of events: the leader holds the alerts with the unwritten state.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !c.receiver
            .alerts()
            .iter()
            .any(|a| a["task"]["id"] == "doomed"),
        "{:?}",
        c.receiver.alerts()
    );
    c.replica("s1").kill();
    c.wait_for_leader(Some("s1"), Duration::from_secs(10)).await;
    wait_until(Duration::from_secs(10), "the dead-letter alert", || {
        let c = &c;
        async move { !task_alerts(c, "task_dead_lettered", "doomed").is_empty() }
    })
    .await;
    wait_until(Duration::from_secs(5), "state FAILED", || {
        let c = &c;
        async move {
            c.state("default", "doomed")
                .await
                .is_some_and(|s| s["status"] == "FAILED" && s["failure_count"] == 1)
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for kind in ["task_failed", "task_dead_lettered"] {
        let alerts = task_alerts(&c, kind, "doomed");
        assert_eq!(alerts.len(), 1, "{alerts:?}");
    }
    c.clean_up().await;
}

/// The alerts of `kind` about task `default/{task_id}`, in arrival order.
fn task_alerts(c: &Cluster, kind: &str, task_id: &str) -> Vec<Value> {
    c.receiver
        .alerts()
        .into_iter()
        .filter(|a| a["kind"] == kind && a["task"]["id"] == task_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_an_http_task_aimed_at_loopback_is_refused_once_and_masked() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-egress").await;
    // An empty variable counts as unset: the default guard, which refuses loopback.
    c.env.push(("AX_WORKER_HTTP_ALLOW_CIDRS", String::new()));
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    let secret_url = c
        .receiver
        .exec_url()
        .replace("http://", "http://u:s3cret-pw@")
        + "?token=s3cret-token";
    let spec = json!({
        "handler": "http",
        "schedule": { "at": rfc3339(now_ms() + 500) },
        "http": { "url": secret_url },
        "retry": { "max_retries": 3, "initial_interval": "200ms", "jitter": 0 },
    });
    c.put_task("default", "inside", &spec).await;
    wait_until(Duration::from_secs(8), "a dead letter", || {
        let c = &c;
        async move {
            c.ax_json(&["dlq", "list"])
                .await
                .as_array()
                .is_some_and(|a| !a.is_empty())
        }
    })
    .await;
    let dlq = c.ax_json(&["dlq", "list"]).await;
    let letter = &dlq[0];
    // Refused at once: one attempt whatever the retry policy, nothing sent.
    assert_eq!(letter["attempts"], json!(1), "{letter}");
    let error = letter["last_error"].as_str().unwrap();
    assert!(
        error.contains("refused: 127.0.0.1 is loopback (127.0.0.0/8)")
            && error.contains("worker.http_allow_cidrs")
            && error.contains("://***@127.0.0.1:")
            && error.contains("/exec?token=***"),
        "{error}"
    );
    assert!(c.receiver.executions_of("inside").is_empty());
    wait_until(Duration::from_secs(5), "the dead-letter alert", || {
        let seen = c
            .receiver
            .alerts()
            .iter()
            .any(|a| a["kind"] == "task_dead_lettered");
        async move { seen }
    })
    .await;
    // The secrets appear nowhere a person reads.
    let state = c.state("default", "inside").await.unwrap_or_default();
    let history = c.ax_ok(&["task", "history", "default/inside"]).await;
    for shown in [
        dlq.to_string(),
        json!(c.receiver.alerts()).to_string(),
        state.to_string(),
        history,
        c.replica("r1").log_text(),
    ] {
        assert!(!shown.contains("s3cret"), "{shown}");
    }
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecodable_state_records_are_passed_over_and_tasks_still_fire() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-badstate").await;
    // A record written by hand, and one with a status this version does not know, for a
    // task that exists: before the fix every takeover failed on them and nothing fired.
    let mut etcd = c.etcd.clone();
    etcd.put(format!("{}/state/x/y", c.prefix), "{}", None)
        .await
        .unwrap();
    etcd.put(
        format!("{}/state/default/old", c.prefix),
        r#"{"status":"ZOMBIE"}"#,
        None,
    )
    .await
    .unwrap();
    let due = now_ms() + 3000;
    put_one_shot(&c, "default", "old", due).await;
    put_one_shot(&c, "default", "new", due).await;
    // Before a leader rewrites it, the task says why its state is missing.
    let shown: Value = c.ax_json(&["task", "get", "default/old"]).await;
    assert!(
        shown["errors"][0]
            .as_str()
            .is_some_and(|e| e.starts_with("state record unreadable")),
        "{shown}"
    );
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    // The gauge is set once the takeover has read the states, a moment after the election.
    let r1 = c.replica("r1").http_port;
    wait_until(
        Duration::from_secs(10),
        "two undecodable states counted",
        || async move { harness::metric_at(r1, "scheduler_undecodable_states").await == Some(2.0) },
    )
    .await;
    wait_for_executions(&c, "old", 1, Duration::from_secs(6)).await;
    wait_for_executions(&c, "new", 1, Duration::from_secs(2)).await;
    // The leader's state write replaces the unreadable record.
    wait_until(Duration::from_secs(3), "state rewritten", || {
        let c = &c;
        async move {
            c.state("default", "old")
                .await
                .is_some_and(|s| s["status"] != "ZOMBIE")
        }
    })
    .await;
    assert_eq!(
        c.metric("r1", "scheduler_leader_changes_total").await,
        Some(1.0)
    );
    c.clean_up().await;
}

/// Sets Redis's memory limit (`0`: none) on a private server.
async fn set_maxmemory(url: &str, bytes: u64) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refusing_writes_stops_no_replica_and_loses_no_fire() {
    let _serial = SERIAL.lock().await;
    let redis = ax_testkit::RedisServer::start();
    let mut c = Cluster::new("e2e-redis-oom").await;
    c.redis_url = redis.url();
    c.start_replica("r1", Roles::Both).await;
    c.start_replica("r2", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    // Twenty one-shots due while Redis refuses every write (OOM at `maxmemory`).
    let start = now_ms() + 1500;
    let tasks: Vec<(String, String, Value)> = (0..20)
        .map(|i| {
            let due = start + i * 300;
            (
                "default".to_owned(),
                format!("oom-{i}"),
                http_task(&c, json!({ "at": rfc3339(due) })),
            )
        })
        .collect();
    c.put_tasks(&tasks).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    set_maxmemory(&redis.url(), 1).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    c.assert_running(&["r1", "r2"]);
    set_maxmemory(&redis.url(), 0).await;

    wait_until(Duration::from_secs(20), "every one-shot ran", || {
        let c = &c;
        async move {
            let n = counts(&c.receiver.executions());
            (0..20).all(|i| n.contains_key(&format!("oom-{i}")))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let n = counts(&c.receiver.executions());
    for i in 0..20 {
        assert_eq!(
            n[&format!("oom-{i}")],
            1,
            "oom-{i} ran {} times",
            n[&format!("oom-{i}")]
        );
    }
    c.assert_running(&["r1", "r2"]);
    let alerts = c.receiver.alerts();
    assert!(
        alerts
            .iter()
            .any(|a| a.to_string().contains("backend_unavailable")),
        "no backend_unavailable alert among {alerts:?}"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_leader_writes_its_last_states_before_it_exits() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-last-flush").await;
    // States are written only by the term's first flush and at shutdown: what etcd holds
    // after the stop is what the last flush wrote. The race it had was a coin toss per stop,
    // so the stop is repeated.
    c.env.push(("AX_FLUSH_INTERVAL", "1h".to_owned()));
    for round in 0..3 {
        let id = format!("r{round}");
        c.start_replica(&id, Roles::Both).await;
        c.wait_for_leader(None, Duration::from_secs(10)).await;
        let task = format!("last-{round}");
        let due = now_ms() + 1000;
        put_one_shot(&c, "default", &task, due).await;
        wait_for_executions(&c, &task, 1, Duration::from_secs(5)).await;
        // The finished event reaches the leader within its events interval.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let status = c.replica(&id).terminate(Duration::from_secs(15));
        assert!(
            status.is_some_and(|s| s.success()),
            "round {round}: exit {status:?}"
        );
        let state = c.state("default", &task).await;
        let state = state.unwrap_or_else(|| panic!("round {round}: no state written"));
        assert_eq!(state["status"], "SUCCESS", "round {round}: {state}");
        assert_eq!(state["success_count"], 1, "round {round}: {state}");
    }
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_without_persistence_is_noticed_fenced_and_alerted() {
    let _serial = SERIAL.lock().await;
    let mut redis = ax_testkit::RedisServer::start();
    let mut c = Cluster::new("e2e-redis-restart").await;
    c.redis_url = redis.url();
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    // The test server keeps nothing on disk: ax says so at start.
    assert_eq!(
        c.metric("r1", "scheduler_redis_config_warnings").await,
        Some(1.0)
    );
    let fence_key = format!("{{{}:q:default}}:fence", c.redis_prefix);
    let redis_url = redis.url();
    let fence = || {
        let url = redis_url.clone();
        let key = fence_key.clone();
        async move {
            let client = redis::Client::open(url).unwrap();
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                return 0;
            };
            let v: Option<u64> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .ok()
                .flatten();
            v.unwrap_or(0)
        }
    };
    // The leader key is written when the campaign is won, the fences in the takeover that
    // follows.
    wait_until(
        Duration::from_secs(5),
        "the leader raised the fence",
        || {
            let fence = &fence;
            async move { fence().await > 0 }
        },
    )
    .await;
    let token = fence().await;
    redis.restart();
    assert_eq!(
        fence().await,
        0,
        "a server without persistence forgot the fence"
    );
    wait_until(Duration::from_secs(10), "fence raised again", || {
        let fence = &fence;
        async move { fence().await == token }
    })
    .await;
    wait_until(Duration::from_secs(5), "backend_restarted alert", || {
        let c = &c;
        async move { c.receiver.has_alert("backend_restarted") }
    })
    .await;
    // And it keeps firing on the new server.
    let due = now_ms() + 1500;
    put_one_shot(&c, "default", "after", due).await;
    wait_for_executions(&c, "after", 1, Duration::from_secs(10)).await;
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_from_another_cluster_is_refused_with_its_cause_and_reseated_by_hand() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-foreign-fence").await;
    // Another installation's fence on the same Redis prefix: a higher token of another etcd.
    let client = redis::Client::open(c.redis_url.clone()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let fence = format!("{{{}:q:default}}:fence", c.redis_prefix);
    let _: () = redis::cmd("SET")
        .arg(&fence)
        .arg(999_999_999u64)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{fence}:owner"))
        .arg("other-cluster")
        .query_async(&mut conn)
        .await
        .unwrap();
    let due = now_ms() + 1500;
    put_one_shot(&c, "default", "ff", due).await;
    c.start_replica("r1", Roles::Both).await;
    wait_until(Duration::from_secs(10), "fence_conflict alert", || {
        let c = &c;
        async move {
            c.receiver
                .has_alert("belongs to etcd cluster other-cluster")
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        c.receiver.executions_of("ff").is_empty(),
        "nothing fires on a foreign fence"
    );
    assert!(c.replica("r1").is_running());

    let out = c.ax_ok(&["fence", "reseat"]).await;
    assert!(out.contains("queue default: fence reseated"), "{out}");
    wait_for_executions(&c, "ff", 1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(c.receiver.executions_of("ff").len(), 1);
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_deleted_while_no_replica_led_loses_its_state_and_history() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-orphan").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let due = now_ms() + 1000;
    put_one_shot(&c, "default", "gone", due).await;
    put_one_shot(&c, "default", "kept", due).await;
    wait_for_executions(&c, "gone", 1, Duration::from_secs(5)).await;
    wait_for_executions(&c, "kept", 1, Duration::from_secs(5)).await;
    wait_until(Duration::from_secs(5), "states written", || {
        let c = &c;
        async move {
            for id in ["gone", "kept"] {
                if c.state("default", id)
                    .await
                    .is_none_or(|s| s["status"] != "SUCCESS")
                {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let keys = ax_queue::Keys::new(c.redis_prefix.clone());
    let mut redis = redis::Client::open(c.redis_url.clone())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let history = |id: &str| keys.history("default", id);
    let exists: bool = redis::AsyncCommands::exists(&mut redis, history("gone"))
        .await
        .unwrap();
    assert!(exists, "the execution wrote its history");
    // No replica runs while the task is deleted: no leader sees the delete.
    let status = c.replica("r1").terminate(Duration::from_secs(15));
    assert!(status.is_some_and(|s| s.success()));
    c.etcd
        .delete(format!("{}/tasks/default/gone", c.prefix), None)
        .await
        .unwrap();
    c.start_replica("r2", Roles::Both).await;
    c.wait_for_leader(Some("r1"), Duration::from_secs(10)).await;
    wait_until(
        Duration::from_secs(5),
        "the deleted task's state removed",
        || {
            let c = &c;
            async move { c.state("default", "gone").await.is_none() }
        },
    )
    .await;
    let exists: bool = redis::AsyncCommands::exists(&mut redis, history("gone"))
        .await
        .unwrap();
    assert!(
        !exists,
        "the deleted task's history is removed with its state"
    );
    assert_eq!(
        c.state("default", "kept")
            .await
            .map(|s| s["status"].clone()),
        Some(json!("SUCCESS"))
    );
    let exists: bool = redis::AsyncCommands::exists(&mut redis, history("kept"))
        .await
        .unwrap();
    assert!(exists, "a live task keeps its history");
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_waiting_in_a_queue_no_worker_serves_raise_an_alert() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-unserved").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    // A typo in the queue name: the workers serve `default` only.
    let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 500) }));
    spec["queue"] = json!("defualt");
    c.put_task("default", "typo", &spec).await;
    put_one_shot(&c, "default", "fine", now_ms() + 500).await;
    wait_for_executions(&c, "fine", 1, Duration::from_secs(5)).await;
    wait_until(
        Duration::from_secs(30),
        "queue_unserved alert for the queue no worker serves",
        || {
            let raised = c
                .receiver
                .alerts()
                .iter()
                .any(|a| a["kind"] == "queue_unserved" && a["fields"]["queue"] == "defualt");
            async move { raised }
        },
    )
    .await;
    assert_eq!(c.metric("r1", "scheduler_unserved_queues").await, Some(1.0));
    assert!(c.receiver.executions_of("typo").is_empty());
    assert!(
        !c.receiver
            .alerts()
            .iter()
            .any(|a| a["kind"] == "queue_unserved" && a["fields"]["queue"] == "default"),
        "the served queue is not reported"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_changes_written_to_etcd_without_ax_are_audited_as_direct() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-audit").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    // One task through the CLI (audited by it), one written to etcd by hand.
    cli_put(&c, "ops", "by-ax", http_task(&c, json!({ "every": "1h" }))).await;
    c.put_task("ops", "by-hand", &http_task(&c, json!({ "every": "1h" })))
        .await;

    let deadline = Instant::now() + Duration::from_secs(20);
    let records = loop {
        let records = c.ax_json(&["audit"]).await;
        let direct = records
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["via"] == "etcd (direct)");
        if direct || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let summary: Vec<(String, String, String)> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["actor"]
                    .as_str()
                    .unwrap()
                    .split('@')
                    .next()
                    .unwrap()
                    .to_owned(),
                r["action"].as_str().unwrap().to_owned(),
                r["target"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let direct: Vec<&(String, String, String)> = summary
        .iter()
        .filter(|(a, _, _)| a == "etcd (direct)")
        .collect();
    assert_eq!(
        direct,
        [&(
            "etcd (direct)".to_owned(),
            "task.put".to_owned(),
            "ops/by-hand".to_owned()
        )],
        "{summary:?}"
    );
    assert!(
        summary
            .iter()
            .any(|(a, act, t)| a.starts_with("cli:") && act == "task.put" && t == "ops/by-ax"),
        "{summary:?}"
    );
}

/// The direct-write records in the audit log, as (action, task ids): a record's target, or
/// the tasks of its `detail.tasks` when it holds a burst.
async fn direct_records(c: &Cluster) -> Vec<(String, Vec<String>)> {
    let records = c
        .ax_json(&["audit", "--actor", "etcd (direct)", "--limit", "1000"])
        .await;
    records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let tasks = match r["detail"]["tasks"].as_array() {
                Some(tasks) => {
                    let tasks: Vec<String> = tasks
                        .iter()
                        .map(|t| t.as_str().unwrap().to_owned())
                        .collect();
                    assert_eq!(r["target"], format!("{} tasks", tasks.len()), "{r}");
                    tasks
                }
                None => vec![r["target"].as_str().unwrap().to_owned()],
            };
            assert_eq!(r["via"], "etcd (direct)", "{r}");
            (r["action"].as_str().unwrap().to_owned(), tasks)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_tasks_written_to_etcd_is_audited_in_a_few_records_and_fires() {
    const N: usize = 201;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-audit-burst").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    // Written straight to etcd while r1 leads, as a registration script does.
    let due = now_ms() + 3000;
    let tasks: Vec<(String, String, Value)> = (0..N)
        .map(|i| {
            (
                "burst".to_owned(),
                format!("t{i:03}"),
                http_task(&c, json!({ "at": rfc3339(due) })),
            )
        })
        .collect();
    c.put_tasks(&tasks).await;

    wait_until(Duration::from_secs(30), "every burst task executed", || {
        let n = c.receiver.executions().len();
        async move { n >= N }
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let records = loop {
        let records = direct_records(&c).await;
        let audited: usize = records.iter().map(|(_, t)| t.len()).sum();
        if audited >= N || Instant::now() > deadline {
            break records;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Room for late or repeated records and executions to show up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(direct_records(&c).await, records, "records after the last");

    assert!(
        records.len() <= 10,
        "{} records for {N} tasks",
        records.len()
    );
    assert!(records.iter().all(|(action, _)| action == "task.put"));
    let mut audited: Vec<String> = records.iter().flat_map(|(_, t)| t.clone()).collect();
    audited.sort();
    let expected: Vec<String> = tasks
        .iter()
        .map(|(ns, id, _)| format!("{ns}/{id}"))
        .collect();
    assert_eq!(audited, expected, "every task recorded once");
    let per_task = counts(&c.receiver.executions());
    assert_eq!(per_task.len(), N);
    assert!(per_task.values().all(|n| *n == 1), "{per_task:?}");
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_now_carries_its_payload_and_its_idempotency_key_runs_it_once() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-run-params").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    let mut spec = http_task(&c, json!({ "every": "1h" }));
    spec["payload"] = json!({"day": "spec"});
    cli_put(&c, "ops", "report", spec).await;

    // The same key twice: two requests, enqueued once.
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (code, id, err) = c
            .ax(
                &[
                    "task",
                    "trigger",
                    "ops/report",
                    "--payload",
                    "-",
                    "--idempotency-key",
                    "2026-11-29",
                ],
                Some(r#"{"day": "2026-11-29"}"#),
            )
            .await;
        assert_eq!(code, 0, "{err}");
        ids.push(id);
    }
    let (first, second) = (&ids[0], &ids[1]);
    assert_ne!(first.trim(), second.trim());
    // Without a key, a run-now with the spec's payload.
    let third = c.ax_ok(&["task", "trigger", "ops/report"]).await;
    wait_for_executions(&c, "report", 2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;

    let runs = c.receiver.executions_of("report");
    let mut seen: Vec<(String, Value)> = runs
        .iter()
        .map(|e| (e.execution_id.clone(), e.payload.clone()))
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        [
            (first.trim().to_owned(), json!({"day": "2026-11-29"})),
            (third.trim().to_owned(), json!({"day": "spec"})),
        ],
        "{runs:?}"
    );
    assert!(runs.iter().all(|e| e.run_now));

    // Each story says how it started, who asked and with what payload; the history says so
    // per attempt, and its lateness counts from when it was asked for.
    let mut story = Value::Null;
    for _ in 0..20 {
        story = c.ax_json(&["execution", "get", first.trim()]).await;
        if story["attempts"].as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(story["origin"]["kind"], "manual", "{story}");
    let actor = story["origin"]["actor"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(actor.starts_with("cli:"), "{story}");
    assert_eq!(
        story["origin"]["payload"],
        json!({"day": "2026-11-29"}),
        "{story}"
    );
    let attempt = &story["attempts"][0];
    assert_eq!(attempt["origin"]["kind"], "manual", "{story}");
    assert!(attempt["lateness_ms"].as_u64().unwrap() < 5_000, "{story}");
    let text = c.ax_ok(&["execution", "get", first.trim()]).await;
    assert!(
        text.contains(&format!(
            "run now, asked by {actor}, payload {{\"day\":\"2026-11-29\"}}"
        )),
        "{text}"
    );
    let plain = c.ax_json(&["execution", "get", third.trim()]).await;
    assert_eq!(plain["origin"]["kind"], "manual", "{plain}");
    assert!(plain["origin"].get("payload").is_none(), "{plain}");
    let history = c.ax_ok(&["task", "history", "ops/report"]).await;
    assert!(
        history.lines().skip(1).all(|l| l.contains(" manual ")),
        "{history}"
    );

    let bad = c
        .ax(
            &["task", "trigger", "ops/report", "--idempotency-key", ""],
            None,
        )
        .await;
    assert_eq!(bad.0, 3, "{bad:?}");
    assert!(bad.2.contains("idempotency_key"), "{bad:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_runs_each_past_fire_of_the_range_once() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-backfill").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    cli_put(
        &c,
        "ops",
        "hourly",
        http_task(&c, json!({ "cron": "0 0 * * * *" })),
    )
    .await;

    let (from, to) = ("2026-11-01T00:00:00Z", "2026-11-01T05:00:00Z");
    let listed = c
        .ax_ok(&[
            "task",
            "backfill",
            "ops/hourly",
            "--from",
            from,
            "--to",
            to,
            "--dry-run",
        ])
        .await;
    assert_eq!(listed.lines().count(), 6, "{listed}");
    assert!(
        c.receiver.executions_of("hourly").is_empty(),
        "a dry run runs nothing"
    );
    let (code, _, err) = c
        .ax(
            &[
                "task",
                "backfill",
                "ops/hourly",
                "--from",
                from,
                "--to",
                to,
                "--max",
                "5",
            ],
            None,
        )
        .await;
    assert_eq!(code, 3, "more than --max is refused: {err}");
    assert!(err.contains("--force"), "{err}");

    let first_ids = c
        .ax_ok(&["task", "backfill", "ops/hourly", "--from", from, "--to", to])
        .await;
    wait_for_executions(&c, "hourly", 6, Duration::from_secs(10)).await;
    // The same range again: every fire was run already, and the answer names the executions
    // that ran (ids that exist), not fresh ids nothing will ever run under.
    let (code, again, err) = c
        .ax(
            &["task", "backfill", "ops/hourly", "--from", from, "--to", to],
            None,
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("0 fire(s) of ops/hourly enqueued") && err.contains("6 ran already"),
        "{err}"
    );
    for (line, first) in again.lines().zip(first_ids.lines()) {
        assert_eq!(line, format!("{first}  (ran already)"), "{again}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs = c.receiver.executions_of("hourly");
    let mut fires: Vec<i64> = runs.iter().filter_map(|e| e.backfill_of).collect();
    fires.sort_unstable();
    let first = 1_793_491_200_000_i64; // 2026-11-01T00:00:00Z
    let hour = 3_600_000;
    assert_eq!(
        fires,
        (0..6).map(|h| first + h * hour).collect::<Vec<_>>(),
        "{runs:?}"
    );
    assert_eq!(runs.len(), 6, "{runs:?}");
    assert!(runs.iter().all(|e| e.run_now));
    // Each is told apart from a scheduled fire, in the API, the story and the history.
    let id = first_ids
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap();
    let story = c.ax_json(&["execution", "get", id]).await;
    assert_eq!(story["origin"]["kind"], "backfill", "{story}");
    assert!(
        story["origin"]["actor"]
            .as_str()
            .is_some_and(|a| a.starts_with("cli:")),
        "{story}"
    );
    let text = c.ax_ok(&["execution", "get", id]).await;
    assert!(text.contains("backfill, asked by cli:"), "{text}");
    let history = c.ax_ok(&["task", "history", "ops/hourly"]).await;
    assert_eq!(
        history
            .lines()
            .skip(1)
            .filter(|l| l.contains(" backfill "))
            .count(),
        6,
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_namespace_fires_nothing_even_across_a_failover_and_resumes_by_its_misfire_policy()
{
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-ns-pause").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    for (ns, id) in [("batch", "b1"), ("web", "w1")] {
        let mut spec = http_task(&c, json!({ "every": "1s" }));
        spec["misfire"] = json!("fire_once");
        cli_put(&c, ns, id, spec).await;
    }
    wait_for_executions(&c, "b1", 1, Duration::from_secs(5)).await;

    assert_eq!(
        c.ax_ok(&["namespace", "pause", "batch"]).await,
        "namespace batch paused\n"
    );
    // The pause takes effect within the leader's poll (250 ms); one fire may be on its way.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let paused_at = now_ms();
    let status = c.ax_ok(&["status"]).await;
    assert!(
        status.contains("paused namespaces: 1") && status.contains("batch"),
        "{status}"
    );
    // A new leader reads the pause before it fires anything.
    c.start_replica("r2", Roles::Both).await;
    c.replica("r1").kill();
    c.wait_for_leader(Some("r1"), Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during: Vec<Execution> = c
        .receiver
        .executions_of("b1")
        .into_iter()
        .filter(|e| e.arrived_at > paused_at)
        .collect();
    assert!(
        during.is_empty(),
        "ran while its namespace was paused: {during:?}"
    );
    let web = c.receiver.executions_of("w1");
    assert!(
        web.iter().any(|e| e.arrived_at > paused_at + 2000),
        "other namespaces go on"
    );

    c.ax_ok(&["namespace", "resume", "batch"]).await;
    let resumed = now_ms();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after: Vec<Execution> = c
        .receiver
        .executions_of("b1")
        .into_iter()
        .filter(|e| e.arrived_at > resumed)
        .collect();
    // fire_once: one run for everything missed, then the cadence.
    assert!(!after.is_empty() && after.len() <= 3, "{after:?}");
    let (code, _, err) = c.ax(&["namespace", "resume", "batch"], None).await;
    assert_eq!(code, 4, "not paused any more: {err}");
    let audit = c.ax_ok(&["audit"]).await;
    assert!(
        audit.contains("namespace.pause") && audit.contains("namespace.resume"),
        "{audit}"
    );
}

/// `ax task kill` while the leader, which also runs the execution, is SIGKILLed: the kill
/// order outlives the process, so when the reaper gives the dead worker's message back
/// (after the visibility timeout) the surviving worker ends it `killed` without running it.
/// The new leader records `KILLED`; no retry, no dead letter, no failure alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_racing_a_failover_is_not_undone_by_the_redelivery() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-kill").await;
    // The leader is the only worker when the execution starts, so the process killed holds
    // it; the standby schedules only.
    c.start_replica("a", Roles::Both).await;
    let old = c.wait_for_leader(None, Duration::from_secs(10)).await;
    assert_eq!(old, "a");
    c.start_replica("b", Roles::Scheduler).await;
    c.receiver.slow_task("slow", Duration::from_secs(120));
    let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 500) }));
    spec["timeout"] = json!("5m");
    spec["retry"] = json!({ "max_retries": 3, "initial_interval": "1s" });
    c.put_task("kill", "slow", &spec).await;
    wait_for_executions(&c, "slow", 1, Duration::from_secs(10)).await;
    let execution = c.receiver.executions_of("slow")[0].execution_id.clone();
    c.start_replica("w", Roles::Worker).await;

    c.replica("a").kill();
    let out = c.ax_ok(&["task", "kill", "kill/slow"]).await;
    assert!(
        out.contains(&execution) && out.contains("its worker stops it"),
        "{out}"
    );
    c.wait_for_leader(Some("a"), Duration::from_secs(10)).await;

    // The reaper gives the message back after the visibility timeout (30 s).
    wait_until(
        Duration::from_secs(60),
        "the killed execution's end",
        || {
            let c = &c;
            async move {
                let h = c.ax_json(&["task", "history", "kill/slow"]).await;
                h.as_array()
                    .is_some_and(|a| a.iter().any(|e| e["outcome"] == "killed"))
            }
        },
    )
    .await;
    wait_until(Duration::from_secs(5), "the task's state KILLED", || {
        let c = &c;
        async move {
            c.state("kill", "slow")
                .await
                .is_some_and(|s| s["status"] == "KILLED")
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        c.receiver.executions_of("slow").len(),
        1,
        "the killed execution ran again"
    );
    let dead = c.ax_json(&["dlq", "list"]).await;
    assert_eq!(dead.as_array().map(Vec::len), Some(0), "{dead}");
    assert!(
        !c.receiver
            .alerts()
            .iter()
            .any(|a| a.to_string().contains("slow")),
        "{:?}",
        c.receiver.alerts()
    );
    // Killing it again: nothing current is left (exit 4), the id says it was killed.
    let (code, _, err) = c.ax(&["task", "kill", "kill/slow"], None).await;
    assert_eq!(code, 4, "{err}");
    let again = c
        .ax_ok(&["task", "kill", "kill/slow", "--execution", &execution])
        .await;
    assert!(again.contains("killed already"), "{again}");
}

/// A kill while a retry is pending ends the execution `killed`: its story says so, in
/// order, and the attempt that never started has no start and no lateness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_pending_retry_ends_the_story_killed_in_order() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-kill-retry").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.receiver.fail_task("later");
    let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 500) }));
    spec["retry"] = json!({ "max_retries": 3, "initial_interval": "10m", "jitter": 0 });
    c.put_task("default", "later", &spec).await;
    wait_for_executions(&c, "later", 1, Duration::from_secs(10)).await;
    let execution = c.receiver.executions_of("later")[0].execution_id.clone();
    wait_until(Duration::from_secs(10), "the first attempt recorded", || {
        let c = &c;
        let execution = execution.clone();
        async move {
            c.ax_json(&["execution", "get", &execution]).await["outcome"] == "retrying"
        }
    })
    .await;
    // The queue lists the pending retry: its next attempt, and when it is due.
    let queue = c.ax_json(&["queue", "show", "default"]).await;
    let retrying = queue["retrying"].as_array().unwrap();
    assert_eq!(retrying.len(), 1, "{queue}");
    assert_eq!(
        (&retrying[0]["execution_id"], &retrying[0]["attempt"]),
        (&json!(execution), &json!(2)),
        "{queue}"
    );
    assert!(
        retrying[0]["retry_at"].as_i64().unwrap() > now_ms() + 60_000,
        "{queue}"
    );
    let out = c.ax_ok(&["task", "kill", "default/later"]).await;
    assert!(out.contains("its pending retry removed"), "{out}");

    wait_until(
        Duration::from_secs(10),
        "the story's outcome killed",
        || {
            let c = &c;
            let execution = execution.clone();
            async move { c.ax_json(&["execution", "get", &execution]).await["outcome"] == "killed" }
        },
    )
    .await;
    let story = c.ax_json(&["execution", "get", &execution]).await;
    let attempts = story["attempts"].as_array().unwrap();
    let shown: Vec<(u64, &str)> = attempts
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().unwrap(),
                a["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(shown, [(1, "retrying"), (2, "killed")], "{story}");
    let killed = &attempts[1];
    assert!(
        killed.get("started").is_none() && killed.get("lateness_ms").is_none(),
        "an attempt that never started shows a start: {story}"
    );
    // The story's lines in the order of their instants.
    let text = c.ax_ok(&["execution", "get", &execution]).await;
    let instants: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("20"))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let mut sorted = instants.clone();
    sorted.sort_unstable();
    assert_eq!(instants, sorted, "{text}");
    assert!(text.contains("attempt 2 killed"), "{text}");
    assert!(!text.contains("attempt 2 started"), "{text}");
    wait_until(Duration::from_secs(5), "the task's state KILLED", || {
        let c = &c;
        async move {
            c.state("default", "later")
                .await
                .is_some_and(|s| s["status"] == "KILLED")
        }
    })
    .await;
    c.clean_up().await;
}

/// Where each of `needles` first occurs in `text`, failing on one that is missing.
fn positions(text: &str, needles: &[&str]) -> Vec<usize> {
    needles
        .iter()
        .map(|n| {
            text.find(n)
                .unwrap_or_else(|| panic!("`{n}` missing from:\n{text}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_execution_history_shows_every_attempt_across_tasks_and_each_executions_story() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-history").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.receiver.fail_task("flaky");
    // Far more than the 1 KiB kept.
    c.receiver.answer_with("flaky", "E".repeat(200_000));
    c.receiver.answer_with("fine", "all good".into());

    let due = now_ms() + 1000;
    let mut spec = http_task(&c, json!({ "at": rfc3339(due) }));
    spec["retry"] = json!({
        "max_retries": 1,
        "initial_interval": "200ms",
        "jitter": 0,
    });
    c.put_task("default", "flaky", &spec).await;
    c.put_task(
        "other",
        "fine",
        &http_task(&c, json!({ "at": rfc3339(due) })),
    )
    .await;

    wait_until(Duration::from_secs(10), "three recorded attempts", || {
        let c = &c;
        async move {
            c.ax_json(&["history"]).await["items"]
                .as_array()
                .is_some_and(|a| a.len() >= 3)
        }
    })
    .await;

    let failed = c.ax_json(&["history", "--failed", "--since", "1h"]).await;
    let items = failed["items"].as_array().unwrap();
    let seen: Vec<(&str, &str, u64, &str)> = items
        .iter()
        .map(|i| {
            (
                i["namespace"].as_str().unwrap(),
                i["task_id"].as_str().unwrap(),
                i["attempt"].as_u64().unwrap(),
                i["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("default", "flaky", 2, "failed"),
            ("default", "flaky", 1, "retrying")
        ],
        "failed attempts only, newest first: {failed}"
    );
    assert!(failed.get("continue").is_none(), "{failed}");
    for i in items {
        let out = &i["output"];
        assert_eq!(out["status"], 500, "{i}");
        assert_eq!(
            out["body"].as_str().unwrap(),
            "E".repeat(1024),
            "capped at 1 KiB"
        );
        assert_eq!(out["truncated"], true);
        assert!(i["worker"].is_string() && i["finished"].is_i64(), "{i}");
        // Each attempt's due instant is its own: the fire for the first, the end of its wait
        // for the retry, and its lateness counts from there.
        let own_due = if i["attempt"] == 1 {
            due
        } else {
            i["enqueued"].as_i64().unwrap()
        };
        assert_eq!(i["due"], own_due, "{i}");
        assert_eq!(i["origin"]["kind"], "schedule", "{i}");
        assert!(i["lateness_ms"].as_i64().unwrap() < 1_000, "{i}");
    }
    assert!(
        items[0]["due"].as_i64().unwrap() > due,
        "the retry is due after the fire"
    );
    let id = items[0]["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(items[1]["execution_id"], id.as_str());

    // The table a person reads.
    let table = c.ax_ok(&["history", "--failed", "--since", "1h"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("FINISHED") && lines[0].contains("ANSWER"),
        "{table}"
    );
    assert!(
        lines[1].contains("default/flaky") && lines[1].contains(" failed "),
        "{table}"
    );
    assert!(
        lines[2].contains("retrying") && lines[2].contains("500"),
        "{table}"
    );
    assert!(!table.contains("other/fine"), "{table}");

    // A task's filter, and a time range that ends before anything ran.
    let fine = c.ax_json(&["history", "--task", "other/fine"]).await;
    assert_eq!(fine["items"].as_array().unwrap().len(), 1, "{fine}");
    assert_eq!(fine["items"][0]["outcome"], "succeeded");
    assert_eq!(fine["items"][0]["output"]["body"], "all good");
    let before = (due - 60_000).to_string();
    let none = c.ax_json(&["history", "--until", &before]).await;
    assert!(none["items"].as_array().unwrap().is_empty(), "{none}");

    // Paging newest first with the cursor.
    let mut paged = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut args = vec!["history", "--limit", "1"];
        if let Some(t) = &token {
            args.extend(["--continue", t.as_str()]);
        }
        let page = c.ax_json(&args).await;
        for i in page["items"].as_array().unwrap() {
            paged.push((i["task_id"].clone(), i["attempt"].clone()));
        }
        match page["continue"].as_str() {
            Some(t) => token = Some(t.to_owned()),
            None => break,
        }
    }
    let all = c.ax_json(&["history"]).await;
    let whole: Vec<_> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["task_id"].clone(), i["attempt"].clone()))
        .collect();
    assert_eq!(paged, whole, "pages of one make the whole list");
    assert_eq!(whole.len(), 3);

    // One execution's story, in order.
    let story = c.ax_ok(&["execution", "get", &id]).await;
    let at = positions(
        &story,
        &[
            "fired (due)",
            "enqueued",
            "attempt 1 started on r1",
            "attempt 1 retrying: HTTP 500",
            "answer: HTTP 500 EEEE",
            "attempt 2 enqueued (retry)",
            "attempt 2 started on r1",
            "attempt 2 failed: HTTP 500",
            "dead-lettered after 2 attempt(s)",
        ],
    );
    assert!(at.windows(2).all(|w| w[0] < w[1]), "out of order:\n{story}");
    assert!(story.contains("outcome: failed"), "{story}");
    let json_story = c.ax_json(&["execution", "get", &id]).await;
    assert_eq!(json_story["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(json_story["dead_letter"]["execution_id"], id.as_str());
    assert_eq!(json_story["complete"], true);
    let (code, _, err) = c
        .ax(
            &["execution", "get", "0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c5b6a"],
            None,
        )
        .await;
    assert_eq!(code, 4, "{err}");

    // The same through the API of the replica.
    let port = c.replica("r1").http_port;
    let api = harness::api_get(&format!(
        "http://127.0.0.1:{port}/api/v1/executions?task=default/flaky&outcome=failed"
    ))
    .await;
    assert_eq!(api["items"].as_array().unwrap().len(), 1, "{api}");
    let api_story =
        harness::api_get(&format!("http://127.0.0.1:{port}/api/v1/executions/{id}")).await;
    assert_eq!(api_story, json_story);
    c.clean_up().await;
}

/// The `deadline_missed` alerts of one task, oldest first.
fn deadline_alerts(c: &Cluster, task_id: &str) -> Vec<Value> {
    c.receiver
        .alerts()
        .into_iter()
        .filter(|a| a["kind"] == "deadline_missed" && a["task"]["id"] == task_id)
        .collect()
}

/// Waits for the first `deadline_missed` alert of `task_id` and returns it.
async fn first_deadline_alert(c: &Cluster, task_id: &str, within: Duration) -> Value {
    wait_until(within, &format!("deadline alert of {task_id}"), || {
        let got = !deadline_alerts(c, task_id).is_empty();
        async move { got }
    })
    .await;
    deadline_alerts(c, task_id).remove(0)
}

fn fire_field(alert: &Value) -> i64 {
    let text = alert["fields"]["fire_at"].as_str().unwrap();
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("fire_at {text}: {e}"))
        .timestamp_millis()
}

/// `expect_success_within` through real processes: a failing task, a stuck one (running,
/// then its next fire held behind it) and a healthy one, then an outage with no leader. Each
/// miss names its reason; the healthy task raises nothing while it is healthy; the next
/// leader alerts only fires the last one had not (its mark is in the state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_deadline_is_alerted_once_with_its_reason_through_a_failover() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-deadline").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.receiver.fail_task("fails");
    c.receiver.slow_task("stuck", Duration::from_secs(60));
    for (id, within) in [("fails", "1s"), ("stuck", "1s"), ("steady", "1500ms")] {
        let mut spec = http_task(&c, json!({ "every": "2s" }));
        spec["expect_success_within"] = json!(within);
        spec["retry"] = json!({ "max_retries": 0 });
        spec["timeout"] = json!("2m");
        cli_put(&c, "default", id, spec).await;
    }

    let failing = first_deadline_alert(&c, "fails", Duration::from_secs(10)).await;
    assert_eq!(failing["fields"]["reason"], "failing", "{failing}");
    assert_eq!(failing["level"], "critical");
    let message = failing["message"].as_str().unwrap();
    assert!(message.contains("HTTP 500"), "the last error: {message}");
    let stuck = first_deadline_alert(&c, "stuck", Duration::from_secs(10)).await;
    assert_eq!(stuck["fields"]["reason"], "running", "{stuck}");
    // The next fire is held behind the stuck execution (overlap forbid), and missed for that.
    let r1 = c.replica("r1").http_port;
    wait_until(
        Duration::from_secs(10),
        "a held deadline miss",
        || async move {
            harness::metric_at(r1, "scheduler_deadline_misses_total{reason=\"held\"}")
                .await
                .is_some_and(|v| v >= 1.0)
        },
    )
    .await;
    assert!(
        deadline_alerts(&c, "steady").is_empty(),
        "a task that succeeds in time raises nothing: {:?}",
        deadline_alerts(&c, "steady")
    );

    // Nobody leads for a while.
    c.replica("r1").kill();
    let killed = now_ms();
    let marked = c.state("default", "fails").await.unwrap()["deadline_mark"]
        .as_i64()
        .expect("the failing task's mark is written");
    tokio::time::sleep(Duration::from_secs(5)).await;
    c.start_replica("r2", Roles::Both).await;
    let orphaned = first_deadline_alert(&c, "steady", Duration::from_secs(15)).await;
    assert_eq!(orphaned["fields"]["reason"], "no_leader", "{orphaned}");
    assert!(fire_field(&orphaned) > killed - 2000, "{orphaned}");
    // The fires r1 alerted are not alerted again by r2.
    wait_until(
        Duration::from_secs(10),
        "r2 judges the failing task",
        || {
            let n = deadline_alerts(&c, "fails").len();
            async move { n >= 2 }
        },
    )
    .await;
    for alert in &deadline_alerts(&c, "fails")[1..] {
        assert!(
            fire_field(alert) > marked,
            "r2 alerted a fire r1 had (mark {marked}): {alert}"
        );
    }
    let r2 = c.replica("r2").http_port;
    assert!(
        harness::metric_at(r2, "scheduler_deadline_misses_total{reason=\"no_leader\"}")
            .await
            .is_some_and(|v| v >= 1.0)
    );
    c.clean_up().await;
}

/// A leader stalled past the stall threshold (SIGSTOP, shorter than its lease) skips the
/// fires it missed (misfire `skip`): their deadlines are missed as `never_fired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fires_a_stalled_leader_skipped_miss_their_deadline_as_never_fired() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-deadline-stall").await;
    c.env.push(("AX_LEASE_TTL", "30s".to_owned()));
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let mut spec = http_task(&c, json!({ "every": "2s" }));
    spec["expect_success_within"] = json!("1s");
    spec["misfire"] = json!("skip");
    cli_put(&c, "default", "steady", spec).await;
    wait_for_executions(&c, "steady", 2, Duration::from_secs(10)).await;
    // Right after an execution, so none is in flight when the process stops.
    let seen = c.receiver.executions_of("steady").len();
    wait_for_executions(&c, "steady", seen + 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = c.replica("r1").pid().unwrap();
    ax_testkit::signal(pid, "STOP");
    tokio::time::sleep(Duration::from_secs(7)).await;
    ax_testkit::signal(pid, "CONT");
    let alert = first_deadline_alert(&c, "steady", Duration::from_secs(10)).await;
    assert_eq!(alert["fields"]["reason"], "never_fired", "{alert}");
    c.assert_running(&["r1"]);
    c.clean_up().await;
}

/// `ax queue pause`: workers stop taking from the queue (the leader keeps enqueueing), the
/// metric and `ax status` say so, and `resume` lets the waiting executions run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_holds_its_executions_until_resumed() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-queue-pause").await;
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    cli_put(
        &c,
        "default",
        "tick",
        http_task(&c, json!({ "every": "1s" })),
    )
    .await;
    wait_for_executions(&c, "tick", 1, Duration::from_secs(5)).await;

    c.ax_ok(&["queue", "pause", "default"]).await;
    // Workers read the flag with each take; one execution may be on its way.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let paused_at = now_ms();
    let metric = "scheduler_queue_paused{queue=\"default\"}";
    let r1 = c.replica("r1").http_port;
    wait_until(
        Duration::from_secs(10),
        "the paused metric",
        || async move { harness::metric_at(r1, metric).await == Some(1.0) },
    )
    .await;
    let status = c.ax_ok(&["status"]).await;
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("default") && l.ends_with("paused")),
        "{status}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    // What waits is listed, as the API shows it (overlap `forbid`: one fire waits in the
    // queue, the later ones are held by the leader behind it).
    let held = c.ax_json(&["queue", "show", "default"]).await;
    assert_eq!(held["paused"], true, "{held}");
    let waiting = held["waiting"].as_array().unwrap();
    assert!(
        held["waiting_total"].as_u64().unwrap() >= 1 && !waiting.is_empty(),
        "{held}"
    );
    assert!(
        waiting
            .iter()
            .all(|e| e["task_id"] == "tick" && e["attempt"] == 1),
        "{held}"
    );
    let text = c.ax_ok(&["queue", "show", "default"]).await;
    assert!(text.starts_with("queue default (paused"), "{text}");
    let port = c.replica("r1").http_port;
    let api = harness::api_get(&format!("http://127.0.0.1:{port}/api/v1/queues/default")).await;
    assert_eq!(api["waiting_total"], held["waiting_total"], "{api}");
    let (code, _, err) = c.ax(&["queue", "show", "nosuch"], None).await;
    assert_eq!(code, 4, "an unknown queue is not found: {err}");
    let during: Vec<Execution> = c
        .receiver
        .executions_of("tick")
        .into_iter()
        .filter(|e| e.arrived_at > paused_at)
        .collect();
    assert!(during.is_empty(), "ran from a paused queue: {during:?}");

    c.ax_ok(&["queue", "resume", "default"]).await;
    // The fires enqueued meanwhile run now, each once.
    wait_until(Duration::from_secs(10), "the waiting executions", || {
        let n = c
            .receiver
            .executions_of("tick")
            .iter()
            .filter(|e| e.arrived_at > paused_at)
            .count();
        async move { n >= 3 }
    })
    .await;
    let all = c.receiver.executions_of("tick");
    let mut fires: Vec<i64> = all.iter().map(|e| e.fire_at).collect();
    fires.sort_unstable();
    fires.dedup();
    assert_eq!(fires.len(), all.len(), "no fire ran twice");
    wait_until(
        Duration::from_secs(10),
        "the metric back at 0",
        || async move { harness::metric_at(r1, metric).await == Some(0.0) },
    )
    .await;
    c.clean_up().await;
}

/// A chain (r, then a and b, then c after both) runs each step once with the run's id, across
/// the scheduler that leads being SIGKILLed while a step runs; a cycle is INVALID with the
/// cycle printed; `ax task graph` shows the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_chain_runs_each_step_once_through_a_failover_in_the_middle() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-chain").await;
    c.start_replica("s1", Roles::Scheduler).await;
    let first = c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.start_replica("s2", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;
    c.receiver.slow_task("a", Duration::from_secs(4));
    let url = c.receiver.exec_url();
    let step =
        |deps: Value| json!({ "handler": "http", "http": { "url": url }, "depends_on": deps });
    cli_put(&c, "default", "a", step(json!([{ "task": "r" }]))).await;
    cli_put(&c, "default", "b", step(json!([{ "task": "r" }]))).await;
    cli_put(
        &c,
        "default",
        "c",
        step(json!([{ "task": "a" }, { "task": "b", "on": "any", "within": "1m" }])),
    )
    .await;
    put_one_shot(&c, "default", "r", now_ms() + 1000).await;

    // The leader dies while a runs.
    wait_for_executions(&c, "a", 1, Duration::from_secs(10)).await;
    c.replica(&first).kill();
    c.wait_for_leader(Some(&first), Duration::from_secs(10))
        .await;
    wait_for_executions(&c, "c", 1, Duration::from_secs(20)).await;
    // Anything sent twice would arrive within a few seconds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let root = c.receiver.executions_of("r");
    assert_eq!(root.len(), 1, "{root:?}");
    let run = root[0].execution_id.clone();
    assert_eq!(
        root[0].run_id.as_deref(),
        Some(run.as_str()),
        "the run is named after r"
    );
    for id in ["a", "b", "c"] {
        let got = c.receiver.executions_of(id);
        assert_eq!(got.len(), 1, "{id} runs once: {got:?}");
        assert_eq!(
            got[0].run_id.as_deref(),
            Some(run.as_str()),
            "{id} carries the run"
        );
    }
    let a_ended = c.receiver.executions_of("a")[0].arrived_at + 4000;
    assert!(
        c.receiver.executions_of("c")[0].arrived_at >= a_ended - 500,
        "c waits for a"
    );

    let graph = c.ax_ok(&["task", "graph", "default/b"]).await;
    assert!(
        graph.contains("default/c")
            && graph.contains(
                "after default/a (on success, within 1day), default/b (on any, within 1m)"
            ),
        "{graph}"
    );
    let dot = c.ax_ok(&["task", "graph", "default/b", "--dot"]).await;
    assert!(dot.contains("\"default/r\" -> \"default/a\""), "{dot}");

    // A cycle: both tasks INVALID, the cycle in their errors.
    cli_put(&c, "default", "x", step(json!([{ "task": "y" }]))).await;
    cli_put(&c, "default", "y", step(json!([{ "task": "x" }]))).await;
    wait_until(Duration::from_secs(10), "the cycle marked INVALID", || {
        let c = &c;
        async move {
            let state = c.state("default", "x").await;
            state.is_some_and(|s| {
                s["status"] == "INVALID"
                    && s.to_string()
                        .contains("is a cycle: default/x -> default/y -> default/x")
            })
        }
    })
    .await;
    c.clean_up().await;
}

/// The `command` handler in a real replica, configured by its `ax.toml` (`AX_CONFIG`): a
/// task runs a script with its arguments, allowed environment and payload; the exit code and
/// the output excerpts are in `ax history` and `ax execution get`; a non-zero exit fails
/// with its code and stderr (alerted), an unknown command fails once, for good; `ax task
/// kill` stops a running command with its whole process group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_handler_runs_configured_scripts_and_records_their_exit_and_output() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-command").await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    std::fs::write(
        dir.path().join("report.sh"),
        "echo \"args: $*\"\necho \"greeting: $GREETING\"\necho \"payload: $AX_PAYLOAD\"\n\
         echo \"attempt $AX_ATTEMPT of $AX_TASK\" >&2\nexit \"$1\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("hang.sh"),
        "sleep 600 &\necho $! > grandchild\necho $$ > child\nsleep 600\n",
    )
    .unwrap();
    // Scripts run as `/bin/sh FILE`; the test machine may run as root.
    let toml = format!(
        "[worker]\ncommands_allow_root = true\n\
         [worker.commands.report]\npath = \"/bin/sh\"\nargs = [\"{d}/report.sh\"]\n\
         task_args = \"patterns\"\narg_patterns = [\"[0-9]\", \"[a-z ]+\"]\n\
         allow_env = [\"GREETING\"]\n\
         [worker.commands.hang]\npath = \"/bin/sh\"\nargs = [\"{d}/hang.sh\"]\n\
         working_dir = \"{d}\"\nkill_grace = \"1s\"\n"
    );
    let config = dir.path().join("ax.toml");
    std::fs::write(&config, toml).unwrap();
    c.env.push(("AX_CONFIG", config.display().to_string()));
    c.start_replica("r1", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;

    let due = json!({ "at": rfc3339(now_ms() + 500) });
    let command_task = |args: Value, retries: u32| {
        json!({
            "handler": "command",
            "schedule": due,
            "payload": {"day": "mon"},
            "command": {"name": "report", "args": args, "env": {"GREETING": "hi there"}},
            "retry": {"max_retries": retries},
        })
    };
    cli_put(&c, "default", "ok", command_task(json!(["0", "a b"]), 0)).await;
    cli_put(&c, "default", "bad", command_task(json!(["3"]), 0)).await;
    let mut unknown = command_task(json!([]), 3);
    unknown["command"] = json!({"name": "restore"});
    cli_put(&c, "default", "unknown", unknown).await;
    // A path in the spec is refused before it is stored.
    let mut with_path = command_task(json!([]), 0);
    with_path["command"]["path"] = json!("/bin/sh");
    with_path["id"] = json!("p");
    let (code, _, err) = c
        .ax(&["task", "put", "-"], Some(&with_path.to_string()))
        .await;
    assert_ne!(code, 0);
    assert!(err.contains("command.path: unknown field `path`"), "{err}");

    wait_until(Duration::from_secs(15), "three command attempts", || {
        let c = &c;
        async move {
            c.ax_json(&["history"]).await["items"]
                .as_array()
                .is_some_and(|a| a.len() >= 3)
        }
    })
    .await;
    let item = |task: &'static str| {
        let c = &c;
        async move {
            let h = c
                .ax_json(&["history", "--task", &format!("default/{task}")])
                .await;
            let items = h["items"].as_array().unwrap().clone();
            assert_eq!(items.len(), 1, "one attempt of {task}: {h}");
            items[0].clone()
        }
    };
    let ok = item("ok").await;
    assert_eq!(ok["outcome"], "succeeded", "{ok}");
    assert_eq!(ok["output"]["exit_code"], 0, "{ok}");
    // The task's env values are its secrets: the history keeps the output with them masked.
    assert_eq!(
        ok["output"]["body"],
        "args: 0 a b\ngreeting: ***\npayload: {\"day\":\"mon\"}\n"
    );
    assert_eq!(ok["output"]["stderr"], "attempt 1 of ok\n");

    let bad = item("bad").await;
    assert_eq!(bad["outcome"], "failed", "{bad}");
    assert_eq!(bad["output"]["exit_code"], 3);
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .starts_with("command `report` exited with code 3; stderr: attempt 1 of bad"),
        "{bad}"
    );
    let story = c
        .ax_ok(&["execution", "get", bad["execution_id"].as_str().unwrap()])
        .await;
    assert!(
        story.contains("exit code 3; stdout: args: 3 greeting: ***")
            && story.contains("stderr: attempt 1 of bad"),
        "{story}"
    );
    let table = c.ax_ok(&["history", "--task", "default/bad"]).await;
    assert!(table.contains("exit 3"), "{table}");

    let unknown = item("unknown").await;
    assert_eq!(
        unknown["outcome"], "failed",
        "no retry for a command the replica lacks: {unknown}"
    );
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .starts_with("unknown command `restore`: this replica configures [hang, report]"),
        "{unknown}"
    );
    wait_until(Duration::from_secs(10), "the failure alerts", || {
        let c = &c;
        async move {
            c.receiver.has_alert("exited with code 3") && c.receiver.has_alert("unknown command")
        }
    })
    .await;

    // A running command killed by an operator: SIGTERM to its group, none of it left.
    let mut hang = command_task(json!([]), 0);
    hang["command"] = json!({"name": "hang"});
    hang["timeout"] = json!("5m");
    hang["schedule"] = json!({ "at": rfc3339(now_ms() + 300) });
    cli_put(&c, "default", "hang", hang).await;
    let pid = |name: &'static str| {
        let file = dir.path().join(name);
        async move {
            wait_until(Duration::from_secs(10), name, || {
                let ready = std::fs::read_to_string(&file).is_ok_and(|t| t.ends_with('\n'));
                async move { ready }
            })
            .await;
            std::fs::read_to_string(&file)
                .unwrap()
                .trim()
                .parse::<u32>()
                .unwrap()
        }
    };
    let (child, grandchild) = (pid("child").await, pid("grandchild").await);
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
            .unwrap_or(false)
    };
    assert!(alive(child) && alive(grandchild));
    c.ax_ok(&["task", "kill", "default/hang"]).await;
    wait_until(Duration::from_secs(10), "the killed command's end", || {
        let c = &c;
        async move {
            let h = c.ax_json(&["task", "history", "default/hang"]).await;
            h.as_array()
                .is_some_and(|a| a.iter().any(|e| e["outcome"] == "killed"))
        }
    })
    .await;
    assert!(!alive(child), "the killed command is gone");
    assert!(!alive(grandchild), "and so is what it started");
    c.clean_up().await;
}

/// A fanned-out task (`fanout.shards`): each fire runs its pieces once each, told their index
/// and total, across the scheduler that leads being SIGKILLed while pieces run; a failing
/// piece retries on its own; the task after it in a chain runs once all pieces have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fanned_out_fire_runs_each_piece_once_through_a_failover() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-shards").await;
    c.start_replica("s1", Roles::Scheduler).await;
    let first = c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.start_replica("s2", Roles::Scheduler).await;
    c.start_replica("w1", Roles::Worker).await;
    c.receiver.slow_task("sharded", Duration::from_secs(3));
    let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 1000) }));
    spec["fanout"] = json!({ "shards": 4 });
    cli_put(&c, "default", "sharded", spec).await;
    let after = json!({ "handler": "http", "http": { "url": c.receiver.exec_url() },
                        "depends_on": [{ "task": "sharded" }] });
    cli_put(&c, "default", "after", after).await;

    wait_for_executions(&c, "sharded", 4, Duration::from_secs(10)).await;
    c.replica(&first).kill();
    c.wait_for_leader(Some(&first), Duration::from_secs(10))
        .await;
    wait_for_executions(&c, "after", 1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let pieces = c.receiver.executions_of("sharded");
    let mut seen: Vec<(u64, u64)> = pieces.iter().map(|e| e.piece.unwrap()).collect();
    seen.sort_unstable();
    assert_eq!(seen, [(0, 4), (1, 4), (2, 4), (3, 4)], "each piece once");
    let ids: std::collections::HashSet<&str> =
        pieces.iter().map(|e| e.execution_id.as_str()).collect();
    assert_eq!(ids.len(), 4);
    let after = c.receiver.executions_of("after");
    assert_eq!(after.len(), 1, "{after:?}");
    let last_piece_end = pieces.iter().map(|e| e.arrived_at).max().unwrap() + 3000;
    assert!(
        after[0].arrived_at >= last_piece_end - 500,
        "after waits for every piece"
    );
    let state = c.state("default", "sharded").await.unwrap();
    assert_eq!(state["success_count"], 1, "one fire, one outcome: {state}");
    c.clean_up().await;
}

/// A concurrency key holds across the workers of two replicas: ten one-shots of one
/// customer, `max: 2`, each answered after 1 s, run two at a time (never three), all of them,
/// on both replicas; the waits show in `scheduler_concurrency_wait_seconds`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_key_holds_across_two_replicas_workers() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-conc").await;
    c.start_replica("a", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.start_replica("b", Roles::Worker).await;
    let due = now_ms() + 1_500;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let id = format!("c{i}");
        c.receiver.slow_task(&id, Duration::from_secs(1));
        let mut spec = http_task(&c, json!({ "at": rfc3339(due) }));
        spec["payload"] = json!({ "customer": "42" });
        spec["concurrency"] = json!({ "key": "customer-{payload.customer}", "max": 2 });
        tasks.push(("conc".to_owned(), id, spec));
    }
    c.put_tasks(&tasks).await;
    wait_until(Duration::from_secs(30), "ten executions", || {
        let n = c.receiver.executions().len();
        async move { n >= 10 }
    })
    .await;
    let mut arrivals: Vec<i64> = c
        .receiver
        .executions()
        .iter()
        .map(|e| e.arrived_at)
        .collect();
    arrivals.sort_unstable();
    // Each holds its slot for at least 1 s after it arrives: never three within 900 ms.
    for (i, &t) in arrivals.iter().enumerate() {
        let in_flight = arrivals[..=i].iter().filter(|&&a| a > t - 900).count();
        assert!(in_flight <= 2, "three at once: {arrivals:?}");
    }
    assert!(
        arrivals[9] - arrivals[0] >= 4_000,
        "five rounds of two take at least 4 s: {arrivals:?}"
    );
    // Both replicas' workers ran some (each attempt's worker is in the task's history).
    wait_until(Duration::from_secs(10), "every history", || {
        let c = &c;
        async move {
            let mut workers = std::collections::HashSet::new();
            for i in 0..10 {
                let h = c.ax_json(&["task", "history", &format!("conc/c{i}")]).await;
                if let Some(w) = h
                    .as_array()
                    .and_then(|a| a.first())
                    .and_then(|e| e["worker"].as_str())
                {
                    workers.insert(w.to_owned());
                }
            }
            workers.len() == 2
        }
    })
    .await;
    let mut waits = 0.0;
    for r in ["a", "b"] {
        waits += c
            .metric(
                r,
                "scheduler_concurrency_wait_seconds_count{queue=\"default\"}",
            )
            .await
            .unwrap_or(0.0);
    }
    assert!(waits >= 8.0, "{waits} waits recorded");
    c.clean_up().await;
}

/// Reports one end of an `http.async` execution through its completion URL; the answer's
/// status and body.
async fn report(e: &Execution, body: Value) -> (u16, Value) {
    let (url, token) = e
        .completion
        .clone()
        .expect("the request carries a completion URL");
    let mut body = body;
    body["token"] = json!(token);
    let res = reqwest::Client::new()
        .post(&url)
        .json(&body)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Long jobs that report back (`http.async`): a 202 frees the worker; the job's completion,
/// sent to a replica that does not lead while the leader is SIGKILLed, ends it once; progress
/// reports keep a job alive past its timeout; a job that never reports fails at its timeout,
/// is retried, then dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_jobs_report_back_through_the_completion_url_across_a_failover() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-long").await;
    c.start_replica("s1", Roles::Scheduler).await;
    let first = c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.start_replica("s2", Roles::Scheduler).await;
    let other = if first == "s1" { "s2" } else { "s1" };
    let port = c.replica(other).http_port;
    c.env
        .push(("AX_HTTP_PUBLIC_URL", format!("http://127.0.0.1:{port}")));
    c.start_replica("w1", Roles::Worker).await;
    for (id, timeout, retries) in [
        ("long", "30s", 0),
        ("beating", "3s", 0),
        ("silent", "2s", 1),
        ("failing", "30s", 2),
    ] {
        c.receiver.accept_task(id);
        let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 500) }));
        spec["http"]["async"] = json!(true);
        spec["http"]["headers"] = json!({ "Authorization": "Bearer async-s3cret-token" });
        spec["timeout"] = json!(timeout);
        spec["retry"] = json!({ "max_retries": retries, "initial_interval": "1s" });
        cli_put(&c, "default", id, spec).await;
    }
    for id in ["long", "beating", "failing"] {
        wait_for_executions(&c, id, 1, Duration::from_secs(10)).await;
    }

    // Progress every second keeps the 3 s job alive for 5 s.
    let beating = c.receiver.executions_of("beating").remove(0);
    for percent in [20, 40, 60, 80, 90] {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (status, body) = report(
            &beating,
            json!({ "status": "progress", "percent": percent }),
        )
        .await;
        assert_eq!(status, 200, "progress {percent}: {body}");
    }
    // `ax execution get` shows the last report while it waits.
    let story = c
        .ax_json(&["execution", "get", &beating.execution_id])
        .await;
    assert_eq!(story["outcome"], "waiting", "{story}");
    assert_eq!(story["waiting"]["progress"]["percent"], 90.0, "{story}");
    let (status, body) = report(&beating, json!({ "status": "succeeded" })).await;
    assert_eq!(status, 200, "{body}");

    // The leader dies; the job reports to the other replica meanwhile.
    c.replica(&first).kill();
    let long = c.receiver.executions_of("long").remove(0);
    // What a job reports is masked as a worker masks an answer: its task's credentials and
    // the token part of them never reach the history.
    let (status, body) = report(
        &long,
        json!({ "status": "succeeded", "message": "called with async-s3cret-token",
                "output": "header was Bearer async-s3cret-token" }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = report(&long, json!({ "status": "succeeded" })).await;
    assert_eq!(
        (status, body["repeated"].clone()),
        (200, json!(true)),
        "{body}"
    );
    // A job that fails for good, reported while no replica leads: dead-lettered at once
    // (retries left, but the job says retrying is pointless), alerted by the next leader.
    let failing = c.receiver.executions_of("failing").remove(0);
    let (status, body) = report(
        &failing,
        json!({ "status": "failed", "message": "disk full", "retryable": false }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    c.wait_for_leader(Some(&first), Duration::from_secs(10))
        .await;

    for id in ["long", "beating"] {
        wait_until(
            Duration::from_secs(15),
            &format!("{id} recorded as succeeded"),
            || {
                let c = &c;
                async move {
                    c.state("default", id)
                        .await
                        .is_some_and(|s| s["success_count"] == 1 && s["failure_count"] == 0)
                }
            },
        )
        .await;
        assert_eq!(c.receiver.executions_of(id).len(), 1, "{id} was sent once");
    }
    let story = c.ax_json(&["execution", "get", &long.execution_id]).await;
    assert!(
        !story.to_string().contains("async-s3cret-token"),
        "a reported end keeps the task's credentials: {story}"
    );
    assert!(
        story.to_string().contains("header was ***"),
        "the reported output is kept, masked: {story}"
    );
    // Never reported: fails at its timeout, is retried once, then dead-lettered.
    wait_for_executions(&c, "silent", 2, Duration::from_secs(20)).await;
    wait_until(
        Duration::from_secs(20),
        "the silent job dead-lettered",
        || {
            let c = &c;
            async move { c.ax_ok(&["dlq", "list"]).await.contains("default/silent") }
        },
    )
    .await;
    let silent = c.receiver.executions_of("silent").remove(0);
    let (status, _) = report(&silent, json!({ "status": "succeeded" })).await;
    assert_eq!(status, 409, "a timed-out attempt's completion is refused");

    // Ends that no worker reported are alerted all the same, none twice: the job's failure,
    // the silent job's timeouts; the successes raise nothing. (Each leader de-duplicates
    // the failures of a task it alerts; the silent job's two attempts may have ended under
    // two leaders, each alerting its own.)
    wait_until(Duration::from_secs(10), "the dead-letter alerts", || {
        let c = &c;
        async move {
            ["failing", "silent"]
                .iter()
                .all(|id| !task_alerts(c, "task_dead_lettered", id).is_empty())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (id, execution, failed, dead_message) in [
        (
            "failing",
            &failing.execution_id,
            "Attempt 1 failed: disk full",
            "Gave up after 1 attempts; last error: disk full",
        ),
        (
            "silent",
            &silent.execution_id,
            "Attempt 1 failed: no completion",
            "Gave up after 2 attempts; last error: no completion",
        ),
    ] {
        let failures = task_alerts(&c, "task_failed", id);
        let mut attempts: Vec<&Value> = failures.iter().map(|a| &a["fields"]["attempt"]).collect();
        attempts.dedup();
        assert_eq!(attempts.len(), failures.len(), "{failures:?}");
        let dead = task_alerts(&c, "task_dead_lettered", id);
        assert_eq!(dead.len(), 1, "{dead:?}");
        for (alert, message) in [(&failures[0], failed), (&dead[0], dead_message)] {
            assert!(
                alert["message"].as_str().unwrap().starts_with(message),
                "{alert}"
            );
            assert_eq!(
                alert["fields"]["execution_id"],
                execution.as_str(),
                "{alert}"
            );
        }
    }
    for id in ["long", "beating"] {
        assert!(
            !c.receiver.alerts().iter().any(|a| a["task"]["id"] == id),
            "{:?}",
            c.receiver.alerts()
        );
    }
    c.clean_up().await;
}

/// The example worker in Python (`examples/python-worker/`), a child process killed when
/// dropped; its log is printed when the test fails.
struct PythonWorker {
    child: Option<std::process::Child>,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PythonWorker {
    /// Starts the worker on `queue` of `c`'s Redis key prefix as `worker_id`. Fails the test,
    /// saying what to install, when python3 or its `redis` package is missing.
    fn start(c: &Cluster, queue: &str, worker_id: &str) -> PythonWorker {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let probe = std::process::Command::new("python3")
            .args(["-c", "import redis"])
            .output();
        match probe {
            Ok(out) => assert!(
                out.status.success(),
                "python3 cannot import the `redis` package (run scripts/setup.sh, or \
                 python3 -m pip install -r examples/python-worker/requirements.txt): {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => {
                panic!("python3 is needed for the Python worker test (run scripts/setup.sh): {e}")
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("python-worker.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new("python3")
            .arg(format!("{root}/examples/python-worker/worker.py"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", std::env::var("HOME").unwrap_or_default())
            .env("AX_REDIS_URL", &c.redis_url)
            .env("AX_REDIS_KEY_PREFIX", &c.redis_prefix)
            .env("AX_QUEUE", queue)
            .env("AX_WORKER_ID", worker_id)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        PythonWorker {
            child: Some(child),
            log,
            _dir: dir,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits up to `within` for the exit; its status (`None`: still
    /// running, then killed).
    fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for PythonWorker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- the Python worker's log ----\n{}", self.log_text());
        }
    }
}

/// The protocol of `docs/worker-protocol.md`, proven by a worker in another language: a
/// scheduler-only replica leads, the Python example worker serves the queue, and ax itself
/// (task states, `ax history`, `ax dlq list`, `ax status`) shows what it did: a success, a
/// success after one retry, a dead letter after the last attempt. SIGTERM gives the message
/// in hand back to the queue and deregisters the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_in_python_takes_acks_retries_and_dead_letters_through_the_lua_scripts() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-python").await;
    c.start_replica("s1", Roles::Scheduler).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let queue = "python";
    let worker_id = "py-e2e";
    let mut py = PythonWorker::start(&c, queue, worker_id);

    let due = now_ms() + 1000;
    let task = |payload: Value, max_retries: u32| {
        json!({
            "handler": "python",
            "queue": queue,
            "schedule": { "at": rfc3339(due) },
            "payload": payload,
            "retry": {
                "max_retries": max_retries,
                "initial_interval": "300ms",
                "max_interval": "1s",
                "multiplier": 2,
                "jitter": 0,
            },
        })
    };
    cli_put(&c, "default", "ok", task(json!({ "sleep_ms": 50 }), 2)).await;
    cli_put(
        &c,
        "default",
        "flaky",
        task(json!({ "fail_attempts": 1 }), 2),
    )
    .await;
    cli_put(&c, "default", "doomed", task(json!({ "fail": true }), 1)).await;
    // A broadcast fire: addressed to the one live worker, its retry back to it.
    let mut everyone = task(json!({ "fail_attempts": 1 }), 2);
    everyone["fanout"] = json!({ "broadcast": true });
    cli_put(&c, "default", "everyone", everyone).await;

    let want = [
        ("ok", "SUCCESS"),
        ("flaky", "SUCCESS"),
        ("doomed", "FAILED"),
        ("everyone", "SUCCESS"),
    ];
    wait_until(Duration::from_secs(20), "the three tasks settled", || {
        let c = &c;
        async move {
            for (id, status) in want {
                if !c
                    .state("default", id)
                    .await
                    .is_some_and(|s| s["status"] == status)
                {
                    return false;
                }
            }
            true
        }
    })
    .await;
    for (id, success, failure) in [
        ("ok", 1, 0),
        ("flaky", 1, 0),
        ("doomed", 0, 1),
        ("everyone", 1, 0),
    ] {
        let s = c.state("default", id).await.unwrap();
        assert_eq!(
            (&s["success_count"], &s["failure_count"]),
            (&json!(success), &json!(failure)),
            "{id}: {s}"
        );
    }
    // Settled means gone from the queue: nothing held, waiting or unsettled is left.
    let client = redis::Client::open(c.redis_url.as_str()).unwrap();
    let mut redis = client.get_multiplexed_async_connection().await.unwrap();
    let tag = format!("{{{}:q:{queue}}}", c.redis_prefix);
    let processing = format!("{tag}:processing:{worker_id}");
    let (held, unsettled, delayed): (u64, u64, u64) = redis::pipe()
        .llen(&processing)
        .zcard(format!("{tag}:monitor"))
        .zcard(format!("{tag}:delayed"))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        (held, unsettled, delayed),
        (0, 0, 0),
        "held, unsettled and delayed messages left after every task settled"
    );
    let doomed = c.state("default", "doomed").await.unwrap();
    assert_eq!(
        doomed["last_error"], "asked to fail (attempt 2)",
        "{doomed}"
    );

    // Every attempt is in the history across tasks, written by the Python worker.
    let outcomes = |task: &str| {
        let c = &c;
        let task = format!("default/{task}");
        async move {
            let h = c.ax_json(&["history", "--task", &task]).await;
            let items = h["items"].as_array().cloned().unwrap_or_default();
            for i in &items {
                assert_eq!(i["worker"], worker_id, "{i}");
                assert_eq!(i["queue"], queue, "{i}");
            }
            // Newest first: oldest first reads as the story.
            let mut v: Vec<(u64, String)> = items
                .iter()
                .map(|i| {
                    (
                        i["attempt"].as_u64().unwrap(),
                        i["outcome"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            v.reverse();
            v
        }
    };
    let story = |v: &[(u64, &str)]| -> Vec<(u64, String)> {
        v.iter().map(|(a, o)| (*a, (*o).to_owned())).collect()
    };
    // Attempts as people count them, from 1.
    assert_eq!(outcomes("ok").await, story(&[(1, "succeeded")]));
    assert_eq!(
        outcomes("flaky").await,
        story(&[(1, "retrying"), (2, "succeeded")])
    );
    assert_eq!(
        outcomes("doomed").await,
        story(&[(1, "retrying"), (2, "failed")])
    );
    assert_eq!(
        outcomes("everyone").await,
        story(&[(1, "retrying"), (2, "succeeded")])
    );
    let everyone = c.ax_json(&["task", "history", "default/everyone"]).await;
    for a in everyone.as_array().unwrap() {
        assert_eq!(a["target_worker"], worker_id, "{a}");
        assert_eq!(
            (&a["shard_index"], &a["shard_total"]),
            (&json!(0), &json!(1))
        );
    }
    // The task's own history too (`ax task history`), the retry 300 ms after the failure.
    let flaky = c.ax_json(&["task", "history", "default/flaky"]).await;
    let flaky = flaky.as_array().unwrap();
    assert_eq!(flaky.len(), 2, "{flaky:?}");
    let gap = flaky[0]["started"].as_i64().unwrap() - flaky[1]["finished"].as_i64().unwrap();
    assert!(
        (300..2000).contains(&gap),
        "retried after {gap} ms: {flaky:?}"
    );

    // The last attempt's failure is a dead letter with every attempt's error.
    let dlq = c.ax_json(&["dlq", "list", "--queue", queue]).await;
    let letters = dlq.as_array().unwrap();
    assert_eq!(letters.len(), 1, "{dlq}");
    assert_eq!(
        (
            &letters[0]["task_id"],
            &letters[0]["attempts"],
            &letters[0]["last_error"]
        ),
        (
            &json!("doomed"),
            &json!(2),
            &json!("asked to fail (attempt 2) (retries exhausted (1 of 1))")
        ),
        "{dlq}"
    );

    // Its failures are alerted as a Rust worker's are (the leader raises them from the end
    // events): the flaky task's failed attempt, the doomed one's failure and dead letter.
    wait_until(
        Duration::from_secs(5),
        "the Python worker's failures alerted",
        || {
            let c = &c;
            async move {
                !task_alerts(c, "task_dead_lettered", "doomed").is_empty()
                    && !task_alerts(c, "task_failed", "flaky").is_empty()
            }
        },
    )
    .await;
    let execution_of = |task: &str| {
        let letter = letters.iter().find(|l| l["task_id"] == task);
        letter.map(|l| l["execution_id"].clone())
    };
    for (kind, task, level, message) in [
        (
            "task_failed",
            "flaky",
            "warn",
            "Attempt 1 failed: asked to fail (attempt 1)",
        ),
        (
            "task_failed",
            "doomed",
            "warn",
            "Attempt 1 failed: asked to fail (attempt 1)",
        ),
        (
            "task_dead_lettered",
            "doomed",
            "critical",
            "Gave up after 2 attempts; last error: asked to fail (attempt 2)",
        ),
    ] {
        let alerts = task_alerts(&c, kind, task);
        assert_eq!(alerts.len(), 1, "{kind} of {task}: {alerts:?}");
        assert_eq!(
            (&alerts[0]["level"], &alerts[0]["message"]),
            (&json!(level), &json!(message)),
            "{}",
            alerts[0]
        );
        if let Some(id) = execution_of(task) {
            assert_eq!(alerts[0]["fields"]["execution_id"], id, "{}", alerts[0]);
        }
    }

    // `ax status` lists the Python worker on its queue.
    let status = c.ax_json(&["status"]).await;
    let served = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == queue)
        .cloned()
        .unwrap_or_else(|| panic!("no queue {queue}: {status}"));
    assert_eq!(served["workers"], json!([worker_id]), "{status}");
    assert_eq!(served["depth"], 0, "{status}");

    // A message of a scheduling shard (enqueued as that shard's owner would): each of its
    // events goes to that shard's stream with the shard, its retry's too.
    let q = ax_queue::Queue::connect(
        &c.redis_url,
        ax_queue::QueueConfig {
            prefix: c.redis_prefix.clone(),
            ..ax_queue::QueueConfig::default()
        },
    )
    .await
    .unwrap();
    let spec = ax_scheduler_core::TaskSpec::from_json(
        task(json!({ "fail_attempts": 1 }), 2)
            .to_string()
            .as_bytes(),
        "default",
        "sharded",
    )
    .unwrap();
    let now = ax_scheduler_core::UtcMillis::now();
    let mut sharded = ax_queue::ExecutionMessage::for_fire(&spec, now, now, 1);
    sharded.shard = Some(7);
    assert_eq!(
        q.enqueue(&sharded).await.unwrap(),
        ax_scheduler_core::EnqueueOutcome::Enqueued
    );
    let shard_stream = q.keys().events(Some(7));
    let shard_events = || {
        let mut redis = redis.clone();
        let key = shard_stream.clone();
        async move {
            let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                .arg(&key)
                .arg("-")
                .arg("+")
                .query_async(&mut redis)
                .await
                .unwrap();
            entries
                .into_iter()
                .map(|(_, fields)| serde_json::from_str::<Value>(&fields[1]).unwrap())
                .collect::<Vec<Value>>()
        }
    };
    wait_until(
        Duration::from_secs(10),
        "the sharded execution's events",
        || {
            let shard_events = &shard_events;
            async move { shard_events().await.len() == 4 }
        },
    )
    .await;
    let events = shard_events().await;
    let story: Vec<(u64, &str)> = events
        .iter()
        .map(|e| {
            assert_eq!(e["shard"], 7, "{e}");
            assert_eq!(e["execution_id"], sharded.execution_id.to_string(), "{e}");
            (
                e["attempt"].as_u64().unwrap(),
                e["kind"]["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        story,
        [
            (0, "started"),
            (0, "finished"),
            (1, "started"),
            (1, "finished")
        ]
    );
    assert_eq!(
        events[3]["kind"]["end"]["outcome"], "succeeded",
        "{events:?}"
    );

    // A long execution in hand when SIGTERM comes goes back to the queue, at once.
    cli_put(
        &c,
        "default",
        "long",
        task(json!({ "sleep_ms": 60_000 }), 0),
    )
    .await;
    wait_until(Duration::from_secs(10), "the long one taken", || {
        let mut redis = redis.clone();
        let processing = processing.clone();
        async move {
            redis::AsyncCommands::llen::<_, u64>(&mut redis, processing)
                .await
                .unwrap()
                == 1
        }
    })
    .await;
    let exit = py.terminate(Duration::from_secs(10));
    assert!(
        exit.is_some_and(|s| s.success()),
        "the worker did not stop cleanly within 10 s: {exit:?}\n{}",
        py.log_text()
    );
    let (held, queued, beat): (u64, u64, bool) = redis::pipe()
        .llen(&processing)
        .zcard(format!("{tag}:queued"))
        .exists(format!("{tag}:worker:{worker_id}"))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        (held, queued, beat),
        (0, 1, false),
        "released and deregistered"
    );
    let status = c.ax_json(&["status"]).await;
    let served = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == queue)
        .cloned()
        .unwrap();
    assert_eq!(
        (&served["workers"], &served["depth"]),
        (&json!([]), &json!(1)),
        "{status}"
    );
    c.clean_up().await;
}

/// The history of `task` (newest first, up to 500 attempts).
async fn history_of(c: &Cluster, task: &str) -> Vec<Value> {
    let h = c
        .ax_json(&[
            "task",
            "history",
            &format!("default/{task}"),
            "--limit",
            "500",
        ])
        .await;
    h.as_array().cloned().unwrap_or_default()
}

/// The workers the executions of each fire were addressed to, by fire, as the receiver got
/// them.
fn targets_by_fire(executions: &[Execution]) -> std::collections::BTreeMap<i64, Vec<String>> {
    let mut by_fire: std::collections::BTreeMap<i64, Vec<String>> = Default::default();
    for e in executions {
        by_fire.entry(e.fire_at).or_default().push(
            e.target_worker
                .clone()
                .expect("a broadcast execution names its worker"),
        );
    }
    for workers in by_fire.values_mut() {
        workers.sort();
    }
    by_fire
}

/// A broadcast task (`fanout.broadcast`) on three worker replicas: each fire runs once on
/// each live worker, on the worker it is addressed to. A worker SIGKILLed while it runs its
/// execution: no other worker runs that execution; it ends failed ("worker w3 is gone") once
/// the reaper finds the worker dead, and its fire fails; the fires go on meanwhile, on the
/// two workers left once the dead one's heartbeat has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_fire_runs_once_on_each_live_worker_and_a_killed_worker_s_share_fails() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-broadcast").await;
    c.start_replica("s1", Roles::Scheduler).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    for w in ["w1", "w2", "w3"] {
        c.start_replica(w, Roles::Worker).await;
    }
    c.receiver.slow_task("bc", Duration::from_secs(2));
    let mut spec = http_task(&c, json!({ "every": "4s" }));
    spec["fanout"] = json!({ "broadcast": true });
    cli_put(&c, "default", "bc", spec).await;
    let all3 = vec!["w1".to_owned(), "w2".to_owned(), "w3".to_owned()];

    // Two whole fires, then w3 is killed while it runs its part of the next one.
    let on_w3 = |c: &Cluster| {
        c.receiver
            .executions_of("bc")
            .iter()
            .filter(|e| e.target_worker.as_deref() == Some("w3"))
            .count()
    };
    wait_until(Duration::from_secs(20), "three fires on w3", || {
        let n = on_w3(&c);
        async move { n >= 3 }
    })
    .await;
    c.replica("w3").kill();
    let killed_at = now_ms();
    let killed_fire = c
        .receiver
        .executions_of("bc")
        .iter()
        .filter(|e| e.target_worker.as_deref() == Some("w3"))
        .map(|e| e.fire_at)
        .max()
        .unwrap();

    // The reaper (after the 30 s visibility timeout) leaves its part to be ended failed.
    wait_until(Duration::from_secs(60), "w3's part failed", || {
        let c = &c;
        async move {
            history_of(c, "bc").await.iter().any(|r| {
                r["target_worker"] == "w3" && r["due"] == killed_fire && r["outcome"] == "failed"
            })
        }
    })
    .await;
    // A fire after it, on the two left.
    let resumed = now_ms();
    wait_until(Duration::from_secs(20), "a fire on the two left", || {
        let by_fire = targets_by_fire(&c.receiver.executions_of("bc"));
        let done = by_fire.iter().any(|(at, w)| *at > resumed && w.len() == 2);
        async move { done }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let executions = c.receiver.executions_of("bc");
    let by_fire = targets_by_fire(&executions);
    for (at, workers) in &by_fire {
        let mut unique = workers.clone();
        unique.dedup();
        assert_eq!(&unique, workers, "fire {at}: once per worker: {workers:?}");
        if *at <= killed_fire {
            assert_eq!(workers, &all3, "fire {at} before the kill: on all three");
        }
    }
    assert!(
        by_fire
            .iter()
            .filter(|(at, _)| **at > killed_at + 7_000)
            .all(|(_, w)| w == &["w1".to_owned(), "w2".to_owned()]),
        "once its heartbeat expired, w3 is no longer addressed: {by_fire:?}"
    );
    assert!(
        executions
            .iter()
            .all(|e| e.target_worker.as_deref() != Some("w3") || e.arrived_at < killed_at),
        "no one ran w3's part after it died"
    );
    let history = history_of(&c, "bc").await;
    for r in &history {
        assert_eq!(
            r["worker"], r["target_worker"],
            "each attempt is its addressee's: {r}"
        );
    }
    let failed: Vec<&Value> = history
        .iter()
        .filter(|r| r["outcome"] == "failed")
        .collect();
    assert!(!failed.is_empty());
    assert!(
        failed.iter().all(|r| r["target_worker"] == "w3"
            && r["error"]
                .as_str()
                .is_some_and(|e| e.contains("worker w3 is gone"))),
        "{failed:?}"
    );
    let state = c.state("default", "bc").await.unwrap();
    assert!(
        state["failure_count"].as_u64().unwrap() >= 1,
        "the fire w3 died in failed: {state}"
    );
    assert!(
        state["success_count"].as_u64().unwrap() >= 3,
        "the others succeeded: {state}"
    );
    c.clean_up().await;
}

/// A broadcast fire through a failover: the leader SIGKILLed while the three workers run
/// their parts. The new leader finishes the fire's count from the stored progress (no new
/// listing, nothing sent twice): each worker ran once, and the fire succeeded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_fire_through_a_leader_failover_runs_once_per_worker() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-broadcast-failover").await;
    c.start_replica("s1", Roles::Scheduler).await;
    let first = c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.start_replica("s2", Roles::Scheduler).await;
    for w in ["w1", "w2", "w3"] {
        c.start_replica(w, Roles::Worker).await;
    }
    c.receiver.slow_task("bcf", Duration::from_secs(3));
    let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 1000) }));
    spec["fanout"] = json!({ "broadcast": true });
    cli_put(&c, "default", "bcf", spec).await;

    wait_for_executions(&c, "bcf", 3, Duration::from_secs(10)).await;
    c.replica(&first).kill();
    c.wait_for_leader(Some(&first), Duration::from_secs(10))
        .await;
    wait_until(Duration::from_secs(20), "the fire's one outcome", || {
        let c = &c;
        async move {
            c.state("default", "bcf")
                .await
                .is_some_and(|s| s["success_count"] == 1)
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let executions = c.receiver.executions_of("bcf");
    let by_fire = targets_by_fire(&executions);
    assert_eq!(by_fire.len(), 1, "one fire: {by_fire:?}");
    assert_eq!(
        by_fire.values().next().unwrap(),
        &["w1".to_owned(), "w2".to_owned(), "w3".to_owned()],
        "once on each worker"
    );
    let ids: std::collections::HashSet<&str> =
        executions.iter().map(|e| e.execution_id.as_str()).collect();
    assert_eq!(ids.len(), 3);
    let state = c.state("default", "bcf").await.unwrap();
    assert_eq!(state["success_count"], 1, "{state}");
    assert_eq!(state["failure_count"], 0, "{state}");
    let history = history_of(&c, "bcf").await;
    assert_eq!(history.len(), 3, "{history:?}");
    // Any one execution's story shows its fire with all three.
    let story = c
        .ax_json(&["execution", "get", &executions[0].execution_id])
        .await;
    let mut on: Vec<&str> = story["fire"]["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["target_worker"].as_str().unwrap())
        .collect();
    on.sort_unstable();
    assert_eq!(on, ["w1", "w2", "w3"], "{story}");
    assert_eq!(story["fire"]["total"], 3, "{story}");
    let text = c
        .ax_ok(&["execution", "get", &executions[0].execution_id])
        .await;
    assert!(text.contains("fire:") && text.contains(" on w3 "), "{text}");
    c.clean_up().await;
}

/// A broadcast fire on a queue no live worker serves ends failed at once: the reason in the
/// task's state and history, and a task-failed alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broadcast_fire_without_a_live_worker_fails_at_once_with_its_reason() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-broadcast-none").await;
    c.start_replica("s1", Roles::Scheduler).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let mut spec = http_task(&c, json!({ "at": rfc3339(now_ms() + 500) }));
    spec["fanout"] = json!({ "broadcast": true });
    spec["queue"] = json!("nobody");
    cli_put(&c, "default", "none", spec).await;
    let reason = "no live worker serves queue nobody";
    wait_until(Duration::from_secs(10), "the fire failed", || {
        let c = &c;
        async move {
            c.state("default", "none")
                .await
                .is_some_and(|s| s["failure_count"] == 1)
        }
    })
    .await;
    let state = c.state("default", "none").await.unwrap();
    assert_eq!(state["last_error"], reason, "{state}");
    let history = history_of(&c, "none").await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        (
            &history[0]["outcome"],
            &history[0]["error"],
            &history[0]["queue"]
        ),
        (&json!("failed"), &json!(reason), &json!("nobody")),
        "{history:?}"
    );
    wait_until(Duration::from_secs(10), "the alert", || {
        let got = c.receiver.has_alert(reason);
        async move { got }
    })
    .await;
    assert!(c.receiver.executions_of("none").is_empty());
    // Run now, it fails the same way, and its request is done with (not replayed).
    let id = c.ax_ok(&["task", "trigger", "default/none"]).await;
    let id = id.trim().to_owned();
    wait_until(Duration::from_secs(10), "the run-now failed", || {
        let c = &c;
        async move {
            c.state("default", "none")
                .await
                .is_some_and(|s| s["failure_count"] == 2)
        }
    })
    .await;
    let trigger = format!("{}/triggers/default/none/{id}", c.prefix);
    wait_until(Duration::from_secs(10), "the trigger consumed", || {
        let c = &c;
        let trigger = trigger.clone();
        async move { c.get(&trigger).await.is_none() }
    })
    .await;
    c.clean_up().await;
}

/// A worker of a broadcast task stopped cleanly (SIGTERM) while it runs its part of a fire:
/// it finishes that part within its shutdown grace, and from the moment it stops taking it is
/// no longer addressed (it beats as a stopping worker): the fires after go to the two left,
/// and no fire fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopping_cleanly_finishes_its_part_and_is_no_longer_addressed() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-broadcast-stop").await;
    c.start_replica("s1", Roles::Scheduler).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    for w in ["w1", "w2", "w3"] {
        c.start_replica(w, Roles::Worker).await;
    }
    c.receiver.slow_task("bcs", Duration::from_secs(4));
    let mut spec = http_task(&c, json!({ "every": "2s" }));
    spec["fanout"] = json!({ "broadcast": true });
    cli_put(&c, "default", "bcs", spec).await;

    let on_w3 = |c: &Cluster| -> Vec<i64> {
        c.receiver
            .executions_of("bcs")
            .iter()
            .filter(|e| e.target_worker.as_deref() == Some("w3"))
            .map(|e| e.fire_at)
            .collect()
    };
    wait_until(Duration::from_secs(20), "two fires on w3", || {
        let n = on_w3(&c).len();
        async move { n >= 2 }
    })
    .await;
    // Just after w3 got its part of a fire (answered in 4 s): stopped while it runs it, and
    // fires come meanwhile.
    let running_fire = *on_w3(&c).iter().max().unwrap();
    let stopped_at = now_ms();
    let status = c.replica("w3").terminate(Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "w3 exits cleanly: {status:?}"
    );
    let resumed = now_ms();
    wait_until(Duration::from_secs(20), "two fires on the two left", || {
        let by_fire = targets_by_fire(&c.receiver.executions_of("bcs"));
        let done = by_fire.iter().filter(|(at, _)| **at > resumed).count() >= 2;
        async move { done }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let by_fire = targets_by_fire(&c.receiver.executions_of("bcs"));
    for (at, workers) in &by_fire {
        let mut unique = workers.clone();
        unique.dedup();
        assert_eq!(&unique, workers, "fire {at}: once per worker");
        if *at > stopped_at + 1_000 {
            assert_eq!(
                workers,
                &["w1".to_owned(), "w2".to_owned()],
                "fire {at} after w3 stopped taking"
            );
        }
    }
    let history = history_of(&c, "bcs").await;
    for r in &history {
        assert_eq!(r["worker"], r["target_worker"], "{r}");
    }
    assert!(
        history.iter().any(|r| r["target_worker"] == "w3"
            && r["due"] == running_fire
            && r["outcome"] == "succeeded"),
        "w3 finished the part it ran when stopped: {history:?}"
    );
    let state = c.state("default", "bcs").await.unwrap();
    assert_eq!(
        state["failure_count"], 0,
        "a clean stop fails no fire: {state}"
    );
    c.clean_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_shards_a_chain_runs_within_its_shard_and_is_refused_across_shards() {
    use ax_scheduler_core::placement::{PlaceBy, Placement};
    use ax_scheduler_core::TaskKey;
    let _serial = SERIAL.lock().await;
    const SHARDS: u32 = 8;
    let by_task = Placement {
        shards: SHARDS,
        by: PlaceBy::Task,
    };
    let shard = |id: &str| by_task.shard_of(&TaskKey::new("etl", id));
    // A child placed in another shard than its parent `r`, by its id.
    let stray = (0..100)
        .map(|i| format!("x{i}"))
        .find(|id| shard(id) != shard("r"))
        .unwrap();
    let chain = |c: &Cluster, url: &str| {
        let step =
            |deps: Value| json!({ "handler": "http", "http": { "url": url }, "depends_on": deps });
        vec![
            ("a".to_owned(), step(json!([{ "task": "r" }]))),
            ("b".to_owned(), step(json!([{ "task": "a" }]))),
            (stray.clone(), step(json!([{ "task": "r" }]))),
            (
                "r".to_owned(),
                http_task(c, json!({ "at": rfc3339(now_ms() + 1500) })),
            ),
        ]
    };

    // Placed by task: the stray child is INVALID with the reason; the rest of its shard's
    // chain (if any) is left alone.
    // Two replicas sharing the shards, the chain written.
    let sharing = |label: &'static str, placement: &'static str| async move {
        let mut c = Cluster::new(label).await;
        c.env.push(("AX_SHARDS", SHARDS.to_string()));
        c.env.push(("AX_PLACEMENT", placement.to_owned()));
        c.start_replica("r1", Roles::Both).await;
        c.start_replica("r2", Roles::Both).await;
        c.wait_for_shards(SHARDS, &["r1", "r2"], Duration::from_secs(15))
            .await;
        c
    };
    let mut c = sharing("e2e-shard-chain-task", "task").await;
    let url = c.receiver.exec_url();
    for (id, spec) in chain(&c, &url) {
        c.put_task("etl", &id, &spec).await;
    }
    wait_until(
        Duration::from_secs(10),
        "the stray child is INVALID",
        || async {
            c.state("etl", &stray)
                .await
                .is_some_and(|s| s["status"] == "INVALID")
        },
    )
    .await;
    let state = c.state("etl", &stray).await.unwrap().to_string();
    assert!(state.contains("scheduler.placement"), "{state}");
    wait_for_executions(&c, "r", 1, Duration::from_secs(10)).await;
    c.clean_up().await;

    // Placed by namespace: the whole chain is in one shard and runs, each step once.
    let mut c = sharing("e2e-shard-chain-ns", "namespace").await;
    let url = c.receiver.exec_url();
    for (id, spec) in chain(&c, &url) {
        c.put_task("etl", &id, &spec).await;
    }
    wait_for_executions(&c, "b", 1, Duration::from_secs(15)).await;
    wait_for_executions(&c, &stray, 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let run = c.receiver.executions_of("r")[0].execution_id.clone();
    for id in ["r", "a", "b", stray.as_str()] {
        let got = c.receiver.executions_of(id);
        assert_eq!(got.len(), 1, "{id} runs once: {got:?}");
        assert_eq!(got[0].run_id.as_deref(), Some(run.as_str()), "{id}");
    }
    c.clean_up().await;
}

/// A partitioned queue (`redis.queue_partitions`) served by two replicas: every one-shot on it
/// runs exactly once, spread over the four physical queues and over both replicas' workers,
/// and the logical name's figures cover the partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_on_a_partitioned_queue_run_exactly_once_on_two_replicas() {
    const N: usize = 200;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new("e2e-part").await;
    c.env
        .push(("AX_REDIS_QUEUE_PARTITIONS", "hot=4".to_owned()));
    c.env.push(("AX_WORKER_QUEUES", "default,hot".to_owned()));
    c.start_replica("a", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    c.start_replica("b", Roles::Both).await;

    let due = now_ms() + 2_000;
    let tasks: Vec<(String, String, Value)> = (0..N)
        .map(|i| {
            let mut spec = http_task(&c, json!({ "at": rfc3339(due + i as i64) }));
            spec["queue"] = json!("hot");
            ("part".to_owned(), format!("t{i:03}"), spec)
        })
        .collect();
    c.put_tasks(&tasks).await;
    wait_until(Duration::from_secs(30), "every task executed", || {
        let n = c.receiver.executions().len();
        async move { n >= N }
    })
    .await;
    // Room for duplicates to show up.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let runs = c.receiver.executions();
    let per_task = counts(&runs);
    let twice: Vec<_> = per_task.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");
    assert_eq!((runs.len(), per_task.len()), (N, N));

    let q = ax_queue::Queue::connect(
        &c.redis_url,
        ax_queue::QueueConfig {
            prefix: c.redis_prefix.clone(),
            partitions: std::collections::BTreeMap::from([("hot".to_owned(), 4)]),
            ..ax_queue::QueueConfig::default()
        },
    )
    .await
    .unwrap();
    let mut queues = std::collections::BTreeSet::new();
    let mut workers = std::collections::BTreeSet::new();
    wait_until(Duration::from_secs(10), "every history", || {
        let (q, tasks) = (&q, &tasks);
        async move {
            for (ns, id, _) in tasks {
                if q.history(ns, id, 1).await.unwrap().is_empty() {
                    return false;
                }
            }
            true
        }
    })
    .await;
    for (ns, id, _) in &tasks {
        let h = q.history(ns, id, 1).await.unwrap();
        queues.insert(h[0].queue.clone());
        workers.insert(h[0].worker.clone());
    }
    assert_eq!(
        queues.into_iter().collect::<Vec<_>>(),
        q.physical_queues("hot"),
        "attempts ran on every partition"
    );
    assert_eq!(
        workers.into_iter().collect::<Vec<_>>(),
        ["a", "b"],
        "both replicas' workers took from the partitions"
    );
    let stats = q
        .stats("hot", ax_scheduler_core::UtcMillis::now())
        .await
        .unwrap();
    assert_eq!((stats.ready, stats.unsettled, stats.dead), (0, 0, 0));
    let mut live = q.live_workers("hot").await.unwrap();
    live.sort();
    assert_eq!(live, ["a", "b"]);
    // A replica's status names the logical queue with its partitions.
    let port = c.replica("a").http_port;
    let status = harness::api_get(&format!("http://127.0.0.1:{port}/api/v1/status")).await;
    let hot = status["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "hot")
        .unwrap_or_else(|| panic!("no queue hot: {status}"));
    assert_eq!(
        (&hot["partitions"], &hot["depth"]),
        (&json!(4), &json!(0)),
        "{status}"
    );
    let mut served: Vec<&str> = hot["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    served.sort_unstable();
    assert_eq!(served, ["a", "b"], "{status}");
    c.clean_up().await;
}

/// The status names every queue the tasks use. A replica with the scheduler role takes the
/// names from its catalog, which follows the registry's watch: a queue another writer's put
/// introduces shows at once, and one whose last task is deleted goes, where a set read from
/// the specs was kept for at least 5 s between reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_follows_the_queues_tasks_use_as_they_change() {
    let _serial = SERIAL.lock().await;
    // `AX_TEST_QUEUE_NAME_TASKS` more tasks on 50 queues, to measure at a large registry.
    let n: usize = std::env::var("AX_TEST_QUEUE_NAME_TASKS")
        .ok()
        .map_or(0, |v| {
            v.parse().expect("AX_TEST_QUEUE_NAME_TASKS is a count")
        });
    let mut c = Cluster::new("e2e-queue-names").await;
    c.start_replica("a", Roles::Both).await;
    c.wait_for_leader(None, Duration::from_secs(10)).await;
    let task =
        |queue: &str| json!({ "handler": "log", "schedule": { "every": "1h" }, "queue": queue });
    let many: Vec<(String, String, Value)> = (0..n)
        .map(|i| {
            (
                "many".to_owned(),
                format!("t{i}"),
                task(&format!("q{}", i % 50)),
            )
        })
        .collect();
    c.put_tasks(&many).await;
    c.put_task("qn", "one", &task("first")).await;
    let url = format!(
        "http://127.0.0.1:{}/api/v1/status",
        c.replica("a").http_port
    );
    let names = || async {
        let status = harness::api_get(&url).await;
        status["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let catch_up = Duration::from_secs(5) + Duration::from_millis(n as u64 / 4);
    wait_until(catch_up, "the first queue shown", || async {
        names().await.contains(&"first".to_owned())
    })
    .await;
    // The status was just read: a remembered set would now be kept for 5 s.
    c.put_task("qn", "two", &task("second")).await;
    let put = Instant::now();
    wait_until(
        Duration::from_secs(2),
        "a queue put by another writer shown",
        || async { names().await.contains(&"second".to_owned()) },
    )
    .await;
    let shown_after = put.elapsed();
    let mut took = Vec::new();
    for _ in 0..20 {
        let asked = Instant::now();
        names().await;
        took.push(asked.elapsed());
    }
    took.sort_unstable();
    c.delete_task("qn", "one").await;
    wait_until(
        Duration::from_secs(2),
        "a queue with no task left gone",
        || async { !names().await.contains(&"first".to_owned()) },
    )
    .await;
    println!(
        "queue names: {n} more tasks; a new queue shown after {shown_after:?}; status p50 \
         {:?}, max {:?}",
        took[10], took[19]
    );
    c.clean_up().await;
}
