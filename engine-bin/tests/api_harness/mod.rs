//! `/api/v1` over the real backend for the integration tests: the router a replica serves,
//! opened on purpose (these tests are about the backend, not about access), under a
//! test's own etcd prefix and Redis key prefix.

use std::sync::Arc;

use ax::config::Config;
use ax::http::metrics::Metrics;
use ax::http::readiness::Readiness;
use ax::http::{app, ApiBackend, AppState};
use ax_control::backend::Backend;
use axum::body::Body;
use axum::http::{Method, Request};
use axum::response::Response;
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;

/// The router and the configuration it was built from.
pub(crate) struct Api {
    pub(crate) router: Router,
    pub(crate) config: Config,
}

/// The API of a replica whose configuration `adjust` changed from the defaults.
pub(crate) async fn api_with(label: &str, adjust: impl FnOnce(&mut Config)) -> Api {
    let mut config = Config::default();
    config.etcd.endpoints = vec![ax_testkit::etcd_endpoint()];
    config.etcd.prefix = format!("/{}", ax_testkit::unique_name(label));
    config.redis.url = ax_testkit::redis_url();
    config.redis.key_prefix = ax_testkit::unique_name(label);
    adjust(&mut config);
    let backend = Backend::connect(&config.cluster()).await.unwrap();
    let state = AppState {
        metrics: Arc::new(Metrics::new(&config.worker.queues, &[]).unwrap()),
        readiness: Arc::new(Readiness::new(true)),
        api: Some(Arc::new(backend) as Arc<dyn ApiBackend>),
        access: Arc::new(ax::http::auth::Access::new(&[], "", true)),
        browser: Arc::default(),
        limits: (&config.limits).into(),
    };
    Api {
        router: app(state),
        config,
    }
}

impl Api {
    /// Sends one request, with `body` as JSON, and returns the router's response.
    pub(crate) async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Response {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        self.router.clone().oneshot(req).await.unwrap()
    }
}
