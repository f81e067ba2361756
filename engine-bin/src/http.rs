//! The one HTTP port of a replica: `/metrics`, `/healthz`, `/readyz`, `/api/v1` and the web
//! console at `/ui` ([`console`]).
//!
//! [`app`] builds the whole `Router` from an [`AppState`] and nothing else, so tests drive it
//! with `tower::ServiceExt::oneshot` and no socket; `serve.rs` binds it. Probes and metrics
//! never need a token (the kubelet and Prometheus call them); `/api/v1` ([`routes`]) goes
//! through the input limits of [`limits`], the checks that keep other web pages out
//! ([`browser`]) and [`auth::authorize`] (who calls, with which role); each route then calls
//! an operation for its caller, which records the change. [`server`] is the accept loop, with
//! its deadline for request headers. The API itself (its types, the operations and the
//! errors) is [`ax_control`]'s; this module puts it on the port.

pub mod auth;
pub mod browser;
pub mod console;
pub mod limits;
pub mod metrics;
pub mod operate_limits;
pub mod readiness;
pub mod routes;
pub mod server;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use crate::http::metrics::Metrics;
use crate::http::readiness::Readiness;

pub use ax_control::api::{ApiBackend, ApiError};

/// What the routes share.
#[derive(Clone)]
pub struct AppState {
    /// Exposed on `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Reported on `/readyz`.
    pub readiness: Arc<Readiness>,
    /// Serves `/api/v1`; `None` makes every API call answer 503 `backend_unavailable`.
    pub api: Option<Arc<dyn ApiBackend>>,
    /// Who may call `/api/v1`.
    pub access: Arc<auth::Access>,
    /// Which origins and host names `/api/v1` answers.
    pub browser: Arc<browser::BrowserGuard>,
    /// What a call may carry.
    pub limits: limits::ApiLimits,
}

/// Where the API is mounted.
pub const API_PREFIX: &str = "/api/v1";

/// The full router.
pub fn app(state: AppState) -> Router {
    // Layers run outside in: the size limits first (nothing else reads an oversized
    // request), then the browser checks (a foreign page learns nothing, not even whether its
    // token would do), then authorization, whose caller the routes' operations record.
    let api = routes::router(state.api.clone(), state.limits)
        .layer(axum::middleware::from_fn_with_state(
            auth::AuthState {
                access: Arc::clone(&state.access),
                metrics: Arc::clone(&state.metrics),
            },
            auth::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            browser::BrowserState {
                guard: Arc::clone(&state.browser),
                metrics: Arc::clone(&state.metrics),
            },
            browser::check_request,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.limits,
            limits::check_request,
        ));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
        .merge(console::router())
        .nest(API_PREFIX, api)
}

async fn healthz() -> &'static str {
    // Answering at all is the signal: the process runs and its runtime is not wedged.
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Response {
    let report = state.readiness.report();
    let status = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report)).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    match state.metrics.gather_text() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => ApiError::Internal(format!("cannot encode metrics: {e}")).into_response(),
    }
}
