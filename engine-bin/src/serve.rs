//! `ax serve`: one replica.
//!
//! [`Server::bind`] does everything that can fail at start (metrics registry, the listening
//! socket) so that such errors surface before the process reports itself up; [`Server::run`]
//! then spawns each long-running part on the shutdown tracker with a child token and returns
//! once the root token is cancelled (signal or fatal error) and the parts it owns have ended.
//!
//! Start order: the HTTP port (probes answer, not ready), then etcd and Redis with retries
//! and backoff (`/readyz` names what is missing), then the API backend, the alert manager,
//! the instance record, the scheduler role ([`ax_scheduler`]) and the worker pool, and a
//! gauge loop for shared queue metrics. On shutdown the root token stops them all: the pool
//! finishes in-flight work up to its grace period and gives back the rest, the leader
//! resigns so a successor takes over at once, the instance record is removed.
//!
//! The process's parts are submodules: its lifetime ([`shutdown`], [`hardening`]), its log
//! ([`logging`]) and the seams to its roles ([`scheduler_role`], [`worker_role`]); what it
//! shows on its port (metrics, readiness) is the HTTP layer's.

pub mod hardening;
pub mod logging;
pub mod scheduler_role;
pub mod shutdown;
pub mod worker_role;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ax_alerting::{
    Alert, AlertManager, AlertManagerConfig, AlertSender, Channel, FeishuChannel, FeishuConfig,
    Level, PolicyConfig, WebhookChannel, WebhookConfig,
};
use ax_election::{Candidate, ElectionConfig, InstanceRecord};
use ax_queue::{Queue, QueueStats};
use ax_registry::Registry;
use ax_scheduler_core::queue_set::QueueSet;
use ax_scheduler_core::timer::TimerConfig;
use ax_scheduler_core::{DispatcherConfig, ReconnectBackoff, UtcMillis};
use ax_worker::PoolSummary;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::config::{AlertLevel, Config, ReplicaRole};
use crate::http::metrics::{
    Metrics, ALERT_CHANNEL_ALL, ALERT_FAILED, ALERT_SENT, ALERT_SUPPRESSED, BACKEND_ETCD,
    BACKEND_REDIS,
};
use crate::http::readiness::Readiness;
use crate::http::{self, ApiBackend, AppState};
use crate::serve::scheduler_role::{AuditChanges, EtcdClock};
use crate::serve::shutdown::Shutdown;
use ax_control::backend::{Backend, CapacityWatch};
use ax_control::clock_check::ClockCheck;
use ax_control::connect::{
    connect_etcd, connect_queue, election_config, etcd_connect_options, etcd_tls, registry_config,
};
use ax_control::endpoints;
use ax_control::late_api::LateApi;
use ax_control::ClusterConfig;
use ax_scheduler::clock::{Clock, SteadyClock};
use ax_scheduler::{self as scheduler, LeaderDeps, LeaderSettings};

/// A replica, bound and ready to run.
pub struct Server {
    config: Config,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    listener: TcpListener,
    host: Option<String>,
}

