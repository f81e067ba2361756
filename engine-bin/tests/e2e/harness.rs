//! The end-to-end harness: a corner of the shared etcd and Redis, real `ax serve` processes,
//! and a local HTTP receiver standing in for task endpoints and the alert webhook.
//!
//! Everything a test starts is owned by its [`Cluster`] and stopped when it drops (processes
//! SIGKILLed, the receiver aborted), so a failed assertion leaves nothing running. Each
//! process logs at `warn` to its own file; when a test fails, the tail of every log is
//! printed, since the processes' view is what explains an end-to-end failure.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use etcd_client::{Client, Txn, TxnOp};
use serde_json::Value;

/// The `ax` binary under test.
pub(crate) const AX: &str = env!("CARGO_BIN_EXE_ax");

/// What the replicas let the `http` handler call besides public addresses: loopback, where
/// the receiver listens.
pub(crate) const LOOPBACK: &str = "127.0.0.0/8,::1/128";
/// The admin token of every replica (`AX_API_TOKEN`): the API answers no caller without one.
pub(crate) const API_TOKEN: &str = "e2e-admin-token-0123456789abcdef0123456789";

/// `GET url` with the admin token, as JSON.
pub(crate) async fn api_get(url: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(url)
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Lines of each process log printed when a test fails.
const LOG_TAIL_LINES: usize = 40;

/// The processes of different tests would compete for the two cores and skew each other's
/// timings: tests take this lock and run one at a time.
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The value of one series on the `/metrics` of the replica listening on `port`: a name
/// without labels, or one with them as `/metrics` prints it (`name{label="v"}`).
pub(crate) async fn metric_at(port: u16, series: &str) -> Option<f64> {
    metric_on("127.0.0.1", port, series).await
}

/// [`metric_at`] for a replica listening on `host`.
pub(crate) async fn metric_on(host: &str, port: u16, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("http://{host}:{port}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Milliseconds since the Unix epoch, on the clock the engine uses too.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// RFC 3339 of a millisecond instant, for `schedule.at`.
pub(crate) fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// One execution posted by the `http` handler.
#[derive(Clone, Debug)]
pub(crate) struct Execution {
    pub(crate) namespace: String,
    pub(crate) task_id: String,
    pub(crate) execution_id: String,
    pub(crate) fire_at: i64,
    pub(crate) attempt: u32,
    /// The fencing token of the leader that fired it.
    pub(crate) fencing_token: u64,
    pub(crate) run_now: bool,
    /// The payload it ran with.
    pub(crate) payload: Value,
    /// For a backfill, the past fire it stands for.
    pub(crate) backfill_of: Option<i64>,
    /// The run of a chain of dependent tasks it belongs to.
    pub(crate) run_id: Option<String>,
    /// For a fanned-out fire: this piece's index and the piece count.
    pub(crate) piece: Option<(u64, u64)>,
    /// For a broadcast fire: the worker the execution is addressed to.
    pub(crate) target_worker: Option<String>,
    /// For an `http.async` task: where and with which token to report the end.
    pub(crate) completion: Option<(String, String)>,
    /// When the receiver got it (ms since the epoch).
    pub(crate) arrived_at: i64,
}

#[derive(Default)]
struct Inbox {
    executions: Vec<Execution>,
    alerts: Vec<Value>,
    failing: HashSet<String>,
    /// Tasks whose executions are answered only after this long (a slow endpoint).
    slow: HashMap<String, Duration>,
    /// Tasks whose executions are answered with this body.
    bodies: HashMap<String, String>,
    /// Tasks whose executions are answered `202 Accepted` (they report back later).
    accepting: HashSet<String>,
    /// Bodies that could not be read: each is a test failure.
    malformed: Vec<String>,
}

/// The local HTTP receiver: `POST /exec` for the `http` handler, `POST /alert` for the alert
/// webhook.
pub(crate) struct Receiver {
    addr: SocketAddr,
    inbox: Arc<Mutex<Inbox>>,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Receiver {
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let app = Router::new()
            .route("/exec", post(receive_execution))
            .route("/alert", post(receive_alert))
            .with_state(Arc::clone(&inbox));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            addr,
            inbox,
            server,
        }
    }

    /// Where the `http` handler posts.
    pub(crate) fn exec_url(&self) -> String {
        format!("http://{}/exec", self.addr)
    }

    /// Where alerts are posted.
    pub(crate) fn alert_url(&self) -> String {
        format!("http://{}/alert", self.addr)
    }

    /// Executions of `task_id` are answered with HTTP 500 from now on.
    pub(crate) fn fail_task(&self, task_id: &str) {
        self.inbox
            .lock()
            .unwrap()
            .failing
            .insert(task_id.to_owned());
    }

    /// Executions of `task_id` are answered with `body` from now on.
    pub(crate) fn answer_with(&self, task_id: &str, body: String) {
        self.inbox
            .lock()
            .unwrap()
            .bodies
            .insert(task_id.to_owned(), body);
    }

    /// Executions of `task_id` are answered `202 Accepted` from now on: the test reports
    /// their end through the completion URL they carry.
    pub(crate) fn accept_task(&self, task_id: &str) {
        self.inbox
            .lock()
            .unwrap()
            .accepting
            .insert(task_id.to_owned());
    }

    /// Executions of `task_id` are answered only after `delay` from now on.
    pub(crate) fn slow_task(&self, task_id: &str, delay: Duration) {
        self.inbox
            .lock()
            .unwrap()
            .slow
            .insert(task_id.to_owned(), delay);
    }

    /// Every execution received so far, in arrival order.
    pub(crate) fn executions(&self) -> Vec<Execution> {
        let inbox = self.inbox.lock().unwrap();
        assert!(
            inbox.malformed.is_empty(),
            "the receiver got bodies it could not read: {:?}",
            inbox.malformed
        );
        inbox.executions.clone()
    }

    /// Executions of one task, in arrival order.
    pub(crate) fn executions_of(&self, task_id: &str) -> Vec<Execution> {
        self.executions()
            .into_iter()
            .filter(|e| e.task_id == task_id)
            .collect()
    }

    /// Whether an alert received so far mentions `text` (its kind, a phrase of its message).
    pub(crate) fn has_alert(&self, text: &str) -> bool {
        self.alerts().iter().any(|a| a.to_string().contains(text))
    }

    /// Every alert payload received so far.
    pub(crate) fn alerts(&self) -> Vec<Value> {
        self.inbox.lock().unwrap().alerts.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive_execution(
    State(inbox): State<Arc<Mutex<Inbox>>>,
    body: Bytes,
) -> (StatusCode, String) {
    let arrived_at = now_ms();
    let parsed = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| parse_execution(&v, arrived_at));
    let (status, delay, answer) = {
        let mut inbox = inbox.lock().unwrap();
        match parsed {
            Some(e) => {
                let failing = inbox.failing.contains(&e.task_id);
                let accepting = inbox.accepting.contains(&e.task_id);
                let delay = inbox.slow.get(&e.task_id).copied();
                let answer = inbox.bodies.get(&e.task_id).cloned().unwrap_or_default();
                inbox.executions.push(e);
                let status = if failing {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else if accepting {
                    StatusCode::ACCEPTED
                } else {
                    StatusCode::OK
                };
                (status, delay, answer)
            }
            None => {
                inbox
                    .malformed
                    .push(String::from_utf8_lossy(&body).into_owned());
                (StatusCode::BAD_REQUEST, None, String::new())
            }
        }
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    (status, answer)
}

fn parse_execution(v: &Value, arrived_at: i64) -> Option<Execution> {
    Some(Execution {
        namespace: v.get("namespace")?.as_str()?.to_owned(),
        task_id: v.get("task_id")?.as_str()?.to_owned(),
        execution_id: v.get("execution_id")?.as_str()?.to_owned(),
        fire_at: v.get("fire_at")?.as_i64()?,
        attempt: u32::try_from(v.get("attempt")?.as_u64()?).ok()?,
        fencing_token: v.get("fencing_token")?.as_u64()?,
        run_now: v.get("run_now").and_then(Value::as_bool).unwrap_or(false),
        payload: v.get("payload").cloned().unwrap_or(Value::Null),
        backfill_of: v.get("backfill_of").and_then(Value::as_i64),
        run_id: v.get("run_id").and_then(Value::as_str).map(str::to_owned),
        completion: v
            .get("completion_url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .zip(
                v.get("completion_token")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            ),
        piece: v
            .get("shard_index")
            .and_then(Value::as_u64)
            .zip(v.get("shard_total").and_then(Value::as_u64)),
        target_worker: v
            .get("target_worker")
            .and_then(Value::as_str)
            .map(str::to_owned),
        arrived_at,
    })
}

async fn receive_alert(State(inbox): State<Arc<Mutex<Inbox>>>, body: Bytes) -> StatusCode {
    let mut inbox = inbox.lock().unwrap();
    match serde_json::from_slice::<Value>(&body) {
        Ok(v) => {
            inbox.alerts.push(v);
            StatusCode::OK
        }
        Err(_) => {
            inbox
                .malformed
                .push(String::from_utf8_lossy(&body).into_owned());
            StatusCode::BAD_REQUEST
        }
    }
}

/// One `ax serve` process, SIGKILLed when dropped.
pub(crate) struct Replica {
    pub(crate) id: String,
    pub(crate) http_port: u16,
    /// The address its HTTP port listens on (loopback, or its namespace's).
    pub(crate) host: String,
    log: PathBuf,
    child: Option<Child>,
}

impl Replica {
    /// SIGKILLs the process (no chance to resign or deregister) and reaps it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Asks the process to stop (SIGTERM) and waits up to `within` for it to exit; its exit
    /// status, or `None` if it was still running (then it is killed).
    pub(crate) fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let _ = Command::new("kill")
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
        self.kill();
        None
    }

    /// The process id, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is still running (not exited, not killed).
    pub(crate) fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// What the process logged so far (stdout and stderr).
    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn print_log_tail(&self) {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(LOG_TAIL_LINES);
        eprintln!(
            "---- last {} of {} log lines of replica {} ----",
            lines.len() - from,
            lines.len(),
            self.id
        );
        for line in &lines[from..] {
            eprintln!("{line}");
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How a replica is started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Roles {
    /// Scheduler and worker (the default).
    Both,
    /// Scheduler only.
    Scheduler,
    /// Worker only.
    Worker,
}

/// One test's etcd prefix, Redis key prefix, receiver and processes.
pub(crate) struct Cluster {
    pub(crate) prefix: String,
    pub(crate) redis_prefix: String,
    /// The Redis the replicas use: the shared one unless a test brings its own.
    pub(crate) redis_url: String,
    /// The etcd the replicas use: one endpoint, or a cluster's, comma-separated.
    pub(crate) etcd_endpoint: String,
    /// Extra environment for the replicas started from now on (overrides the defaults).
    pub(crate) env: Vec<(&'static str, String)>,
    /// Where the replicas started from now on run: `None` on the host, else in a network
    /// namespace: the command line that runs a program there (`Net::exec_in`) and the
    /// namespace's address, which their HTTP port listens on.
    pub(crate) place: Option<(Vec<String>, String)>,
    pub(crate) receiver: Receiver,
    pub(crate) etcd: Client,
    replicas: Vec<Replica>,
    logs: tempfile::TempDir,
}

impl Cluster {
    /// A fresh corner of the shared servers and a running receiver; no process yet.
    pub(crate) async fn new(label: &str) -> Cluster {
        Self::on(label, ax_testkit::etcd_endpoint(), ax_testkit::redis_url()).await
    }

    /// Like [`Cluster::new`], on servers of the test's own (to stop or kill them).
    pub(crate) async fn on(label: &str, etcd_endpoint: String, redis_url: String) -> Cluster {
        let etcd = Client::connect(etcd_endpoint.split(',').collect::<Vec<_>>(), None)
            .await
            .unwrap();
        Cluster {
            prefix: format!("/{}", ax_testkit::unique_name(label)),
            redis_prefix: ax_testkit::unique_name(label),
            redis_url,
            etcd_endpoint,
            env: Vec::new(),
            receiver: Receiver::start().await,
            etcd,
            place: None,
            replicas: Vec::new(),
            logs: tempfile::tempdir().unwrap(),
        }
    }

    fn base_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HOSTNAME", "e2e-host".to_owned()),
            ("AX_ETCD_ENDPOINTS", self.etcd_endpoint.clone()),
            ("AX_ETCD_PREFIX", self.prefix.clone()),
            ("AX_REDIS_URL", self.redis_url.clone()),
            ("AX_REDIS_KEY_PREFIX", self.redis_prefix.clone()),
            ("AX_LEASE_TTL", "2s".to_owned()),
            ("AX_LOG", "warn".to_owned()),
            // The receiver listens on loopback, which the http handler refuses by default.
            ("AX_WORKER_HTTP_ALLOW_CIDRS", LOOPBACK.to_owned()),
            ("AX_API_TOKEN", API_TOKEN.to_owned()),
        ]
    }

    /// Starts `ax serve` as instance `id` and waits until it is ready (etcd and Redis
    /// connected, worker pool running where it has one).
    pub(crate) async fn start_replica(&mut self, id: &str, roles: Roles) -> &Replica {
        let log = self.logs.path().join(format!("{id}.log"));
        let out = File::create(&log).unwrap();
        self.start_replica_writing_to(id, roles, out, log).await
    }

    /// Like [`Cluster::start_replica`], with stdout and stderr going to `out` (a full disk,
    /// `/dev/full`); its log is read from `log` (a path that need not exist).
    pub(crate) async fn start_replica_writing_to(
        &mut self,
        id: &str,
        roles: Roles,
        out: File,
        log: PathBuf,
    ) -> &Replica {
        let port = ax_testkit::free_port();
        let (mut cmd, host) = match &self.place {
            None => (Command::new(AX), "127.0.0.1".to_owned()),
            Some((exec_in, host)) => {
                let mut cmd = Command::new(&exec_in[0]);
                cmd.args(&exec_in[1..]).arg(AX);
                (cmd, host.clone())
            }
        };
        cmd.arg("serve")
            .env_clear()
            .envs(self.base_env())
            .env("AX_INSTANCE_ID", id)
            .env("AX_HTTP_LISTEN", format!("{host}:{port}"))
            .env("AX_WORKER_CONCURRENCY", "8")
            .env("AX_ALERT_WEBHOOK_URL", self.receiver.alert_url())
            .envs(self.env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        match roles {
            Roles::Both => {}
            Roles::Scheduler => {
                cmd.env("AX_ROLES", "scheduler");
            }
            Roles::Worker => {
                cmd.env("AX_ROLES", "worker");
            }
        }
        let child = cmd.spawn().unwrap();
        self.replicas.push(Replica {
            id: id.to_owned(),
            http_port: port,
            host: host.clone(),
            log,
            child: Some(child),
        });
        let url = format!("http://{host}:{port}/readyz");
        let http = reqwest::Client::new();
        wait_until(
            Duration::from_secs(15),
            &format!("replica {id} ready"),
            || {
                let req = http.get(&url).timeout(Duration::from_millis(500)).send();
                async move { req.await.is_ok_and(|r| r.status().is_success()) }
            },
        )
        .await;
        self.replicas.last().unwrap()
    }

    /// Fails the test unless every replica named in `ids` still runs.
    pub(crate) fn assert_running(&mut self, ids: &[&str]) {
        for id in ids {
            assert!(self.replica(id).is_running(), "replica {id} exited");
        }
    }

    /// The replica named `id`: the one started last under that id.
    pub(crate) fn replica(&mut self, id: &str) -> &mut Replica {
        self.replicas.iter_mut().rev().find(|r| r.id == id).unwrap()
    }

    /// The instance id in `{prefix}/leader`, if a replica leads.
    pub(crate) async fn leader(&self) -> Option<String> {
        let value = self.get(&format!("{}/leader", self.prefix)).await?;
        Some(value.get("instance_id")?.as_str()?.to_owned())
    }

    /// Waits for a leader other than `not` and returns its id.
    pub(crate) async fn wait_for_leader(&self, not: Option<&str>, within: Duration) -> String {
        let start = Instant::now();
        loop {
            if let Some(id) = self.leader().await.filter(|l| Some(l.as_str()) != not) {
                return id;
            }
            assert!(
                start.elapsed() < within,
                "no leader (other than {not:?}) within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Each owned shard's owner (`{prefix}/shards/owners/{shard}`, whose value is the
    /// instance id), with sharded scheduling.
    pub(crate) async fn shard_owners(&self) -> std::collections::BTreeMap<u32, String> {
        self.under(&format!("{}/shards/owners/", self.prefix))
            .await
            .into_iter()
            .filter_map(|(shard, value)| {
                Some((
                    shard.parse().ok()?,
                    String::from_utf8_lossy(&value).into_owned(),
                ))
            })
            .collect()
    }

    /// Every key under `prefix` (without it) and its value, read in pages so that a large
    /// range stays under the etcd client's reply size limit.
    pub(crate) async fn under(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        const PAGE: i64 = 2000;
        let range_end = {
            let mut e = prefix.as_bytes().to_vec();
            if let Some(last) = e.last_mut() {
                *last += 1;
            }
            e
        };
        let mut from = prefix.as_bytes().to_vec();
        let mut out = Vec::new();
        loop {
            let resp = self
                .etcd
                .clone()
                .get(
                    from.clone(),
                    Some(
                        etcd_client::GetOptions::new()
                            .with_range(range_end.clone())
                            .with_limit(PAGE),
                    ),
                )
                .await
                .unwrap();
            for kv in resp.kvs() {
                let key = kv.key_str().unwrap();
                out.push((
                    key.strip_prefix(prefix).unwrap().to_owned(),
                    kv.value().to_vec(),
                ));
            }
            let Some(last) = resp.kvs().last().filter(|_| resp.more()) else {
                return out;
            };
            from = [last.key(), &[0]].concat();
        }
    }

    /// Waits until every one of `shards` shards is owned by a replica in `by` (any replica
    /// when empty); returns the owners.
    pub(crate) async fn wait_for_shards(
        &self,
        shards: u32,
        by: &[&str],
        within: Duration,
    ) -> std::collections::BTreeMap<u32, String> {
        let start = Instant::now();
        loop {
            let owners = self.shard_owners().await;
            if owners.len() == shards as usize
                && (by.is_empty() || owners.values().all(|o| by.contains(&o.as_str())))
            {
                return owners;
            }
            assert!(
                start.elapsed() < within,
                "shards not all owned by {by:?} within {within:?}: {owners:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The JSON value at `key`, if present.
    pub(crate) async fn get(&self, key: &str) -> Option<Value> {
        let resp = self.etcd.clone().get(key, None).await.unwrap();
        let kv = resp.kvs().first()?;
        Some(serde_json::from_slice(kv.value()).unwrap())
    }

    /// Writes a task spec the way `etcdctl put` does: the raw JSON at its key, no checks.
    pub(crate) async fn put_task(&self, namespace: &str, id: &str, spec: &Value) {
        self.etcd
            .clone()
            .put(self.task_key(namespace, id), spec.to_string(), None)
            .await
            .unwrap();
    }

    /// Writes many task specs, 128 per transaction (etcd's default `--max-txn-ops`).
    pub(crate) async fn put_tasks(&self, tasks: &[(String, String, Value)]) {
        for chunk in tasks.chunks(128) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(ns, id, spec)| TxnOp::put(self.task_key(ns, id), spec.to_string(), None))
                .collect();
            let resp = self
                .etcd
                .clone()
                .txn(Txn::new().and_then(ops))
                .await
                .unwrap();
            assert!(resp.succeeded());
        }
    }

    /// Deletes a task's spec, straight in etcd.
    pub(crate) async fn delete_task(&self, namespace: &str, id: &str) {
        self.etcd
            .clone()
            .delete(self.task_key(namespace, id), None)
            .await
            .unwrap();
    }

    fn task_key(&self, namespace: &str, id: &str) -> String {
        format!("{}/tasks/{namespace}/{id}", self.prefix)
    }

    /// The registry on this cluster's prefix: states read through it merge the finals
    /// ledger, as every reader of ax does.
    fn registry(&self) -> ax_registry::Registry {
        ax_registry::Registry::new(
            self.etcd.clone(),
            ax_registry::RegistryConfig {
                prefix: self.prefix.clone(),
                ..Default::default()
            },
        )
    }

    /// Every task state of `namespace` written so far (its state key or its ledger entry),
    /// by task id.
    pub(crate) async fn states(&self, namespace: &str) -> HashMap<String, Value> {
        let listing = self.registry().list_states(Some(namespace)).await.unwrap();
        listing
            .states
            .into_iter()
            .map(|s| (s.id, serde_json::to_value(&s.state).unwrap()))
            .collect()
    }

    /// The task's runtime state (its state key or its ledger entry), if written; a record
    /// that cannot be decoded as it is.
    pub(crate) async fn state(&self, namespace: &str, id: &str) -> Option<Value> {
        match self.registry().get_state(namespace, id).await {
            Ok(stored) => Some(serde_json::to_value(&stored?.state).unwrap()),
            Err(ax_registry::RegistryError::Decode { key, .. }) => self.get(&key).await,
            Err(e) => panic!("cannot read the state of {namespace}/{id}: {e}"),
        }
    }

    /// Runs an `ax` command with this cluster's configuration; returns (exit code, stdout,
    /// stderr).
    pub(crate) async fn ax(&self, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new(AX)
            .args(args)
            .env_clear()
            .envs(self.base_env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).await.unwrap();
        }
        drop(input);
        let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
            .await
            .expect("ax command did not finish within 20 s")
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs an `ax` command that must succeed; returns its stdout.
    pub(crate) async fn ax_ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.ax(args, None).await;
        assert_eq!(code, 0, "ax {args:?} failed: stdout {out} stderr {err}");
        out
    }

    /// Runs an `ax` command with `-o json` output that must succeed; returns the JSON.
    pub(crate) async fn ax_json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = self.ax_ok(&args).await;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("ax {args:?}: {e}: {out}"))
    }

    /// The value of a metric without labels on a replica's `/metrics`.
    pub(crate) async fn metric(&mut self, replica: &str, name: &str) -> Option<f64> {
        let r = self.replica(replica);
        metric_on(&r.host, r.http_port, name).await
    }

    /// Removes the test's keys from the shared etcd (Redis keys expire or stay under their
    /// unique prefix).
    pub(crate) async fn clean_up(&mut self) {
        for r in &mut self.replicas {
            r.kill();
        }
        self.etcd
            .clone()
            .delete(
                format!("{}/", self.prefix),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .unwrap();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for r in &mut self.replicas {
            r.kill();
        }
        if std::thread::panicking() {
            eprintln!(
                "etcd prefix {}, Redis key prefix {}",
                self.prefix, self.redis_prefix
            );
            for r in &self.replicas {
                r.print_log_tail();
            }
        }
    }
}

/// Polls `ready` every 50 ms until it holds; panics naming `what` after `within`.
pub(crate) async fn wait_until<F, Fut>(within: Duration, what: &str, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if ready().await {
            return;
        }
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Counts executions per task id.
pub(crate) fn counts(executions: &[Execution]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for e in executions {
        *counts.entry(e.task_id.clone()).or_insert(0) += 1;
    }
    counts
}

/// An `http` task posting to the receiver, run once (no retry), on `queue`.
pub(crate) fn http_task(c: &Cluster, schedule: Value, queue: &str) -> Value {
    serde_json::json!({
        "handler": "http",
        "schedule": schedule,
        "queue": queue,
        "http": { "url": c.receiver.exec_url() },
        "timeout": "20s",
        "retry": { "max_retries": 0 },
    })
}

/// The workload of the fault suites: one-shot tasks due before, during and after a fault,
/// and a periodic task `tick` (every second, misfire `skip`, overlap `allow`).
pub(crate) struct Workload {
    /// The one-shots' ids.
    pub(crate) one_shots: Vec<String>,
    last_due: i64,
}

/// What a workload's executions show once settled.
#[derive(Debug)]
pub(crate) struct Figures {
    /// One-shots that never ran.
    pub(crate) lost: usize,
    /// One-shots that ran more than once.
    pub(crate) duplicated: usize,
    /// Execution ids seen more than once.
    pub(crate) repeated_ids: usize,
    /// Periodic slots run more than once.
    pub(crate) tick_slots_twice: usize,
    /// Periodic runs after the instant given to `settle`.
    pub(crate) ticks_after: usize,
}

impl Workload {
    /// `n` one-shots in `namespace` due evenly over `span` from `start`, round robin over
    /// `queues`, and the periodic task `tick` (on the first queue).
    pub(crate) async fn start(
        c: &Cluster,
        namespace: &str,
        queues: &[&str],
        n: usize,
        start: i64,
        span: Duration,
    ) -> Workload {
        let step = i64::try_from(span.as_millis()).unwrap() / i64::try_from(n).unwrap();
        let tasks: Vec<(String, String, Value)> = (0..n)
            .map(|i| {
                let due = start + step * i64::try_from(i).unwrap();
                let queue = queues[i % queues.len()];
                let spec = http_task(c, serde_json::json!({ "at": rfc3339(due) }), queue);
                (namespace.to_owned(), format!("o{i:03}"), spec)
            })
            .collect();
        c.put_tasks(&tasks).await;
        let mut tick = http_task(c, serde_json::json!({ "every": "1s" }), queues[0]);
        tick["misfire"] = serde_json::json!("skip");
        tick["overlap"] = serde_json::json!("allow");
        c.put_task(namespace, "tick", &tick).await;
        Workload {
            one_shots: tasks.into_iter().map(|(_, id, _)| id).collect(),
            last_due: start + step * i64::try_from(n - 1).unwrap(),
        }
    }

    /// Waits until every one-shot ran (at most `within` after the last due), then a moment
    /// for repeats to show; periodic runs are counted from `since`.
    pub(crate) async fn settle(&self, c: &Cluster, within: Duration, since: i64) -> Figures {
        let deadline = Instant::now()
            + Duration::from_millis(u64::try_from(self.last_due - now_ms()).unwrap_or(0))
            + within;
        while Instant::now() < deadline {
            let n = counts(&c.receiver.executions());
            if self.one_shots.iter().all(|id| n.contains_key(id)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let runs = c.receiver.executions();
        let n = counts(&runs);
        let mut ids: HashMap<&str, usize> = HashMap::new();
        for r in &runs {
            *ids.entry(r.execution_id.as_str()).or_default() += 1;
        }
        let ticks: Vec<&Execution> = runs.iter().filter(|r| r.task_id == "tick").collect();
        let mut slots: HashMap<i64, usize> = HashMap::new();
        for t in &ticks {
            *slots.entry(t.fire_at).or_default() += 1;
        }
        Figures {
            lost: self
                .one_shots
                .iter()
                .filter(|id| !n.contains_key(*id))
                .count(),
            duplicated: self
                .one_shots
                .iter()
                .filter(|id| n.get(*id).is_some_and(|k| *k > 1))
                .count(),
            repeated_ids: ids.values().filter(|k| **k > 1).count(),
            tick_slots_twice: slots.values().filter(|k| **k > 1).count(),
            ticks_after: ticks.iter().filter(|t| t.arrived_at > since).count(),
        }
    }
}

impl Figures {
    /// Nothing lost, nothing twice, and the periodic task runs on.
    pub(crate) fn assert_clean(&self, name: &str) {
        assert_eq!(self.lost, 0, "{name}: one-shots lost: {self:?}");
        assert_eq!(self.duplicated, 0, "{name}: one-shots run twice: {self:?}");
        assert_eq!(
            self.repeated_ids, 0,
            "{name}: executions run twice: {self:?}"
        );
        assert_eq!(
            self.tick_slots_twice, 0,
            "{name}: periodic slots run twice: {self:?}"
        );
        assert!(
            self.ticks_after > 0,
            "{name}: the periodic task stopped: {self:?}"
        );
    }
}
