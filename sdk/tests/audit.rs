//! The same change through each front end (the SDK's client, the `ax` CLI, a replica's HTTP
//! API) leaves the same audit record: the operations write it, not the front ends. Each front
//! end works on a cluster corner of its own (its own etcd and Redis prefixes), with the same
//! task key, so the records can be compared whole but for who, when and the ids minted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ax::cli::edge::Edge;
use ax::cli::Cli;
use ax::http::{app, AppState};
use ax_control::api::ApiBackend;
use ax_control::audit::{AuditQuery, AuditRecord};
use ax_control::backend::Backend;
use ax_control::ClusterConfig;
use ax_sdk::{Client, Config};
use ax_testkit::{etcd_endpoint, redis_url, unique_name};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use clap::Parser;
use serde_json::{json, Value};
use tower::ServiceExt;

fn spec() -> Value {
    json!({
        "handler": "email.send",
        "schedule": {"every": "1h"},
        "queue": "mail",
        "payload": {"to": "a@example.com"},
    })
}

fn payload() -> Value {
    json!({"to": "b@example.com", "card": "4111 1111 1111 1111"})
}

/// One cluster corner: its prefixes, and the backend over it.
struct Corner {
    etcd_prefix: String,
    redis_prefix: String,
}

impl Corner {
    fn new(label: &str) -> Corner {
        Corner {
            etcd_prefix: format!("/{}", unique_name(label)),
            redis_prefix: unique_name(label),
        }
    }

    fn cluster(&self) -> ClusterConfig {
        let mut c = ClusterConfig::default();
        c.etcd.endpoints = vec![etcd_endpoint()];
        c.etcd.prefix = self.etcd_prefix.clone();
        c.redis.url = redis_url();
        c.redis.key_prefix = self.redis_prefix.clone();
        c
    }

    async fn backend(&self) -> Backend {
        Backend::connect(&self.cluster()).await.unwrap()
    }

    /// The records, oldest first, as comparable values: who, when and the minted ids left
    /// out.
    async fn records(&self) -> (Vec<Value>, Vec<AuditRecord>) {
        let mut page = self
            .backend()
            .await
            .audit_list(AuditQuery::default())
            .await
            .unwrap()
            .items;
        page.reverse();
        let shapes = page.iter().map(shape).collect();
        (shapes, page)
    }
}

fn shape(r: &AuditRecord) -> Value {
    let mut detail = r.detail.clone().unwrap_or(Value::Null);
    if let Some(d) = detail.as_object_mut() {
        d.remove("execution_id");
        if let Some(created) = d.get_mut("created").and_then(Value::as_object_mut) {
            created.remove("created_at");
        }
    }
    json!({
        "action": r.action,
        "target": r.target,
        "detail": detail,
        "has_revision": r.revision.is_some(),
    })
}

async fn through_sdk(corner: &Corner) {
    let config = Config::redis(redis_url())
        .key_prefix(corner.redis_prefix.clone())
        .etcd([etcd_endpoint()])
        .etcd_prefix(corner.etcd_prefix.clone());
    let c = Client::connect(&config)
        .await
        .unwrap()
        .actor("shop-service");
    c.put("shop", "t", &spec()).await.unwrap();
    c.pause("shop", "t").await.unwrap();
    c.trigger("shop", "t", Some(&payload()), Some("k1".into()))
        .await
        .unwrap();
    c.resume("shop", "t").await.unwrap();
}

/// Set, with the command line as JSON, in the CLI process this binary starts of itself.
const CLI_ENV: &str = "AX_AUDIT_TEST_CLI";

/// In the CLI process: `ax` with the command line in [`CLI_ENV`], as the binary's `main`
/// runs it (the CLI sets up the process's logging, so each run is a process of its own).
/// In the test run itself it does nothing.
#[test]
fn cli_process() {
    let Ok(args) = std::env::var(CLI_ENV) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).unwrap();
    let cli = Cli::parse_from(std::iter::once("ax".to_owned()).chain(args));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(ax::cli::commands::run(cli, &Edge::from_process()))
        .unwrap();
}