impl Server {
    /// Creates the metrics and readiness state and binds `config.http.listen`.
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        let metrics = Arc::new(
            Metrics::new(&config.worker.queues, &alert_channels(&config))
                .context("cannot register metrics")?,
        );
        let readiness = Arc::new(Readiness::new(
            config.instance.has_role(ReplicaRole::Worker),
        ));
        let listener = TcpListener::bind(&config.http.listen)
            .await
            .with_context(|| format!("cannot listen on {} (http.listen)", config.http.listen))?;
        Ok(Server {
            config,
            metrics,
            readiness,
            listener,
            host: None,
        })
    }

    /// The host name the replica publishes in its instance record, for operators to find it.
    pub fn with_host(mut self, host: Option<String>) -> Server {
        self.host = host;
        self
    }

    /// The address the HTTP server listens on (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The replica's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The replica's readiness flags.
    pub fn readiness(&self) -> &Arc<Readiness> {
        &self.readiness
    }

    /// The effective configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs until `shutdown`'s root token is cancelled. A part that fails cancels the root
    /// token itself, so the others stop too, and its error is returned. The caller then waits
    /// for the tracker ([`Shutdown::wait`]) with its deadline.
    pub async fn run(self, shutdown: &Shutdown) -> anyhow::Result<()> {
        let Server {
            config,
            metrics,
            readiness,
            listener,
            host,
        } = self;
        let addr = listener.local_addr().ok();
        info!(
            instance = %config.instance.id,
            roles = ?config.instance.roles,
            listen = ?addr,
            "ax serve starting"
        );

        warn_of_open_or_closed_api(&config);
        // The HTTP port comes first, so probes answer (not ready) while backends connect.
        let api = Arc::new(LateApi::default());
        let access = Arc::new(access_of(&config));
        let state = AppState {
            metrics: Arc::clone(&metrics),
            readiness: Arc::clone(&readiness),
            api: Some(api.clone() as Arc<dyn ApiBackend>),
            access: Arc::clone(&access),
            browser: Arc::new(
                http::browser::BrowserGuard::from_config(&config.http).admitting_anonymous(
                    matches!(access.anonymous(), http::auth::Anonymous::Admitted),
                ),
            ),
            limits: (&config.limits).into(),
        };
        let http = spawn_http(shutdown, listener, state, (&config.http).into());

        // One clock for the replica's shell, which never reads an earlier time than it has:
        // a step of the host clock back is absorbed instead of followed (see `SteadyClock`).
        let clock: Arc<dyn Clock> = Arc::new(SteadyClock::new());
        // The cluster's part of the configuration, as every connection and operation takes it.
        let cluster = config.cluster();
        // One watch of the audit log's count for the API's store and the leader's.
        let audit_watch = audit_capacity_watch(&metrics);
        let Some((etcd, queue)) =
            connect(&cluster, &clock, &readiness, &metrics, shutdown.token()).await
        else {
            return http.await.context("HTTP server task panicked")?;
        };
        // The scheduler role's catalog keeps the queue names the API's status needs.
        let queue_names = QueueSet::default();
        let mut backend = Backend::new(etcd.clone(), Some(queue.clone()), &cluster)
            .with_audit_capacity_watch(audit_watch.clone())
            .with_secrets(config.worker.secret_source());
        if config.instance.has_role(ReplicaRole::Scheduler) {
            backend = backend.with_live_queues(queue_names.clone());
        }
        api.set(Arc::new(backend));
        check_redis_settings(&queue, &metrics).await;

        // The same clock serves the alert manager, the roles and the instance record.
        let alerts = start_alerts(&config, shutdown, &clock)?;
        let parts = Parts {
            config: &config,
            cluster: &cluster,
            audit_watch: &audit_watch,
            metrics: &metrics,
            readiness: &readiness,
            etcd: &etcd,
            queue: &queue,
            alerts: &alerts,
            clock: &clock,
            address: addr.map(|a| a.to_string()),
            host,
            queue_names: &queue_names,
        };
        parts.watch_etcd_endpoints(shutdown)?;
        parts.register_instance(shutdown);
        if config.instance.has_role(ReplicaRole::Scheduler) {
            parts.start_scheduler(shutdown)?;
        }
        let pool = if config.instance.has_role(ReplicaRole::Worker) {
            Some(parts.start_workers(shutdown).await?)
        } else {
            None
        };
        parts.start_gauges(shutdown);

        shutdown.token().cancelled().await;
        drain(&readiness, pool).await;
        http.await.context("HTTP server task panicked")?
    }
}

/// Spawns the HTTP server on `listener`; if it fails, the whole replica stops.
fn spawn_http(
    shutdown: &Shutdown,
    listener: TcpListener,
    state: AppState,
    limits: http::server::ConnectionLimits,
) -> JoinHandle<anyhow::Result<()>> {
    let root = shutdown.clone();
    shutdown.spawn(move |token| async move {
        let result = http::server::serve(listener, http::app(state), limits, token)
            .await
            .context("HTTP server failed");
        if let Err(e) = &result {
            tracing::error!(error = %format!("{e:#}"), "HTTP server stopped");
            root.fail(format!("HTTP server failed: {e:#}"));
        }
        result
    })
}

