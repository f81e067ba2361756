//! The HTTP app through its `Router`: probes, metrics, auth and the API's status codes and
//! error bodies, over an in-memory `ApiBackend` written for this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use ax::config::TokenEntry;
use ax::http::auth::{self, Access, ROUTE_ROLES};
use ax::http::browser::BrowserGuard;
use ax::http::limits::ApiLimits;
use ax::http::metrics::{Metrics, ALL_NAMES};
use ax::http::readiness::Readiness;
use ax::http::routes::CONTINUE_HEADER;
use ax::http::{app, ApiBackend, ApiError, AppState};
use ax_control::api::{
    self, ApiFuture, BackfillParams, BackfillResult, CompletionReply, CompletionRequest,
    CompletionStatus, DeadLetter, DlqRequeue, ExecutionList, ExecutionMatch, ExecutionMatches,
    ExecutionQuery, ExecutionRecord, ExecutionStory, KillResult, KilledExecution, PutOptions,
    PutTaskResult, QueueContents, QueueState, StatusView, TaskKey, TaskList, TaskQuery, TaskView,
    TokenRole, TriggerParams, TriggerResult,
};
use ax_control::audit::{AuditDetail, AuditPage, AuditQuery, AuditRecord};
use ax_scheduler_core::{ExecutionId, UtcMillis};
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

/// Tasks in a map; a spec without `id` is invalid, an older `version` conflicts, and the
/// `unreachable` namespace behaves like a backend that is down.
#[derive(Default)]
struct MemoryBackend {
    tasks: Mutex<BTreeMap<(String, String), Value>>,
    audit: Arc<Mutex<Vec<AuditRecord>>>,
    /// The last query `executions` was given.
    execution_query: Arc<Mutex<Option<ExecutionQuery>>>,
    /// How the one async execution ([`ASYNC_EXECUTION`]) ended, once it did.
    completed: Mutex<Option<String>>,
}

/// The execution of an `http.async` task the memory backend knows, and its token.
const ASYNC_EXECUTION: &str = "0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c5b6a";
/// The execution id the in-memory backend's run-now answers with.
const RUN_NOW: &str = "0190f5a2-7b1c-7cc3-9a4e-00000000002a";

fn async_token() -> String {
    format!("axc.0.{}.default", "ab".repeat(32))
}

/// An execution record with only the given parts set.
fn record(id: u128, outcome: &str) -> ExecutionRecord {
    ExecutionRecord {
        execution_id: ExecutionId::from_u128(id),
        attempt: 1,
        due: UtcMillis(1_000),
        started: Some(UtcMillis(1_004)),
        lateness_ms: Some(4),
        duration_ms: Some(10),
        outcome: outcome.into(),
        error: None,
        worker: Some("ax-1".into()),
        namespace: None,
        task_id: None,
        queue: None,
        enqueued: None,
        finished: None,
        retry_at: None,
        output: None,
        lineage: Default::default(),
    }
}

fn view(namespace: &str, id: &str, spec: &Value) -> TaskView {
    TaskView {
        namespace: namespace.into(),
        id: id.into(),
        spec: spec.clone(),
        status: Some(
            if spec["paused"] == json!(true) {
                "PAUSED"
            } else {
                "SCHEDULED"
            }
            .into(),
        ),
        next_fire: None,
        last_fire: None,
        errors: vec![],
        namespace_paused: false,
        throttled: None,
        schedule_text: None,
        upcoming_fires: vec![],
        last_outcome: None,
        last_error: None,
    }
}

impl MemoryBackend {
    fn with_task(namespace: &str, id: &str) -> Self {
        let b = MemoryBackend::default();
        b.tasks.lock().unwrap().insert(
            (namespace.into(), id.into()),
            json!({"id": id, "namespace": namespace, "version": 1}),
        );
        b
    }

    fn lookup(&self, key: &TaskKey) -> Result<Value, ApiError> {
        if &*key.namespace == "unreachable" {
            return Err(ApiError::Unavailable("etcd: connection refused".into()));
        }
        self.tasks
            .lock()
            .unwrap()
            .get(&(key.namespace.to_string(), key.id.to_string()))
            .cloned()
            .ok_or_else(|| ApiError::NotFound(format!("task {key}")))
    }

    fn set_paused(&self, key: TaskKey, paused: bool) -> ApiFuture<'_, TaskView> {
        Box::pin(async move {
            let mut spec = self.lookup(&key)?;
            spec["paused"] = json!(paused);
            self.tasks.lock().unwrap().insert(
                (key.namespace.to_string(), key.id.to_string()),
                spec.clone(),
            );
            Ok(view(&key.namespace, &key.id, &spec))
        })
    }
}

/// Every scheduled id names one waiting execution here: the routes' access is what is tested.
fn scheduled_view(id: &str) -> Result<ax_control::api::ScheduledView, ApiError> {
    let r = ax_control::api::parse_scheduled_id(id)?;
    Ok(ax_control::api::ScheduledView {
        id: r.to_string(),
        execution_id: r.execution_id,
        due: UtcMillis(0),
        namespace: "default".into(),
        name: "log".into(),
        handler: "log".into(),
        queue: r.queue,
        priority: 5,
        payload: json!(null),
        requested_by: None,
    })
}