async fn cli(corner: &Corner, args: &[&str]) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cli_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env(CLI_ENV, serde_json::to_string(args).unwrap())
        .env("AX_ETCD_ENDPOINTS", etcd_endpoint())
        .env("AX_ETCD_PREFIX", &corner.etcd_prefix)
        .env("AX_REDIS_URL", redis_url())
        .env("AX_REDIS_KEY_PREFIX", &corner.redis_prefix)
        .env("USER", "alice")
        .env("HOSTNAME", "desk")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ax {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn through_cli(corner: &Corner, dir: &std::path::Path) {
    let spec_file = dir.join("t.json");
    std::fs::write(&spec_file, spec().to_string()).unwrap();
    let payload_file = dir.join("payload.json");
    std::fs::write(&payload_file, payload().to_string()).unwrap();
    let spec_file = spec_file.display().to_string();
    let payload_file = payload_file.display().to_string();
    cli(
        corner,
        &["task", "put", &spec_file, "-n", "shop", "--id", "t"],
    )
    .await;
    cli(corner, &["task", "pause", "shop/t"]).await;
    cli(
        corner,
        &[
            "task",
            "trigger",
            "shop/t",
            "--payload",
            &payload_file,
            "--idempotency-key",
            "k1",
        ],
    )
    .await;
    cli(corner, &["task", "resume", "shop/t"]).await;
    cli(corner, &["queue", "pause", "mail"]).await;
    cli(corner, &["queue", "resume", "mail"]).await;
    cli(corner, &["dlq", "purge", "--queue", "mail"]).await;
}

async fn through_http(corner: &Corner) {
    let backend: Arc<dyn ApiBackend> = Arc::new(corner.backend().await);
    let config = ax::config::Config::default();
    let router = app(AppState {
        metrics: Arc::new(ax::http::metrics::Metrics::new(&config.worker.queues, &[]).unwrap()),
        readiness: Arc::new(ax::http::readiness::Readiness::new(true)),
        api: Some(backend),
        access: Arc::new(ax::http::auth::Access::new(&[], "", true)),
        browser: Arc::default(),
        limits: (&config.limits).into(),
    });
    let mut put = spec();
    put["namespace"] = json!("shop");
    put["id"] = json!("t");
    let trigger = json!({"payload": payload(), "idempotency_key": "k1"});
    for (path, body) in [
        ("/api/v1/tasks", Some(put)),
        ("/api/v1/tasks/shop/t/pause", None),
        ("/api/v1/tasks/shop/t/trigger", Some(trigger)),
        ("/api/v1/tasks/shop/t/resume", None),
        ("/api/v1/queues/mail/pause", None),
        ("/api/v1/queues/mail/resume", None),
        ("/api/v1/dlq/purge?queue=mail", None),
    ] {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert!(
            matches!(
                response.status(),
                StatusCode::OK | StatusCode::CREATED | StatusCode::ACCEPTED
            ),
            "{path}: {}",
            response.status()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_change_leaves_one_record_whichever_front_end_made_it() {
    let dir = tempfile::tempdir().unwrap();
    let (sdk, cli, http) = (
        Corner::new("audit-sdk"),
        Corner::new("audit-cli"),
        Corner::new("audit-http"),
    );
    through_sdk(&sdk).await;
    through_cli(&cli, dir.path()).await;
    through_http(&http).await;

    let (sdk_shapes, sdk_records) = sdk.records().await;
    let (cli_shapes, cli_records) = cli.records().await;
    let (http_shapes, http_records) = http.records().await;
    let actions: Vec<&str> = cli_records.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "task.put",
            "task.pause",
            "task.trigger",
            "task.resume",
            "queue.pause",
            "queue.resume",
            "dlq.purge"
        ]
    );
    // The task's changes, the SDK's share, are recorded alike by all three; the queue and
    // dead-letter changes alike by the CLI and the API.
    assert_eq!(sdk_shapes, cli_shapes[..4]);
    assert_eq!(cli_shapes, http_shapes);

    let trigger = &cli_records[2];
    let detail = trigger.detail.as_ref().unwrap();
    assert!(detail["execution_id"].is_string(), "{detail}");
    assert_eq!(detail["idempotency_key"], "k1");
    assert!(detail["payload_bytes"].as_u64().unwrap() > 0);
    assert!(
        !detail.to_string().contains("4111"),
        "a payload is recorded by its hash only: {detail}"
    );
    assert_eq!(cli_records[6].target, "mail");

    for r in &sdk_records {
        assert_eq!((r.actor.as_str(), r.via.as_str()), ("shop-service", "api"));
    }
    for r in &cli_records {
        assert_eq!(
            (r.actor.as_str(), r.via.as_str()),
            ("cli:alice@desk", "cli")
        );
    }
    for r in &http_records {
        assert_eq!((r.actor.as_str(), r.via.as_str()), ("anonymous", "api"));
    }
}
