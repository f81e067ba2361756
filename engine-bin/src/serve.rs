//! `ax serve`: one replica.
//!
//! [`Server::bind`] does everything that can fail at start (metrics registry, the listening
//! socket) so that such errors surface before the process reports itself up; [`Server::run`]
//! then spawns each long-running part on the shutdown tracker with a child token and returns
//! once the root token is cancelled (signal or fatal error) and the parts it owns have ended.
//!
//! What runs today: the HTTP server (metrics, probes, and `/api/v1` answering 503
//! `backend_unavailable`), with readiness false, because nothing connects to etcd or Redis
//! yet. Not wired yet, and to be started from `run` as further parts on the same tracker:
//! the etcd client and instance registration, the election and the leader's scheduling loop
//! (role `scheduler`), the worker pool (role `worker`), the alert manager, the API backend,
//! and the readiness updates from each of them ([`Server::readiness`]).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::config::{Config, Role};
use crate::http::{self, AppState};
use crate::metrics::Metrics;
use crate::readiness::Readiness;
use crate::shutdown::Shutdown;

/// A replica, bound and ready to run.
pub struct Server {
    config: Config,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    listener: TcpListener,
}

impl Server {
    /// Creates the metrics and readiness state and binds `config.http.listen`.
    pub async fn bind(config: Config) -> anyhow::Result<Server> {
        let metrics = Arc::new(
            Metrics::new(&config.worker.queues, &alert_channels(&config))
                .context("cannot register metrics")?,
        );
        let readiness = Arc::new(Readiness::new(config.instance.has_role(Role::Worker)));
        let listener = TcpListener::bind(&config.http.listen)
            .await
            .with_context(|| format!("cannot listen on {} (http.listen)", config.http.listen))?;
        Ok(Server {
            config,
            metrics,
            readiness,
            listener,
        })
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
        } = self;
        let addr = listener.local_addr().ok();
        tracing::info!(
            instance = %config.instance.id,
            roles = ?config.instance.roles,
            listen = ?addr,
            "ax serve starting (scheduling and workers not wired in this build)"
        );

        let state = AppState {
            metrics,
            readiness: Arc::clone(&readiness),
            api: None,
            api_token: Some(config.http.api_token.clone()).filter(|t| !t.is_empty()),
        };
        let root = shutdown.token().clone();
        let http = shutdown.spawn(move |token| async move {
            let result = axum::serve(listener, http::app(state))
                .with_graceful_shutdown(token.cancelled_owned())
                .await
                .context("HTTP server failed");
            if let Err(e) = &result {
                tracing::error!(error = %format!("{e:#}"), "HTTP server stopped");
                root.cancel();
            }
            result
        });

        shutdown.token().cancelled().await;
        // Draining: tell the load balancer first.
        readiness.set_etcd(false);
        readiness.set_redis(false);
        readiness.set_worker_pool(false);
        tracing::info!("stopping");
        http.await.context("HTTP server task panicked")?
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