/// Draining: tell the load balancer first, then wait for the worker pool to finish (or give
/// back) what it holds.
async fn drain(readiness: &Readiness, pool: Option<JoinHandle<PoolSummary>>) {
    readiness.set_etcd(false);
    readiness.set_redis(false);
    readiness.set_worker_pool(false);
    info!("stopping");
    if let Some(pool) = pool {
        match pool.await {
            Ok(summary) => info!(?summary, "worker pool stopped"),
            Err(e) => warn!(error = %e, "worker pool task failed"),
        }
    }
}

/// Connects etcd and Redis, retrying with backoff until both answer or shutdown; readiness
/// shows which one is missing meanwhile.
/// Who may call the API, from `[http]`.
fn access_of(config: &Config) -> http::auth::Access {
    http::auth::Access::new(
        &config.http.tokens,
        &config.http.api_token,
        config.http.insecure_open_api,
    )
}

/// Says at start when the API is closed for want of a token, or open to anyone on purpose.
fn warn_of_open_or_closed_api(config: &Config) {
    match access_of(config).anonymous() {
        http::auth::Anonymous::Closed(why) => tracing::warn!("{why}"),
        http::auth::Anonymous::Admitted if config.http.insecure_open_api => tracing::warn!(
            listen = %config.http.listen,
            "http.insecure_open_api is set: anyone who reaches this port can register tasks, \
             make workers call any URL, and read every task"
        ),
        _ => {}
    }
}

async fn connect(
    cluster: &ClusterConfig,
    clock: &Arc<dyn Clock>,
    readiness: &Readiness,
    metrics: &Metrics,
    cancel: &CancellationToken,
) -> Option<(etcd_client::Client, Queue)> {
    let etcd = until_connected(BACKEND_ETCD, metrics, cancel, || connect_etcd(cluster)).await?;
    readiness.set_etcd(true);
    let queue = until_connected(BACKEND_REDIS, metrics, cancel, || {
        connect_queue(cluster, Arc::clone(clock))
    })
    .await?;
    readiness.set_redis(true);
    Some((etcd, queue))
}

