//! The example worker (`examples/rust-worker`) as a real process against real etcd and
//! Redis and a replica as the chart deploys it (`ax serve` with its default roles, scheduler
//! and worker, its worker on the `default` queue beside the SDK worker's `rust` queue; in a
//! process of its own: this test binary started again, running the `ax` binary's `main` as
//! [`replica_process`] does): each execution runs once and its end reaches the leader, a
//! retryable failure is retried by the task's policy, a SIGKILLed worker's execution is
//! redelivered to another worker, SIGTERM lets the running attempt finish, a kill from the
//! client stops it, and a long job that defers its end shows its progress through the API
//! and is ended once by its completion.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ax::cli::edge::Edge;
use ax::cli::Cli;
use ax_sdk::{Client, Config, ExecutionId};
use ax_testkit::{etcd_endpoint, redis_url, unique_name};
use clap::Parser;
use serde_json::json;

/// The processes of the tests would compete for the cores: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The replica's admin token.
const API_TOKEN: &str = "sdk-e2e-admin-token-0123456789abcdef0123456789";

/// Set in the environment of the replica process this binary starts of itself.
const REPLICA_ENV: &str = "AX_SDK_E2E_REPLICA";

/// In the replica process: `ax serve`, exactly as the `ax` binary's `main` runs it (the
/// command line, the environment, the runtime), until SIGTERM or SIGKILL. In the test run
/// itself it does nothing.
#[test]
fn replica_process() {
    if std::env::var_os(REPLICA_ENV).is_none() {
        return;
    }
    let cli = Cli::parse_from(["ax", "serve"]);
    let edge = Edge::from_process();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(ax::cli::commands::run(cli, &edge))
        .unwrap();
}