impl ApiBackend for MemoryBackend {
    fn list_tasks(&self, query: TaskQuery) -> ApiFuture<'_, TaskList> {
        Box::pin(async move {
            let limit = query.page_size()?;
            let from: usize = query
                .continue_token
                .as_deref()
                .map_or(0, |t| t.parse().unwrap());
            let mut all: Vec<TaskView> = self
                .tasks
                .lock()
                .unwrap()
                .iter()
                .filter(|((ns, _), _)| query.namespace.as_ref().is_none_or(|want| want == ns))
                .map(|((ns, id), spec)| view(ns, id, spec))
                .collect();
            all.sort_by(|a, b| (&a.namespace, &a.id).cmp(&(&b.namespace, &b.id)));
            let items: Vec<TaskView> = all.iter().skip(from).take(limit).cloned().collect();
            let next = from + items.len();
            Ok(TaskList {
                items,
                continue_token: (next < all.len()).then(|| next.to_string()),
            })
        })
    }

    fn get_task(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        Box::pin(async move {
            let spec = self.lookup(&key)?;
            Ok(view(&key.namespace, &key.id, &spec))
        })
    }

    fn put_task(&self, spec: Value, opts: PutOptions) -> ApiFuture<'_, PutTaskResult> {
        let dry_run = opts.dry_run;
        Box::pin(async move {
            let mut errors = Vec::new();
            let id = spec["id"].as_str().unwrap_or_default().to_owned();
            if id.is_empty() {
                errors.push("id: required".to_owned());
            }
            if !spec["schedule"].is_object() {
                errors.push("schedule: required".to_owned());
            }
            if !errors.is_empty() {
                return Err(ApiError::Invalid {
                    message: format!("the task spec has {} problem(s)", errors.len()),
                    errors,
                });
            }
            let namespace = spec["namespace"].as_str().unwrap_or("default").to_owned();
            let key = (namespace.clone(), id.clone());
            let mut tasks = self.tasks.lock().unwrap();
            if let Some(old) = tasks.get(&key) {
                if old["version"].as_u64() >= spec["version"].as_u64() {
                    return Err(ApiError::Conflict(format!(
                        "task {namespace}/{id} is registered with version {} already",
                        old["version"]
                    )));
                }
            }
            let audit = (!dry_run).then(|| AuditDetail {
                target: Some(format!("{namespace}/{id}")),
                detail: Some(ax_control::audit::spec_diff(tasks.get(&key), &spec)),
                revision: Some(7),
            });
            if !dry_run {
                tasks.insert(key, spec);
            }
            Ok(PutTaskResult {
                namespace,
                id,
                written: !dry_run,
                unchanged: false,
                next_fires: vec![UtcMillis(1_000)],
                audit,
            })
        })
    }

    fn delete_task(&self, key: TaskKey) -> ApiFuture<'_, ()> {
        Box::pin(async move {
            self.lookup(&key)?;
            self.tasks
                .lock()
                .unwrap()
                .remove(&(key.namespace.to_string(), key.id.to_string()));
            Ok(())
        })
    }

    fn pause(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        self.set_paused(key, true)
    }

    fn resume(&self, key: TaskKey) -> ApiFuture<'_, TaskView> {
        self.set_paused(key, false)
    }

    fn trigger(&self, key: TaskKey, _params: TriggerParams) -> ApiFuture<'_, TriggerResult> {
        Box::pin(async move {
            self.lookup(&key)?;
            Ok(TriggerResult {
                execution_id: RUN_NOW.parse().unwrap(),
            })
        })
    }

    fn pause_namespace(&self, _namespace: String, _by: String) -> ApiFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn resume_namespace(&self, _namespace: String) -> ApiFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn backfill(&self, key: TaskKey, params: BackfillParams) -> ApiFuture<'_, BackfillResult> {
        Box::pin(async move {
            self.lookup(&key)?;
            Ok(BackfillResult {
                fires: vec![params.from],
                execution_ids: vec![],
                already_run: vec![],
                pending: vec![],
                written: !params.dry_run,
            })
        })
    }

    fn history(&self, key: TaskKey, limit: usize) -> ApiFuture<'_, Vec<ExecutionRecord>> {
        Box::pin(async move {
            self.lookup(&key)?;
            Ok((0..limit.min(2))
                .map(|i| record(i as u128, "success"))
                .collect())
        })
    }

    fn executions(&self, query: ExecutionQuery) -> ApiFuture<'_, ExecutionList> {
        Box::pin(async move {
            *self.execution_query.lock().unwrap() = Some(query);
            Ok(ExecutionList {
                items: vec![record(1, "failed")],
                continue_token: Some("1700000000000-3".into()),
            })
        })
    }

    fn execution(&self, id: ExecutionId) -> ApiFuture<'_, ExecutionStory> {
        Box::pin(async move {
            Ok(ExecutionStory {
                execution_id: id,
                attempts: vec![record(1, "failed")],
                outcome: "failed".into(),
                complete: true,
                ..ExecutionStory::default()
            })
        })
    }

    /// Knows the one dead-lettered execution of `dlq_list`.
    fn find_executions(&self, fragment: String) -> ApiFuture<'_, ExecutionMatches> {
        Box::pin(async move {
            let fragment = api::id_fragment(&fragment)?;
            let known = ExecutionId::from_u128(9);
            Ok(ExecutionMatches {
                matches: api::id_matches(known, &fragment)
                    .then(|| ExecutionMatch {
                        execution_id: known,
                        namespace: "default".into(),
                        task_id: "t".into(),
                        due: UtcMillis(4_000),
                    })
                    .into_iter()
                    .collect(),
                fragment,
                more: false,
                complete: true,
            })
        })
    }

    fn dlq_list(&self, queue: Option<String>, _limit: usize) -> ApiFuture<'_, Vec<DeadLetter>> {
        Box::pin(async move {
            Ok(vec![DeadLetter {
                execution_id: ExecutionId::from_u128(9),
                namespace: "default".into(),
                task_id: "t".into(),
                queue: queue.unwrap_or_else(|| "default".into()),
                attempts: 4,
                last_error: "HTTP 500".into(),
                dead_at: UtcMillis(5_000),
                errors: Vec::new(),
                payload: Value::Null,
                raw: None,
            }])
        })
    }

    fn dlq_requeue(&self, request: DlqRequeue) -> ApiFuture<'_, api::DlqRequeued> {
        Box::pin(async move {
            Ok(api::DlqRequeued {
                count: match request {
                    DlqRequeue::Ids { ids, .. } => ids.len() as u64,
                    DlqRequeue::All { .. } => 7,
                },
                requeued: Vec::new(),
            })
        })
    }

    fn dlq_purge(&self, _queue: Option<String>) -> ApiFuture<'_, u64> {
        Box::pin(async { Ok(3) })
    }

    fn status(&self) -> ApiFuture<'_, StatusView> {
        Box::pin(async {
            Ok(StatusView {
                leader_since: None,
                clock: None,
                leader: Some("ax-0".into()),
                replicas: vec![],
                queues: vec![],
                dlq_size: 1,
                redis_warnings: vec![],
                etcd_db: None,
                paused_namespaces: vec![],
                shards: None,
            })
        })
    }

    fn audit_record(&self, record: AuditRecord) -> ApiFuture<'_, ()> {
        self.audit.lock().unwrap().push(record);
        Box::pin(async { Ok(()) })
    }

    fn write_room(&self) -> ApiFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn audit_list(&self, _query: AuditQuery) -> ApiFuture<'_, AuditPage> {
        let mut items = self.audit.lock().unwrap().clone();
        items.reverse();
        Box::pin(async move {
            Ok(AuditPage {
                items,
                continue_token: None,
            })
        })
    }

    fn kill_task(&self, key: TaskKey, execution: Option<ExecutionId>) -> ApiFuture<'_, KillResult> {
        Box::pin(async move {
            self.lookup(&key)?;
            Ok(KillResult {
                killed: vec![KilledExecution {
                    execution_id: execution.unwrap_or(ExecutionId::from_u128(1)),
                    namespace: Some(key.namespace.to_string()),
                    task_id: Some(key.id.to_string()),
                    queue: "default".into(),
                    state: "running".into(),
                }],
            })
        })
    }

    fn schedule(
        &self,
        batch: ax_control::api::ScheduleBatch,
        actor: Option<String>,
    ) -> ApiFuture<'_, ax_control::api::ScheduleReply> {
        Box::pin(async move {
            let subs = batch.submissions(UtcMillis::now(), actor.as_deref())?;
            Ok(ax_control::api::ScheduleReply {
                scheduled: subs
                    .iter()
                    .map(|s| ax_control::api::ScheduleResult {
                        id: format!("{}/{}", s.queue, ExecutionId::from_u128(7)),
                        execution_id: ExecutionId::from_u128(7),
                        due: s.due,
                        duplicate: false,
                    })
                    .collect(),
            })
        })
    }

    fn scheduled(&self, id: String) -> ApiFuture<'_, ax_control::api::ScheduledView> {
        Box::pin(async move { scheduled_view(&id) })
    }

    fn cancel_scheduled(&self, id: String) -> ApiFuture<'_, ax_control::api::ScheduledView> {
        Box::pin(async move { scheduled_view(&id) })
    }

    fn reschedule(
        &self,
        id: String,
        due: UtcMillis,
    ) -> ApiFuture<'_, ax_control::api::ScheduledView> {
        Box::pin(async move {
            let mut view = scheduled_view(&id)?;
            view.due = due;
            Ok(view)
        })
    }

    fn scheduled_page(
        &self,
        _queue: String,
        _after: Option<String>,
        _limit: usize,
    ) -> ApiFuture<'_, ax_control::api::ScheduledPage> {
        Box::pin(async move { Ok(ax_control::api::ScheduledPage::default()) })
    }

    fn kill_execution(&self, id: ExecutionId) -> ApiFuture<'_, KillResult> {
        Box::pin(async move {
            Ok(KillResult {
                killed: vec![KilledExecution {
                    execution_id: id,
                    namespace: None,
                    task_id: None,
                    queue: "default".into(),
                    state: "running".into(),
                }],
            })
        })
    }

    fn pause_queue(&self, name: String) -> ApiFuture<'_, QueueState> {
        Box::pin(async move { Ok(QueueState { name, paused: true }) })
    }

    fn queue_contents(&self, name: String, _limit: usize) -> ApiFuture<'_, QueueContents> {
        Box::pin(async move {
            Ok(QueueContents {
                name,
                paused: false,
                waiting_total: 0,
                waiting: Vec::new(),
                retrying_total: 0,
                retrying: Vec::new(),
                running: Vec::new(),
            })
        })
    }

    fn resume_queue(&self, name: String) -> ApiFuture<'_, QueueState> {
        Box::pin(async move {
            Ok(QueueState {
                name,
                paused: false,
            })
        })
    }
    fn complete_execution(
        &self,
        id: ExecutionId,
        request: CompletionRequest,
    ) -> ApiFuture<'_, CompletionReply> {
        Box::pin(async move {
            if ax_queue::TokenClaim::parse(&request.token).is_none() {
                return Err(ApiError::Unauthorized("a report needs `token`".into()));
            }
            if id.to_string() != ASYNC_EXECUTION || request.token != async_token() {
                return Err(ApiError::Forbidden(format!(
                    "the token is not the one issued for execution {id}"
                )));
            }
            let mut ended = self.completed.lock().unwrap();
            let state = match request.status {
                CompletionStatus::Progress => "waiting",
                CompletionStatus::Succeeded => "succeeded",
                CompletionStatus::Failed => "failed",
            };
            let repeated = match (ended.as_deref(), state) {
                (Some(end), "waiting") => {
                    return Err(ApiError::Conflict(format!("the attempt ended `{end}`")))
                }
                (Some(end), _) if end == state => true,
                (Some(end), _) => {
                    return Err(ApiError::Conflict(format!("the attempt ended `{end}`")))
                }
                (None, "waiting") => false,
                (None, _) => {
                    *ended = Some(state.to_owned());
                    false
                }
            };
            Ok(CompletionReply {
                execution_id: id,
                attempt: 0,
                state: state.to_owned(),
                repeated,
                deadline: None,
            })
        })
    }
}

