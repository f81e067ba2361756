//! Bounds of `/api/v1` over the real backend (etcd and Redis): what a caller with a token
//! can reach and how much work one request can cause.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_harness;

use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use api_harness::{api_with, Api};

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
    text: String,
}

impl Reply {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    fn next(&self) -> Option<String> {
        self.headers
            .get("x-ax-continue")
            .map(|v| v.to_str().unwrap().to_owned())
    }
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let resp = self.send(method, path, body).await;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), 8 << 20)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None).await
    }

    async fn put_task(&self, namespace: &str, id: &str) {
        let spec = json!({"id": id, "namespace": namespace, "handler": "log",
                          "schedule": {"every": "1h"}});
        let r = self.call(Method::POST, "/api/v1/tasks", Some(spec)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }

    async fn etcd(&self) -> etcd_client::Client {
        etcd_client::Client::connect(&self.config.etcd.endpoints, None)
            .await
            .unwrap()
    }

    /// Every task id of the listing `query`, page by page, and the number of pages.
    async fn all(&self, query: &str) -> (Vec<String>, usize) {
        let mut ids = Vec::new();
        let mut pages = 0;
        let mut uri = format!("/api/v1/tasks?{query}");
        loop {
            let r = self.get(&uri).await;
            assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.text);
            pages += 1;
            ids.extend(r.body.as_array().unwrap().iter().map(|t| {
                format!(
                    "{}/{}",
                    t["namespace"].as_str().unwrap(),
                    t["id"].as_str().unwrap()
                )
            }));
            match r.next() {
                Some(token) => uri = format!("/api/v1/tasks?{query}&continue={token}"),
                None => return (ids, pages),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_continue_token_cannot_reach_keys_outside_the_task_prefix() {
    let a = api_with("cursor-escape", |_| {}).await;
    a.put_task("a", "t1").await;
    // Another application's key in the same etcd, sorting below the task prefix.
    let secret_key = format!("{}-other-app/secret", a.config.etcd.prefix);
    let mut etcd = a.etcd().await;
    let put = etcd.put(secret_key, "hunter2", None).await.unwrap();
    let revision = put.header().unwrap().revision();
    // The raw etcd range start a client could once pass: a revision and an empty key.
    for token in [format!("{revision}."), format!("{revision}.00")] {
        let r = a.get(&format!("/api/v1/tasks?continue={token}")).await;
        assert!(!r.text.contains("hunter2"), "leaked: {}", r.text);
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{token}: {}", r.text);
        assert_eq!(r.code(), "bad_cursor", "{}", r.text);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_or_foreign_continue_token_is_refused_and_paging_sees_each_task_once() {
    let a = api_with("cursor-filter", |_| {}).await;
    for i in 0..5 {
        a.put_task("a", &format!("t{i}")).await;
    }
    for i in 0..3 {
        a.put_task("b", &format!("u{i}")).await;
    }
    let (ids, pages) = a.all("limit=3").await;
    assert_eq!(pages, 3);
    let mut want: Vec<String> = (0..5).map(|i| format!("a/t{i}")).collect();
    want.extend((0..3).map(|i| format!("b/u{i}")));
    assert_eq!(ids, want, "every task once, in key order");
    let (ids, _) = a.all("namespace=a&limit=2").await;
    assert_eq!(ids, want[..5]);

    for garbled in ["garbage", "1.2.3.4", "1.99.zz.0000000000000000"] {
        let r = a.get(&format!("/api/v1/tasks?continue={garbled}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
        assert_eq!(r.code(), "bad_cursor", "{}", r.text);
        assert!(r.text.contains("continue"), "{}", r.text);
    }

    // A token of namespace a's listing, used to list namespace b (or with a status filter).
    let first = a.get("/api/v1/tasks?namespace=a&limit=1").await;
    let token = first.next().unwrap();
    for other in ["namespace=b", "namespace=a&status=paused", ""] {
        let r = a
            .get(&format!("/api/v1/tasks?{other}&limit=1&continue={token}"))
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{other}: {}", r.text);
        assert_eq!(r.code(), "bad_cursor", "{}", r.text);
        assert!(r.text.contains("another filter"), "{}", r.text);
    }
    let r = a
        .get(&format!(
            "/api/v1/tasks?namespace=a&limit=1&continue={token}"
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body[0]["id"], "t1");
}

/// The body of `POST .../backfill` over the `minutes` minutes before now.
fn backfill_body(minutes: i64, extra: Value) -> Value {
    let now = ax_scheduler_core::UtcMillis::now().0;
    let mut body = json!({"from": now - minutes * 60_000, "to": now});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

impl Api {
    async fn put_every_minute(&self, namespace: &str, id: &str) {
        let spec = json!({"id": id, "namespace": namespace, "handler": "log",
                          "schedule": {"cron": "* * * * *"}});
        let r = self.call(Method::POST, "/api/v1/tasks", Some(spec)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }

    async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(body)).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn operate_actions_are_rate_limited_with_retry_after() {
    let a = api_with("operate-rate", |c| c.limits.operate_actions_per_minute = 3).await;
    a.put_task("ops", "a").await;
    a.put_task("ops", "b").await;
    for action in ["pause", "resume", "pause"] {
        let r = a
            .post(&format!("/api/v1/tasks/ops/a/{action}"), json!({}))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{action}: {}", r.text);
    }
    // The task is at its rate; a dry-run backfill writes nothing and is not counted.
    let r = a
        .post(
            "/api/v1/tasks/ops/a/backfill",
            backfill_body(5, json!({"dry_run": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    for action in ["resume", "trigger", "backfill"] {
        let body = match action {
            "backfill" => backfill_body(5, json!({})),
            _ => json!({}),
        };
        let r = a.post(&format!("/api/v1/tasks/ops/a/{action}"), body).await;
        assert_eq!(
            r.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{action}: {}",
            r.text
        );
        assert_eq!(r.code(), "limit_exceeded");
        assert!(
            r.text.contains("limits.operate_actions_per_minute"),
            "{}",
            r.text
        );
        let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait), "{wait}");
    }
    // The caller used up its own rate too (3 a minute): another task is refused for it.
    let r = a.post("/api/v1/tasks/ops/b/pause", json!({})).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert!(r.text.contains("caller"), "{}", r.text);
    let r = a.post("/api/v1/namespaces/ops/pause", json!({})).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backfill_is_bounded_by_its_fire_cap_and_by_etcds_quota() {
    let a = api_with("backfill-cap", |_| {}).await;
    a.put_every_minute("ops", "m").await;
    // Two days of minutes: 2880 fires, above the default cap of 1000 even forced.
    let r = a
        .post(
            "/api/v1/tasks/ops/m/backfill",
            backfill_body(2 * 1440, json!({"force": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert!(r.text.contains("limits.max_backfill_fires"), "{}", r.text);
    let r = a
        .post(
            "/api/v1/tasks/ops/m/backfill",
            backfill_body(60, json!({"max": 5000})),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = a
        .post("/api/v1/tasks/ops/m/backfill", backfill_body(10, json!({})))
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);

    // A quota etcd's database is already past: every change is refused before any write
    // (503, the cluster's own writes come first), a dry run still answers, and a delete,
    // which makes room, passes.
    let tight = api_with("backfill-quota", |c| c.etcd.quota_backend_bytes = 4096).await;
    let spec = json!({"handler": "log", "schedule": {"cron": "* * * * *"}});
    let mut etcd = tight.etcd().await;
    let key = format!("{}/tasks/ops/m", tight.config.etcd.prefix);
    etcd.put(key, spec.to_string(), None).await.unwrap();
    let r = tight
        .post("/api/v1/tasks/ops/m/backfill", backfill_body(10, json!({})))
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    assert!(r.text.contains("etcd.quota_backend_bytes"), "{}", r.text);
    for (path, body) in [
        (
            "/api/v1/tasks",
            json!({"namespace": "ops", "id": "n", "handler": "log", "schedule": {"every": "1h"}}),
        ),
        ("/api/v1/tasks/ops/m/pause", json!({})),
        ("/api/v1/tasks/ops/m/trigger", json!({})),
        ("/api/v1/queues/default/pause", json!({})),
        ("/api/v1/namespaces/ops/pause", json!({})),
    ] {
        let r = tight.post(path, body).await;
        assert_eq!(
            r.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{path}: {}",
            r.text
        );
    }
    let r = tight
        .post(
            "/api/v1/tasks/ops/m/backfill",
            backfill_body(10, json!({"dry_run": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let mut etcd = tight.etcd().await;
    let written = etcd
        .get(
            format!("{}/triggers/", tight.config.etcd.prefix),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(written.count(), 0);
    let r = tight
        .call(Method::DELETE, "/api/v1/tasks/ops/m", None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_state_changing_route_of_an_operate_token_is_rate_limited() {
    let a = api_with("operate-every", |c| c.limits.operate_actions_per_minute = 2).await;
    a.put_task("ops", "a").await;
    let calls = [
        "/api/v1/queues/default/pause",
        "/api/v1/queues/default/resume",
        "/api/v1/tasks/ops/a/kill",
        "/api/v1/executions/0123456789abcdef0123456789abcdef/kill",
        "/api/v1/dlq/requeue",
    ];
    // The caller's two actions a minute go to the first route; each route after is refused
    // before it does anything (the requeue's body would be valid, the execution unknown).
    for (i, path) in calls.iter().enumerate() {
        let body = if path.ends_with("requeue") {
            json!({"all": true})
        } else {
            json!({})
        };
        let r = a.post(path, body).await;
        if i < 2 {
            assert!(r.status.is_success(), "{path}: {}", r.text);
        } else {
            assert_eq!(
                r.status,
                StatusCode::TOO_MANY_REQUESTS,
                "{path}: {}",
                r.text
            );
            assert!(
                r.text.contains("limits.operate_actions_per_minute"),
                "{}",
                r.text
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn past_its_record_count_the_audit_log_refuses_changes_and_lets_deletes_through() {
    let a = api_with("audit-full", |c| c.audit.max_records = 3).await;
    for id in ["a", "b", "c", "d"] {
        // The fourth is written: the count was 3, within the limit, when it was asked.
        a.put_task("ops", id).await;
    }
    let r = a.post("/api/v1/tasks/ops/a/pause", json!({})).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    assert!(r.text.contains("audit.max_records"), "{}", r.text);
    let spec =
        json!({"namespace": "ops", "id": "e", "handler": "log", "schedule": {"every": "1h"}});
    let r = a.post("/api/v1/tasks", spec).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    let r = a.call(Method::DELETE, "/api/v1/tasks/ops/d", None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let mut etcd = a.etcd().await;
    let records = etcd
        .get(
            format!("{}/audit/", a.config.etcd.prefix),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        records.count(),
        5,
        "four puts and the delete; nothing refused was written"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn past_its_byte_budget_the_audit_log_refuses_changes() {
    // Room for one record over 1 KiB (it counts 16 KiB) and two small ones (1 KiB each).
    let a = api_with("audit-bytes", |c| c.audit.max_bytes = 18 * 1024).await;
    let big = json!({"id": "big", "namespace": "ops", "handler": "log",
                     "schedule": {"every": "1h"}, "payload": {"pad": "x".repeat(3000)}});
    let r = a.call(Method::POST, "/api/v1/tasks", Some(big)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    for id in ["a", "b", "c"] {
        // The third is written: 18 KiB counted when it was asked, within the budget.
        a.put_task("ops", id).await;
    }
    let r = a.post("/api/v1/tasks/ops/a/pause", json!({})).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text);
    assert!(r.text.contains("audit.max_bytes"), "{}", r.text);
    // One marker beside the large record, none beside the small ones.
    let mut etcd = a.etcd().await;
    let markers = etcd
        .get(
            format!("{}/audit-large/", a.config.etcd.prefix),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(markers.count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_matching_little_reads_a_bounded_number_of_keys_per_request() {
    let a = api_with("list-scan", |c| c.limits.max_list_scan = 5).await;
    for i in 0..12 {
        let mut spec = json!({"id": format!("t{i:02}"), "namespace": "a", "handler": "log",
                              "schedule": {"every": "1h"}});
        if i == 11 {
            spec["labels"] = json!({"team": "x"});
        }
        let r = a.post("/api/v1/tasks", spec).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    // The first request reads 5 keys, finds nothing, and says where to go on.
    let first = a.get("/api/v1/tasks?label=team=x&limit=10").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.body, json!([]));
    assert!(first.next().is_some(), "a short page must carry a token");
    let (ids, pages) = a.all("label=team=x&limit=10").await;
    assert_eq!(ids, ["a/t11"]);
    assert_eq!(pages, 3, "12 keys, 5 a request");
    let (ids, _) = a.all("limit=10").await;
    let want: Vec<String> = (0..12).map(|i| format!("a/t{i:02}")).collect();
    assert_eq!(ids, want, "every task once");
}

/// Dead-letters one execution of the registered task `namespace/id` (as a worker does after
/// its last attempt failed) and returns its id.
async fn dead_letter_of(a: &Api, queue: &ax_queue::Queue, namespace: &str, id: &str) -> String {
    use ax_scheduler_core::{TaskSpec, UtcMillis};
    let r = a.get(&format!("/api/v1/tasks/{namespace}/{id}")).await;
    let spec = serde_json::to_vec(&r.body["spec"]).unwrap();
    let spec = TaskSpec::from_json(&spec, namespace, id).unwrap();
    let now = UtcMillis::now();
    let msg = ax_queue::ExecutionMessage::for_fire(&spec, UtcMillis(now.0 - 1000), now, 1);
    queue.enqueue(&msg).await.unwrap();
    let mut consumer = queue
        .consumer("default", "w1", std::time::Duration::from_millis(100), now)
        .await
        .unwrap();
    for _ in 0..20 {
        if let Some(d) = consumer.take(1).await.unwrap().into_iter().next() {
            assert!(queue.dead_letter(&d, "HTTP 500", now).await.unwrap());
            return d.message.execution_id.to_string();
        }
    }
    panic!("the execution was not taken");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dlq_requeue_runs_the_tasks_current_spec_and_takes_id_fragments() {
    let a = api_with("dlq-current", |_| {}).await;
    let queue = ax_control::connect::connect_queue(
        &a.config.cluster(),
        std::sync::Arc::new(ax_scheduler_core::SystemClock),
    )
    .await
    .unwrap();
    let spec = |id: &str, version: u64, extra: Value| {
        let mut s = json!({"id": id, "namespace": "ops", "handler": "log",
                           "schedule": {"every": "1h"}, "version": version});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    for id in ["same", "gone", "moved"] {
        let r = a.post("/api/v1/tasks", spec(id, 1, json!({}))).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
    let same = dead_letter_of(&a, &queue, "ops", "same").await;
    let gone = dead_letter_of(&a, &queue, "ops", "gone").await;
    let moved = dead_letter_of(&a, &queue, "ops", "moved").await;
    let r = a.call(Method::DELETE, "/api/v1/tasks/ops/gone", None).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text);
    let r = a
        .post(
            "/api/v1/tasks",
            spec(
                "moved",
                2,
                json!({"handler": "http", "http": {"url": "https://hooks.example.com/new"}}),
            ),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    // A task unchanged in its target (a new timeout only) requeues from its current spec.
    let r = a
        .post("/api/v1/tasks", spec("same", 2, json!({"timeout": "5m"})))
        .await;
    assert!(r.status.is_success(), "{}", r.text);

    // A task deleted since cannot be rebuilt: refused, nothing requeued.
    let r = a
        .post("/api/v1/dlq/requeue", json!({"ids": [&gone, &same]}))
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.text.contains("no longer registered"), "{}", r.text);
    assert!(r.text.contains("use_stored"), "{}", r.text);
    let r = a.post("/api/v1/dlq/requeue", json!({"all": true})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(queue.depth("default").await.unwrap(), 0, "nothing requeued");

    // A fixed (re-pointed) task is requeued onto its current spec, and the answer says so;
    // dead letters are named by the start or the end of their ids too.
    // (A UUIDv7 starts with its time: a prefix long enough to reach the random bits.)
    let (head, tail) = (&moved[..24], &same[same.len() - 12..]);
    let r = a
        .post("/api/v1/dlq/requeue", json!({"ids": [head, tail]}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["count"], 2);
    let listed = r.body["requeued"].as_array().unwrap();
    let of = |id: &str| {
        listed
            .iter()
            .find(|l| l["dead_letter"] == id)
            .unwrap()
            .clone()
    };
    let m = of(&moved);
    assert_eq!(m["onto"], "current_spec", "{m}");
    assert_eq!(
        m["changed"],
        json!(["handler log → http", "http.url"]),
        "{m}"
    );
    assert_ne!(m["execution_id"], m["dead_letter"], "a new execution");
    // The new execution says it is a requeue of the dead letter, and who asked.
    let new_id = m["execution_id"].as_str().unwrap().parse().unwrap();
    let found = queue
        .locate_execution("default", new_id)
        .await
        .unwrap()
        .expect("the requeued execution waits in its queue");
    let origin = found.message.origin();
    assert_eq!(origin.kind, ax_queue::OriginKind::Requeue);
    assert_eq!(
        origin.requeue_of.map(|i| i.to_string()),
        Some(moved.clone())
    );
    assert!(origin.actor.is_some(), "{origin:?}");
    let s = of(&same);
    assert_eq!(s["onto"], "current_spec", "{s}");
    assert!(s.get("changed").is_none(), "{s}");
    let r = a
        .post(
            "/api/v1/dlq/requeue",
            json!({"ids": [&gone], "use_stored": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["count"], 1);
    assert_eq!(r.body["requeued"][0]["onto"], "stored");
    assert_eq!(queue.depth("default").await.unwrap(), 3);
    // Ids given by a part are bounded: each is compared with every dead letter's id.
    let many: Vec<String> = (0..101).map(|i| format!("abcd{i:04x}")).collect();
    let r = a.post("/api/v1/dlq/requeue", json!({ "ids": many })).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("at most 100"), "{}", r.text);
    // A fragment that names nothing is refused with what it is.
    let r = a
        .post("/api/v1/dlq/requeue", json!({"ids": ["abcdef12"]}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("no dead letter"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_and_dry_runs_count_against_the_callers_read_rate() {
    let a = api_with("read-rate", |c| c.limits.reads_per_minute = 3).await;
    a.put_task("ops", "a").await;
    for path in ["/api/v1/tasks", "/api/v1/status"] {
        let r = a.get(path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text);
    }
    let r = a
        .post(
            "/api/v1/tasks/ops/a/backfill",
            backfill_body(5, json!({"dry_run": true})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    for path in ["/api/v1/tasks/ops/a", "/api/v1/dlq"] {
        let r = a.get(path).await;
        assert_eq!(
            r.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{path}: {}",
            r.text
        );
        assert!(r.text.contains("limits.reads_per_minute"), "{}", r.text);
    }
    // Changes are not reads: the operate rate still has room.
    let r = a.post("/api/v1/tasks/ops/a/pause", json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_execution_in_its_queue_is_told_queued_then_running_on_its_worker() {
    use ax_scheduler_core::{TaskSpec, UtcMillis};
    let a = api_with("story-pending", |_| {}).await;
    let queue = ax_control::connect::connect_queue(
        &a.config.cluster(),
        std::sync::Arc::new(ax_scheduler_core::SystemClock),
    )
    .await
    .unwrap();
    let spec = TaskSpec::from_json(
        br#"{"handler":"log","schedule":{"every":"1h"}}"#,
        "ops",
        "slow",
    )
    .unwrap();
    let now = UtcMillis::now();
    let msg = ax_queue::ExecutionMessage::for_fire(&spec, UtcMillis(now.0 - 1000), now, 1);
    queue.enqueue(&msg).await.unwrap();
    let id = msg.execution_id.to_string();
    // The id a trigger prints is found at once, not "not found" until its attempt ends.
    let r = a.get(&format!("/api/v1/executions/{id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["outcome"], "queued", "{}", r.text);
    assert_eq!(r.body["pending"]["attempt"], 1, "{}", r.text);
    assert_eq!(r.body["task_id"], "slow", "{}", r.text);
    let mut consumer = queue
        .consumer(
            "default",
            "w-story",
            std::time::Duration::from_millis(100),
            now,
        )
        .await
        .unwrap();
    let mut taken = Vec::new();
    for _ in 0..20 {
        taken = consumer.take(1).await.unwrap();
        if !taken.is_empty() {
            break;
        }
    }
    assert_eq!(taken.len(), 1, "the execution was not taken");
    let r = a.get(&format!("/api/v1/executions/{id}")).await;
    assert_eq!(r.body["outcome"], "running", "{}", r.text);
    assert_eq!(r.body["pending"]["worker"], "w-story", "{}", r.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_put_shows_the_fires_of_the_registered_spec() {
    let a = api_with("unchanged-fires", |_| {}).await;
    let spec = json!({"id": "d", "namespace": "ops", "handler": "log",
                      "schedule": {"delay": "1h"}});
    let first = a.post("/api/v1/tasks", spec.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = a.post("/api/v1/tasks", spec).await;
    assert_eq!(again.body["unchanged"], true, "{}", again.text);
    // The delay counts from the first registration: the fire does not move with the call.
    assert_eq!(
        again.body["next_fires"], first.body["next_fires"],
        "{} / {}",
        first.text, again.text
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduling_is_bounded_per_request_and_rate_limited_per_caller() {
    let a = api_with("schedule-rate", |c| c.limits.scheduled_per_minute = 1500).await;
    let one = |i: usize| {
        json!({"namespace": "shop", "handler": "log", "after": "1h",
                                "payload": {"order": i}})
    };
    let batch = |n: usize| json!({"executions": (0..n).map(one).collect::<Vec<_>>()});
    // Past 1000 a request is refused whole, and nothing is counted or written.
    let r = a.post("/api/v1/scheduled", batch(1001)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    let r = a.post("/api/v1/scheduled", batch(1000)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.body["scheduled"].as_array().unwrap().len(), 1000);
    // 1000 of the caller's 1500 a minute are used: 600 more are refused at once (none
    // written), 500 pass.
    let r = a.post("/api/v1/scheduled", batch(600)).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.text);
    assert!(r.text.contains("limits.scheduled_per_minute"), "{}", r.text);
    let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let r = a.post("/api/v1/scheduled", batch(500)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let page = a.get("/api/v1/queues/default/scheduled?limit=5").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    assert_eq!(page.body["total"], 1500, "{}", page.text);
    // A request with problems says each, and writes nothing.
    let r = a
        .post(
            "/api/v1/scheduled",
            json!({"executions": [{"namespace": "bad ns", "handler": "log"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(
        r.body["error"]["errors"].as_array().unwrap().len() >= 2,
        "{}",
        r.text
    );
}