/// One corner of the shared servers, its replica (both roles), and a client.
struct Cluster {
    redis_prefix: String,
    /// The replica's `/api/v1`.
    api: String,
    client: Client,
    replica: Child,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let etcd_prefix = format!("/{}", unique_name("sdke2e"));
        let redis_prefix = unique_name("sdke2e");
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("replica.log")).unwrap();
        let listen = format!("127.0.0.1:{}", ax_testkit::free_port());
        let replica = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "replica_process",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env(REPLICA_ENV, "1")
            .env("HOSTNAME", "sdk-e2e-host")
            .env("AX_INSTANCE_ID", unique_name("replica"))
            .env("AX_ETCD_ENDPOINTS", etcd_endpoint())
            .env("AX_ETCD_PREFIX", &etcd_prefix)
            .env("AX_REDIS_URL", redis_url())
            .env("AX_REDIS_KEY_PREFIX", &redis_prefix)
            .env("AX_LEASE_TTL", "2s")
            .env("AX_LOG", "warn")
            .env("AX_HTTP_LISTEN", &listen)
            .env("AX_API_TOKEN", API_TOKEN)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let config = Config::redis(redis_url())
            .key_prefix(&redis_prefix)
            .etcd([etcd_endpoint()])
            .etcd_prefix(&etcd_prefix);
        let client = Client::connect(&config).await.unwrap();
        Cluster {
            redis_prefix,
            api: format!("http://{listen}/api/v1"),
            client,
            replica,
            dir,
        }
    }

    /// Registers `id` on the worker's queue with `handler`, firing only when triggered.
    async fn put(&self, id: &str, handler: &str, retry: serde_json::Value) {
        let spec = json!({
            "handler": handler,
            "queue": "rust",
            "schedule": {"every": "24h"},
            "timeout": "60s",
            "retry": retry,
        });
        self.client.put("e2e", id, &spec).await.unwrap();
    }

    async fn trigger(&self, id: &str, payload: serde_json::Value) -> ExecutionId {
        self.client
            .trigger("e2e", id, Some(&payload), None)
            .await
            .unwrap()
            .execution_id
    }

    /// Starts the example worker under `worker_id`.
    fn worker(&self, worker_id: &str) -> Worker {
        let log = self.dir.path().join(format!("{worker_id}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(example_binary())
            .env_clear()
            .env("AX_REDIS_URL", redis_url())
            .env("AX_REDIS_KEY_PREFIX", &self.redis_prefix)
            .env("AX_QUEUE", "rust")
            .env("AX_WORKER_ID", worker_id)
            .env("AX_VISIBILITY_TIMEOUT_MS", "1000")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Worker {
            child: Some(child),
            log,
        }
    }

    /// `GET /executions/{id}` of the replica's API, or `None` while it does not answer 200.
    async fn story(&self, id: ExecutionId) -> Option<serde_json::Value> {
        let response = reqwest::Client::new()
            .get(format!("{}/executions/{id}", self.api))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }

    /// Waits until the task's last execution ended `outcome`, as the leader recorded it.
    async fn ended(&self, id: &str, outcome: &str, within: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(view) = self.client.get("e2e", id).await {
                if view.last_outcome.map(|o| o.as_str()) == Some(outcome) {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.replica.kill();
        let _ = self.replica.wait();
        if std::thread::panicking() {
            let log = self.dir.path().join("replica.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            eprintln!("---- the replica's log ----\n{text}");
        }
    }
}

/// The example's binary, which cargo builds beside this test's (`target/<profile>/examples`).
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile_dir.join("examples").join("rust-worker");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo test -p ax-sdk` (which builds the examples)",
        path.display()
    );
    path
}

/// One example worker process, SIGKILLed when dropped.
struct Worker {
    child: Option<Child>,
    log: PathBuf,
}

impl Worker {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The lines saying the worker started an attempt of `id`.
    fn runs_of(&self, id: ExecutionId) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| l.starts_with("ran ") && l.contains(&id.to_string()))
            .map(str::to_owned)
            .collect()
    }

    async fn wait_for(&self, within: Duration, mut cond: impl FnMut(&str) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < within {
            if cond(&self.log_text()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        cond(&self.log_text())
    }

    fn signal(&self, name: &str) {
        let pid = self.child.as_ref().unwrap().id();
        ax_testkit::signal(pid, name);
    }

    /// Waits up to `within` for the process to exit; its status.
    async fn exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(status)) = self.child.as_mut()?.try_wait() {
                self.child = None;
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- {} ----\n{}", self.log.display(), self.log_text());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_run_once_retry_by_policy_and_sigterm_lets_the_running_one_finish() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start().await;
    c.put(
        "flaky",
        "example.flaky",
        json!({"max_retries": 2, "initial_interval": "200ms"}),
    )
    .await;
    c.put("long", "example.long", json!({"max_retries": 0}))
        .await;
    let mut w = c.worker("rust-1");

    let flaky = c.trigger("flaky", json!({})).await;
    assert!(c.ended("flaky", "succeeded", Duration::from_secs(30)).await);
    assert_eq!(
        w.runs_of(flaky),
        [
            format!("ran example.flaky {flaky} attempt 1"),
            format!("ran example.flaky {flaky} attempt 2")
        ],
        "failed once, retried once by the policy"
    );
    let history = c.client.history("e2e", "flaky", 10).await.unwrap();
    let attempts: Vec<_> = history
        .iter()
        .map(|r| (r.attempt, r.outcome.as_str()))
        .collect();
    assert_eq!(
        attempts,
        [(2, "succeeded"), (1, "retrying")],
        "newest first"
    );
    let (retry, first) = (&history[0], &history[1]);
    let waited = retry.started.unwrap().0 - first.finished.unwrap().0;
    assert!(
        waited >= 200,
        "the retry waited the policy's initial interval: {waited} ms"
    );

    let short = c.trigger("long", json!({"ms": 100})).await;
    assert!(c.ended("long", "succeeded", Duration::from_secs(30)).await);
    assert_eq!(w.runs_of(short).len(), 1, "ran once");

    // SIGTERM while an attempt runs: it finishes within the grace, then the worker exits.
    let drained = c.trigger("long", json!({"ms": 2000})).await;
    assert!(
        w.wait_for(Duration::from_secs(30), |log| log
            .contains(&format!("ran example.long {drained}")))
            .await
    );
    w.signal("TERM");
    let status = w.exit(Duration::from_secs(20)).await.expect("exited");
    assert!(status.success(), "{status:?}");
    assert!(w
        .log_text()
        .contains(&format!("done example.long {drained}")));
    let history = c.client.history("e2e", "long", 10).await.unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(w.runs_of(drained).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_workers_execution_is_redelivered_to_another() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start().await;
    c.put("long", "example.long", json!({"max_retries": 0}))
        .await;
    let first = c.worker("rust-a");
    let id = c.trigger("long", json!({"ms": 3000})).await;
    assert!(
        first
            .wait_for(Duration::from_secs(30), |log| log
                .contains(&format!("ran example.long {id}")))
            .await
    );
    first.signal("KILL");
    let second = c.worker("rust-b");
    assert!(
        second
            .wait_for(Duration::from_secs(30), |log| log
                .contains(&format!("done example.long {id}")))
            .await,
        "the killed worker's execution was given back and run by the other"
    );
    assert!(c.ended("long", "succeeded", Duration::from_secs(30)).await);
    assert_eq!(second.runs_of(id).len(), 1);
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_from_the_client_stops_the_running_attempt() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start().await;
    c.put("long", "example.long", json!({"max_retries": 3}))
        .await;
    let w = c.worker("rust-k");
    let id = c.trigger("long", json!({"ms": 60000})).await;
    assert!(
        w.wait_for(Duration::from_secs(30), |log| log
            .contains(&format!("ran example.long {id}")))
            .await
    );
    let killed = c.client.kill("e2e", "long", None).await.unwrap();
    assert!(
        killed.killed.iter().any(|k| k.execution_id == id),
        "{killed:?}"
    );
    let start = Instant::now();
    let mut outcome = None;
    while start.elapsed() < Duration::from_secs(15) && outcome.is_none() {
        let history = c.client.history("e2e", "long", 10).await.unwrap();
        outcome = history
            .into_iter()
            .find(|r| r.execution_id == id)
            .map(|r| r.outcome);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        outcome.map(|o| o.as_str()),
        Some("killed"),
        "ended by the kill"
    );
    assert_eq!(w.runs_of(id).len(), 1, "a killed execution is not retried");
    assert!(!w.log_text().contains(&format!("done example.long {id}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_long_job_shows_its_progress_and_its_completion_ends_it_once() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start().await;
    c.put("progress", "example.progress", json!({"max_retries": 0}))
        .await;
    let w = c.worker("rust-progress");
    let id = c.trigger("progress", json!({"steps": 3, "ms": 700})).await;

    // While the job works, the API shows the attempt waiting with its last progress.
    let start = Instant::now();
    let mut seen = None;
    while start.elapsed() < Duration::from_secs(30) && seen.is_none() {
        if let Some(story) = c.story(id).await {
            if story["outcome"] == "waiting" && story["waiting"]["progress"]["percent"].is_number()
            {
                seen = Some(story);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let story = seen.expect("the execution shown waiting with a progress report");
    assert_eq!(story["waiting"]["attempt"], 1, "{story}");
    let note = story["waiting"]["progress"]["message"].as_str().unwrap();
    assert!(note.starts_with("step "), "{story}");

    // The completion ends the execution, once: one attempt recorded, succeeded.
    assert!(
        c.ended("progress", "succeeded", Duration::from_secs(30))
            .await
    );
    assert!(
        w.wait_for(Duration::from_secs(10), |log| log
            .contains(&format!("completed example.progress {id}")))
            .await
    );
    let story = c.story(id).await.expect("its story");
    assert_eq!(story["outcome"], "succeeded", "{story}");
    assert!(story.get("waiting").is_none(), "{story}");
    let attempts = story["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{story}");
    assert_eq!(attempts[0]["outcome"], "succeeded", "{story}");
    assert_eq!(w.runs_of(id).len(), 1, "the handler ran once");
    let history = c.client.history("e2e", "progress", 10).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_client_registers_fires_and_controls_a_task_with_a_token() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start().await;
    let client = Client::http(&c.api, API_TOKEN).unwrap();
    // The replica answers once it holds its lease and serves its queue.
    let spec = json!({
        "handler": "noop",
        "queue": "default",
        "schedule": {"every": "24h"},
    });
    let start = Instant::now();
    let put = loop {
        match client.put("e2e", "over-http", &spec).await {
            Ok(put) => break put,
            Err(e) if e.is_retryable() && start.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("put: {e:?}"),
        }
    };
    assert!(put.written, "{put:?}");

    // The same validation as `ax task put` refuses before any write, every problem typed.
    let bad = json!({"handler": "noop", "schedule": {"cron": "not a cron"}, "priority": 99});
    let refused = client.put("e2e", "bad", &bad).await.unwrap_err();
    assert!(!refused.is_retryable());
    let ax_sdk::Error::Api(ax_sdk::client::ApiError::Invalid { errors, .. }) = &refused else {
        panic!("{refused:?}")
    };
    assert!(errors.len() >= 2, "{errors:?}");
    assert!(matches!(
        client.get("e2e", "bad").await,
        Err(ax_sdk::Error::Api(ax_sdk::client::ApiError::NotFound(_)))
    ));

    let view = client.get("e2e", "over-http").await.unwrap();
    assert_eq!(view.spec["handler"], "noop");
    let list = client.list(ax_sdk::TaskFilter::all()).await.unwrap();
    assert!(list.items.iter().any(|t| t.id == "over-http"));

    let run = client
        .trigger("e2e", "over-http", Some(&json!({"n": 1})), None)
        .await
        .unwrap();
    let start = Instant::now();
    let mut history = Vec::new();
    while start.elapsed() < Duration::from_secs(30) {
        history = client.history("e2e", "over-http", 10).await.unwrap();
        if !history.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].execution_id, run.execution_id);
    assert_eq!(history[0].outcome, "succeeded");

    let paused = client.pause("e2e", "over-http").await.unwrap();
    assert_eq!(paused.spec["paused"], true, "{paused:?}");
    let resumed = client.resume("e2e", "over-http").await.unwrap();
    assert_eq!(resumed.spec["paused"], false, "{resumed:?}");
    // Nothing runs: a kill is told so, as a typed error.
    let nothing = client.kill("e2e", "over-http", None).await;
    assert!(
        matches!(
            nothing,
            Err(ax_sdk::Error::Api(ax_sdk::client::ApiError::NotFound(_)))
        ),
        "{nothing:?}"
    );
    client.delete("e2e", "over-http").await.unwrap();
    assert!(client.get("e2e", "over-http").await.is_err());

    // A wrong token is refused, permanently.
    let stranger = Client::http(&c.api, "not-the-token-0123456789abcdef0123456789").unwrap();
    let e = stranger.get("e2e", "over-http").await.unwrap_err();
    assert!(
        matches!(
            e,
            ax_sdk::Error::Api(ax_sdk::client::ApiError::Unauthorized(_))
        ),
        "{e:?}"
    );
    assert!(!e.is_retryable());
}

/// Waits for the execution's story to show `outcome`; the story, or `None` past `within`.
async fn story_with(
    c: &Cluster,
    id: ExecutionId,
    outcome: &str,
    within: Duration,
) -> Option<serde_json::Value> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Some(story) = c.story(id).await {
            let ended = story["attempts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["outcome"] == outcome));
            if ended {
                return Some(story);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_timeouts_scheduled_directly_and_over_http_run_once_unless_cancelled() {
    let _serial = SERIAL.lock().await;
    let c = Cluster::start().await;
    let http = Client::http(&c.api, API_TOKEN).unwrap();
    let options = |key: &str| ax_sdk::TaskOptions::new().idempotency_key(key);
    let after = Duration::from_millis(1500);
    // Over HTTP, once the replica answers.
    let start = Instant::now();
    let first = loop {
        match http
            .schedule_after("shop", "noop", &json!({"order": 0}), after, options("o-0"))
            .await
        {
            Ok(r) => break r,
            Err(e) if e.is_retryable() && start.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("schedule: {e:?}"),
        }
    };
    let mut ids = vec![first.execution_id];
    for i in 1..10 {
        let key = format!("o-{i}");
        let r = http
            .schedule_after("shop", "noop", &json!({"order": i}), after, options(&key))
            .await
            .unwrap();
        ids.push(r.execution_id);
    }
    // Directly (etcd and Redis), in one batch.
    let batch: Vec<ax_sdk::ScheduleRequest> = (10..20)
        .map(|i| ax_sdk::ScheduleRequest {
            namespace: "shop".into(),
            handler: "noop".into(),
            payload: json!({"order": i}),
            after: Some(after),
            idempotency_key: Some(format!("o-{i}")),
            ..ax_sdk::ScheduleRequest::default()
        })
        .collect();
    for r in c.client.schedule(batch).await.unwrap() {
        assert!(!r.duplicate);
        ids.push(r.execution_id);
    }
    // A retried request answers the first one's execution.
    let again = c
        .client
        .schedule_after("shop", "noop", &json!({"order": 0}), after, options("o-0"))
        .await
        .unwrap();
    assert!(again.duplicate && again.id == first.id, "{again:?}");
    // Paid: cancelled before it runs. Moved: runs later.
    let paid = http
        .schedule_after(
            "shop",
            "noop",
            &json!({"order": 99}),
            after,
            options("o-99"),
        )
        .await
        .unwrap();
    let cancelled = http.cancel_scheduled(&paid.id).await.unwrap();
    assert_eq!(cancelled.execution_id, paid.execution_id);
    let moved = c
        .client
        .schedule_after(
            "shop",
            "noop",
            &json!({"order": 98}),
            after,
            options("o-98"),
        )
        .await
        .unwrap();
    let view = http
        .reschedule_after(&moved.id, Duration::from_secs(3))
        .await
        .unwrap();
    assert!(view.due.0 > moved.due.0 + 1_000, "{view:?}");
    // Waiting, soonest first: the 20 and the moved one.
    let page = http.scheduled_page("default", None, 100).await.unwrap();
    assert_eq!(page.total, 21, "{page:?}");
    assert_eq!(
        page.items.last().map(|v| v.execution_id),
        Some(moved.execution_id)
    );
    assert_eq!(http.scheduled(&moved.id).await.unwrap().handler, "noop");

    for id in ids.iter().chain([&moved.execution_id]) {
        let story = story_with(&c, *id, "succeeded", Duration::from_secs(30)).await;
        let story = story.unwrap_or_else(|| panic!("{id} did not run"));
        let attempts = story["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "ran once: {story}");
        assert!(
            attempts[0]["lateness_ms"].as_u64().unwrap() < 5_000,
            "{story}"
        );
    }
    assert!(
        c.story(paid.execution_id).await.is_none(),
        "a cancelled execution never runs"
    );
    assert!(matches!(
        http.scheduled(&paid.id).await,
        Err(ax_sdk::Error::Api(ax_sdk::client::ApiError::NotFound(_)))
    ));
}
