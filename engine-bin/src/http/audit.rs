//! The audit of the API's changes: one middleware records every request that changed
//! something, after the route answered with success.
//!
//! Recording in one layer rather than in each route means a new route is audited without
//! code of its own: its action name and target come from the matched route ([`action_of`],
//! [`target_of`]). A route that knows more (the diff of a put) hands it over as an
//! [`AuditDetail`] response extension. The records themselves are [`ax_control::audit`]'s.

use std::sync::Arc;

use ax_scheduler_core::UtcMillis;
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use ax_control::api::{ApiBackend, Principal};
use ax_control::audit::{AuditDetail, AuditRecord, VIA_API};

/// The action name of a route: the singular of its first segment, then its last fixed
/// segment, or for a route ending in parameters what the method does (`POST /tasks` is
/// `task.put`, `DELETE /tasks/{namespace}/{id}` is `task.delete`, `POST
/// /tasks/{namespace}/{id}/pause` is `task.pause`, `POST /dlq/purge` is `dlq.purge`).
pub fn action_of(method: &Method, route: &str) -> String {
    let route = route.strip_prefix(super::API_PREFIX).unwrap_or(route);
    let segments: Vec<&str> = route.split('/').filter(|s| !s.is_empty()).collect();
    let noun = segments
        .first()
        .map_or("api", |s| s.strip_suffix('s').unwrap_or(s));
    let verb = match segments.last() {
        Some(last) if segments.len() > 1 && !last.starts_with('{') => (*last).to_owned(),
        _ if *method == Method::DELETE => "delete".to_owned(),
        _ => "put".to_owned(),
    };
    format!("{noun}.{verb}")
}

/// The values of a route's parameters in a request path, joined by `/` (`ops/beat` for
/// `/tasks/{namespace}/{id}/pause`): the record's target.
pub fn target_of<'a>(route: &'a str, path: &'a str) -> String {
    // A nested router sees its path without the prefix, while the matched route has it.
    let strip = |p: &'a str| p.strip_prefix(super::API_PREFIX).unwrap_or(p);
    strip(route)
        .split('/')
        .zip(strip(path).split('/'))
        .filter(|(r, _)| r.starts_with('{'))
        .map(|(_, p)| p)
        .collect::<Vec<_>>()
        .join("/")
}

/// What the recording middleware shares.
#[derive(Clone)]
pub struct AuditState {
    /// Where records go; `None` while the replica has no backend (nothing can change then).
    pub backend: Option<Arc<dyn ApiBackend>>,
}

/// Middleware: records every request that changed something (not `GET`/`HEAD`, answered
/// with success) with its caller, after the route answered. A record that cannot be written
/// is logged at error with the change it describes: the change itself already happened.
pub async fn record_changes(
    State(state): State<AuditState>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    if method == Method::GET || method == Method::HEAD {
        return next.run(request).await;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let actor = request
        .extensions()
        .get::<Principal>()
        .map(|p| p.name.to_string());
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    let mut response = next.run(request).await;
    let (Some(route), Some(actor), Some(backend)) = (route, actor, state.backend) else {
        return response;
    };
    if !response.status().is_success() {
        return response;
    }
    let extra = response
        .extensions_mut()
        .remove::<AuditDetail>()
        .unwrap_or_default();
    let detail = match (extra.detail, query) {
        (Some(d), _) => Some(d),
        (None, Some(q)) => Some(serde_json::json!({ "query": q })),
        (None, None) => None,
    };
    let record = AuditRecord {
        at: UtcMillis::now(),
        actor,
        via: VIA_API.to_owned(),
        action: action_of(&method, &route),
        target: extra.target.unwrap_or_else(|| target_of(&route, &path)),
        detail,
        revision: extra.revision,
    };
    if let Err(e) = backend.audit_record(record.clone()).await {
        tracing::error!(error = %e, action = %record.action, target = %record.target, actor = %record.actor, "cannot write the audit record of a change");
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_and_targets_come_from_the_route() {
        for (method, route, action) in [
            (Method::POST, "/api/v1/tasks", "task.put"),
            (
                Method::DELETE,
                "/api/v1/tasks/{namespace}/{id}",
                "task.delete",
            ),
            (
                Method::POST,
                "/api/v1/tasks/{namespace}/{id}/pause",
                "task.pause",
            ),
            (Method::POST, "/api/v1/dlq/requeue", "dlq.requeue"),
            (Method::POST, "/api/v1/queues/{name}/resume", "queue.resume"),
            (
                Method::POST,
                "/api/v1/executions/{id}/kill",
                "execution.kill",
            ),
        ] {
            assert_eq!(action_of(&method, route), action, "{route}");
        }
        assert_eq!(
            target_of(
                "/api/v1/tasks/{namespace}/{id}/pause",
                "/api/v1/tasks/ops/beat/pause"
            ),
            "ops/beat"
        );
        assert_eq!(target_of("/api/v1/dlq/purge", "/api/v1/dlq/purge"), "");
        assert_eq!(
            target_of("/api/v1/tasks/{namespace}/{id}", "/tasks/ops/beat"),
            "ops/beat",
            "a nested router's path has no prefix"
        );
    }
}