struct Fixture {
    router: Router,
    readiness: Arc<Readiness>,
}

/// A replica listening on loopback with `token` as its plain admin token, or without one
/// opened on purpose (`http.insecure_open_api`).
fn fixture(backend: Option<MemoryBackend>, token: Option<&str>) -> Fixture {
    let token = token.unwrap_or("");
    fixture_with(
        backend,
        Access::new(&[], token, token.is_empty()),
        ApiLimits::default(),
    )
}

fn fixture_with(backend: Option<MemoryBackend>, access: Access, limits: ApiLimits) -> Fixture {
    let browser = BrowserGuard::new(&[], "", &[], "127.0.0.1:8080");
    fixture_guarded(backend, access, limits, browser)
}

fn fixture_guarded(
    backend: Option<MemoryBackend>,
    access: Access,
    limits: ApiLimits,
    browser: BrowserGuard,
) -> Fixture {
    let readiness = Arc::new(Readiness::new(true));
    let state = AppState {
        metrics: Arc::new(Metrics::new(&["default".to_owned()], &["webhook"]).unwrap()),
        readiness: Arc::clone(&readiness),
        api: backend.map(|b| Arc::new(b) as Arc<dyn ApiBackend>),
        access: Arc::new(access),
        browser: Arc::new(browser),
        limits,
    };
    Fixture {
        router: app(state),
        readiness,
    }
}

async fn call(
    router: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

async fn get(router: &Router, uri: &str) -> (StatusCode, String) {
    call(router, Method::GET, uri, None, None).await
}

fn error_code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["error"]["code"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn healthz_answers_ok() {
    let f = fixture(None, None);
    assert_eq!(
        get(&f.router, "/healthz").await,
        (StatusCode::OK, "ok".into())
    );
}

#[tokio::test]
async fn readyz_names_what_is_not_ready_until_everything_is() {
    let f = fixture(None, None);
    let (status, body) = get(&f.router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["not_ready"], json!(["etcd", "redis", "worker_pool"]));

    f.readiness.set_etcd(true);
    f.readiness.set_redis(true);
    let (status, body) = get(&f.router, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body.contains("worker_pool") && !body.contains("etcd"),
        "{body}"
    );

    f.readiness.set_worker_pool(true);
    let (status, body) = get(&f.router, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["ready"],
        json!(true)
    );
}

#[tokio::test]
async fn metrics_expose_every_fixed_name_without_a_token() {
    let f = fixture(None, Some("secret"));
    let resp = f
        .router
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = String::from_utf8(
        axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    for name in ALL_NAMES {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
    }
    assert!(!text.contains("task_id"), "no task ids as labels");
    // Metrics are served without a token, so no label may carry a task's data: only these
    // bounded names, none of them a URL, header or payload.
    let allowed = [
        "queue", "handler", "outcome", "backend", "channel", "reason", "how", "version", "le",
        "loop",
    ];
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, labels)) = line.split_once('{') else {
            continue;
        };
        let labels = labels.split_once('}').unwrap().0;
        for pair in labels.split(',') {
            let name = pair.split_once('=').unwrap().0;
            assert!(allowed.contains(&name), "label {name} in {line}");
        }
    }
}

#[tokio::test]
async fn api_requires_the_token_when_one_is_set() {
    let f = fixture(
        Some(MemoryBackend::with_task("default", "t1")),
        Some("s3cret"),
    );
    let uri = "/api/v1/tasks/default/t1";

    let (status, body) = call(&f.router, Method::GET, uri, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(&body), "unauthorized");

    let (status, body) = call(&f.router, Method::GET, uri, Some("wrong"), None).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );

    // Unknown routes do not reveal themselves to callers without the token either.
    let (status, _) = call(&f.router, Method::GET, "/api/v1/nope", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, body) = call(&f.router, Method::GET, uri, Some("s3cret"), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["id"],
        json!("t1")
    );

    // Probes stay open.
    assert_eq!(get(&f.router, "/healthz").await.0, StatusCode::OK);
}

