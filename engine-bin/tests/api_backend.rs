//! `/api/v1` over the real backend (etcd and Redis): the routes' status codes and bodies
//! with what the registry and queues actually answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_harness;

use ax::config::Config;
use ax::http::ApiBackend;
use ax_control::api::{PutOptions, TaskQuery};
use ax_control::backend::Backend;
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use api_harness::{api_with, Api};

async fn api(label: &str) -> Api {
    api_with(label, |_| {}).await
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let resp = self.send(method, path, body).await;
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        (status, value)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_namespace_refuses_new_tasks_but_not_replacements() {
    let a = api_with("api-ns-limit", |c| c.limits.max_tasks_per_namespace = 2).await;
    let spec = |id: &str, version: u64| {
        json!({"id": id, "namespace": "small", "handler": "log",
               "schedule": {"every": "1m"}, "version": version})
    };
    for id in ["a", "b"] {
        let (status, body) = a
            .call(Method::POST, "/api/v1/tasks", Some(spec(id, 1)))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, body) = a
        .call(Method::POST, "/api/v1/tasks", Some(spec("c", 1)))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "limit_exceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("limits.max_tasks_per_namespace"),
        "{message}"
    );
    // Replacing a task, and a task in another namespace, still go through.
    let (status, body) = a
        .call(Method::POST, "/api/v1/tasks", Some(spec("a", 2)))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let mut other = spec("c", 1);
    other["namespace"] = json!("other");
    let (status, body) = a.call(Method::POST, "/api/v1/tasks", Some(other)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn task_args_a_command_does_not_allow_are_refused_with_400() {
    let a = api_with("api-task-args", |c| {
        c.worker.commands.insert(
            "sync".into(),
            ax_worker::CommandConfig::new("/usr/bin/rsync"),
        );
        c.worker.commands.insert(
            "report".into(),
            ax_worker::CommandConfig {
                task_args: ax_worker::command::TaskArgs::Patterns,
                arg_patterns: vec!["[a-z]+".into()],
                ..ax_worker::CommandConfig::new("/usr/local/bin/report")
            },
        );
    })
    .await;
    let spec = |id: &str, name: &str, args: Value| {
        json!({"id": id, "handler": "command", "schedule": {"every": "1m"},
               "command": {"name": name, "args": args}})
    };
    for dry_run in ["", "?dry_run=true"] {
        let path = format!("/api/v1/tasks{dry_run}");
        let (status, body) = a
            .call(
                Method::POST,
                &path,
                Some(spec("s", "sync", json!(["-e", "sh"]))),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let errors = body["error"]["errors"].to_string();
        assert!(
            errors.contains("command `sync` takes no arguments from a task")
                && errors.contains("worker.commands.sync.task_args"),
            "{body}"
        );
        let (status, body) = a
            .call(
                Method::POST,
                &path,
                Some(spec("r", "report", json!(["x;id"]))),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            body.to_string()
                .contains("does not match the pattern `[a-z]+`"),
            "{body}"
        );
    }
    let (status, body) = a
        .call(
            Method::POST,
            "/api/v1/tasks",
            Some(spec("r", "report", json!(["daily"]))),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A command this replica does not configure is left to the replicas that run it.
    let (status, body) = a
        .call(
            Method::POST,
            "/api/v1/tasks",
            Some(spec("o", "other", json!(["x"]))),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_are_registered_shown_triggered_and_refused_through_the_api() {
    let a = api("api-tasks").await;
    let spec = json!({"id": "beat", "namespace": "ops", "handler": "log",
                      "schedule": {"every": "1m"}, "version": 2});

    let (status, body) = a
        .call(
            Method::POST,
            "/api/v1/tasks?dry_run=true",
            Some(spec.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["written"], false);
    assert_eq!(body["next_fires"].as_array().unwrap().len(), 5);
    let (status, _) = a.call(Method::GET, "/api/v1/tasks/ops/beat", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a dry run writes nothing");

    let (status, body) = a
        .call(Method::POST, "/api/v1/tasks", Some(spec.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        (body["namespace"].clone(), body["id"].clone()),
        (json!("ops"), json!("beat"))
    );

    let (status, body) = a.call(Method::GET, "/api/v1/tasks/ops/beat", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "WAITING");
    assert_eq!(body["spec"]["version"], 2);

    let mut older = spec.clone();
    older["version"] = json!(1);
    let (status, body) = a.call(Method::POST, "/api/v1/tasks", Some(older)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "conflict");

    let (status, body) = a
        .call(
            Method::POST,
            "/api/v1/tasks",
            Some(json!({"id": "bad", "schedule": {"every": "soon"}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let errors = body["error"]["errors"].as_array().unwrap();
    assert!(errors.len() >= 2, "{body}");

    let (status, body) = a
        .call(Method::POST, "/api/v1/tasks/ops/beat/pause", None)
        .await;
    assert_eq!(
        (status, body["status"].clone()),
        (StatusCode::OK, json!("PAUSED"))
    );

    let (status, body) = a
        .call(Method::POST, "/api/v1/tasks/ops/beat/trigger", None)
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let execution_id = body["execution_id"].as_str().unwrap().to_owned();
    let client = etcd_client::Client::connect([ax_testkit::etcd_endpoint()], None)
        .await
        .unwrap();
    let resp = client
        .kv_client()
        .get(
            format!("{}/triggers/ops/beat/{execution_id}", a.config.etcd.prefix),
            None,
        )
        .await
        .unwrap();
    assert_eq!(resp.kvs().len(), 1);

    let (status, body) = a
        .call(Method::POST, "/api/v1/tasks/ops/nope/trigger", None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!("not_found"))
    );

    let (status, body) = a.call(Method::GET, "/api/v1/tasks", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body.as_array().unwrap().len(), 1);

    let (status, _) = a.call(Method::DELETE, "/api/v1/tasks/ops/beat", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = a.call(Method::DELETE, "/api/v1/tasks/ops/beat", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread")]
async fn status_and_dead_letters_through_the_api() {
    let a = api("api-status").await;
    let (status, body) = a.call(Method::GET, "/api/v1/status", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // etcd's database against its quota (etcd 3.4 does not report one: the configured
    // default, etcd's own 2 GiB).
    assert!(body["etcd_db"]["bytes"].as_u64().unwrap() > 0, "{body}");
    assert_eq!(
        body["etcd_db"]["quota_bytes"],
        json!(2_147_483_648_u64),
        "{body}"
    );
    assert_eq!(body["leader"], Value::Null);
    assert_eq!(body["queues"][0]["name"], "default");
    assert_eq!(body["dlq_size"], 0);

    let (status, body) = a.call(Method::GET, "/api/v1/dlq", None).await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
    let (status, body) = a
        .call(
            Method::POST,
            "/api/v1/dlq/requeue",
            Some(json!({"all": true})),
        )
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"count": 0, "requeued": []}))
    );
    let (status, _) = a
        .call(
            Method::POST,
            "/api/v1/dlq/requeue",
            Some(json!({"ids": ["0190f3c2-7d41-7a3e-9c1b-3f5e2a6d8b10"]})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tasks_are_listed_page_by_page_with_filters() {
    let mut config = Config::default();
    config.etcd.endpoints = vec![ax_testkit::etcd_endpoint()];
    config.etcd.prefix = format!("/{}", ax_testkit::unique_name("api-pages"));
    config.redis.url = ax_testkit::redis_url();
    config.redis.key_prefix = ax_testkit::unique_name("api-pages");
    let b = Backend::connect(&config.cluster()).await.unwrap();
    for i in 0..23 {
        let team = if i % 3 == 0 { "data" } else { "web" };
        let spec = json!({
            "id": format!("t{i:02}"),
            "namespace": if i < 20 { "a" } else { "b" },
            "handler": "log",
            "schedule": {"every": "1h"},
            "labels": {"team": team},
            "paused": i % 5 == 0,
        });
        b.put_task(spec, PutOptions::default()).await.unwrap();
    }
    // etcd orders keys by their bytes: `a-b/...` comes before `a/...` (`-` is below `/`),
    // which a page boundary must respect.
    for i in 0..3 {
        let spec = json!({
            "id": format!("u{i}"),
            "namespace": "a-b",
            "handler": "log",
            "schedule": {"every": "1h"},
            "labels": {"team": "web"},
        });
        b.put_task(spec, PutOptions::default()).await.unwrap();
    }
    let all = |query: TaskQuery| {
        let b = &b;
        async move {
            let mut query = query;
            let mut ids = Vec::new();
            let mut pages = 0;
            loop {
                let page = b.list_tasks(query.clone()).await.unwrap();
                pages += 1;
                assert!(page.items.len() <= query.limit.unwrap_or(500));
                ids.extend(
                    page.items
                        .iter()
                        .map(|t| format!("{}/{}", t.namespace, t.id)),
                );
                match page.continue_token {
                    Some(t) => query.continue_token = Some(t),
                    None => return (ids, pages),
                }
            }
        }
    };
    let (ids, pages) = all(TaskQuery {
        limit: Some(5),
        ..TaskQuery::default()
    })
    .await;
    assert_eq!(ids.len(), 26);
    assert_eq!(pages, 6);
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "key order");
    let (ids, _) = all(TaskQuery {
        namespace: Some("a".into()),
        status: Some("paused".into()),
        limit: Some(2),
        ..TaskQuery::default()
    })
    .await;
    assert_eq!(ids, ["a/t00", "a/t05", "a/t10", "a/t15"]);
    let (ids, _) = all(TaskQuery {
        label: Some("team=data".into()),
        limit: Some(3),
        ..TaskQuery::default()
    })
    .await;
    assert_eq!(
        ids,
        ["a/t00", "a/t03", "a/t06", "a/t09", "a/t12", "a/t15", "a/t18", "b/t21"]
    );
    let (ids, _) = all(TaskQuery {
        label: Some("owner".into()),
        ..TaskQuery::default()
    })
    .await;
    assert!(ids.is_empty());
    let bad = b
        .list_tasks(TaskQuery {
            continue_token: Some("garbage".into()),
            ..TaskQuery::default()
        })
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("continue"), "{bad}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_log_pages_newest_first_filters_and_keeps_to_its_retention_over_its_cap() {
    use ax_control::audit::{AuditQuery, AuditRecord};
    use ax_control::backend::Backend;
    use ax_scheduler_core::UtcMillis;

    let mut config = Config::default();
    config.etcd.endpoints = vec![ax_testkit::etcd_endpoint()];
    config.etcd.prefix = format!("/{}", ax_testkit::unique_name("audit"));
    config.redis.url = ax_testkit::redis_url();
    config.audit.retention = std::time::Duration::from_secs(24 * 3600);
    config.audit.max_records = 4;
    let over = prometheus::IntGauge::new("over", "over").unwrap();
    let b = Backend::connect_lazy(&config.cluster())
        .await
        .unwrap()
        .with_audit_capacity_watch(ax_control::backend::CapacityWatch::new({
            let over = over.clone();
            move |is_over| over.set(i64::from(is_over))
        }));
    let now = UtcMillis::now();
    let record = |at: UtcMillis, actor: &str, target: &str| AuditRecord {
        at,
        actor: actor.into(),
        via: "api".into(),
        action: "task.pause".into(),
        target: target.into(),
        detail: None,
        revision: None,
    };
    // Two days old: past the retention, gone with the next write.
    b.audit_record(record(
        now.sub(std::time::Duration::from_secs(2 * 86_400)),
        "old",
        "x/old",
    ))
    .await
    .unwrap();
    for i in 0..5 {
        let actor = if i % 2 == 0 { "ops" } else { "grafana" };
        b.audit_record(record(UtcMillis(now.0 + i), actor, &format!("x/t{i}")))
            .await
            .unwrap();
    }
    let mut targets = Vec::new();
    let mut query = AuditQuery {
        limit: Some(2),
        ..AuditQuery::default()
    };
    loop {
        let page = b.audit_list(query.clone()).await.unwrap();
        assert!(page.items.len() <= 2);
        targets.extend(page.items.into_iter().map(|r| r.target));
        match page.continue_token {
            Some(t) => query.continue_token = Some(t),
            None => break,
        }
    }
    assert_eq!(
        targets,
        ["x/t4", "x/t3", "x/t2", "x/t1", "x/t0"],
        "newest first; the old one past the retention gone, the young ones kept over the cap"
    );
    assert_eq!(over.get(), 1, "over its cap, said so");

    let ops = b
        .audit_list(AuditQuery {
            actor: Some("ops".into()),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    let ops: Vec<String> = ops.items.into_iter().map(|r| r.target).collect();
    assert_eq!(ops, ["x/t4", "x/t2", "x/t0"]);
    let recent = b
        .audit_list(AuditQuery {
            since: Some(UtcMillis(now.0 + 3)),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(recent.items.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backfills_of_one_range_at_the_same_instant_request_each_fire_once() {
    use ax_control::api::{BackfillParams, TaskKey};
    use ax_scheduler_core::UtcMillis;
    let mut config = Config::default();
    config.etcd.endpoints = vec![ax_testkit::etcd_endpoint()];
    config.etcd.prefix = format!("/{}", ax_testkit::unique_name("api-backfill-race"));
    config.redis.url = ax_testkit::redis_url();
    config.redis.key_prefix = ax_testkit::unique_name("api-backfill-race");
    let b = Backend::connect(&config.cluster()).await.unwrap();
    let spec = json!({"id": "m", "namespace": "ops", "handler": "log",
                      "schedule": {"every": "1m"}, "created_at": "2020-01-01T00:00:00Z"});
    b.put_task(spec, PutOptions::default()).await.unwrap();
    let key = TaskKey::new("ops", "m");
    let now = UtcMillis::now().0;
    // 300 fires: more than one transaction of 128, so the guard between them is exercised.
    let params = BackfillParams {
        from: UtcMillis(now - 300 * 60_000),
        to: UtcMillis(now - 1),
        max: Some(1000),
        force: false,
        dry_run: false,
        requested_by: None,
    };
    // No leader runs: what the first requested stays pending, as in the 50 ms after it.
    for round in 0..3 {
        let (x, y) = tokio::join!(
            b.backfill(key.clone(), params.clone()),
            b.backfill(key.clone(), params.clone())
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        assert_eq!(x.fires, y.fires);
        assert_eq!(x.fires.len(), 300);
        // Both name the same execution for every fire, and at most one of them requested it.
        assert_eq!(x.execution_ids, y.execution_ids, "round {round}");
        for i in 0..x.fires.len() {
            assert!(
                x.pending[i] || y.pending[i],
                "round {round}: fire {i} requested twice"
            );
        }
        if round > 0 {
            assert!(x.pending.iter().all(|p| *p) && y.pending.iter().all(|p| *p));
        }
    }
    let listed = ax_registry::Registry::new(
        ax_control::connect::connect_etcd(&config.cluster())
            .await
            .unwrap(),
        ax_registry::RegistryConfig {
            prefix: config.etcd.prefix.clone(),
            ..Default::default()
        },
    )
    .list_triggers()
    .await
    .unwrap()
    .1;
    assert_eq!(listed.len(), 300, "one request per fire");
}

/// A wall clock that stands still at one instant.
#[derive(Debug)]
struct Stopped(ax_scheduler_core::UtcMillis);

impl ax_scheduler_core::Clock for Stopped {
    fn now(&self) -> ax_scheduler_core::UtcMillis {
        self.0
    }
}

#[tokio::test]
async fn a_backend_on_its_own_clock_stamps_what_it_records_by_it() {
    let mut config = Config::default();
    config.etcd.endpoints = vec![ax_testkit::etcd_endpoint()];
    config.etcd.prefix = format!("/{}", ax_testkit::unique_name("api-clock"));
    config.redis.url = ax_testkit::redis_url();
    config.redis.key_prefix = ax_testkit::unique_name("api-clock");
    // An instant far from the host's clock, so that a stamp read from the host shows.
    let at = ax_scheduler_core::UtcMillis(1_700_000_000_000);
    let b = Backend::connect_lazy(&config.cluster())
        .await
        .unwrap()
        .with_clock(std::sync::Arc::new(Stopped(at)));
    let actor = ax_control::audit::Actor::api("clock-test");
    let ops = ax_control::operations::Operations::new(&b, &actor);
    let spec = json!({"id": "t", "namespace": "ns", "handler": "log",
                      "schedule": {"every": "1h"}});
    ops.put_task(spec, PutOptions::default()).await.unwrap();
    ops.pause(ax_control::api::TaskKey::new("ns", "t"))
        .await
        .unwrap();
    let page = b
        .audit_list(ax_control::audit::AuditQuery::default())
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2, "{page:?}");
    assert!(page.items.iter().all(|r| r.at == at), "{page:?}");
}