/// Calls `connect` until it succeeds, waiting with the shared reconnect backoff (from 250 ms up
/// to 10 s); `None` when `cancel` fires first.
async fn until_connected<T, F, Fut>(
    backend: &'static str,
    metrics: &Metrics,
    cancel: &CancellationToken,
    mut connect: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ax_control::ControlError>>,
{
    let mut backoff = ReconnectBackoff::new(Duration::from_millis(250), Duration::from_secs(10));
    loop {
        let wait = match connect().await {
            Ok(client) => return Some(client),
            Err(e) => {
                metrics.backend_error(backend);
                let wait = backoff.next_delay(&mut rand::rng());
                warn!(backend, error = %format!("{e:#}"), retry_in = ?wait, "backend not reachable");
                wait
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Warns (log and metric) when Redis would lose ax's queue state: no persistence, or an
/// evicting memory policy. ax runs on regardless; docs/reliability.md says what is at risk.
async fn check_redis_settings(queue: &Queue, metrics: &Metrics) {
    match queue.server_info().await {
        Ok(info) => {
            let warnings = info.warnings();
            for w in &warnings {
                warn!(warning = %w, "unsafe Redis settings");
            }
            metrics
                .process
                .redis_config_warnings
                .set(i64::try_from(warnings.len()).unwrap_or(i64::MAX));
        }
        Err(e) => warn!(error = %e, "cannot read the Redis server's settings"),
    }
}

fn start_alerts(
    config: &Config,
    shutdown: &Shutdown,
    clock: &Arc<dyn Clock>,
) -> anyhow::Result<Option<AlertSender>> {
    let mut channels: Vec<Arc<dyn Channel>> = Vec::new();
    if !config.alerts.feishu_webhook.is_empty() {
        channels.push(Arc::new(FeishuChannel::new(FeishuConfig {
            webhook_url: config.alerts.feishu_webhook.clone(),
            secret: Some(config.alerts.feishu_secret.clone()).filter(|s| !s.is_empty()),
            ..FeishuConfig::default()
        })?));
    }
    if !config.alerts.webhook_url.is_empty() {
        channels.push(Arc::new(WebhookChannel::new(WebhookConfig {
            url: config.alerts.webhook_url.clone(),
            ..WebhookConfig::default()
        })?));
    }
    if channels.is_empty() {
        return Ok(None);
    }
    let level = match config.alerts.min_level {
        AlertLevel::Info => Level::Info,
        AlertLevel::Warn => Level::Warn,
        AlertLevel::Critical => Level::Critical,
        AlertLevel::Fatal => Level::Fatal,
    };
    let manager = AlertManager::new(
        AlertManagerConfig {
            policy: PolicyConfig {
                min_level: level,
                ..PolicyConfig::default()
            },
            ..AlertManagerConfig::default()
        },
        channels,
    )?
    .with_clock(Arc::clone(clock));
    Ok(Some(
        manager.spawn(shutdown.tracker(), shutdown.child_token()),
    ))
}

/// What the parts of a connected replica share.
struct Parts<'a> {
    config: &'a Config,
    /// `config`'s cluster part.
    cluster: &'a ClusterConfig,
    audit_watch: &'a CapacityWatch,
    metrics: &'a Arc<Metrics>,
    readiness: &'a Arc<Readiness>,
    etcd: &'a etcd_client::Client,
    queue: &'a Queue,
    alerts: &'a Option<AlertSender>,
    /// The wall clock the replica runs on.
    clock: &'a Arc<dyn Clock>,
    address: Option<String>,
    /// The host name, for the instance record.
    host: Option<String>,
    /// Where the scheduler role publishes the queue names, for the API.
    queue_names: &'a QueueSet,
}

impl Parts<'_> {
    fn roles(&self) -> Vec<String> {
        self.config
            .instance
            .roles
            .iter()
            .map(|r| format!("{r:?}").to_lowercase())
            .collect()
    }

    /// With several etcd endpoints: keeps members that do not answer out of the client's
    /// channel ([`endpoints`]).
    fn watch_etcd_endpoints(&self, shutdown: &Shutdown) -> anyhow::Result<()> {
        let etcd = &self.config.etcd;
        if etcd.endpoints.len() < 2 {
            return Ok(());
        }
        let tls = etcd_tls(self.cluster)?.is_some();
        let client = self.etcd.clone();
        let urls = etcd
            .endpoints
            .iter()
            .map(|e| endpoints::endpoint_url(e, tls))
            .collect();
        let options = etcd_connect_options(self.cluster)?;
        let key = ax_scheduler_core::etcd_keys::leader(&etcd.prefix);
        let timeout = etcd.timeout;
        shutdown.spawn(move |cancel| {
            endpoints::watch_endpoints(client, urls, options, key, timeout, cancel)
                .instrument(info_span!("etcd_endpoints"))
        });
        Ok(())
    }

    /// Keeps `{prefix}/instances/{id}` alive on a lease for as long as the replica runs,
    /// registering again after the lease is lost (etcd restarted, partition).
    fn register_instance(&self, shutdown: &Shutdown) {
        let record = InstanceRecord {
            instance_id: self.config.instance.id.clone(),
            roles: self.roles(),
            handlers: if self.config.instance.has_role(ReplicaRole::Worker) {
                crate::serve::worker_role::handler_registry(&self.config.worker)
                    .map(|r| r.names())
                    .unwrap_or_default()
            } else {
                Vec::new()
            },
            queues: if self.config.instance.has_role(ReplicaRole::Worker) {
                self.config.worker.queues.clone()
            } else {
                Vec::new()
            },
            version: env!("CARGO_PKG_VERSION").to_owned(),
            address: self.address.clone(),
            host: self.host.clone(),
            pid: Some(std::process::id()),
            started_at: self.clock.now(),
        };
        let client = self.etcd.clone();
        let election = election_config(self.cluster);
        let (sweep_client, sweep_election) = (client.clone(), election.clone());
        shutdown.spawn(move |cancel| {
            ax_election::keep_registered(client, election, record, cancel)
                .instrument(info_span!("instance"))
        });
        let clock = Arc::clone(self.clock);
        shutdown.spawn(move |cancel| {
            sweep_roster(sweep_client, sweep_election, clock, cancel)
                .instrument(info_span!("roster"))
        });
    }

    fn start_scheduler(&self, shutdown: &Shutdown) -> anyhow::Result<()> {
        let config = self.config;
        let info = serde_json::json!({
            "address": self.address,
            "version": env!("CARGO_PKG_VERSION"),
        });
        let candidate = Candidate::new(
            self.etcd.clone(),
            election_config(self.cluster),
            config.instance.id.clone(),
            info,
        )?
        .with_clock(Arc::clone(self.clock));
        let rate_limit = (config.scheduler.enqueue_rate_limit > 0).then(|| {
            let rate = f64::from(config.scheduler.enqueue_rate_limit);
            (rate, rate.max(1.0))
        });
        // The clock check trusts and presents what the etcd client does.
        let etcd_tls = etcd_tls(self.cluster)?;
        let placement = ax_scheduler_core::placement::Placement {
            shards: config.scheduler.shards,
            by: config.scheduler.placement,
        };
        self.metrics
            .scheduler
            .shards
            .set(i64::from(placement.shards));
        let settings = LeaderSettings {
            instance_id: config.instance.id.clone(),
            placement,
            // A member that is listed but does not act (a hung process whose lease is still
            // kept) leaves its shards free: after three lease lifetimes anyone takes them.
            shard_orphan_after: config.election.lease_ttl * 3,
            dispatcher: DispatcherConfig {
                timer: TimerConfig {
                    tick: config.scheduler.tick,
                    ..TimerConfig::default()
                },
                catch_up_window: config.scheduler.catch_up_window,
                rate_limit,
                routine_write_delay: config.scheduler.routine_state_delay,
                ..DispatcherConfig::default()
            },
            events_interval: config.scheduler.events_interval,
            flush_interval: config.scheduler.flush_interval,
            trigger_interval: config.scheduler.trigger_interval,
            enqueue_stall_limit: config.scheduler.enqueue_stall_limit,
            redis_unreachable_limit: config.scheduler.redis_unreachable_limit,
            delay_alert_threshold: ax_alerting::DEFAULT_SCHEDULE_DELAY_THRESHOLD,
            max_clock_skew: config.scheduler.max_clock_skew,
            repair_after: config.scheduler.repair_after,
        };
        let clock_check = EtcdClock(ClockCheck::new(&config.etcd.endpoints, etcd_tls.as_ref())?);
        let registry = Registry::new(self.etcd.clone(), registry_config(self.cluster));
        let deps = LeaderDeps {
            store: Arc::new(registry.clone()),
            registry,
            queue: Arc::new(self.queue.clone()),
            candidate,
            clock: Arc::clone(self.clock),
            clock_check: Some(Arc::new(clock_check)),
            metrics: Arc::clone(self.metrics) as Arc<dyn ax_scheduler::RoleMetrics>,
            alerts: self.alerts.clone(),
            tracker: shutdown.tracker().clone(),
            audit: Arc::new(AuditChanges(
                ax_control::backend::AuditStore::of(self.etcd.clone(), self.cluster)
                    .with_capacity_watch(self.audit_watch.clone()),
            )),
            queue_names: self.queue_names.clone(),
        };
        shutdown.spawn(move |cancel| {
            scheduler::run(settings, deps, cancel).instrument(info_span!("scheduler"))
        });
        Ok(())
    }

    async fn start_workers(
        &self,
        shutdown: &Shutdown,
    ) -> anyhow::Result<tokio::task::JoinHandle<PoolSummary>> {
        // Refuses to start beside a live process under the same id (the process then exits
        // non-zero); gives back what a dead one left.
        let pool = crate::serve::worker_role::worker_pool(
            self.config,
            self.queue,
            Arc::clone(self.clock),
            Arc::clone(self.metrics),
            shutdown.tracker(),
        )
        .await?;
        self.readiness.set_worker_pool(true);
        Ok(shutdown.spawn(move |cancel| {
            async move { pool.run(cancel).await }.instrument(info_span!("workers"))
        }))
    }

    /// Every few seconds: queue gauges (shared state; every replica reports it and the alert
    /// rules take the max), the backlog alert (from the leader only), alert channel counters
    /// and backend readiness.
    fn start_gauges(&self, shutdown: &Shutdown) {
        let mut queues: Vec<String> = self.config.worker.queues.clone();
        if !queues
            .iter()
            .any(|q| q == ax_scheduler_core::task::DEFAULT_QUEUE)
        {
            queues.push(ax_scheduler_core::task::DEFAULT_QUEUE.to_owned());
        }
        let mut gauges = Gauges {
            queue: self.queue.clone(),
            metrics: Arc::clone(self.metrics),
            readiness: Arc::clone(self.readiness),
            alerts: self.alerts.clone(),
            threshold: self.config.scheduler.backlog_alert_threshold,
            queues,
            etcd: self.etcd.clone(),
            etcd_quota: self.config.etcd.quota_backend_bytes,
            election: election_config(self.cluster),
            alerted: AlertCounts::default(),
        };
        shutdown.spawn(move |cancel| {
            async move {
                let mut tick = tokio::time::interval(GAUGE_INTERVAL);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tick.tick() => {}
                    }
                    gauges.refresh().await;
                }
            }
            .instrument(info_span!("gauges"))
        });
    }
}

/// What the gauge loop reads and where it reports it.
struct Gauges {
    queue: Queue,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    alerts: Option<AlertSender>,
    /// Ready messages in one queue above which the leader raises the backlog alert.
    threshold: u64,
    /// The queues reported: the configured ones and the default one.
    queues: Vec<String>,
    etcd: etcd_client::Client,
    /// The configured etcd quota, shown while etcd does not report its own.
    etcd_quota: u64,
    election: ElectionConfig,
    alerted: AlertCounts,
}

impl Gauges {
    /// One round: Redis, then etcd, then the alert channel counters.
    async fn refresh(&mut self) {
        let redis_ok = self.refresh_queues(self.queue.config().clock.now()).await;
        self.readiness.set_redis(redis_ok);
        self.refresh_etcd().await;
        if let Some(alerts) = &self.alerts {
            self.alerted.export(&alerts.stats(), &self.metrics);
        }
    }

    /// The queue gauges and the dead letter count; whether Redis answered every read.
    async fn refresh_queues(&self, now: UtcMillis) -> bool {
        let metrics = &self.metrics;
        let mut dead = 0u64;
        let mut redis_ok = true;
        for q in &self.queues {
            match self.queue.stats(q, now).await {
                Ok(stats) => {
                    dead += stats.dead;
                    self.show_queue(q, &stats, now);
                }
                Err(e) => {
                    redis_ok = false;
                    metrics.backend_error(BACKEND_REDIS);
                    debug!(queue = %q, error = %e, "cannot read queue stats");
                }
            }
        }
        if redis_ok {
            metrics
                .dlq_size
                .set(i64::try_from(dead).unwrap_or(i64::MAX));
        }
        redis_ok
    }

    /// One queue's gauges, and its backlog alert if this replica leads.
    fn show_queue(&self, q: &str, stats: &QueueStats, now: UtcMillis) {
        let metrics = &self.metrics;
        let depth = i64::try_from(stats.ready).unwrap_or(i64::MAX);
        metrics
            .queues
            .queue_depth
            .with_label_values(&[q])
            .set(depth);
        metrics
            .queues
            .queue_paused
            .with_label_values(&[q])
            .set(i64::from(stats.paused));
        metrics
            .queues
            .oldest_queued_age_seconds
            .with_label_values(&[q])
            .set(stats.oldest_age.map(|a| a.as_secs_f64()).unwrap_or(0.0));
        if stats.ready > self.threshold && metrics.scheduler.is_leader.get() == 1 {
            if let Some(alerts) = &self.alerts {
                alerts.send(Alert::queue_backlog(
                    q.to_owned(),
                    stats.ready,
                    self.threshold,
                    now,
                ));
            }
        }
    }

    /// Whether etcd answers (a read of the leader key), and its database size if it does.
    async fn refresh_etcd(&self) {
        let metrics = &self.metrics;
        let timeout = self.election.request_timeout;
        let etcd_ok = ax_election::current_leader(&self.etcd, &self.election.prefix, timeout)
            .await
            .is_ok();
        if !etcd_ok {
            metrics.backend_error(BACKEND_ETCD);
        }
        self.readiness.set_etcd(etcd_ok);
        if !etcd_ok {
            return;
        }
        match ax_registry::store_usage(&self.etcd, timeout).await {
            Ok(usage) => {
                metrics.process.etcd_db_bytes.set(usage.db_bytes);
                metrics.process.etcd_db_quota_bytes.set(
                    usage
                        .quota_bytes
                        .unwrap_or(i64::try_from(self.etcd_quota).unwrap_or(i64::MAX)),
                );
            }
            Err(e) => debug!(error = %e, "cannot read etcd's database size"),
        }
    }
}

/// How often queue gauges are refreshed.
const GAUGE_INTERVAL: Duration = Duration::from_secs(5);

/// Alert channel counters already exported, so the Prometheus counters only ever grow by the
/// difference.
#[derive(Default)]
struct AlertCounts {
    seen: std::collections::HashMap<(String, &'static str), u64>,
}

impl AlertCounts {
    fn export(&mut self, stats: &ax_alerting::AlertStats, metrics: &Metrics) {
        for channel in &stats.channels {
            for (outcome, value) in [(ALERT_SENT, channel.sent), (ALERT_FAILED, channel.failed)] {
                let key = (channel.name.clone(), outcome);
                let before = self.seen.insert(key, value).unwrap_or(0);
                if value > before {
                    metrics
                        .alerts_total
                        .with_label_values(&[&channel.name, outcome])
                        .inc_by(value - before);
                }
            }
        }
        let key = (ALERT_CHANNEL_ALL.to_owned(), ALERT_SUPPRESSED);
        let suppressed = stats.deduplicated + stats.rate_limited;
        let before = self.seen.insert(key, suppressed).unwrap_or(0);
        if suppressed > before {
            metrics
                .alerts_total
                .with_label_values(&[ALERT_CHANNEL_ALL, ALERT_SUPPRESSED])
                .inc_by(suppressed - before);
        }
    }
}

/// The alert channels the configuration enables, for the metric series created at start.
fn alert_channels(config: &Config) -> Vec<&'static str> {
    let mut channels = Vec::new();
    if !config.alerts.feishu_webhook.is_empty() {
        channels.push("feishu");
    }
    if !config.alerts.webhook_url.is_empty() {
        channels.push("webhook");
    }
    channels
}

/// Sets `scheduler_audit_over_capacity` from what the audit log tells after each write.
fn audit_capacity_watch(metrics: &Metrics) -> CapacityWatch {
    let gauge = metrics.process.audit_over_capacity.clone();
    CapacityWatch::new(move |over| gauge.set(i64::from(over)))
}

/// Every election TTL, stamps replicas that died without deregistering and forgets those gone
/// for long ([`ax_election::sweep_roster`]). Every replica sweeps; the sweeps are
/// compare-and-swaps, so they never undo each other.
async fn sweep_roster(
    client: etcd_client::Client,
    election: ax_election::ElectionConfig,
    clock: Arc<dyn Clock>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let period = election.ttl;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        match ax_election::sweep_roster(&client, &election, clock.now()).await {
            Ok(r) if r.marked > 0 || r.forgotten > 0 => {
                info!(marked = r.marked, forgotten = r.forgotten, "roster swept");
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "cannot sweep the roster"),
        }
    }
}