#[tokio::test]
async fn the_task_list_is_paged_with_a_continue_header_and_checks_its_query() {
    let backend = MemoryBackend::default();
    for i in 0..5 {
        backend.tasks.lock().unwrap().insert(
            ("default".into(), format!("t{i}")),
            json!({"id": format!("t{i}"), "namespace": "default", "version": 1}),
        );
    }
    let f = fixture(Some(backend), None);
    let page = |uri: String| {
        let router = f.router.clone();
        async move {
            let req = Request::builder().uri(uri).body(Body::empty()).unwrap();
            let resp = router.oneshot(req).await.unwrap();
            let status = resp.status();
            let next = resp
                .headers()
                .get(CONTINUE_HEADER)
                .map(|v| v.to_str().unwrap().to_owned());
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            (status, body, next)
        }
    };
    let mut ids = Vec::new();
    let mut uri = "/api/v1/tasks?limit=2".to_owned();
    loop {
        let (status, body, next) = page(uri.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let items = body.as_array().unwrap();
        assert!(items.len() <= 2);
        ids.extend(items.iter().map(|t| t["id"].as_str().unwrap().to_owned()));
        match next {
            Some(token) => uri = format!("/api/v1/tasks?limit=2&continue={token}"),
            None => break,
        }
    }
    assert_eq!(ids, ["t0", "t1", "t2", "t3", "t4"]);
    for bad in ["limit=0", "limit=1001", "status=SLEEPING", "limit=x"] {
        let (status, body) = get(&f.router, &format!("/api/v1/tasks?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, _) = get(&f.router, "/api/v1/tasks?status=failed&label=team=data").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_execution_query_is_checked_and_resolved_before_the_backend() {
    let backend = MemoryBackend::default();
    let seen = Arc::clone(&backend.execution_query);
    let f = fixture(Some(backend), None);
    let before = UtcMillis::now();
    let (status, body) = get(
        &f.router,
        "/api/v1/executions?task=ops/nightly&failed=true&since=1h&limit=5",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["continue"], "1700000000000-3");
    assert_eq!(page["items"][0]["outcome"], "failed");
    let q = seen.lock().unwrap().clone().unwrap();
    assert_eq!(q.namespace.as_deref(), Some("ops"));
    assert_eq!(q.task_id.as_deref(), Some("nightly"));
    assert_eq!(
        q.outcomes,
        [
            "retrying",
            "failed",
            "timed_out",
            "panicked",
            "dead_lettered"
        ]
    );
    let since = q.since.unwrap().0;
    assert!((before.0 - 3_600_000 - since).abs() < 5_000, "{since}");
    assert_eq!((q.until, q.limit), (None, 5));

    for bad in [
        "outcome=exploded",
        "since=yesterday",
        "limit=0",
        "continue=abc",
        "outcome=succeeded&failed=true",
    ] {
        let (status, body) = get(&f.router, &format!("/api/v1/executions?{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(error_code(&body), "invalid_input");
    }
    let (status, _) = get(&f.router, "/api/v1/executions/not-an-id").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // `find` is a route of its own, not an execution id.
    let (status, body) = get(&f.router, "/api/v1/executions/find?id=000000000009").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let found: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        found["matches"][0]["execution_id"], "00000000-0000-0000-0000-000000000009",
        "{body}"
    );
    assert_eq!(found["complete"], true, "{body}");
    let (status, body) = get(&f.router, "/api/v1/executions/find?id=09").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("at least 6 characters"), "{body}");
    let (status, body) = get(
        &f.router,
        "/api/v1/executions/0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c5b6a",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn api_is_open_without_a_token_only_when_opened_on_purpose() {
    for token in [None, Some("")] {
        let f = fixture(Some(MemoryBackend::with_task("default", "t1")), token);
        let (status, body) = get(&f.router, "/api/v1/tasks").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body)
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}

/// A request as a browser sends it: `headers`, and `body` if any.
async fn send(
    router: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(b) = body {
        req = req.header(header::CONTENT_LENGTH, b.len());
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
        .unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The developer's replica: loopback, opened on purpose, the attacker's chance.
fn open_loopback() -> Fixture {
    fixture_guarded(
        Some(MemoryBackend::with_task("default", "t1")),
        Access::new(&[], "", true),
        ApiLimits::default(),
        BrowserGuard::new(&[], "", &["ax.tunnel.example".into()], "127.0.0.1:18080"),
    )
}

const LOCAL: (&str, &str) = ("host", "127.0.0.1:18080");

#[tokio::test]
async fn a_loopback_replica_without_a_token_is_closed() {
    let f = fixture_guarded(
        Some(MemoryBackend::with_task("default", "t1")),
        Access::new(&[], "", false),
        ApiLimits::default(),
        BrowserGuard::new(&[], "", &[], "127.0.0.1:18080"),
    );
    for (method, uri) in [
        (Method::GET, "/api/v1/tasks"),
        (Method::POST, "/api/v1/tasks/default/t1/trigger"),
    ] {
        let (status, body) = send(&f.router, method, uri, &[LOCAL], None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}: {body}");
        assert_eq!(error_code(&body), "api_closed");
    }
}

#[tokio::test]
async fn a_body_that_is_not_declared_json_is_refused_415() {
    let f = open_loopback();
    let spec = r#"{"id": "evil", "schedule": {"every": "1m"}, "handler": {"http": {"url": "https://x.example"}}}"#;
    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=b",
    ] {
        assert_refused(
            &f.router,
            (Method::POST, "/api/v1/tasks"),
            &[LOCAL, ("content-type", content_type)],
            Some(spec),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "application/json",
            ),
        )
        .await;
    }
    // A form with no fields, to a route that takes an empty body.
    let (status, _) = send(
        &f.router,
        Method::POST,
        "/api/v1/tasks/default/t1/pause",
        &[LOCAL, ("content-type", "application/x-www-form-urlencoded")],
        Some(""),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A body without a type, and the completion route jobs call.
    let (status, _) = send(
        &f.router,
        Method::POST,
        "/api/v1/tasks",
        &[LOCAL],
        Some(spec),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let complete = format!("/api/v1/executions/{ASYNC_EXECUTION}/complete");
    let report = format!(r#"{{"token": "{}", "status": "succeeded"}}"#, async_token());
    let (status, _) = send(
        &f.router,
        Method::POST,
        &complete,
        &[LOCAL, ("content-type", "text/plain")],
        Some(&report),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Nothing was written; the same as JSON goes through.
    assert_eq!(
        get(&f.router, "/api/v1/tasks/default/evil").await.0,
        StatusCode::NOT_FOUND
    );
    let (status, body) = send(
        &f.router,
        Method::POST,
        "/api/v1/tasks?dry_run=true",
        &[LOCAL, ("content-type", "application/json; charset=utf-8")],
        Some(spec),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(refusals(&f.router, "media_type").await, 7.0);
}

#[tokio::test]
async fn a_request_from_a_foreign_origin_is_refused_403() {
    let f = open_loopback();
    for (method, uri) in [
        (Method::GET, "/api/v1/tasks?show_secrets=true"),
        (Method::OPTIONS, "/api/v1/tasks"),
        (Method::POST, "/api/v1/tasks/default/t1/trigger"),
        (Method::POST, "/api/v1/dlq/purge"),
    ] {
        assert_refused(
            &f.router,
            (method, uri),
            &[LOCAL, ("origin", "http://127.0.0.2:8000")],
            None,
            (
                StatusCode::FORBIDDEN,
                "cross_origin",
                "http.allowed_origins",
            ),
        )
        .await;
    }
    // The API's own page (the console) may.
    let (status, body) = send(
        &f.router,
        Method::POST,
        "/api/v1/tasks/default/t1/pause",
        &[LOCAL, ("origin", "http://127.0.0.1:18080")],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(refusals(&f.router, "cross_origin").await, 4.0);
}

#[tokio::test]
async fn a_loopback_replica_reached_under_a_foreign_host_name_is_refused() {
    let f = open_loopback();
    // DNS rebinding: the attacker's name, now pointing at 127.0.0.1; the page's origin is
    // that name too, so the Origin check alone would let it by.
    let rebound = [
        ("host", "attacker.example:18080"),
        ("origin", "http://attacker.example:18080"),
    ];
    for headers in [&rebound[..], &rebound[..1]] {
        assert_refused(
            &f.router,
            (Method::GET, "/api/v1/tasks?show_secrets=true"),
            headers,
            None,
            (
                StatusCode::MISDIRECTED_REQUEST,
                "unknown_host",
                "http.allowed_hosts",
            ),
        )
        .await;
    }
    for host in ["localhost:18080", "[::1]:18080", "ax.tunnel.example:443"] {
        let (status, body) = send(
            &f.router,
            Method::GET,
            "/api/v1/tasks",
            &[("host", host)],
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
    }
    // Probes answer under any name (the kubelet's).
    let (status, _) = send(
        &f.router,
        Method::GET,
        "/healthz",
        &[("host", "attacker.example")],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn api_errors_map_to_status_codes_and_json_bodies() {
    let f = fixture(Some(MemoryBackend::with_task("default", "t1")), None);
    let r = &f.router;

    let (status, body) = get(r, "/api/v1/tasks/default/missing").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    assert!(body.contains("default/missing"), "{body}");

    let (status, body) = call(
        r,
        Method::POST,
        "/api/v1/tasks",
        None,
        Some(r#"{"version": 1}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], json!("invalid_input"));
    assert_eq!(
        v["error"]["errors"],
        json!(["id: required", "schedule: required"])
    );

    let (status, body) = call(r, Method::POST, "/api/v1/tasks", None, Some("{not json")).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid_input")
    );

    let old = r#"{"id": "t1", "schedule": {"every": "1m"}, "version": 1}"#;
    let (status, body) = call(r, Method::POST, "/api/v1/tasks", None, Some(old)).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::CONFLICT, "conflict")
    );

    let (status, body) = get(r, "/api/v1/tasks/unreachable/t1").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable")
    );

    let (status, body) = get(r, "/api/v1/tasks/default/t1/history?limit=0").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid_input")
    );
    let (status, body) = get(r, "/api/v1/dlq?limit=lots").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid_input")
    );

    let (status, body) = call(
        r,
        Method::POST,
        "/api/v1/dlq/requeue",
        None,
        Some(r#"{"ids": []}"#),
    )
    .await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid_input")
    );

    let (status, body) = get(r, "/api/v1/no/such/route").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::NOT_FOUND, "not_found")
    );
}

#[tokio::test]
async fn api_operations_reach_the_backend() {
    let f = fixture(Some(MemoryBackend::with_task("default", "t1")), None);
    let r = &f.router;

    let spec = r#"{"id": "t2", "namespace": "ops", "schedule": {"every": "1m"}, "version": 1}"#;
    let (status, body) = call(
        r,
        Method::POST,
        "/api/v1/tasks?dry_run=true",
        None,
        Some(spec),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["written"],
        json!(false)
    );
    assert_eq!(
        get(r, "/api/v1/tasks/ops/t2").await.0,
        StatusCode::NOT_FOUND
    );

    let (status, body) = call(r, Method::POST, "/api/v1/tasks", None, Some(spec)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, body) = get(r, "/api/v1/tasks?namespace=ops").await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()[0]["id"],
        json!("t2")
    );

    let (status, body) = call(r, Method::POST, "/api/v1/tasks/ops/t2/pause", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["status"],
        json!("PAUSED")
    );
    let (_, body) = call(r, Method::POST, "/api/v1/tasks/ops/t2/resume", None, None).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["status"],
        json!("SCHEDULED")
    );

    let (status, body) = call(r, Method::POST, "/api/v1/tasks/ops/t2/trigger", None, None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["execution_id"],
        json!(RUN_NOW)
    );

    let (status, body) = get(r, "/api/v1/tasks/ops/t2/history?limit=5").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()[0]["lateness_ms"],
        json!(4)
    );

    let (status, _) = call(r, Method::DELETE, "/api/v1/tasks/ops/t2", None, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        get(r, "/api/v1/tasks/ops/t2").await.0,
        StatusCode::NOT_FOUND
    );

    let (_, body) = get(r, "/api/v1/dlq?queue=slow").await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()[0]["queue"],
        json!("slow")
    );
    let (_, body) = call(
        r,
        Method::POST,
        "/api/v1/dlq/requeue",
        None,
        Some(r#"{"ids": ["a", "b"]}"#),
    )
    .await;
    assert_eq!(body, r#"{"count":2,"requeued":[]}"#);
    let (_, body) = call(
        r,
        Method::POST,
        "/api/v1/dlq/requeue",
        None,
        Some(r#"{"all": true}"#),
    )
    .await;
    assert_eq!(body, r#"{"count":7,"requeued":[]}"#);
    let (_, body) = call(r, Method::POST, "/api/v1/dlq/purge", None, None).await;
    assert_eq!(body, r#"{"count":3}"#);
    let (_, body) = get(r, "/api/v1/status").await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["leader"],
        json!("ax-0")
    );
}

#[tokio::test]
async fn api_without_a_backend_answers_503() {
    let f = fixture(None, None);
    let (status, body) = get(&f.router, "/api/v1/status").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable")
    );
}

/// A replica listening on all interfaces with one token per role.
fn tokens_fixture() -> Fixture {
    let tokens: Vec<TokenEntry> = TokenRole::ALL
        .iter()
        .map(|r| TokenEntry {
            name: format!("{}-bot", r.as_str()),
            role: *r,
            sha256: api::to_hex(&api::sha256(&format!("tok-{}", r.as_str()))),
        })
        .collect();
    fixture_with(
        Some(MemoryBackend::with_task("default", "t1")),
        Access::new(&tokens, "", false),
        ApiLimits::default(),
    )
}

fn token_of(role: TokenRole) -> String {
    format!("tok-{}", role.as_str())
}

async fn metric_value(router: &Router, series: &str) -> f64 {
    let (_, text) = get(router, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series).map(|v| v.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("{series} not in:\n{text}"))
}

/// API requests refused so far under `reason`.
async fn refusals(router: &Router, reason: &str) -> f64 {
    metric_value(
        router,
        &format!("scheduler_api_auth_failures_total{{reason=\"{reason}\"}}"),
    )
    .await
}

/// Sends a request and checks the refusal: `status`, the error `code`, and a message that
/// names `names` (the setting or type the caller needs).
async fn assert_refused(
    router: &Router,
    (method, uri): (Method, &str),
    headers: &[(&str, &str)],
    body: Option<&str>,
    (status, code, names): (StatusCode, &str, &str),
) {
    let (got, text) = send(router, method, uri, headers, body).await;
    assert_eq!(got, status, "{uri}: {text}");
    assert_eq!(error_code(&text), code, "{uri}");
    assert!(text.contains(names), "{uri}: {text}");
}

#[tokio::test]
async fn a_replica_reachable_from_the_network_without_a_token_refuses_the_api() {
    let closed = fixture_with(
        Some(MemoryBackend::with_task("default", "t1")),
        Access::new(&[], "", false),
        ApiLimits::default(),
    );
    for (method, uri) in [
        (Method::GET, "/api/v1/tasks"),
        (Method::POST, "/api/v1/tasks/default/t1/trigger"),
        (Method::GET, "/api/v1/no/such/route"),
    ] {
        let (status, body) = call(&closed.router, method, uri, None, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}: {body}");
        assert_eq!(error_code(&body), "api_closed");
        assert!(
            body.contains("http.tokens") && body.contains("http.insecure_open_api"),
            "{body}"
        );
    }
    // Probes and metrics stay open.
    assert_eq!(get(&closed.router, "/healthz").await.0, StatusCode::OK);
    assert_eq!(refusals(&closed.router, "closed").await, 3.0);
    // The loudly named opt-out opens it.
    let open = fixture_with(
        Some(MemoryBackend::with_task("default", "t1")),
        Access::new(&[], "", true),
        ApiLimits::default(),
    );
    assert_eq!(get(&open.router, "/api/v1/tasks").await.0, StatusCode::OK);
}

/// The access table of docs/security.md: (method, route under the prefix, role).
fn documented_access_table() -> Vec<(String, String, TokenRole)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/security.md"))
        .unwrap();
    let start = doc
        .find("<!-- access table -->")
        .expect("the access table marker");
    doc[start..]
        .lines()
        .skip(3)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let route = cells[1].trim_matches('`');
            let route = route.strip_prefix("/api/v1").unwrap();
            (
                cells[0].to_owned(),
                route.split('?').next().unwrap().to_owned(),
                cells[2].parse().unwrap(),
            )
        })
        .collect()
}

/// What a caller gets: through to the route, or refused with a status and a code.
type Expected = Result<(), (StatusCode, &'static str)>;

#[tokio::test]
async fn every_route_answers_each_caller_as_the_documented_access_table_says() {
    let table = documented_access_table();
    let code_table: Vec<(String, String, TokenRole)> = ROUTE_ROLES
        .iter()
        .map(|(m, p, r)| ((*m).to_owned(), (*p).to_owned(), *r))
        .collect();
    assert_eq!(table, code_table, "docs/security.md and ROUTE_ROLES differ");

    let concrete = |path: &str| {
        let id = if path.starts_with("/executions/") || path.starts_with("/scheduled/") {
            "0190f5a2-7b1c-7cc3-9a4e-1f2e3d4c5b6a"
        } else {
            "t1"
        };
        // A search needs something to search for.
        let query = if path == "/executions/find" {
            "?id=000000000009"
        } else {
            ""
        };
        format!(
            "/api/v1{}{query}",
            path.replace("{namespace}", "default")
                .replace("{id}", id)
                .replace("{name}", "default")
                .replace("{queue}", "default")
        )
    };
    // The table lists every method the router serves on these paths, and no other.
    let f = tokens_fixture();
    let admin = token_of(TokenRole::Admin);
    let mut paths: Vec<&str> = table.iter().map(|(_, p, _)| p.as_str()).collect();
    paths.dedup();
    for path in paths {
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            let listed = table
                .iter()
                .any(|(m, p, _)| m == method.as_str() && p == path);
            let (status, body) = call(
                &f.router,
                method.clone(),
                &concrete(path),
                Some(&admin),
                Some("{}"),
            )
            .await;
            assert_eq!(
                status != StatusCode::METHOD_NOT_ALLOWED,
                listed,
                "{method} {path}: {status} {body}"
            );
        }
    }

    for (method, path, needed) in &table {
        let method: Method = method.parse().unwrap();
        let uri = concrete(path);
        let body = match path.as_str() {
            "/tasks" => {
                Some(r#"{"id": "t9", "namespace": "default", "schedule": {"every": "1m"}}"#)
            }
            "/dlq/requeue" => Some(r#"{"all": true}"#),
            "/tasks/{namespace}/{id}/backfill" => Some(r#"{"from": 0, "to": 1}"#),
            "/scheduled" => Some(r#"{"namespace": "default", "handler": "log", "after": "1m"}"#),
            "/scheduled/{queue}/{id}/move" => Some(r#"{"after": "1m"}"#),
            _ => None,
        };
        let mut callers: Vec<(String, Option<String>, Expected)> = vec![
            (
                "no token".into(),
                None,
                Err((StatusCode::UNAUTHORIZED, "unauthorized")),
            ),
            (
                "a wrong token".into(),
                Some("tok-root".into()),
                Err((StatusCode::UNAUTHORIZED, "unauthorized")),
            ),
        ];
        for role in TokenRole::ALL {
            let expect = if role >= *needed {
                Ok(())
            } else {
                Err((StatusCode::FORBIDDEN, "forbidden"))
            };
            callers.push((role.as_str().into(), Some(token_of(role)), expect));
        }
        for (who, token, expect) in callers {
            // A fresh replica for each call, so a delete cannot hide a later caller's answer.
            let f = tokens_fixture();
            let (status, answer) =
                call(&f.router, method.clone(), &uri, token.as_deref(), body).await;
            match expect {
                Ok(()) => assert!(
                    status.is_success(),
                    "{method} {path} as {who}: {status} {answer}"
                ),
                Err((want, code)) => {
                    assert_eq!(status, want, "{method} {path} as {who}: {answer}");
                    assert_eq!(error_code(&answer), code, "{method} {path} as {who}");
                }
            }
        }
    }
}

#[tokio::test]
async fn refusals_are_counted_by_reason() {
    let f = tokens_fixture();
    let r = &f.router;
    call(r, Method::GET, "/api/v1/tasks", None, None).await;
    call(r, Method::GET, "/api/v1/tasks", Some("nope"), None).await;
    call(r, Method::GET, "/api/v1/tasks", Some("nope"), None).await;
    call(
        r,
        Method::DELETE,
        "/api/v1/tasks/default/t1",
        Some(&token_of(TokenRole::Read)),
        None,
    )
    .await;
    for (reason, n) in [
        ("missing", 1.0),
        ("invalid", 2.0),
        ("forbidden", 1.0),
        ("closed", 0.0),
        ("cross_origin", 0.0),
        ("unknown_host", 0.0),
        ("media_type", 0.0),
    ] {
        let series = format!("scheduler_api_auth_failures_total{{reason=\"{reason}\"}}");
        assert_eq!(metric_value(r, &series).await, n, "{reason}");
    }
}

#[tokio::test]
async fn secrets_are_masked_unless_an_admin_asks() {
    let f = tokens_fixture();
    let r = &f.router;
    let spec = r#"{"id": "hook", "namespace": "default", "handler": "http", "schedule": {"every": "1m"},
        "http": {"url": "https://bot:pw@example.com/h?token=abc", "headers": {"Authorization": "Bearer s3cret"}}}"#;
    let (status, body) = call(
        r,
        Method::POST,
        "/api/v1/tasks",
        Some(&token_of(TokenRole::Admin)),
        Some(spec),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let read = token_of(TokenRole::Read);
    for uri in [
        "/api/v1/tasks/default/hook",
        "/api/v1/tasks?namespace=default",
    ] {
        let (status, body) = call(r, Method::GET, uri, Some(&read), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        for secret in ["s3cret", "pw@", "abc"] {
            assert!(!body.contains(secret), "{uri} shows {secret}: {body}");
        }
        assert!(body.contains(r#""Authorization":"***""#), "{body}");
        assert!(
            body.contains("https://***@example.com/h?token=***"),
            "{body}"
        );
    }
    let (status, body) = call(
        r,
        Method::GET,
        "/api/v1/tasks/default/hook?show_secrets=true",
        Some(&read),
        None,
    )
    .await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    let (status, body) = call(
        r,
        Method::GET,
        "/api/v1/tasks/default/hook?show_secrets=true",
        Some(&token_of(TokenRole::Admin)),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("Bearer s3cret") && body.contains("bot:pw@"),
        "{body}"
    );
}

#[tokio::test]
async fn oversized_requests_and_run_now_floods_are_refused_naming_their_limit() {
    let f = fixture_with(
        Some(MemoryBackend::with_task("default", "t1")),
        Access::new(&[], "", true),
        ApiLimits {
            max_request_bytes: 2048,
            triggers_per_task_per_minute: 2,
            operate_actions_per_minute: 1000,
            scheduled_per_minute: 600_000,
            reads_per_minute: 1000,
        },
    );
    let r = &f.router;
    let big = format!(r#"{{"id": "t2", "payload": "{}"}}"#, "x".repeat(4096));
    let (status, body) = call(r, Method::POST, "/api/v1/tasks", None, Some(&big)).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "limit_exceeded")
    );
    assert!(body.contains("limits.max_request_bytes"), "{body}");
    // A body that announces no length is cut off while it is read.
    let chunks = futures::stream::iter(
        (0..8).map(|_| Ok::<_, std::io::Error>(axum::body::Bytes::from(vec![b' '; 512]))),
    );
    let req = Request::post("/api/v1/tasks")
        .body(Body::from_stream(chunks))
        .unwrap();
    let resp = r.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).contains("limits.max_request_bytes"));

    let trigger = "/api/v1/tasks/default/t1/trigger";
    for _ in 0..2 {
        assert_eq!(
            call(r, Method::POST, trigger, None, None).await.0,
            StatusCode::ACCEPTED
        );
    }
    let (status, body) = call(r, Method::POST, trigger, None, None).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "limit_exceeded")
    );
    assert!(
        body.contains("limits.triggers_per_task_per_minute"),
        "{body}"
    );
    let long = format!("/api/v1/tasks?label={}", "l".repeat(9000));
    let (status, body) = call(r, Method::GET, &long, None, None).await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::URI_TOO_LONG, "limit_exceeded")
    );
}

#[tokio::test]
async fn every_change_through_the_api_is_audited_with_its_caller_and_reads_are_not() {
    let backend = MemoryBackend::with_task("default", "t1");
    let audit = Arc::clone(&backend.audit);
    let tokens: Vec<TokenEntry> = TokenRole::ALL
        .iter()
        .map(|r| TokenEntry {
            name: format!("{}-bot", r.as_str()),
            role: *r,
            sha256: api::to_hex(&api::sha256(&token_of(*r))),
        })
        .collect();
    let f = fixture_with(
        Some(backend),
        Access::new(&tokens, "", false),
        ApiLimits::default(),
    );
    let r = &f.router;
    let (admin, operate, read) = (
        token_of(TokenRole::Admin),
        token_of(TokenRole::Operate),
        token_of(TokenRole::Read),
    );
    let spec = r#"{"id": "hook", "version": 1, "schedule": {"every": "1m"},
        "http": {"url": "https://h/x", "headers": {"Authorization": "Bearer s3cret"}}}"#;
    assert_eq!(
        call(r, Method::POST, "/api/v1/tasks", Some(&admin), Some(spec))
            .await
            .0,
        StatusCode::CREATED
    );
    let spec2 = r#"{"id": "hook", "version": 2, "schedule": {"every": "5m"},
        "http": {"url": "https://h/x", "headers": {"Authorization": "Bearer s3cret"}}}"#;
    assert_eq!(
        call(r, Method::POST, "/api/v1/tasks", Some(&admin), Some(spec2))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        call(
            r,
            Method::POST,
            "/api/v1/tasks/default/t1/pause",
            Some(&operate),
            None
        )
        .await
        .0,
        StatusCode::OK
    );
    assert_eq!(
        call(
            r,
            Method::POST,
            "/api/v1/dlq/purge?queue=q1",
            Some(&admin),
            None
        )
        .await
        .0,
        StatusCode::OK
    );
    // Reads, refusals and failures change nothing and are not recorded.
    call(r, Method::GET, "/api/v1/tasks", Some(&read), None).await;
    call(
        r,
        Method::DELETE,
        "/api/v1/tasks/default/t1",
        Some(&read),
        None,
    )
    .await;
    call(
        r,
        Method::POST,
        "/api/v1/tasks/default/missing/pause",
        Some(&operate),
        None,
    )
    .await;

    let records = audit.lock().unwrap().clone();
    let summary: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|a| (a.actor.as_str(), a.action.as_str(), a.target.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("admin-bot", "task.put", "default/hook"),
            ("admin-bot", "task.put", "default/hook"),
            ("operate-bot", "task.pause", "default/t1"),
            ("admin-bot", "dlq.purge", "q1"),
        ]
    );
    assert!(records.iter().all(|a| a.via == "api"));
    assert_eq!(records[1].revision, Some(7));
    let diff = records[1].detail.as_ref().unwrap();
    assert_eq!(
        diff["changed"]["schedule.every"],
        json!({"from": "1m", "to": "5m"})
    );
    assert!(
        !diff.to_string().contains("s3cret")
            && !records[0]
                .detail
                .as_ref()
                .unwrap()
                .to_string()
                .contains("s3cret")
    );
    // The request's query is not stored: what it named is the record's target.
    assert_eq!(records[3].detail, None);
    let (status, body) = call(r, Method::GET, "/api/v1/audit", Some(&read), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()[0]["action"],
        "dlq.purge"
    );
}

#[test]
fn the_openapi_document_lists_exactly_the_routes_methods_and_roles_of_the_router() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json"))
            .unwrap(),
    )
    .unwrap();
    let mut documented = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let route = path.strip_prefix("/api/v1").unwrap();
        for (method, op) in ops.as_object().unwrap() {
            // A route with its own credential is marked so; compared as the router's list
            // of them, which the chain below reads as `read`.
            let role: TokenRole = match op["x-ax-role"].as_str().unwrap() {
                "execution_token" => TokenRole::Read,
                other => other.parse().unwrap(),
            };
            documented.push((method.to_uppercase(), route.to_owned(), role));
            // Every parameter of the path is described.
            for segment in route.split('/').filter(|s| s.starts_with('{')) {
                let name = segment.trim_matches(['{', '}']);
                assert!(
                    op["parameters"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|p| p["in"] == "path" && p["name"] == name),
                    "{method} {path}: no parameter {name}"
                );
            }
        }
    }
    let mut routes: Vec<(String, String, TokenRole)> = ROUTE_ROLES
        .iter()
        .map(|(m, p, r)| ((*m).to_owned(), (*p).to_owned(), *r))
        // Routes with their own credential are documented without a role (read here).
        .chain(
            auth::EXECUTION_TOKEN_ROUTES
                .iter()
                .map(|(m, p)| ((*m).to_owned(), (*p).to_owned(), TokenRole::Read)),
        )
        .collect();
    documented.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    routes.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    // ROUTE_ROLES is the router's own list: the access-table sweep proves it.
    assert_eq!(
        documented, routes,
        "docs/openapi.json and the router differ"
    );
}

