//! The `ax` task, dead-letter and status commands against a real etcd and Redis, as a script
//! sees them: stdout, stderr and exit codes. Each test works under its own etcd prefix and
//! Redis key prefix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use ax_queue::{ExecutionMessage, HistoryEntry, Queue, QueueConfig};
use ax_scheduler_core::{AttemptEnd, AttemptOutcome, EnqueueOutcome, TaskSpec, UtcMillis};
use serde_json::Value;

/// One test's corner of the shared servers.
struct Cluster {
    prefix: String,
    redis_prefix: String,
}

impl Cluster {
    fn new(label: &str) -> Cluster {
        Cluster {
            prefix: format!("/{}", ax_testkit::unique_name(label)),
            redis_prefix: ax_testkit::unique_name(label),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
        cmd.args(args)
            .env_clear()
            .env("HOSTNAME", "test-host")
            .env("AX_ETCD_ENDPOINTS", ax_testkit::etcd_endpoint())
            .env("AX_REDIS_URL", ax_testkit::redis_url())
            .env("AX_REDIS_KEY_PREFIX", &self.redis_prefix)
            .arg("--etcd-prefix")
            .arg(&self.prefix);
        cmd
    }

    fn ax(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn ax_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Runs `args`, expects exit 0, returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.ax(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// Runs `args`, expects `code`, returns stderr.
    fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.ax(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: stdout {} stderr {}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with("ax: error: "), "{err}");
        err
    }

    fn get(&self, task: &str) -> Value {
        serde_json::from_str(&self.ok(&["task", "get", task, "-o", "json"])).unwrap()
    }

    async fn etcd(&self) -> etcd_client::Client {
        etcd_client::Client::connect([ax_testkit::etcd_endpoint()], None)
            .await
            .unwrap()
    }

    async fn queue(&self) -> Queue {
        let cfg = QueueConfig {
            prefix: self.redis_prefix.clone(),
            ..QueueConfig::default()
        };
        Queue::connect(&ax_testkit::redis_url(), cfg).await.unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const BEAT: &str = r#"{"handler": "log", "schedule": {"every": "10s"}}"#;

fn versioned(version: u64) -> String {
    format!(r#"{{"handler": "log", "schedule": {{"every": "10s"}}, "version": {version}}}"#)
}

#[test]
fn put_get_list_pause_resume_delete() {
    let c = Cluster::new("cli-tasks");
    let out = c.ax_stdin(&["task", "put", "-", "--id", "beat", "-n", "ops"], BEAT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with("task ops/beat registered (version 1)\n"),
        "{shown}"
    );
    assert_eq!(shown.lines().filter(|l| l.starts_with("  ")).count(), 5);

    let task = c.get("ops/beat");
    assert_eq!(task["namespace"], "ops");
    assert_eq!(task["id"], "beat");
    assert_eq!(task["status"], "WAITING");
    assert_eq!(task["spec"]["schedule"]["every"], "10s");
    // The countdown starts at registration, whichever replica first sees the spec.
    let created = task["spec"]["created_at"].as_str().unwrap();
    assert!(
        created.starts_with("20") && created.ends_with('Z'),
        "{created}"
    );
    // `-n` names the same task; without it, `beat` is in the default namespace.
    let same: Value =
        serde_json::from_str(&c.ok(&["task", "get", "beat", "-n", "ops", "-o", "json"])).unwrap();
    assert_eq!(same, task);
    c.fails(&["task", "get", "beat"], 4);

    // A second task in the default namespace, from a file named after it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nightly.json");
    std::fs::write(
        &file,
        r#"{"handler": "log", "schedule": {"cron": "0 3 * * *", "timezone": "Europe/Paris"}}"#,
    )
    .unwrap();
    c.ok(&["task", "put", file.to_str().unwrap()]);

    let table = c.ok(&["task", "list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("TASK"), "{table}");
    assert!(
        lines[1].starts_with("default/nightly")
            && lines[1].contains("every day at 03:00 Europe/Paris"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("ops/beat")
            && lines[2].contains("every 10s")
            && lines[2].contains("WAITING"),
        "{table}"
    );
    let listed: Vec<Value> =
        serde_json::from_str(&c.ok(&["task", "list", "-n", "ops", "-o", "json"])).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], "beat");

    assert_eq!(
        c.ok(&["task", "pause", "beat", "-n", "ops"]),
        "task ops/beat paused\n"
    );
    let task = c.get("ops/beat");
    assert_eq!(
        (task["status"].clone(), task["spec"]["paused"].clone()),
        ("PAUSED".into(), true.into())
    );
    assert_eq!(
        c.ok(&["task", "resume", "ops/beat"]),
        "task ops/beat resumed\n"
    );
    let task = c.get("ops/beat");
    assert_eq!(
        (task["status"].clone(), task["spec"]["paused"].clone()),
        ("WAITING".into(), false.into())
    );

    assert_eq!(
        c.ok(&["task", "delete", "ops/beat"]),
        "task ops/beat deleted\n"
    );
    let err = c.fails(&["task", "get", "ops/beat"], 4);
    assert!(err.contains("ops/beat"), "{err}");
    c.fails(&["task", "delete", "ops/beat"], 4);
    c.fails(&["task", "pause", "ops/beat"], 4);
    // A task name that disagrees with -n is a usage error, before any connection.
    c.fails(&["task", "get", "ops/beat", "-n", "billing"], 2);
}

#[test]
fn a_version_not_higher_is_refused_with_exit_5() {
    let c = Cluster::new("cli-versions");
    let put = |version: u64| c.ax_stdin(&["task", "put", "-", "--id", "v"], &versioned(version));
    assert_eq!(put(2).status.code(), Some(0));
    // A lower version, and the same version with other content (an identical spec is
    // `unchanged`, see below).
    let other = r#"{"handler": "log", "schedule": {"every": "20s"}, "version": 2}"#;
    for out in [
        put(1),
        c.ax_stdin(&["task", "put", "-", "--id", "v"], other),
    ] {
        assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.starts_with("ax: error: conflict: ") && err.contains("version 2"),
            "{err}"
        );
    }
    assert_eq!(put(3).status.code(), Some(0));
    assert_eq!(c.get("v")["spec"]["version"], 3);
}

#[test]
fn an_invalid_spec_exits_3_listing_every_problem_and_writes_nothing() {
    let c = Cluster::new("cli-invalid");
    let out = c.ax_stdin(
        &["task", "put", "-", "--id", "bad"],
        r#"{"schedule": {"cron": "61 * * * *"}, "priority": 12}"#,
    );
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    let problems: Vec<&str> = err.lines().skip(1).collect();
    assert_eq!(
        err.lines().next(),
        Some("ax: error: invalid input:"),
        "{err}"
    );
    for field in ["handler: ", "schedule.cron: ", "priority: "] {
        assert!(
            problems
                .iter()
                .any(|l| l.starts_with(&format!("  {field}"))),
            "{field} missing in {err}"
        );
    }
    assert!(out.stdout.is_empty());
    assert_eq!(c.ok(&["task", "list"]).lines().count(), 1, "header only");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_value_written_by_hand_that_is_invalid_shows_as_invalid() {
    let c = Cluster::new("cli-by-hand");
    let mut kv = c.etcd().await.kv_client();
    kv.put(
        format!("{}/tasks/default/typo", c.prefix),
        r#"{"handler": "log", "schedule": {"every": "soon"}}"#,
        None,
    )
    .await
    .unwrap();
    let task = c.get("typo");
    assert_eq!(task["status"], "INVALID");
    assert_eq!(
        task["spec"]["schedule"]["every"], "soon",
        "shown as written"
    );
    let errors = task["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("schedule.every")),
        "{errors:?}"
    );
    assert!(c.ok(&["task", "list"]).contains("INVALID"));
    // It cannot run, and saying so is better than a request the leader drops.
    c.fails(&["task", "trigger", "typo"], 3);
    c.fails(&["task", "pause", "typo"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn trigger_writes_a_run_now_request_for_the_leader() {
    let c = Cluster::new("cli-trigger");
    assert_eq!(
        c.ax_stdin(&["task", "put", "-", "--id", "report"], BEAT)
            .status
            .code(),
        Some(0)
    );
    let execution_id = c.ok(&["task", "trigger", "report"]).trim().to_owned();
    let uuid = uuid::Uuid::parse_str(&execution_id).unwrap();
    assert_eq!(uuid.get_version_num(), 7);

    let mut kv = c.etcd().await.kv_client();
    let key = format!("{}/triggers/default/report/{execution_id}", c.prefix);
    let resp = kv.get(key, None).await.unwrap();
    let value: Value = serde_json::from_slice(resp.kvs()[0].value()).unwrap();
    assert_eq!(value["execution_id"], execution_id.as_str());
    assert!(value["requested_at"].as_i64().unwrap() > 1_700_000_000_000);

    c.fails(&["task", "trigger", "missing"], 4);
}

#[test]
fn status_without_a_leader_shows_the_known_queues() {
    let c = Cluster::new("cli-status");
    c.ax_stdin(
        &["task", "put", "-", "--id", "heavy"],
        r#"{"handler": "log", "schedule": {"every": "1m"}, "queue": "heavy"}"#,
    );
    let shown = c.ok(&["status"]);
    assert!(shown.starts_with("leader: none\n"), "{shown}");
    assert!(shown.contains("replicas: 0\n"), "{shown}");
    assert!(shown.contains("queues: 2\n"), "{shown}");
    assert!(
        shown.lines().any(|l| l
            .split_whitespace()
            .eq(["default", "0", "-", "0", "0", "active"])),
        "{shown}"
    );
    assert!(shown.lines().any(|l| l.starts_with("heavy ")), "{shown}");
    assert!(shown.contains("\ndead letters: 0\n"), "{shown}");
    // The test Redis keeps nothing on disk: status says what that risks.
    assert!(
        shown.contains("\nwarning: Redis has neither AOF nor RDB persistence"),
        "{shown}"
    );

    let json: Value = serde_json::from_str(&c.ok(&["status", "-o", "json"])).unwrap();
    assert_eq!(json["redis_warnings"].as_array().map(Vec::len), Some(1));
    assert_eq!(json["leader"], Value::Null);
    assert_eq!(json["replicas"], serde_json::json!([]));
    assert_eq!(json["dlq_size"], 0);
    assert_eq!(json["queues"][0]["name"], "default");
    assert_eq!(json["queues"][0]["depth"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn history_shows_the_recorded_attempts() {
    let c = Cluster::new("cli-history");
    c.fails(&["task", "history", "report"], 4);
    c.ax_stdin(&["task", "put", "-", "--id", "report"], BEAT);
    assert_eq!(c.ok(&["task", "history", "report"]).lines().count(), 1);

    let q = c.queue().await;
    let mut retrying = AttemptEnd::new(AttemptOutcome::Failed, Some("HTTP 503".to_owned()));
    retrying.retry_at = Some(UtcMillis(1_767_171_601_000));
    for (attempt, end) in [(0, retrying), (1, AttemptEnd::succeeded())] {
        let entry = HistoryEntry {
            unstarted: false,
            execution_id: ax_queue::new_execution_id(),
            fire_at: UtcMillis(1_767_171_600_000),
            started_at: UtcMillis(1_767_171_600_012),
            finished_at: UtcMillis(1_767_171_600_100),
            lateness_ms: 12,
            duration_ms: 88,
            end,
            worker: "ax-0".into(),
            attempt,
            queue: String::new(),
            enqueued_at: None,
            first_enqueued_at: None,
            output: None,
            lineage: Default::default(),
        };
        q.record_history("default", "report", &entry).await.unwrap();
    }
    let table = c.ok(&["task", "history", "report"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[1].contains(" succeeded ") && lines[1].contains("ax-0"),
        "{table}"
    );
    assert!(
        lines[2].contains(" retrying ") && lines[2].ends_with("HTTP 503"),
        "{table}"
    );

    let json: Vec<Value> =
        serde_json::from_str(&c.ok(&["task", "history", "report", "--limit", "1", "-o", "json"]))
            .unwrap();
    assert_eq!(json.len(), 1);
    assert_eq!(json[0]["attempt"], 2);
    assert_eq!(json[0]["lateness_ms"], 12);
    assert_eq!(json[0]["duration_ms"], 88);
    assert_eq!(json[0]["outcome"], "succeeded");
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_listed_requeued_and_purged() {
    let c = Cluster::new("cli-dlq");
    assert_eq!(c.ok(&["dlq", "list"]).lines().count(), 1, "header only");
    assert_eq!(c.ok(&["dlq", "list", "-o", "json"]), "[]\n");
    c.fails(
        &["dlq", "requeue", "0190f3c2-7d41-7a3e-9c1b-3f5e2a6d8b10"],
        4,
    );
    c.fails(&["dlq", "requeue", "not-an-id"], 3);
    assert_eq!(c.ok(&["dlq", "purge"]), "purged 0 dead letter(s)\n");

    // Two executions of a registered task, taken by a worker and dead-lettered.
    // `overlap: allow`, so that the second fire is not held behind the first.
    let flaky = r#"{"handler": "log", "schedule": {"every": "10s"}, "overlap": "allow"}"#;
    c.ax_stdin(&["task", "put", "-", "--id", "flaky"], flaky);
    let q = c.queue().await;
    let spec = TaskSpec::from_json(flaky.as_bytes(), "default", "flaky").unwrap();
    let now = ax_scheduler_core::UtcMillis::now();
    for i in 0..2 {
        let msg = ExecutionMessage::for_fire(&spec, UtcMillis(now.0 - 1000 * (1 - i)), now, 1);
        assert_eq!(q.enqueue(&msg).await.unwrap(), EnqueueOutcome::Enqueued);
    }
    let mut consumer = q
        .consumer("default", "w1", Duration::from_millis(100), now)
        .await
        .unwrap();
    let mut taken = Vec::new();
    for _ in 0..20 {
        taken.extend(consumer.take(2).await.unwrap());
        if taken.len() == 2 {
            break;
        }
    }
    assert_eq!(taken.len(), 2);
    for d in &taken {
        assert!(q.dead_letter(d, "HTTP 500", now).await.unwrap());
    }

    let table = c.ok(&["dlq", "list"]);
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(
        table.contains("default/flaky") && table.contains("HTTP 500"),
        "{table}"
    );
    let listed: Vec<Value> = serde_json::from_str(&c.ok(&["dlq", "list", "-o", "json"])).unwrap();
    let first = listed[0]["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(listed[0]["queue"], "default");

    // Named by the end of its id, as `execution get` takes it; the new execution is named.
    let text = c.ok(&["dlq", "requeue", &first[first.len() - 12..]]);
    assert!(text.starts_with("requeued 1 dead letter(s)\n"), "{text}");
    let row = text.lines().last().unwrap();
    assert!(
        row.starts_with(&first)
            && row.contains("default/flaky")
            && row.ends_with("the current spec"),
        "{text}"
    );
    let new_id = row.split_whitespace().nth(1).unwrap();
    assert!(
        new_id.parse::<ax_scheduler_core::ExecutionId>().is_ok() && new_id != first,
        "{text}"
    );
    assert_eq!(q.depth("default").await.unwrap(), 1);
    c.fails(&["dlq", "requeue", &first], 4);
    let status: Value = serde_json::from_str(&c.ok(&["status", "-o", "json"])).unwrap();
    assert_eq!(status["dlq_size"], 1);
    assert_eq!(status["queues"][0]["depth"], 1);

    assert_eq!(
        c.ok(&["dlq", "purge", "--queue", "default"]),
        "purged 1 dead letter(s)\n"
    );
    assert_eq!(c.ok(&["dlq", "list"]).lines().count(), 1);
}

/// Putting the file that is registered again (a README step after `scripts/dev.sh` registered
/// the examples) says so and writes nothing; a changed file at the same version is refused.
#[test]
fn putting_the_registered_spec_again_is_unchanged_not_a_conflict() {
    let c = Cluster::new("cli-reput");
    let put = |body: &str| c.ax_stdin(&["task", "put", "-", "--id", "beat", "-n", "ops"], body);
    let first = put(BEAT);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let stored = c.get("ops/beat");

    let again = put(BEAT);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let shown = text(&again.stdout);
    assert!(
        shown.starts_with("task ops/beat unchanged: this spec is registered already (version 1)\n"),
        "{shown}"
    );
    assert_eq!(shown.lines().filter(|l| l.starts_with("  ")).count(), 5);
    // Nothing written: the key keeps its revision and the countdown its start.
    assert_eq!(c.get("ops/beat"), stored);
    let records: Value = serde_json::from_str(&c.ok(&["audit", "-o", "json"])).unwrap();
    assert_eq!(records.as_array().unwrap().len(), 1, "{records}");

    let changed = put(r#"{"handler": "log", "schedule": {"every": "20s"}}"#);
    assert_ne!(changed.status.code(), Some(0));
    assert!(
        text(&changed.stderr).contains("is registered with version 1"),
        "{}",
        text(&changed.stderr)
    );
}

/// A task of a paused namespace lists as PAUSED with no next fire, never as SCHEDULED with
/// a next fire that will not happen.
#[test]
fn a_paused_namespace_shows_its_tasks_paused() {
    let c = Cluster::new("cli-ns-paused");
    c.ax_stdin(&["task", "put", "-", "--id", "beat", "-n", "ops"], BEAT);
    c.ax_stdin(&["task", "put", "-", "--id", "other"], BEAT);
    c.ok(&["namespace", "pause", "ops"]);

    let task = c.get("ops/beat");
    assert_eq!(task["status"], "PAUSED", "{task}");
    assert_eq!(task["namespace_paused"], true, "{task}");
    assert!(
        task.get("next_fire").is_none() && task.get("upcoming_fires").is_none(),
        "{task}"
    );
    let other = c.get("default/other");
    assert_ne!(other["status"], "PAUSED", "{other}");
    assert!(other.get("namespace_paused").is_none(), "{other}");

    let table = c.ok(&["task", "list"]);
    let row = table.lines().find(|l| l.starts_with("ops/beat")).unwrap();
    assert!(row.contains("PAUSED"), "{table}");
    let paused: Vec<Value> =
        serde_json::from_str(&c.ok(&["task", "list", "--status", "paused", "-o", "json"])).unwrap();
    assert_eq!(paused.len(), 1, "{paused:?}");

    c.ok(&["namespace", "resume", "ops"]);
    assert_ne!(c.get("ops/beat")["status"], "PAUSED");
}

/// Stops a replica however the test ends.
struct Replica(std::process::Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A task whose handler no live worker serves is refused at put, naming the handlers the
/// workers do serve (with the nearest one), instead of failing at every fire into the DLQ.
#[test]
fn a_handler_no_live_worker_serves_is_refused_at_put() {
    let c = Cluster::new("cli-handler");
    let put = |body: &str, extra: &[&str]| {
        let mut args = vec!["task", "put", "-", "--id", "t"];
        args.extend_from_slice(extra);
        c.ax_stdin(&args, body)
    };
    let shell = r#"{"handler": "shell", "schedule": {"every": "10s"}}"#;
    // No worker yet: nothing to compare with, the put goes through (workers come later).
    assert_eq!(put(shell, &[]).status.code(), Some(0));
    c.ok(&["task", "delete", "t"]);

    let listen = format!("127.0.0.1:{}", ax_testkit::free_port());
    let _replica = Replica(
        c.command(&["serve", "--http-listen", &listen])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = std::time::Instant::now();
    loop {
        let status: Value = serde_json::from_str(&c.ok(&["status", "-o", "json"])).unwrap();
        if !status["replicas"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no replica: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let out = put(shell, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("no live worker of queue `default` serves `shell`"),
        "{err}"
    );
    assert!(
        err.contains("they serve: ") && err.contains("http"),
        "{err}"
    );
    // Another queue, which no ax worker takes from (a Python worker's, say): no refusal.
    let python = r#"{"handler": "python", "queue": "python", "schedule": {"every": "10s"}}"#;
    let out = c.ax_stdin(&["task", "put", "-", "--id", "py"], python);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(err.contains("--allow-unserved-handler"), "{err}");
    let typo = put(r#"{"handler": "htpt", "schedule": {"every": "10s"}}"#, &[]);
    assert!(
        text(&typo.stderr).contains("did you mean `http`?"),
        "{}",
        text(&typo.stderr)
    );
    // The dry run runs the same checks as the put.
    let dry = put(
        r#"{"handler": "htpt", "schedule": {"every": "10s"}}"#,
        &["--dry-run"],
    );
    assert_eq!(dry.status.code(), Some(3), "{}", text(&dry.stdout));
    assert!(
        text(&dry.stderr).contains("did you mean `http`?"),
        "{}",
        text(&dry.stderr)
    );

    c.fails(&["task", "get", "t"], 4);

    let out = put(shell, &["--allow-unserved-handler"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(c.get("t")["spec"]["handler"], "shell");
}

#[test]
fn changes_made_with_the_cli_are_in_the_audit_log_newest_first() {
    let c = Cluster::new("cli-audit");
    let run = |args: &[&str]| {
        let out = c.command(args).env("USER", "alice").output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    let mut put = c
        .command(&["task", "put", "-", "--id", "beat", "-n", "ops"])
        .env("USER", "alice")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    put.stdin
        .take()
        .unwrap()
        .write_all(BEAT.as_bytes())
        .unwrap();
    assert_eq!(put.wait_with_output().unwrap().status.code(), Some(0));
    run(&["task", "pause", "ops/beat"]);
    run(&["task", "delete", "ops/beat"]);
    // Reads change nothing and are not recorded.
    c.ok(&["task", "list"]);

    let records: Value = serde_json::from_str(&run(&["audit", "-o", "json"])).unwrap();
    let records = records.as_array().unwrap();
    let actions: Vec<&str> = records
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["task.delete", "task.pause", "task.put"]);
    for r in records {
        assert_eq!(r["target"], "ops/beat");
        assert_eq!(r["via"], "cli");
        assert!(r["actor"].as_str().unwrap().starts_with("cli:alice"), "{r}");
    }
    assert_eq!(records[2]["detail"]["created"]["schedule"]["every"], "10s");
    assert!(records[2]["revision"].as_i64().unwrap() > 0);

    let table = run(&["audit", "--actor", "nobody"]);
    assert_eq!(table.lines().count(), 1, "only the header: {table}");
    let table = run(&["audit", "--since", "1h", "--limit", "1"]);
    assert!(
        table.contains("task.delete") && !table.contains("task.put"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_awaiting_long_job_shows_its_last_progress_report() {
    let c = Cluster::new("cli-progress");
    let q = c.queue().await;
    let mut spec = ax_testkit::spec("long", "default", "http");
    spec.timeout = Duration::from_secs(60);
    spec.http = Some(ax_scheduler_core::task::HttpTarget {
        url: "http://127.0.0.1:9/".into(),
        headers: Default::default(),
        follow_redirects: false,
        await_completion: true,
    });
    let now = UtcMillis::now();
    let message = ExecutionMessage::for_fire(&spec, now, now, 0);
    let id = message.execution_id.to_string();
    q.enqueue(&message).await.unwrap();
    let mut consumer = q
        .consumer("default", "ax-1", Duration::from_millis(200), now)
        .await
        .unwrap();
    let d = consumer.take(1).await.unwrap().pop().unwrap();
    // Not awaiting yet, in no history: the worker holds it, and the story says so.
    let held: Value =
        serde_json::from_str(&c.ok(&["execution", "get", &id, "-o", "json"])).unwrap();
    assert_eq!(held["outcome"], "running", "{held}");
    assert_eq!(held["pending"]["worker"], "ax-1", "{held}");
    let token = ax_queue::CompletionToken::issue("default", 0);
    q.open_awaiting(&d, &token, now).await.unwrap();
    let deadline = now.add(Duration::from_secs(60));
    assert_eq!(
        q.start_awaiting(&d, deadline).await.unwrap(),
        ax_queue::AwaitStart::Awaiting
    );
    let story: Value =
        serde_json::from_str(&c.ok(&["execution", "get", &id, "-o", "json"])).unwrap();
    assert_eq!(
        (
            &story["outcome"],
            &story["namespace"],
            &story["task_id"],
            &story["queue"]
        ),
        (
            &Value::from("waiting"),
            &Value::from("ns"),
            &Value::from("long"),
            &Value::from("default")
        ),
        "{story}"
    );
    assert_eq!(story["waiting"]["attempt"], 1, "{story}");
    assert_eq!(story["waiting"]["worker"], "ax-1", "{story}");
    assert!(story["waiting"].get("progress").is_none(), "{story}");

    let reported = UtcMillis(now.0 + 1_500);
    let progress = ax_queue::Progress {
        percent: Some(42.5),
        message: Some("copying files".into()),
        at: reported,
    };
    let moved = now.add(Duration::from_secs(90));
    assert_eq!(
        q.progress_awaiting(
            "default",
            d.message.execution_id,
            0,
            &token.hash(),
            moved,
            &progress
        )
        .await
        .unwrap(),
        ax_queue::ProgressResult::Recorded
    );
    let story: Value =
        serde_json::from_str(&c.ok(&["execution", "get", &id, "-o", "json"])).unwrap();
    let waiting = &story["waiting"];
    assert_eq!(
        waiting["progress"],
        serde_json::json!({ "percent": 42.5, "message": "copying files", "at": reported.0 }),
        "{story}"
    );
    assert_eq!(waiting["deadline"], moved.0, "{story}");
    assert_eq!(story["attempts"], serde_json::json!([]), "{story}");

    let text = c.ok(&["execution", "get", &id]);
    assert!(text.contains("outcome: waiting"), "{text}");
    assert!(
        text.contains(&format!(
            "{reported}  attempt 1 progress 42.5%: copying files"
        )),
        "{text}"
    );
    assert!(
        text.contains("attempt 1 started on ax-1; accepted, waiting for its completion"),
        "{text}"
    );
    assert!(
        text.contains(&format!("next progress report is due by {moved}")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn execution_get_takes_the_start_or_end_of_an_id_and_lists_candidates() {
    let c = Cluster::new("cli-exec-fragment");
    let q = c.queue().await;
    // Two ids of the same minute: the same first 13 characters, as UUID v7 ids have.
    let ids: [ax_scheduler_core::ExecutionId; 2] = [
        "01a22e3e-bcff-73cd-9d09-569d2cb5c48c".parse().unwrap(),
        "01a22e3e-bcff-7f00-8e1a-0b7d41aa93e5".parse().unwrap(),
    ];
    for (i, id) in ids.iter().enumerate() {
        let entry = HistoryEntry {
            unstarted: false,
            execution_id: *id,
            fire_at: UtcMillis(1_767_171_600_000),
            started_at: UtcMillis(1_767_171_600_012),
            finished_at: UtcMillis(1_767_171_600_100),
            lateness_ms: 12,
            duration_ms: 88,
            end: AttemptEnd::succeeded(),
            worker: "ax-0".into(),
            attempt: 0,
            queue: "default".into(),
            enqueued_at: None,
            first_enqueued_at: None,
            output: None,
            lineage: Default::default(),
        };
        q.record_history("ops", &format!("beat-{i}"), &entry)
            .await
            .unwrap();
    }
    for unique in ["41aa93e5", "01A22E3E-BCFF-7F", "0b7d41aa93e5"] {
        let story: Value =
            serde_json::from_str(&c.ok(&["execution", "get", unique, "-o", "json"])).unwrap();
        assert_eq!(
            story["execution_id"],
            ids[1].to_string(),
            "{unique}: {story}"
        );
        assert_eq!(story["task_id"], "beat-1", "{unique}: {story}");
    }
    let err = c.fails(&["execution", "get", "01a22e3e"], 3);
    assert!(err.contains("`01a22e3e` matches 2 executions"), "{err}");
    for id in ids {
        assert!(err.contains(&id.to_string()), "{err}");
    }
    assert!(err.contains("ops/beat-0"), "{err}");
    let err = c.fails(&["execution", "get", "93e5"], 3);
    assert!(err.contains("at least 6 characters"), "{err}");
    let err = c.fails(&["execution", "get", "ffffffffffff"], 4);
    assert!(
        err.contains("no execution id starts or ends with `ffffffffffff`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_shot_finalized_in_the_ledger_shows_its_final_status() {
    let c = Cluster::new("cli-finals");
    let once = r#"{"handler": "log", "schedule": {"at": "2027-01-01T00:00:00Z"}}"#;
    let out = c.ax_stdin(&["task", "put", "-", "--id", "once"], once);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = c.ax_stdin(&["task", "put", "-", "--id", "beat"], BEAT);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(c.get("once")["status"], "WAITING", "nothing recorded yet");
    // The leader wrote its final to the finals ledger, not to its state key.
    let registry = ax_registry::Registry::new(
        c.etcd().await,
        ax_registry::RegistryConfig {
            prefix: c.prefix.clone(),
            ..Default::default()
        },
    );
    let now = UtcMillis(1_800_000_000_000);
    let mut ended = ax_scheduler_core::TaskState::new(1, now, now);
    ended.status = ax_scheduler_core::TaskStatus::Failed;
    ended.fire_count = 1;
    ended.failure_count = 1;
    ended.last_error = Some("HTTP 503".into());
    let key = ax_scheduler_core::TaskKey::new("default", "once");
    let mut writer = ax_registry::LedgerWriter::new(None);
    registry
        .put_finals(&[(key, ended)], &mut writer)
        .await
        .unwrap();
    let task = c.get("once");
    assert_eq!(task["status"], "FAILED", "{task}");
    let table = c.ok(&["task", "list"]);
    let line = table.lines().find(|l| l.contains("once")).unwrap();
    assert!(line.contains("FAILED"), "{table}");
    let listed: Value = serde_json::from_str(&c.ok(&["task", "list", "-o", "json"])).unwrap();
    let shown = listed
        .as_array()
        .or_else(|| listed["tasks"].as_array())
        .unwrap()
        .iter()
        .find(|t| t["id"] == "once")
        .unwrap()
        .clone();
    assert_eq!(shown["status"], "FAILED", "{listed}");
}

#[test]
fn scheduled_executions_are_added_listed_moved_cancelled_and_audited_through_the_cli() {
    let c = Cluster::new("cli-sched");
    let out = c.ax(&[
        "scheduled",
        "add",
        "orders.close",
        "-n",
        "shop",
        "--payload",
        r#"{"order": 7}"#,
        "--after",
        "1h",
        "--idempotency-key",
        "close-7",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = said.split_whitespace().nth(1).unwrap().to_owned();
    assert!(said.starts_with("scheduled default/"), "{said}");
    // The same key again: the first one's id.
    let again = c.ax(&[
        "scheduled",
        "add",
        "orders.close",
        "-n",
        "shop",
        "--after",
        "2h",
        "--idempotency-key",
        "close-7",
        "-o",
        "json",
    ]);
    let reply: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(reply["scheduled"][0]["id"], id.as_str());
    assert_eq!(reply["scheduled"][0]["duplicate"], true);

    let list = c.ax(&["scheduled", "list", "-o", "json"]);
    let page: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["items"][0]["payload"]["order"], 7);

    let moved = c.ax(&["scheduled", "move", &id, "--after", "3h"]);
    assert!(
        moved.status.success(),
        "{}",
        String::from_utf8_lossy(&moved.stderr)
    );
    let got = c.ax(&["scheduled", "get", &id, "-o", "json"]);
    let view: Value = serde_json::from_slice(&got.stdout).unwrap();
    let due = view["due"].as_i64().unwrap();
    let in_3h = UtcMillis::now().0 + 3 * 3_600_000;
    assert!((due - in_3h).abs() < 60_000, "{view}");

    let cancelled = c.ax(&["scheduled", "cancel", &id]);
    assert!(
        cancelled.status.success(),
        "{}",
        String::from_utf8_lossy(&cancelled.stderr)
    );
    let gone = c.ax(&["scheduled", "cancel", &id]);
    assert_eq!(
        gone.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    // Bad input: every problem, exit 3, nothing written.
    let bad = c.ax(&[
        "scheduled",
        "add",
        "h",
        "-n",
        "bad ns",
        "--after",
        "1m",
        "--priority",
        "12",
    ]);
    assert_eq!(
        bad.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("namespace") && stderr.contains("priority"),
        "{stderr}"
    );

    let audit = c.ax(&["audit", "-o", "json"]);
    let records: Value = serde_json::from_slice(&audit.stdout).unwrap();
    let actions: Vec<&str> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"scheduled.move") && actions.contains(&"scheduled.cancel"),
        "{actions:?}"
    );
}