#[tokio::test]
async fn whoami_names_the_caller_and_its_role() {
    let f = tokens_fixture();
    for role in TokenRole::ALL {
        let (status, body) = call(
            &f.router,
            Method::GET,
            "/api/v1/whoami",
            Some(&token_of(role)),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let me: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(me["name"], format!("{}-bot", role.as_str()));
        assert_eq!(me["role"], role.as_str());
    }
    // Where the API admits callers without a token, they are the anonymous admin.
    let open = fixture(None, None);
    let (status, body) = get(&open.router, "/api/v1/whoami").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"name": "anonymous", "role": "admin"})
    );
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_with_a_strict_policy() {
    use ax::http::console::{ASSETS, CONTENT_SECURITY_POLICY};
    // Served without a token even where the API needs one: the files hold no data.
    let f = tokens_fixture();
    let resp = f
        .router
        .clone()
        .oneshot(Request::get("/ui").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert!(resp.status().is_redirection());
    assert_eq!(resp.headers()[header::LOCATION], "/ui/");
    for (name, content_type, content) in ASSETS {
        let uri = if *name == "index.html" {
            "/ui/".to_owned()
        } else {
            format!("/ui/{name}")
        };
        let resp = f
            .router
            .clone()
            .oneshot(Request::get(&uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{uri}");
        let h = resp.headers();
        assert_eq!(h[header::CONTENT_TYPE], *content_type, "{uri}");
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        // Offline: nothing is fetched from elsewhere, and no markup is built from strings.
        let content = content.replace("http://www.w3.org/2000/svg", "");
        for banned in [
            "http://",
            "https://",
            "innerHTML",
            "outerHTML",
            "eval(",
            "document.write",
        ] {
            assert!(!content.contains(banned), "{name} contains {banned}");
        }
    }
    // No inline script or handler in the page: the policy would block it anyway.
    let (_, _, index) = ASSETS.iter().find(|(n, _, _)| *n == "index.html").unwrap();
    assert!(!index.contains("<script>") && !index.contains(" onclick="));
    assert_eq!(
        index.matches("<script").count(),
        index.matches("<script type=\"module\" src=\"/ui/").count()
    );
    assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self'"));
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    let (status, _) = get(&f.router, "/ui/nope.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_job_reports_with_its_completion_token_where_the_api_is_closed_to_everyone_else() {
    let uri = format!("/api/v1/executions/{ASYNC_EXECUTION}/complete");
    let body = |token: &str, status: &str| json!({"token": token, "status": status}).to_string();
    let closed = fixture_with(
        Some(MemoryBackend::default()),
        Access::new(&[], "", false),
        ApiLimits::default(),
    );
    let with_tokens = tokens_fixture();
    for f in [&closed, &with_tokens] {
        // Every other route stays shut to a caller without an API token.
        let (status, _) = get(&f.router, "/api/v1/tasks").await;
        assert!(status == StatusCode::FORBIDDEN || status == StatusCode::UNAUTHORIZED);
    }
    let f = &with_tokens;
    let post = |b: String, bearer: Option<String>| {
        let uri = uri.clone();
        async move { call(&f.router, Method::POST, &uri, bearer.as_deref(), Some(&b)).await }
    };
    // No token, or not shaped like one: 401, even for an admin's API token.
    let (status, text) = post(json!({"status": "succeeded"}).to_string(), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
    let (status, _) = post(
        body("ax_secret", "succeeded"),
        Some(token_of(TokenRole::Admin)),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A token of another attempt or execution: 403.
    let forged = format!("axc.0.{}.default", "cd".repeat(32));
    let (status, _) = post(body(&forged, "succeeded"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let other = "/api/v1/executions/0190f5a2-0000-7cc3-9a4e-1f2e3d4c5b6a/complete";
    let (status, _) = call(
        &f.router,
        Method::POST,
        other,
        None,
        Some(&body(&async_token(), "succeeded")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Progress, the end, its repeat; another end and more progress after it: 409.
    let (status, text) = post(body(&async_token(), "progress"), None).await;
    assert_eq!(
        (status, text.contains("waiting")),
        (StatusCode::OK, true),
        "{text}"
    );
    let (status, text) = post(body(&async_token(), "succeeded"), None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["state"],
        "succeeded"
    );
    let (status, text) = post(body(&async_token(), "succeeded"), None).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["repeated"],
        true
    );
    assert_eq!(status, StatusCode::OK);
    for late in ["failed", "progress"] {
        let (status, text) = post(body(&async_token(), late), None).await;
        assert_eq!(status, StatusCode::CONFLICT, "{late}: {text}");
        assert!(text.contains("ended `succeeded`"), "{text}");
    }
    // An unknown status or field is a 400; a body past the limit a 413, before any check.
    let (status, _) = post(body(&async_token(), "done"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let big =
        json!({"token": async_token(), "status": "succeeded", "message": "x".repeat(2 << 20)});
    let (status, _) = post(big.to_string(), None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // Reports are not changes made by a user: nothing in the audit log.
    let (_, text) = call(
        &f.router,
        Method::GET,
        "/api/v1/audit",
        Some(&token_of(TokenRole::Admin)),
        None,
    )
    .await;
    assert!(!text.contains("complete"), "{text}");
}

#[tokio::test]
async fn replaying_credentials_with_a_body_or_a_stored_target_needs_an_admin_token() {
    let f = tokens_fixture();
    let r = &f.router;
    let (admin, operate) = (token_of(TokenRole::Admin), token_of(TokenRole::Operate));
    let spec = r#"{"id": "hook", "version": 1, "schedule": {"every": "1m"},
        "http": {"url": "https://h/x", "headers": {"Authorization": "Bearer s3cret"}}}"#;
    let (status, text) = call(r, Method::POST, "/api/v1/tasks", Some(&admin), Some(spec)).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let trigger = "/api/v1/tasks/default/hook/trigger";
    let body = r#"{"payload": {"amount": 1000000}}"#;
    let (status, text) = call(r, Method::POST, trigger, Some(&operate), Some(body)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("admin token"), "{text}");
    let (status, text) = call(r, Method::POST, trigger, Some(&operate), Some("{}")).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "the task's own payload: {text}"
    );
    let (status, text) = call(r, Method::POST, trigger, Some(&admin), Some(body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{text}");
    // A task without credentials takes an operator's payload.
    let (status, text) = call(
        r,
        Method::POST,
        "/api/v1/tasks/default/t1/trigger",
        Some(&operate),
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{text}");

    let stored = r#"{"ids": ["0123456789abcdef0123456789abcdef"], "use_stored": true}"#;
    let (status, text) = call(
        r,
        Method::POST,
        "/api/v1/dlq/requeue",
        Some(&operate),
        Some(stored),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("use_stored"), "{text}");
    let (status, text) = call(
        r,
        Method::POST,
        "/api/v1/dlq/requeue",
        Some(&admin),
        Some(stored),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
}

#[tokio::test]
async fn a_completion_past_its_rate_is_refused_before_its_body_is_read() {
    let f = tokens_fixture();
    let uri = format!("/api/v1/executions/{ASYNC_EXECUTION}/complete");
    let body = json!({"token": "nope", "status": "progress"}).to_string();
    for _ in 0..ax::http::limits::COMPLETIONS_PER_EXECUTION_PER_MINUTE {
        call(&f.router, Method::POST, &uri, None, Some(&body)).await;
    }
    // A head that promises a body which never comes: the refusal must not wait for it.
    let never = futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
    let req = Request::builder()
        .method(Method::POST)
        .uri(&uri)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, 100_000)
        .body(Body::from_stream(never))
        .unwrap();
    let resp = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        f.router.clone().oneshot(req),
    )
    .await
    .expect("the route waited for the body of a call over its rate")
    .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
}
